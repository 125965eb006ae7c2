// tests/cuda/differential_test.cpp -- the jit's random programs (tests/jit/random_program.h) on
// cuda:0: eagerly, and traced (fused NVRTC kernels, and through the compiled backward), each
// against the same program run eagerly on the CPU, and its third call (a CUDA graph's replay)
// against its first. KILN_CUDA_DIFF_PROGRAMS (default 40: the
// host CUDA compiles its kernels with the host compiler; apart from the CPU test's
// KILN_DIFF_PROGRAMS, which the sanitizer run sets) and KILN_CUDA_DIFF_SEED pick the
// programs; the README gives the command for a 10,000-program run.
#include <fmt/format.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "autograd/autograd.h"
#include "tests/cuda/cuda_test.h"
#include "tests/jit/jit_test_util.h"
#include "tests/jit/random_program.h"

namespace kiln {
namespace {

using test::kGpu;

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

std::vector<Tensor> on(Device d, const std::vector<Tensor>& xs) {
  std::vector<Tensor> out;
  for (const Tensor& x : xs) out.push_back(x.detach().to(d));
  return out;
}

// close_enough with 10x its float tolerance (|a - b| <= 1e-4 + 1e-3 |b|), and 1e-5 of the
// result's largest magnitude: cuBLAS and the CPU's BLAS sum a matmul in different orders, and
// the programs' cos and exp of large arguments magnify that (on an H200, one gradient of 2000
// programs differed by 1.1e-4 relative). An element that is a difference of large terms keeps
// their absolute error: in seed 5355, the gradient 0.763 of a log_softmax over dim 0 is
// -87.9 + 0.76 + ... of the gradient of sin(matmul) at arguments near 1e4, and differs by 1.4e-3
// (tensor's largest element 1515). A wrong index or formula misses by the element's own size.
bool close_across_devices(const Tensor& a, const Tensor& b) {
  if (!(a.type() == b.type())) return false;
  if (!is_float(a.dtype()) || a.dtype() == DType::F16 || a.dtype() == DType::BF16) return test::close_enough(a, b);
  std::vector<double> x = a.to(DType::F64).contiguous().to_vector<double>();
  std::vector<double> y = b.to(DType::F64).contiguous().to_vector<double>();
  double largest = 0;
  for (double v : y)
    if (std::isfinite(v)) largest = std::max(largest, std::abs(v));
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i]) || std::isinf(x[i]) || std::isinf(y[i])) {
      if (!(std::isnan(x[i]) && std::isnan(y[i])) && x[i] != y[i]) return false;
    } else if (std::abs(x[i] - y[i]) > 1e-4 + 1e-3 * std::abs(y[i]) + 1e-5 * largest) {
      return false;
    }
  }
  return true;
}

void expect_close_to_cpu(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].defined(), want[i].defined()) << what << ": output " << i;
    if (!want[i].defined()) continue;
    EXPECT_EQ(got[i].device(), kGpu) << what << ": output " << i;
    EXPECT_TRUE(close_across_devices(got[i].to(cpu), want[i])) << what << ": output " << i << "\n"
                                                               << got[i].to(cpu) << "\nwant\n"
                                                               << want[i];
  }
}

// The gradients of sum(result_i * r_i) (r drawn from `seed`) with respect to `wrt`.
std::vector<Tensor> gradients(const std::vector<Tensor>& outs, const std::vector<Tensor>& wrt, uint64_t seed) {
  std::vector<Tensor> diff, seeds;
  manual_seed(seed);
  for (const Tensor& o : outs)
    if (o.requires_grad()) {
      diff.push_back(o);
      seeds.push_back(randn(o.shape(), o.dtype()).to(o.device()));
    }
  if (diff.empty()) return std::vector<Tensor>(wrt.size());
  return autograd::grad(diff, wrt, seeds, false, false, /*allow_unused=*/true);
}

int fused_kernels = 0, compiled_backwards = 0, graph_replays = 0;

void check_program(uint64_t seed) {
  test::Program p = test::random_program(seed, 6 + static_cast<int>(seed % 10));
  SCOPED_TRACE("the program:\n" + p.text);
  std::vector<Tensor> want = p.run(p.args);
  std::vector<Tensor> args = on(kGpu, p.args);
  expect_close_to_cpu(p.run(args), want, "eager on cuda:0");  // also copies the captured tensors
  jit::Function f([&p](std::span<const Tensor> a) { return p.run(a); }, "prog");
  std::vector<Tensor> traced = f.call(args);
  expect_close_to_cpu(traced, want, "traced on cuda:0");
  fused_kernels += static_cast<int>(f.stats().kernels);
  // The second call is captured as a CUDA graph and the third replays it (cuda/graph.h):
  // the same bits as the launches they replace.
  f.call(args);
  std::vector<Tensor> replayed = f.call(args);
  graph_replays += static_cast<int>(f.stats().graph_replays);
  ASSERT_EQ(replayed.size(), traced.size());
  for (size_t i = 0; i < traced.size(); ++i)
    EXPECT_TRUE(test::bitwise_equal(replayed[i].to(cpu), traced[i].to(cpu))) << "output " << i << " replayed";

  // Backward: the float arguments require grad, on both devices.
  std::vector<Tensor> cpu_args, gpu_args, cpu_wrt, gpu_wrt;
  for (const Tensor& a : p.args) {
    Tensor c = a.detach().clone(), g = a.detach().to(kGpu);
    if (is_float(a.dtype())) {
      cpu_wrt.push_back(c.requires_grad_());
      gpu_wrt.push_back(g.requires_grad_());
    }
    cpu_args.push_back(c);
    gpu_args.push_back(g);
  }
  if (cpu_wrt.empty()) return;
  std::vector<Tensor> want_grads;
  try {
    want_grads = gradients(p.run(cpu_args), cpu_wrt, seed);
  } catch (const Error&) {  // an op without a derivative: nothing to compare
    return;
  }
  jit::Function fb([&p](std::span<const Tensor> a) { return p.run(a); }, "prog");
  std::vector<Tensor> outs = fb.call(gpu_args);
  for (const Tensor& o : outs)
    if (o.grad_fn_name() == "jit @prog") {
      ++compiled_backwards;
      break;
    }
  expect_close_to_cpu(gradients(outs, gpu_wrt, seed), want_grads, "gradients through the compiled backward");
}

TEST(CudaDifferential, RandomProgramsOnCudaMatchTheCpu) {
  REQUIRE_CUDA();
  const uint64_t programs = env_or("KILN_CUDA_DIFF_PROGRAMS", 40), first = env_or("KILN_CUDA_DIFF_SEED", 0);
  std::vector<uint64_t> failed;
  for (uint64_t seed = first; seed < first + programs; ++seed) {
    testing::TestPartResultArray results;
    {
      testing::ScopedFakeTestPartResultReporter capture(
          testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
      try {
        check_program(seed);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    }
    for (int i = 0; i < results.size(); ++i) {
      if (!results.GetTestPartResult(i).failed()) continue;
      failed.push_back(seed);
      if (failed.size() <= 10)
        ADD_FAILURE() << "seed " << seed << " fails:\n" << results.GetTestPartResult(i).message();
      break;
    }
  }
  std::printf(
      "cuda: %zu of %llu programs (seeds %llu to %llu) failed; %d fused kernels ran, %d compiled backwards, "
      "%d calls replayed CUDA graphs\n",
      failed.size(), static_cast<unsigned long long>(programs), static_cast<unsigned long long>(first),
      static_cast<unsigned long long>(first + programs - 1), fused_kernels, compiled_backwards, graph_replays);
  EXPECT_TRUE(failed.empty()) << failed.size() << " programs failed";
  EXPECT_GT(fused_kernels, static_cast<int>(programs) / 4);
  EXPECT_GT(compiled_backwards, static_cast<int>(programs) / 4);
  EXPECT_GT(graph_replays, static_cast<int>(programs) / 4);
}

}  // namespace
}  // namespace kiln
