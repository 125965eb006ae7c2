// tests/every_op/every_op_test.cpp -- the suite generated from the op list: for every op in
// runtime/ops.def, on random shapes, broadcasting, views and every dtype it accepts,
//   - eager results against the double-precision reference of its Spec (tests/ops/op_specs.h),
//     and a kiln::Error naming the op for every dtype it does not accept;
//   - the traced function (in a fused kernel; op by op and bit for bit under KILN_FUSION=0, the
//     ctest entry kiln_every_op_tests_unfused) against eager;
//   - the gradient against central finite differences in f64, or the op says it has none;
//   - on cuda:0 (the host CUDA in CI), the same cases against the same references, and the
//     same gradient checks.
// The list of ops is ops.def itself, and each op's Spec is looked up at compile time: an op
// listed without one stops this file from building.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <random>
#include <set>

#include "autograd/autograd.h"
#include "ir/fusion.h"
#include "jit/trace.h"
#include "runtime/cuda.h"
#include "runtime/ops/pointwise.h"
#include "tests/jit/jit_test_util.h"
#include "tests/ops/pointwise_cases.h"

namespace kiln::test {
namespace {

template <OpId id>
concept HasSpec = requires {
  sizeof(Spec<id>);
};
template <class S>
concept PointwiseSpec = requires {
  S::domain;
  &S::ref;
};

/// What the suite knows of one op: its dtypes and its cases in a dtype.
struct OpTests {
  OpId id;
  const char* name;
  std::vector<DType> dtypes;
  std::function<std::vector<Case>(DType)> cases;
  std::function<std::vector<Case>()> gradcheck_cases;  // f64
};
void PrintTo(const OpTests& t, std::ostream* os) { *os << t.name; }

/// A pointwise op's cases: operands drawn from its Spec's domains, broadcast across random
/// shapes, as views (transposed, strided, expanded), and long enough for vector bodies and tails.
template <class S, size_t N = std::size(S::domain)>
std::vector<Case> pointwise_cases(OpId id, DType t, bool for_gradcheck) {
  // For gradcheck, whole-number operands (a condition, relu_grad's y) are integers, so they are
  // not differentiated, and the others stay within [-3, 3], where finite differences are exact
  // enough.
  auto draw = [&](size_t k, const Dims& shape) {
    const Domain& d = S::domain[k];
    if (d.condition) return values(shape, boolean, 0, 1);
    if (!for_gradcheck) return values(shape, t, d.lo, d.hi, d.whole);
    if (d.whole) return values(shape, i64, d.lo, d.hi, true);
    return values(shape, t, std::max(d.lo, -3.0), std::min(d.hi, 3.0));
  };
  auto run = [id](std::span<const Tensor> in) {
    if constexpr (N == 1) return pointwise(id, {in[0]});
    else if constexpr (N == 2) return pointwise(id, {in[0], in[1]});
    else return pointwise(id, {in[0], in[1], in[2]});
  };
  auto ref = [](std::span<const Ref> r) {
    Dims shape = r[0].shape;
    for (const Ref& x : r) shape = broadcast_shapes(shape, x.shape);
    std::vector<std::vector<double>> v;
    for (const Ref& x : r) v.push_back(broadcast_values(x.v, x.shape, shape));
    Ref o{shape, std::vector<double>(v[0].size()), {}};
    for (size_t i = 0; i < o.v.size(); ++i) {
      if constexpr (N == 1) o.v[i] = S::ref(v[0][i]);
      else if constexpr (N == 2) o.v[i] = S::ref(v[0][i], v[1][i]);
      else o.v[i] = S::ref(v[0][i], v[1][i], v[2][i]);
    }
    return o;
  };
  // Random shapes: an output of rank 1 to 3, each operand with some dims 1 or missing.
  std::mt19937 rng(static_cast<uint32_t>(id) * 7919u + static_cast<uint32_t>(t));
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Case> out;
  for (int round = 0; round < 2; ++round) {
    Dims shape;
    for (int r = pick(1, 3); r > 0; --r) shape.push_back(pick(1, 7));
    std::vector<Tensor> in;
    for (size_t k = 0; k < N; ++k) {
      Dims s = shape;
      for (int64_t& d : s)
        if (pick(0, 2) == 0) d = 1;
      if (k > 0 && pick(0, 1)) s.erase(0);  // and without the leading dim
      in.push_back(draw(k, s));
    }
    out.push_back({"broadcast" + std::to_string(round) + "_" + shape_str(shape), in, run, ref});
  }
  std::vector<Tensor> views;
  for (size_t k = 0; k < N; ++k) {
    if (k == 0) views.push_back(draw(k, {6, 5}).t());                  // transposed
    if (k == 1) views.push_back(draw(k, {5, 12}).slice(1, 0, 12, 2));  // strided
    if (k == 2) views.push_back(draw(k, {5, 1}).expand({5, 6}));       // expanded
  }
  out.push_back({"views", views, run, ref});
  std::vector<Tensor> longs;
  for (size_t k = 0; k < N; ++k) longs.push_back(draw(k, {3, 67}));
  out.push_back({"contiguous_3x67", longs, run, ref});
  return out;
}

template <OpId id> OpTests entry(const char* name) {
  static_assert(HasSpec<id>,
                "an op in runtime/ops.def has no Spec<OpId::...> in tests/ops/op_specs.h: "
                "add its double-precision reference there");
  using S = Spec<id>;
  if constexpr (PointwiseSpec<S>) {
    std::vector<DType> dtypes;
    for (DType t : kAllDTypes)
      if (accepts(id, t)) dtypes.push_back(t);
    return {id, name, dtypes, [](DType t) { return pointwise_cases<S>(id, t, false); },
            [] { return pointwise_cases<S>(id, f64, true); }};
  } else {
    return {id, name, S::dtypes(), [](DType t) { return S::cases(t); }, [] { return S::cases(f64); }};
  }
}

const OpTests kOps[] = {
#define OP(Name, name, arity, family) entry<OpId::Name>(#name),
#include "runtime/ops.def"
#undef OP
};

bool accepted(const OpTests& op, DType t) {
  return std::find(op.dtypes.begin(), op.dtypes.end(), t) != op.dtypes.end();
}
std::vector<Ref> refs_of(const std::vector<Tensor>& in) {
  std::vector<Ref> r;
  for (const Tensor& t : in) r.push_back({t.shape(), t.to_vector<double>(), {}});
  return r;
}
uint32_t seed_of(const OpTests& op) { return 1000u + static_cast<uint32_t>(op.id); }

class EveryOp : public ::testing::TestWithParam<OpTests> {};

TEST_P(EveryOp, SpecMatchesTheOpList) {
  const OpTests& op = GetParam();
  EXPECT_STREQ(op_name(op.id), op.name);
  EXPECT_FALSE(op.dtypes.empty()) << op.name << " accepts no dtype";
  for (DType t : op.dtypes) EXPECT_FALSE(op.cases(t).empty()) << op.name << " has no cases in " << dtype_name(t);
}

TEST_P(EveryOp, EagerMatchesDoubleReferenceAndRejectsOtherDTypes) {
  const OpTests& op = GetParam();
  manual_seed(seed_of(op));
  for (DType t : kAllDTypes) {
    SCOPED_TRACE(std::string(op.name) + " in " + std::string(dtype_name(t)));
    for (const Case& c : op.cases(t)) {
      SCOPED_TRACE(c.name);
      if (!accepted(op, t)) {
        EXPECT_TRUE(throws_error([&] { c.run(c.inputs); }, {op.name}));
        continue;
      }
      Tensor y = c.run(c.inputs);
      std::vector<Ref> r = refs_of(c.inputs);
      Ref want = c.reference(r);
      for (double& v : want.v) v = stored_as(y.dtype(), v);
      EXPECT_TRUE(all_close(y, want.v, want.shape, tolerance(y.dtype()), want.scale));
    }
  }
}

// The traced function also returns logical_not(y), which every dtype has, so a pointwise op
// shares a fused kernel with it (a lone op runs eagerly) and y itself comes out of the generated
// kernel; a reduction reads its input plus an extra zeros input instead (a reduction ends its
// kernel). Adding zeros changes no value (bar -0).
TEST_P(EveryOp, TracedAndFusedMatchEager) {
  const OpTests& op = GetParam();
  manual_seed(seed_of(op));
  bool reduction = ir::fusible_reduction(op.id);
  bool fusible = reduction || op_family(op.id) == OpFamily::Pointwise;
  for (DType t : op.dtypes) {
    SCOPED_TRACE(std::string(op.name) + " in " + std::string(dtype_name(t)));
    for (const Case& c : op.cases(t)) {
      SCOPED_TRACE(c.name);
      Tensor want = c.run(c.inputs);
      auto run = c.run;
      std::vector<Tensor> inputs = c.inputs;
      if (reduction) inputs.push_back(zeros_like(inputs[0]));
      jit::Function f(
          [run, reduction](std::span<const Tensor> in) {
            std::vector<Tensor> args(in.begin(), in.end() - (reduction ? 1 : 0));
            if (reduction) args[0] = args[0] + in.back();
            Tensor y = run(args);
            return std::vector<Tensor>{y, logical_not(y)};
          },
          op.name);
      std::vector<Tensor> got = f.call(inputs);
      ASSERT_EQ(got.size(), 2u);
      expect_same(got[0], want);
      EXPECT_TRUE(bitwise_equal(got[1], logical_not(got[0])));  // one kernel made both
      EXPECT_EQ(f.stats().traces, 1);
      // The op ran in a fused kernel, unless the optimizer removed it (floor of an integer; in
      // bool, logical_not of logical_not).
      bool sink_cancels = op.id == OpId::LogicalNot && t == boolean;
      if (fusible && jit::fusion_enabled() && ir::fusible_dtype(t) && want.numel() > 1 && !sink_cancels &&
          f.stats().kernels == 0) {
        std::string text = text_of(f.graph());
        EXPECT_EQ(text.find(std::string(" = ") + op.name + " "), std::string::npos)
            << op.name << " ran outside a fused kernel:\n"
            << text;
      }
    }
  }
}

// Each gradcheck case of `op` on device `d`: the float inputs become contiguous f64 leaves
// there (finite differences move one element at a time, which an expanded view would repeat);
// whole-number and index inputs stay fixed.
void expect_gradients_match_finite_differences(const OpTests& op, Device d) {
  manual_seed(seed_of(op));
  int checked = 0;
  for (const Case& c : op.gradcheck_cases()) {
    SCOPED_TRACE(c.name + " on " + d.str());
    std::vector<Tensor> all, varied;
    std::vector<bool> is_varied;
    for (const Tensor& t : c.inputs) {
      Tensor x = t.contiguous().detach();
      is_varied.push_back(is_float(x.dtype()));
      if (is_varied.back()) x = x.to(f64);
      x = x.to(d);
      if (is_varied.back()) varied.push_back(x.requires_grad_());
      all.push_back(x);
    }
    if (c.run(all).dtype() != f64) continue;  // casts to other dtypes: nothing to differentiate
    auto fn = [&](std::span<const Tensor> v) {
      std::vector<Tensor> in = all;
      for (size_t i = 0, k = 0; i < in.size(); ++i)
        if (is_varied[i]) in[i] = v[k++];
      return c.run(in);
    };
    std::string err = autograd::gradcheck(fn, varied);
    EXPECT_EQ(err, "");
    ++checked;
  }
  EXPECT_GT(checked, 0) << op.name << " is differentiable but no case gave an f64 result to check";
}

TEST_P(EveryOp, GradientMatchesFiniteDifferencesOrOpHasNone) {
  const OpTests& op = GetParam();
  const OpDef& def = op_def(op.id);
  if (!def.differentiable) {
    EXPECT_EQ(def.vjp, nullptr) << op.name << " says it is not differentiable but has a vjp";
    return;
  }
  ASSERT_NE(def.vjp, nullptr) << op.name << " has neither a vjp nor differentiable = false";
  ASSERT_TRUE(accepted(op, f64)) << op.name << " is differentiable: its Spec must accept f64";
  expect_gradients_match_finite_differences(op, cpu);
}

// ---- CUDA: every op on cuda:0 (the host CUDA in CI; a GPU where there is one) -------------

// x on device d with x's layout (offset, strides, expanded dims): its whole storage copied and
// viewed the same way, so the device kernels meet the same views as the CPU's.
Tensor same_layout_on(const Tensor& x, Device d) {
  if (x.dim() == 0 || x.is_contiguous()) return x.to(d);
  const kiln::Ref<Storage>& storage = x.impl()->storage;
  auto raw = make_ref<TensorImpl>();
  raw->storage = storage;
  raw->shape = {static_cast<int64_t>(storage->nbytes())};
  raw->strides = {1};
  raw->dtype = DType::U8;
  Tensor bytes = Tensor(raw).to(d);
  auto view = make_ref<TensorImpl>();
  view->storage = bytes.impl()->storage;
  view->offset = x.impl()->offset;
  view->shape = x.shape();
  view->strides = x.strides();
  view->dtype = x.dtype();
  view->device = d;
  return Tensor(view);
}

TEST_P(EveryOp, CudaMatchesDoubleReference) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA here: " << cuda::unavailable_reason();
  const OpTests& op = GetParam();
  manual_seed(seed_of(op));
  for (DType t : op.dtypes) {
    SCOPED_TRACE(std::string(op.name) + " in " + std::string(dtype_name(t)) + " on cuda:0");
    for (const Case& c : op.cases(t)) {
      SCOPED_TRACE(c.name);
      std::vector<Tensor> on_device;
      for (const Tensor& x : c.inputs) on_device.push_back(same_layout_on(x, cuda::device(0)));
      Tensor y = c.run(on_device);
      if (op.id != OpId::ToDevice) {  // to_device picks its own
        EXPECT_EQ(y.device(), cuda::device(0));
      }
      Ref want = c.reference(refs_of(c.inputs));
      for (double& v : want.v) v = stored_as(y.dtype(), v);
      EXPECT_TRUE(all_close(y.to(cpu), want.v, want.shape, tolerance(y.dtype()), want.scale));
    }
  }
}

// The same gradient checks with the op and its backward on cuda:0.
TEST_P(EveryOp, CudaGradientMatchesFiniteDifferences) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA here: " << cuda::unavailable_reason();
  const OpTests& op = GetParam();
  if (!op_def(op.id).differentiable) GTEST_SKIP() << op.name << " is not differentiable";
  expect_gradients_match_finite_differences(op, cuda::device(0));
}

INSTANTIATE_TEST_SUITE_P(OpsDef, EveryOp, ::testing::ValuesIn(kOps),
                         [](const auto& info) { return std::string(info.param.name); });

// The test's own Philox (the rand and randn references) is Philox 4x32-10: Random123's answer.
TEST(EveryOpReference, PhiloxMatchesRandom123) {
  auto w = philox_ref(0, 0);
  EXPECT_EQ(w, (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
}

}  // namespace
}  // namespace kiln::test
