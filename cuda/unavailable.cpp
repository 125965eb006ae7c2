// cuda/unavailable.cpp -- what the CUDA layer's *_cuda.cpp files define (they need the
// toolkit's headers), in a kiln built without the CUDA toolkit: cuda/nvrtc.h, cuda/libraries.h
// and the cuDNN convolutions of cuda/op_kernels.h. Each use says why. The rest of the layer
// builds everywhere, but is never reached without a device: CUDA tensors are refused first.
#include <fmt/format.h>

#include "cuda/libraries.h"
#include "cuda/nvrtc.h"
#include "cuda/op_kernels.h"
#include "runtime/cuda.h"
#include "runtime/error.h"

namespace kiln::cuda {
namespace {

[[noreturn]] void unavailable(const char* what) {
  throw Error(fmt::format("{}: CUDA is not available: {}", what, unavailable_reason()));
}

}  // namespace

bool nvrtc_available() { return false; }
std::string nvrtc_unavailable_reason() { return unavailable_reason(); }
std::string nvrtc_version() { unavailable("nvrtc"); }
std::string nvrtc_options() { unavailable("nvrtc"); }
std::string compile_cubin(const std::string&, int, const std::string&) { unavailable("nvrtc"); }
std::string compile_ptx(const std::string&, int, const std::string&) { unavailable("nvrtc"); }
std::vector<int> nvrtc_supported_archs() { return {}; }

void gemm(int, DType, bool, bool, int64_t, int64_t, int64_t, const void*, int64_t, int64_t, const void*, int64_t,
          int64_t, void*, int64_t, int64_t, int64_t) {
  unavailable("matmul");
}
bool gemm_epilogue(int, DType, Epilogue, bool, bool, int64_t, int64_t, int64_t, const void*, int64_t, const void*,
                   int64_t, const void*, void*, int64_t, std::string* why) {
  *why = unavailable_reason();
  return false;
}
EpilogueStats epilogue_stats() { return {}; }
std::optional<RnnForward> rnn_forward(const RnnSpec&, const Tensor&, const Tensor&, const Tensor&,
                                      std::span<const Tensor>, bool, std::string* why) {
  *why = unavailable_reason();
  return std::nullopt;
}
RnnGrads rnn_backward(const RnnSpec&, const Tensor&, const Tensor&, const Tensor&, const RnnForward&, const Tensor&,
                      const Tensor&, const Tensor&, bool) {
  unavailable("rnn backward");
}
ConvStats conv_stats() { return {}; }
void forget_conv_algorithms() {}
void set_cudnn_benchmark(bool) {}
bool cudnn_benchmark() { return false; }
int64_t dnn_element_limit() { return 0; }
void set_dnn_element_limit(int64_t) {}
int64_t dnn_batch_chunk(const std::vector<std::pair<Dims, Dims>>&, int64_t) { unavailable("conv2d"); }
void conv2d(OpId, std::span<const Tensor>, const Attrs&, const Tensor&) { unavailable("conv2d"); }
void conv2d_input_grad(OpId, std::span<const Tensor>, const Attrs&, const Tensor&) { unavailable("conv2d_input_grad"); }
void conv2d_weight_grad(OpId, std::span<const Tensor>, const Attrs&, const Tensor&) {
  unavailable("conv2d_weight_grad");
}

}  // namespace kiln::cuda
