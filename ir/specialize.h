// ir/specialize.h -- from a graph with symbolic dims (`f32[B,784]`) to the concrete graph for
// one call: bind each symbol to a size from the arguments, then substitute.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::ir {

/// Sizes of symbolic dims, by name.
using DimSizes = std::map<std::string, int64_t, std::less<>>;

/// Binds the symbolic dims of g's first `types.size()` inputs to the sizes in `types`, and
/// checks everything else: the count, dtypes, ranks, static dims, and that a symbol used twice
/// gets one size (a multiple like B*128 must be that multiple of B). Errors name the input
/// (`names[i]` when given), the dim, what was expected and what was given; `what` opens them.
DimSizes bind_dims(const Graph& g, std::span<const TensorType> types, std::span<const std::string> names,
                   const std::string& what);

/// The size of symbolic dim `symbol` of g under `sizes` (a multiple from its base's size).
/// Throws when it has none.
int64_t dim_size(const Graph& g, int64_t symbol, const DimSizes& sizes);

/// g with every symbolic dim replaced by its size under `sizes`, in types and in the sizes
/// ops are given (reshape's shape): a concrete graph that fuses and compiles like a traced one.
/// Fused bodies are specialized too. The result keeps no dim names.
Graph specialize(const Graph& g, const DimSizes& sizes);

}  // namespace kiln::ir
