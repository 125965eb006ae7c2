// jit/plan.h -- what an Executable runs, decided once from its graph (jit/plan.cpp): how each
// fused group's kernel is called (its loop layout, sizes, strides and thread split), and the
// run plan (assigns, when values are dropped and outputs ready, in-place updates, the
// workspace). The Executable (jit/executable.cpp) only runs it.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "codegen/backend.h"
#include "ir/graph.h"

namespace kiln::jit {

/// How a fused node's kernel is called for operands of these shapes and strides: the loop
/// layout (its structure, the kernel cache's key), the sizes and strides it is passed, and how
/// the parallel dim's range splits across threads.
struct KernelArgs {
  codegen::KernelLayout layout;
  std::vector<int64_t> sizes, strides;
  int64_t range = 0, grain = 1;
  /// A group whose outputs are all reductions that nothing in it reads, with few kept indices
  /// to spread over threads: each call reduces one run of `run` entries of loop dim
  /// `split_dim` into a partial result, and the partials are combined in run order (so the
  /// bits do not depend on the thread count). split_dim -1: no split.
  int split_dim = -1;
  int64_t run = 0, runs = 0;
  std::vector<OpId> combine;  // per output: the reduction that combines its partials
};
KernelArgs kernel_args(const ir::Node& fused, std::span<const Dims> shapes, std::span<const Dims> strides);

/// The reductions producing each of `body`'s outputs, when every output is one and no node of
/// the body reads a reduction's result (such a group may reduce in parts, then combine the
/// partial results with these ops); else empty.
std::vector<OpId> terminal_reductions(const ir::Graph& body);

/// Per value of `g`, the value whose storage it shares: itself, or for a view the base it views.
std::vector<uint32_t> view_bases(const ir::Graph& g);

/// How a graph runs, decided once.
struct RunPlan {
  std::vector<std::pair<size_t, uint32_t>> assigns;  // (param index, value)
  std::vector<char> bound_output;                    // per output: an input or param itself
  std::vector<const ir::Node*> consts;               // the graph's constant nodes
  // Per node, the values nothing reads after it (and no output or assign keeps): a run drops
  // them there, so an eager op's result is freed after its last reader, not at the end.
  std::vector<std::vector<uint32_t>> drop_after;
  // Per node, the outputs it computes (each output once, at its first computing node); the
  // outputs that are bound, constants or views of them are ready only at the end.
  std::vector<std::vector<size_t>> ready_after;
  std::vector<char> ready_at_end;
  // Per value: the param a fused kernel may write it into directly (an optimizer's update,
  // assigned to the param it reads elementwise, which nothing reads after), or -1.
  std::vector<int> in_place;
  // Memory plan: byte offset in the CPU workspace per value, -1 when allocated on its own (a
  // device's values come from its caching allocator).
  std::vector<int64_t> offset;
  size_t workspace = 0;
  size_t kernels = 0, ops = 0;  // fused groups; op nodes
};
/// The run plan of `g` (verified; consts point into it); without `kernels` (fused groups run
/// their bodies op by op) no value is planned into the workspace or written in place.
RunPlan plan_run(const ir::Graph& g, bool kernels);

}  // namespace kiln::jit
