// jit/kernels.cpp -- the kernel cache: memory, then disk, then LLVM or NVRTC; each kernel
// compiled once.
#include "jit/kernels.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <chrono>
#include <future>
#include <mutex>
#include <unordered_map>

#include "codegen/cuda/nvrtc.h"
#include "jit/disk_cache.h"
#include "runtime/log.h"
#include "runtime/profiler.h"

namespace kiln::jit {
namespace {

// Part of every disk identity: object code from another kiln version is never reused.
constexpr const char* kKilnVersion = "kiln 0.1.0 kernels 1";

struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_future<codegen::KernelFn>> kernels;  // by symbol
  // CUDA kernels by symbol and device ("kiln_...@cuda:0"): a module is loaded per device.
  std::unordered_map<std::string, std::shared_future<cuda::DeviceFunction>> cuda_kernels;
  KernelCacheStats stats;
};
Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: kernels stay callable during exit
  return *c;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// Names a kernel's source by the hash of its text: its entry point, written kiln_kernel(, is
// renamed, so the source stays a function of structure.
std::string name_by_hash(std::string src, std::string* symbol) {
  XXH128_hash_t h = XXH3_128bits(src.data(), src.size());
  std::string sym = fmt::format("kiln_{:016x}{:016x}", h.high64, h.low64);
  const std::string placeholder = "kiln_kernel(";
  if (size_t at = src.find(placeholder); at != std::string::npos) src.replace(at, placeholder.size(), sym + "(");
  if (symbol) *symbol = sym;
  return src;
}

std::string kernel_source(const ir::Graph& body, const codegen::KernelLayout& layout, std::string* symbol) {
  return name_by_hash(codegen::cpu_backend().emit(body, layout, "kiln_kernel"), symbol);
}

std::string named_cuda_source(const std::string& source, std::string* symbol) { return name_by_hash(source, symbol); }

CudaKernel cuda_kernel_for(const std::string& source, int device) {
  CudaKernel k;
  profiler::Scope event(profiler::Kind::Compile, "cuda kernel");
  std::string src = name_by_hash(source, &k.symbol);
  std::string key = fmt::format("{}@cuda:{}", k.symbol, device);
  Cache& c = cache();
  std::promise<cuda::DeviceFunction> promise;
  std::shared_future<cuda::DeviceFunction> future;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.cuda_kernels.find(key);
    if (it != c.cuda_kernels.end()) {
      ++c.stats.hits;
      future = it->second;
    } else {
      ++c.stats.misses;
      c.cuda_kernels.emplace(key, promise.get_future().share());
    }
  }
  if (future.valid()) {
    k.fn = future.get();
    return k;
  }
  try {
    auto t0 = std::chrono::steady_clock::now();
    int arch = cuda::compute_capability(device);
    // A device newer than NVRTC knows gets PTX for the newest architecture it does, which the
    // driver compiles for the device.
    const codegen::cuda::CudaTarget target = codegen::cuda::cuda_target(arch, codegen::cuda::nvrtc_supported_archs());
    std::string identity = fmt::format("{}\nnvrtc {} ({}); {}_{}\n{}", kKilnVersion, codegen::cuda::nvrtc_version(),
                                       codegen::cuda::nvrtc_options(), target.ptx ? "compute" : "sm", target.arch, src);
    std::optional<std::string> cubin = disk_cache_get(identity);
    bool from_disk = cubin.has_value();
    if (from_disk) {
      try {
        k.fn = cuda::load_function(device, *cubin, k.symbol);
      } catch (const Error&) {
        from_disk = false;  // an entry the driver refuses is compiled again, never trusted
      }
    }
    if (!from_disk) {
      if (log_enabled(LogTopic::Codegen)) log(LogTopic::Codegen, fmt::format("kernel {} (CUDA C):\n{}", k.symbol, src));
      cubin = target.ptx ? codegen::cuda::compile_ptx(src, target.arch, k.symbol)
                         : codegen::cuda::compile_cubin(src, target.arch, k.symbol);
      disk_cache_put(identity, *cubin);
      k.fn = cuda::load_function(device, *cubin, k.symbol);
    }
    {
      std::lock_guard<std::mutex> lock(c.mu);
      ++(from_disk ? c.stats.disk_hits : c.stats.compiles);
    }
    log(LogTopic::Cache, fmt::format("kernel {} for sm_{}{}: {} in {:.2f} ms", k.symbol, arch,
                                     target.ptx ? fmt::format(" (as PTX for compute_{}, NVRTC's newest)", target.arch) : "",
                                     from_disk ? "loaded from the disk cache" : "compiled", ms_since(t0)));
    promise.set_value(k.fn);
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(c.mu);
    c.cuda_kernels.erase(key);
    throw;
  }
  return k;
}

Kernel kernel_for(const ir::Graph& body, const codegen::KernelLayout& layout) {
  Kernel k;
  profiler::Scope event(profiler::Kind::Compile, "kernel");
  std::string src;
  {
    profiler::Scope emit(profiler::Kind::Compile, "emit LLVM IR");
    src = kernel_source(body, layout, &k.symbol);
  }
  if (event) event.arg("kernel", k.symbol);
  Cache& c = cache();
  std::promise<codegen::KernelFn> promise;
  std::shared_future<codegen::KernelFn> future;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.kernels.find(k.symbol);
    if (it != c.kernels.end()) {
      ++c.stats.hits;
      future = it->second;
    } else {
      ++c.stats.misses;
      c.kernels.emplace(k.symbol, promise.get_future().share());
    }
  }
  if (future.valid()) {  // compiled, or being compiled by another thread
    if (event) event.arg("found", "in memory");
    k.fn = future.get();
    return k;
  }
  codegen::Backend& be = codegen::cpu_backend();
  try {
    auto t0 = std::chrono::steady_clock::now();
    std::string identity = fmt::format("{}\n{}\n{}", kKilnVersion, be.target_id(), src);
    std::optional<std::string> object;
    {
      profiler::Scope read(profiler::Kind::Compile, "disk cache read");
      object = disk_cache_get(identity);
    }
    bool from_disk = object.has_value();
    if (event) event.arg("found", from_disk ? "disk cache hit" : "disk cache miss: compiled");
    if (!from_disk) {
      if (log_enabled(LogTopic::Codegen)) log(LogTopic::Codegen, fmt::format("kernel {}:\n{}", k.symbol, src));
      object = be.compile(src);
      profiler::Scope write(profiler::Kind::Compile, "disk cache write");
      disk_cache_put(identity, *object);
    }
    {
      profiler::Scope link(profiler::Kind::Compile, "link");
      k.fn = be.load(*object, k.symbol);
    }
    {
      std::lock_guard<std::mutex> lock(c.mu);
      ++(from_disk ? c.stats.disk_hits : c.stats.compiles);
    }
    log(LogTopic::Cache, fmt::format("kernel {}: {} in {:.2f} ms", k.symbol,
                                     from_disk ? "loaded from the disk cache" : "compiled", ms_since(t0)));
    promise.set_value(k.fn);
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(c.mu);
    c.kernels.erase(k.symbol);
    throw;
  }
  return k;
}

KernelCacheStats kernel_cache_stats() {
  std::lock_guard<std::mutex> lock(cache().mu);
  return cache().stats;
}

}  // namespace kiln::jit
