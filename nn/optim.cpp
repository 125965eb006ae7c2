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

// A momentum factor (f64[]) for the tensor path's arithmetic in `dtype`: f16 and bf16 updates
// compute in f32, so their factor stays f32, as the number it replaces was (0.9, not the
// half-precision 0.8999).
Tensor factor_in(const Tensor& f, DType dtype) {
  return f.to(dtype == DType::F16 || dtype == DType::BF16 ? DType::F32 : dtype);
}
Tensor pick(const Tensor& c, const Tensor& a, const Tensor& b) { return where(c, a, b); }

// ---- the rules, once each -----------------------------------------------------------------

// SGD's numbers for one step, in the parameters' dtype.
template <class K> struct SgdStep {
  K lr;
  typename Traits<K>::Flag first;  // the first step: the velocity starts as the gradient
  K momentum;                      // the current momentum (a schedule may change it)
};

// torch.optim.SGD: v = momentum v + (1 - dampening) g; p -= lr (nesterov ? g + momentum v : v).
// Whether there is momentum at all is the options' (it decides the state); its value is k's.
template <class S, class K>
void sgd_update(S& p, S g, S& v, const SgdStep<K>& k, const SgdOptions& o) {
  using N = typename Traits<S>::Number;
  if (o.weight_decay != 0) g = g + p * N(o.weight_decay);
  if (o.momentum != 0) {
    S next = v * k.momentum + g * N(1 - o.dampening);
    if (o.dampening != 0) next = pick(k.first, g, next);  // (undamped, v = 0 gives v = g)
    v = next;
    g = o.nesterov ? g + v * k.momentum : v;
  }
  p = p - g * k.lr;
}

// 1 - beta^t for Adam's two moments, from the step count t and the current beta1 (doubles,
// or f64[] tensors).
template <class N> std::pair<N, N> bias_corrections(const N& t, const N& beta1, const AdamOptions& o) {
  return {1.0 - pow(beta1, t), 1.0 - pow(o.beta2, t)};
}

// Adam's numbers for one step, in the parameters' dtype.
template <class K> struct AdamStep {
  K decay;      // AdamW with weight decay: p *= 1 - lr weight_decay
  K c2;         // the second moment's bias correction
  K step_size;  // lr / c1
  K beta1, one_minus_beta1;  // the current beta1 (a schedule may change it)
};

template <class K>
AdamStep<K> adam_step(const K& lr, const K& c1, const K& c2, const K& beta1, const K& one_minus_beta1,
                      const AdamOptions& o, bool decoupled) {
  using N = typename Traits<K>::Number;
  AdamStep<K> k{.decay = {}, .c2 = c2, .step_size = lr / c1, .beta1 = beta1, .one_minus_beta1 = one_minus_beta1};
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
  m = m * k.beta1 + g * k.one_minus_beta1;
  v = v * N(o.beta2) + g * g * N(1 - o.beta2);
  p = p - m / (sqrt(v / k.c2) + N(o.eps)) * k.step_size;
}

// torch.optim.RMSprop, with lr the step's rate.
template <class S, class K>
void rmsprop_update(S& p, S g, S& square_avg, S& buffer, S& grad_avg, const K& lr, const RmspropOptions& o) {
  using N = typename Traits<S>::Number;
  if (o.weight_decay != 0) g = g + p * N(o.weight_decay);
  square_avg = square_avg * N(o.alpha) + g * g * N(1 - o.alpha);
  S avg = sqrt(square_avg) + N(o.eps);
  if (o.centered) {
    grad_avg = grad_avg * N(o.alpha) + g * N(1 - o.alpha);
    avg = sqrt(square_avg - grad_avg * grad_avg) + N(o.eps);
  }
  if (o.momentum > 0) {
    buffer = buffer * N(o.momentum) + g / avg;
    p = p - buffer * lr;
  } else {
    p = p - g / avg * lr;
  }
}

// torch.optim.Adagrad, with clr the step's decayed rate.
template <class S, class K> void adagrad_update(S& p, S g, S& sum, const K& clr, const AdagradOptions& o) {
  using N = typename Traits<S>::Number;
  if (o.weight_decay != 0) g = g + p * N(o.weight_decay);
  sum = sum + g * g;
  p = p - g / (sqrt(sum) + N(o.eps)) * clr;
}

// ---- the fused eager pass -----------------------------------------------------------------

// A parameter in the fused pass: its data, gradient and state, contiguous, of one dtype.
struct Slot {
  DType dtype;
  int64_t n;
  char* p;
  const char* g;
  char* state[3];  // null where the optimizer keeps less
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

// state0..2: the optimizer's per-parameter state (each may be empty).
Plan make_plan(const std::vector<Tensor>& params, const std::vector<Tensor>& state0,
               const std::vector<Tensor>& state1, const std::vector<Tensor>& state2 = {}) {
  Plan plan;
  bool traced = active_recorder() != nullptr;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    DType t = p.dtype();
    bool fuse = !traced && (t == DType::F32 || t == DType::F64) && fusable(p, t) &&
                g.has_storage() && g.device().is_cpu() && g.dtype() == t && g.shape() == p.shape();
    for (const auto* s : {&state0, &state1, &state2}) fuse = fuse && (s->empty() || fusable((*s)[i], t));
    if (!fuse) {
      plan.tensor_path.push_back(i);
      continue;
    }
    if (!g.is_contiguous()) plan.keep.push_back(g = g.contiguous());
    Slot s{t, p.numel(), static_cast<char*>(p.data_ptr()), static_cast<const char*>(g.data_ptr()),
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

// Applies rule(p, g, s0, s1, s2) to elements [b, e) of a slot: blocks of lanes V, then the
// tail one element at a time (the same IEEE operations, so the same bits either way).
template <class E, class V, class Rule>
void run_slot(const Slot& s, int64_t b, int64_t e, const Rule& rule) {
  constexpr int64_t W = sizeof(V) / sizeof(E);
  E* p = reinterpret_cast<E*>(s.p);
  const E* g = reinterpret_cast<const E*>(s.g);
  E* st[3] = {reinterpret_cast<E*>(s.state[0]), reinterpret_cast<E*>(s.state[1]), reinterpret_cast<E*>(s.state[2])};
  int64_t i = b;
  for (; i + W <= e; i += W) {
    V vp = load<V>(p + i), v[3];
    for (int k = 0; k < 3; ++k) v[k] = st[k] ? load<V>(st[k] + i) : V{};
    rule(vp, load<V>(g + i), v[0], v[1], v[2]);
    store(p + i, vp);
    for (int k = 0; k < 3; ++k)
      if (st[k]) store(st[k] + i, v[k]);
  }
  for (; i < e; ++i) {
    E xp = p[i], x[3];
    for (int k = 0; k < 3; ++k) x[k] = st[k] ? st[k][i] : E(0);
    rule(xp, g[i], x[0], x[1], x[2]);
    p[i] = xp;
    for (int k = 0; k < 3; ++k)
      if (st[k]) st[k][i] = x[k];
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
    : params_(std::move(params)), lr_(lr), initial_lr_(lr), lr_tensor_(full({}, lr, DType::F64)) {
  KILN_CHECK(lr >= 0, "optimizer: learning rate must be non-negative, got {}", lr);
  for (size_t i = 0; i < params_.size(); ++i)
    KILN_CHECK(params_[i].defined() && params_[i].requires_grad() && params_[i].is_leaf(),
               "optimizer: parameter {} must be a leaf that requires grad", i);
  register_state("lr", lr_tensor_);
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : state_) out[name] = *t;
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  NoGradGuard no_grad;
  std::vector<std::string> missing, unexpected;
  std::map<std::string, Tensor> mine = state_dict();
  for (const auto& [n, t] : mine)
    if (!state.count(n)) missing.push_back(n);
  for (const auto& [n, t] : state)
    if (!mine.count(n)) unexpected.push_back(n);
  KILN_CHECK(missing.empty() && unexpected.empty(), "optimizer load_state_dict: missing [{}], unexpected [{}]",
             fmt::join(missing, ", "), fmt::join(unexpected, ", "));
  for (auto& [n, t] : mine) {
    const Tensor& src = state.at(n);
    KILN_CHECK(src.defined() && src.shape() == t.shape(), "optimizer load_state_dict: \"{}\" is {} here but {} in the state", n,
               t.type().str(), src.defined() ? src.type().str() : "undefined");
    t.copy_(src);
  }
  lr_ = lr_tensor_.item<double>();
}

void Optimizer::set_lr(double lr) {
  KILN_CHECK(lr >= 0, "optimizer: learning rate must be non-negative, got {}", lr);
  lr_ = lr;
  NoGradGuard no_grad;
  lr_tensor_.fill_(lr);
}

Tensor Optimizer::lr_as(DType dtype) const { return lr_tensor_.to(dtype); }

double Optimizer::momentum() const {
  throw Error("optimizer: this optimizer has no momentum a schedule can cycle (SGD's momentum and Adam's beta1 can)");
}
void Optimizer::set_momentum(double) { momentum(); }

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

SGD::SGD(std::vector<Tensor> params, double lr, SgdOptions o) : Optimizer(std::move(params), lr), opt_(o) {
  KILN_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
             "SGD: nesterov needs momentum > 0 and dampening 0");
  if (o.momentum != 0)
    for (const Tensor& p : params_) velocity_.push_back(zeros_like(p));
  steps_ = zeros({}, DType::F64);
  momentum_ = full({}, o.momentum, DType::F64);
  register_state("step", steps_);
  for (size_t i = 0; i < velocity_.size(); ++i) register_state(fmt::format("state.{}.momentum_buffer", i), velocity_[i]);
}

void SGD::set_momentum(double momentum) {
  KILN_CHECK(opt_.momentum != 0, "SGD: made without momentum, it has no momentum buffers to cycle (give it "
                                 "SgdOptions{{.momentum = ...}})");
  KILN_CHECK(momentum >= 0, "SGD: momentum must be non-negative, got {}", momentum);
  opt_.momentum = momentum;
  NoGradGuard no_grad;
  momentum_.fill_(momentum);
}

void SGD::step() {
  NoGradGuard no_grad;
  Plan plan = make_plan(params_, velocity_, {});
  if (!plan.slots.empty()) {
    double lr = lr_tensor_.item<double>(), m = momentum_.item<double>();
    bool first = steps_.item<double>() == 0;
    run_fused(plan, SgdStep<float>{float(lr), first, float(m)}, SgdStep<double>{lr, first, m}, [&](auto k) {
      return [k, this](auto& p, auto g, auto& v, auto&, auto&) { sgd_update(p, g, v, k, opt_); };
    });
  }
  for (size_t i : plan.tensor_path) {
    Tensor& p = params_[i];
    SgdStep<Tensor> k{lr_as(p.dtype()), {}, opt_.momentum != 0 ? factor_in(momentum_, p.dtype()) : Tensor()};
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
  beta1_ = full({}, o.beta1, DType::F64);
  register_state("step", steps_);
  for (size_t i = 0; i < params_.size(); ++i) {
    register_state(fmt::format("state.{}.exp_avg", i), m_[i]);
    register_state(fmt::format("state.{}.exp_avg_sq", i), v_[i]);
  }
}

void Adam::step() { update(false); }

void Adam::set_momentum(double beta1) {
  KILN_CHECK(beta1 >= 0 && beta1 < 1, "Adam: beta1 must be in [0, 1), got {}", beta1);
  opt_.beta1 = beta1;
  NoGradGuard no_grad;
  beta1_.fill_(beta1);
}

void Adam::update(bool decoupled) {
  NoGradGuard no_grad;
  steps_.add_(1);
  Plan plan = make_plan(params_, m_, v_);
  if (!plan.slots.empty()) {
    double lr = lr_tensor_.item<double>(), b1 = beta1_.item<double>();
    auto [c1, c2] = bias_corrections(steps_.item<double>(), b1, opt_);
    auto k32 = adam_step<float>(float(lr), float(c1), float(c2), float(b1), float(1 - b1), opt_, decoupled);
    auto k64 = adam_step<double>(lr, c1, c2, b1, 1 - b1, opt_, decoupled);
    run_fused(plan, k32, k64, [&](auto k) {
      return [k, decoupled, this](auto& p, auto g, auto& m, auto& v, auto&) {
        adam_update(p, g, m, v, k, opt_, decoupled);
      };
    });
  }
  if (plan.tensor_path.empty()) return;
  auto [c1, c2] = bias_corrections(steps_, beta1_, opt_);
  Tensor one_minus_beta1 = 1.0 - beta1_;
  for (size_t i : plan.tensor_path) {
    Tensor& p = params_[i];
    DType t = p.dtype();
    AdamStep<Tensor> k =
        adam_step(lr_as(t), c1.to(t), c2.to(t), factor_in(beta1_, t), factor_in(one_minus_beta1, t), opt_, decoupled);
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

RMSprop::RMSprop(std::vector<Tensor> params, double lr, RmspropOptions o) : Optimizer(std::move(params), lr), opt_(o) {
  KILN_CHECK(o.alpha >= 0 && o.eps >= 0 && o.momentum >= 0 && o.weight_decay >= 0,
             "RMSprop: alpha, eps, momentum and weight_decay must be non-negative");
  for (size_t i = 0; i < params_.size(); ++i) {
    square_avg_.push_back(zeros_like(params_[i]));
    if (o.momentum > 0) momentum_buffer_.push_back(zeros_like(params_[i]));
    if (o.centered) grad_avg_.push_back(zeros_like(params_[i]));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    register_state(fmt::format("state.{}.square_avg", i), square_avg_[i]);
    if (o.momentum > 0) register_state(fmt::format("state.{}.momentum_buffer", i), momentum_buffer_[i]);
    if (o.centered) register_state(fmt::format("state.{}.grad_avg", i), grad_avg_[i]);
  }
}

void RMSprop::step() {
  NoGradGuard no_grad;
  Plan plan = make_plan(params_, square_avg_, momentum_buffer_, grad_avg_);
  if (!plan.slots.empty()) {
    double lr = lr_tensor_.item<double>();
    // The fused pass hands the state in make_plan's order, skipping none: absent lists leave
    // their slot null, and the rule ignores what its options do not keep.
    run_fused(plan, float(lr), lr, [&](auto k) {
      return [k, this](auto& p, auto g, auto& sq, auto& b, auto& ga) {
        if (opt_.momentum > 0) rmsprop_update(p, g, sq, b, ga, k, opt_);
        else rmsprop_update(p, g, sq, ga, b, k, opt_);  // without momentum, slot 1 is grad_avg's
      };
    });
  }
  for (size_t i : plan.tensor_path) {
    Tensor& p = params_[i];
    Tensor new_p = p, sq = square_avg_[i];
    Tensor b = opt_.momentum > 0 ? momentum_buffer_[i] : Tensor(), ga = opt_.centered ? grad_avg_[i] : Tensor();
    rmsprop_update(new_p, p.grad(), sq, b, ga, lr_as(p.dtype()), opt_);
    square_avg_[i].copy_(sq);
    if (opt_.momentum > 0) momentum_buffer_[i].copy_(b);
    if (opt_.centered) grad_avg_[i].copy_(ga);
    p.copy_(new_p);
  }
}

Adagrad::Adagrad(std::vector<Tensor> params, double lr, AdagradOptions o) : Optimizer(std::move(params), lr), opt_(o) {
  KILN_CHECK(o.lr_decay >= 0 && o.weight_decay >= 0 && o.initial_accumulator_value >= 0 && o.eps >= 0,
             "Adagrad: lr_decay, weight_decay, initial_accumulator_value and eps must be non-negative");
  for (const Tensor& p : params_) sum_.push_back(full_like(p, o.initial_accumulator_value));
  steps_ = zeros({}, DType::F64);
  register_state("step", steps_);
  for (size_t i = 0; i < params_.size(); ++i) register_state(fmt::format("state.{}.sum", i), sum_[i]);
}

void Adagrad::step() {
  NoGradGuard no_grad;
  steps_.add_(1);
  Plan plan = make_plan(params_, sum_, {});
  if (!plan.slots.empty()) {
    double clr = lr_tensor_.item<double>() / (1 + (steps_.item<double>() - 1) * opt_.lr_decay);
    run_fused(plan, float(clr), clr, [&](auto k) {
      return [k, this](auto& p, auto g, auto& s, auto&, auto&) { adagrad_update(p, g, s, k, opt_); };
    });
  }
  if (plan.tensor_path.empty()) return;
  Tensor clr = lr_tensor_ / ((steps_ - 1.0) * opt_.lr_decay + 1.0);
  for (size_t i : plan.tensor_path) {
    Tensor& p = params_[i];
    Tensor new_p = p, s = sum_[i];
    adagrad_update(new_p, p.grad(), s, clr.to(p.dtype()), opt_);
    sum_[i].copy_(s);
    p.copy_(new_p);
  }
}

// ---- schedules -----------------------------------------------------------------------------

void LRScheduler::step() {
  apply(t_ + 1);  // first: a step that throws (past OneCycleLR's end) leaves the count as it was
  ++t_;
}

std::map<std::string, double> LRScheduler::state_dict() const { return {{"last_epoch", static_cast<double>(t_)}}; }

void LRScheduler::load_state_dict(const std::map<std::string, double>& state) {
  auto it = state.find("last_epoch");
  KILN_CHECK(it != state.end() && state.size() == 1 && it->second >= 0 && it->second == std::floor(it->second),
             "scheduler load_state_dict: expected {{\"last_epoch\": a step count}}, got {} entries", state.size());
  t_ = static_cast<int64_t>(it->second);
  apply(t_);
}

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, OneCycleOptions o)
    : LRScheduler(opt), total_(total_steps), options_(std::move(o)) {
  KILN_CHECK(total_steps > 0, "OneCycleLR: total_steps must be positive, got {}", total_steps);
  KILN_CHECK(options_.pct_start >= 0 && options_.pct_start <= 1, "OneCycleLR: pct_start must be in [0, 1], got {}",
             options_.pct_start);
  KILN_CHECK(options_.anneal_strategy == "cos" || options_.anneal_strategy == "linear",
             "OneCycleLR: anneal_strategy must be \"cos\" or \"linear\", got \"{}\"", options_.anneal_strategy);
  KILN_CHECK(max_lr >= 0 && options_.div_factor > 0 && options_.final_div_factor > 0,
             "OneCycleLR: max_lr must be non-negative and the div factors positive");
  if (options_.cycle_momentum) opt.momentum();  // throws for an optimizer without one
  double initial = max_lr / options_.div_factor, min_lr = initial / options_.final_div_factor;
  double up = options_.pct_start * double(total_steps) - 1, last = double(total_steps) - 1;
  double lo = options_.base_momentum, hi = options_.max_momentum;
  if (options_.three_phase)
    phases_ = {{up, initial, max_lr, hi, lo}, {2 * options_.pct_start * double(total_steps) - 2, max_lr, initial, lo, hi},
               {last, initial, min_lr, hi, hi}};
  else
    phases_ = {{up, initial, max_lr, hi, lo}, {last, max_lr, min_lr, lo, hi}};
  start();
}

// torch's _anneal_func over each phase: pct of the way from the previous phase's end step.
double OneCycleLR::at(int64_t t, bool momentum) const {
  KILN_CHECK(t <= total_, "OneCycleLR: stepped {} times, past total_steps = {}", t, total_);
  double start_step = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& p = phases_[i];
    if (double(t) <= p.end_step || i + 1 == phases_.size()) {
      double pct = (double(t) - start_step) / (p.end_step - start_step);
      double a = momentum ? p.start_momentum : p.start_lr, b = momentum ? p.end_momentum : p.end_lr;
      if (options_.anneal_strategy == "cos") return b + (a - b) / 2.0 * (std::cos(M_PI * pct) + 1);
      return (b - a) * pct + a;
    }
    start_step = p.end_step;
  }
  return 0;  // unreachable: the last phase takes every t
}

double OneCycleLR::lr_at(int64_t t) const { return at(t, false); }
double OneCycleLR::momentum_at(int64_t t) const { return at(t, true); }

void OneCycleLR::apply(int64_t t) {
  opt_.set_lr(lr_at(t));
  if (options_.cycle_momentum) opt_.set_momentum(momentum_at(t));
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size > 0, "StepLR: step_size must be positive, got {}", step_size);
  start();
}
double StepLR::lr_at(int64_t t) const { return base_ * std::pow(gamma_, static_cast<double>(t / step_size_)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : LRScheduler(opt), t_max_(t_max), eta_min_(eta_min) {
  KILN_CHECK(t_max > 0, "CosineAnnealingLR: t_max must be positive, got {}", t_max);
  start();
}
double CosineAnnealingLR::lr_at(int64_t t) const {
  // The closed form PyTorch's schedule follows; past t_max it continues along the cosine.
  double c = std::cos(M_PI * static_cast<double>(t) / static_cast<double>(t_max_));
  return eta_min_ + (base_ - eta_min_) * (1 + c) / 2;
}

LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(opt), start_(start_factor), end_(end_factor), total_(total_iters) {
  KILN_CHECK(start_factor > 0 && start_factor <= 1 && end_factor >= 0 && end_factor <= 1 && total_iters >= 0,
             "LinearLR: expected 0 < start_factor <= 1, 0 <= end_factor <= 1 and total_iters >= 0, got {}, {}, {}",
             start_factor, end_factor, total_iters);
  start();
}
double LinearLR::lr_at(int64_t t) const {
  if (t >= total_) return base_ * end_;
  return base_ * (start_ + (end_ - start_) * static_cast<double>(t) / static_cast<double>(total_));
}

LambdaLR::LambdaLR(Optimizer& opt, std::function<double(int64_t)> lambda) : LRScheduler(opt), lambda_(std::move(lambda)) {
  KILN_CHECK(lambda_ != nullptr, "LambdaLR: the lambda is empty");
  start();
}
double LambdaLR::lr_at(int64_t t) const { return base_ * lambda_(t); }

SequentialLR::SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(opt), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  KILN_CHECK(!schedulers_.empty() && milestones_.size() + 1 == schedulers_.size(),
             "SequentialLR: expected one milestone fewer than schedulers, got {} schedulers and {} milestones",
             schedulers_.size(), milestones_.size());
  for (size_t i = 0; i < schedulers_.size(); ++i)
    KILN_CHECK(schedulers_[i] && &schedulers_[i]->opt_ == &opt, "SequentialLR: scheduler {} is not of this optimizer", i);
  for (size_t i = 1; i < milestones_.size(); ++i)
    KILN_CHECK(milestones_[i] > milestones_[i - 1], "SequentialLR: milestones must increase");
  start();
}
double SequentialLR::lr_at(int64_t t) const {
  size_t i = 0;
  while (i < milestones_.size() && t >= milestones_[i]) ++i;
  return schedulers_[i]->lr_at(i == 0 ? t : t - milestones_[i - 1]);
}

}  // namespace kiln::optim
