// tools/kiln_ir_codegen.cpp -- kiln-ir codegen: the source of each fused group's kernel.
#include <fmt/format.h>

#include "ir/passes.h"
#include "jit/executable.h"
#include "jit/kernels.h"
#include "runtime/check.h"
#include "tools/kiln_ir.h"

namespace kiln::tools {

std::string codegen_module(const Module& m, const std::string& target, const std::vector<std::string>& dims) {
  KILN_CHECK(target == "cpu", "codegen: target '{}' is not built in (known: cpu)", target);
  // An unfused graph gets the jit's passes and fusion first, its symbolic dims sized as given
  // (default 64): the kernels depend only on which sizes are 1.
  ir::Graph g = fused_graph(m.graph, sizes_or_default(m.graph, dims));
  std::string out;
  int groups = 0;
  for (const ir::Node& n : g.nodes) {
    if (n.kind != ir::NodeKind::Fused) continue;
    // Operands as the jit would see them when they are contiguous.
    std::vector<Dims> shapes, strides;
    for (uint32_t v : n.inputs) {
      shapes.push_back(g.type(v).shape);
      strides.push_back(contiguous_strides(shapes.back()));
    }
    jit::KernelArgs args = jit::kernel_args(n, shapes, strides);
    std::string symbol;
    std::string src = jit::kernel_source(*n.body, args.layout, &symbol);
    std::vector<std::string> results;
    for (uint32_t v : n.results) results.push_back(g.type(v).str());
    out += fmt::format("; ---- group {}: {} -> {} ({} ops)\n{}\n", groups++, symbol, fmt::join(results, ", "),
                       n.body->nodes.size(), src);
  }
  if (groups == 0) out = "; no fused groups: every op runs on the eager kernels\n";
  return out;
}

}  // namespace kiln::tools
