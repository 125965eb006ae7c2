// runtime/ops/loops.cpp -- the strided walk under every elementwise kernel.
#include "runtime/ops/loops.h"

#include <cstdint>
#include <cstring>
#include <limits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <type_traits>
#include <utility>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/loop_layout.h"
#include "runtime/parallel.h"

namespace kiln {

Dims broadcast_byte_strides(const Tensor& t, const Dims& shape) {
  Dims s = broadcast_strides(t.shape(), t.strides(), shape, "broadcast");
  for (int64_t& v : s) v *= dtype_size(t.dtype());
  return s;
}

namespace {

// Drops size-1 dims and merges neighbours that are contiguous for every operand; at least one
// dim remains.
void coalesce(Dims& shape, StridedOperands& ops) {
  merge_dims(shape, std::span<Dims>(ops.strides, static_cast<size_t>(ops.count)));
  if (shape.empty()) {
    shape.push_back(1);
    for (int k = 0; k < ops.count; ++k) ops.strides[k].push_back(0);
  }
}

}  // namespace

void for_each_row(const Dims& shape_in, const StridedOperands& ops_in, int64_t grain, RowFn fn, void* ctx) {
  if (shape_in.product() == 0) return;
  Dims shape = shape_in;
  StridedOperands ops = ops_in;
  coalesce(shape, ops);
  size_t r = shape.size();
  int64_t n = shape[r - 1];
  int64_t rows = shape.product() / n;
  int64_t inner[kMaxOperands];
  for (int k = 0; k < ops.count; ++k) inner[k] = ops.strides[k][r - 1];
  if (rows == 1) {
    if (n <= grain) return fn(ctx, ops.base, inner, n);
    // One long row: split it.
    parallel_for(0, n, grain, [&](int64_t b, int64_t e) {
      char* p[kMaxOperands];
      for (int k = 0; k < ops.count; ++k) p[k] = ops.base[k] + b * inner[k];
      fn(ctx, p, inner, e - b);
    });
    return;
  }
  int64_t row_grain = std::max<int64_t>(1, grain / n);
  parallel_for(0, rows, row_grain, [&](int64_t b, int64_t e) {
    // Multi-index of row b over the outer dims, then step it like an odometer.
    Dims idx(r - 1, 0);
    int64_t rem = b;
    for (size_t d = r - 1; d-- > 0;) {
      idx[d] = rem % shape[d];
      rem /= shape[d];
    }
    char* p[kMaxOperands];
    for (int k = 0; k < ops.count; ++k) {
      p[k] = ops.base[k];
      for (size_t d = 0; d + 1 < r; ++d) p[k] += idx[d] * ops.strides[k][d];
    }
    for (int64_t row = b; row < e; ++row) {
      fn(ctx, p, inner, n);
      for (size_t d = r - 1; d-- > 0;) {
        for (int k = 0; k < ops.count; ++k) p[k] += ops.strides[k][d];
        if (++idx[d] < shape[d]) break;
        for (int k = 0; k < ops.count; ++k) p[k] -= ops.strides[k][d] * shape[d];
        idx[d] = 0;
      }
    }
  });
}

namespace {

template <class S, class D> void convert_typed(const char* src, int64_t ss, char* dst, int64_t ds, int64_t n) {
  auto one = [](const char* s, char* d) {
    S v;
    std::memcpy(&v, s, sizeof(S));
    auto value = [](S x) {  // f16 and bf16 are read as float
      if constexpr (kIsHalf<S>) return static_cast<float>(x);
      else return x;
    };
    D out;
    constexpr CastKind kind = cast_kind(dtype_of<S>(), dtype_of<D>());
    if constexpr (kind == CastKind::Same) {
      out = v;
    } else if constexpr (kind == CastKind::ToBool) {
      out = value(v) != 0;
    } else if constexpr (kind == CastKind::FloatToInt) {
      double x = static_cast<double>(value(v));
      if (!(x == x)) out = D(0);
      else if (x <= static_cast<double>(std::numeric_limits<D>::lowest())) out = std::numeric_limits<D>::lowest();
      else if (x >= static_cast<double>(std::numeric_limits<D>::max())) out = std::numeric_limits<D>::max();
      else out = static_cast<D>(value(v));
    } else if constexpr (kIsHalf<D>) {  // FloatToFloat, IntToFloat, FromBool: through f32
      out = D(static_cast<float>(value(v)));
    } else {  // FloatToFloat, IntToFloat, FromBool, IntToInt: C++'s conversions are the rule
      out = static_cast<D>(value(v));
    }
    std::memcpy(d, &out, sizeof(D));
  };
  if (ss == sizeof(S) && ds == sizeof(D)) {
    for (int64_t i = 0; i < n; ++i) one(src + i * int64_t(sizeof(S)), dst + i * int64_t(sizeof(D)));
  } else {
    for (int64_t i = 0; i < n; ++i) one(src + i * ss, dst + i * ds);
  }
}

}  // namespace

void convert(const char* src, int64_t ss, DType st, char* dst, int64_t ds, DType dt, int64_t n) {
  if (st == dt) {
    int64_t es = dtype_size(st);
    if (ss == es && ds == es) {
      std::memcpy(dst, src, static_cast<size_t>(n * es));
      return;
    }
    if (ss == 0 && ds == es && es == 4) {  // broadcast fill
      uint32_t v;
      std::memcpy(&v, src, 4);
      auto* d = reinterpret_cast<uint32_t*>(dst);
      for (int64_t i = 0; i < n; ++i) std::memcpy(d + i, &v, 4);
      return;
    }
  }
  visit_dtype(st, [&](auto s) {
    visit_dtype(dt, [&](auto d) { convert_typed<decltype(s), decltype(d)>(src, ss, dst, ds, n); });
  });
}

bool has_internal_overlap(const Tensor& t) {
  if (t.numel() <= 1) return false;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.shape()[d] > 1 && t.strides()[d] == 0) return true;
  return false;
}

void check_no_internal_overlap(const Tensor& t, const char* op) {
  KILN_CHECK(!has_internal_overlap(t),
             "{}: unsupported operation: more than one element of the written-to tensor {} "
             "refers to a single memory location (it is expanded; clone() it first)",
             op, t.type().str());
}

namespace {

// The bytes [lo, hi) that t's elements span.
std::pair<const char*, const char*> byte_span(const Tensor& t) {
  const char* base = static_cast<const char*>(t.data_ptr());
  int64_t es = dtype_size(t.dtype()), lo = 0, hi = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t reach = (t.shape()[d] - 1) * t.strides()[d];
    (reach < 0 ? lo : hi) += reach;
  }
  return {base + lo * es, base + (hi + 1) * es};
}

}  // namespace

bool may_overlap(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || !a.has_storage() || !b.has_storage()) return false;
  auto [a_lo, a_hi] = byte_span(a);
  auto [b_lo, b_hi] = byte_span(b);
  return a_lo < b_hi && b_lo < a_hi;
}

namespace {

// Whether x, broadcast to out's shape, walks exactly out's elements in out's order.
bool same_elements(const Tensor& x, const Tensor& out) {
  return x.data_ptr() == out.data_ptr() && x.dtype() == out.dtype() &&
         broadcast_byte_strides(x, out.shape()) == broadcast_byte_strides(out, out.shape());
}

}  // namespace

Tensor readable_while_writing(const Tensor& x, const Tensor& out) {
  if (!may_overlap(x, out) || same_elements(x, out)) return x;
  // Reading x while out is written would see some elements already overwritten.
  Tensor copy = Tensor::empty({x.dtype(), x.shape(), x.device()});
  copy_into(x, copy);
  return copy;
}

void copy_into(const Tensor& src_in, const Tensor& dst) {
  KILN_CHECK(src_in.dim() <= dst.dim(), "copy: cannot copy {} into {}", src_in.type().str(), dst.type().str());
  Dims shape = dst.shape();
  KILN_CHECK(broadcast_shapes(src_in.shape(), shape, "copy") == shape, "copy: cannot broadcast {} to {}",
             src_in.type().str(), dst.type().str());
  check_no_internal_overlap(dst, "copy");
  if (may_overlap(src_in, dst) && same_elements(src_in, dst)) return;  // already there
  Tensor src = readable_while_writing(src_in, dst);
  StridedOperands ops;
  ops.count = 2;
  ops.base[0] = static_cast<char*>(dst.data_ptr());
  ops.base[1] = static_cast<char*>(src.data_ptr());
  ops.strides[0] = broadcast_byte_strides(dst, shape);
  ops.strides[1] = broadcast_byte_strides(src, shape);
  struct Ctx {
    DType s, d;
  } ctx{src.dtype(), dst.dtype()};
  for_each_row(
      shape, ops, kParallelGrain,
      [](void* c, char* const* p, const int64_t* st, int64_t n) {
        auto* x = static_cast<Ctx*>(c);
        convert(p[1], st[1], x->s, p[0], st[0], x->d, n);
      },
      &ctx);
}

namespace {

// Streaming zeros over [p, p + bytes): an unaligned head and tail by memset.
void stream_zero(char* p, int64_t bytes) {
#if defined(__SSE2__)
  char* end = p + bytes;
  char* a = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t{15});
  if (a >= end) return static_cast<void>(std::memset(p, 0, static_cast<size_t>(bytes)));
  std::memset(p, 0, static_cast<size_t>(a - p));
  __m128i z = _mm_setzero_si128();
  for (; a + 16 <= end; a += 16) _mm_stream_si128(reinterpret_cast<__m128i*>(a), z);
  std::memset(a, 0, static_cast<size_t>(end - a));
  _mm_sfence();
#else
  std::memset(p, 0, static_cast<size_t>(bytes));
#endif
}

constexpr int64_t kStreamingBytes = int64_t{16} << 20;  // half the L3 cache here

}  // namespace

void zero_bytes(void* p, int64_t bytes) {
  char* base = static_cast<char*>(p);
  bool stream = bytes >= kStreamingBytes;
  parallel_for(0, bytes, int64_t{1} << 20, [&](int64_t b, int64_t e) {
    if (stream) stream_zero(base + b, e - b);
    else std::memset(base + b, 0, static_cast<size_t>(e - b));
  });
}

}  // namespace kiln
