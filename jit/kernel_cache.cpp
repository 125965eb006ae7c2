// jit/kernel_cache.cpp -- the CPU's kernel cache: memory, then disk, then LLVM; each kernel
// compiled once (jit/kernel_cache.h).
#include "jit/kernel_cache.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <chrono>

#include "jit/disk_cache.h"
#include "runtime/log.h"
#include "runtime/profiler.h"

namespace kiln::jit {
namespace {

std::mutex g_stats_mu;
KernelCacheStats g_stats;

KernelMemo<codegen::KernelFn>& cpu_kernels() {
  static auto* m = new KernelMemo<codegen::KernelFn>();  // never destroyed: kernels stay callable during exit
  return *m;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const char* const kKernelFormat = "kiln 0.1.0 kernels 1";

namespace detail {
void count_lookup(bool hit) {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  ++(hit ? g_stats.hits : g_stats.misses);
}
void count_made(bool from_disk) {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  ++(from_disk ? g_stats.disk_hits : g_stats.compiles);
}
}  // namespace detail

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

Kernel kernel_for(const ir::Graph& body, const codegen::KernelLayout& layout) {
  Kernel k;
  profiler::Scope event(profiler::Kind::Compile, "kernel");
  std::string src;
  {
    profiler::Scope emit(profiler::Kind::Compile, "emit LLVM IR");
    src = kernel_source(body, layout, &k.symbol);
  }
  if (event) event.arg("kernel", k.symbol);
  bool made_here = false;
  k.fn = cpu_kernels().get(k.symbol, [&](bool* from_disk) {
    made_here = true;
    codegen::Backend& be = codegen::cpu_backend();
    auto t0 = std::chrono::steady_clock::now();
    std::string identity = fmt::format("{}\n{}\n{}", kKernelFormat, be.target_id(), src);
    std::optional<std::string> object;
    {
      profiler::Scope read(profiler::Kind::Compile, "disk cache read");
      object = disk_cache_get(identity);
    }
    *from_disk = object.has_value();
    if (event) event.arg("found", *from_disk ? "disk cache hit" : "disk cache miss: compiled");
    if (!*from_disk) {
      if (log_enabled(LogTopic::Codegen)) log(LogTopic::Codegen, fmt::format("kernel {}:\n{}", k.symbol, src));
      object = be.compile(src);
      profiler::Scope write(profiler::Kind::Compile, "disk cache write");
      disk_cache_put(identity, *object);
    }
    codegen::KernelFn fn;
    {
      profiler::Scope link(profiler::Kind::Compile, "link");
      fn = be.load(*object, k.symbol);
    }
    log(LogTopic::Cache, fmt::format("kernel {}: {} in {:.2f} ms", k.symbol,
                                     *from_disk ? "loaded from the disk cache" : "compiled", ms_since(t0)));
    return fn;
  });
  if (event && !made_here) event.arg("found", "in memory");
  return k;
}

KernelCacheStats kernel_cache_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  return g_stats;
}

}  // namespace kiln::jit
