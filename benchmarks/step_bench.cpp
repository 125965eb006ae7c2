// benchmarks/step_bench.cpp -- whole training steps, three ways in kiln: eager ("kiln"), a
// compiled forward whose loss runs a compiled backward ("jit_bwd"), and the whole step traced
// ("jit"). torch_step_bench.cpp runs them in LibTorch; the digits step's eager rows are in
// train_bench.cpp. Each kiln row also reports the step's peak memory above what lives between
// steps (parameters, optimizer state): activations, saved values and plan workspaces.
#include <benchmark/benchmark.h>

#include <kiln/kiln.h>

#include <functional>
#include <string>

#include "benchmarks/bench_cases.h"

using namespace kiln;

namespace {

enum class Mode { Eager, Compiled, Traced };

// Times opt's training step on loss_of(x, y) the way `mode` runs it (after one untimed step,
// which also traces).
template <class Loss>
void step_case(benchmark::State& s, Mode mode, optim::Optimizer& opt, Loss loss_of, const Tensor& x, const Tensor& y) {
  auto eager_step = [&opt, &loss_of](const Tensor& a, const Tensor& b) {
    opt.zero_grad();
    Tensor loss = loss_of(a, b);
    loss.backward();
    opt.step();
    return loss;
  };
  std::function<Tensor()> step;
  jit::Function compiled([](std::span<const Tensor>) { return std::vector<Tensor>{}; }, "unused");
  if (mode == Mode::Eager) {
    step = [&] { return eager_step(x, y); };
  } else if (mode == Mode::Compiled) {
    jit::Function fast = jit::trace([&](Tensor a, Tensor b) { return loss_of(a, b); }, {x, y}, "loss");
    compiled = fast;
    step = [&, fast] {
      opt.zero_grad();
      Tensor loss = fast(x, y);
      loss.backward();
      opt.step();
      return loss;
    };
  } else {
    jit::Function fast = jit::trace(eager_step, {x, y}, "step");
    step = [&, fast] { return fast(x, y); };
  }
  benchmark::DoNotOptimize(step());
  Allocator& memory = cpu_allocator();
  int64_t between = memory.stats().in_use;
  memory.reset_peak();
  benchmark::DoNotOptimize(step());
  s.counters["peak_MB"] = double(memory.stats().peak_in_use - between) / 1e6;
  // What the compiled forward keeps for its backward (the partition's saved values).
  if (mode == Mode::Compiled) s.counters["saved_MB"] = double(compiled.stats().saved_bytes) / 1e6;
  for (auto _ : s) benchmark::DoNotOptimize(step());
}

const char* impl(Mode m) { return m == Mode::Eager ? "kiln" : m == Mode::Compiled ? "jit_bwd" : "jit"; }

void mlp_step(benchmark::State& s, Mode mode, int64_t batch) {
  manual_seed(0);
  nn::Linear fc1(784, 256), fc2(256, 10);
  optim::SGD opt({fc1.weight, fc1.bias, fc2.weight, fc2.bias}, 0.01);
  Tensor x = randn({batch, 784}), y = randint(0, 10, {batch});
  step_case(
      s, mode, opt, [&](const Tensor& a, const Tensor& b) { return cross_entropy(fc2(relu(fc1(a))), b); }, x, y);
  bench::count_flops(s, bench::mlp_step_flops(batch));
}

void compiled_digits_step(benchmark::State& s, Mode mode) {
  manual_seed(0);
  bench::DigitsNet net;
  optim::Adam opt(net.parameters(), 3e-3);
  Tensor x = rand({bench::kDigitsBatch, 1, 8, 8}), y = randint(0, 10, {bench::kDigitsBatch});
  step_case(
      s, mode, opt, [&](const Tensor& a, const Tensor& b) { return cross_entropy(net(a), b); }, x, y);
  bench::count_flops(s, bench::digits_step_flops(bench::kDigitsBatch));
}

void encoder_step(benchmark::State& s, Mode mode) {
  using E = bench::EncoderBlock;
  manual_seed(0);
  E net;
  optim::AdamW opt(net.parameters(), 1e-3);
  Tensor tokens = randint(0, E::kVocab, {E::kBatch, E::kSeq}), next = randint(0, E::kVocab, {E::kBatch * E::kSeq});
  step_case(
      s, mode, opt,
      [&](const Tensor& a, const Tensor& b) {
        return cross_entropy(net(a).reshape({E::kBatch * E::kSeq, E::kVocab}), b);
      },
      tokens, next);
}

bool register_steps() {
  auto add = [](const std::string& c, Mode m, auto fn) {
    return benchmark::RegisterBenchmark((c + "/" + impl(m)).c_str(), [m, fn](benchmark::State& s) { fn(s, m); })
        ->UseRealTime();
  };
  const Mode all[] = {Mode::Eager, Mode::Compiled, Mode::Traced};
  for (int64_t batch : {64, 256})
    for (Mode m : all)
      add(bench::mlp_step_name(batch), m, [batch](benchmark::State& s, Mode m) { mlp_step(s, m, batch); });
  // eager: train_bench.cpp
  for (Mode m : {Mode::Compiled, Mode::Traced}) add(bench::kDigitsName, m, compiled_digits_step);
  for (Mode m : all) add(bench::kEncoderName, m, encoder_step)->MinTime(1.0);
  return true;
}
[[maybe_unused]] const bool steps_registered = register_steps();

}  // namespace
