// tools/kiln_ir.h -- the pieces of the kiln-ir tool: loading a file, Graphviz output, running.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "runtime/tensor.h"

namespace kiln::tools {

/// What kiln-ir read from a file: a graph and, when the file stores them, its parameters.
struct Module {
  ir::Graph graph;
  std::vector<Tensor> params;  // one per graph.params, or empty when the file holds no data
  std::string format;          // the format it was read as ("ir")
};

/// Reads `path` ("-": standard input), recognizing its format from the contents. IR text is
/// the only format yet; saved modules (jit::save) join as a second entry in kiln_ir_load.cpp.
Module load_module(const std::string& path);
/// Writes `text` to `path` ("-": standard output); throws kiln::Error naming the path.
void write_text(const std::string& path, std::string_view text);

/// The graph in Graphviz dot: one node per op (with its attributes), edges labelled with the
/// type of the value they carry; inputs, params, constants and outputs have their own shapes.
std::string to_dot(const ir::Graph& g);

/// LLVM IR of each fused group's kernel (after the jit's passes and fusion when the graph has no
/// groups yet), as compiled for this CPU with contiguous operands. `target`: "cpu".
std::string codegen_module(const Module& m, const std::string& target);

struct RunOptions {
  std::vector<std::string> inputs;  // .npy files, one per graph input, in order (or none)
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
