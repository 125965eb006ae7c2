// runtime/simd/kernels.h -- contiguous inner loops, compiled once per instruction set.
//
// runtime/simd/kernels_isa.cpp is built three times (baseline, AVX2+FMA, AVX-512) into
// namespaces isa_scalar, isa_avx2 and isa_avx512; kernels() returns the table of the best set
// this CPU runs (KILN_ISA=scalar|avx2 lowers it, for testing; it never raises it). The loops only see
// contiguous operands of one compute dtype; runtime/ops/*.cpp handle strides, broadcasting,
// conversions and threads.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/op.h"

namespace kiln::simd {

/// out[i] = f(in[0][i], in[1][i], ...) for i < n. `out` has the compute dtype, or bool (one
/// byte, 0 or 1) for comparisons and logical ops. Bit k of `broadcast` set: operand k is one
/// element used for every i (a number, or a dim broadcast along the row).
using PointwiseFn = void (*)(int64_t n, void* out, const void* const* in, uint32_t broadcast);

enum class ReduceKind : uint8_t { Sum, Prod, Max, Min };
inline constexpr int kNumReduceKinds = 4;
/// The op list's name for a kind (runtime/op.h), whose rules (identity, accumulator) apply.
constexpr Combine combine_of(ReduceKind k) {
  switch (k) {
    case ReduceKind::Sum: return Combine::Sum;
    case ReduceKind::Prod: return Combine::Prod;
    case ReduceKind::Max: return Combine::Max;
    case ReduceKind::Min: return Combine::Min;
  }
  return Combine::None;
}
/// Reduces n contiguous elements of x into *acc (combining with what *acc holds).
using ReduceRowFn = void (*)(int64_t n, const void* x, void* acc);
/// acc[j] = acc[j] (op) x[i * row_stride + j] for i < rows, j < cols: a reduction over an
/// outer axis, vectorized along the contiguous inner one.
using ReduceColsFn = void (*)(int64_t rows, int64_t cols, const void* x, int64_t row_stride, void* acc);

/// Philox 4x32-10 (runtime/random.cpp's generator): the four words of counters first ..
/// first + n - 1 under key `seed`, word by word: word w of counter first + i at out[w * n + i].
using PhiloxFn = void (*)(uint64_t seed, uint64_t first, int64_t n, uint32_t* out);

struct KernelTable {
  const char* isa = "";
  PhiloxFn philox = nullptr;
  PointwiseFn pointwise[kNumOps][kNumDTypes] = {};           // null: op doesn't compute in dtype
  ReduceRowFn reduce_row[kNumReduceKinds][kNumDTypes] = {};  // f32, f64, i64 only
  ReduceColsFn reduce_cols[kNumReduceKinds][kNumDTypes] = {};
};

/// The table for the best instruction set this CPU supports.
const KernelTable& kernels();

namespace isa_scalar {
void fill(KernelTable& t);
}
namespace isa_avx2 {
void fill(KernelTable& t);
}
namespace isa_avx512 {
void fill(KernelTable& t);
}

}  // namespace kiln::simd
