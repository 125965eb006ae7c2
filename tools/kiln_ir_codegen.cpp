// tools/kiln_ir_codegen.cpp -- kiln-ir codegen: the source of each fused group's kernel.
#include <fmt/format.h>

#include "ir/passes.h"
#include "jit/executable.h"
#include "jit/kernels.h"
#include "runtime/check.h"
#include "tools/kiln_ir.h"

namespace kiln::tools {

std::string codegen_module(const Module& m, const std::string& target) {
  KILN_CHECK(target == "cpu", "codegen: target '{}' is not built in (known: cpu)", target);
  ir::Graph g = m.graph;
  bool fused = false;
  for (const ir::Node& n : g.nodes) fused = fused || n.kind == ir::NodeKind::Fused;
  if (!fused) {  // an unfused graph gets the jit's passes first
    std::vector<std::string> passes = ir::default_pipeline();
    passes.push_back("fuse");
    g = ir::run_passes(std::move(g), passes);
  }
  std::string out;
  int groups = 0;
  for (const ir::Node& n : g.nodes) {
    if (n.kind != ir::NodeKind::Fused) continue;
    // Operands as the jit would see them when they are contiguous; a symbolic size is taken to
    // be more than 1 (the kernel depends only on which sizes are 1, never on the others).
    std::vector<Dims> shapes, strides;
    for (uint32_t v : n.inputs) {
      Dims s = g.type(v).shape;
      for (int64_t& d : s) d = is_symbol(d) ? 2 : d;
      shapes.push_back(s);
      strides.push_back(contiguous_strides(s));
    }
    ir::Node concrete = n;
    auto body = std::make_shared<ir::Graph>(*n.body);
    for (TensorType& t : body->types)
      for (int64_t& d : t.shape) d = is_symbol(d) ? 2 : d;
    concrete.body = body;
    jit::KernelArgs args = jit::kernel_args(concrete, shapes, strides);
    std::string symbol;
    std::string src = jit::kernel_source(*body, args.layout, &symbol);
    std::vector<std::string> results;
    for (uint32_t v : n.results) results.push_back(g.type(v).str());
    out += fmt::format("; ---- group {}: {} -> {} ({} ops)\n{}\n", groups++, symbol, fmt::join(results, ", "),
                       body->nodes.size(), src);
  }
  if (groups == 0) out = "; no fused groups: every op runs on the eager kernels\n";
  return out;
}

}  // namespace kiln::tools
