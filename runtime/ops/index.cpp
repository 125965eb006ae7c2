// runtime/ops/index.cpp -- gather, index_select, scatter_add, index_add: reads and writes at
// positions held in a tensor.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/loops.h"
#include "runtime/parallel.h"
#include "runtime/simd/kernels.h"

namespace kiln {
namespace {

TensorType gather_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor &x = in[0], &idx = in[1];
  KILN_CHECK(is_integral(idx.dtype()), "gather: index must be an integer tensor, got {}", idx.type().str());
  KILN_CHECK(idx.dim() == x.dim(), "gather: index {} must have the rank of input {}", idx.type().str(), x.type().str());
  KILN_CHECK(a.dim >= 0 && a.dim < std::max<int64_t>(x.dim(), 1), "gather: dim {} is out of range for {}", a.dim,
             x.type().str());
  for (int64_t d = 0; d < x.dim(); ++d)
    KILN_CHECK(d == a.dim || idx.shape()[d] <= x.shape()[d], "gather: index {} is larger than input {} in dim {}",
               idx.type().str(), x.type().str(), d);
  return {x.dtype(), idx.shape(), x.device()};
}

TensorType scatter_add_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor &x = in[0], &idx = in[1], &src = in[2];
  KILN_CHECK(is_integral(idx.dtype()), "scatter_add: index must be an integer tensor, got {}", idx.type().str());
  KILN_CHECK(src.dtype() == x.dtype(), "scatter_add: src {} must have the dtype of input {}", src.type().str(),
             x.type().str());
  KILN_CHECK(idx.shape() == src.shape() && idx.dim() == x.dim(),
             "scatter_add: index {} and src {} must have one shape, of the rank of input {}", idx.type().str(),
             src.type().str(), x.type().str());
  KILN_CHECK(a.dim >= 0 && a.dim < std::max<int64_t>(x.dim(), 1), "scatter_add: dim {} is out of range for {}", a.dim,
             x.type().str());
  for (int64_t d = 0; d < x.dim(); ++d)
    KILN_CHECK(d == a.dim || idx.shape()[d] <= x.shape()[d], "scatter_add: index {} is larger than input {} in dim {}",
               idx.type().str(), x.type().str(), d);
  return x.type();
}

TensorType index_select_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor &x = in[0], &idx = in[1];
  KILN_CHECK(is_integral(idx.dtype()) && idx.dim() <= 1, "index_select: index must be a 1-d integer tensor, got {}",
             idx.type().str());
  KILN_CHECK(x.dim() > 0 && a.dim >= 0 && a.dim < x.dim(), "index_select: dim {} is out of range for {}", a.dim,
             x.type().str());
  Dims shape = x.shape();
  shape[a.dim] = idx.numel();
  return {x.dtype(), shape, x.device()};
}

// Reads index element k at `p` as an int64 (checked against the dim size).
int64_t read_index(const char* p, DType t, int64_t size, const char* op) {
  int64_t k;
  if (t == DType::I64) {
    int64_t v;
    std::memcpy(&v, p, 8);
    k = v;
  } else if (t == DType::I32) {
    int32_t v;
    std::memcpy(&v, p, 4);
    k = v;
  } else {
    k = *reinterpret_cast<const uint8_t*>(p);
  }
  KILN_CHECK(k >= -size && k < size, "{}: index {} is out of range for a dim of size {}", op, k, size);
  return k < 0 ? k + size : k;
}

struct PickCtx {
  int64_t elem;        // bytes per element
  int64_t dim_stride;  // bytes between entries of x along dim
  int64_t dim_size;
  DType index_type;
  const char* op;
};

// Operands: 0 = out, 1 = x with stride 0 along dim, 2 = index.
void pick_row(void* c, char* const* p, const int64_t* st, int64_t n) {
  const auto& x = *static_cast<const PickCtx*>(c);
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = read_index(p[2] + i * st[2], x.index_type, x.dim_size, x.op);
    std::memcpy(p[0] + i * st[0], p[1] + i * st[1] + k * x.dim_stride, static_cast<size_t>(x.elem));
  }
}

void pick(const Tensor& x, int64_t dim, const Tensor& idx, Dims idx_strides, const Tensor& out, const char* op) {
  const Dims& shape = out.shape();
  StridedOperands ops;
  ops.count = 3;
  ops.base[0] = static_cast<char*>(out.data_ptr());
  ops.strides[0] = broadcast_byte_strides(out, shape);
  ops.base[1] = static_cast<char*>(x.data_ptr());
  ops.strides[1] = Dims(shape.size(), 0);
  int64_t es = dtype_size(x.dtype());
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) ops.strides[1][d] = x.strides()[d] * es;
  ops.base[2] = static_cast<char*>(idx.data_ptr());
  ops.strides[2] = std::move(idx_strides);
  PickCtx ctx{es, x.dim() == 0 ? 0 : x.strides()[dim] * es, x.dim() == 0 ? 1 : x.shape()[dim], idx.dtype(), op};
  for_each_row(shape, ops, kParallelGrain, pick_row, &ctx);
}

// ---- scatter_add and index_add -----------------------------------------------------------
//
// Both add src into a copy of x at positions an index names along `dim`. Positions that differ
// in any other dim never collide, so the work splits over those (blocks of the innermost of
// them) and each block adds its sources in index order, serially: the result has the same bits
// on any number of threads, and the innermost loop runs over contiguous rows.

// The loop over src's positions: `dim` (n entries, read serially) and the other dims, merged
// where every operand allows, the last of them split into blocks. Strides in elements.
struct ScatterPlan {
  int64_t n = 1, dim_size = 1;
  int64_t out_dim = 0, src_dim = 0, idx_dim = 0;  // strides along dim
  Dims sizes, out_st, src_st, idx_st;             // the other dims; the last is split
  int64_t block = 1, blocks = 1, units = 1;       // units = (other positions) x blocks
};

ScatterPlan plan_scatter(const Dims& shape, int64_t dim, const Dims& out_st, const Dims& src_st, const Dims& idx_st,
                         int64_t dim_size, int64_t elem_size) {
  ScatterPlan p;
  int64_t r = static_cast<int64_t>(shape.size());
  p.dim_size = dim_size;
  if (r > 0) {
    p.n = shape[dim];
    p.out_dim = out_st[dim], p.src_dim = src_st[dim], p.idx_dim = idx_st[dim];
  }
  for (int64_t d = 0; d < r; ++d) {
    if (d == dim || shape[d] == 1) continue;
    if (!p.sizes.empty() && p.out_st.back() == out_st[d] * shape[d] && p.src_st.back() == src_st[d] * shape[d] &&
        p.idx_st.back() == idx_st[d] * shape[d]) {
      p.sizes.back() *= shape[d];
      p.out_st.back() = out_st[d], p.src_st.back() = src_st[d], p.idx_st.back() = idx_st[d];
      continue;
    }
    p.sizes.push_back(shape[d]);
    p.out_st.push_back(out_st[d]), p.src_st.push_back(src_st[d]), p.idx_st.push_back(idx_st[d]);
  }
  if (p.sizes.empty()) p.sizes = {1}, p.out_st = {0}, p.src_st = {0}, p.idx_st = {0};
  int64_t vec = p.sizes.back(), outer = p.sizes.product() / vec;
  // Rows contiguous in out are split into cache-line multiples only as far as the threads
  // need; otherwise (dim is out's last) each position is its own unit.
  int64_t line = std::max<int64_t>(1, 64 / elem_size), want = 4 * int64_t{num_threads()};
  p.block = p.out_st.back() == 1 ? vec : 1;
  if (p.block > line && outer < want) {
    int64_t parts = std::min((want + outer - 1) / outer, (vec + line - 1) / line);
    p.block = ((vec + parts - 1) / parts + line - 1) / line * line;
  }
  p.blocks = (vec + p.block - 1) / p.block;
  p.units = outer * p.blocks;
  return p;
}

[[gnu::noinline, gnu::cold]] void reject_index(int64_t k, int64_t size, const char* op) {
  KILN_CHECK(k >= -size && k < size, "{}: index {} is out of range for a dim of size {}", op, k, size);
}

// Index value v as a position in [0, size); the error path stays out of the inner loops.
template <class I> inline int64_t checked_index(I v, int64_t size, const char* op) {
  int64_t k = static_cast<int64_t>(v);
  if (static_cast<uint64_t>(k + size) >= static_cast<uint64_t>(2 * size)) [[unlikely]]
    reject_index(k, size, op);
  return k < 0 ? k + size : k;
}

// a += b; integers wrap (as u8 does everywhere), bool is "any".
template <class T> void accumulate(T& a, T b) {
  if constexpr (std::is_same_v<T, bool>) a = a || b;
  else if constexpr (std::is_integral_v<T>)
    a = static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) + static_cast<std::make_unsigned_t<T>>(b));
  else a += b;
}

// One unit: `len` positions along the split dim, every index entry in order.
template <class T, class I> void scatter_unit(const ScatterPlan& p, T* out, const T* src, const I* idx, int64_t len,
                                              simd::PointwiseFn add_row, const char* op) {
  const int64_t n = p.n, size = p.dim_size, od = p.out_dim, sd = p.src_dim, id = p.idx_dim;
  const int64_t os = p.out_st.back(), ss = p.src_st.back(), is = p.idx_st.back();
  if (len == 1) {  // dim is out's innermost (a gather's gradient): one row, entry by entry
    if (od == 1 && sd == 1 && id == 1) {
      for (int64_t j = 0; j < n; ++j) accumulate(out[checked_index(idx[j], size, op)], src[j]);
    } else {
      for (int64_t j = 0; j < n; ++j) accumulate(out[checked_index(idx[j * id], size, op) * od], src[j * sd]);
    }
    return;
  }
  if (is == 0) {  // one index per entry (index_add, or an index expanded along the row)
    bool rows = add_row && os == 1 && ss == 1;
    for (int64_t j = 0; j < n; ++j) {
      T* o = out + checked_index(idx[j * id], size, op) * od;
      const T* s = src + j * sd;
      if (rows) {
        const void* operands[2] = {o, s};
        add_row(len, o, operands, 0);
      } else {
        for (int64_t i = 0; i < len; ++i) accumulate(o[i * os], s[i * ss]);
      }
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < len; ++i)
      accumulate(out[checked_index(idx[j * id + i * is], size, op) * od + i * os], src[j * sd + i * ss]);
}

// Units [u0, u1): the multi-index of u0 once, then an odometer.
// With `clear_rows`, each unit first zeroes its own row of `out` (dim contiguous in out, one
// unit per row): the row is still in cache when the adds land, where a separate clear of the
// whole of `out` would have left it in memory.
template <class T, class I> void scatter_units(const ScatterPlan& p, T* out, const T* src, const I* idx, int64_t u0,
                                               int64_t u1, const char* op, bool clear_rows) {
  simd::PointwiseFn add_row = simd::kernels().pointwise[int(OpId::Add)][int(dtype_of<T>())];
  size_t last = p.sizes.size() - 1;
  Dims count = p.sizes, m(p.sizes.size(), 0);
  count[last] = p.blocks;
  Dims ost = p.out_st, sst = p.src_st, ist = p.idx_st;
  ost[last] *= p.block, sst[last] *= p.block, ist[last] *= p.block;
  int64_t oo = 0, so = 0, io = 0;
  for (size_t d = last + 1, rem = static_cast<size_t>(u0); d-- > 0;) {
    m[d] = static_cast<int64_t>(rem) % count[d];
    rem /= static_cast<size_t>(count[d]);
    oo += m[d] * ost[d], so += m[d] * sst[d], io += m[d] * ist[d];
  }
  for (int64_t u = u0; u < u1; ++u) {
    int64_t len = std::min(p.block, p.sizes[last] - m[last] * p.block);
    if (clear_rows) std::memset(out + oo, 0, static_cast<size_t>(p.dim_size) * sizeof(T));
    scatter_unit(p, out + oo, src + so, idx + io, len, add_row, op);
    for (size_t d = last + 1; d-- > 0;) {
      oo += ost[d], so += sst[d], io += ist[d];
      if (++m[d] < count[d]) break;
      oo -= ost[d] * count[d], so -= sst[d] * count[d], io -= ist[d] * count[d];
      m[d] = 0;
    }
  }
}

void clear(const Tensor& out) { zero_bytes(out.data_ptr(), out.numel() * dtype_size(out.dtype())); }

// Adds src into `out` (contiguous) along dim at the positions of the index whose element
// strides over src's shape are `idx_st` (0 where it is the same for all). `out` holds x, or
// with `from_zero` is to start from zeros: cleared row by row as the scatter reaches each row
// when every row of out is one unit's (as for a gather's gradient), else cleared first.
void scatter_into(const Tensor& out, int64_t dim, const Tensor& idx, const Dims& idx_st, const Tensor& src,
                  const char* op, bool from_zero) {
  if (src.numel() == 0) {
    if (from_zero) clear(out);
    return;
  }
  if (is_float(out.dtype()) && dtype_size(out.dtype()) == 2) {  // f16, bf16: sum in f32
    Tensor acc = from_zero ? Tensor::empty({DType::F32, out.shape(), out.device()}) : out.to(DType::F32);
    scatter_into(acc, dim, idx, idx_st, src.to(DType::F32), op, from_zero);
    copy_into(acc, out);
    return;
  }
  if (idx.dtype() == DType::U8) {
    Tensor wide = idx.to(DType::I64);
    return scatter_into(out, dim, wide, idx_st, src, op, from_zero);
  }
  int64_t dim_size = out.dim() == 0 ? 1 : out.shape()[dim];
  ScatterPlan p =
      plan_scatter(src.shape(), dim, out.strides(), src.strides(), idx_st, dim_size, dtype_size(out.dtype()));
  bool rows = from_zero && out.dim() > 0 && p.block == 1 && p.out_dim == 1;
  for (int64_t d = 0; rows && d < out.dim(); ++d) rows = d == dim || src.shape()[d] == out.shape()[d];
  if (from_zero && !rows) clear(out);
  int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, p.n * p.block));
  visit_dtype(out.dtype(), [&](auto tv) {
    using T = decltype(tv);
    if constexpr (!kIsHalf<T>) {
      T* po = static_cast<T*>(out.data_ptr());
      const T* ps = static_cast<const T*>(src.data_ptr());
      auto run = [&](auto iv) {
        using I = decltype(iv);
        const I* pi = static_cast<const I*>(idx.data_ptr());
        parallel_for(0, p.units, grain,
                     [&](int64_t u0, int64_t u1) { scatter_units(p, po, ps, pi, u0, u1, op, rows); });
      };
      if (idx.dtype() == DType::I64) run(int64_t{});
      else run(int32_t{});
    }
  });
}

// Whether x is a broadcast zero, as the gradient rules pass (zeros_as): then the scatter starts
// from zeros instead of copying x.
bool is_broadcast_zero(const Tensor& x) {
  bool zero = x.numel() > 0 && x.has_storage();
  for (int64_t st : x.strides()) zero = zero && st == 0;
  const char* first = zero ? static_cast<const char*>(x.data_ptr()) : nullptr;
  for (int64_t b = 0; zero && b < dtype_size(x.dtype()); ++b) zero = first[b] == 0;
  return zero;
}

// out = x, then src added at the index's positions.
void scatter_from(const Tensor& x, const Tensor& out, int64_t dim, const Tensor& idx, const Dims& idx_st,
                  const Tensor& src, const char* op) {
  bool zero = is_broadcast_zero(x);
  if (!zero) copy_into(x, out);
  scatter_into(out, dim, idx, idx_st, src, op, zero);
}

void scatter_add_cpu(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  scatter_from(in[0], out, a.dim, in[1], in[1].strides(), in[2], "scatter_add");
}

// index_add from zeros where each out.select(dim, k) is one contiguous slice (no dims of size
// above 1 before dim), as for embedding's gradient: out is cleared (a streaming memset), the
// entries are bucketed by their slice (keeping index order within a slice), and each slice
// then gets its entries in one visit, slices in address order: a row of an embedding table's
// gradient is read from memory once, not once per column block and entry. Each slice sums in
// index order, so the bits are the generic path's, on any thread count.
template <class T, class I> void add_slices_from_zero(T* out, int64_t size, int64_t inner, const T* src, const I* idx,
                                                      int64_t idx_step, int64_t n) {
  std::vector<int64_t> start(static_cast<size_t>(size + 1), 0), dest(static_cast<size_t>(n)), order(dest.size());
  for (int64_t j = 0; j < n; ++j) {
    dest[j] = checked_index(idx[j * idx_step], size, "index_add");
    ++start[dest[j] + 1];
  }
  for (int64_t k = 0; k < size; ++k) start[k + 1] += start[k];
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  for (int64_t j = 0; j < n; ++j) order[next[dest[j]]++] = j;
  simd::PointwiseFn add_row = simd::kernels().pointwise[int(OpId::Add)][int(dtype_of<T>())];
  parallel_for(0, size, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)),
               [&](int64_t k0, int64_t k1) {
                 for (int64_t k = k0; k < k1; ++k) {
                   T* o = out + k * inner;
                   for (int64_t e = start[k]; e < start[k + 1]; ++e) {
                     const T* row = src + order[e] * inner;
                     if (add_row) {
                       const void* operands[2] = {o, row};
                       add_row(inner, o, operands, 0);
                     } else {
                       for (int64_t i = 0; i < inner; ++i) accumulate(o[i], row[i]);
                     }
                   }
                 }
               });
}

// Runs add_slices_from_zero when it applies; false otherwise.
bool index_add_slices(const Tensor& x, const Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src) {
  bool fits = is_broadcast_zero(x) && src.is_contiguous() && out.is_contiguous() && src.numel() > 0 &&
              !(is_float(out.dtype()) && dtype_size(out.dtype()) == 2) &&
              (idx.dtype() == DType::I64 || idx.dtype() == DType::I32);
  for (int64_t d = 0; fits && d < dim; ++d) fits = out.shape()[d] == 1;
  if (!fits) return false;
  clear(out);
  int64_t size = out.shape()[dim], inner = out.numel() / std::max<int64_t>(size, 1);
  int64_t n = src.numel() / std::max<int64_t>(inner, 1), step = idx.dim() == 0 ? 0 : idx.strides()[0];
  visit_dtype(out.dtype(), [&](auto tv) {
    using T = decltype(tv);
    if constexpr (!kIsHalf<T>) {
      T* po = static_cast<T*>(out.data_ptr());
      const T* ps = static_cast<const T*>(src.data_ptr());
      if (idx.dtype() == DType::I64)
        add_slices_from_zero(po, size, inner, ps, static_cast<const int64_t*>(idx.data_ptr()), step, n);
      else add_slices_from_zero(po, size, inner, ps, static_cast<const int32_t*>(idx.data_ptr()), step, n);
    }
  });
  return true;
}

void index_add_cpu(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  const Tensor &idx = in[1], &src = in[2];
  if (index_add_slices(in[0], out, a.dim, idx, src)) return;
  Dims st(static_cast<size_t>(src.dim()), 0);
  st[a.dim] = idx.dim() == 0 ? 0 : idx.strides()[0];
  scatter_from(in[0], out, a.dim, idx, st, src, "index_add");
}

TensorType index_add_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor &x = in[0], &idx = in[1], &src = in[2];
  KILN_CHECK(is_integral(idx.dtype()) && idx.dim() <= 1, "index_add: index must be a 1-d integer tensor, got {}",
             idx.type().str());
  KILN_CHECK(x.dim() > 0 && a.dim >= 0 && a.dim < x.dim(), "index_add: dim {} is out of range for {}", a.dim,
             x.type().str());
  KILN_CHECK(src.dtype() == x.dtype(), "index_add: src {} must have the dtype of input {}", src.type().str(),
             x.type().str());
  bool fits = src.dim() == x.dim() && src.shape()[a.dim] == idx.numel();
  for (int64_t d = 0; fits && d < x.dim(); ++d) fits = d == a.dim || src.shape()[d] == x.shape()[d];
  KILN_CHECK(fits, "index_add: src {} must be input {} with dim {} of the index's length {}", src.type().str(),
             x.type().str(), a.dim, idx.numel());
  return x.type();
}

// Zeros of type t in g's dtype, as a broadcast scalar: the scatter that follows copies it once.
Tensor zeros_as(const TensorType& t, const Tensor& g) { return zeros({}, g.dtype(), g.device()).expand(t.shape); }

}  // namespace

// scatter_add(x, index, src): x with src[i][j] added at [index[i][j]][j] along attrs.dim.
const OpDef defs::ScatterAdd{
    .infer = scatter_add_rule,
    .cpu = scatter_add_cpu,
    .vjp =
        [](const VjpArgs& a) {
          return Grads{a.grad, Tensor(), gather(a.grad, a.attrs.dim, a.in[1])};
        },
    .attrs = kAttrDim,
};

// index_add(x, index, src): x with src.select(attrs.dim, i) added at x.select(attrs.dim,
// index[i]) (torch.index_add); repeated indices accumulate, in index order.
const OpDef defs::IndexAdd{
    .infer = index_add_rule,
    .cpu = index_add_cpu,
    .vjp =
        [](const VjpArgs& a) {
          return Grads{a.grad, Tensor(), index_select(a.grad, a.attrs.dim, a.in[1])};
        },
    .attrs = kAttrDim,
};

// gather(x, index): out[i][j] = x[index[i][j]][j] along attrs.dim (torch.gather); negative
// indices count from the end; out-of-range ones throw.
const OpDef defs::Gather{
    .infer = gather_rule,
    .cpu =
        [](OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
          const Tensor& idx = in[1];
          Dims st(out.shape().size());
          for (int64_t d = 0; d < idx.dim(); ++d)
            st[d] = idx.shape()[d] == 1 ? 0 : idx.strides()[d] * dtype_size(idx.dtype());
          pick(in[0], a.dim, idx, st, out, "gather");
        },
    .vjp =
        [](const VjpArgs& a) {
          Tensor z = zeros_as(a.in_types[0], a.grad);
          return Grads{scatter_add(z, a.attrs.dim, a.in[1], a.grad), Tensor()};
        },
    .attrs = kAttrDim,
};

// index_select(x, index): the entries of x along attrs.dim at the positions in 1-d index.
const OpDef defs::IndexSelect{
    .infer = index_select_rule,
    .cpu =
        [](OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
          const Tensor& idx = in[1];
          Dims st(out.shape().size(), 0);
          st[a.dim] = idx.dim() == 0 ? 0 : idx.strides()[0] * dtype_size(idx.dtype());
          pick(in[0], a.dim, idx, st, out, "index_select");
        },
    .vjp =
        [](const VjpArgs& a) {
          Tensor z = zeros_as(a.in_types[0], a.grad);
          return Grads{index_add(z, a.attrs.dim, a.in[1], a.grad), Tensor()};
        },
    .attrs = kAttrDim,
};

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Attrs a;
  a.dim = wrap_dim(dim, x, "gather");
  return apply(OpId::Gather, {x, index}, a);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  Attrs a;
  a.dim = wrap_dim(dim, x, "scatter_add");
  return apply(OpId::ScatterAdd, {x, index, src.to(x.dtype())}, a);
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  Attrs a;
  a.dim = wrap_dim(dim, x, "index_add");
  return apply(OpId::IndexAdd, {x, index, src.to(x.dtype())}, a);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Attrs a;
  a.dim = wrap_dim(dim, x, "index_select");
  return apply(OpId::IndexSelect, {x, index}, a);
}

}  // namespace kiln
