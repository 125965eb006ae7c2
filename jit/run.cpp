// jit/run.cpp -- run_graph: the Executable without kernels, one eager apply() per op node.
#include "jit/run.h"

#include "jit/executable.h"

namespace kiln::jit {

std::vector<Tensor> run_graph(const ir::Graph& g, std::span<const Tensor> inputs, std::span<const Tensor> params) {
  return Executable(g, /*kernels=*/false).run(inputs, params);
}

}  // namespace kiln::jit
