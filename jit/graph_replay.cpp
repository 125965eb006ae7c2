// jit/graph_replay.cpp -- whether a compiled plan replays as a device graph, and how it
// splits (jit/graph_replay.h); the replay backends by device type.
#include "jit/graph_replay.h"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstdlib>

#include "jit/plan.h"
#include "runtime/check.h"

namespace kiln::jit {
namespace {

std::atomic<int> g_graphs{-1};  // -1: not read from the environment yet

std::string value_str(const ir::Graph& g, uint32_t v) { return fmt::format("%{} ({})", v, g.type(v).str()); }

std::array<std::atomic<ReplayBackend>, kNumDeviceTypes>& replay_backends() {
  static std::array<std::atomic<ReplayBackend>, kNumDeviceTypes> b{};
  return b;
}

}  // namespace

bool cuda_graphs_enabled() {
  int on = g_graphs.load(std::memory_order_relaxed);
  if (on < 0) {
    const char* e = std::getenv("KILN_CUDA_GRAPHS");
    on = e && std::string(e) == "0" ? 0 : 1;
    g_graphs.store(on, std::memory_order_relaxed);
  }
  return on == 1;
}

void set_cuda_graphs_enabled(bool on) { g_graphs.store(on ? 1 : 0, std::memory_order_relaxed); }

bool uses_cuda(const ir::Graph& g) {
  for (const TensorType& t : g.types)
    if (t.device.is_cuda()) return true;
  return false;
}

ReplayLayout replay_layout(const ir::Graph& g) {
  ReplayLayout l;
  auto refuse = [&](std::string why) {
    l.refusal = std::move(why);
    return l;
  };
  if (!cuda_graphs_enabled()) return refuse("CUDA graphs are off (KILN_CUDA_GRAPHS=0 or jit::set_cuda_graphs_enabled)");
  for (const ir::Node& n : g.nodes) {
    if (n.kind != ir::NodeKind::Op) continue;
    if (op_def(n.op).effect) return refuse(fmt::format("op {} is a collective", op_name(n.op)));
    if (n.grad) return refuse(fmt::format("op {} records autograd: the tape keeps each call's tensors", op_name(n.op)));
  }
  Device device = cpu;
  for (uint32_t v = 0; v < g.types.size(); ++v) {
    const TensorType& t = g.type(v);
    for (int64_t d : t.shape)
      if (is_symbol(d)) return refuse(fmt::format("value {} has a dynamic shape", value_str(g, v)));
    if (t.device.is_cuda() && device.is_cpu()) device = t.device;
  }
  if (!device.is_cuda()) return refuse("it runs on the cpu");
  l.device = device;
  std::vector<char> constant(g.types.size(), 0), crossing(g.types.size(), 0);
  for (const ir::Node& n : g.nodes)
    if (n.kind == ir::NodeKind::Const) constant[n.result] = 1;
  for (uint32_t v = 0; v < g.types.size(); ++v) {
    const TensorType& t = g.type(v);
    if (t.device == device || t.device.is_cpu()) continue;
    return refuse(
        fmt::format("value {} is not on {}: a graph replays the work of one device", value_str(g, v), device.str()));
  }
  l.host.assign(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.kind == ir::NodeKind::Const) {  // both parts read it, as it is
      l.host[i] = ReplayLayout::kBoth;
      continue;
    }
    // (a fused group's values are on one device: the CPU's groups of scalars run on the host)
    bool on_host = g.type(n.kind == ir::NodeKind::Assign ? n.inputs[0] : n.result).device.is_cpu();
    l.host[i] = on_host ? ReplayLayout::kHost : ReplayLayout::kDevice;
    for (uint32_t v : n.inputs) {
      bool cpu_value = g.type(v).device.is_cpu();
      if (on_host && !cpu_value)
        return refuse(fmt::format("value {} is read on the cpu: that waits for the device", value_str(g, v)));
      // A constant is read as it is, at capture, as every call would, unless it is copied to
      // the device (that copy is made once, outside the graph).
      if (!on_host && cpu_value && !constant[v]) crossing[v] = 1;
      if (!on_host && cpu_value && constant[v] && n.kind == ir::NodeKind::Op && n.op == OpId::ToDevice) crossing[v] = 2;
    }
    if (on_host && n.kind == ir::NodeKind::Assign) {
      size_t p = 0;
      while (g.params[p] != n.inputs[0]) ++p;
      l.host_assigns.emplace_back(p, n.inputs[1]);
    }
  }
  for (uint32_t v = 0; v < g.types.size(); ++v) {
    if (crossing[v] == 1) l.crossing.push_back(v);
    if (crossing[v] == 2) l.uploads.push_back(v);
  }
  std::vector<uint32_t> base = view_bases(g);
  std::vector<char> argument(g.types.size(), 0);
  for (uint32_t v : g.inputs) argument[v] = 1;
  for (uint32_t v : g.params) argument[v] = 1;
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    uint32_t v = g.outputs[o];
    if (!argument[v] && argument[base[v]])
      return refuse(fmt::format("output {} is a view of an argument: a replay returns copies", o));
  }
  return l;
}

std::string graph_replay_refusal(const ir::Graph& g) { return replay_layout(g).refusal; }

void register_replay_backend(DeviceType type, ReplayBackend backend) {
  replay_backends()[static_cast<size_t>(type)].store(backend, std::memory_order_release);
}

std::unique_ptr<PlanReplay> make_replay(const ir::Graph& g, ReplayLayout layout, std::string* why) {
  ReplayBackend b = replay_backends()[static_cast<size_t>(layout.device.type)].load(std::memory_order_acquire);
  if (!b) {
    *why = fmt::format("no graph replay for {} in this kiln", layout.device.str());
    return nullptr;
  }
  return b(g, std::move(layout));
}

}  // namespace kiln::jit
