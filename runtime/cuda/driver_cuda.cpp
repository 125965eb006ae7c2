// runtime/cuda/driver_cuda.cpp -- loads the CUDA driver with dlopen and initializes it once.
#include "runtime/cuda/driver_cuda.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <mutex>

#include "runtime/error.h"

namespace kiln::cuda {
namespace {

#define KILN_CUDA_STR2(x) #x
#define KILN_CUDA_STR(x) KILN_CUDA_STR2(x)  // the name after cuda.h's macros: "cuMemAlloc_v2"

struct Loaded {
  Driver driver;
  bool ok = false;
  std::string reason;
};

// A symbol by the versioned name cuda.h maps it to; an older driver without that version
// exports the plain name.
void* symbol(void* lib, const char* versioned, const char* plain) {
  void* p = dlsym(lib, versioned);
  return p ? p : dlsym(lib, plain);
}

Loaded load_driver() {
  Loaded l;
  const char* env = std::getenv("KILN_CUDA_DRIVER");
  std::string path = env && *env ? env : "libcuda.so.1";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    l.reason = fmt::format("the CUDA driver ({}) could not be loaded: {}", path, dlerror());
    return l;
  }
  std::string missing;
#define KILN_CUDA_LOAD(fn)                                                                    \
  l.driver.fn = reinterpret_cast<decltype(l.driver.fn)>(symbol(lib, KILN_CUDA_STR(fn), #fn)); \
  if (!l.driver.fn) missing += std::string(missing.empty() ? "" : ", ") + KILN_CUDA_STR(fn);
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_LOAD)
#undef KILN_CUDA_LOAD
  if (!missing.empty()) {
    l.reason = fmt::format("the CUDA driver {} lacks {} (kiln needs a driver of CUDA 12 or later)", path, missing);
    return l;
  }
  CUresult r = l.driver.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    l.driver.cuGetErrorName(r, &name);
    l.reason = fmt::format("the CUDA driver ({}) did not initialize: {}", path, name ? name : "unknown error");
    return l;
  }
  int count = 0;
  r = l.driver.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0) {
    l.reason = fmt::format("the CUDA driver ({}) found no device", path);
    return l;
  }
  l.ok = true;
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load_driver();  // never unloaded: kernels and memory outlive statics
  return l;
}

}  // namespace

const Driver* driver() { return loaded().ok ? &loaded().driver : nullptr; }

std::string unavailable_reason() { return loaded().ok ? "" : loaded().reason; }

const Driver& require_driver(const char* what) {
  const Driver* d = driver();
  if (!d) throw Error(fmt::format("{}: CUDA is not available: {}", what, loaded().reason));
  return *d;
}

void check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  if (const Driver* d = driver()) {
    d->cuGetErrorName(r, &name);
    d->cuGetErrorString(r, &text);
  }
  std::string message = fmt::format("cuda: {} failed: {} ({})", call, name ? name : fmt::format("error {}", int(r)),
                                    text ? text : "no description");
  if (r == CUDA_ERROR_OUT_OF_MEMORY) throw OutOfMemory(message);
  throw Error(message);
}

}  // namespace kiln::cuda
