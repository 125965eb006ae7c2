// runtime/cuda/module_cuda.cpp -- loading compiled kernels and launching them, and the device
// attributes the code generator sizes them by.
#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda/context_cuda.h"
#include "runtime/cuda_internal.h"
#include "runtime/profiler.h"

namespace kiln::cuda {

int attribute(int device, CUdevice_attribute a, const char* what) {
  bind(device, what);
  CUdevice d = 0;
  check(driver()->cuDeviceGet(&d, device), "cuDeviceGet");
  int v = 0;
  check(driver()->cuDeviceGetAttribute(&v, a, d), "cuDeviceGetAttribute");
  return v;
}

namespace {

// Every module loaded stays loaded for the process (the kernel caches keep its functions);
// the list keeps them reachable, for the leak checker, and in one place.
void loaded_modules(CUmodule m) {
  static std::mutex mu;
  static std::vector<CUmodule>* modules = new std::vector<CUmodule>;
  std::lock_guard<std::mutex> lock(mu);
  modules->push_back(m);
}

}  // namespace

DeviceFunction load_function(int device, const std::string& image, const std::string& name) {
  bind(device, "cuda kernel");
  CUmodule m = nullptr;
  // A module's code and constants take device memory outside the cache.
  CUresult r = retry_out_of_memory(
      device, [&] { return driver()->cuModuleLoadData(&m, image.data()); },
      [](CUresult e) { return e == CUDA_ERROR_OUT_OF_MEMORY; });
  if (r != CUDA_SUCCESS) {
    const char* e = nullptr;
    driver()->cuGetErrorName(r, &e);
    throw Error(fmt::format("cuda: kernel {} does not load on cuda:{}: {}", name, device, e ? e : "unknown error"));
  }
  CUfunction f = nullptr;
  r = driver()->cuModuleGetFunction(&f, m, name.c_str());
  if (r != CUDA_SUCCESS) {
    driver()->cuModuleUnload(m);
    throw Error(fmt::format("cuda: the module of kernel {} has no function of that name", name));
  }
  loaded_modules(m);
  return {reinterpret_cast<uintptr_t>(f), device};
}

namespace {
std::atomic<int64_t> g_launches{0};
}

int64_t kernel_launches() { return g_launches.load(std::memory_order_relaxed); }

void launch(const DeviceFunction& f, const unsigned grid[3], const unsigned block[3], size_t shared_bytes,
            void** args) {
  bind(f.device, "cuda kernel launch");
  profiler::DeviceWork work;  // (the launching span's, when no caller tied it to its own)
  auto fn = reinterpret_cast<CUfunction>(f.function);
  if (shared_bytes > (48 << 10))  // above the default, a kernel must opt in
    check(driver()->cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       static_cast<int>(shared_bytes)),
          "cuFuncSetAttribute");
  check(driver()->cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                 static_cast<unsigned>(shared_bytes), current(f.device), args, nullptr),
        "cuLaunchKernel");
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

int compute_capability(int device) {
  return 10 * attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cuda device") +
         attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cuda device");
}

int multiprocessor_count(int device) {
  return attribute(device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "cuda device");
}

}  // namespace kiln::cuda
