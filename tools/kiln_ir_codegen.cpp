// tools/kiln_ir_codegen.cpp -- kiln-ir codegen: the source of each fused group's kernel: LLVM IR
// for this CPU, or CUDA C (PTX with --ptx, through NVRTC: no GPU needed).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>

#include "codegen/cuda/emit.h"
#include "cuda/group.h"
#include "cuda/kernel_cache.h"
#include "cuda/nvrtc.h"
#include "ir/passes.h"
#include "jit/executable.h"
#include "jit/kernel_cache.h"
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

constexpr int kLaunchSms = 132;

std::string describe_launch(const codegen::CudaLaunch& l) {
  if (l.cols == 1 && l.parts == 1 && l.rows_by == codegen::CudaRows::Block && l.chunk == 1)
    return fmt::format("{} elements, {} blocks of {} threads", l.rows, l.blocks, codegen::kCudaBlock);
  return fmt::format("{} rows x {} columns, a {} per row, {} part{}, {} blocks of {} threads", l.rows, l.cols,
                     l.rows_by == codegen::CudaRows::Block ? "block" : "thread", l.parts, l.parts == 1 ? "" : "s",
                     l.blocks, codegen::kCudaBlock);
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
    std::string launches;
    if (cuda) {
      // The launch a GPU of kLaunchSms multiprocessors (an H100's, an H200's) gets.
      std::vector<codegen::CudaLaunch> plan = cuda::plan_group_launches(n, kLaunchSms);
      for (size_t k = 0; k < plan.size(); ++k)
        launches += fmt::format("// launch on {} multiprocessors{}: {}\n", kLaunchSms,
                                plan.size() > 1 ? fmt::format(", stage {} of {}", k + 1, plan.size()) : "",
                                describe_launch(plan[k]));
      // Every kernel the group runs, as the jit makes them (a last block that combines the
      // parts' results included).
      std::vector<std::string> kernels = cuda::group_kernel_sources(n, kLaunchSms);
      for (size_t k = 0; k < kernels.size(); ++k) {
        std::string name, text = cuda::named_source(kernels[k], &name);
        if (o.ptx) text = cuda::compile_ptx(text, arch, name);
        if (k > 0) src += fmt::format("{} ---- kernel {} of {}\n", comment, k + 1, kernels.size());
        src += text;
        symbol += (symbol.empty() ? "" : "+") + name;
      }
    } else {
      src = jit::kernel_source(*n.body, args.layout, &symbol);
    }
    std::vector<std::string> results;
    for (uint32_t v : n.results) results.push_back(g.type(v).str());
    out += fmt::format("{} ---- group {}: {} -> {} ({} ops)\n{}{}\n", comment, groups++, symbol,
                       fmt::join(results, ", "), n.body->nodes.size(), launches, src);
  }
  if (groups == 0) out = fmt::format("{} no fused groups: every op runs on the eager kernels\n", comment);
  return out;
}

}  // namespace kiln::tools
