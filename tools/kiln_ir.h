// tools/kiln_ir.h -- the pieces of the kiln-ir tool: loading a file, Graphviz output, running.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "jit/save.h"
#include "runtime/tensor.h"

namespace kiln::tools {

/// What kiln-ir read from a file: a graph and, when the file stores them, its parameters.
struct Module {
  ir::Graph graph;
  std::vector<Tensor> params;  // one per graph.params, or empty when the file holds no data
  std::string format;          // the format it was read as: "ir" (text) or "module" (jit::save)
  // A saved module's: its metadata, and its tensors section (a whole safetensors file).
  std::optional<jit::ModuleInfo> info;
  std::string tensors;
  /// The argument names --input name=file.npy refers to (a module's; "" for IR text).
  std::vector<std::string> input_names;
};

/// Reads `path` ("-": standard input), recognizing its format from the contents: a saved
/// module (jit::save; loaded, so checked whole) or IR text.
Module load_module(const std::string& path);
/// Writes `text` to `path` ("-": standard output); throws kiln::Error naming the path.
void write_text(const std::string& path, std::string_view text);

/// The graph in Graphviz dot: one node per op (with its attributes), edges labelled with the
/// type of the value they carry; inputs, params, constants and outputs have their own shapes.
std::string to_dot(const ir::Graph& g);

/// What kiln-ir codegen prints.
struct CodegenOptions {
  std::string target = "cpu";     // "cpu": LLVM IR for this CPU; "cuda": CUDA C (or PTX)
  std::string arch = "sm_80";     // cuda: the architecture PTX is made for
  bool ptx = false;               // cuda: NVRTC's PTX instead of the CUDA C (needs no GPU)
  std::vector<std::string> dims;  // NAME=SIZE for symbolic dims, default 64
};
/// The source of each fused group's kernel (after the jit's passes and fusion when the graph
/// has no groups yet, symbolic dims sized by `options.dims`), with contiguous operands.
std::string codegen_module(const Module& m, const CodegenOptions& options = {});
/// parse_dims, with every symbolic dim not given sized 64.
std::map<std::string, int64_t, std::less<>> sizes_or_default(const ir::Graph& g, const std::vector<std::string>& dims);

/// What kiln-ir cost prints.
struct CostOptions {
  std::string device = "H200";    // whose peaks bound each kernel (jit::device_peak)
  std::vector<std::string> dims;  // NAME=SIZE for symbolic dims, default 64
  size_t top = 20;                // kernels listed, by bound
  bool tf32 = false;              // f32 GEMMs and convolutions on the tensor cores as TF32
};
/// The cost of one run of the graph as the jit compiles it (jit/cost.h): bytes, FLOPs and
/// launches per kernel, and the roofline bound on `options.device`.
std::string cost_module(const Module& m, const CostOptions& options = {});

/// kiln-ir inspect: a saved module's metadata (format and kiln versions, signature with its
/// dynamic dims, each parameter's name, type and bytes, the total) and the kernels it would
/// compile, each with the group it came from; `dims` sizes the dynamic dims for that ("B=64";
/// default 64 each). IR text gets the same from its graph.
std::string inspect_module(const Module& m, const std::vector<std::string>& dims);

/// The graph as the jit compiles it: symbolic dims sized by `sizes` (ir::specialize), then the
/// jit's passes and fusion (unless it is fused already).
ir::Graph fused_graph(const ir::Graph& g, const std::map<std::string, int64_t, std::less<>>& sizes);
/// Parses NAME=SIZE options ("B=64") into sizes, checking that each names a dim of `g`.
std::map<std::string, int64_t, std::less<>> parse_dims(const ir::Graph& g, const std::vector<std::string>& dims);

struct RunOptions {
  /// .npy files, one per graph input in order, or name=file.npy for a module's named inputs
  /// (or none: random).
  std::vector<std::string> inputs;
  std::vector<std::string> dims;  // NAME=SIZE for symbolic dims no input binds
  uint64_t seed = 0;
  int64_t repeat = 1;
  std::string save_dir;  // when set, writes out<i>.npy there
  bool fuse = false;     // run the jit's passes and fusion first
};
/// Binds the inputs (files or random) and params (stored or random), runs the graph as the jit
/// does (fused groups as compiled kernels, other ops on the eager kernels) `repeat` times and
/// prints each output's type, a summary and the time per call.
void run_module(const Module& m, const RunOptions& options);

}  // namespace kiln::tools
