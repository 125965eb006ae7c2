// tools/kiln_ir_inspect.cpp -- kiln-ir inspect: what a saved module says about itself, and the
// kernels it would compile; and the symbolic-dims-to-fused-graph step run and codegen share.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>

#include "ir/passes.h"
#include "ir/specialize.h"
#include "jit/executable.h"
#include "runtime/check.h"
#include "tools/kiln_ir.h"

namespace kiln::tools {
namespace {

constexpr int64_t kDefaultDimSize = 64;  // a dynamic dim's size where none is given

std::string bytes_text(int64_t n) {
  if (n < 10 * 1024) return fmt::format("{} B", n);
  if (n < 10 * 1024 * 1024) return fmt::format("{:.1f} KiB", double(n) / 1024);
  return fmt::format("{:.1f} MiB", double(n) / (1024 * 1024));
}

int64_t bytes_of(const TensorType& t) { return t.shape.product() * dtype_size(t.dtype); }

}  // namespace

ir::DimSizes parse_dims(const ir::Graph& g, const std::vector<std::string>& dims) {
  ir::DimSizes sizes;
  for (const std::string& d : dims) {
    size_t eq = d.find('=');
    KILN_CHECK(eq != std::string::npos && eq > 0, "--dim {}: expected NAME=SIZE, e.g. B=64", d);
    std::string name = d.substr(0, eq), value = d.substr(eq + 1);
    int64_t n = -1;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    KILN_CHECK(ec == std::errc() && end == value.data() + value.size() && n >= 0 && n <= (int64_t{1} << 40),
               "--dim {}: '{}' is not a size", d, value);
    bool known = false;
    for (const std::string& dn : g.dim_names)
      for (std::string_view part : ir::dim_term(dn).symbols) known = known || part == name;
    KILN_CHECK(known, "--dim {}: @{} has no dim {}{}", d, g.name, name,
               g.dim_names.empty() ? " (it has no symbolic dims)"
                                   : fmt::format(" (its dims: {})", fmt::join(g.dim_names, ", ")));
    sizes[name] = n;
  }
  return sizes;
}

ir::Graph fused_graph(const ir::Graph& g, const ir::DimSizes& sizes) {
  ir::Graph c = g.dim_names.empty() ? g : ir::specialize(g, sizes);
  for (const ir::Node& n : c.nodes)
    if (n.kind == ir::NodeKind::Fused) return c;
  std::vector<std::string> passes = ir::default_pipeline();  // then what jit adds when it fuses
  passes.push_back("transpose-matmul");
  passes.push_back("fuse");
  return ir::run_passes(std::move(c), passes);
}

ir::DimSizes sizes_or_default(const ir::Graph& g, const std::vector<std::string>& dims) {
  ir::DimSizes sizes = parse_dims(g, dims);
  for (const std::string& dn : g.dim_names)
    for (std::string_view part : ir::dim_term(dn).symbols) sizes.try_emplace(std::string(part), kDefaultDimSize);
  return sizes;
}

std::string inspect_module(const Module& m, const std::vector<std::string>& dims) {
  const ir::Graph& g = m.graph;
  DimNamesScope names(&g.dim_names);
  std::string out;
  if (m.info) {
    const jit::ModuleInfo& i = *m.info;
    out += fmt::format("saved module: format {}, written by kiln {}\n", i.format, i.kiln_version);
    out += fmt::format("function @{}: {}\n", i.name,
                       i.training_step ? "a whole training step (updates its parameters on every call)" : "a forward");
    for (const jit::ValueInfo& v : i.inputs) out += fmt::format("  input  {}: {}\n", v.name, v.type);
    for (const jit::ValueInfo& v : i.outputs) out += fmt::format("  output {}: {}\n", v.name, v.type);
    out += fmt::format("dynamic dims: {}\n",
                       i.dynamic_dims.empty() ? "none" : fmt::format("{}", fmt::join(i.dynamic_dims, ", ")));
    if (i.random_draws) out += fmt::format("random numbers drawn per call: {}\n", i.random_draws);
    if (!i.assigns.empty()) out += fmt::format("updates per call: {}\n", fmt::join(i.assigns, ", "));
  } else {
    out += fmt::format("IR text: @{}\n", g.name);
    for (uint32_t v : g.inputs) out += fmt::format("  input  {}\n", g.type(v).str());
    for (uint32_t v : g.outputs) out += fmt::format("  output {}\n", g.type(v).str());
  }
  int64_t total = 0, constants = 0, n_const = 0;
  std::string listed;
  for (size_t p = 0; p < g.params.size(); ++p) {
    const TensorType& t = g.type(g.params[p]);
    bool constant = m.info && p < m.info->parameters.size() && m.info->parameters[p].constant;
    std::string name =
        p < g.param_names.size() && !g.param_names[p].empty() ? g.param_names[p] : fmt::format("param {}", p);
    if (constant) {
      constants += bytes_of(t), ++n_const;
      continue;
    }
    total += bytes_of(t);
    listed += fmt::format("  {:<28} {:<20} {}\n", name, t.str(), bytes_text(bytes_of(t)));
  }
  out +=
      fmt::format("parameters: {}, {}\n{}", g.params.size() - static_cast<size_t>(n_const), bytes_text(total), listed);
  if (n_const) out += fmt::format("constants: {}, {}\n", n_const, bytes_text(constants));
  ir::DimSizes sizes = sizes_or_default(g, dims);
  std::vector<std::string> at;
  for (const auto& [n, s] : sizes) at.push_back(fmt::format("{}={}", n, s));
  ir::Graph fused = fused_graph(g, sizes);
  std::string groups;
  int kernels = 0, ops = 0;
  for (const ir::Node& n : fused.nodes) {
    if (n.kind == ir::NodeKind::Op) ++ops;
    if (n.kind != ir::NodeKind::Fused) continue;
    std::vector<std::string> results;
    for (uint32_t v : n.results) results.push_back(fused.type(v).str());
    groups += fmt::format("  kernel {}: {} -> {}\n", kernels++, jit::group_label(*n.body), fmt::join(results, ", "));
  }
  out += fmt::format("kernels it compiles{}: {} (and {} op{} on the eager kernels: matmul, conv, data movement)\n{}",
                     at.empty() ? "" : fmt::format(" (at {})", fmt::join(at, ", ")), kernels, ops, ops == 1 ? "" : "s",
                     groups);
  return out;
}

}  // namespace kiln::tools
