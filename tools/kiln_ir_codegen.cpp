// tools/kiln_ir_codegen.cpp -- kiln-ir codegen: the source of each fused group's kernel: LLVM IR
// for this CPU, or CUDA C (PTX with --ptx, through NVRTC: no GPU needed).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>

#include "codegen/cuda/emit.h"
#include "codegen/cuda/nvrtc.h"
#include "ir/passes.h"
#include "jit/executable.h"
#include "jit/kernels.h"
#include "runtime/check.h"
#include "tools/kiln_ir.h"

namespace kiln::tools {

namespace {

// "sm_90", "compute_90" or "90" as 90.
int arch_number(const std::string& arch) {
  std::string digits = arch;
  for (const char* prefix : {"sm_", "compute_"})
    if (digits.rfind(prefix, 0) == 0) digits = digits.substr(std::string(prefix).size());
  int v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  KILN_CHECK(ec == std::errc() && end == digits.data() + digits.size() && v >= 50 && v < 1000,
             "codegen: --arch '{}' is not an architecture like sm_90", arch);
  return v;
}

}  // namespace

std::string codegen_module(const Module& m, const CodegenOptions& o) {
  KILN_CHECK(o.target == "cpu" || o.target == "cuda", "codegen: target '{}' is not built in (known: cpu, cuda)",
             o.target);
  KILN_CHECK(!o.ptx || o.target == "cuda", "codegen: --ptx is for --target=cuda");
  bool cuda = o.target == "cuda";
  int arch = cuda ? arch_number(o.arch) : 0;
  const char* comment = cuda ? "//" : ";";
  // An unfused graph gets the jit's passes and fusion first, its symbolic dims sized as given
  // (default 64): the kernels depend only on which sizes are 1.
  ir::Graph g = fused_graph(m.graph, sizes_or_default(m.graph, o.dims));
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
    std::string symbol, src;
    if (cuda) {
      src = jit::named_cuda_source(codegen::emit_cuda(*n.body, args.layout, "kiln_kernel"), &symbol);
      if (o.ptx) src = codegen::cuda::compile_ptx(src, arch, symbol);
    } else {
      src = jit::kernel_source(*n.body, args.layout, &symbol);
    }
    std::vector<std::string> results;
    for (uint32_t v : n.results) results.push_back(g.type(v).str());
    out += fmt::format("{} ---- group {}: {} -> {} ({} ops)\n{}\n", comment, groups++, symbol,
                       fmt::join(results, ", "), n.body->nodes.size(), src);
  }
  if (groups == 0) out = fmt::format("{} no fused groups: every op runs on the eager kernels\n", comment);
  return out;
}

}  // namespace kiln::tools
