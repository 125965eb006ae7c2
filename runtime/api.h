// runtime/api.h -- the eager tensor API: creation, pointwise math, reductions, linear algebra,
// data movement. Every function here runs through apply() (runtime/op.h), so it is taped for
// autograd and recorded by a tracer the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

// ---- creation ---------------------------------------------------------------------------
Tensor empty(const Dims& shape, DType dtype = f32, Device device = cpu);
Tensor zeros(const Dims& shape, DType dtype = f32, Device device = cpu);
Tensor ones(const Dims& shape, DType dtype = f32, Device device = cpu);
Tensor full(const Dims& shape, Scalar value, DType dtype = f32, Device device = cpu);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);
/// A 0-d tensor holding `value` (dtype: f32 for floats, i64 for integers, bool for bool).
Tensor scalar_tensor(Scalar value);
Tensor scalar_tensor(Scalar value, DType dtype);
/// [start, stop) in steps of `step`; dtype i64 when all three are integers, else f32.
Tensor arange(Scalar stop);
Tensor arange(Scalar start, Scalar stop, Scalar step = 1);
Tensor arange(Scalar start, Scalar stop, Scalar step, DType dtype);
/// `steps` evenly spaced values from start to stop inclusive.
Tensor linspace(double start, double stop, int64_t steps, DType dtype = f32);
Tensor eye(int64_t n, int64_t m = -1, DType dtype = f32);
/// A tensor holding a copy of `values`, with the given shape (default: 1-d).
template <class T> Tensor from_vector(const std::vector<T>& values, const Dims& shape = {});
Tensor tensor(std::initializer_list<float> values);
/// Wraps memory owned by the caller without copying; `deleter` runs when the last view goes.
Tensor from_blob(void* data, const Dims& shape, DType dtype, std::function<void(void*)> deleter = {},
                 const Dims& strides = {});

// ---- random (Philox 4x32-10: the same stream on every device for the same seed) --------------
void manual_seed(uint64_t seed);
/// The generator's state for a draw of n numbers, an i64[2] tensor (seed, first counter),
/// advancing the generator past them. The random ops (rand, randn) take it as their operand,
/// so a traced function that draws gets one per call (jit binds it) and draws anew each time;
/// called inside a trace, it returns that per-call state.
Tensor random_state(int64_t n);
/// Puts the generator at a state random_state(0) returned earlier (seed, first counter): the
/// draws after it repeat the ones that followed then. A saved training step (jit::save) keeps
/// the state it was saved at, so a loaded one can resume the stream.
void set_random_state(const Tensor& state);
// Drawn on `device` from the one generator: the same numbers on every device for one seed.
Tensor rand(const Dims& shape, DType dtype = f32, Device device = cpu);   // uniform [0, 1)
Tensor randn(const Dims& shape, DType dtype = f32, Device device = cpu);  // standard normal
Tensor randint(int64_t low, int64_t high, const Dims& shape, DType dtype = i64, Device device = cpu);  // [low, high)
Tensor bernoulli(const Tensor& p);  // 1 with probability p, same dtype as p
Tensor bernoulli(const Dims& shape, double p, DType dtype = f32, Device device = cpu);
Tensor randperm(int64_t n);
/// num_samples category indices (i64) per row of the weights `probs` (1-d or 2-d; they need
/// not sum to one), drawn with or without replacement, as torch.multinomial.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false);

// ---- pointwise ----------------------------------------------------------------------------
// One public function per pointwise op in runtime/ops.def, named as the op and generated from
// that list (a new op gets its function with no line written here). By arity: unary ops
// take name(x) (exp(x), relu(x), ...); binary ops take name(a, b), name(a, number) and
// name(number, a) (add, pow, maximum, eq, logical_and, ...); ternary ops take name(a, b, c)
// (where, clamp).
// Each op's meaning (NaN rules, rounding, promotion) is documented with its formula in
// runtime/ops/formulas.h. Notably: div is true division (integers give f32); round is half to
// even; maximum/minimum propagate NaN; relu_grad(y, g) is relu's backward from its output y
// (PyTorch's threshold_backward); gelu_tanh is gelu's tanh approximation.
// KILN_IF_POINTWISE_<family>(code) keeps `code` for pointwise ops only (for ops.def consumers).
#define KILN_IF_POINTWISE_Pointwise(...) __VA_ARGS__
#define KILN_IF_POINTWISE_Cast(...)
#define KILN_IF_POINTWISE_Reduce(...)
#define KILN_IF_POINTWISE_View(...)
#define KILN_IF_POINTWISE_Copy(...)
#define KILN_IF_POINTWISE_Other(...)
#define KILN_POINTWISE_API_1(name) Tensor name(const Tensor& x);
#define KILN_POINTWISE_API_2(name)               \
  Tensor name(const Tensor& a, const Tensor& b); \
  Tensor name(const Tensor& a, Scalar b);        \
  Tensor name(Scalar a, const Tensor& b);
#define KILN_POINTWISE_API_3(name) Tensor name(const Tensor& a, const Tensor& b, const Tensor& c);
#define KILN_POINTWISE_API(name, arity) KILN_POINTWISE_API_##arity(name)
#define OP(Name, name, arity, family) KILN_IF_POINTWISE_##family(KILN_POINTWISE_API(name, arity))
#include "runtime/ops.def"
#undef OP

/// gelu(x, "none") is gelu(x); gelu(x, "tanh") is gelu_tanh(x) (PyTorch's names).
Tensor gelu(const Tensor& x, const std::string& approximate);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);
Tensor where(const Tensor& cond, Scalar a, Scalar b);
/// min(max(x, lo), hi); a missing bound is skipped.
Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi);
Tensor cast(const Tensor& x, DType dtype);

// Operators (NumPy broadcasting and promotion). Numbers are not boxed into tensors.
Tensor operator-(const Tensor& x);
#define KILN_BINARY_OPERATOR(op)                        \
  Tensor operator op(const Tensor& a, const Tensor& b); \
  Tensor operator op(const Tensor& a, Scalar b);        \
  Tensor operator op(Scalar a, const Tensor& b);
KILN_BINARY_OPERATOR(+)
KILN_BINARY_OPERATOR(-)
KILN_BINARY_OPERATOR(*)
KILN_BINARY_OPERATOR(/)
KILN_BINARY_OPERATOR(==)
KILN_BINARY_OPERATOR(!=)
KILN_BINARY_OPERATOR(<)
KILN_BINARY_OPERATOR(<=)
KILN_BINARY_OPERATOR(>)
KILN_BINARY_OPERATOR(>=)
#undef KILN_BINARY_OPERATOR

// ---- reductions: `dims` empty means all; negative dims count from the end -----------------
// One public function per reduction in runtime/ops.def, named as the op and generated from
// that list: name(x, dims = {}, keepdim = false). sum, prod, amax, amin (integers and bool sum
// and multiply in i64; amax and amin propagate NaN), argmax, argmin (the i64 index of the
// first largest or smallest element along one dim, or in the flattened tensor without one; a
// NaN counts as both).
#define KILN_IF_REDUCE_Pointwise(...)
#define KILN_IF_REDUCE_Cast(...)
#define KILN_IF_REDUCE_Reduce(...) __VA_ARGS__
#define KILN_IF_REDUCE_View(...)
#define KILN_IF_REDUCE_Copy(...)
#define KILN_IF_REDUCE_Other(...)
#define OP(Name, name, arity, family) \
  KILN_IF_REDUCE_##family(Tensor name(const Tensor& x, const Dims& dims = {}, bool keepdim = false);)
#include "runtime/ops.def"
#undef OP
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// Running sums along dim (torch.cumsum): floats keep their dtype (f16 and bf16 sum in f32),
/// integers and bool give i64; with `dtype`, x is cast to it first.
Tensor cumsum(const Tensor& x, int64_t dim);
Tensor cumsum(const Tensor& x, int64_t dim, DType dtype);
/// i64 positions of x's elements along dim in sorted order. The order is always the stable one
/// (`stable` is accepted for torch's signature); NaN sorts above every number.
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
/// (values, indices) of x sorted along dim, as torch.sort (and stable, as argsort).
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
/// (values, indices) of the k largest (smallest when !largest) along dim, in sorted order
/// (`sorted` accepted for torch's signature: they always are); ties keep index order.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
Tensor max(const Tensor& x);  // over all elements
Tensor min(const Tensor& x);
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);  // values; see argmax
Tensor min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
/// Variance with Bessel's correction by default (correction = 1), like torch.var.
Tensor var(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
/// Normalizes over the trailing dims `normalized_shape`; weight and bias may be undefined.
Tensor layer_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);

// ---- linear algebra and neural-network ops -----------------------------------------------
/// NumPy matmul: 1-d operands are promoted and squeezed; batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
/// x @ weight^T + bias, with weight [out, in] as in torch.nn.functional.linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
/// x [N, C, H, W], weight [O, C/groups, kH, kW].
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, const Dims& stride = {1, 1},
              const Dims& padding = {0, 0}, const Dims& dilation = {1, 1}, int64_t groups = 1);
Tensor max_pool2d(const Tensor& x, const Dims& kernel, const Dims& stride = {}, const Dims& padding = {0, 0},
                  bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& x, const Dims& kernel, const Dims& stride = {}, const Dims& padding = {0, 0},
                  bool count_include_pad = true);
/// Rows of `weight` [num, dim] picked by integer `indices` of any shape.
Tensor embedding(const Tensor& indices, const Tensor& weight);
/// [..., num_classes] of i64 zeros with a one at each index.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

// ---- data movement ----------------------------------------------------------------------
Tensor cat(std::span<const Tensor> tensors, int64_t dim = 0);
Tensor cat(std::initializer_list<Tensor> tensors, int64_t dim = 0);
Tensor stack(std::span<const Tensor> tensors, int64_t dim = 0);
Tensor stack(std::initializer_list<Tensor> tensors, int64_t dim = 0);
/// out[i][j] = x[index[i][j]][j] for dim 0, and so on (torch.gather).
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
/// x with src[i][j] added at [index[i][j]][j] for dim 0, and so on (torch.scatter_add);
/// repeated positions accumulate.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// x with src.select(dim, i) added at x.select(dim, index[i]) for each i of the 1-d integer
/// `index` (torch.index_add); src is x's shape with index.numel() entries along dim. Repeated
/// indices accumulate in index order, so the result does not depend on the thread count.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// Entries of x along `dim` at the positions in 1-d integer `index`.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
/// Constant padding: `pads` holds (before, after) pairs starting from the last dim, like
/// torch.nn.functional.pad.
Tensor pad(const Tensor& x, const Dims& pads, Scalar value = 0);
Tensor broadcast_to(const Tensor& x, const Dims& shape);
/// The shape two shapes broadcast to; throws naming `op` when they don't.
Dims broadcast_shapes(const Dims& a, const Dims& b, const char* op = "broadcast");

// ---- checks and files -------------------------------------------------------------------
/// True when shapes match and |a - b| <= atol + rtol * |b| everywhere (NaNs equal if equal_nan).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
/// NumPy .npy files (format 1.0-3.0; little-endian; C or Fortran order). The reader treats the
/// file as hostile (every length checked against its real size; a clear kiln::Error naming
/// `path` otherwise); the writer replaces `path` atomically (a temporary file, then rename).
Tensor load_npy(const std::string& path);
/// The same reader over bytes in memory; `name` stands for the file in errors.
Tensor npy_from_bytes(std::string_view bytes, const std::string& name = "<bytes>");
void save_npy(const Tensor& t, const std::string& path);

// ---- threads -----------------------------------------------------------------------------
/// Threads kiln's parallel loops use (default: KILN_NUM_THREADS, else the number of cores);
/// kiln's BLAS calls run single-threaded inside them (BlasThreadsScope in runtime/parallel.h).
/// Safe while other threads run loops: they finish on the pool they started on.
void set_num_threads(int n);
int num_threads();
/// The instruction set of the CPU kernels in use: "avx512", "avx2" or "scalar" (KILN_ISA
/// lowers it, for testing).
const char* cpu_kernel_isa();

}  // namespace kiln
