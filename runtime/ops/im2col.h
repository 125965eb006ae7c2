// runtime/ops/im2col.h -- the data movement of 2-d convolution: patches to columns and back,
// and the direct loops of depthwise convolution. Planes are contiguous [channels, h, w].
#pragma once

#include <cstdint>

namespace kiln::conv {

/// One convolution's geometry, for one group: `c` input channels of h x w, a kh x kw kernel.
struct Geometry {
  int64_t c, h, w;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t oh, ow;
  int64_t rows() const { return c * kh * kw; }  // rows of the column matrix: (ci, ky, kx)
  int64_t pixels() const { return oh * ow; }    // its columns: (oy, ox)
  /// The output columns [ox0, ox1) whose input column for kernel column kx is inside the input.
  void valid_columns(int64_t kx, int64_t* ox0, int64_t* ox1) const;
  /// True for a 1x1 kernel with stride 1 and no padding: the input is its own column matrix.
  bool is_pointwise() const;
};

/// cols[r, (oy, ox)] = x[ci, iy, ix] for rows r = (ci, ky, kx) in [r0, r1); 0 outside the input.
template <class T> void im2col(const Geometry& g, const T* x, T* cols, int64_t r0, int64_t r1);

/// dx[ci, iy, ix] += cols[(ci, ky, kx), (oy, ox)] for channels ci in [c0, c1): the transpose of
/// im2col. A channel's rows touch only that channel, so channel ranges can run in parallel.
template <class T> void col2im(const Geometry& g, const T* cols, T* dx, int64_t c0, int64_t c1);

/// Depthwise (one input channel per group): out[oy, ox] = sum w[ky, kx] x[iy, ix] for one
/// output plane from one input plane (out is overwritten).
template <class T> void depthwise_plane(const Geometry& g, const T* x, const T* w, T* out);
/// dx[iy, ix] += sum w[ky, kx] gout[oy, ox]: one output plane's share of its input's gradient.
template <class T> void depthwise_input_grad_plane(const Geometry& g, const T* gout, const T* w, T* dx);
/// dw[ky, kx] += sum x[iy, ix] gout[oy, ox]: one plane pair's share of a weight's gradient.
template <class T> void depthwise_weight_grad_plane(const Geometry& g, const T* x, const T* gout, T* dw);

}  // namespace kiln::conv
