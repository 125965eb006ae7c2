// examples/models/train_model.cpp -- trains one of the example models (examples/models/README.md)
// with the shared loop (train.h), eagerly or as a traced whole step, and saves its forward.
//
//   train_model MODEL [--size tiny|bench|full] [--steps N] [--jit] [--batch N] [--seed S]
//                     [--device cpu|cuda:K] [--save PATH] [--text FILE] [--count] [--profile[=TRACE]]
//
// MODEL is alexnet, vgg19_bn, resnet50, mobilenet_v2, gnmt, ncf, gpt or unet, on synthetic data
// (zoo.h says what each learns). The GPT learns the bytes of FILE with --text (e.g.
// /usr/share/common-licenses/GPL-3, which every Debian system has); its saved forward keeps
// the batch and the length dynamic (B and T) for examples/generate to serve. The other models'
// saved forwards keep the batch dynamic (N). --count prints the parameter count and stops.
// --profile records the steps after the first (the first compiles) with kiln's profiler and
// prints where their time went; --profile=TRACE also writes them to TRACE, a Perfetto trace. --device trains on a GPU
// (the model, its optimizer and each batch moved there; it then prints the device's peak memory in use and kiln's
// kernel launches per step); the saved forward is written for the CPU either way. Errors are printed and the program
// exits with status 1.
#include <kiln/kiln.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "examples/models/train.h"
#include "examples/models/zoo.h"

using namespace kiln;
using namespace kiln::examples;

namespace {

struct Args {
  std::string model, text, save, trace, device = "cpu";
  Size size = Size::Bench;
  int64_t steps = 200, batch = 0;
  uint64_t seed = 0;
  bool jit = false, count = false, profile = false;
};

Args parse(int argc, char** argv) {
  Args a;
  auto value = [&](int& i) -> std::string {
    require(i + 1 < argc, std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--steps") a.steps = std::stoll(value(i));
    else if (s == "--batch") a.batch = std::stoll(value(i));
    else if (s == "--seed") a.seed = std::stoull(value(i));
    else if (s == "--text") a.text = value(i);
    else if (s == "--save") a.save = value(i);
    else if (s == "--device") a.device = value(i);
    else if (s == "--jit") a.jit = true;
    else if (s == "--count") a.count = true;
    else if (s == "--profile") a.profile = true;
    else if (s.rfind("--profile=", 0) == 0) a.profile = true, a.trace = s.substr(10);
    else if (s == "--size") {
      std::string v = value(i);
      require(v == "tiny" || v == "bench" || v == "full", "--size must be tiny, bench or full, not " + v);
      a.size = v == "tiny" ? Size::Tiny : v == "full" ? Size::Full : Size::Bench;
    } else if (a.model.empty() && !s.starts_with("-")) a.model = s;
    else throw Error("unknown argument '" + s + "'");
  }
  require(!a.model.empty(),
          "usage: train_model MODEL [--size tiny|bench|full] [--steps N] [--jit] [--batch N] "
          "[--seed S] [--device cpu|cuda:K] [--save PATH] [--text FILE] [--count] [--profile[=TRACE]]");
  require(a.text.empty() || a.model == "gpt", "--text is for the gpt");
  return a;
}

int run(int argc, char** argv) {
  Args a = parse(argc, argv);
  manual_seed(a.seed);
  std::unique_ptr<Task> task = make_task(a.model, a.size, a.batch, a.text.empty() ? std::string() : read_text(a.text));
  std::printf("%s: %lld parameters\n", a.model.c_str(), static_cast<long long>(parameter_count(task->model())));
  if (a.count) return 0;
  Device device = parse_device(a.device);
  task->model().to(device);
  std::printf("training on %s, %s steps on %s\n", a.text.empty() ? "synthetic data" : a.text.c_str(),
              a.jit ? "traced" : "eager", device.str().c_str());
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(a.model, *task);
  optim::CosineAnnealingLR schedule(*opt, a.steps, opt->initial_lr() / 10);
  require(!a.profile || a.steps >= 2, "--profile needs 2 steps or more (the first is not recorded)");
  if (device.is_cuda()) cuda::reset_peak_memory_stats(device.index);
  int64_t launches = cuda::kernel_launches();
  train(*task, *opt,
        {.steps = a.steps, .traced = a.jit, .log_every = 25, .profile = a.profile, .device = device, .trace = a.trace},
        &schedule);
  if (device.is_cuda())
    std::printf("%s: peak %.1f MB in use, %.1f kiln kernel launches per step\n", device.str().c_str(),
                static_cast<double>(cuda::memory_stats(device.index).peak_in_use) / 1e6,
                static_cast<double>(cuda::kernel_launches() - launches) / static_cast<double>(a.steps));
  if (a.profile) std::printf("%s\n", profiler::summary(20).c_str());
  if (!a.save.empty()) {
    task->model().to(cpu);
    std::vector<Tensor> b = task->batch(0);
    jit::SaveOptions options;
    if (a.model == "gpt") options.dynamic(0, 0, "B").dynamic(0, 1, "T");
    else
      for (size_t i = 0; i < task->forward_arity(); ++i) options.dynamic(i, 0, "N");
    save_forward(*task, b, a.save, options);
    std::printf("saved the forward to %s\n", a.save.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_model: %s\n", e.what());
    return 1;
  }
}
