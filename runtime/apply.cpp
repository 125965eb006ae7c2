// runtime/apply.cpp -- the op table and apply(): the one place where any op runs.
#include <fmt/format.h>

#include <array>
#include <ostream>

#include "runtime/autograd_meta.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/formulas.h"
#include "runtime/profiler.h"
#include "runtime/recorder.h"
#include "runtime/registered_op.h"

namespace kiln {

static_assert(int(Promote::Float) == int(fm::P::Float) && int(Promote::Logical) == int(fm::P::Logical));
static_assert(kBool == fm::B && kInt == fm::I && kFloat == fm::F);
static_assert(int(kSaveNothing) == fm::Nothing && int(kSaveInputs) == fm::Inputs && int(kSaveOutput) == fm::Output &&
              int(kSaveBoth) == fm::Both);

namespace {

struct OpInfo {
  const OpDef* def;
  const char* name;
  int arity;
  OpFamily family;
};

// Constant-initialized, so every op is known before any initializer runs; an op defined above
// the runtime has its entry replaced once, while the library loads (register_op_def).
constinit std::array<OpInfo, kNumOps> g_ops = {{
#define OP(Name, name, arity, family) {&defs::Name, #name, arity, OpFamily::family},
#include "runtime/ops.def"
#undef OP
}};

thread_local Recorder* t_recorder = nullptr;

}  // namespace

TensorType unregistered_op(OpId id, std::span<const Tensor>, const Attrs&) {
  throw Error(
      fmt::format("{}: this op is defined above the runtime, and its layer has not registered it (kiln's "
                  "library was linked without it)",
                  op_name(id)));
}

void register_op_def(OpId id, const OpDef& def) {
  OpInfo& op = g_ops[static_cast<size_t>(id)];
  KILN_ASSERT(op.def->infer == unregistered_op && def.infer != unregistered_op);
  op.def = &def;
}

uint8_t kind_bit(DType t) { return t == DType::Bool ? kBool : is_float(t) ? kFloat : kInt; }

const OpDef& op_def(OpId id) { return *g_ops[static_cast<size_t>(id)].def; }
const char* op_name(OpId id) { return g_ops[static_cast<size_t>(id)].name; }
const char* op_name(OpId id, const Attrs& attrs) {
  return id == OpId::Registered && attrs.registered ? registered_op_name(*attrs.registered) : op_name(id);
}

double op_flops(OpId id, std::span<const TensorType> in, const TensorType& out, const Attrs& attrs) {
  if (FlopsFn f = op_def(id).flops) return f(in, out, attrs);
  switch (op_family(id)) {
    case OpFamily::Pointwise: return static_cast<double>(out.shape.product());
    case OpFamily::Reduce: return in.empty() ? 0 : static_cast<double>(in[0].shape.product());
    default: return 0;
  }
}
std::ostream& operator<<(std::ostream& os, OpId id) { return os << op_name(id); }
int op_arity(OpId id) { return g_ops[static_cast<size_t>(id)].arity; }
OpFamily op_family(OpId id) { return g_ops[static_cast<size_t>(id)].family; }

namespace {
constexpr std::array<AttrSchema, kNumAttrs> kAttrSchema = {{
#define ATTR(Field, name, Type, Kind, init) {kAttr##Field, #name, AttrKind::Kind},
#include "runtime/attrs.def"
#undef ATTR
}};
}  // namespace

const AttrSchema& attr_schema(int index) { return kAttrSchema.at(static_cast<size_t>(index)); }
const AttrSchema* find_attr(std::string_view name) {
  for (const AttrSchema& s : kAttrSchema)
    if (s.name == name) return &s;
  return nullptr;
}

Recorder* active_recorder() { return t_recorder; }
RecorderGuard::RecorderGuard(Recorder* r) : prev_(t_recorder) { t_recorder = r; }
RecorderGuard::~RecorderGuard() { t_recorder = prev_; }

namespace {

// The device an op runs on: its inputs', where a 0-d CPU tensor may meet any device.
Device op_device(OpId id, std::span<const Tensor> in, const Attrs& attrs) {
  int first = -1;  // the first input that is not a CPU scalar
  for (size_t i = 0; i < in.size(); ++i) {
    KILN_CHECK(in[i].defined(), "{}: input {} is an undefined tensor", op_name(id, attrs), i);
    if (in[i].device().is_cpu() && in[i].dim() == 0) continue;
    if (first < 0) {
      first = static_cast<int>(i);
    } else {
      KILN_CHECK(in[i].device() == in[first].device(),
                 "{}: expected all inputs on one device (or 0-d on the CPU), got {} and {}", op_name(id, attrs),
                 in[first].type().str(), in[i].type().str());
    }
  }
  if (id == OpId::ToDevice || op_arity(id) == 0) return attrs.device;  // a move, an op with no operands
  return first >= 0 ? in[first].device() : cpu;
}

}  // namespace

TensorType infer_type(OpId id, std::span<const Tensor> in, const Attrs& attrs) {
  Device device = op_device(id, in, attrs);
  TensorType type = op_def(id).infer(id, in, attrs);
  type.device = device;
  return type;
}

Tensor apply(OpId id, std::span<const Tensor> in, const Attrs& attrs) {
  const OpDef& op = op_def(id);
  TensorType type = infer_type(id, in, attrs);
  Device device = type.device;
  bool taped = false;
  if (grad_enabled()) {
    for (const Tensor& t : in) taped = taped || requires_grad(t.impl());
  }
  if (Recorder* rec = t_recorder) {
    // The tape is kept while tracing too: a backward() inside the traced function then runs
    // each vjp on the tracer's tensors, which records the backward graph.
    Tensor out = rec->record(id, in, attrs, type);
    if (taped) record_grad(id, in, attrs, out);
    return out;
  }
  Tensor out;
  {
    profiler::Scope event(profiler::Kind::Op, op_name(id, attrs));
    if (event) {
      std::string types;
      for (const Tensor& t : in) types += (types.empty() ? "" : ", ") + t.type().str();
      event.arg("inputs", types);
    }
    // Kernels may run other ops for their own bookkeeping; those are never taped.
    GradModeGuard no_grad(false);
    try {
      if (op.view) {
        out = op.view(in[0], attrs);
      } else if (op.make) {
        out = op.make(in, attrs, type);
      } else {
        out = Tensor::empty(type);
        if (id == OpId::ToDevice) copy_between(in[0], out);
        else backend(device).run(id, in, attrs, out);
      }
    } catch (const OutOfMemory& e) {
      throw OutOfMemory(fmt::format("{} (giving {}): {}", op_name(id, attrs), type.str(), e.what()));
    }
  }
  if (taped) record_grad(id, in, attrs, out);
  return out;
}

}  // namespace kiln
