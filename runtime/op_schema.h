// runtime/op_schema.h -- a registered op's signature, written as TORCH_LIBRARY writes one:
//
//   mylib::rotary(Tensor x, Tensor cos, Tensor sin, bool interleaved=False) -> Tensor
//
// Arguments are Tensors (the op's operands, in order) or attributes of the types below, which
// may have defaults. The op returns one Tensor: an IR node defines one value. The text comes
// from users and from saved modules, so the parser checks every character and length.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/dtype.h"

namespace kiln {

/// The most values an int[] or float[] attribute holds in a call (and so in the IR).
inline constexpr size_t kMaxOpListValues = 4096;

/// An argument's type, as the schema spells it: Tensor, int, float, bool, int[], float[], str,
/// ScalarType.
enum class OpArgType : uint8_t { Tensor, Int, Float, Bool, Ints, Floats, Str, DType };
std::string_view op_arg_type_name(OpArgType t);

/// An attribute's value (every type but Tensor), in the order of OpArgType.
using OpValue = std::variant<int64_t, double, bool, std::vector<int64_t>, std::vector<double>, std::string, DType>;
/// The type a value holds.
OpArgType op_value_type(const OpValue& v);
/// How the schema writes a default: 3, 0.5, True, [1, 2], "text", f32.
std::string op_value_text(const OpValue& v);

struct OpSchemaArg {
  std::string name;
  OpArgType type = OpArgType::Tensor;
  std::optional<OpValue> default_value;  // attributes only
};

struct OpSchema {
  std::string ns, op;  // "mylib", "rotary"
  std::vector<OpSchemaArg> args;
  /// "mylib::rotary".
  std::string qualified_name() const { return ns + "::" + op; }
  /// The one spelling of the schema: parse(text).str() is the same for equal schemas however
  /// they were spaced, so saved modules compare schemas by text.
  std::string str() const;
  /// The tensor arguments (operands), and the attributes, counted.
  size_t num_tensors() const;
  /// The argument named `name`, or nullptr.
  const OpSchemaArg* find(std::string_view name) const;
};

/// Parses a schema; throws kiln::Error "register_op: bad schema '<text>': <what> at column N".
OpSchema parse_op_schema(std::string_view text);
/// Whether `name` is a qualified op name a schema may have: ns::name, each an identifier.
bool is_registered_op_name(std::string_view name);

}  // namespace kiln
