// tests/ir/pass_semantics_test.cpp -- the passes keep every golden case's meaning: its graph
// computes the same bits before and after, on inputs full of signed zeros, NaNs and infinities.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "golden_cases.h"
#include "ir/graph.h"
#include "ir/passes.h"

namespace kiln::ir {
namespace {

// Values that catch unsafe rewrites (x + 0.0 on -0.0, x * 0 on NaN), cycled through the tensor.
Tensor sample(const TensorType& t, size_t salt) {
  static const double kFloats[] = {-0.0, 1.0, 0.0, -1.5, NAN, INFINITY, 2.0, -INFINITY, 0.5, 3.0};
  static const int64_t kInts[] = {0, 1, -3, 7, 2, -1, 5};
  Tensor x = Tensor::empty(t);
  visit_dtype(t.dtype, [&](auto v) {
    using T = decltype(v);
    T* p = static_cast<T*>(x.data_ptr());
    for (int64_t i = 0; i < x.numel(); ++i) {
      size_t k = static_cast<size_t>(i) + salt;
      if constexpr (std::is_same_v<T, bool>) p[i] = k % 3 == 0;
      else if constexpr (std::is_integral_v<T>) p[i] = static_cast<T>(kInts[k % 7]);
      else p[i] = T(static_cast<float>(kFloats[k % 10]));
    }
  });
  return x;
}

// The outputs, then each assigned value in order, computed node by node with the eager kernels.
std::vector<Tensor> evaluate(const Graph& g, const std::vector<Tensor>& args) {
  std::vector<Tensor> vals(g.types.size()), out;
  for (size_t i = 0; i < g.inputs.size(); ++i) vals[g.inputs[i]] = args[i];
  for (size_t i = 0; i < g.params.size(); ++i) vals[g.params[i]] = args[g.inputs.size() + i];
  for (const Node& n : g.nodes) {
    if (n.kind == NodeKind::Const) {
      vals[n.result] = n.constant;
    } else if (n.kind == NodeKind::Assign) {
      out.push_back(vals[n.inputs[1]]);
    } else if (n.kind == NodeKind::Fused) {  // a group means its body
      std::vector<Tensor> in;
      for (uint32_t v : n.inputs) in.push_back(vals[v]);
      std::vector<Tensor> r = evaluate(*n.body, in);
      for (size_t k = 0; k < n.results.size(); ++k) vals[n.results[k]] = r[k];
    } else {
      std::vector<Tensor> in;
      for (uint32_t v : n.inputs) in.push_back(vals[v]);
      vals[n.result] = apply(n.op, in, n.attrs);
    }
  }
  for (uint32_t v : g.outputs) out.push_back(vals[v]);
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!(a.type() == b.type())) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  size_t n = static_cast<size_t>(a.numel() * dtype_size(a.dtype()));
  return n == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), n) == 0;
}

// Only a valid graph with concrete shapes has a meaning to run (infer-shapes cases have stale
// types on purpose), and only on the CPU here (the CUDA cases' passes run under
// tests/cuda/jit_test.cpp).
bool runnable(const Graph& g) {
  for (const TensorType& t : g.types) {
    if (!t.device.is_cpu()) return false;
    for (int64_t d : t.shape)
      if (is_symbol(d)) return false;
  }
  try {
    verify(g);
  } catch (const Error&) {
    return false;
  }
  return true;
}

TEST(PassSemantics, GoldenCasesComputeTheSameBitsAfterTheirPasses) {
  int checked = 0;
  for (const std::string& name : test::golden_case_names()) {
    test::GoldenCase c = test::load_case(name);
    if (name.rfind("verify/", 0) == 0 || name.rfind("parse/", 0) == 0 || c.expect_error) continue;
    SCOPED_TRACE(name);
    Graph g = parse(c.input, name);
    if (!runnable(g)) continue;
    std::vector<Tensor> args;
    for (uint32_t v : g.inputs) args.push_back(sample(g.type(v), args.size()));
    for (uint32_t v : g.params) args.push_back(sample(g.type(v), args.size()));
    Graph after = run_passes(g, c.steps);
    std::vector<Tensor> want, got;
    bool want_error = false, got_error = false;
    try {
      want = evaluate(g, args);
    } catch (const Error&) {
      want_error = true;
    }
    try {
      got = evaluate(after, args);
    } catch (const Error&) {
      got_error = true;
    }
    ASSERT_EQ(got_error, want_error);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(same_bits(got[i], want[i])) << "result " << i << ": " << got[i] << " vs " << want[i];
    ++checked;
  }
  EXPECT_GT(checked, 20);
}

}  // namespace
}  // namespace kiln::ir
