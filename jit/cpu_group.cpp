// jit/cpu_group.cpp -- the CPU's runner of fused groups (jit/group_runner.h): an LLVM kernel
// (jit/kernel_cache.h) called over the parallel dim's range split across the thread pool, or
// for a split reduction (KernelArgs::split_dim), over runs of the split dim into partial
// results that are then combined in run order, so the bits do not depend on the thread count.
#include "jit/group_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>

#include "jit/kernel_cache.h"
#include "jit/plan.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/parallel.h"

namespace kiln::jit {
namespace {

class CpuGroup final : public GroupRunner {
 public:
  CpuGroup(const ir::Node& fused, std::span<const Tensor> inputs) {
    std::vector<Dims> shapes, strides;
    for (const Tensor& t : inputs) {
      shapes.push_back(t.shape());
      strides.push_back(t.strides());
    }
    args_ = kernel_args(fused, shapes, strides);
    kernel_ = kernel_for(*fused.body, args_.layout);
  }
  const std::string& symbol() const override { return kernel_.symbol; }

  void launch(std::span<const Tensor> inputs, std::span<const Tensor> outputs) const override {
    // The operands' pointers, on the stack for all but the widest groups (a call on a cached
    // plan allocates nothing here).
    void* data[64];
    std::vector<void*> spill;
    size_t n_ops = inputs.size() + outputs.size();
    void** p = data;
    if (n_ops > 64) {
      spill.resize(n_ops);
      p = spill.data();
    }
    for (size_t j = 0; j < inputs.size(); ++j) p[j] = inputs[j].data_ptr();
    for (size_t j = 0; j < outputs.size(); ++j) p[inputs.size() + j] = outputs[j].data_ptr();
    if (args_.split_dim >= 0) return run_split(inputs.size(), p, outputs);
    codegen::KernelFn fn = kernel_.fn;
    const int64_t* sizes = args_.sizes.data();
    const int64_t* strides = args_.strides.data();
    if (args_.range <= args_.grain) {
      fn(sizes, strides, p, 0, args_.range);
    } else {
      parallel_for(0, args_.range, args_.grain, [&](int64_t b, int64_t e) { fn(sizes, strides, p, b, e); });
    }
  }

 private:
  // Each run of the split dim reduced into its own partial result, in parallel; then the
  // partials reduced in run order.
  void run_split(size_t n_in, void* const* ptrs, std::span<const Tensor> outputs) const {
    const KernelArgs& a = args_;
    int rank = a.layout.rank, d = a.split_dim;
    std::vector<Tensor> partial;
    for (const Tensor& out : outputs) {
      Dims shape = out.shape();
      shape.insert(0, a.runs);
      partial.push_back(Tensor::empty({out.dtype(), shape, out.device()}));
    }
    parallel_for(0, a.runs, 1, [&](int64_t r0, int64_t r1) {
      std::vector<int64_t> sizes = a.sizes;
      std::vector<void*> p(ptrs, ptrs + n_in + outputs.size());
      for (int64_t r = r0; r < r1; ++r) {
        int64_t start = r * a.run;
        sizes[d] = std::min(a.run, a.sizes[d] - start);
        for (size_t j = 0; j < n_in; ++j) {
          int64_t es = dtype_size(a.layout.inputs[j].dtype);
          p[j] = static_cast<char*>(ptrs[j]) + start * a.strides[j * rank + d] * es;
        }
        for (size_t j = 0; j < outputs.size(); ++j) p[n_in + j] = partial[j][r].data_ptr();
        kernel_.fn(sizes.data(), a.strides.data(), p.data(), 0, a.range);
      }
    });
    for (size_t j = 0; j < outputs.size(); ++j) {
      Attrs attrs;
      attrs.axes = {0};
      copy_between(apply(a.combine[j], {partial[j]}, attrs), outputs[j]);
    }
  }

  KernelArgs args_;
  Kernel kernel_;
};

const bool g_cpu = [] {
  register_group_backend(DeviceType::CPU, [](const ir::Node& fused, std::span<const Tensor> inputs) {
    return std::unique_ptr<GroupRunner>(std::make_unique<CpuGroup>(fused, inputs));
  });
  return true;
}();

}  // namespace
}  // namespace kiln::jit
