// jit/cost.cpp -- the cost model of a compiled plan (jit/cost.h).
#include "jit/cost.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <unordered_set>

#include "jit/executable.h"
#include "jit/group_runner.h"
#include "jit/plan.h"
#include "runtime/check.h"

namespace kiln::jit {
namespace {

// Data sheets, dense: NVIDIA A100 (SXM4 80 GB), H100 (SXM5) and H200 (SXM).
const std::vector<DevicePeak>& peaks() {
  static const std::vector<DevicePeak> p = {
      {"A100", 2.039e12, 19.5e12, 156e12, 312e12, 9.7e12, 19.5e12, 108},
      {"H100", 3.35e12, 67e12, 494.7e12, 989.4e12, 34e12, 67e12, 132},
      {"H200", 4.8e12, 67e12, 494.7e12, 989.4e12, 34e12, 67e12, 132},
  };
  return p;
}

bool tensor_core_op(OpId op) {
  switch (op) {
    case OpId::Matmul:
    case OpId::Addmm:
    case OpId::AddmmRelu:
    case OpId::AddmmGeluTanh:
    case OpId::Conv2d:
    case OpId::Conv2dInputGrad:
    case OpId::Conv2dWeightGrad:
    case OpId::Attention:
    case OpId::AttentionBackward:
    case OpId::Rnn:
    case OpId::RnnBackward: return true;
    default: return false;
  }
}

double op_flops(const ir::Graph& g, const ir::Node& n) {
  std::vector<TensorType> in;
  for (uint32_t v : n.inputs) in.push_back(g.type(v));
  return kiln::op_flops(n.op, in, g.type(n.result), n.attrs);
}

double total_flops(std::span<const KernelCost> kernels) {
  double f = 0;
  for (const KernelCost& k : kernels) f += k.flops;
  return f;
}

int64_t nbytes(const TensorType& t) { return t.shape.product() * static_cast<int64_t>(dtype_size(t.dtype)); }

// A fused group reading `input_bytes` of its operands: its results written once, its body's
// FLOPs, its kernels as its device plans them.
KernelCost group_cost(const ir::Node& n, std::span<const int64_t> input_bytes, int multiprocessors) {
  const ir::Graph& body = *n.body;
  KernelCost k;
  k.name = group_label(body);
  for (int64_t b : input_bytes) k.bytes_read += b;
  for (uint32_t v : body.outputs) k.bytes_written += nbytes(body.type(v));
  for (const ir::Node& m : body.nodes)
    if (m.kind == ir::NodeKind::Op) k.flops += op_flops(body, m);
  const TensorType& out = body.type(body.outputs[0]);
  k.dtype = out.dtype;
  k.launches = group_launches(n, out.device, multiprocessors);
  return k;
}

// What an elementwise group's kernel text depends on, as far as the model sees: its body with
// the domain's shape erased, and which values have it (an alike group over other sizes writes
// the same text, and shares its launch: jit/executable.cpp's HeldLaunches).
std::string alike_key(const ir::Graph& body) {
  ir::Graph b = body;
  const Dims domain = b.type(b.outputs[0]).shape;
  std::string full;
  for (TensorType& t : b.types) {
    full += t.shape == domain ? '1' : '0';
    if (t.shape == domain) t.shape = Dims{};
  }
  return ir::print(b) + full;
}

}  // namespace

KernelCost fused_cost(const ir::Node& fused, std::span<const TensorType> inputs, int multiprocessors) {
  std::vector<int64_t> in;
  for (const TensorType& t : inputs) in.push_back(nbytes(t));
  return group_cost(fused, in, multiprocessors);
}

const DevicePeak& device_peak(std::string_view name) {
  for (const DevicePeak& p : peaks())
    if (p.name == name) return p;
  throw Error(
      fmt::format("cost: no peaks for a device named '{}' (known: {})", name, fmt::join(device_peak_names(), ", ")));
}

std::vector<std::string> device_peak_names() {
  std::vector<std::string> names;
  for (const DevicePeak& p : peaks()) names.push_back(p.name);
  return names;
}

double KernelCost::rate(const DevicePeak& peak, bool tf32) const {
  if (unit == MathUnit::TensorCores) {
    switch (dtype) {
      case DType::F16:
      case DType::BF16: return peak.bf16;
      case DType::F64: return peak.fp64_tensor;
      case DType::F32: return tf32 ? peak.tf32 : peak.fp32;
      default: return peak.fp32;
    }
  }
  return dtype == DType::F64 ? peak.fp64 : peak.fp32;
}

double KernelCost::bound(const DevicePeak& peak, bool tf32) const {
  double memory = static_cast<double>(bytes()) / peak.bandwidth;
  double math = flops > 0 ? flops / rate(peak, tf32) : 0;
  return std::max(memory, math);
}

int64_t PlanCost::bytes() const {
  int64_t b = 0;
  for (const KernelCost& k : kernels) b += k.bytes();
  return b;
}
double PlanCost::flops() const { return total_flops(kernels); }
int64_t PlanCost::launches() const {
  int64_t n = 0;
  for (const KernelCost& k : kernels) n += k.launches;
  return n;
}
double PlanCost::bound(const DevicePeak& peak, bool tf32) const {
  double t = 0;
  for (const KernelCost& k : kernels) t += k.bound(peak, tf32);
  return t;
}

std::string PlanCost::table(const DevicePeak& peak, size_t top, bool tf32) const {
  std::vector<size_t> order(kernels.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return kernels[a].bound(peak, tf32) > kernels[b].bound(peak, tf32); });
  const double total = bound(peak, tf32);
  std::string out = fmt::format("cost on {} ({:.0f} GB/s; TF32 {}): {} kernels, {} launches\n", peak.name,
                                peak.bandwidth / 1e9, tf32 ? "on" : "off", kernels.size(), launches());
  out += fmt::format("{:<44} {:>12} {:>12} {:>8} {:>10} {:>6}\n", "kernel", "MB", "GFLOP", "launches", "bound us",
                     "share");
  for (size_t i = 0; i < order.size() && i < top; ++i) {
    const KernelCost& k = kernels[order[i]];
    std::string name = k.name.size() > 44 ? k.name.substr(0, 41) + "..." : k.name;
    double b = k.bound(peak, tf32);
    out += fmt::format("{:<44} {:>12.3f} {:>12.3f} {:>8} {:>10.2f} {:>5.1f}%\n", name,
                       static_cast<double>(k.bytes()) / 1e6, k.flops / 1e9, k.launches, b * 1e6,
                       total > 0 ? 100 * b / total : 0.0);
  }
  if (order.size() > top) out += fmt::format("... and {} more\n", order.size() - top);
  out += fmt::format("{:<44} {:>12.3f} {:>12.3f} {:>8} {:>10.2f} {:>5.1f}%\n", "total",
                     static_cast<double>(bytes()) / 1e6, flops() / 1e9, launches(), total * 1e6, 100.0);
  return out;
}

double EagerFloor::flops() const { return total_flops(math); }

double EagerFloor::bound(const DevicePeak& peak, bool tf32) const {
  double math_s = 0;
  for (const KernelCost& k : math) math_s += k.flops / k.rate(peak, tf32);
  return std::max(static_cast<double>(bytes()) / peak.bandwidth, math_s);
}

EagerFloor eager_floor(const ir::Graph& g, std::span<const char> args_need_grad, std::span<const char> trained) {
  KILN_CHECK(trained.size() == g.params.size(), "cost: eager_floor of @{}: {} flags for {} parameters", g.name,
             trained.size(), g.params.size());
  enum Role : uint8_t { Computed, Argument, Trained, Frozen };
  std::vector<uint8_t> role(g.types.size(), Computed);
  std::vector<char> needs_grad(g.types.size(), 0);
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    role[g.inputs[i]] = Argument;
    needs_grad[g.inputs[i]] = i < args_need_grad.size() && args_need_grad[i];
  }
  for (size_t i = 0; i < g.params.size(); ++i) {
    role[g.params[i]] = trained[i] ? Trained : Frozen;
    needs_grad[g.params[i]] = trained[i];
  }
  std::vector<char> assigned(g.types.size(), 0), forward(g.types.size(), 0), counted(g.types.size(), 0);
  for (const ir::Node& n : g.nodes)
    if (n.kind == ir::NodeKind::Assign) assigned[n.inputs[0]] = 1;
  std::vector<uint32_t> base = view_bases(g);
  // The forward runs up to its last op recorded with grad mode on (with the ops it runs
  // without, as BatchNorm's running statistics); the backward and the optimizer follow.
  size_t backward_from = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].kind == ir::NodeKind::Op && g.nodes[i].grad) backward_from = i + 1;
  EagerFloor floor;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.kind != ir::NodeKind::Op) continue;
    if (i < backward_from) {
      forward[n.result] = 1;
      int operands_needing_grad = 0;
      for (uint32_t v : n.inputs) operands_needing_grad += needs_grad[v];
      needs_grad[n.result] = n.grad && operands_needing_grad > 0 && op_def(n.op).differentiable;
      // A parameter the backward reads again: the optimizer reads it too, so it is told apart
      // as the operand of a forward op that keeps its inputs for the gradient of another
      // operand (the weight of a layer whose input needs a gradient; not a bias).
      if (n.grad && (op_def(n.op).saves & kSaveInputs))
        for (uint32_t v : n.inputs)
          if (uint32_t b = base[v]; role[b] == Trained && !counted[b] && operands_needing_grad > needs_grad[v])
            counted[b] = 1, floor.reread += nbytes(g.type(b));
    } else {
      // The backward's and the optimizer's ops: the forward's values they read were kept, and
      // the arguments and unchanging parameters they read are read again.
      for (uint32_t v : n.inputs) {
        uint32_t b = base[v];
        bool kept = role[b] == Computed ? forward[b] != 0 : role[b] == Argument || (role[b] == Frozen && !assigned[b]);
        if (!kept || counted[b]) continue;
        counted[b] = 1;
        (role[b] == Computed ? floor.activations : floor.reread) += nbytes(g.type(b));
      }
    }
    if (op_family(n.op) == OpFamily::View) continue;
    if (double f = op_flops(g, n); f > 0) {
      KernelCost k;
      k.name = op_name(n.op);
      k.flops = f;
      k.dtype = n.inputs.empty() ? g.type(n.result).dtype : g.type(n.inputs[0]).dtype;
      k.unit = tensor_core_op(n.op) ? MathUnit::TensorCores : MathUnit::Cores;
      floor.math.push_back(std::move(k));
    }
  }
  for (uint32_t v : g.inputs) floor.inputs += nbytes(g.type(v));
  for (uint32_t v : g.params) {
    int64_t b = nbytes(g.type(v));
    if (!assigned[v]) floor.inputs += b;
    else if (role[v] == Trained) floor.parameters += b, floor.gradients += b;
    else floor.state += b;
  }
  return floor;
}

PlanCost plan_cost(const ir::Graph& g, int multiprocessors) {
  for (const TensorType& t : g.types)
    for (int64_t d : t.shape)
      KILN_CHECK(!is_symbol(d), "cost: @{} has a dynamic shape ({}); size its dims first", g.name, t.str());
  // What a kernel reads of a value: the elements its view covers, at most its base's.
  std::vector<uint32_t> base = view_bases(g);
  auto read = [&](uint32_t v) { return std::min(nbytes(g.type(v)), nbytes(g.type(base[v]))); };
  PlanCost cost;
  // Groups held back to share a launch with alike ones, as the Executable runs them: per alike
  // key, how many joined its open launches; they launch when a node reads one of their results.
  std::map<std::string, int64_t> held;
  std::unordered_set<uint32_t> held_values;
  bool next_fused = false;  // the next node but assigns is a fused group
  std::vector<char> may_hold(g.nodes.size(), 0);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    may_hold[i] = next_fused;
    if (g.nodes[i].kind != ir::NodeKind::Assign) next_fused = g.nodes[i].kind == ir::NodeKind::Fused;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.kind == ir::NodeKind::Const || n.kind == ir::NodeKind::Assign) continue;
    if (std::any_of(n.inputs.begin(), n.inputs.end(), [&](uint32_t v) { return held_values.count(v) > 0; })) {
      held.clear();
      held_values.clear();
    }
    KernelCost k;
    if (n.kind == ir::NodeKind::Fused) {
      std::vector<int64_t> in;
      for (uint32_t v : n.inputs) in.push_back(read(v));
      k = group_cost(n, in, multiprocessors);
      const Device device = n.body->type(n.body->outputs[0]).device;
      const int batch = k.launches == 1 ? group_batch(n, device, multiprocessors) : 1;
      if (batch > 1 && (may_hold[i] || !held.empty())) {
        int64_t& joined = held[alike_key(*n.body)];
        if (joined++ % batch != 0) k.launches = 0;  // in an open launch of alike groups
        held_values.insert(n.results.begin(), n.results.end());
      }
    } else {
      if (op_family(n.op) == OpFamily::View) continue;  // an alias: no kernel
      k.name = op_name(n.op);
      for (uint32_t v : n.inputs) k.bytes_read += read(v);
      k.bytes_written = nbytes(g.type(n.result));
      k.flops = op_flops(g, n);
      k.dtype = g.type(n.result).dtype;
      if (!n.inputs.empty() && op_family(n.op) != OpFamily::Cast) k.dtype = g.type(n.inputs[0]).dtype;
      k.unit = tensor_core_op(n.op) ? MathUnit::TensorCores : MathUnit::Cores;
      k.launches = 1;
    }
    cost.kernels.push_back(std::move(k));
  }
  return cost;
}

}  // namespace kiln::jit
