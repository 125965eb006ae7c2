// runtime/ops/movement.cpp -- views (reshape, permute, slice, expand) and copies (copy, cat,
// pad), with the Tensor methods and API functions built on them.
#include <numeric>

#include "runtime/api.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/loops.h"
#include "runtime/ops/pointwise.h"
#include "runtime/ops/vjp_util.h"

namespace kiln {
namespace {

// A view of `base` with new geometry; shares storage. Not an op: only views use it.
Tensor alias(const Tensor& base, Dims shape, Dims strides, int64_t offset) {
  auto impl = make_ref<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = base.dtype();
  impl->device = base.device();
  TensorImpl* b = base.impl();
  impl->view_base = b->view_base ? b->view_base : Ref<TensorImpl>(b);
  return Tensor(std::move(impl));
}

// Strides that let `x` be viewed as `shape` without a copy, or false (PyTorch's rule: each
// run of merged input dims must be contiguous within itself).
bool view_strides(const Tensor& x, const Dims& shape, Dims* out) {
  const Dims& old_shape = x.shape();
  const Dims& old_strides = x.strides();
  Dims strides(shape.size(), 0);
  if (x.numel() == 0 || old_shape.empty()) {
    *out = contiguous_strides(shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return false;
  *out = std::move(strides);
  return true;
}

TensorType reshape_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  KILN_CHECK(check_shape(a.shape, "reshape") == x.numel(), "reshape: cannot reshape {} ({} elements) to {}",
             x.type().str(), x.numel(), shape_str(a.shape));
  return {x.dtype(), a.shape, x.device()};
}

TensorType permute_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  KILN_CHECK(static_cast<int64_t>(a.axes.size()) == x.dim(),
             "permute: order {} has {} entries for a tensor of rank {} ({})", shape_str(a.axes), a.axes.size(), x.dim(),
             x.type().str());
  uint64_t seen = 0;
  Dims shape;
  for (int64_t d : a.axes) {
    KILN_CHECK(d >= 0 && d < x.dim() && !(seen >> d & 1), "permute: order {} is not a permutation of the dims of {}",
               shape_str(a.axes), x.type().str());
    seen |= uint64_t{1} << d;
    shape.push_back(x.shape()[d]);
  }
  return {x.dtype(), shape, x.device()};
}

TensorType slice_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  KILN_CHECK(a.dim >= 0 && a.dim < x.dim(), "slice: dim {} is out of range for {}", a.dim, x.type().str());
  int64_t n = x.shape()[a.dim];
  KILN_CHECK(a.step > 0, "slice: step must be positive, got {}", a.step);
  KILN_CHECK(0 <= a.start && a.start <= a.stop && a.stop <= n,
             "slice: range [{}, {}) is out of bounds for dim {} of {}", a.start, a.stop, a.dim, x.type().str());
  Dims shape = x.shape();
  shape[a.dim] = a.stop > a.start ? (a.stop - a.start - 1) / a.step + 1 : 0;  // no overflow
  return {x.dtype(), shape, x.device()};
}

TensorType expand_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  KILN_CHECK(a.shape.size() >= x.shape().size(), "expand: cannot expand {} to fewer dims {}", x.type().str(),
             shape_str(a.shape));
  size_t lead = a.shape.size() - x.shape().size();
  check_shape(a.shape, "expand");
  for (size_t i = 0; i < a.shape.size(); ++i) {
    if (i < lead) continue;
    int64_t s = x.shape()[i - lead];
    KILN_CHECK(s == a.shape[i] || s == 1, "expand: cannot expand {} to {} (dim {}: {} vs {})", x.type().str(),
               shape_str(a.shape), i, s, a.shape[i]);
  }
  return {x.dtype(), a.shape, x.device()};
}

TensorType same_type_rule(OpId id, std::span<const Tensor> in, const Attrs&) {
  KILN_CHECK(in.size() == 1, "{}: expected one tensor, got {}", op_name(id), in.size());
  return in[0].type();
}

TensorType cat_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  KILN_CHECK(!in.empty(), "cat: expected at least one tensor");
  const Tensor& f = in[0];
  KILN_CHECK(f.dim() > 0, "cat: cannot concatenate 0-d tensors ({})", f.type().str());
  KILN_CHECK(a.dim >= 0 && a.dim < f.dim(), "cat: dim {} is out of range for {}", a.dim, f.type().str());
  Dims shape = f.shape();
  shape[a.dim] = 0;
  for (const Tensor& t : in) {
    KILN_CHECK(t.dtype() == f.dtype(), "cat: dtypes differ: {} vs {}", f.type().str(), t.type().str());
    bool ok = t.dim() == f.dim();
    for (int64_t d = 0; ok && d < f.dim(); ++d) ok = d == a.dim || t.shape()[d] == f.shape()[d];
    KILN_CHECK(ok, "cat: shapes {} and {} differ outside dim {}", f.type().str(), t.type().str(), a.dim);
    KILN_CHECK(t.shape()[a.dim] <= INT64_MAX / 16 - shape[a.dim], "cat: the result of {} along dim {} is too large",
               f.type().str(), a.dim);
    shape[a.dim] += t.shape()[a.dim];
  }
  return {f.dtype(), shape, f.device()};
}

TensorType pad_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  KILN_CHECK(a.pads.size() % 2 == 0 && static_cast<int64_t>(a.pads.size()) <= 2 * x.dim(),
             "pad: expected (before, after) pairs for at most {} dims, got {}", x.dim(), shape_str(a.pads));
  Dims shape = x.shape();
  for (size_t i = 0; i < a.pads.size() / 2; ++i) {
    size_t d = shape.size() - 1 - i;
    int64_t s;
    bool overflow =
        __builtin_add_overflow(shape[d], a.pads[2 * i], &s) || __builtin_add_overflow(s, a.pads[2 * i + 1], &s);
    KILN_CHECK(!overflow && s >= 0, "pad: pads {} make dim {} of {} negative", shape_str(a.pads), d, x.type().str());
    shape[d] = s;
  }
  check_shape(shape, "pad");
  return {x.dtype(), shape, x.device()};
}

}  // namespace

void cat_into(std::span<const Tensor> in, int64_t dim, const Tensor& out) {
  int64_t at = 0;
  for (const Tensor& t : in) {
    int64_t n = t.shape()[dim];
    Dims shape = out.shape();
    shape[dim] = n;
    copy_between(t, alias(out, shape, out.strides(), out.offset() + at * out.strides()[dim]));
    at += n;
  }
}

void pad_into(const Tensor& x, const Dims& pads, Scalar value, const Tensor& out) {
  copy_between(full({}, value, out.dtype()), out);
  Dims src_shape = x.shape(), dst_shape = x.shape();
  int64_t src_off = x.offset(), dst_off = out.offset();
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    size_t d = x.shape().size() - 1 - i;
    int64_t before = pads[2 * i], after = pads[2 * i + 1];
    int64_t crop_b = std::max<int64_t>(0, -before), crop_a = std::max<int64_t>(0, -after);
    int64_t len = std::max<int64_t>(0, x.shape()[d] - crop_b - crop_a);
    src_shape[d] = dst_shape[d] = len;
    src_off += crop_b * x.strides()[d];
    dst_off += std::max<int64_t>(0, before) * out.strides()[d];
  }
  if (src_shape.product() == 0) return;
  copy_between(alias(x, src_shape, x.strides(), src_off), alias(out, dst_shape, out.strides(), dst_off));
}

// reshape(x): same elements in row-major order, new shape (attrs.shape). A view when the
// strides allow it, else a copy.
const OpDef defs::Reshape{
    .infer = reshape_rule,
    .view =
        [](const Tensor& x, const Attrs& a) {
          Dims strides;
          if (view_strides(x, a.shape, &strides)) return alias(x, a.shape, strides, x.offset());
          Tensor c = apply(OpId::Copy, {x});
          return alias(c, a.shape, contiguous_strides(a.shape), c.offset());
        },
    .vjp = [](const VjpArgs& a) { return Grads{a.grad.reshape(a.in_types[0].shape)}; },
    .saves = kSaveNothing,
    .attrs = kAttrShape,
};

// permute(x): dims reordered by attrs.axes.
const OpDef defs::Permute{
    .infer = permute_rule,
    .view =
        [](const Tensor& x, const Attrs& a) {
          Dims shape, strides;
          for (int64_t d : a.axes) {
            shape.push_back(x.shape()[d]);
            strides.push_back(x.strides()[d]);
          }
          return alias(x, shape, strides, x.offset());
        },
    .vjp =
        [](const VjpArgs& a) {
          Dims inverse(a.attrs.axes.size());
          for (size_t i = 0; i < inverse.size(); ++i) inverse[a.attrs.axes[i]] = static_cast<int64_t>(i);
          return Grads{a.grad.permute(inverse)};
        },
    .saves = kSaveNothing,
    .attrs = kAttrAxes,
};

// slice(x): along attrs.dim, indices start, start+step, ... < stop.
const OpDef defs::Slice{
    .infer = slice_rule,
    .view =
        [](const Tensor& x, const Attrs& a) {
          Dims shape = x.shape(), strides = x.strides();
          shape[a.dim] = a.stop > a.start ? (a.stop - a.start - 1) / a.step + 1 : 0;
          if (shape[a.dim] > 1) strides[a.dim] *= a.step;  // a huge step leaves one entry
          return alias(x, shape, strides, x.offset() + a.start * x.strides()[a.dim]);
        },
    .vjp =
        [](const VjpArgs& a) {
          return Grads{
              slice_backward(a.grad, a.in_types[0].shape, a.attrs.dim, a.attrs.start, a.attrs.stop, a.attrs.step)};
        },
    .saves = kSaveNothing,
    .attrs = kAttrDim | kAttrStart | kAttrStop | kAttrStep,
};

// expand(x): size-1 dims (and new leading dims) repeated to attrs.shape, with stride 0.
const OpDef defs::Expand{
    .infer = expand_rule,
    .view =
        [](const Tensor& x, const Attrs& a) {
          size_t lead = a.shape.size() - x.shape().size();
          Dims strides(a.shape.size(), 0);
          for (size_t i = lead; i < a.shape.size(); ++i)
            strides[i] = x.shape()[i - lead] == 1 ? 0 : x.strides()[i - lead];
          return alias(x, a.shape, strides, x.offset());
        },
    .vjp = [](const VjpArgs& a) { return Grads{a.grad}; },  // the engine sums it back
    .saves = kSaveNothing,
    .attrs = kAttrShape,
};

// copy(x): a contiguous copy.
const OpDef defs::Copy{
    .infer = same_type_rule,
    .cpu = [](OpId, std::span<const Tensor> in, const Attrs&, const Tensor& out) { copy_into(in[0], out); },
    .vjp = [](const VjpArgs& a) { return Grads{a.grad}; },
    .saves = kSaveNothing,
};

// to_device(x): a copy of x on attrs.device (apply() moves it, through the backends); the
// gradient goes back to x's device.
const OpDef defs::ToDevice{
    .infer = same_type_rule,
    .cpu = [](OpId, std::span<const Tensor> in, const Attrs&, const Tensor& out) { copy_into(in[0], out); },
    .vjp = [](const VjpArgs& a) { return Grads{a.grad.to(a.in_types[0].device)}; },
    .saves = kSaveNothing,
    .attrs = kAttrDevice,
};

// cat(xs): concatenation along attrs.dim.
const OpDef defs::Cat{
    .infer = cat_rule,
    .cpu = [](OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) { cat_into(in, a.dim, out); },
    .vjp =
        [](const VjpArgs& a) {
          Grads g;
          int64_t at = 0;
          for (const TensorType& t : a.in_types) {
            int64_t n = t.shape[a.attrs.dim];
            g.push_back(a.grad.slice(a.attrs.dim, at, at + n));
            at += n;
          }
          return g;
        },
    .saves = kSaveNothing,
    .attrs = kAttrDim,
};

// pad(x): constant padding; attrs.pads holds (before, after) pairs from the last dim backwards
// (negative entries crop), attrs.value the fill value.
const OpDef defs::Pad{
    .infer = pad_rule,
    .cpu = [](OpId, std::span<const Tensor> in, const Attrs& a,
              const Tensor& out) { pad_into(in[0], a.pads, a.value, out); },
    .vjp =
        [](const VjpArgs& a) {  // crop what was padded (and pad what was cropped)
          Dims back = a.attrs.pads;
          for (int64_t& v : back) v = -v;
          return Grads{pad(a.grad, back)};
        },
    .saves = kSaveNothing,
    .attrs = kAttrPads | kAttrValue,
};

// ---- Tensor view methods ----------------------------------------------------------------

namespace {
// Resolves one -1 in `shape` against numel; checks the rest.
Dims infer_size(const Dims& shape, int64_t numel, const char* op, const Tensor& x) {
  Dims out = shape;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer_at < 0, "{}: only one dim may be -1 in {}", op, shape_str(shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(out[i] >= 0, "{}: invalid size {} in {}", op, out[i], shape_str(shape));
    }
  }
  {
    Dims known_dims = out;  // the sizes given, checked against overflow
    if (infer_at >= 0) known_dims[infer_at] = 1;
    known = check_shape(known_dims, op);
  }
  if (infer_at >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, "{}: cannot reshape {} to {}", op, x.type().str(), shape_str(shape));
    out[infer_at] = numel / known;
  }
  return out;
}
}  // namespace

Tensor Tensor::reshape(const Dims& shape) const {
  Attrs a;
  a.shape = infer_size(shape, numel(), "reshape", *this);
  if (a.shape == this->shape()) return *this;
  return apply(OpId::Reshape, {*this}, a);
}

Tensor Tensor::view(const Dims& shape) const {
  Dims s = infer_size(shape, numel(), "view", *this);
  Dims strides;
  KILN_CHECK(!has_storage() || s.product() != numel() || view_strides(*this, s, &strides),
             "view: cannot view {} with strides {} as {} without a copy; use reshape", type().str(),
             shape_str(this->strides()), shape_str(s));
  return reshape(s);
}

Tensor Tensor::permute(const Dims& order) const {
  Attrs a;
  for (int64_t d : order) a.axes.push_back(wrap_dim(d, *this, "permute"));
  return apply(OpId::Permute, {*this}, a);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t stop, int64_t step) const {
  Attrs a;
  a.dim = wrap_dim(d, *this, "slice");
  KILN_CHECK(dim() > 0, "slice: cannot slice a 0-d tensor");
  int64_t n = shape()[a.dim];
  // Python slicing: negative indices count from the end; out-of-range bounds clamp.
  auto clampi = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  a.start = clampi(start);
  a.stop = std::max(a.start, clampi(stop));
  a.step = step;
  return apply(OpId::Slice, {*this}, a);
}

Tensor Tensor::expand(const Dims& shape) const {
  Attrs a;
  a.shape = shape;
  size_t lead = shape.size() >= this->shape().size() ? shape.size() - this->shape().size() : 0;
  for (size_t i = lead; i < shape.size(); ++i)
    if (a.shape[i] == -1) a.shape[i] = this->shape()[i - lead];
  if (a.shape == this->shape()) return *this;
  return apply(OpId::Expand, {*this}, a);
}

Tensor broadcast_to(const Tensor& x, const Dims& shape) { return x.expand(shape); }

// ---- API --------------------------------------------------------------------------------

Tensor cat(std::span<const Tensor> tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "cat: expected at least one tensor");
  DType t = tensors[0].dtype();
  for (const Tensor& x : tensors) {
    KILN_CHECK(x.defined(), "cat: an input is an undefined tensor");
    t = promote(t, x.dtype());
  }
  std::vector<Tensor> in;
  in.reserve(tensors.size());
  for (const Tensor& x : tensors) in.push_back(x.to(t));
  Attrs a;
  a.dim = wrap_dim(dim, tensors[0], "cat");
  return apply(OpId::Cat, in, a);
}
Tensor cat(std::initializer_list<Tensor> tensors, int64_t dim) {
  return cat(std::span<const Tensor>(tensors.begin(), tensors.size()), dim);
}

Tensor stack(std::span<const Tensor> tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "stack: expected at least one tensor");
  int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor& x : tensors) {
    KILN_CHECK(x.defined() && x.shape() == tensors[0].shape(), "stack: all tensors must have one shape, got {} and {}",
               tensors[0].type().str(), x.defined() ? x.type().str() : "undefined");
    parts.push_back(x.unsqueeze(d));
  }
  return cat(parts, d);
}
Tensor stack(std::initializer_list<Tensor> tensors, int64_t dim) {
  return stack(std::span<const Tensor>(tensors.begin(), tensors.size()), dim);
}

Tensor pad(const Tensor& x, const Dims& pads, Scalar value) {
  Attrs a;
  a.pads = pads;
  a.value = value;
  return apply(OpId::Pad, {x}, a);
}

}  // namespace kiln
