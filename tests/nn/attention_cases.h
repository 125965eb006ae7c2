// tests/nn/attention_cases.h -- the fused attention op against its composite (runtime/ops/
// attention.h), on any device: values and the gradients of q, k, v (and a float mask), with
// the dropout's mask drawn from the same generator state on both sides. The composite runs in
// f64 on the CPU, so it is the reference of every dtype and device.
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <string>
#include <vector>

#include "runtime/op.h"
#include "runtime/ops/attention.h"
#include "tests/ops/reference.h"

namespace kiln::test {

struct FusedAttentionCase {
  std::string name;
  DType dtype;
  int64_t batch, heads, l, s, e;
  int mask = 0;  // 0 none, 1 bool [L, S], 2 float [B, 1, L, S]
  bool causal = false;
  double dropout = 0;
};

/// Values and gradients within rtol of the f64 composite's, relative to each tensor's largest
/// magnitude (f16 and bf16 round q, k and v once each), or for a gradient, |grad| |v|.
inline void expect_fused_matches_composite(const FusedAttentionCase& c, Device device, double rtol) {
  SCOPED_TRACE(c.name + " on " + device.str());
  Tensor q = randn({c.batch, c.heads, c.l, c.e}), k = randn({c.batch, c.heads, c.s, c.e}),
         v = randn({c.batch, c.heads, c.s, c.e}), g = randn({c.batch, c.heads, c.l, c.e});
  Tensor mask;
  if (c.mask == 1) mask = logical_or(rand({c.l, c.s}) < 0.7, eq(arange(0, c.s, 1, DType::I64), 0));
  if (c.mask == 2) mask = randn({c.batch, 1, c.l, c.s});
  Attrs a;
  a.scale = 1.0 / std::sqrt(static_cast<double>(c.e)), a.causal = c.causal, a.dropout_p = c.dropout;
  attention::Sizes z{c.batch * c.heads, c.l, c.s, c.e, c.e};
  Tensor state = random_state(attention::dropout_counters(z));
  auto run = [&](DType t, Device d, bool fused) {
    std::vector<Tensor> in = {q.to(t).to(d).requires_grad_(), k.to(t).to(d).requires_grad_(),
                              v.to(t).to(d).requires_grad_()};
    if (mask.defined()) in.push_back(mask.dtype() == DType::Bool ? mask.to(d) : mask.to(t).to(d).requires_grad_());
    if (c.dropout > 0) in.push_back(state.to(d));
    Tensor y = fused ? attention::apply_fused(in, a) : attention::composite(in, a);
    std::vector<Tensor> wrt = {in[0], in[1], in[2]};
    if (c.mask == 2) wrt.push_back(in[3]);
    Tensor gs[] = {g.to(t).to(d)};
    Tensor ys[] = {y};
    std::vector<Tensor> grads = autograd::grad(ys, wrt, gs);
    grads.insert(grads.begin(), y);
    return grads;
  };
  std::vector<Tensor> want = run(DType::F64, cpu, false), got = run(c.dtype, device, true);
  const char* names[] = {"out", "dq", "dk", "dv", "dmask"};
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(names[i]);
    Tensor w = want[i], r = got[i].to(cpu).to(DType::F64);
    ASSERT_EQ(r.shape(), w.shape());
    // Gradients cancel (dS = W (dW - D)): their error scales with |grad| |v|, not with them.
    double mag = w.numel() ? amax(abs(w)).item<double>() : 0;
    if (i > 0) mag = std::max(mag, amax(abs(g)).item<double>() * amax(abs(v)).item<double>());
    EXPECT_TRUE(all_close(r, w.to_vector<double>(), w.shape(), {0, rtol * mag + 1e-12}));
  }
}

/// The tolerance of a dtype's fused result against the f64 composite.
inline double fused_rtol(DType t) {
  switch (t) {
    case DType::F64: return 1e-11;
    case DType::F32: return 2e-5;
    case DType::F16: return 4e-3;
    default: return 3e-2;
  }
}

}  // namespace kiln::test
