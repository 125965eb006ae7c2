// benchmarks/load_probe.cpp -- the child process of load_bench.cpp's fresh-process cases: a
// program that links kiln alone (not LibTorch, which kiln_bench links and which takes most of
// a second to load), as a server would. Prints the milliseconds from jit::load to the end of
// the first call of the saved digits forward at batch 1.
#include <kiln/kiln.h>

#include <chrono>
#include <cstdio>

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc != 2) {
    std::fprintf(stderr, "usage: kiln_load_probe module.kiln\n");
    return 2;
  }
  try {
    NoGradGuard g;
    Tensor x = randn({1, 1, 8, 8});
    auto t0 = std::chrono::steady_clock::now();
    jit::LoadedFunction f = jit::load(argv[1]);
    Tensor y = f(x);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%.4f\n", ms);
    return y.numel() == 10 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln_load_probe: %s\n", e.what());
    return 1;
  }
}
