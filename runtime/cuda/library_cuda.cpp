// runtime/cuda/library_cuda.cpp -- see library_cuda.h.
#include "runtime/cuda/library_cuda.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace kiln::cuda {

void* open_library(const char* env_var, std::initializer_list<const char*> candidates, const char* what,
                   std::string* why) {
  std::vector<std::string> paths;
  if (const char* env = std::getenv(env_var); env && *env) paths.emplace_back(env);
  else paths.assign(candidates.begin(), candidates.end());
  std::string errors;
  for (const std::string& p : paths) {
    if (void* lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    errors += (errors.empty() ? "" : "; ") + std::string(dlerror());
  }
  *why = std::string(what) + " could not be loaded: " + errors;
  return nullptr;
}

}  // namespace kiln::cuda
