// benchmarks/attention_bench.cpp -- attention on the CPU, forward and backward: the fused op
// (runtime/ops/attention.h, its blocked kernels) beside the composite it means (matmul, softmax,
// dropout, matmul), eagerly and traced, at the GPT example's bench size (with its dropout) and
// at a long causal sequence. Same run, so the ratio is what counts.
#include <benchmark/benchmark.h>

#include <kiln/kiln.h>

#include <string>
#include <vector>

#include "runtime/op.h"
#include "runtime/ops/attention.h"

using namespace kiln;

namespace {

struct Shape {
  const char* name;
  int64_t batch, heads, t, e;
  bool causal;
  double dropout;
};

// The gradients of sum(attention(q, k, v) * g) in q, k and v.
std::vector<Tensor> step(const Shape& sh, bool fused, std::span<const Tensor> in) {
  std::vector<Tensor> x = {in[0], in[1], in[2]};
  Attrs a;
  a.scale = 1.0 / std::sqrt(static_cast<double>(sh.e)), a.causal = sh.causal, a.dropout_p = sh.dropout;
  if (sh.dropout > 0)
    x.push_back(random_state(attention::dropout_counters({sh.batch * sh.heads, sh.t, sh.t, sh.e, sh.e})));
  Tensor y = fused ? apply(OpId::Attention, x, a) : attention::composite(x, a);
  Tensor loss[] = {sum(y * in[3])};
  return autograd::grad(loss, std::span<const Tensor>(in.data(), 3));
}

void attention_step(benchmark::State& s, Shape sh, bool fused, bool traced) {
  manual_seed(0);
  Dims d = {sh.batch, sh.heads, sh.t, sh.e};
  std::vector<Tensor> in = {randn(d).requires_grad_(), randn(d).requires_grad_(), randn(d).requires_grad_(), randn(d)};
  jit::Function f =
      jit::trace_tensors([&](std::span<const Tensor> x) { return step(sh, fused, x); }, in, "attention_step");
  auto run = [&] { return traced ? f.call(in)[0] : step(sh, fused, in)[0]; };
  benchmark::DoNotOptimize(run());
  for (auto _ : s) benchmark::DoNotOptimize(run());
}

[[maybe_unused]] const bool registered = [] {
  for (Shape sh : {Shape{"gpt_bench", 8, 4, 64, 16, true, 0.1}, Shape{"t128_e32", 4, 4, 128, 32, false, 0},
                   Shape{"t256_e32", 2, 4, 256, 32, false, 0}, Shape{"t512_e64", 1, 4, 512, 64, false, 0},
                   Shape{"t1024_e64", 1, 4, 1024, 64, false, 0}, Shape{"causal_t1024_e64", 1, 4, 1024, 64, true, 0}})
    for (bool traced : {false, true})
      for (bool fused : {true, false})
        benchmark::RegisterBenchmark(
            (std::string("attention/") + sh.name + (fused ? "/fused" : "/composite") + (traced ? "/jit" : "/kiln"))
                .c_str(),
            [=](benchmark::State& s) { attention_step(s, sh, fused, traced); })
            ->UseRealTime()
            ->MinTime(0.3);
  return true;
}();

}  // namespace
