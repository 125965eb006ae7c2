// runtime/cuda/library_cuda.cpp -- see library_cuda.h.
#include "runtime/cuda/library_cuda.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <vector>

#include "runtime/cuda/driver_cuda.h"

namespace kiln::cuda {

void* open_library(const char* env_var, std::initializer_list<const char*> candidates, const char* what,
                   std::string* why) {
  std::vector<std::string> paths;
  if (const char* env = std::getenv(env_var); env && *env) paths.emplace_back(env);
  else paths.assign(candidates.begin(), candidates.end());
  std::string errors;
  for (const std::string& p : paths) {
    std::string unsuited;
    if (!driver_allows(p, &unsuited)) {
      errors += (errors.empty() ? "" : "; ") + unsuited;
      continue;
    }
    if (void* lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    errors += (errors.empty() ? "" : "; ") + std::string(dlerror());
  }
  *why = std::string(what) + " could not be loaded: " + errors;
  return nullptr;
}

bool driver_allows(const std::string& name, std::string* why) {
  const size_t at = name.rfind(".so.");
  if (at == std::string::npos) return true;
  const int major = std::atoi(name.c_str() + at + 4);
  int version = 0;
  if (major < 11 || !driver() || driver()->cuDriverGetVersion(&version) != CUDA_SUCCESS || version == 0) return true;
  if (version >= major * 1000) return true;
  *why = fmt::format("{}: a CUDA {} library, and the driver is CUDA {}.{}", name, major, version / 1000,
                     version % 1000 / 10);
  return false;
}

}  // namespace kiln::cuda
