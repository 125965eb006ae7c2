// runtime/dlpack.h -- tensors shared with other libraries, without a copy, through DLPack
// (the version Debian ships, 0.6). The device travels in the tensor: kiln's CPU tensors are
// kDLCPU, CUDA ones kDLCUDA.
#pragma once

#include "runtime/tensor.h"

struct DLManagedTensor;  // <dlpack/dlpack.h>; only a caller that reads its fields includes it

namespace kiln {

/// A DLPack view of t's memory (no copy): shape, strides (in elements) and dtype as t has
/// them, data pointing at element [0,...,0]. The capsule keeps t's storage alive until the
/// consumer calls its deleter, exactly once. Throws for a tensor that requires grad (export
/// t.detach()), for one without data (while tracing), and for bool, which DLPack 0.6 cannot
/// express (kDLBool came in 0.8; export t.to(u8)).
DLManagedTensor* to_dlpack(const Tensor& t);

/// A tensor viewing a DLPack tensor's memory (no copy); writes through either are seen by both.
/// Takes ownership of `m`: its deleter runs exactly once, when the last view of the result
/// goes, or before from_dlpack returns when it throws. Every field is checked: the device
/// (CPU; CUDA memory needs kiln's CUDA backend), the dtype (f16/bf16/f32/f64, i32/i64, u8;
/// one lane), the sizes and strides (none negative; null strides mean row-major), the
/// alignment and the extent (it must fit in memory).
Tensor from_dlpack(DLManagedTensor* m);

}  // namespace kiln
