// jit/cuda_group.h -- a fused group run as a CUDA kernel (codegen/cuda), compiled through the
// kernel cache and queued on the current stream. Eager ops on CUDA run through it as groups of
// one op (jit/cuda_eager.cpp).
#pragma once

#include <span>

#include "ir/graph.h"

namespace kiln::jit {

/// Runs `fused`'s body over `inputs` (on one CUDA device, any strides; broadcast to the group's
/// domain) into `outputs` (fresh, contiguous, on that device). `eager` compiles a kernel that
/// fits more calls: its pointwise numbers and every stride are arguments, not part of its text
/// (codegen::CudaEmitOptions), so an eager op compiles once per op, dtypes and loop rank.
void run_group_cuda(const ir::Node& fused, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                    bool eager);

}  // namespace kiln::jit
