// runtime/ops/im2col.cpp -- patches to columns and back, and depthwise convolution's direct
// loops. Each loop over a row of output columns touches only its valid range [ox0, ox1), so
// the bounds checks leave the inner loops.
#include "runtime/ops/im2col.h"

#include <algorithm>

namespace kiln::conv {
namespace {

// floor(a / b) for b > 0.
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// The output rows [oy0, oy1) whose input row for kernel row ky is inside the input.
void valid_rows(const Geometry& g, int64_t ky, int64_t* oy0, int64_t* oy1) {
  int64_t off = ky * g.dh - g.ph;  // iy = oy * sh + off
  *oy0 = std::clamp<int64_t>(floor_div(-off + g.sh - 1, g.sh), 0, g.oh);
  *oy1 = std::clamp<int64_t>(floor_div(g.h - 1 - off, g.sh) + 1, *oy0, g.oh);
}

}  // namespace

void Geometry::valid_columns(int64_t kx, int64_t* ox0, int64_t* ox1) const {
  int64_t off = kx * dw - pw;  // ix = ox * sw + off
  *ox0 = std::clamp<int64_t>(floor_div(-off + sw - 1, sw), 0, ow);
  *ox1 = std::clamp<int64_t>(floor_div(w - 1 - off, sw) + 1, *ox0, ow);
}

bool Geometry::is_pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }

template <class T> void im2col(const Geometry& g, const T* x, T* cols, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    int64_t ci = r / (g.kh * g.kw), ky = r / g.kw % g.kh, kx = r % g.kw;
    int64_t oy0, oy1, ox0, ox1;
    valid_rows(g, ky, &oy0, &oy1);
    g.valid_columns(kx, &ox0, &ox1);
    const T* plane = x + ci * g.h * g.w;
    T* row = cols + r * g.pixels();
    std::fill(row, row + oy0 * g.ow, T(0));
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      T* dst = row + oy * g.ow;
      const T* src = plane + (oy * g.sh + ky * g.dh - g.ph) * g.w + kx * g.dw - g.pw;
      std::fill(dst, dst + ox0, T(0));
      if (g.sw == 1) std::copy(src + ox0, src + ox1, dst + ox0);
      else
        for (int64_t ox = ox0; ox < ox1; ++ox) dst[ox] = src[ox * g.sw];
      std::fill(dst + ox1, dst + g.ow, T(0));
    }
    std::fill(row + oy1 * g.ow, row + g.pixels(), T(0));
  }
}

// Calls fn(q, oy, ox0, ox1, off) for each kernel position q = ky * kw + kx and output row oy
// whose input row is inside the input: output columns [ox0, ox1) read input elements
// off + ox * sw of the plane (the columns outside read padding).
template <class F> void for_each_window_row(const Geometry& g, F&& fn) {
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    int64_t oy0, oy1;
    valid_rows(g, ky, &oy0, &oy1);
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      int64_t ox0, ox1;
      g.valid_columns(kx, &ox0, &ox1);
      for (int64_t oy = oy0; oy < oy1; ++oy)
        fn(ky * g.kw + kx, oy, ox0, ox1, (oy * g.sh + ky * g.dh - g.ph) * g.w + kx * g.dw - g.pw);
    }
  }
}

template <class T> void col2im(const Geometry& g, const T* cols, T* dx, int64_t c0, int64_t c1) {
  int64_t kk = g.kh * g.kw, sw = g.sw;
  for (int64_t ci = c0; ci < c1; ++ci) {
    T* plane = dx + ci * g.h * g.w;
    for_each_window_row(g, [&](int64_t q, int64_t oy, int64_t ox0, int64_t ox1, int64_t off) {
      const T* src = cols + (ci * kk + q) * g.pixels() + oy * g.ow;
      if (sw == 1)
        for (int64_t ox = ox0; ox < ox1; ++ox) plane[off + ox] += src[ox];
      else
        for (int64_t ox = ox0; ox < ox1; ++ox) plane[off + ox * sw] += src[ox];
    });
  }
}

template <class T> void depthwise_plane(const Geometry& g, const T* x, const T* w, T* out) {
  std::fill(out, out + g.pixels(), T(0));
  int64_t sw = g.sw;
  for_each_window_row(g, [&](int64_t q, int64_t oy, int64_t ox0, int64_t ox1, int64_t off) {
    T wv = w[q], *dst = out + oy * g.ow;
    if (sw == 1)
      for (int64_t ox = ox0; ox < ox1; ++ox) dst[ox] += wv * x[off + ox];  // vectorizes
    else
      for (int64_t ox = ox0; ox < ox1; ++ox) dst[ox] += wv * x[off + ox * sw];
  });
}

template <class T> void depthwise_input_grad_plane(const Geometry& g, const T* gout, const T* w, T* dx) {
  int64_t sw = g.sw;
  for_each_window_row(g, [&](int64_t q, int64_t oy, int64_t ox0, int64_t ox1, int64_t off) {
    T wv = w[q];
    const T* src = gout + oy * g.ow;
    if (sw == 1)
      for (int64_t ox = ox0; ox < ox1; ++ox) dx[off + ox] += wv * src[ox];
    else
      for (int64_t ox = ox0; ox < ox1; ++ox) dx[off + ox * sw] += wv * src[ox];
  });
}

template <class T> void depthwise_weight_grad_plane(const Geometry& g, const T* x, const T* gout, T* dw) {
  int64_t sw = g.sw;
  for_each_window_row(g, [&](int64_t q, int64_t oy, int64_t ox0, int64_t ox1, int64_t off) {
    const T* go = gout + oy * g.ow;
    T acc = 0;
    for (int64_t ox = ox0; ox < ox1; ++ox) acc += go[ox] * x[off + ox * sw];
    dw[q] += acc;
  });
}

template void im2col(const Geometry&, const float*, float*, int64_t, int64_t);
template void col2im(const Geometry&, const float*, float*, int64_t, int64_t);
template void depthwise_plane(const Geometry&, const float*, const float*, float*);
template void depthwise_input_grad_plane(const Geometry&, const float*, const float*, float*);
template void depthwise_weight_grad_plane(const Geometry&, const float*, const float*, float*);
template void im2col(const Geometry&, const double*, double*, int64_t, int64_t);
template void col2im(const Geometry&, const double*, double*, int64_t, int64_t);
template void depthwise_plane(const Geometry&, const double*, const double*, double*);
template void depthwise_input_grad_plane(const Geometry&, const double*, const double*, double*);
template void depthwise_weight_grad_plane(const Geometry&, const double*, const double*, double*);

}  // namespace kiln::conv
