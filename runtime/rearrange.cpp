// runtime/rearrange.cpp -- composites that mask, reorder or repeat elements: tril, triu,
// masked_fill, flip, roll, repeat, chunk and split, as torch names and defines them. Each is
// written with primitive ops, so autograd, tracing and every device come with them.
#include "runtime/rearrange.h"

#include <algorithm>

#include "runtime/api.h"
#include "runtime/check.h"

namespace kiln {

namespace {

// Where column - row (of the last two dims) is <= diagonal (tril) or >= diagonal (triu).
Tensor triangle(const Tensor& x, int64_t diagonal, bool lower, const char* op) {
  KILN_CHECK(x.defined() && x.dim() >= 2, "{}: expected a tensor of 2 or more dims, got {}", op,
             x.defined() ? x.type().str() : "undefined");
  int64_t rows = x.shape()[static_cast<size_t>(x.dim() - 2)], cols = x.shape().back();
  Tensor offset = arange(0, cols, 1, DType::I64).reshape({1, cols}) - arange(0, rows, 1, DType::I64).reshape({rows, 1});
  Tensor keep = (lower ? le(offset, Scalar(diagonal)) : ge(offset, Scalar(diagonal))).to(x.device());
  return where(keep, x, scalar_tensor(0, x.dtype()));  // a zero of x's dtype: bool stays bool
}

// Slices of x along dim with the given sizes, in order (chunk and split).
std::vector<Tensor> pieces(const Tensor& x, int64_t dim, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(x.slice(dim, start, start + s));
    start += s;
  }
  return out;
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, true, "tril"); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, false, "triu"); }

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value) {
  KILN_CHECK(x.defined() && mask.defined() && value.defined(), "masked_fill: undefined tensor");
  KILN_CHECK(mask.dtype() == DType::Bool, "masked_fill: the mask must be bool, got {}", mask.type().str());
  KILN_CHECK(value.dim() == 0, "masked_fill: the value must be a 0-d tensor, got {}", value.type().str());
  KILN_CHECK(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(),
             "masked_fill: the mask {} must broadcast to the tensor's shape {}", mask.type().str(), x.type().str());
  Tensor out = where(mask, value.to(x.dtype()), x);
  return out.dtype() == x.dtype() ? out : out.to(x.dtype());
}
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  return masked_fill(x, mask, scalar_tensor(value, x.defined() ? x.dtype() : value.default_dtype()));
}

Tensor flip(const Tensor& x, const Dims& dims) {
  KILN_CHECK(x.defined(), "flip: undefined tensor");
  Tensor out = x;
  std::vector<bool> seen(static_cast<size_t>(x.dim()));
  for (int64_t d : dims) {
    int64_t dd = wrap_dim(d, x, "flip");
    KILN_CHECK(!seen[static_cast<size_t>(dd)], "flip: dim {} appears twice in {}", dd, shape_str(dims));
    seen[static_cast<size_t>(dd)] = true;
    int64_t n = x.shape()[static_cast<size_t>(dd)];
    out = index_select(out, dd, arange(n - 1, -1, -1, DType::I64).to(x.device()));
  }
  return dims.empty() ? x.clone() : out;  // torch.flip gives a new tensor, also with no dims
}

Tensor roll(const Tensor& x, const Dims& shifts, const Dims& dims) {
  KILN_CHECK(x.defined(), "roll: undefined tensor");
  if (dims.empty()) {
    KILN_CHECK(shifts.size() == 1, "roll: without dims, expected one shift, got {}", shape_str(shifts));
    return roll(x.flatten(), shifts, {0}).reshape(x.shape());
  }
  KILN_CHECK(shifts.size() == dims.size(), "roll: {} shifts for {} dims", shifts.size(), dims.size());
  Tensor out = x;
  bool moved = false;
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], x, "roll");
    int64_t n = x.shape()[static_cast<size_t>(d)];
    if (n == 0) continue;
    int64_t s = ((shifts[i] % n) + n) % n;  // an element at j goes to (j + shift) mod n
    if (s == 0) continue;
    out = cat({out.slice(d, n - s, n), out.slice(d, 0, n - s)}, d);
    moved = true;
  }
  return moved ? out : x.clone();  // torch.roll gives a new tensor, also where nothing moves
}

Tensor repeat(const Tensor& x, const Dims& repeats) {
  KILN_CHECK(x.defined(), "repeat: undefined tensor");
  KILN_CHECK(static_cast<int64_t>(repeats.size()) >= x.dim(), "repeat: {} repeats for {}: give at least one per dim",
             shape_str(repeats), x.type().str());
  for (int64_t r : repeats) KILN_CHECK(r >= 0, "repeat: negative repeat in {}", shape_str(repeats));
  // [d0, d1] with repeats [r0, r1] is [r0, d0, r1, d1] expanded from [1, d0, 1, d1], then merged.
  size_t lead = repeats.size() - static_cast<size_t>(x.dim());
  Dims interleaved, expanded, result;
  for (size_t i = 0; i < repeats.size(); ++i) {
    int64_t d = i < lead ? 1 : x.shape()[i - lead];
    interleaved.push_back(1);
    interleaved.push_back(d);
    expanded.push_back(repeats[i]);
    expanded.push_back(d);
    result.push_back(repeats[i] * d);
  }
  return x.reshape(interleaved).expand(expanded).contiguous().reshape(result);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  KILN_CHECK(x.defined(), "split: undefined tensor");
  int64_t d = wrap_dim(dim, x, "split");
  int64_t n = x.shape()[static_cast<size_t>(d)];
  KILN_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be positive, got {} for {}",
             split_size, x.type().str());
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += split_size) sizes.push_back(std::min(split_size, n - start));
  if (sizes.empty()) sizes.push_back(0);  // torch: one empty piece of an empty dim
  return pieces(x, d, sizes);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim) {
  KILN_CHECK(x.defined(), "split: undefined tensor");
  int64_t d = wrap_dim(dim, x, "split");
  int64_t n = x.shape()[static_cast<size_t>(d)], total = 0;
  for (int64_t s : split_sizes) {
    KILN_CHECK(s >= 0, "split: negative size in {}", shape_str(Dims(split_sizes)));
    total += s;
  }
  KILN_CHECK(total == n, "split: sizes {} sum to {}, but dim {} of {} has {}", shape_str(Dims(split_sizes)), total, d,
             x.type().str(), n);
  return pieces(x, d, split_sizes);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  KILN_CHECK(chunks > 0, "chunk: chunks must be positive, got {}", chunks);
  KILN_CHECK(x.defined(), "chunk: undefined tensor");
  int64_t n = x.shape()[static_cast<size_t>(wrap_dim(dim, x, "chunk"))];
  // torch.chunk: pieces of ceil(n / chunks), so fewer than `chunks` pieces may come back.
  return split(x, std::max<int64_t>((n + chunks - 1) / chunks, n == 0 ? 0 : 1), dim);
}

}  // namespace kiln
