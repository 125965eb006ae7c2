// tests/jit/jit_test_util.h -- helpers the jit tests share: bitwise comparison, round trips.
#pragma once

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "jit/trace.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "tests/unit/test_util.h"  // expect_error

namespace kiln::test {

/// One training step as users write it: zero the gradients, the loss, backward, the update.
template <class Net> Tensor train_step(Net& net, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  Tensor loss = cross_entropy(net(x), y);
  loss.backward();
  opt.step();
  return loss;
}

/// True when a and b have one type and the same bytes, element by element (row-major).
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (!(a.type() == b.type())) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  size_t n = static_cast<size_t>(a.numel() * dtype_size(a.dtype()));
  return n == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), n) == 0;
}

/// True when a and b have one type and equal values within the rounding that fused kernels
/// may change (they reassociate reductions and use SLEEF's 1-ULP math in other lanes): NaN where
/// the other has NaN, equal infinities, and |a - b| <= 1e-5 + 1e-4 * |b| elsewhere (for f64 too:
/// its values may come from f32 ops upstream). f16 and bf16, computed in f32 by the fused
/// kernel as eagerly, may then round to the neighbouring value: one of their ulps (2^-10, 2^-7)
/// relative. Integers and bool compare exactly.
inline bool close_enough(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (!(a.type() == b.type())) return false;
  if (!is_float(a.dtype())) return bitwise_equal(a, b);
  const double rtol = a.dtype() == DType::F16 ? 0x1p-10 : a.dtype() == DType::BF16 ? 0x1p-7 : 1e-4;
  constexpr double atol = 1e-5;
  std::vector<double> x = a.to(DType::F64).contiguous().to_vector<double>();
  std::vector<double> y = b.to(DType::F64).contiguous().to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) {
      if (std::isnan(x[i]) != std::isnan(y[i])) return false;
    } else if (std::isinf(x[i]) || std::isinf(y[i])) {
      if (x[i] != y[i]) return false;
    } else if (std::abs(x[i] - y[i]) > atol + rtol * std::abs(y[i])) {
      return false;
    }
  }
  return true;
}

/// What traced results must equal eager ones by: the same bits when the graph runs op by op
/// (KILN_FUSION=0: the ctest entry kiln_jit_tests_unfused), close_enough with fused kernels.
inline bool same_result(const Tensor& got, const Tensor& want) {
  return jit::fusion_enabled() ? close_enough(got, want) : bitwise_equal(got, want);
}

/// Expects same_result, printing both tensors when they differ.
inline void expect_same(const Tensor& got, const Tensor& want) {
  ASSERT_TRUE(got.defined() && want.defined());
  ASSERT_EQ(got.type().str(), want.type().str());
  EXPECT_TRUE(same_result(got, want)) << "got\n" << got << "\nwant\n" << want;
}

/// The graph's text without source locations: what golden files and round trips compare.
inline std::string text_of(const ir::Graph& g) { return ir::print(g, {.locations = false}); }

/// Expects parse(print(g)) to verify and to print as g does.
inline void expect_round_trip(const ir::Graph& g) {
  std::string text = text_of(g);
  ir::Graph back = ir::parse(text, "round_trip.ir");
  EXPECT_NO_THROW(ir::verify(back)) << text;
  EXPECT_EQ(text_of(back), text);
}

/// Traced whole training steps of `traced` beside eager steps of `eager` (SGD with momentum, on
/// [5, 6] inputs and labels of 3 classes), from the same weights: the losses, the weights and
/// their gradients agree after each step. Returns the traced step's graph.
template <class Net> ir::Graph expect_traced_steps_match_eager(Net& eager, Net& traced, int steps) {
  traced.load_state_dict(eager.state_dict());
  optim::SGD eager_opt(eager.parameters(), 0.1, {.momentum = 0.9});
  optim::SGD traced_opt(traced.parameters(), 0.1, {.momentum = 0.9});
  auto step = [&](Tensor x, Tensor y) { return train_step(traced, traced_opt, x, y); };
  jit::Function fast = jit::trace(step, {randn({5, 6}), randint(0, 3, {5})});
  for (int s = 0; s < steps; ++s) {
    SCOPED_TRACE(testing::Message() << "step " << s);
    Tensor x = randn({5, 6}), y = randint(0, 3, {5});
    expect_same(fast(x, y), train_step(eager, eager_opt, x, y).detach());
    auto a = eager.named_parameters(), b = traced.named_parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      SCOPED_TRACE(a[i].first);
      expect_same(b[i].second, a[i].second);
      expect_same(b[i].second.grad(), a[i].second.grad());
    }
  }
  return fast.graph();
}

}  // namespace kiln::test
