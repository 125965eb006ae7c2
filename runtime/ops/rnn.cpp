// runtime/ops/rnn.cpp -- the rnn ops' operands, type rule and packing (runtime/ops/rnn.h), and
// their OpDefs until nn registers its own.
#include "runtime/ops/rnn.h"

#include <climits>
#include <cstdint>

#include "runtime/api.h"
#include "runtime/autograd_meta.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"

namespace kiln {

const OpDef defs::Rnn{.infer = unregistered_op};
const OpDef defs::RnnBackward{.infer = unregistered_op};

namespace rnn_op {
namespace {

// a * b + c, or a kiln::Error for sizes past int64 (a hostile IR file's).
int64_t mul_add(const char* op, int64_t a, int64_t b, int64_t c = 0) {
  int64_t r = 0;
  KILN_CHECK(!__builtin_mul_overflow(a, b, &r) && !__builtin_add_overflow(r, c, &r), "{}: its sizes overflow int64",
             op);
  return r;
}

}  // namespace

Operands operands_of(OpId id, std::span<const Tensor> in, const Attrs& a) {
  Operands o;
  size_t end = in.size() - (id == OpId::RnnBackward ? 2 : 0), k = 1;
  o.x = in[0];
  while (k < end && in[k].dim() == 3 && o.states.size() < (a.lstm ? 2u : 1u)) o.states.push_back(in[k++]);
  o.params.assign(in.begin() + static_cast<std::ptrdiff_t>(k), in.begin() + static_cast<std::ptrdiff_t>(end));
  if (id == OpId::RnnBackward) o.out = in[end], o.grad = in[end + 1];
  return o;
}

bool has_bias(const Operands& o, const Attrs& a) {
  return static_cast<int64_t>(o.params.size()) == 4 * a.num_layers * dirs(a);
}

std::vector<Dims> result_shapes(const Tensor& x, const Attrs& a) {
  int64_t t = x.shape()[0], n = x.shape()[1], h = a.hidden_size;
  std::vector<Dims> s{{t, n, dirs(a) * h}};
  for (int k = 0; k < (a.lstm ? 2 : 1); ++k) s.push_back({a.num_layers * dirs(a), n, h});
  return s;
}

TensorType rnn_rule(OpId id, std::span<const Tensor> in, const Attrs& a) {
  const char* op = op_name(id);
  KILN_CHECK(a.hidden_size > 0 && a.num_layers > 0 && a.hidden_size <= INT32_MAX && a.num_layers <= INT32_MAX,
             "{}: hidden_size and num_layers must be positive ints, got {} and {}", op, a.hidden_size, a.num_layers);
  size_t extra = id == OpId::RnnBackward ? 2 : 0;
  KILN_CHECK(in.size() >= 1 + extra, "{}: expected x, the initial states (or none), the params{}; got {} operands", op,
             extra ? ", out and grad" : "", in.size());
  Operands o = operands_of(id, in, a);
  const Tensor& x = o.x;
  DType t = x.dtype();
  KILN_CHECK(x.dim() == 3 && (t == DType::F32 || t == DType::F64),
             "{}: expected x [T, N, input_size] in f32 or f64, got {}", op, x.type().str());
  for (int64_t d : x.shape()) KILN_CHECK(d >= 0, "{}: x {} needs concrete sizes", op, x.type().str());
  const int64_t h = a.hidden_size, cells = a.num_layers * dirs(a), gates = a.lstm ? 4 : 3;
  const size_t kinds = a.lstm ? 2 : 1;
  KILN_CHECK(o.states.empty() || o.states.size() == kinds, "{}: give {} initial states ([{}, {}, {}]) or none, got {}",
             op, kinds, cells, x.shape()[1], h, o.states.size());
  mul_add(op, mul_add(op, cells, x.shape()[1]), h);  // (a state's size)
  TensorType state{t, {cells, x.shape()[1], h}, x.device()};
  for (const Tensor& s : o.states)
    KILN_CHECK(s.type() == state, "{}: an initial state must be {}, got {}", op, state.str(), s.type().str());
  size_t n = o.params.size();
  KILN_CHECK(n == static_cast<size_t>(2 * cells) || n == static_cast<size_t>(4 * cells),
             "{}: expected {} params (w_ih and w_hh per layer and direction) or {} (with b_ih and b_hh), got {}", op,
             2 * cells, 4 * cells, n);
  size_t per = n / static_cast<size_t>(cells);
  for (int64_t c = 0; c < cells; ++c) {
    int64_t width = c < dirs(a) ? x.shape()[2] : dirs(a) * h;  // layer 0 reads x, the others the layer below
    Dims want[] = {{gates * h, width}, {gates * h, h}, {gates * h}, {gates * h}};
    for (size_t k = 0; k < per; ++k) {
      const Tensor& p = o.params[static_cast<size_t>(c) * per + k];
      TensorType w{t, want[k], x.device()};
      KILN_CHECK(p.type() == w, "{}: param {} (layer {}, direction {}) must be {}, got {}", op,
                 static_cast<size_t>(c) * per + k, c / dirs(a), c % dirs(a), w.str(), p.type().str());
    }
  }
  // [N, T*D*H + kinds*L*D*H]
  int64_t row = mul_add(op, static_cast<int64_t>(kinds), mul_add(op, cells, h), mul_add(op, x.shape()[0], dirs(a) * h));
  mul_add(op, row, x.shape()[1]);  // (the value's size)
  TensorType packed{t, {x.shape()[1], row}, x.device()};
  if (id == OpId::Rnn) return packed;
  KILN_CHECK(o.out.type() == packed && o.grad.type() == packed, "{}: out {} and grad {} must be rnn's result, {}", op,
             o.out.type().str(), o.grad.type().str(), packed.str());
  int64_t grads = 0;
  for (size_t i = 0; i + 2 < in.size(); ++i) grads = mul_add(op, 1, in[i].numel(), grads);
  return {t, {grads}, x.device()};
}

Tensor pack_rows(const std::vector<Tensor>& parts) {
  std::vector<Tensor> rows;
  for (const Tensor& p : parts) rows.push_back(p.transpose(0, 1).reshape({p.shape()[1], p.shape()[0] * p.shape()[2]}));
  return cat(rows, 1);
}

std::vector<Tensor> unpack_rows(const Tensor& packed, std::span<const Dims> shapes) {
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (const Dims& s : shapes) {
    int64_t width = s[0] * s[2];
    parts.push_back(packed.slice(1, at, at + width).reshape({s[1], s[0], s[2]}).transpose(0, 1));
    at += width;
  }
  return parts;
}

Tensor pack(const std::vector<Tensor>& parts) {
  std::vector<Tensor> flat;
  for (const Tensor& p : parts) flat.push_back(p.reshape({p.numel()}));
  return cat(flat, 0);
}

void write(const Tensor& result, const Tensor& out) {
  GradModeGuard no_grad(false);
  Tensor o = out;
  o.copy_(result);
}

}  // namespace rnn_op
}  // namespace kiln
