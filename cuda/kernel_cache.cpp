// cuda/kernel_cache.cpp -- CUDA kernels through jit's kernel cache (cuda/kernel_cache.h).
#include "cuda/kernel_cache.h"

#include <fmt/format.h>

#include <chrono>
#include <optional>

#include "cuda/nvrtc.h"
#include "jit/disk_cache.h"
#include "jit/kernel_cache.h"
#include "runtime/log.h"
#include "runtime/profiler.h"

namespace kiln::cuda {

std::string named_source(const std::string& source, std::string* symbol) { return jit::name_by_hash(source, symbol); }

CompiledKernel kernel_for(const std::string& source, int device, std::string_view label) {
  // By symbol and device ("kiln_...@cuda:0"): a module is loaded per device. Never destroyed:
  // kernels stay callable during exit.
  static auto* kernels = new jit::KernelMemo<DeviceFunction>();
  CompiledKernel k;
  profiler::Scope event(profiler::Kind::Compile, "cuda kernel");
  std::string src = named_source(source, &k.symbol);
  k.fn = kernels->get(fmt::format("{}@cuda:{}", k.symbol, device), [&](bool* from_disk) {
    auto t0 = std::chrono::steady_clock::now();
    if (!label.empty()) profiler::name_kernel(k.symbol, label, -1, -1);
    int arch = compute_capability(device);
    // A device newer than NVRTC knows gets PTX for the newest architecture it does, which the
    // driver compiles for the device.
    const CudaTarget target = cuda_target(arch, nvrtc_supported_archs());
    std::string identity = fmt::format("{}\nnvrtc {} ({}); {}_{}\n{}", jit::kKernelFormat, nvrtc_version(),
                                       nvrtc_options(), target.ptx ? "compute" : "sm", target.arch, src);
    DeviceFunction fn;
    std::optional<std::string> cubin = jit::disk_cache_get(identity);
    *from_disk = cubin.has_value();
    if (*from_disk) {
      try {
        fn = load_function(device, *cubin, k.symbol);
      } catch (const Error&) {
        *from_disk = false;  // an entry the driver refuses is compiled again, never trusted
      }
    }
    if (!*from_disk) {
      if (log_enabled(LogTopic::Codegen)) log(LogTopic::Codegen, fmt::format("kernel {} (CUDA C):\n{}", k.symbol, src));
      cubin = target.ptx ? compile_ptx(src, target.arch, k.symbol) : compile_cubin(src, target.arch, k.symbol);
      jit::disk_cache_put(identity, *cubin);
      fn = load_function(device, *cubin, k.symbol);
    }
    log(LogTopic::Cache,
        fmt::format("kernel {} for sm_{}{}: {} in {:.2f} ms", k.symbol, arch,
                    target.ptx ? fmt::format(" (as PTX for compute_{}, NVRTC's newest)", target.arch) : "",
                    *from_disk ? "loaded from the disk cache" : "compiled",
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()));
    return fn;
  });
  return k;
}

}  // namespace kiln::cuda
