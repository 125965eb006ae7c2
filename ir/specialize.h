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
/// gets one size (a product like B*128 or B*T must be that product). A name may be bound by a
/// product alone once its other names are (T from a B*T dim and a B dim). Errors name the input
/// (`names[i]` when given), the dim, what was expected and what was given; `what` opens them.
DimSizes bind_dims(const Graph& g, std::span<const TensorType> types, std::span<const std::string> names,
                   const std::string& what);

/// What one dim of size n says of a product's names, given the sizes bound so far: it fits,
/// it binds the one name left unbound (the rest divided out), it waits (two names unbound),
/// or it cannot be that product.
enum class TermBinding { Fits, Bound, Pending, Conflict };
TermBinding bind_term(const DimTerm& term, int64_t n, DimSizes& sizes);

/// The size of symbolic dim `symbol` of g under `sizes` (a product of its names' sizes).
/// Throws when it has none.
int64_t dim_size(const Graph& g, int64_t symbol, const DimSizes& sizes);

/// g with every symbolic dim replaced by its size under `sizes`, in types and in the sizes
/// ops are given (reshape's shape): a concrete graph that fuses and compiles like a traced one.
/// Fused bodies are specialized too. The result keeps no dim names.
Graph specialize(const Graph& g, const DimSizes& sizes);

}  // namespace kiln::ir
