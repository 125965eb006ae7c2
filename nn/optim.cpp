// nn/optim.cpp -- optimizer updates, in place under NoGradGuard, each rule written once.
//
// A rule is a template over the value it updates: eagerly it runs on lanes of floats in one
// fused pass over all parameters; traced (or for parameters that pass does not take) it runs
// on Tensors, so the trace records the same arithmetic and the jit fuses it.
#include "nn/optim.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <utility>

#include "autograd/autograd.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/parallel.h"
#include "runtime/recorder.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kiln::optim {
namespace {

// ---- the values the rules run on ----------------------------------------------------------

// One SSE2 register of lanes: the fused loop runs the rules on these, so the arithmetic
// vectorizes and a rule's branches (on options and per-step flags) run once per block.
typedef float F4 __attribute__((vector_size(16)));
typedef double D2 __attribute__((vector_size(16)));

// Number: how a constant enters a value's arithmetic (rounded to the element type first, as a
// pointwise op's immediate is). Flag: a per-step condition (a bool, or a bool tensor traced).
template <class S> struct Traits;
template <> struct Traits<float> { using Number = float; using Flag = bool; };
template <> struct Traits<double> { using Number = double; using Flag = bool; };
template <> struct Traits<F4> { using Number = float; using Flag = bool; };
template <> struct Traits<D2> { using Number = double; using Flag = bool; };
template <> struct Traits<Tensor> { using Number = Scalar; using Flag = Tensor; };

// sqrt and pow of plain values; Tensors find kiln::sqrt and kiln::pow by argument lookup.
float sqrt(float x) { return std::sqrt(x); }
double sqrt(double x) { return std::sqrt(x); }
#if defined(__SSE2__)
F4 sqrt(F4 x) { return F4(_mm_sqrt_ps(__m128(x))); }
D2 sqrt(D2 x) { return D2(_mm_sqrt_pd(__m128d(x))); }
#else
template <class V> V sqrt_lanes(V x) {
  for (size_t i = 0; i < sizeof(V) / sizeof(x[0]); ++i) x[i] = std::sqrt(x[i]);
  return x;
}
F4 sqrt(F4 x) { return sqrt_lanes(x); }
D2 sqrt(D2 x) { return sqrt_lanes(x); }
#endif
double pow(double a, double b) { return std::pow(a, b); }

// c ? a : b, per step.
template <class S> S pick(bool c, const S& a, const S& b) { return c ? a : b; }
Tensor pick(const Tensor& c, const Tensor& a, const Tensor& b) { return where(c, a, b); }

// ---- the rules, once each -----------------------------------------------------------------

// SGD's numbers for one step, in the parameters' dtype.
template <class K> struct SgdStep {
  K lr;
  typename Traits<K>::Flag first;  // the first step: the velocity starts as the gradient
};

// torch.optim.SGD: v = momentum v + (1 - dampening) g; p -= lr (nesterov ? g + momentum v : v).
template <class S, class K>
void sgd_update(S& p, S g, S& v, const SgdStep<K>& k, const SgdOptions& o) {
  using N = typename Traits<S>::Number;
  if (o.weight_decay != 0) g = g + p * N(o.weight_decay);
  if (o.momentum != 0) {
    S next = v * N(o.momentum) + g * N(1 - o.dampening);
    if (o.dampening != 0) next = pick(k.first, g, next);  // (undamped, v = 0 gives v = g)
    v = next;
    g = o.nesterov ? g + v * N(o.momentum) : v;
  }
  p = p - g * k.lr;
}

// 1 - beta^t for Adam's two moments, from the step count t (a double, or the f64[] tensor).
template <class N> std::pair<N, N> bias_corrections(const N& t, const AdamOptions& o) {
  return {1.0 - pow(o.beta1, t), 1.0 - pow(o.beta2, t)};
}

// Adam's numbers for one step, in the parameters' dtype.
template <class K> struct AdamStep {
  K decay;      // AdamW with weight decay: p *= 1 - lr weight_decay
  K c2;         // the second moment's bias correction
  K step_size;  // lr / c1
};

template <class K>
AdamStep<K> adam_step(const K& lr, const K& c1, const K& c2, const AdamOptions& o, bool decoupled) {
  using N = typename Traits<K>::Number;
  AdamStep<K> k{.decay = {}, .c2 = c2, .step_size = lr / c1};
  if (decoupled && o.weight_decay != 0) k.decay = N(1.0) - lr * N(o.weight_decay);
  return k;
}

// torch.optim.Adam (decoupled: AdamW).
template <class S, class K>
void adam_update(S& p, S g, S& m, S& v, const AdamStep<K>& k, const AdamOptions& o,
                 bool decoupled) {
  using N = typename Traits<S>::Number;
  if (o.weight_decay != 0) {
    if (decoupled) p = p * k.decay;
    else g = g + p * N(o.weight_decay);
  }
  m = m * N(o.beta1) + g * N(1 - o.beta1);
  v = v * N(o.beta2) + g * g * N(1 - o.beta2);
  p = p - m / (sqrt(v / k.c2) + N(o.eps)) * k.step_size;
}

// ---- the fused eager pass -----------------------------------------------------------------

// A parameter in the fused pass: its data, gradient and state, contiguous, of one dtype.
struct Slot {
  DType dtype;
  int64_t n;
  char* p;
  const char* g;
  char* state[2];  // null where the optimizer keeps less
};

// The parameters with gradients, split between the fused pass and the Tensor path.
struct Plan {
  std::vector<Slot> slots;
  std::vector<size_t> tensor_path;  // indices into params
  std::vector<Tensor> written;      // what the fused pass writes (for the version counters)
  std::vector<Tensor> keep;         // contiguous copies of strided gradients
};

bool fusable(const Tensor& t, DType dtype) {
  return t.has_storage() && t.device().is_cpu() && t.dtype() == dtype && t.is_contiguous();
}

// state0/state1: the optimizer's per-parameter state (may be empty).
Plan make_plan(const std::vector<Tensor>& params, const std::vector<Tensor>& state0,
               const std::vector<Tensor>& state1) {
  Plan plan;
  bool traced = active_recorder() != nullptr;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    DType t = p.dtype();
    bool fuse = !traced && (t == DType::F32 || t == DType::F64) && fusable(p, t) &&
                g.has_storage() && g.device().is_cpu() && g.dtype() == t && g.shape() == p.shape();
    for (const auto* s : {&state0, &state1}) fuse = fuse && (s->empty() || fusable((*s)[i], t));
    if (!fuse) {
      plan.tensor_path.push_back(i);
      continue;
    }
    if (!g.is_contiguous()) plan.keep.push_back(g = g.contiguous());
    Slot s{t, p.numel(), static_cast<char*>(p.data_ptr()), static_cast<const char*>(g.data_ptr()),
           {nullptr, nullptr}};
    plan.written.push_back(p);
    int k = 0;
    for (const auto* st : {&state0, &state1}) {
      if (st->empty()) continue;
      s.state[k++] = static_cast<char*>((*st)[i].data_ptr());
      plan.written.push_back((*st)[i]);
    }
    plan.slots.push_back(s);
  }
  return plan;
}

// Whether two slots' parameters share memory (one tensor listed twice): those are updated one
// after the other, as the Tensor ops would.
bool slots_overlap(const std::vector<Slot>& slots) {
  std::vector<std::pair<const char*, const char*>> spans;
  for (const Slot& s : slots) spans.emplace_back(s.p, s.p + s.n * dtype_size(s.dtype));
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) return true;
  return false;
}

// Runs chunk(slot, begin, end) over all slots' elements as one range split across threads.
template <class Chunk> void for_each_chunk(std::span<const Slot> slots, const Chunk& chunk) {
  std::vector<int64_t> start(slots.size() + 1, 0);
  for (size_t i = 0; i < slots.size(); ++i) start[i + 1] = start[i] + slots[i].n;
  constexpr int64_t kGrain = 1 << 15;
  parallel_for(0, start.back(), kGrain, [&](int64_t b, int64_t e) {
    size_t i = std::upper_bound(start.begin(), start.end(), b) - start.begin() - 1;
    for (; i < slots.size() && start[i] < e; ++i) {
      int64_t lo = std::max(b, start[i]) - start[i], hi = std::min(e, start[i + 1]) - start[i];
      if (lo < hi) chunk(slots[i], lo, hi);
    }
  });
}

template <class V, class E> V load(const E* x) {
  V v;
  std::memcpy(&v, x, sizeof(V));
  return v;
}
template <class V, class E> void store(E* x, const V& v) { std::memcpy(x, &v, sizeof(V)); }

// Applies rule(p, g, s0, s1) to elements [b, e) of a slot: blocks of lanes V, then the tail
// one element at a time (the same IEEE operations, so the same bits either way).
template <class E, class V, class Rule>
void run_slot(const Slot& s, int64_t b, int64_t e, const Rule& rule) {
  constexpr int64_t W = sizeof(V) / sizeof(E);
  E* p = reinterpret_cast<E*>(s.p);
  const E* g = reinterpret_cast<const E*>(s.g);
  E* s0 = reinterpret_cast<E*>(s.state[0]);
  E* s1 = reinterpret_cast<E*>(s.state[1]);
  int64_t i = b;
  for (; i + W <= e; i += W) {
    V vp = load<V>(p + i), v0 = s0 ? load<V>(s0 + i) : V{}, v1 = s1 ? load<V>(s1 + i) : V{};
    rule(vp, load<V>(g + i), v0, v1);
    store(p + i, vp);
    if (s0) store(s0 + i, v0);
    if (s1) store(s1 + i, v1);
  }
  for (; i < e; ++i) {
    E xp = p[i], x0 = s0 ? s0[i] : E(0), x1 = s1 ? s1[i] : E(0);
    rule(xp, g[i], x0, x1);
    p[i] = xp;
    if (s0) s0[i] = x0;
    if (s1) s1[i] = x1;
  }
}

// The fused pass: make_rule(k) gives the rule for one dtype's step numbers k (f32 or f64).
template <class K32, class K64, class MakeRule>
void run_fused(Plan& plan, const K32& k32, const K64& k64, const MakeRule& make_rule) {
  auto chunk = [&](const Slot& s, int64_t b, int64_t e) {
    if (s.dtype == DType::F32) run_slot<float, F4>(s, b, e, make_rule(k32));
    else run_slot<double, D2>(s, b, e, make_rule(k64));
  };
  if (slots_overlap(plan.slots)) {
    for (const Slot& s : plan.slots) for_each_chunk(std::span<const Slot>(&s, 1), chunk);
  } else {
    for_each_chunk(plan.slots, chunk);
  }
  for (const Tensor& t : plan.written) t.impl()->storage->bump_version();
}

}  // namespace

// ---- the optimizers ------------------------------------------------------------------------

Optimizer::Optimizer(std::vector<Tensor> params, double lr)
    : params_(std::move(params)), lr_(lr), lr_tensor_(full({}, lr, DType::F64)) {
  KILN_CHECK(lr >= 0, "optimizer: learning rate must be non-negative, got {}", lr);
  for (size_t i = 0; i < params_.size(); ++i)
    KILN_CHECK(params_[i].defined() && params_[i].requires_grad() && params_[i].is_leaf(),
               "optimizer: parameter {} must be a leaf that requires grad", i);
}

void Optimizer::set_lr(double lr) {
  KILN_CHECK(lr >= 0, "optimizer: learning rate must be non-negative, got {}", lr);
  lr_ = lr;
  NoGradGuard no_grad;
  lr_tensor_.fill_(lr);
}

Tensor Optimizer::lr_as(DType dtype) const { return lr_tensor_.to(dtype); }

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

SGD::SGD(std::vector<Tensor> params, double lr, SgdOptions o) : Optimizer(std::move(params), lr), opt_(o) {
  KILN_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
             "SGD: nesterov needs momentum > 0 and dampening 0");
  if (o.momentum != 0)
    for (const Tensor& p : params_) velocity_.push_back(zeros_like(p));
  steps_ = zeros({}, DType::F64);
}

void SGD::step() {
  NoGradGuard no_grad;
  Plan plan = make_plan(params_, velocity_, {});
  if (!plan.slots.empty()) {
    double lr = lr_tensor_.item<double>();
    bool first = steps_.item<double>() == 0;
    run_fused(plan, SgdStep<float>{float(lr), first}, SgdStep<double>{lr, first}, [&](auto k) {
      return [k, this](auto& p, auto g, auto& v, auto&) { sgd_update(p, g, v, k, opt_); };
    });
  }
  for (size_t i : plan.tensor_path) {
    Tensor& p = params_[i];
    SgdStep<Tensor> k{lr_as(p.dtype()), {}};
    if (opt_.momentum != 0 && opt_.dampening != 0) k.first = steps_ == 0;
    Tensor new_p = p, v = opt_.momentum != 0 ? velocity_[i] : Tensor();
    sgd_update(new_p, p.grad(), v, k, opt_);
    if (opt_.momentum != 0) velocity_[i].copy_(v);
    p.copy_(new_p);
  }
  steps_.add_(1);
}

Adam::Adam(std::vector<Tensor> params, double lr, AdamOptions o) : Optimizer(std::move(params), lr), opt_(o) {
  KILN_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps >= 0,
             "Adam: betas must be in [0, 1) and eps >= 0");
  for (const Tensor& p : params_) {
    m_.push_back(zeros_like(p));
    v_.push_back(zeros_like(p));
  }
  steps_ = zeros({}, DType::F64);
}

void Adam::step() { update(false); }

void Adam::update(bool decoupled) {
  NoGradGuard no_grad;
  steps_.add_(1);
  Plan plan = make_plan(params_, m_, v_);
  if (!plan.slots.empty()) {
    double lr = lr_tensor_.item<double>();
    auto [c1, c2] = bias_corrections(steps_.item<double>(), opt_);
    auto k32 = adam_step<float>(float(lr), float(c1), float(c2), opt_, decoupled);
    auto k64 = adam_step<double>(lr, c1, c2, opt_, decoupled);
    run_fused(plan, k32, k64, [&](auto k) {
      return [k, decoupled, this](auto& p, auto g, auto& m, auto& v) {
        adam_update(p, g, m, v, k, opt_, decoupled);
      };
    });
  }
  if (plan.tensor_path.empty()) return;
  auto [c1, c2] = bias_corrections(steps_, opt_);
  for (size_t i : plan.tensor_path) {
    Tensor& p = params_[i];
    DType t = p.dtype();
    AdamStep<Tensor> k = adam_step(lr_as(t), c1.to(t), c2.to(t), opt_, decoupled);
    Tensor new_p = p, m = m_[i], v = v_[i];
    adam_update(new_p, p.grad(), m, v, k, opt_, decoupled);
    m_[i].copy_(m);
    v_[i].copy_(v);
    p.copy_(new_p);
  }
}

AdamW::AdamW(std::vector<Tensor> params, double lr, AdamWOptions o)
    : Adam(std::move(params), lr,
           {.beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay}) {}

// ---- schedules -----------------------------------------------------------------------------

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : opt_(opt), step_size_(step_size), gamma_(gamma), base_(opt.lr()) {
  KILN_CHECK(step_size > 0, "StepLR: step_size must be positive, got {}", step_size);
}
void StepLR::step() {
  ++epoch_;
  opt_.set_lr(base_ * std::pow(gamma_, static_cast<double>(epoch_ / step_size_)));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : opt_(opt), t_max_(t_max), eta_min_(eta_min), base_(opt.lr()) {
  KILN_CHECK(t_max > 0, "CosineAnnealingLR: t_max must be positive, got {}", t_max);
}
void CosineAnnealingLR::step() {
  ++t_;
  // The closed form PyTorch's schedule follows; past t_max it continues along the cosine.
  double c = std::cos(M_PI * static_cast<double>(t_) / static_cast<double>(t_max_));
  opt_.set_lr(eta_min_ + (base_ - eta_min_) * (1 + c) / 2);
}

}  // namespace kiln::optim
