// codegen/cuda/random.h -- rand and randn on CUDA: the CPU's Philox 4x32-10 streams
// (runtime/random.cpp), so a seed draws the same numbers on every device. Value i takes the
// words of counter offset + i / k (k values per counter: 4 for rand, 2 for f64 rand, 1 for
// randn) and turns them into a number as the CPU does: the top bits of a word times a power of
// two for rand, Box-Muller in double for randn (CUDA's log and cos, within an ulp or two of
// the host's libm).
#pragma once

#include <string>

#include "runtime/dtype.h"

namespace kiln::codegen {

/// Argument struct (64-bit words): n (values), state (the device's i64[2]: seed, first
/// counter), out (contiguous, dtype t).
std::string cuda_rand_kernel(DType t);
/// The device functions the draws use, for other kernels that draw (codegen/cuda/attention.h):
/// kiln_philox(seed, counter, words[4]) and kiln_uniform53(hi, lo).
std::string cuda_philox_source();
std::string cuda_randn_kernel(DType t);

}  // namespace kiln::codegen
