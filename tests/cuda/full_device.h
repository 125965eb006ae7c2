// tests/cuda/full_device.h -- a CUDA device full of what kiln keeps cached, for the tests of
// device memory taken outside the caching allocator (library handles, modules, NCCL's buffers):
// such an allocation must free the cache and succeed, not fail while the cache holds the memory.
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include <kiln/kiln.h>

#include "tests/cuda/cuda_test.h"

namespace kiln::test {

/// The device full of kiln's cached blocks while this lives. On the host CUDA: the device's
/// budget cut to what is in use plus `spare`, with `cached` bytes of freed blocks in the cache.
/// On a GPU: every block it gives (1 GiB at a time, then halves down to 2 MiB, the driver's
/// granularity) taken and freed into the cache, which is emptied at the end. Other processes
/// on that GPU would run out of memory meanwhile: scripts/gpu_pack.sh runs these tests alone.
class NearlyFull {
 public:
  NearlyFull(int64_t cached, int64_t spare, int device = 0) : device_(device) {
    const Device d = cuda::device(device);
    if (!on_host_cuda()) {
      std::vector<Tensor> hold;
      for (int64_t chunk = int64_t{1} << 30; chunk >= (int64_t{2} << 20);) {
        try {
          hold.push_back(empty({chunk}, DType::U8, d));
        } catch (const OutOfMemory&) {
          chunk /= 2;
        }
      }
      gpu_ = true;
      return;  // freed: all of it cached
    }
    cuda::synchronize(device);  // the driver loaded, for dlopen to find
    lib_ = dlopen(std::getenv("KILN_CUDA_DRIVER"), RTLD_LAZY | RTLD_NOLOAD);
    budget_ = reinterpret_cast<long long (*)(int, long long)>(dlsym(lib_, "kiln_host_memory_budget"));
    used_ = reinterpret_cast<long long (*)(int)>(dlsym(lib_, "kiln_host_memory_used"));
    { Tensor held = empty({cached / 4}, DType::F32, d); }  // freed: its block stays cached
    cuda::synchronize(device);
    old_ = budget_(device, used_(device) + spare);
  }
  ~NearlyFull() {
    if (gpu_) {
      cuda::synchronize(device_);
      cuda::empty_cache();
    }
    if (!lib_) return;
    budget_(device_, old_);
    dlclose(lib_);
  }
  NearlyFull(const NearlyFull&) = delete;
  NearlyFull& operator=(const NearlyFull&) = delete;

 private:
  int device_;
  bool gpu_ = false;
  void* lib_ = nullptr;
  long long (*budget_)(int, long long) = nullptr;
  long long (*used_)(int) = nullptr;
  long long old_ = 0;
};

}  // namespace kiln::test
