// nn/optim_fused.cpp -- the fused eager pass's plan (nn/optim_fused.h): which parameters it
// takes, and whether their memory overlaps.
#include "nn/optim_fused.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "runtime/recorder.h"

namespace kiln::optim::detail {
namespace {

bool fusable(const Tensor& t, DType dtype) {
  return t.has_storage() && t.device().is_cpu() && t.dtype() == dtype && t.is_contiguous();
}

}  // namespace

Plan make_plan(const std::vector<Tensor>& params, const std::vector<Tensor>& state0, const std::vector<Tensor>& state1,
               const std::vector<Tensor>& state2) {
  Plan plan;
  bool traced = active_recorder() != nullptr;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    DType t = p.dtype();
    bool fuse = !traced && (t == DType::F32 || t == DType::F64) && fusable(p, t) && g.has_storage() &&
                g.device().is_cpu() && g.dtype() == t && g.shape() == p.shape();
    for (const auto* s : {&state0, &state1, &state2}) fuse = fuse && (s->empty() || fusable((*s)[i], t));
    if (!fuse) {
      plan.tensor_path.push_back(i);
      continue;
    }
    if (!g.is_contiguous()) plan.keep.push_back(g = g.contiguous());
    Slot s{t,
           p.numel(),
           static_cast<char*>(p.data_ptr()),
           static_cast<const char*>(g.data_ptr()),
           {nullptr, nullptr, nullptr}};
    plan.written.push_back(p);
    int k = 0;
    for (const auto* st : {&state0, &state1, &state2}) {
      if (st->empty()) continue;
      s.state[k++] = static_cast<char*>((*st)[i].data_ptr());
      plan.written.push_back((*st)[i]);
    }
    plan.slots.push_back(s);
  }
  return plan;
}

bool slots_overlap(const std::vector<Slot>& slots) {
  std::vector<std::pair<const char*, const char*>> spans;
  for (const Slot& s : slots) spans.emplace_back(s.p, s.p + s.n * dtype_size(s.dtype));
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) return true;
  return false;
}

}  // namespace kiln::optim::detail
