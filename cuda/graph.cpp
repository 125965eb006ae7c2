// cuda/graph.cpp -- a compiled plan captured as a CUDA graph and replayed (the design is in the
// header).
#include "cuda/graph.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>

#include "runtime/api.h"
#include "runtime/autograd_meta.h"
#include "runtime/check.h"
#include "runtime/cuda.h"
#include "runtime/cuda_internal.h"
#include "runtime/log.h"

namespace kiln::cuda {
namespace {

// A replay that keeps meeting its parameters elsewhere recaptures each time: past this, it
// stops trying.
constexpr size_t kMaxCaptures = 4;

thread_local CapturedChecks* t_checks = nullptr;

}  // namespace

CapturedChecks* captured_checks() { return t_checks; }

void CapturedChecks::reset(int device) {
  flags_ = zeros({kSlots, 2}, DType::I64, cuda::device(device));
  ops_.clear();
}

Tensor CapturedChecks::flag(const char* op, int64_t size) {
  KILN_CHECK(static_cast<int64_t>(ops_.size()) < kSlots,
             "CUDA graph capture: more than {} checked index ops (gather, scatter) in one plan", kSlots);
  ops_.emplace_back(op, size);
  return flags_[static_cast<int64_t>(ops_.size()) - 1];
}

void CapturedChecks::defer(int device) const {
  for (size_t k = 0; k < ops_.size(); ++k)
    defer_check(device, flags_[static_cast<int64_t>(k)], ops_[k].first, ops_[k].second);
}

GraphReplay::GraphReplay(const ir::Graph& g, jit::ReplayLayout layout)
    : name_(g.name), layout_(std::move(layout)), graph_inputs_(g.inputs), graph_outputs_(g.outputs) {
  for (uint32_t v : g.inputs) cpu_input_.push_back(g.type(v).device.is_cpu());
  for (uint32_t v : g.outputs) cpu_output_.push_back(g.type(v).device.is_cpu());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.kind != ir::NodeKind::Assign || layout_.host[i] == jit::ReplayLayout::kHost) continue;
    size_t p = 0;
    while (g.params[p] != n.inputs[0]) ++p;
    assigned_.push_back(p);
  }
}

GraphReplay::~GraphReplay() = default;

size_t GraphReplay::captures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return captures_;
}

size_t GraphReplay::replays() const {
  std::lock_guard<std::mutex> lock(mu_);
  return replays_;
}

std::string GraphReplay::refusal() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refusal_;
}

void GraphReplay::refuse(std::string why) {
  refusal_ = std::move(why);
  graph_.reset();
  inputs_.clear();
  outputs_.clear();
  log(LogTopic::Cache, fmt::format("jit @{}: no CUDA graph: {}", name_, refusal_));
}

// The device inputs of this call: each read in place while it may be (the header), else
// copied into the graph's buffer (made on first use); and copies the host values the device
// part reads (the random state, a learning rate) into the graph's buffers. Returns the values
// the device part starts from. Nothing here waits for the device.
std::vector<Tensor> GraphReplay::stage(std::span<const Tensor> inputs, const std::vector<Tensor>& host,
                                       std::vector<Tensor>& device_inputs) {
  int device = layout_.device.index;
  if (scalars_.empty()) scalars_.resize(host.size());
  inputs_.resize(inputs.size());
  device_inputs.assign(inputs.size(), Tensor());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (cpu_input_[i]) continue;  // read on the host only
    if (!stage_all_ && inputs[i].is_contiguous()) {
      device_inputs[i] = inputs[i];
      continue;
    }
    if (!inputs_[i].defined()) inputs_[i] = Tensor::empty(inputs[i].type());  // contiguous, as every call sees it
    inputs_[i].copy_(inputs[i]);
    device_inputs[i] = inputs_[i];
  }
  std::vector<Tensor> values(host.size());
  auto copy = [&](uint32_t v, bool refresh) {
    if (!scalars_[v].defined()) {
      scalars_[v] = Tensor::empty({host[v].dtype(), host[v].shape(), cuda::device(device)});
      refresh = true;
    }
    // From page-locked memory (the pinned allocator's, held until its copy is done): the
    // upload is queued without the host waiting, as a pageable one may not be.
    if (refresh) scalars_[v].copy_(host[v].pin_memory());
    values[v] = scalars_[v];
  };
  for (uint32_t v : layout_.crossing) copy(v, true);
  for (uint32_t v : layout_.uploads) copy(v, false);  // constants: once
  return values;
}

bool GraphReplay::capture(std::span<const Tensor> inputs, std::span<const Tensor> params, const Plan& plan,
                          std::vector<Tensor> values) {
  graph_.reset();
  outputs_.clear();
  int device = layout_.device.index;
  checks_.reset(device);
  // The capture runs on the thread's own capture stream (a default stream cannot be captured,
  // and a pool stream may be another thread's) that first waits for the caller's work, the
  // copies into the graph's buffers included.
  cuda::Stream caller = cuda::current_stream(device);
  cuda::Stream side = cuda::capture_stream(device);
  cuda::Event before;
  before.record(caller);
  before.block(side);
  std::string why, failed;
  {
    cuda::StreamGuard on_side(side);
    cuda::begin_capture(side);
    t_checks = &checks_;
    try {
      outputs_ = plan.device(inputs, params, std::move(values));
    } catch (const Error& e) {
      failed = e.what();  // a call the capture does not allow (the plan ran before)
    }
    t_checks = nullptr;
    std::unique_ptr<cuda::CapturedGraph> graph = cuda::end_capture(side, &why);
    if (!failed.empty()) why = failed;
    else graph_ = std::move(graph);
  }
  ++captures_;
  if (!graph_) {
    refuse(fmt::format("capture failed: {}", why));
    return false;
  }
  params_.clear();
  for (const Tensor& p : params) params_.push_back(p.data_ptr());
  in_place_.clear();
  for (size_t i = 0; i < inputs.size(); ++i)
    in_place_.push_back(inputs[i].defined() && inputs[i].impl() != inputs_[i].impl() ? inputs[i].data_ptr() : nullptr);
  log(LogTopic::Cache,
      fmt::format("jit @{}: captured as a CUDA graph on cuda:{} (capture {})", name_, device, captures_));
  return true;
}

std::optional<std::vector<Tensor>> GraphReplay::run(std::span<const Tensor> inputs, std::span<const Tensor> params,
                                                    const Plan& plan) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || !refusal_.empty()) return std::nullopt;
  if (!jit::cuda_graphs_enabled()) {
    refuse("CUDA graphs were turned off");
    return std::nullopt;
  }
  GradModeGuard no_grad(false);
  bool moved = graph_ && params.size() != params_.size();
  for (size_t i = 0; graph_ && !moved && i < params.size(); ++i) moved = params[i].data_ptr() != params_[i];
  if (moved && captures_ >= kMaxCaptures) {
    refuse(fmt::format("the parameters moved between calls {} times", captures_));
    return std::nullopt;
  }
  // An input the graph reads in place that is elsewhere now: every input is staged from now on.
  bool inputs_moved = false;
  for (size_t i = 0; graph_ && i < in_place_.size(); ++i)
    inputs_moved =
        inputs_moved || (in_place_[i] && (inputs[i].data_ptr() != in_place_[i] || !inputs[i].is_contiguous()));
  if (inputs_moved) stage_all_ = true;
  std::vector<Tensor> host = plan.host(inputs, params);
  if (last_use_) last_use_->block(current_stream(layout_.device.index));
  std::vector<Tensor> device_inputs;
  std::vector<Tensor> values = stage(inputs, host, device_inputs);
  std::vector<Tensor> out(graph_outputs_.size());
  // The first call runs the device part as it is (it compiles the kernels, for contiguous
  // inputs, and lets the libraries choose their algorithms); the second captures it.
  bool warm_up = ++calls_ == 1;
  if (warm_up) {
    out = plan.device(device_inputs, params, std::move(values));
  } else {
    if ((!graph_ || moved || inputs_moved) && !capture(device_inputs, params, plan, std::move(values))) {
      // Nothing of the device part ran: the call runs as if there were no graph (its host part
      // again; its values are the same).
      return std::nullopt;
    }
    graph_->launch();
    checks_.defer(layout_.device.index);
    ++replays_;
    for (size_t o = 0; o < out.size(); ++o) {
      if (cpu_output_[o]) continue;
      out[o] = Tensor::empty(outputs_[o].type());  // the graph's own is overwritten by the next replay
      out[o].copy_(outputs_[o]);
    }
  }
  for (size_t o = 0; o < out.size(); ++o)  // host outputs as they were before the assigns
    if (cpu_output_[o]) out[o] = host[graph_outputs_[o]].clone();
  for (auto [p, v] : layout_.host_assigns) {
    Tensor target = params[p];
    target.copy_(host[v]);
  }
  if (!last_use_) last_use_ = std::make_unique<cuda::Event>();
  last_use_->record(current_stream(layout_.device.index));
  // What the device part's assigns did on the host when it was captured: the params changed.
  if (!warm_up)
    for (size_t p : assigned_) params[p].impl()->storage->bump_version();
  return out;
}

namespace {

const bool g_registered = [] {
  jit::register_replay_backend(DeviceType::CUDA, [](const ir::Graph& g, jit::ReplayLayout layout) {
    return std::unique_ptr<jit::PlanReplay>(std::make_unique<GraphReplay>(g, std::move(layout)));
  });
  return true;
}();

}  // namespace
}  // namespace kiln::cuda
