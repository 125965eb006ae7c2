// runtime/cuda.h -- kiln::cuda: CUDA devices, streams and events as a program sees them.
//
//   if (cuda::is_available()) {
//     Tensor x = randn({1024, 1024}).to(cuda::device(0));   // or .to("cuda:0")
//     cuda::Stream side = cuda::Stream::create();
//     {
//       cuda::StreamGuard g(side);       // ops below are queued on `side`
//       Tensor y = matmul(x, x);
//     }
//     cuda::synchronize();
//   } else {
//     std::cout << cuda::unavailable_reason();
//   }
//
// Ops on CUDA tensors are queued on the current stream of their device and return at once;
// reading values on the host (item(), to_vector(), printing, to(cpu)) waits for them. The
// driver is loaded at run time, so a program built with CUDA support runs on machines without
// a GPU, where is_available() is false. No CUDA header is included here.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/allocator.h"
#include "runtime/device.h"

namespace kiln::cuda {

/// cuda:index.
inline Device device(int index = 0) { return Device{DeviceType::CUDA, static_cast<int16_t>(index)}; }

/// Whether kiln can run on a CUDA device here: it was built with CUDA, a driver loaded, and
/// it has at least one device.
bool is_available();
/// Why not ("" when it is available): built without CUDA, no driver, its error, no device.
std::string unavailable_reason();
/// The number of CUDA devices (0 when unavailable).
int device_count();

/// The calling thread's current device (0 at first): where cuda::current_stream() and the
/// functions below taking device -1 act.
int current_device();
void set_device(int index);

/// A queue of work on one device. Streams come from a pool per device (as PyTorch's do), so
/// creating one is cheap and they are never destroyed; copies of a Stream name the same one.
class Stream {
 public:
  /// The device's default stream.
  Stream() = default;
  /// A stream of device `index` (-1: the current device) from its pool, round robin.
  static Stream create(int index = -1);
  int device_index() const { return device_; }
  /// The driver's handle (a CUstream), for code that calls CUDA libraries itself.
  uintptr_t handle() const { return handle_; }
  /// Waits until the work queued on it so far has run.
  void synchronize() const;
  /// True when the work queued on it so far has run.
  bool query() const;
  friend bool operator==(const Stream& a, const Stream& b) { return a.device_ == b.device_ && a.handle_ == b.handle_; }

  Stream(int device, uintptr_t handle) : device_(device), handle_(handle) {}

 private:
  int device_ = 0;
  uintptr_t handle_ = 0;  // 0: the default stream
};

/// The thread's current stream on a device (-1: the current device); its default stream until
/// set.
Stream current_stream(int index = -1);
/// The device's default stream.
Stream default_stream(int index = -1);
/// Makes `s` the thread's current stream on its device.
void set_current_stream(const Stream& s);

/// Makes a stream (and its device) current for a scope, as PyTorch's CUDAStreamGuard does.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  int previous_device_;
};

/// A marker in a stream: for ordering work across streams and for timing it.
class Event {
 public:
  explicit Event(bool enable_timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  /// Marks the work queued on `s` so far (the current stream by default).
  void record(const Stream& s);
  void record();
  /// Makes work queued on `s` later wait for this event, without blocking the host.
  void block(const Stream& s) const;
  /// Waits on the host until the marked work has run.
  void synchronize() const;
  bool query() const;
  /// Milliseconds between this event and `end` (both recorded, timing enabled).
  double elapsed_ms(const Event& end) const;

 private:
  uintptr_t handle_ = 0;
  int device_ = -1;
  bool timing_ = false;
};

/// Waits until all work queued on a device (-1: the current one) has run.
void synchronize(int index = -1);

/// Whether an eager gather, scatter or index_add on CUDA checks its indices before it returns,
/// which makes the host wait for the device at every such call. Off by default: a bad index is
/// then a kiln::Error at the next call that waits for the device (to(cpu), item(), printing,
/// synchronize()), naming the op, as CUDA reports its kernels' errors. KILN_CUDA_SYNC_CHECKS=1
/// turns it on, to find the call.
bool sync_index_checks();
void set_sync_index_checks(bool on);

/// The device's caching allocator's counters: in_use (allocated), reserved (held from the
/// device), cached, peak_in_use, system_allocs (device allocations).
AllocatorStats memory_stats(int index = -1);
void reset_peak_memory_stats(int index = -1);
/// Returns the cached blocks of every device to the driver.
void empty_cache();

/// Kernels kiln launched, on any device, since the process began: its generated kernels
/// (eager ops, fused groups, attention); cuBLAS's, cuDNN's and NCCL's are not counted. A
/// difference across a call tells how many launches it made. 0 when CUDA is unavailable.
int64_t kernel_launches();

/// cuDNN's convolutions (conv2d and its gradients) on every device since the process began:
/// the algorithm searches they made (one per convolution and device: shapes, strides, dtype,
/// math type, stride, padding, dilation and groups make the key; later calls of a key run the
/// cached choice), the calls that found their choice in memory, the choices read from the disk
/// cache (beside the compiled kernels: a warm start searches nothing), and the calls that ran on
/// a fallback because cuDNN had no algorithm for them as given: on contiguous copies of their
/// operands, or in a wider dtype (copies and a slower kernel; KILN_LOG=cuda says why, once per
/// configuration). Defined by the CUDA layer (cuda/conv_cuda.cpp); zeros without CUDA.
struct ConvStats {
  int64_t algorithm_searches = 0, cached = 0, loaded = 0, contiguous_fallbacks = 0, wider_dtype_fallbacks = 0;
};
ConvStats conv_stats();

/// Whether a convolution seen for the first time times cuDNN's candidate algorithms on its own
/// operands (cudnnFind*) rather than taking its heuristics' first (PyTorch's
/// torch.backends.cudnn.benchmark; off by default, as there). The choice is cached per key
/// either way; a timed choice is kept apart from a ranked one. A timed search runs every
/// candidate once and waits for them: worth it when the shapes repeat, as in training.
void set_cudnn_benchmark(bool timed);
bool cudnn_benchmark();

/// Page-locked host memory, cached (what Tensor::pin_memory() allocates from); a kiln::Error
/// when CUDA is unavailable.
Allocator& pinned_memory_allocator();
/// Whether `p` lies in page-locked memory from that allocator.
bool is_pinned(const void* p);

/// Whether f32 matmuls may use TF32 tensor cores (off by default, as in PyTorch since 1.12).
bool allow_tf32();
void set_allow_tf32(bool allow);

}  // namespace kiln::cuda
