// cuda/cudnn_cuda.h -- cuDNN 9, loaded with dlopen (KILN_CUDA_CUDNN, else libcudnn.so.9
// on the library path or in /usr/local/cuda), as the CUDA files that call it share it: its
// function table, a handle per device and thread, errors that name the op, descriptors' types.
// The convolutions (conv_cuda.cpp) need the core calls; the recurrent networks (rnn_cuda.cpp)
// also those of cudnn_adv, loaded as a second group so a cuDNN without them still convolves.
// Internal to the CUDA files.
#pragma once

#include <cudnn.h>

#include <string>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace kiln::cuda {

// clang-format off: one entry a line (the formatter would stair-step them)
#define KILN_CUDNN_CORE_FUNCTIONS(X)                \
  X(cudnnCreate)                                    \
  X(cudnnSetStream)                                 \
  X(cudnnGetErrorString)                            \
  X(cudnnGetVersion)                                \
  X(cudnnCreateTensorDescriptor)                    \
  X(cudnnSetTensor4dDescriptorEx)                   \
  X(cudnnDestroyTensorDescriptor)                   \
  X(cudnnCreateFilterDescriptor)                    \
  X(cudnnSetFilter4dDescriptor)                     \
  X(cudnnDestroyFilterDescriptor)                   \
  X(cudnnCreateConvolutionDescriptor)               \
  X(cudnnSetConvolution2dDescriptor)                \
  X(cudnnSetConvolutionGroupCount)                  \
  X(cudnnSetConvolutionMathType)                    \
  X(cudnnDestroyConvolutionDescriptor)              \
  X(cudnnGetConvolutionForwardAlgorithm_v7)         \
  X(cudnnGetConvolutionForwardWorkspaceSize)        \
  X(cudnnConvolutionForward)                        \
  X(cudnnFindConvolutionForwardAlgorithmEx)         \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7)    \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize)   \
  X(cudnnConvolutionBackwardData)                   \
  X(cudnnFindConvolutionBackwardDataAlgorithmEx)    \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)  \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize) \
  X(cudnnConvolutionBackwardFilter)                 \
  X(cudnnFindConvolutionBackwardFilterAlgorithmEx)
// clang-format on

// clang-format off: one entry a line (the formatter would stair-step them)
#define KILN_CUDNN_RNN_FUNCTIONS(X) \
  X(cudnnSetTensorNdDescriptor)     \
  X(cudnnCreateDropoutDescriptor)   \
  X(cudnnDestroyDropoutDescriptor)  \
  X(cudnnSetDropoutDescriptor)      \
  X(cudnnCreateRNNDescriptor)       \
  X(cudnnDestroyRNNDescriptor)      \
  X(cudnnSetRNNDescriptor_v8)       \
  X(cudnnGetRNNWeightSpaceSize)     \
  X(cudnnGetRNNWeightParams)        \
  X(cudnnCreateRNNDataDescriptor)   \
  X(cudnnDestroyRNNDataDescriptor)  \
  X(cudnnSetRNNDataDescriptor)      \
  X(cudnnGetRNNTempSpaceSizes)      \
  X(cudnnRNNForward)                \
  X(cudnnRNNBackwardData_v8)        \
  X(cudnnRNNBackwardWeights_v8)
// clang-format on

struct Cudnn {
#define KILN_CUDNN_DECLARE(fn) decltype(&::fn) fn = nullptr;
  KILN_CUDNN_CORE_FUNCTIONS(KILN_CUDNN_DECLARE)
  KILN_CUDNN_RNN_FUNCTIONS(KILN_CUDNN_DECLARE)
#undef KILN_CUDNN_DECLARE
  bool ok = false;      // the core calls loaded
  bool rnn_ok = false;  // and the RNN calls
  std::string reason, rnn_reason;
};

/// The process's cuDNN, loaded on first use.
const Cudnn& cudnn();

/// Throws kiln::Error "<op>: cuDNN's <call> failed: ..." unless `s` is success.
void check_dnn(cudnnStatus_t s, const char* call, const std::string& op);

/// The calling thread's handle on `device`, bound to the device and to its current stream.
cudnnHandle_t dnn_handle(int device, const std::string& op);

/// cuDNN's name of a float dtype; a kiln::Error naming `op` for any other.
cudnnDataType_t dnn_data_type(DType t, const std::string& op);

/// `v` as the int cuDNN takes; a kiln::Error naming `op` when it does not fit.
int fits_dnn(int64_t v, const std::string& op);

/// Workspace from the device's caching allocator, held for the call (freed in stream order).
struct Workspace {
  Tensor t;
  void* ptr = nullptr;
  size_t bytes = 0;
  Workspace(size_t size, Device device) : bytes(size) {
    if (bytes == 0) return;
    t = Tensor::empty({DType::U8, {static_cast<int64_t>(bytes)}, device});
    ptr = t.data_ptr();
  }
};

}  // namespace kiln::cuda
