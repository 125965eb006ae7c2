// tests/ops/op_specs_registered.h -- the Spec of `registered`, through a test op registered here:
// kiln_test::mul_add(a, b, k) = a * k + b, with kernels on the CPU and CUDA and a derivative.
#pragma once

#include <string>
#include <vector>

#include "runtime/check.h"
#include "runtime/registered_op.h"
#include "tests/ops/op_specs_common.h"

namespace kiln::test {

// Registered once per program, on first use. Its kernels are kiln ops (run with the tape off,
// as every kernel is), so the CPU and CUDA results come from kiln's own kernels.
inline const RegisteredOp& mul_add_op() {
  static const RegisteredOp& op = []() -> const RegisteredOp& {
    // f16 and bf16 compute in f32 and round once, as a fused kernel would.
    auto kernel = [](const OpCall& c) {
      DType t = c.input(0).dtype();
      DType compute = t == DType::F16 || t == DType::BF16 ? DType::F32 : t;
      return (c.input(0).to(compute) * c.get<int64_t>("k") + c.input(1).to(compute)).to(t).contiguous();
    };
    return register_op("kiln_test::mul_add(Tensor a, Tensor b, int k=2) -> Tensor")
        .rule([](const OpCall& c) {
          const Tensor &a = c.input(0), &b = c.input(1);
          KILN_CHECK(a.dtype() == b.dtype() && a.shape() == b.shape(),
                     "expected a and b of one dtype and shape, got {} and {}", a.type().str(), b.type().str());
          KILN_CHECK(a.dtype() != DType::Bool, "expected numbers, got {} (this registered op takes no bool)",
                     a.type().str());
          return TensorType{a.dtype(), a.shape()};
        })
        .cpu(kernel)
        .cuda([kernel](const OpCall& c, const cuda::Stream&) { return kernel(c); })
        .derivative([](const OpCall& c, const Tensor&, const Tensor& grad) {
          return std::vector<Tensor>{grad * c.get<int64_t>("k"), grad};
        });
  }();
  return op;
}

template <> struct Spec<OpId::Registered> {
  static std::vector<DType> dtypes() { return kNumericDTypes; }
  static std::vector<Case> cases(DType t) {
    auto run3 = [](std::span<const Tensor> in) { return mul_add_op()(in[0], in[1], 3); };
    auto run = [](std::span<const Tensor> in) { return mul_add_op()(in[0], in[1]); };
    auto ref = [](int64_t k) {
      return [k](std::span<const Ref> r) {
        Ref out = r[0];
        for (size_t i = 0; i < out.v.size(); ++i) out.v[i] = r[0].v[i] * static_cast<double>(k) + r[1].v[i];
        return out;
      };
    };
    return {
        {"k3", {values({3, 5}, t), values({3, 5}, t)}, run3, ref(3)},
        {"default_k", {values({4}, t), values({4}, t)}, run, ref(2)},
        {"transposed_and_offset", {transposed(4, 3, t), values({5, 3}, t).slice(0, 1, 5)}, run3, ref(3)},
        {"one_element", {values({}, t), values({}, t)}, run3, ref(3)},
        {"size_0", {values({0, 4}, t), values({0, 4}, t)}, run3, ref(3)},
    };
  }
};

}  // namespace kiln::test
