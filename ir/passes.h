// ir/passes.h -- graph-to-graph passes and the flat pipeline that runs them.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::ir {

/// Spells attributes one way and drops work that changes no bit of a result (x * 1, neg(neg(x))).
Graph canonicalize(const Graph& g);
/// Recomputes every op node's result type from its op's shape rule.
Graph infer_shapes(const Graph& g);
/// Replaces ops whose operands are all constants by their value, computed by the eager kernels.
Graph fold(const Graph& g);
/// Merges nodes that apply the same op with the same attributes to the same values.
Graph cse(const Graph& g);
/// Drops nodes whose values reach no output and no assign.
Graph dce(const Graph& g);
/// Computes permute(matmul(a, b)) (last two dims swapped, the product read by nothing else) as
/// matmul(bT, aT), in the layout its reader wants. Changes rounding, not meaning: jit runs it
/// only on fused plans.
Graph transpose_matmul(const Graph& g);
/// On CUDA, matmul(a, b) + bias[n], then relu or gelu_tanh of it when that alone reads it, as
/// one addmm, addmm_relu or addmm_gelu_tanh node (cuBLASLt's epilogues). Within rounding, as
/// transpose_matmul: jit runs it only on fused plans. The CPU keeps its GEMM and a fused kernel.
Graph matmul_epilogue(const Graph& g);

struct FuseOptions {
  /// Nodes that must stay ops (jit keeps the ones it tapes for autograd out of kernels).
  std::function<bool(const Node&)> keep_out;
  /// The devices whose groups run as kernels (jit's code generators: the CPU and CUDA); work
  /// on any other device stays ops. Unset: every device.
  std::function<bool(Device)> has_kernels;
  /// The devices on which a small pointwise group that feeds larger groups is recomputed inside
  /// each of them rather than run as a kernel of its own (a launch saved is worth a few flops
  /// per element on a GPU, not on the CPU). Unset: CUDA devices.
  std::function<bool(Device)> recompute_small = [](Device d) { return d.is_cuda(); };
};
/// Forms fused groups of pointwise ops, casts, broadcasts and reductions (ir/fusion.h).
Graph fuse(const Graph& g);
Graph fuse(const Graph& g, const FuseOptions& options);

using PassFn = Graph (*)(const Graph&);
struct PassInfo {
  const char* name;
  PassFn fn;
  const char* description;
};
/// Every registered pass (ir/passes.def), in its order there.
std::span<const PassInfo> all_passes();
/// The pass named `name`; throws kiln::Error listing the known names otherwise.
const PassInfo& find_pass(std::string_view name);
/// What jit::Function runs on every traced graph.
std::vector<std::string> default_pipeline();
/// What it runs after them on a plan it fuses: the rewrites that hold within rounding only
/// (transpose-matmul, matmul-epilogue), then fuse.
std::vector<std::string> lowering_pipeline();

struct PipelineOptions {
  bool verify = true;  // verify after every pass
  /// The fuse pass's options (jit keeps taped nodes out and names the devices with kernels);
  /// a reproducer replays with the defaults.
  FuseOptions fuse;
  /// Called with the pass name and the graph after each pass (KILN_LOG=jit prints it).
  std::function<void(const std::string& pass, const Graph&)> after_pass;
};
/// Runs the named passes in order. When a pass or the verifier fails, the graph that went
/// into the failing pass is written to a reproducer file, and the kiln::Error names it and the
/// kiln-ir command that replays the failure.
Graph run_passes(Graph g, std::span<const std::string> names, const PipelineOptions& options = {});

}  // namespace kiln::ir
