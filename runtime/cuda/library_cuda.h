// runtime/cuda/library_cuda.h -- opening a CUDA library (cuBLAS, cuDNN, NCCL) with dlopen: the
// file an environment variable names (the tests' host CUDA), else the first of its usual names
// that loads. Internal to the CUDA files.
#pragma once

#include <initializer_list>
#include <string>

namespace kiln::cuda {

/// The handle of the library, or nullptr with `why` set to "<what> could not be loaded: "
/// followed by each attempt's dlerror().
void* open_library(const char* env_var, std::initializer_list<const char*> candidates, const char* what,
                   std::string* why);

}  // namespace kiln::cuda
