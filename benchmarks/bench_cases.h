// benchmarks/bench_cases.h -- the functions the benchmarks run, written once for kiln's eager
// and traced runs (torch_bench.cpp writes the same with LibTorch's ops).
#pragma once

#include <kiln/kiln.h>

namespace kiln::bench {

// gelu with the tanh approximation as 9 primitive ops (one pass over memory each, eagerly).
inline Tensor gelu_9ops(Tensor x) {
  Tensor cube = x * x * x;
  Tensor inner = (x + cube * 0.044715f) * 0.7978845608f;
  return x * 0.5f * (tanh(inner) + 1.0f);
}

// softmax over the last dim from primitive ops.
inline Tensor softmax_prims(Tensor x) {
  Tensor e = exp(x - amax(x, {-1}, true));
  return e / e.sum({-1}, true);
}

// layer_norm over the last dim from primitive ops (biased variance, eps 1e-5, as at::layer_norm).
inline Tensor layer_norm_prims(Tensor x, Tensor w, Tensor b) {
  Tensor d = x - x.mean({-1}, true);
  Tensor var = (d * d).mean({-1}, true);
  return d * rsqrt(var + 1e-5f) * w + b;
}

// The smallest function worth a kernel: two pointwise ops.
inline Tensor two_ops(Tensor x) { return x * 2.0f + 1.0f; }

// MLP forward: 784 -> 512, gelu (tanh), -> 10, softmax.
struct Mlp {
  nn::Linear fc1{784, 512}, fc2{512, 10};
  Tensor forward(const Tensor& x) { return softmax_prims(fc2(gelu_9ops(fc1(x)))); }
};

int first_call_probe();  // jit_bench.cpp

}  // namespace kiln::bench
