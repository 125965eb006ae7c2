// tests/cuda/reduction_test.cpp -- CUDA reductions in each layout codegen/cuda/launch.h plans
// (a block per row, a thread per row, columns cut into parts), eagerly and traced, on
// contiguous tensors and views, against the double-precision result on the CPU, with the same
// bits run after run; and reduced dims of size 0, which give the CPU's answer (0 for a sum, 1
// for a product, NaN for a mean).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "codegen/cuda/launch.h"
#include "jit/trace.h"
#include "tests/cuda/cuda_test.h"
#include "tests/jit/jit_test_util.h"

namespace kiln {
namespace {

using test::kGpu;

struct Layout {
  std::string name;
  Dims shape;
  Dims axes;
  codegen::CudaRows rows_by;  // as planned for the host CUDA's 4 multiprocessors
  bool parts;                 // a terminal reduction there is cut into parts
  int launches;               // an eager sum's: its parts combined by its last block, or by a kernel
};

// Each layout of launch.h, at sizes that cut the host CUDA's terminal reductions into parts.
const std::vector<Layout> kLayouts = {
    {"kept_middle_dim", {8, 6, 40, 50}, {0, 2, 3}, codegen::CudaRows::Block, true, 1},
    {"kept_inner_dim", {3000, 40}, {0}, codegen::CudaRows::Thread, true, 1},
    // 300 rows: combining their parts takes 2 blocks, a kernel of its own
    {"kept_wide_inner_dim", {1000, 300}, {0}, codegen::CudaRows::Thread, true, 2},
    {"few_long_rows", {3, 70001}, {1}, codegen::CudaRows::Block, true, 1},
    {"many_tiny_rows", {20000, 5}, {1}, codegen::CudaRows::Thread, false, 1},
    {"all_dims", {300, 401}, {0, 1}, codegen::CudaRows::Block, true, 1},
    {"long_rows_fill_the_device", {600, 300}, {1}, codegen::CudaRows::Block, false, 1},
};

// x's sum over `axes` in doubles, and the sum of |x| beside it: a float sum of those terms in
// any order lies within a few rounding errors of the second.
Tensor exact_sum(const Tensor& x, const Dims& axes) { return x.to(DType::F64).sum(axes); }
Tensor magnitude(const Tensor& x, const Dims& axes) { return abs(x.to(DType::F64)).sum(axes); }

void expect_sum_near(const Tensor& got, const Tensor& exact, const Tensor& terms, const std::string& what) {
  std::vector<double> g = got.to(cpu).to(DType::F64).contiguous().to_vector<double>();
  std::vector<double> e = exact.contiguous().to_vector<double>(), t = terms.contiguous().to_vector<double>();
  ASSERT_EQ(g.size(), e.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-6 * t[i] + 1e-6) << what << " at " << i;
}

class CudaReduceLayout : public ::testing::TestWithParam<Layout> {};

// The plan tests/unit/cuda_launch_test.cpp checks for a GPU, here for the host CUDA's sizes.
TEST_P(CudaReduceLayout, IsPlannedAsNamed) {
  const Layout& c = GetParam();
  codegen::KernelLayout L;
  Dims shape = c.shape;
  L.rank = static_cast<int>(shape.size());
  for (int64_t a : c.axes) L.reduced |= 1u << a;
  std::vector<int64_t> sizes(shape.begin(), shape.end());
  codegen::CudaLaunch p = codegen::plan_cuda_launch(L, sizes, 4, codegen::CudaWork::Partials);
  EXPECT_EQ(p.rows_by, c.rows_by);
  EXPECT_EQ(p.parts > 1, c.parts) << p.parts << " parts";
}

// Partial results whose combine is one block are combined by the kernel's last block.
TEST_P(CudaReduceLayout, EagerSumLaunchesAsPlanned) {
  REQUIRE_CUDA();
  const Layout& c = GetParam();
  Tensor x = ones(c.shape).to(kGpu);
  (void)x.sum(c.axes);  // compiles
  int64_t before = cuda::kernel_launches();
  Tensor s = x.sum(c.axes);
  EXPECT_EQ(cuda::kernel_launches() - before, c.launches);
  int64_t n = x.numel() / std::max<int64_t>(s.numel(), 1);
  EXPECT_TRUE(test::bitwise_equal(s.to(cpu), full(s.shape(), static_cast<double>(n))));
}

TEST_P(CudaReduceLayout, EagerSumsMaxesAndMeansMatchTheCpu) {
  REQUIRE_CUDA();
  const Layout& c = GetParam();
  manual_seed(17);
  Tensor x = randn(c.shape), g = x.to(kGpu);
  expect_sum_near(g.sum(c.axes), exact_sum(x, c.axes), magnitude(x, c.axes), "sum");
  Tensor n = scalar_tensor(static_cast<double>(x.numel() / x.sum(c.axes).numel()), DType::F64);
  expect_sum_near(g.mean(c.axes), exact_sum(x, c.axes) / n, magnitude(x, c.axes) / n, "mean");
  EXPECT_TRUE(test::bitwise_equal(amax(g, c.axes).to(cpu), amax(x, c.axes)));
  EXPECT_TRUE(test::bitwise_equal(amin(g, c.axes, true).to(cpu), amin(x, c.axes, true)));
  Tensor k = randint(-1000, 1000, c.shape, DType::I64);
  EXPECT_TRUE(test::bitwise_equal(k.to(kGpu).sum(c.axes).to(cpu), k.sum(c.axes)));
}

TEST_P(CudaReduceLayout, ViewsReduceAsTheirContiguousCopies) {
  REQUIRE_CUDA();
  const Layout& c = GetParam();
  manual_seed(18);
  // An offset view (one leading slice dropped) and a transposed one.
  Dims big = c.shape;
  big[0] += 1;
  Tensor x = randn(big).to(kGpu).slice(0, 1, big[0]);
  Tensor want = x.contiguous().sum(c.axes).to(cpu);
  expect_sum_near(x.sum(c.axes), want.to(DType::F64), abs(x.to(cpu)).to(DType::F64).sum(c.axes), "offset view");
  Dims rev;
  for (int64_t d = static_cast<int64_t>(c.shape.size()); d-- > 0;) rev.push_back(c.shape[static_cast<size_t>(d)]);
  Tensor t = randn(rev).to(kGpu);
  Dims perm;
  for (int64_t d = static_cast<int64_t>(c.shape.size()); d-- > 0;) perm.push_back(d);
  Tensor v = t.permute(perm);  // shaped as c.shape, strided backwards
  Tensor vc = v.to(cpu).contiguous();
  expect_sum_near(v.sum(c.axes), exact_sum(vc, c.axes), magnitude(vc, c.axes), "transposed view");
}

TEST_P(CudaReduceLayout, TracedReductionsMatchTheCpu) {
  REQUIRE_CUDA();
  const Layout& c = GetParam();
  manual_seed(19);
  Tensor x = randn(c.shape);
  Dims axes = c.axes;
  // A terminal sum (its parts may be cut) beside a variance, which reads a mean, a
  // normalization reading both, and full outputs that read no reduction: where the rows are
  // too few, the groups run as stages (cuda/stages.h).
  auto fn = [axes](std::span<const Tensor> in) {
    Tensor x = in[0], mean = x.mean(axes, true), d = x - mean;
    Tensor var = (d * d).mean(axes, true), r = relu(x);
    return std::vector<Tensor>{(x * x).sum(axes), var,        amax(x * 2.0f, axes), d * rsqrt(var + 1e-5f), r,
                               r.sum(axes),       mean * 3.0f};
  };
  std::vector<Tensor> args = {x.to(kGpu)};
  jit::Function f = jit::trace_tensors(fn, args, "reductions_" + c.name);
  std::vector<Tensor> got = f.call(args), want = fn(std::vector<Tensor>{x});
  Tensor x64 = x.to(DType::F64);
  expect_sum_near(got[0], (x64 * x64).sum(axes), (x64 * x64).sum(axes), "sum of squares");
  Tensor d = x64 - x64.mean(axes, true);
  Tensor var = (d * d).mean(axes, true);
  expect_sum_near(got[1], var, var * 10.0, "variance");
  EXPECT_TRUE(test::bitwise_equal(got[2].to(cpu), want[2]));
  for (size_t i = 3; i < got.size(); ++i) EXPECT_TRUE(test::close_enough(got[i].to(cpu), want[i])) << "output " << i;
}

// Partial results are combined in a fixed order: a float sum, eager or traced, has the same bits
// on every run (no atomics, whichever block finishes last).
TEST_P(CudaReduceLayout, SumsHaveTheSameBitsOnEveryRun) {
  REQUIRE_CUDA();
  const Layout& c = GetParam();
  manual_seed(20);
  Tensor x = randn(c.shape).to(kGpu);
  Dims axes = c.axes;
  std::vector<Tensor> args = {x};
  jit::Function f = jit::trace_tensors(
      [axes](std::span<const Tensor> in) { return std::vector<Tensor>{in[0].sum(axes)}; }, args, "sum_bits_" + c.name);
  Tensor first = x.sum(axes).to(cpu), traced = f.call(args)[0].to(cpu);
  for (int run = 0; run < 3; ++run) {
    EXPECT_TRUE(test::bitwise_equal(x.sum(axes).to(cpu), first)) << "eager, run " << run;
    EXPECT_TRUE(test::bitwise_equal(f.call(args)[0].to(cpu), traced)) << "traced, run " << run;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaReduceLayout, ::testing::ValuesIn(kLayouts),
                         [](const auto& info) { return info.param.name; });

// Partial results in f16 or bf16 would round twice: their sums keep whole rows, on any sizes.
TEST(CudaReductions, HalfSumsOfFewLongRowsKeepTheirRowsWhole) {
  REQUIRE_CUDA();
  manual_seed(20);
  for (DType t : {DType::F16, DType::BF16}) {
    Tensor x = (randn({3, 70001}) * 0.01f).to(t);
    EXPECT_TRUE(test::close_enough(x.to(kGpu).sum({1}).to(cpu), x.sum({1}))) << dtype_name(t);
    EXPECT_TRUE(test::bitwise_equal(amax(x.to(kGpu), {1}).to(cpu), amax(x, {1}))) << dtype_name(t);
  }
}

// A reduced dim of size 0: the identity of the reduction, and NaN for a mean, as on the CPU.
TEST(CudaReductions, OverAnEmptyDimGiveTheCpusAnswer) {
  REQUIRE_CUDA();
  struct Empty {
    Dims shape, axes;
  };
  for (const Empty& c : {Empty{{0, 5}, {0}}, Empty{{4, 0, 3}, {1}}, Empty{{2, 0}, {0, 1}}, Empty{{0, 40}, {0}}}) {
    SCOPED_TRACE(shape_str(c.shape));
    // A device block that held other numbers before, so a kernel that wrote nothing shows.
    Tensor junk = full({1024}, 7.0f).to(kGpu);
    junk = Tensor();
    Tensor x = zeros(c.shape), g = x.to(kGpu);
    EXPECT_TRUE(test::bitwise_equal(g.sum(c.axes).to(cpu), x.sum(c.axes)));
    EXPECT_TRUE(test::bitwise_equal(prod(g, c.axes).to(cpu), prod(x, c.axes)));
    Tensor mean = g.mean(c.axes).to(cpu);
    EXPECT_TRUE(test::close_enough(mean, x.mean(c.axes))) << mean;
    EXPECT_TRUE(test::bitwise_equal(g.to(DType::I32).sum(c.axes).to(cpu), x.to(DType::I32).sum(c.axes)));
    Dims axes = c.axes;
    auto fn = [axes](std::span<const Tensor> in) {
      return std::vector<Tensor>{(in[0] + 1.0f).sum(axes), (in[0] * 3.0f).mean(axes), prod(in[0] + 2.0f, axes)};
    };
    std::vector<Tensor> args = {g};
    jit::Function f = jit::trace_tensors(fn, args, "empty_reductions");
    std::vector<Tensor> got = f.call(args), want = fn(std::vector<Tensor>{x});
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(test::close_enough(got[i].to(cpu), want[i])) << i;
  }
}

}  // namespace
}  // namespace kiln
