// runtime/ops/conv_onednn.h -- f32 convolutions (forward and both gradients) through oneDNN
// (Debian's libdnnl-dev), behind conv2d and its gradient ops. oneDNN's headers stay in
// conv_onednn.cpp; without oneDNN every call here answers false and conv.cpp's own kernels run.
#pragma once

#include <cstdint>

#include "runtime/ops/im2col.h"

namespace kiln::conv {

/// One whole convolution: x [n, c, h, w], weight [o, c / groups, kh, kw], output [n, o, oh, ow],
/// all contiguous f32. `geo` is one group's geometry (geo.c = c / groups).
struct Problem {
  int64_t n, c, o, groups;
  Geometry geo;
};

/// Each runs the pass through oneDNN and returns true, or returns false having written nothing:
/// oneDNN absent or turned off, without an implementation for this problem, or measured slower
/// than kiln's own kernel for it (a large dense weight gradient over a batch of 4 or more).
/// The work is cut into blocks of images and channels by the shape alone, each block one
/// single-threaded oneDNN call on one of kiln's threads; weight-gradient partial sums over image
/// blocks are added in order. So results have the same bits on any thread count, and oneDNN's
/// OpenMP threads never start (they would spin beside kiln's pool).
bool onednn_forward(const Problem& p, const float* x, const float* w, float* y);
bool onednn_input_grad(const Problem& p, const float* g, const float* w, float* dx);
bool onednn_weight_grad(const Problem& p, const float* x, const float* g, float* dw);

/// Whether conv2d may use oneDNN: true when kiln was built with it, unless the environment sets
/// KILN_ONEDNN=0. Tests and benchmarks switch it to run kiln's own kernels.
bool onednn_enabled();
void set_onednn_enabled(bool on);

}  // namespace kiln::conv
