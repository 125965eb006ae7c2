// runtime/cuda_kernels.h -- the CUDA backend's kernels that come from above. The runtime sits
// below the code generators, so the single-op kernels of the op list (generated from the same
// formulas as the CPU's, compiled with NVRTC) are installed here by jit/ when the library loads,
// as distributed/ installs the collective engine; ops backed by CUDA libraries (matmul through
// cuBLAS, conv2d and the pools through cuDNN) are the runtime's own. No CUDA header here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda.h"
#include "runtime/op.h"

namespace kiln::cuda {

/// Runs one op on CUDA tensors, queued on the current stream of their device. `out` is fresh
/// and contiguous; the inputs are on its device, or 0-d CPU tensors.
using OpKernel = void (*)(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out);
void set_op_kernel(OpId id, OpKernel kernel);
/// The installed kernel of op `id`, or nullptr.
OpKernel op_kernel(OpId id);

/// dst = src on one CUDA device: src broadcast to dst's shape and converted to its dtype, any
/// strides on either side.
using CopyKernel = void (*)(const Tensor& src, const Tensor& dst);
void set_copy_kernel(CopyKernel kernel);

/// A kernel of a loaded module, on one device.
struct DeviceFunction {
  uintptr_t function = 0;  // a CUfunction
  int device = -1;
};
/// Loads `image` (a cubin) on device `device` and returns its kernel `name`; the module stays
/// loaded for the process. Throws kiln::Error naming the kernel.
DeviceFunction load_function(int device, const std::string& image, const std::string& name);
/// Queues `f` on the current stream of its device: grid and block sizes in x, y, z, dynamic
/// shared memory in bytes, and a pointer to each argument (cuLaunchKernel's convention).
void launch(const DeviceFunction& f, const unsigned grid[3], const unsigned block[3], size_t shared_bytes, void** args);
/// cuBLAS (loaded with dlopen: KILN_CUDA_CUBLAS, else libcublas of CUDA 13 or 12), in its
/// column-major terms: C = op(A) op(B), m x n, over `batch` matrices `stride_*` elements apart,
/// queued on the current stream of `device`. f32 (with TF32 when cuda::allow_tf32()), f64,
/// and f16 and bf16 computing in f32. Throws kiln::Error when cuBLAS is unavailable.
void gemm(int device, DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
          const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, void* c,
          int64_t ldc, int64_t stride_c, int64_t batch);

/// What cuBLASLt adds to a GEMM before its one rounding: a bias per row of the (column-major)
/// result, then a relu or the tanh approximation of gelu.
enum class Epilogue { Bias, ReluBias, GeluBias };
/// cuBLASLt (loaded with dlopen: KILN_CUDA_CUBLASLT, else libcublasLt of CUDA 13 or 12), in
/// cuBLAS's column-major terms: C = epilogue(op(A) op(B) + bias), m x n, bias of m values,
/// queued on the current stream of `device`. Returns false with `*why`, having queued nothing,
/// when cuBLASLt is unavailable or has no algorithm for the case: the caller computes it
/// another way. Dtypes as gemm().
bool gemm_epilogue(int device, DType dtype, Epilogue epilogue, bool transpose_a, bool transpose_b, int64_t m,
                   int64_t n, int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb, const void* bias,
                   void* c, int64_t ldc, std::string* why);
/// Calls of gemm_epilogue that cuBLASLt ran, and that it declined.
struct EpilogueStats {
  int64_t fused = 0, declined = 0;
};
EpilogueStats epilogue_stats();

/// A stack of recurrent layers as cuDNN's RNN API runs it (runtime/cuda/rnn_cuda.cpp): an
/// LSTM or a GRU, with torch's gate orders (which are cuDNN's: i, f, g, o and r, z, n) and
/// equations (a GRU's recurrent bias inside r's product), num_layers deep, one or two
/// directions, two biases per layer and direction or none, no dropout between the layers.
struct RnnSpec {
  bool lstm = true;  // else a GRU
  int64_t input_size = 0, hidden_size = 0, num_layers = 1;
  bool bidirectional = false, bias = true;
  DType dtype = DType::F32;
};
/// A forward's results: y [T, N, D * H], the final h (and c) [L * D, N, H]; with what its
/// backward reads (the packed weights, the sequence lengths, cuDNN's reserve).
struct RnnForward {
  Tensor y, hy, cy;
  Tensor weights, lengths, reserve;
};
/// Runs `spec` on x [T, N, input_size] from hx and cx [L * D, N, H] (undefined: zeros; all
/// contiguous, of spec's dtype, on one device) with `params` per layer and direction in torch's
/// order (w_ih, w_hh, then b_ih, b_hh with bias), packed into cuDNN's weight space.
/// `training` keeps the reserve for rnn_backward. nullopt with `*why`, having queued nothing,
/// when cuDNN is unavailable or does not support the configuration.
std::optional<RnnForward> rnn_forward(const RnnSpec& spec, const Tensor& x, const Tensor& hx, const Tensor& cx,
                                      std::span<const Tensor> params, bool training, std::string* why);
/// The gradients of rnn_forward's inputs from those of its results (undefined: zeros): dx, dhx
/// and dcx (undefined where hx, cx were), and with `weights` each param's, in `params`' order.
struct RnnGrads {
  Tensor dx, dhx, dcx;
  std::vector<Tensor> dparams;
};
RnnGrads rnn_backward(const RnnSpec& spec, const Tensor& x, const Tensor& hx, const Tensor& cx, const RnnForward& fwd,
                      const Tensor& dy, const Tensor& dhy, const Tensor& dcy, bool weights);

/// An eager index op's error flag on `device` (i64[2]: zero, or {1, the bad index} once its
/// kernel met one) for op `op` over a dim of `size`: a slot read at the device's next
/// synchronizing call (runtime/cuda/checks_cuda.cpp), which throws kiln::Error for it.
Tensor deferred_check_flag(int device, const char* op, int64_t size);
/// Reads `device`'s pending index checks (waiting for the device); throws for the first bad
/// index. Every call that waits for the device calls it.
void read_deferred_checks(int device);

/// A CUDA graph: the work queued on a stream during a capture, replayed by launch() on any
/// stream of its device. The memory its kernels touch was allocated during the capture from a
/// private pool of the device's caching allocator, and stays the graph's until it is
/// destroyed, which first waits for its replays.
class CapturedGraph {
 public:
  CapturedGraph(int device, uintptr_t exec, uintptr_t pool, uintptr_t stream)
      : device_(device), exec_(exec), pool_(pool), stream_(stream) {}
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  /// Queues the whole graph on the current stream of its device.
  void launch() const;
  int device() const { return device_; }

 private:
  int device_;
  uintptr_t exec_, pool_, stream_;  // a CUgraphExec, the private pool's key, the captured stream
  // The streams it was launched on: the destructor waits for those alone (a device-wide wait
  // would end a capture another thread is making).
  mutable std::mutex mu_;
  mutable std::set<uintptr_t> launched_;
};
/// The calling thread's stream for captures on `device`: made for captures alone (never one of
/// the pool that Stream::create, user code and NCCL share, which wraps around), lent to one
/// thread at a time and given back when it ends, so no other thread queues work on it while it
/// captures.
Stream capture_stream(int device);
/// Starts capturing `stream` (never a default stream: the driver does not capture those):
/// the work queued on it is recorded instead of run, and its allocations come from a new
/// private pool.
void begin_capture(const Stream& stream);
/// Ends the capture: the graph, or nullptr with `*why` when a call during the capture was not
/// allowed in one (the capture is over either way).
std::unique_ptr<CapturedGraph> end_capture(const Stream& stream, std::string* why);

/// cuDNN's legacy convolution calls index with int: a convolution whose x or y reaches
/// dnn_element_limit() (2^31 - 1) elements runs on batch chunks below it, the weight gradient
/// summed over them (PyTorch splits so too). Tests lower the limit (0: back to the default).
int64_t dnn_element_limit();
void set_dnn_element_limit(int64_t limit);
/// The most samples of a batch whose elements, and furthest element, stay below `limit` in
/// every tensor with that batch (shape and strides, dim 0 the batch); 0 when one does not fit.
int64_t dnn_batch_chunk(const std::vector<std::pair<Dims, Dims>>& tensors, int64_t limit);

/// The device's compute capability as NVRTC names architectures: 90 for 9.0.
int compute_capability(int device);
/// The device's streaming multiprocessors (to size grids).
int multiprocessor_count(int device);

}  // namespace kiln::cuda
