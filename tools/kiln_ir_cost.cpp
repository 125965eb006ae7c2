// tools/kiln_ir_cost.cpp -- kiln-ir cost: what a graph's compiled step should cost on a named
// device (jit/cost.h), without running it or needing the device.
#include <fmt/format.h>

#include "jit/cost.h"
#include "tools/kiln_ir.h"

namespace kiln::tools {

std::string cost_module(const Module& m, const CostOptions& o) {
  const jit::DevicePeak& peak = jit::device_peak(o.device);
  // As the jit compiles it: its passes and fusion, symbolic dims sized as given (default 64).
  ir::Graph g = fused_graph(m.graph, sizes_or_default(m.graph, o.dims));
  jit::PlanCost cost = jit::plan_cost(g, peak.multiprocessors);
  double bound = cost.bound(peak, o.tf32);
  std::string at_least = bound < 1e-3 ? fmt::format("{:.2f} us", bound * 1e6) : fmt::format("{:.3f} ms", bound * 1e3);
  return fmt::format("@{}: {:.3f} GB moved, {:.3f} GFLOP, {} launches; at least {} on {}\n{}", g.name,
                     static_cast<double>(cost.bytes()) / 1e9, cost.flops() / 1e9, cost.launches(), at_least, peak.name,
                     cost.table(peak, o.top, o.tf32));
}

}  // namespace kiln::tools
