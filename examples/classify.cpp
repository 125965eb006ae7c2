// examples/classify.cpp -- serves the digits model in a process that has never seen its C++
// class: jit::load reads the forward train_digits saved (digits_cnn.kiln), and the held-out
// images it wrote are classified in batches of 1 and of 64. The accuracy printed is the one
// the trainer printed.
//
//   classify [model.kiln] [images.npy] [labels.npy]
#include <fmt/format.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>

using namespace kiln;

int main(int argc, char** argv) {
  std::string model = argc > 1 ? argv[1] : "digits_cnn.kiln";
  std::string images_path = argc > 2 ? argv[2] : "digits_test_images.npy";
  std::string labels_path = argc > 3 ? argv[3] : "digits_test_labels.npy";
  try {
    auto t0 = std::chrono::steady_clock::now();
    jit::LoadedFunction f = jit::load(model);
    double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const jit::ModuleInfo& info = f.info();
    fmt::print("classify: {} (format {}, kiln {}), loaded in {:.2f} ms\n", model, info.format, info.kiln_version, load_ms);
    for (const jit::ValueInfo& v : f.inputs()) fmt::print("  input  {}: {}\n", v.name, v.type);
    for (const jit::ValueInfo& v : f.outputs()) fmt::print("  output {}: {}\n", v.name, v.type);
    Tensor images = load_npy(images_path), labels = load_npy(labels_path);
    NoGradGuard no_grad;
    int64_t n = images.shape()[0];
    for (int64_t batch : {1, 64}) {
      int64_t correct = 0;
      auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < n; i += batch) {
        int64_t len = std::min(batch, n - i);
        Tensor logits = f(images.narrow(0, i, len));
        correct += sum(argmax(logits, 1) == labels.narrow(0, i, len)).item<int64_t>();
      }
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      int64_t calls = (n + batch - 1) / batch;
      fmt::print("batches of {:>2}: test accuracy {:.2f}% ({} images), {:.3f} ms per call\n", batch,
                 100.0 * double(correct) / double(n), n, ms / double(calls));
    }
    jit::Stats st = f.stats();
    fmt::print("{} signatures compiled ({} kernels in the last), {} cache hits\n", st.traces, st.kernels, st.hits);
  } catch (const Error& e) {
    fmt::print(stderr, "classify: {}\n", e.what());
    return 1;
  }
  return 0;
}
