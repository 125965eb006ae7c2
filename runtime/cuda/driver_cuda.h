// runtime/cuda/driver_cuda.h -- the CUDA driver API, loaded at run time with dlopen
// (libcuda.so.1, or the file KILN_CUDA_DRIVER names: the tests' host CUDA), so that one build
// of kiln runs on machines without a GPU or a driver and says why CUDA is unavailable. The
// function pointers have the types cuda.h declares and the versioned names it maps them to
// (cuMemAlloc is cuMemAlloc_v2). Internal; only CUDA files (named *cuda*) include it.
#pragma once

#include <cuda.h>

#include <string>

namespace kiln::cuda {

// Every driver function kiln calls, once.
// clang-format off: one entry a line (the formatter would stair-step them)
#define KILN_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuInit)                           \
  X(cuDriverGetVersion)               \
  X(cuGetErrorName)                   \
  X(cuGetErrorString)                 \
  X(cuDeviceGetCount)                 \
  X(cuDeviceGet)                      \
  X(cuDeviceGetName)                  \
  X(cuDeviceGetAttribute)             \
  X(cuDeviceTotalMem)                 \
  X(cuDevicePrimaryCtxRetain)         \
  X(cuCtxSetCurrent)                  \
  X(cuCtxGetCurrent)                  \
  X(cuCtxSynchronize)                 \
  X(cuMemAlloc)                       \
  X(cuMemFree)                        \
  X(cuMemGetInfo)                     \
  X(cuMemHostAlloc)                   \
  X(cuMemFreeHost)                    \
  X(cuMemcpyHtoDAsync)                \
  X(cuMemcpyDtoHAsync)                \
  X(cuMemcpyDtoDAsync)                \
  X(cuMemsetD8Async)                  \
  X(cuMemsetD16Async)                 \
  X(cuMemsetD32Async)                 \
  X(cuMemsetD2D32Async)               \
  X(cuStreamCreateWithPriority)       \
  X(cuStreamSynchronize)              \
  X(cuStreamWaitEvent)                \
  X(cuStreamQuery)                    \
  X(cuEventCreate)                    \
  X(cuEventDestroy)                   \
  X(cuEventRecord)                    \
  X(cuEventSynchronize)               \
  X(cuEventQuery)                     \
  X(cuEventElapsedTime)               \
  X(cuModuleLoadData)                 \
  X(cuModuleUnload)                   \
  X(cuModuleGetFunction)              \
  X(cuLaunchKernel)                   \
  X(cuFuncSetAttribute)               \
  X(cuStreamBeginCapture)             \
  X(cuStreamEndCapture)               \
  X(cuGraphInstantiate)               \
  X(cuGraphLaunch)                    \
  X(cuGraphExecDestroy)               \
  X(cuGraphDestroy)
// clang-format on

struct Driver {
#define KILN_CUDA_DECLARE(fn) decltype(&::fn) fn = nullptr;
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_DECLARE)
#undef KILN_CUDA_DECLARE
};

/// The loaded driver, initialized (cuInit), with at least one device; nullptr when there is
/// none, and then unavailable_reason() says why. Loaded once, on first use.
const Driver* driver();

/// The driver, or a kiln::Error naming `what` and why CUDA is unavailable.
const Driver& require_driver(const char* what);

/// Throws kiln::Error "cuda: <call> failed: CUDA_ERROR_... (<description>)" unless r is
/// CUDA_SUCCESS; a CUDA_ERROR_OUT_OF_MEMORY is a kiln::OutOfMemory.
void check(CUresult r, const char* call);

}  // namespace kiln::cuda
