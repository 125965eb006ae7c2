// runtime/cuda/unavailable.cpp -- runtime/cuda.h and runtime/cuda_internal.h in a kiln built
// without the CUDA toolkit (KILN_CUDA=OFF, or no cuda.h at configure time): no device, and each use says
// why. CUDA tensors are then refused by the device registry (runtime/backend.cpp).
#include <fmt/format.h>

#include <atomic>

#include "runtime/cuda.h"
#include "runtime/cuda_internal.h"
#include "runtime/error.h"

namespace kiln::cuda {
namespace {

const char* kReason =
    "kiln was built without CUDA (the CUDA toolkit's headers were not found at configure time, or "
    "KILN_CUDA was OFF)";

[[noreturn]] void unavailable(const char* what) {
  throw Error(fmt::format("{}: CUDA is not available: {}", what, kReason));
}

std::atomic<bool> g_allow_tf32{false};

}  // namespace

bool is_available() { return false; }
std::string unavailable_reason() { return kReason; }
int device_count() { return 0; }
int current_device() { return 0; }
void set_device(int) { unavailable("cuda::set_device"); }
Stream Stream::create(int) { unavailable("cuda::Stream::create"); }
void Stream::synchronize() const { unavailable("cuda::Stream::synchronize"); }
bool Stream::query() const { unavailable("cuda::Stream::query"); }
Stream current_stream(int) { unavailable("cuda::current_stream"); }
Stream default_stream(int) { unavailable("cuda::default_stream"); }
void set_current_stream(const Stream&) { unavailable("cuda::set_current_stream"); }
StreamGuard::StreamGuard(const Stream&) : previous_(), previous_device_(0) { unavailable("cuda::StreamGuard"); }
// The destructors read the fields the CUDA build uses: clang's -Wunused-private-field sees every
// member of these classes defined here, none of them using the fields otherwise.
StreamGuard::~StreamGuard() { (void)previous_device_; }
Event::Event(bool enable_timing) : timing_(enable_timing) {}
Event::~Event() { (void)handle_, (void)device_, (void)timing_; }
void Event::record(const Stream&) { unavailable("cuda::Event::record"); }
void Event::record() { unavailable("cuda::Event::record"); }
void Event::block(const Stream&) const { unavailable("cuda::Event::block"); }
void Event::synchronize() const { unavailable("cuda::Event::synchronize"); }
bool Event::query() const { unavailable("cuda::Event::query"); }
double Event::elapsed_ms(const Event&) const { unavailable("cuda::Event::elapsed_ms"); }
void synchronize(int) { unavailable("cuda::synchronize"); }
AllocatorStats memory_stats(int) { unavailable("cuda::memory_stats"); }
void reset_peak_memory_stats(int) { unavailable("cuda::reset_peak_memory_stats"); }
int64_t kernel_launches() { return 0; }
void empty_cache() {}
Allocator& pinned_memory_allocator() { unavailable("pin_memory"); }
bool is_pinned(const void*) { return false; }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }
void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }

void install_kernels(std::span<const OpKernelEntry>, CopyKernel) {}
OpKernel op_kernel(OpId) { return nullptr; }
DeviceFunction load_function(int, const std::string&, const std::string&) { unavailable("cuda kernel"); }
void launch(const DeviceFunction&, const unsigned*, const unsigned*, size_t, void**) {
  unavailable("cuda kernel launch");
}
int compute_capability(int) { unavailable("cuda device"); }
int multiprocessor_count(int) { unavailable("cuda device"); }
bool sync_index_checks() { return false; }
void set_sync_index_checks(bool) {}
Tensor deferred_check_flag(int, const char*, int64_t) { unavailable("index checks"); }
void read_deferred_checks(int) {}
void defer_check(int, const Tensor&, const char*, int64_t) { unavailable("index checks"); }
CapturedGraph::~CapturedGraph() { (void)device_, (void)exec_, (void)pool_, (void)stream_; }
void CapturedGraph::launch() const { unavailable("cuda graph"); }
Stream capture_stream(int) { unavailable("cuda graph capture"); }
void begin_capture(const Stream&) { unavailable("cuda graph capture"); }
std::unique_ptr<CapturedGraph> end_capture(const Stream&, std::string*) { unavailable("cuda graph capture"); }

}  // namespace kiln::cuda
