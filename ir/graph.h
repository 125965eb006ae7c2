// ir/graph.h -- the IR: one straight-line SSA graph per traced function.
//
// Semantics, stated once: every node defines at most one tensor value; nodes are in
// topological order (a value is defined before it is used); an op node applies a runtime op
// (runtime/ops.def) with the same meaning, attributes and shape rule as in eager mode:
// pointwise ops broadcast NumPy-style, their inputs share the compute dtype (casts are explicit
// nodes), and numbers appear as immediate operands. Floats are IEEE, no fast-math.
// A type is dtype + shape (+ device): `f32[64,784]`, `f32[B,784]` with a symbolic dim.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/op.h"

namespace kiln::ir {

inline constexpr uint32_t kNoValue = UINT32_MAX;

/// Where in the user's C++ a traced op was called. A tracer captures the return address
/// (module + offset) cheaply; file and line are filled in when someone asks to print them.
struct SourceLoc {
  std::string file;
  int line = 0;
  std::string module;    // unresolved: the executable or library holding the call
  uintptr_t offset = 0;  // and the call's offset in it
  bool known() const { return !file.empty(); }
};

enum class NodeKind : uint8_t {
  Op,      // %r = <op> operands {attrs} : type
  Const,   // %r = const [values] : type
  Assign,  // assign %param, %value: writes value into a parameter when the graph runs
  Fused,   // %r, %s = fused operands : types { body; yield %v, %w }: a group that runs as one
           // kernel and defines one value per yielded value
};

struct Graph;

struct Node {
  NodeKind kind = NodeKind::Op;
  OpId op{};
  Attrs attrs;
  std::vector<uint32_t> inputs;   // tensor operands (Assign: the parameter, then the value)
  uint32_t result = kNoValue;     // the value it defines (Op, Const; Fused: its first)
  std::vector<uint32_t> results;  // Fused: every value it defines, in yield order
  Tensor constant;                // Const: the data (contiguous, on the CPU)
  /// Fused: the group's own graph. Its inputs are the node's operands (printed $0, $1, ...),
  /// its outputs are the node's results; it holds only op and const nodes (no nesting).
  std::shared_ptr<const Graph> body;
  SourceLoc loc;
  bool grad = true;  // recorded with grad mode on: eager replay tapes it (not part of the text)
};

/// The values a node defines: none (Assign), one (Op, Const) or one per output (Fused).
inline std::span<const uint32_t> defined_values(const Node& n) {
  if (n.kind == NodeKind::Fused) return n.results;
  if (n.result == kNoValue) return {};
  return {&n.result, 1};
}

/// A function: arguments and captured parameters in, nodes, outputs out. Values are dense ids
/// into `types`; the printer renumbers them, so printed text is stable.
struct Graph {
  std::string name = "main";
  std::vector<TensorType> types;         // type of each value id
  std::vector<uint32_t> inputs;          // arguments, bound at each call
  std::vector<uint32_t> params;          // tensors the function captured (live state)
  std::vector<std::string> param_names;  // one per param; "" when unnamed
  std::vector<Node> nodes;               // topological order
  std::vector<uint32_t> outputs;
  /// Names of the symbolic dims its types use: symbol_dim(k) is named dim_names[k].
  std::vector<std::string> dim_names;

  uint32_t add_value(const TensorType& t) {
    types.push_back(t);
    return static_cast<uint32_t>(types.size() - 1);
  }
  const TensorType& type(uint32_t v) const { return types.at(v); }
  /// The symbolic dim named `name` in this graph, added if new (at most kMaxDimNames).
  int64_t dim(std::string_view name);
  static constexpr size_t kMaxDimNames = 4096;
};

/// What a symbolic dim's name says it is: a product of sizes of their own times a number. `B`
/// is a size of its own; `B*128` is 128 times B; `B*T` is B times T (the tokens of a batch of
/// sequences, flattened); `B*T*4` is 4 times that, and `T*T` is T squared. One product has one
/// name: its names sorted, the number (2 or more) last, which is how Graph::dim and the parser
/// spell it whatever order it is written in.
struct DimTerm {
  std::vector<std::string_view> symbols;  // sorted; a name repeats for a power
  int64_t factor = 1;
  /// A size of its own, not a product.
  bool alone() const { return symbols.size() == 1 && factor == 1; }
};
/// `name` read as a product. A name that is no product (`x*1`, `2*B`) is one size of its own.
DimTerm dim_term(std::string_view name);
/// The one spelling of a product: names sorted, joined by `*`, the factor last when it is 2 or
/// more.
std::string dim_term_name(const DimTerm& term);

struct PrintOptions {
  bool locations = true;  // print loc("file":line) on nodes that have one
};

/// The text form; parse(print(g)) == g, and equal graphs print equal text.
std::string print(const Graph& g, const PrintOptions& options = {});
std::ostream& operator<<(std::ostream& os, const Graph& g);
/// Parses the text form; errors read "file:line:col: message".
Graph parse(std::string_view text, std::string_view filename = "<input>");
/// Checks SSA order, arity, attributes and that every node's type is what its op's shape rule
/// gives; throws kiln::Error "verify: @name: node K (%3 = add ...): <what> [line N of the
/// printed graph]".
void verify(const Graph& g);

/// The text of one node as print() writes it, with raw value ids (for error messages).
std::string print_node(const Graph& g, const Node& n);
/// What an op node computes, as text: op, operands (raw ids, immediates) and attributes.
/// Two op nodes with equal keys compute the same value.
std::string node_key(const Graph& g, const Node& n);

/// The compute dtype of a pointwise node (its attrs.dtype), derived from its operands' types:
/// the first tensor operand's (where's condition aside); with numbers only, the numbers'
/// common dtype for comparisons and logical ops, else the result dtype.
DType pointwise_compute_dtype(const Graph& g, const Node& n);

}  // namespace kiln::ir
