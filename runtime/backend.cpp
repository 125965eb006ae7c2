// runtime/backend.cpp -- the device registry and the CPU backend.
#include "runtime/backend.h"

#include <array>
#include <atomic>

#include "runtime/check.h"
#include "runtime/ops/loops.h"

namespace kiln {
namespace {

// The CPU: op kernels straight from each OpDef, memory from the caching allocator.
class CpuBackend final : public DeviceBackend {
 public:
  Allocator& allocator(Device) override { return cpu_allocator(); }
  void run(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out) override {
    op_def(id).cpu(id, in, attrs, out);
  }
  void copy(const Tensor& src, const Tensor& dst) override { copy_into(src, dst); }
  void synchronize(Device) override {}
};

CpuBackend g_cpu;
std::array<std::atomic<DeviceBackend*>, kNumDeviceTypes> g_backends{&g_cpu};

}  // namespace

void register_backend(DeviceType type, DeviceBackend* b) {
  KILN_CHECK(type != DeviceType::CPU, "register_backend: the CPU backend cannot be replaced");
  g_backends[static_cast<size_t>(type)].store(b, std::memory_order_release);
}

DeviceBackend& backend(Device d) {
  DeviceBackend* b = g_backends[static_cast<size_t>(d.type)].load(std::memory_order_acquire);
  if (!b) {
    throw Error(fmt::format("device {} is not available: this program has no {} backend{}", d.str(),
                            device_type_name(d.type),
                            d.is_cuda() ? " (kiln was built without CUDA)" : " (register one with register_backend)"));
  }
  return *b;
}

void copy_between(const Tensor& src, const Tensor& dst) {
  Device s = src.device(), d = dst.device();
  if (s.is_cpu() || d.is_cpu() || s.type == d.type) return backend(s.is_cpu() ? d : s).copy(src, dst);
  // Two device types: through the host (a backend copies only between its devices and the CPU).
  Tensor host = Tensor::empty({dst.dtype(), dst.shape(), cpu});
  backend(s).copy(src, host);
  backend(d).copy(host, dst);
}

void synchronize(Device d) { backend(d).synchronize(d); }

}  // namespace kiln
