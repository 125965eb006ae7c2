// examples/train_digits.cpp -- trains a small convolutional network on the handwritten digits
// that scikit-learn ships (1797 8x8 images, python3-sklearn; read as CSV, no Python needed)
// and reports test accuracy. Eager kiln: autograd, nn layers, Adam, a cosine schedule. The
// trained forward is saved with jit::save (digits_cnn.kiln) for examples/classify to serve.
// With --jit the whole training step (forward, backward, Adam) runs as a traced graph, and the
// traced step and forward are written as IR text (digits_step.ir, digits_forward.ir) for
// kiln-ir to dump, verify, optimize, draw and run. With --profile[=trace.json] the second epoch
// (the first warm one) is profiled: a Chrome trace (open it in https://ui.perfetto.dev) and a
// table of where its time went. Launched by kiln-run (`kiln-run -n 2 train_digits`), each
// process trains a replica on its shard of every epoch (DistributedSampler) with half the batch,
// and DistributedDataParallel averages the gradients: the same global batch of 32, so the same
// training as one process, split across two; rank 0 reports and saves. --epochs N trains for N
// epochs (20 by default); an error (a rank lost, a missing data file) is printed and the
// program exits with status 1.
#include <kiln/kiln.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "examples/digits_data.h"
#include "examples/digits_net.h"

using namespace kiln;

namespace {

using Net = kiln::examples::DigitsNet;

double accuracy(Net& net, const Tensor& x, const Tensor& y) {
  NoGradGuard no_grad;
  net.eval();
  double correct = sum(argmax(net(x), 1) == y).item<double>();
  net.train();
  return correct / static_cast<double>(y.numel());
}

// A progress bar redrawn in place on a terminal; one line per epoch otherwise (logs, CI).
void progress(int epoch, int epochs, int64_t step, int64_t steps, double loss, double rate) {
  static const bool tty = isatty(fileno(stdout));
  if (!tty && step + 1 < steps) return;
  constexpr int kWidth = 30;
  int filled = static_cast<int>(kWidth * (step + 1) / steps);
  std::printf("\repoch %2d/%d [%-*s] loss %.4f  %7.0f images/s", epoch, epochs, kWidth,
              std::string(static_cast<size_t>(filled), '#').c_str(), loss, rate);
  std::fflush(stdout);
}

int train(int argc, char** argv) {
  using clock = std::chrono::steady_clock;
  bool use_jit = false;
  int epochs = 20;
  std::string data_path = kiln::examples::kDigitsData, profile_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--jit") use_jit = true;
    else if (a == "--profile") profile_path = "digits_profile.json";
    else if (a.rfind("--profile=", 0) == 0) profile_path = a.substr(10);
    else if (a == "--epochs" && i + 1 < argc) epochs = std::stoi(argv[++i]);
    else data_path = a;
  }
  if (epochs < 1) throw Error("train_digits: --epochs takes a positive number");
  const int profiled_epoch = 2;
  auto [images, labels] = kiln::examples::load_digits(data_path);
  manual_seed(0);
  Tensor order = randperm(images.shape()[0]);
  data::TensorDataset all({index_select(images, 0, order), index_select(labels, 0, order)});
  int64_t n_test = 360;
  auto [train, test] = all.split(all.size() - n_test);
  // Data-parallel when a launcher set WORLD_SIZE (kiln-run, or RANK/MASTER_* by hand).
  std::optional<distributed::ProcessGroup> group;
  if (std::getenv("WORLD_SIZE")) group.emplace(distributed::options_from_env());
  int rank = group ? group->rank() : 0, world = group ? group->world_size() : 1;
  bool lead = rank == 0;  // reports and saves
  if (lead)
    std::printf("kiln: digits, %lld train / %lld test images, %d threads%s\n", (long long)train.size(),
                (long long)test.size(), num_threads(),
                world > 1 ? (", " + std::to_string(world) + " processes (data-parallel)").c_str() : "");

  Net net;
  std::optional<nn::DistributedDataParallel> ddp;
  if (group) ddp.emplace(net, *group);  // every replica starts from rank 0's weights
  const int64_t global_batch = 32, batch = global_batch / world;
  optim::Adam opt(net.parameters(), 3e-3);
  data::DistributedSampler sampler(train.size(), world, rank, /*shuffle=*/true);
  data::DataLoader loader =
      group ? data::DataLoader(train, batch, sampler) : data::DataLoader(train, batch, /*shuffle=*/true);
  optim::CosineAnnealingLR schedule(opt, epochs * loader.num_batches());

  auto train_step = [&](Tensor x, Tensor y) {
    Tensor loss = cross_entropy(net(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  jit::Function traced([&](std::span<const Tensor> in) { return std::vector<Tensor>{train_step(in[0], in[1])}; },
                       "train_step");

  auto t0 = clock::now();
  int64_t steps = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    sampler.set_epoch(epoch);
    if (!profile_path.empty() && epoch == profiled_epoch) profiler::start();
    auto e0 = clock::now();
    int64_t step = 0, seen = 0;
    double loss_sum = 0;
    for (const auto& b : loader) {
      Tensor loss = use_jit ? traced(b[0], b[1]) : train_step(b[0], b[1]);
      schedule.step();
      loss_sum += loss.item<double>();
      seen += b[0].shape()[0];
      double secs = std::chrono::duration<double>(clock::now() - e0).count();
      if (lead)
        progress(epoch, epochs, step, loader.num_batches(), loss_sum / double(step + 1), double(seen * world) / secs);
      ++step;
      ++steps;
    }
    auto test_t = test.get(arange(test.size()));
    if (lead) std::printf("  test accuracy %.2f%%\n", 100 * accuracy(net, test_t[0], test_t[1]));
    if (!profile_path.empty() && epoch == profiled_epoch) {
      profiler::stop(profile_path);
      std::printf("epoch %d profiled: trace written to %s (open it in https://ui.perfetto.dev)\n%s", epoch,
                  profile_path.c_str(), profiler::summary(25).c_str());
    }
  }
  double total = std::chrono::duration<double>(clock::now() - t0).count();
  auto test_t = test.get(arange(test.size()));
  double acc = accuracy(net, test_t[0], test_t[1]);
  if (!lead) return acc > 0.95 ? 0 : 1;  // the replicas are identical; rank 0 saves
  std::printf("final test accuracy %.2f%% (%lld images)\n", 100 * acc, (long long)test.size());
  std::printf("%.2f ms per step (batch %lld%s), %.2f s total\n", 1000 * total / double(steps), (long long)batch,
              world > 1 ? (" per process, " + std::to_string(global_batch) + " globally").c_str() : "", total);
  net.save("digits_cnn.safetensors");
  std::printf("weights saved to digits_cnn.safetensors\n");
  {
    // The trained forward for serving: examples/classify loads it in a process without the
    // Net class, at any batch size (N is dynamic), and scores the same held-out images.
    NoGradGuard no_grad;
    net.eval();
    jit::SaveOptions o;
    o.dynamic(0, 0, "N");
    o.input_names = {"images"};
    o.output_names = {"logits"};
    jit::save_module(net, test_t[0], "digits_cnn.kiln", o);
    save_npy(test_t[0], "digits_test_images.npy");
    save_npy(test_t[1], "digits_test_labels.npy");
    net.train();
  }
  std::printf(
      "forward saved to digits_cnn.kiln (any batch size), held-out set to digits_test_images.npy and "
      "digits_test_labels.npy\n");
  if (use_jit) {
    jit::Stats st = traced.stats();
    std::printf("jit: %lld traces, %lld cache hits\n", (long long)st.traces, (long long)st.hits);
    std::ofstream("digits_step.ir") << ir::print(traced.graph(), {.locations = false});
    auto forward = jit::trace_module(net, test_t[0]);
    std::ofstream("digits_forward.ir") << ir::print(forward.graph(), {.locations = false});
    std::printf("traced graphs written to digits_step.ir and digits_forward.ir\n");
  }
  return acc > 0.95 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return train(argc, argv);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "\ntrain_digits: %s\n", e.what());
    return 1;
  }
}
