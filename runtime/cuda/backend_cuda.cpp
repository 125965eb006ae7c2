// runtime/cuda/backend_cuda.cpp -- the CUDA DeviceBackend: memory from each device's caching
// allocator, op kernels from the table (runtime/cuda_internal.h), copies between the host and
// the devices queued on the current stream, and synchronization. Registered when the library
// loads; without a driver, each use says why CUDA is unavailable.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/cuda/context_cuda.h"
#include "runtime/cuda_internal.h"
#include "runtime/ops/loops.h"
#include "runtime/profiler.h"

namespace kiln::cuda {
namespace {

std::array<std::atomic<OpKernel>, kNumOps> g_kernels{};
std::atomic<CopyKernel> g_copy{nullptr};

size_t nbytes_of(const Tensor& t) { return static_cast<size_t>(t.numel()) * dtype_size(t.dtype()); }

// What an op reads and writes, its operands read once (a broadcast one at its own size).
int64_t op_bytes(std::span<const Tensor> in, const Tensor& out) {
  int64_t b = static_cast<int64_t>(nbytes_of(out));
  for (const Tensor& t : in) b += static_cast<int64_t>(nbytes_of(t));
  return b;
}
std::vector<TensorType> types_of(std::span<const Tensor> in) {
  std::vector<TensorType> t;
  for (const Tensor& x : in) t.push_back(x.type());
  return t;
}

// The tensor's memory as one contiguous run of dst's dtype and shape: no conversion, no
// broadcast, no gaps.
bool same_dense_layout(const Tensor& src, const Tensor& dst) {
  return src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.is_contiguous() && dst.is_contiguous();
}

CUdeviceptr device_ptr(const Tensor& t) { return reinterpret_cast<CUdeviceptr>(t.data_ptr()); }

class CudaBackend final : public DeviceBackend {
 public:
  Allocator& allocator(Device d) override {
    KILN_CHECK(driver(), "device {} is not available: {}", d.str(), unavailable_reason());
    return device_allocator(d.index);
  }

  void run(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out) override {
    OpKernel k = g_kernels[static_cast<size_t>(id)].load(std::memory_order_acquire);
    KILN_CHECK(k,
               "{}: no CUDA kernel for this op ({}); this kiln's CUDA kernels are installed by its CUDA layer (cuda/)",
               op_name(id), out.type().str());
    bind(out.device().index, op_name(id));
    // The device work it queues is the op's (with its bytes and FLOPs, for the profiler's rates).
    const bool profiling = profiler::enabled();
    profiler::DeviceWork work(op_name(id), profiling ? op_bytes(in, out) : -1,
                              profiling ? op_flops(id, types_of(in), out.type(), attrs) : -1);
    k(id, in, attrs, out);
  }

  void copy(const Tensor& src, const Tensor& dst) override {
    if (dst.numel() == 0) return;
    profiler::DeviceWork work("copy", profiler::enabled() ? static_cast<int64_t>(nbytes_of(src) + nbytes_of(dst)) : -1,
                              0);
    Device s = src.device(), d = dst.device();
    if (s.is_cpu()) return to_device(src, dst);
    if (d.is_cpu()) return to_host(src, dst);
    if (s == d) return on_device(src, dst);
    // Between two devices: through the host.
    Tensor host = Tensor::empty({src.dtype(), src.shape(), cpu});
    to_host(src, host);
    to_device(host, dst);
  }

  void synchronize(Device d) override { cuda::synchronize(d.index); }

 private:
  // dst (a CUDA tensor) = src (a CPU tensor): src converted on the host, uploaded at its own
  // shape (a broadcast scalar is one element), then broadcast on the device.
  void to_device(const Tensor& src, const Tensor& dst) {
    int index = dst.device().index;
    bind(index, "copy to cuda");
    Tensor host = src;
    if (!(src.dtype() == dst.dtype() && src.is_contiguous())) {
      host = Tensor::empty({dst.dtype(), src.shape(), cpu});
      copy_into(src, host);
    }
    CUstream stream = current(index);
    // One value filling a contiguous tensor (zeros(), full(), a slice's gradient padded): a
    // memset, which a CUDA graph captures, instead of an upload and a broadcast (a capture
    // refuses a copy from pageable memory).
    if (host.numel() == 1 && dst.is_contiguous()) return fill(host.data_ptr(), dst, stream);
    bool direct = host.shape() == dst.shape() && dst.is_contiguous();
    Tensor target = direct ? dst : Tensor::empty({dst.dtype(), host.shape(), dst.device()});
    // From pageable memory the driver has read the source when the call returns; from pinned
    // memory the copy runs later, so the block is held until it has.
    check(driver()->cuMemcpyHtoDAsync(device_ptr(target), host.data_ptr(), nbytes_of(host), stream),
          "cuMemcpyHtoDAsync");
    if (is_pinned_pointer(host.data_ptr())) record_pinned_use(host.data_ptr(), stream, index);
    if (target.impl() != dst.impl()) on_device(target, dst);
  }

  // Every element of dst (contiguous, on the device) = the element at `value`, by memsets of
  // the element's width (an 8-byte one as its two 32-bit halves, each every 8 bytes).
  void fill(const void* value, const Tensor& dst, CUstream stream) {
    size_t es = dtype_size(dst.dtype()), n = static_cast<size_t>(dst.numel());
    unsigned char b[8];
    std::memcpy(b, value, es);
    CUdeviceptr p = device_ptr(dst);
    const Driver& d = *driver();
    if (std::all_of(b, b + es, [&](unsigned char c) { return c == b[0]; }))
      return check(d.cuMemsetD8Async(p, b[0], n * es, stream), "cuMemsetD8Async");
    if (es == 2) {
      uint16_t v;
      std::memcpy(&v, b, 2);
      return check(d.cuMemsetD16Async(p, v, n, stream), "cuMemsetD16Async");
    }
    uint32_t half[2];
    std::memcpy(half, b, es);
    if (es == 4 || half[0] == half[1])
      return check(d.cuMemsetD32Async(p, half[0], n * es / 4, stream), "cuMemsetD32Async");
    for (int k = 0; k < 2; ++k) check(d.cuMemsetD2D32Async(p + 4 * k, 8, half[k], 1, n, stream), "cuMemsetD2D32Async");
  }

  // dst (a CPU tensor) = src (a CUDA tensor); returns when dst holds the values.
  void to_host(const Tensor& src, const Tensor& dst) {
    int index = src.device().index;
    bind(index, "copy to cpu");
    Tensor dense = src;
    if (!src.is_contiguous()) {
      dense = Tensor::empty({src.dtype(), src.shape(), src.device()});
      on_device(src, dense);
    }
    bool direct = same_dense_layout(dense, dst);
    Tensor host = direct ? dst : Tensor::empty({dense.dtype(), dense.shape(), cpu});
    CUstream stream = current(index);
    check(driver()->cuMemcpyDtoHAsync(host.data_ptr(), device_ptr(dense), nbytes_of(dense), stream),
          "cuMemcpyDtoHAsync");
    check(driver()->cuStreamSynchronize(stream), "cuStreamSynchronize");
    read_deferred_checks(index);  // the program reads the device: a bad index found meanwhile is its error
    if (!direct) copy_into(host, dst);
  }

  // dst = src on one device.
  void on_device(const Tensor& src, const Tensor& dst) {
    int index = dst.device().index;
    bind(index, "copy on cuda");
    if (same_dense_layout(src, dst)) {
      check(driver()->cuMemcpyDtoDAsync(device_ptr(dst), device_ptr(src), nbytes_of(dst), current(index)),
            "cuMemcpyDtoDAsync");
      return;
    }
    CopyKernel k = g_copy.load(std::memory_order_acquire);
    KILN_CHECK(k,
               "copy: no CUDA copy kernel to write {} into {}; this kiln's CUDA kernels are installed by its CUDA "
               "layer (cuda/)",
               src.type().str(), dst.type().str());
    k(src, dst);
  }
};

CudaBackend g_backend;
const bool g_registered = (register_backend(DeviceType::CUDA, &g_backend), true);

}  // namespace

void install_kernels(std::span<const OpKernelEntry> table, CopyKernel copy) {
  for (const OpKernelEntry& e : table) g_kernels[static_cast<size_t>(e.op)].store(e.kernel, std::memory_order_release);
  g_copy.store(copy, std::memory_order_release);
}

OpKernel op_kernel(OpId id) { return g_kernels[static_cast<size_t>(id)].load(std::memory_order_acquire); }

}  // namespace kiln::cuda
