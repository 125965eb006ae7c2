// tests/cuda/host_env.cpp -- points this test binary at the host CUDA (tests/cuda/host) before
// anything loads a driver: KILN_CUDA_DRIVER, KILN_CUDA_NVRTC, KILN_CUDA_CUBLAS,
// KILN_CUDA_CUBLASLT, KILN_CUDA_CUDNN, KILN_CUDA_NCCL and KILN_CUDA_CUPTI name libkiln_host_cuda.so and its driver
// delays each queued task by 100 us, unless the environment already sets them (ctest cuda_unavailable names a missing
// driver; cuda_nvrtc sets KILN_CUDA_NVRTC empty for the toolkit's NVRTC).
#include <cstdlib>

#ifndef KILN_HOST_CUDA_LIB
#error "KILN_HOST_CUDA_LIB (the path of libkiln_host_cuda.so) must be defined"
#endif

namespace {

const bool g_set = [] {
  setenv("KILN_CUDA_DRIVER", KILN_HOST_CUDA_LIB, 0);
  setenv("KILN_CUDA_NVRTC", KILN_HOST_CUDA_LIB, 0);
  setenv("KILN_CUDA_CUBLAS", KILN_HOST_CUDA_LIB, 0);
  setenv("KILN_CUDA_CUBLASLT", KILN_HOST_CUDA_LIB, 0);
  setenv("KILN_CUDA_CUDNN", KILN_HOST_CUDA_LIB, 0);
  setenv("KILN_CUDA_NCCL", KILN_HOST_CUDA_LIB, 0);
  setenv("KILN_CUDA_CUPTI", KILN_HOST_CUDA_LIB, 0);
  setenv("KILN_HOST_CUDA_DELAY_US", "100", 0);
  return true;
}();

}  // namespace
