// runtime/cuda/library_cuda.h -- opening a CUDA library (cuBLAS, cuDNN, NCCL) with dlopen: the
// file an environment variable names (the tests' host CUDA), else the first of its usual names
// that loads. Internal to the CUDA files.
#pragma once

#include <initializer_list>
#include <string>

namespace kiln::cuda {

/// The handle of the library, or nullptr with `why` set to "<what> could not be loaded: "
/// followed by each attempt's dlerror(). A candidate of a CUDA toolkit major the driver is
/// older than is skipped (driver_allows).
void* open_library(const char* env_var, std::initializer_list<const char*> candidates, const char* what,
                   std::string* why);

/// Whether the library file `name` suits the installed driver: a toolkit library of CUDA major N
/// (its file ends in ".so.N", N >= 11: NVRTC, cuBLAS, cuBLASLt; cuDNN's and NCCL's own majors
/// are below) needs a driver of CUDA N or newer (cuDriverGetVersion); a CUDA 13 library on a 12
/// driver loads, then fails at its first call. Without a driver, every file suits. When not,
/// `why` says so.
bool driver_allows(const std::string& name, std::string* why);

}  // namespace kiln::cuda
