// runtime/op.h -- the op list as data: OpId, Attrs, OpDef, and apply(), where every op runs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "runtime/tensor.h"

namespace kiln {

enum class OpId : uint16_t {
#define OP(Name, name, arity, family) Name,
#include "runtime/ops.def"
#undef OP
};
inline constexpr int kNumOps = 0
#define OP(Name, name, arity, family) +1
#include "runtime/ops.def"
#undef OP
    ;

struct RegisteredCall;  // runtime/registered_op.h

enum class OpFamily : uint8_t { Pointwise, Cast, Reduce, View, Copy, Other };

/// How a reduction combines its elements: lowering data that the eager kernels and every code
/// generator read (OpDef::combine). None: the op is no combining reduction (argmax is not).
enum class Combine : uint8_t { None, Sum, Prod, Max, Min };
/// "sum", "prod", "max", "min" ("none"), as the IR writes a collective's `reduce`.
std::string_view combine_name(Combine c);
bool parse_combine(std::string_view name, Combine* out);

/// Every attribute any op takes (runtime/attrs.def); each op reads the few it documents. A
/// fixed struct (not a map) keeps the per-op path free of lookups and allocations.
struct Attrs {
#define ATTR(Field, name, Type, Kind, init) Type name = init;
#include "runtime/attrs.def"
#undef ATTR
  /// Pointwise ops: bit i set means operand i is the number imm[i] rather than a tensor, so
  /// `x * 0.5` is not boxed into a tensor. Tensor inputs fill the remaining slots in order.
  uint8_t imm_mask = 0;
  Scalar imm[3];
  /// OpId::Registered: which registered op, and its attributes' values (runtime/registered_op.h).
  std::shared_ptr<const RegisteredCall> registered;
};

/// A pointwise op's operand slots: slot k holds the number attrs.imm[k] where bit k of imm_mask
/// is set, and the tensor inputs fill the other slots in order. These two maps are the rule's
/// one home. (For other ops imm_mask is 0 and slot k is input k.)
/// The tensor input slot k reads, or -1 where slot k is a number.
inline int input_of_slot(uint8_t imm_mask, int k) {
  if (imm_mask == 0) return k;  // (cat takes any number of inputs: no shift past the mask's 8 bits)
  if (imm_mask >> k & 1) return -1;
  return k - __builtin_popcount(imm_mask & ((1u << k) - 1));
}
/// The slot tensor input t fills.
inline int slot_of_input(uint8_t imm_mask, int t) {
  if (imm_mask == 0) return t;
  int k = 0;
  for (;; ++k)
    if (!(k < 8 && (imm_mask >> k & 1)) && t-- == 0) return k;
}

/// An attribute's place in runtime/attrs.def.
enum AttrIndex : uint8_t {
#define ATTR(Field, name, Type, Kind, init) kAttrIndex##Field,
#include "runtime/attrs.def"
#undef ATTR
  kNumAttrs
};
/// The Attrs fields an op reads, as a bit set (OpDef::attrs): the IR prints and parses these.
enum AttrField : uint64_t {
#define ATTR(Field, name, Type, Kind, init) kAttr##Field = uint64_t{1} << kAttrIndex##Field,
#include "runtime/attrs.def"
#undef ATTR
};
/// How the IR writes an attribute's value.
enum class AttrKind : uint8_t { Dims, Sizes, Int, Bool, DType, Scalar, Device, Combine };
/// One attribute of runtime/attrs.def: the printer, the parser and the verifier read these.
struct AttrSchema {
  AttrField field;
  std::string_view name;
  AttrKind kind;
};
/// Every attribute, in print order; attr_schema(i) is attribute AttrIndex i.
const AttrSchema& attr_schema(int index);
/// The attribute named `name`, or nullptr.
const AttrSchema* find_attr(std::string_view name);
/// Calls f with a reference to attribute `index` of `a` (its C++ type as in attrs.def).
template <class A, class F> decltype(auto) visit_attr(A& a, int index, F&& f) {
  switch (index) {
#define ATTR(Field, name, Type, Kind, init) \
  case kAttrIndex##Field:                   \
    return f(a.name);
#include "runtime/attrs.def"
#undef ATTR
  }
  throw std::logic_error("visit_attr: no attribute " + std::to_string(index));
}
/// Attributes added after IR files were first saved: the printer leaves them out where they
/// hold their default, and the parser takes a missing one as its default, so older files read.
inline constexpr uint64_t kOptionalAttrs = kAttrLse;
/// Whether attribute `index` of `a` holds its runtime/attrs.def default.
inline bool is_default(const Attrs& a, int index) {
  Attrs d;
  return visit_attr(a, index, [&](const auto& v) {
    using T = std::decay_t<decltype(v)>;
    return visit_attr(d, index, [&](const auto& w) {
      if constexpr (std::is_same_v<T, std::decay_t<decltype(w)>> && requires { bool(v == w); }) return bool(v == w);
      else return false;
    });
  });
}

/// How a pointwise op treats dtypes. The API casts inputs to the compute dtype; the op's
/// shape/dtype rule then requires it.
enum class Promote : uint8_t {
  Same,     // compute in the promoted input dtype; output has it too
  Float,    // as Same, but integers and bool compute in f32 (exp, div, ...)
  Compare,  // compute in the promoted dtype; output bool
  Logical,  // inputs are read as truth values; output bool
};

/// Bit set of dtype kinds an op accepts for its compute dtype.
enum KindMask : uint8_t { kBool = 1, kInt = 2, kFloat = 4, kAllKinds = 7 };
uint8_t kind_bit(DType t);

/// What a derivative rule sees. Rules use only ordinary Tensor ops (never storage), so the
/// same rule serves eager backward and, replayed on a tracer's tensors, IR autodiff.
struct VjpArgs {
  /// One gradient per operand (pointwise: per operand slot, immediates included); an undefined
  /// Tensor means none. The engine sums each back to its input's shape and dtype.
  using Grads = std::vector<Tensor>;
  OpId op;
  std::span<const Tensor> in;            // the tensor inputs, as given to apply() (when the op saves them)
  std::span<const TensorType> in_types;  // their types (always)
  const Tensor& out;                     // the output (defined when the op's OpDef saves it)
  const Tensor& grad;                    // gradient of the loss with respect to out
  const Attrs& attrs;
  /// Bit k < 31: operand k needs a gradient (others may be skipped); bit 31: operand 31 or a
  /// later one does (cat's operands past the 31st all ask for theirs).
  uint32_t needs;
  bool needs_grad(int k) const { return needs >> std::min(k, 31) & 1; }
  static uint32_t need_bit(int k) { return 1u << std::min(k, 31); }
  /// Operand k: a tensor input, or a pointwise immediate as a 0-d tensor of the compute dtype.
  Tensor operand(int k) const;
};
using Grads = VjpArgs::Grads;

using InferFn = TensorType (*)(OpId, std::span<const Tensor>, const Attrs&);
using KernelFn = void (*)(OpId, std::span<const Tensor>, const Attrs&, const Tensor& out);
using ViewFn = Tensor (*)(const Tensor&, const Attrs&);
using MakeFn = Tensor (*)(std::span<const Tensor>, const Attrs&, const TensorType& type);
using VjpFn = Grads (*)(const VjpArgs&);
/// An op's floating-point operations on operands of types `in` giving `out` (a multiply-add is
/// two), for the cost model (jit/cost.h).
using FlopsFn = double (*)(std::span<const TensorType> in, const TensorType& out, const Attrs& attrs);

/// The dtype a combining reduction of dtype `t` accumulates in: f32 for f16 and bf16, f32 and
/// f64 as they are, i64 for integers and bool.
DType accumulator_dtype(DType t);
/// What a reduction computing in dtype `t` starts from (and a reduction over nothing gives):
/// 0, 1, -inf or t's lowest value (max), +inf or t's largest value (min); for bool, false and
/// true. Exact in t, so a kernel may also start an output of the result's dtype at it.
Scalar reduction_identity(Combine combine, DType t);
/// The same, as a value of element type E (the eager kernels' accumulators; E is a float or an
/// integer type, so the rule lives here once for every reader).
template <class E> constexpr E reduction_identity_as(Combine combine) {
  constexpr bool f = std::numeric_limits<E>::has_infinity;
  switch (combine) {
    case Combine::Sum: return E(0);
    case Combine::Prod: return E(1);
    case Combine::Max: return f ? -std::numeric_limits<E>::infinity() : std::numeric_limits<E>::lowest();
    case Combine::Min: return f ? std::numeric_limits<E>::infinity() : std::numeric_limits<E>::max();
    case Combine::None: break;
  }
  return E(0);
}

/// What a derivative rule reads, so the tape keeps only that.
enum SaveMask : uint8_t { kSaveNothing = 0, kSaveInputs = 1, kSaveOutput = 2, kSaveBoth = 3 };

/// One op's behaviour, defined once in its family's file (see DESIGN.md "One op, one list").
/// Its name, arity and family come from ops.def.
struct OpDef {
  Promote promote = Promote::Same;  // pointwise only
  uint8_t kinds = kAllKinds;        // pointwise only: dtype kinds it computes in
  InferFn infer = nullptr;          // shape/dtype rule: throws kiln::Error on bad input
  KernelFn cpu = nullptr;           // writes the result into a fresh contiguous `out`
  ViewFn view = nullptr;            // views: returns an alias of the input instead
  MakeFn make = nullptr;            // registered ops: runs the device's kernel, which returns a
                                    // new tensor of `type` (no backend op table is read)
  VjpFn vjp = nullptr;              // derivative, written with Tensor ops
  bool differentiable = true;       // false: no gradient flows through it (comparisons, argmax)
  uint8_t saves = kSaveInputs;      // what vjp reads (SaveMask)
  uint64_t attrs = 0;               // the Attrs fields it reads (AttrField)
  uint8_t linear_in = 0;            // pointwise: bit k, the op is linear in operand k, so the
                                    // rule reads its value only for the other operands
  Combine combine = Combine::None;  // combining reductions: how elements combine
  bool effect = false;              // an ordered side effect (a collective): the passes never
                                    // fold, merge, drop or reorder it among effects
  FlopsFn flops = nullptr;          // loop-shaped ops (matmul, conv, attention, pools, rnn):
                                    // their FLOPs; the others count one per element computed
                                    // (pointwise) or read (reductions), none for movement
};

const OpDef& op_def(OpId id);
const char* op_name(OpId id);  // "add"
/// The name a node of op `id` with these attributes prints: a registered op's own
/// ("mylib::rotary"), else op_name(id).
const char* op_name(OpId id, const Attrs& attrs);
/// Op `id`'s FLOPs on operands of types `in` giving `out`: its OpDef's rule, else one per
/// element computed (pointwise) or read (reductions), and none for movement, casts and the rest.
double op_flops(OpId id, std::span<const TensorType> in, const TensorType& out, const Attrs& attrs);
/// Writes the op's name (gtest prints parameters with it).
std::ostream& operator<<(std::ostream& os, OpId id);
int op_arity(OpId id);  // operands, tensors and immediates; -1: any number
OpFamily op_family(OpId id);

/// The type op `id` gives for `in`: its OpDef's shape/dtype rule, on the device apply() runs it
/// on. Throws kiln::Error naming the op when the inputs don't fit.
TensorType infer_type(OpId id, std::span<const Tensor> in, const Attrs& attrs = {});

/// Runs op `id` on `in`: checks types, then records it for a tracer when one is active, else
/// runs the kernel of the inputs' device backend (runtime/backend.h), or makes the view. The
/// single place any op executes. The inputs share one device, except that a 0-d CPU tensor
/// may meet tensors on any device (PyTorch's CPU-scalar rule: a learning rate, a step count).
/// to_device alone moves data between devices.
Tensor apply(OpId id, std::span<const Tensor> in, const Attrs& attrs = {});
inline Tensor apply(OpId id, std::initializer_list<Tensor> in, const Attrs& attrs = {}) {
  return apply(id, std::span<const Tensor>(in.begin(), in.size()), attrs);
}

}  // namespace kiln
