// examples/classify.cpp -- serves the digits model in a process that has never seen its C++
// class: jit::load reads the forward train_digits saved (digits_cnn.kiln), and the held-out
// images it wrote are classified in batches of 1 and of 64. The accuracy printed is the one
// the trainer printed. For each batch size it prints the first call's time (planning, and
// compiling or reading the kernels from the disk cache) apart from the steady state's.
//
//   classify [model.kiln] [images.npy] [labels.npy]
#include <fmt/format.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>
#include <string>

using namespace kiln;

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// Where the kernels new in [a, b] came from.
std::string kernels_found(const jit::KernelCacheStats& a, const jit::KernelCacheStats& b) {
  int64_t compiled = b.compiles - a.compiles, read = b.disk_hits - a.disk_hits;
  auto kernels = [](int64_t n) { return fmt::format("{} kernel{}", n, n == 1 ? "" : "s"); };
  if (compiled == 0 && read == 0) return "its kernels already loaded";
  if (compiled == 0) return kernels(read) + " from the disk cache";
  if (read == 0) return kernels(compiled) + " compiled";
  return fmt::format("{} compiled, {} from the disk cache", kernels(compiled), read);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = argc > 1 ? argv[1] : "digits_cnn.kiln";
  std::string images_path = argc > 2 ? argv[2] : "digits_test_images.npy";
  std::string labels_path = argc > 3 ? argv[3] : "digits_test_labels.npy";
  try {
    auto t0 = std::chrono::steady_clock::now();
    jit::LoadedFunction f = jit::load(model);
    double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const jit::ModuleInfo& info = f.info();
    fmt::print("classify: {} (format {}, kiln {}), loaded in {:.2f} ms\n", model, info.format, info.kiln_version,
               load_ms);
    for (const jit::ValueInfo& v : f.inputs()) fmt::print("  input  {}: {}\n", v.name, v.type);
    for (const jit::ValueInfo& v : f.outputs()) fmt::print("  output {}: {}\n", v.name, v.type);
    Tensor images = load_npy(images_path), labels = load_npy(labels_path);
    NoGradGuard no_grad;
    int64_t n = images.shape()[0];
    for (int64_t batch : {1, 64}) {
      // One pass scores the set. Its first call plans this batch size and finds its kernels (the
      // first size compiles them, or reads them from the disk cache; a later size reuses them):
      // timed apart from the steady state, timed over later passes once every size is planned.
      jit::KernelCacheStats k0 = jit::kernel_cache_stats(), k1;
      int64_t correct = 0;
      double first_ms = 0;
      auto score = [&](int64_t i, int64_t len) {
        Tensor logits = f(images.narrow(0, i, len));
        return sum(argmax(logits, 1) == labels.narrow(0, i, len)).item<int64_t>();
      };
      for (int64_t i = 0; i < n; i += batch) {
        auto start = std::chrono::steady_clock::now();
        correct += score(i, std::min(batch, n - i));
        if (i == 0) first_ms = ms_since(start), k1 = jit::kernel_cache_stats();
      }
      int64_t calls = 0;
      auto start = std::chrono::steady_clock::now();
      do {
        for (int64_t i = 0; i < n; i += batch, ++calls) score(i, std::min(batch, n - i));
      } while (ms_since(start) < 200);
      fmt::print(
          "batches of {:>2}: test accuracy {:.2f}% ({} images); first call {:.2f} ms ({}), then {:.3f} ms per call\n",
          batch, 100.0 * double(correct) / double(n), n, first_ms, kernels_found(k0, k1),
          ms_since(start) / double(calls));
    }
    jit::Stats st = f.stats();
    fmt::print("{} signatures compiled ({} kernels in the last), {} cache hits\n", st.traces, st.kernels, st.hits);
  } catch (const Error& e) {
    fmt::print(stderr, "classify: {}\n", e.what());
    return 1;
  }
  return 0;
}
