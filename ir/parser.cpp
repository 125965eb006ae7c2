// ir/parser.cpp -- reads the text form written by printer.cpp, from ir/lexer.h's tokens.
// Hostile input is expected (the fuzz target feeds it garbage): every error is a kiln::Error
// "file:line:col: message".
#include <fmt/format.h>

#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>

#include "ir/graph.h"
#include "ir/lexer.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/registered_op.h"

namespace kiln::ir {
namespace {

using text::Lexer;
using text::Tok;
using text::Token;

// Whether a constant of dtype `d` holds `s` exactly: integer and bool constants take only
// integral literals in their range (casting inf or 1e30 to an integer is undefined).
bool fits(const Scalar& s, DType d) {
  if (is_float(d) || s.kind() == Scalar::Kind::Bool) return true;
  double lo = 0, hi = 1;  // bool: 0 and 1
  if (d == DType::U8) lo = 0, hi = 255;
  if (d == DType::I32) lo = INT32_MIN, hi = INT32_MAX;
  if (d == DType::I64) lo = -0x1p63, hi = 0x1p63;  // hi excluded below
  if (s.kind() == Scalar::Kind::Int) {
    int64_t v = s.to_int();
    return d == DType::I64 || (v >= static_cast<int64_t>(lo) && v <= static_cast<int64_t>(hi));
  }
  double v = s.to_double();
  return std::isfinite(v) && std::trunc(v) == v && v >= lo && (d == DType::I64 ? v < hi : v <= hi);
}

class Parser {
 public:
  Parser(std::string_view src, std::string_view file) : lex_(src, file) { advance(); }

  Graph graph() {
    expect_ident("graph");
    if (tok_.kind != Tok::Global) fail("expected the graph's name, like @main");
    g_.name = tok_.text;
    advance();
    expect("(");
    if (!is(")")) {
      do {
        g_.inputs.push_back(binding(nullptr));
      } while (accept(","));
    }
    expect(")");
    if (tok_.kind == Tok::Ident && tok_.text == "params") {
      advance();
      expect("(");
      if (!is(")")) {
        do {
          std::string label;
          g_.params.push_back(binding(&label));
          g_.param_names.push_back(label);
        } while (accept(","));
      }
      expect(")");
    }
    expect("->");
    expect("(");
    std::vector<TensorType> out_types;
    if (!is(")")) {
      do {
        out_types.push_back(type());
      } while (accept(","));
    }
    expect(")");
    expect("{");
    for (;;) {
      if (tok_.kind == Tok::End) fail("expected 'return' before the end of the input");
      if (is("}")) fail("expected 'return' before '}'");
      if (tok_.kind == Tok::Ident && tok_.text == "return") {
        ret_line_ = tok_.line;
        ret_col_ = tok_.col;
        advance();
        if (!is("}")) {
          do {
            g_.outputs.push_back(use());
          } while (accept(","));
        }
        break;
      }
      statement();
    }
    expect("}");
    if (tok_.kind != Tok::End) fail("unexpected text after the graph");
    if (out_types.size() != g_.outputs.size())
      fail_at(
          ret_line_, ret_col_,
          fmt::format("the signature declares {} results but return gives {}", out_types.size(), g_.outputs.size()));
    for (size_t i = 0; i < out_types.size(); ++i)
      if (!(out_types[i] == g_.type(g_.outputs[i])))
        fail_at(ret_line_, ret_col_,
                fmt::format("result {} is declared {} but returns {}", i, out_types[i].str(),
                            g_.type(g_.outputs[i]).str()));
    g_.dim_names = dim_names_;
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const { lex_.fail(tok_.line, tok_.col, msg); }
  [[noreturn]] void fail_at(int line, int col, const std::string& msg) const { lex_.fail(line, col, msg); }
  void advance() { tok_ = lex_.next(); }
  bool is(const char* p) const { return tok_.kind == Tok::Punct && tok_.text == p; }
  bool accept(const char* p) {
    if (!is(p)) return false;
    advance();
    return true;
  }
  void expect(const char* p) {
    if (!accept(p)) fail(fmt::format("expected '{}', found {}", p, describe()));
  }
  void expect_ident(const char* w) {
    if (tok_.kind != Tok::Ident || tok_.text != w) fail(fmt::format("expected '{}', found {}", w, describe()));
    advance();
  }
  std::string describe() const {
    switch (tok_.kind) {
      case Tok::End: return "the end of the input";
      case Tok::Value: return tok_.text[0] == '$' ? "'" + tok_.text + "'" : "'%" + tok_.text + "'";
      case Tok::Global: return "'@" + tok_.text + "'";
      case Tok::String: return "a string";
      default: return "'" + tok_.text + "'";
    }
  }

  // %name: type ["label"] -- defines a new value.
  uint32_t binding(std::string* label) {
    if (tok_.kind != Tok::Value) fail(fmt::format("expected a value like %0, found {}", describe()));
    Token name = tok_;
    advance();
    expect(":");
    uint32_t v = define(name, type());
    if (label && tok_.kind == Tok::String) {
      *label = tok_.text;
      advance();
    }
    return v;
  }

  uint32_t define(const Token& name, const TensorType& t) {
    if (values_.count(name.text)) fail_at(name.line, name.col, fmt::format("%{} is defined twice", name.text));
    uint32_t v = g_.add_value(t);
    values_[name.text] = v;
    return v;
  }

  uint32_t use() {
    if (tok_.kind != Tok::Value) fail(fmt::format("expected a value like %0, found {}", describe()));
    auto it = values_.find(tok_.text);
    if (it == values_.end())
      fail(fmt::format("use of undefined value {}{}", tok_.text[0] == '$' ? "" : "%", tok_.text));
    advance();
    return it->second;
  }

  int64_t integer() {
    if (tok_.kind != Tok::Int) fail(fmt::format("expected an integer, found {}", describe()));
    int64_t v = 0;
    auto [p, ec] = std::from_chars(tok_.text.data() + (tok_.text[0] == '+'), tok_.text.data() + tok_.text.size(), v);
    if (ec != std::errc() || p != tok_.text.data() + tok_.text.size())
      fail(fmt::format("integer {} is out of range", tok_.text));
    advance();
    return v;
  }

  // [d, d, ...] where a d is an integer or (in types) a symbol name.
  Dims dims(bool symbols) {
    expect("[");
    Dims d;
    if (!is("]")) {
      do {
        if (symbols && tok_.kind == Tok::Ident) {
          // A product of symbols and at most one number, last: `B*128`, `B*T`, `B*T*4`.
          std::string name = tok_.text;
          advance();
          while (accept("*")) {
            int line = tok_.line, col = tok_.col;
            if (tok_.kind == Tok::Ident) {
              name += "*" + tok_.text;
              advance();
              continue;
            }
            int64_t k = integer();
            if (k < 2 || k > (int64_t{1} << 31))
              fail_at(line, col, fmt::format("a dim {}*{} needs a factor from 2 to 2^31", name, k));
            name += "*" + std::to_string(k);
            if (is("*")) fail("the number of a product of dims comes last (B*T*4)");
            break;
          }
          name = dim_term_name(dim_term(name));  // one spelling: T*B is B*T
          d.push_back(symbol(name));
        } else {
          int line = tok_.line, col = tok_.col;
          int64_t v = integer();
          if (symbols && v < 0) fail_at(line, col, "a dimension cannot be negative");
          d.push_back(v);
        }
        if (d.size() > 64) fail("too many dimensions");
      } while (accept(","));
    }
    expect("]");
    return d;
  }

  // The symbolic dim `name`, interned for this parse only (one table for the graph and its
  // fused bodies, so a name means one dim throughout).
  int64_t symbol(const std::string& name) {
    for (size_t k = 0; k < dim_names_.size(); ++k)
      if (dim_names_[k] == name) return symbol_dim(k);
    if (dim_names_.size() >= Graph::kMaxDimNames)
      fail(fmt::format("more than {} symbolic dim names", Graph::kMaxDimNames));
    dim_names_.push_back(name);
    return symbol_dim(dim_names_.size() - 1);
  }

  TensorType type() {
    if (tok_.kind != Tok::Ident) fail(fmt::format("expected a type like f32[2,3], found {}", describe()));
    TensorType t;
    if (!parse_dtype(tok_.text, &t.dtype)) fail(fmt::format("unknown dtype '{}'", tok_.text));
    int line = tok_.line, col = tok_.col;
    advance();
    t.shape = dims(true);
    if (tok_.kind == Tok::Global) t.device = device();
    int64_t reach = 1;  // as check_shape() counts; a symbol counts as 1 here
    for (int64_t d : t.shape) {
      if (d > 0 && reach > INT64_MAX / 16 / d) fail_at(line, col, fmt::format("type {} is too large", t.str()));
      reach *= std::max<int64_t>(d, 1);
    }
    return t;
  }

  // A device as Device::str() writes it, `cpu` or `cuda:N` (after a type's '@', or in attrs).
  Device device() {
    std::string name = tok_.text;
    int line = tok_.line, col = tok_.col;
    advance();
    if (accept(":")) {
      if (tok_.kind != Tok::Int) fail(fmt::format("expected a device index, found {}", describe()));
      name += ":" + tok_.text;
      advance();
    }
    try {
      return parse_device(name);
    } catch (const Error& e) {
      fail_at(line, col, e.what());
    }
  }

  Scalar literal() {
    if (tok_.kind == Tok::Ident && (tok_.text == "true" || tok_.text == "false")) {
      bool b = tok_.text == "true";
      advance();
      return Scalar(b);
    }
    if (tok_.kind == Tok::Ident && (tok_.text == "inf" || tok_.text == "nan")) {
      double v = tok_.text == "inf" ? std::numeric_limits<double>::infinity() : std::nan("");
      advance();
      return Scalar(v);
    }
    if (tok_.kind == Tok::Int) return Scalar(integer());
    if (tok_.kind == Tok::Float) {
      double v;
      std::string_view mag = std::string_view(tok_.text).substr(tok_.text[0] == '-' || tok_.text[0] == '+');
      if (mag == "inf" || mag == "nan") {
        v = mag == "inf" ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
        if (tok_.text[0] == '-') v = -v;
      } else {
        const char* b = tok_.text.data() + (tok_.text[0] == '+');
        auto [p, ec] = std::from_chars(b, tok_.text.data() + tok_.text.size(), v);
        if (ec != std::errc() || p != tok_.text.data() + tok_.text.size())
          fail(fmt::format("bad number {}", tok_.text));
      }
      advance();
      return Scalar(v);
    }
    fail(fmt::format("expected a number, found {}", describe()));
  }

  bool boolean() {
    Scalar s = literal();
    if (s.kind() != Scalar::Kind::Bool) fail("expected true or false");
    return s.to<bool>();
  }

  // `name =` of an attribute: the name, and the line and column it stands at.
  struct AttrKey {
    std::string name;
    int line, col;
  };
  AttrKey attribute_key() {
    if (tok_.kind != Tok::Ident) fail(fmt::format("expected an attribute name, found {}", describe()));
    AttrKey k{tok_.text, tok_.line, tok_.col};
    advance();
    expect("=");
    return k;
  }

  // Reads `{name=value, ...}`: each name one of runtime/attrs.def's, read as its kind says.
  void attrs(Node& n) {
    if (n.op == OpId::Registered) return registered_attrs(n);
    uint64_t mask = op_def(n.op).attrs;
    uint64_t seen = 0;
    if (!accept("{")) {
      if (mask) fail(fmt::format("{} needs attributes {{...}}", op_name(n.op, n.attrs)));
      return;
    }
    do {
      auto [key, kl, kc] = attribute_key();
      const AttrSchema* s = find_attr(key);
      if (!s) fail_at(kl, kc, fmt::format("unknown attribute '{}'", key));
      if (!(mask & s->field)) fail_at(kl, kc, fmt::format("{} takes no attribute '{}'", op_name(n.op, n.attrs), key));
      if (seen & s->field) fail_at(kl, kc, fmt::format("attribute '{}' given twice", key));
      visit_attr(n.attrs, std::countr_zero(static_cast<uint64_t>(s->field)), [&](auto& v) { attr_value(v, s->kind); });
      seen |= s->field;
    } while (accept(","));
    expect("}");
    if ((seen | kOptionalAttrs) != (mask | kOptionalAttrs)) {
      std::vector<std::string_view> missing;
      for (int i = 0; i < kNumAttrs; ++i)
        if ((mask & ~seen & ~kOptionalAttrs) & attr_schema(i).field) missing.push_back(attr_schema(i).name);
      fail(fmt::format("{} is missing attributes {}", op_name(n.op, n.attrs), fmt::join(missing, ", ")));
    }
  }

  // A registered op's `{name=value, ...}`, read by its schema; attributes left out take their
  // defaults.
  void registered_attrs(Node& n) {
    auto call = std::make_shared<RegisteredCall>(*n.attrs.registered);
    const OpSchema& schema = call->op->schema();
    std::vector<std::optional<OpValue>> given(schema.args.size());
    if (accept("{")) {
      do {
        auto [key, kl, kc] = attribute_key();
        size_t k = 0;
        while (k < schema.args.size() && !(schema.args[k].name == key && schema.args[k].type != OpArgType::Tensor)) ++k;
        if (k == schema.args.size())
          fail_at(kl, kc,
                  fmt::format("{} takes no attribute '{}' ({})", call->op->name(), key, call->op->schema_text()));
        if (given[k]) fail_at(kl, kc, fmt::format("attribute '{}' given twice", key));
        try {
          given[k] = registered_value(schema.args[k].type);
        } catch (const Error& e) {
          throw Error(fmt::format("{} (attribute '{}' of {} is {})", e.what(), key, call->op->name(),
                                  op_arg_type_name(schema.args[k].type)));
        }
      } while (accept(","));
      expect("}");
    }
    for (size_t k = 0; k < schema.args.size(); ++k) {
      const OpSchemaArg& a = schema.args[k];
      if (a.type == OpArgType::Tensor) continue;
      if (!given[k] && !a.default_value)
        fail(fmt::format("{} is missing attribute '{}', which has no default", call->op->name(), a.name));
      call->values.push_back(given[k] ? *given[k] : *a.default_value);
    }
    n.attrs.registered = std::move(call);
  }

  OpValue registered_value(OpArgType type) {
    auto list = [&](auto item) {
      expect("[");
      std::vector<decltype(item())> out;
      if (!is("]")) {
        do {
          if (out.size() >= kMaxOpListValues) fail(fmt::format("more than {} values", kMaxOpListValues));
          out.push_back(item());
        } while (accept(","));
      }
      expect("]");
      return out;
    };
    auto number = [&] {
      Scalar v = literal();
      if (v.kind() == Scalar::Kind::Bool) fail("expected a number, found a bool");
      return v.to_double();
    };
    switch (type) {
      case OpArgType::Int: return integer();
      case OpArgType::Float: return number();
      case OpArgType::Bool: return boolean();
      case OpArgType::Ints: return list([&] { return integer(); });
      case OpArgType::Floats: return list(number);
      case OpArgType::Str: {
        if (tok_.kind != Tok::String) fail(fmt::format("expected a quoted string, found {}", describe()));
        std::string v = tok_.text;
        advance();
        return v;
      }
      case OpArgType::DType: {
        DType d;
        if (tok_.kind != Tok::Ident || !parse_dtype(tok_.text, &d))
          fail(fmt::format("expected a dtype, found {}", describe()));
        advance();
        return d;
      }
      case OpArgType::Tensor: break;
    }
    fail("a Tensor is no attribute");
  }

  template <class T> void attr_value(T& v, AttrKind kind) {
    if constexpr (std::is_same_v<T, Dims>) {
      v = dims(kind == AttrKind::Sizes);  // sizes: symbols too
    } else if constexpr (std::is_same_v<T, bool>) {
      v = boolean();
    } else if constexpr (std::is_same_v<T, int64_t>) {
      v = integer();
    } else if constexpr (std::is_same_v<T, Scalar>) {
      v = literal();
    } else if constexpr (std::is_same_v<T, DType>) {
      if (tok_.kind != Tok::Ident || !parse_dtype(tok_.text, &v))
        fail(fmt::format("expected a dtype, found {}", describe()));
      advance();
    } else if constexpr (std::is_same_v<T, Device>) {
      if (tok_.kind != Tok::Ident) fail(fmt::format("expected a device, found {}", describe()));
      v = device();
    } else if constexpr (std::is_same_v<T, Combine>) {
      if (tok_.kind != Tok::Ident || !parse_combine(tok_.text, &v))
        fail(fmt::format("expected sum, prod, max or min, found {}", describe()));
      advance();
    } else {
      static_assert(!sizeof(T), "an attribute type the IR cannot read: add it here and to the printer");
    }
  }

  // Integers stay exact (no round trip through double).
  static Tensor constant_tensor(const std::vector<Scalar>& vals, const TensorType& t) {
    Tensor c = empty(t.shape, t.dtype);
    visit_dtype(t.dtype, [&](auto v) {
      using T = decltype(v);
      T* p = static_cast<T*>(c.data_ptr());
      for (size_t i = 0; i < vals.size(); ++i) {
        if constexpr (kIsHalf<T>) p[i] = T(vals[i].to<float>());
        else p[i] = vals[i].to<T>();
      }
    });
    return c;
  }

  void statement() {
    Node n;
    if (tok_.kind == Tok::Ident && tok_.text == "assign") {
      if (in_body_) fail("a fused group cannot assign");
      advance();
      n.kind = NodeKind::Assign;
      n.inputs.push_back(use());
      expect(",");
      n.inputs.push_back(use());
      location(n);
      g_.nodes.push_back(std::move(n));
      return;
    }
    if (tok_.kind != Tok::Value) fail(fmt::format("expected a statement, found {}", describe()));
    Token name = tok_;
    advance();
    std::vector<Token> more;  // only a fused group defines several values
    while (accept(",")) {
      if (tok_.kind != Tok::Value) fail(fmt::format("expected a value name, found {}", describe()));
      more.push_back(tok_);
      advance();
    }
    expect("=");
    if (tok_.kind != Tok::Ident) fail(fmt::format("expected an op name, found {}", describe()));
    std::string op = tok_.text;
    int ol = tok_.line, oc = tok_.col;
    advance();
    if (op == "fused") {
      more.insert(more.begin(), name);
      fused(std::move(n), more, ol, oc);
      return;
    }
    if (!more.empty()) fail_at(ol, oc, fmt::format("{} defines one value, not {}", op, more.size() + 1));
    if (op == "const") {
      n.kind = NodeKind::Const;
      int cl = tok_.line, cc = tok_.col;
      std::vector<Scalar> vals;  // the values come before the type that shapes them
      bool bracket = accept("[");
      if (!bracket) {
        vals.push_back(literal());
      } else if (!is("]")) {
        do {
          vals.push_back(literal());
          if (vals.size() > (1u << 26)) fail("constant is too large");
        } while (accept(","));
      }
      if (bracket) expect("]");
      expect(":");
      TensorType t = type();
      if (static_cast<int64_t>(vals.size()) != check_shape(t.shape, "const"))
        fail_at(
            cl, cc,
            fmt::format("constant has {} values but its type {} holds {}", vals.size(), t.str(), t.shape.product()));
      for (int64_t d : t.shape)
        if (is_symbol(d)) fail_at(cl, cc, "a constant cannot have a symbolic shape");
      for (const Scalar& v : vals)
        if (!fits(v, t.dtype))
          fail_at(cl, cc, fmt::format("constant value {} does not fit {}", v.to_double(), dtype_name(t.dtype)));
      n.constant = constant_tensor(vals, t);
      n.result = define(name, t);
      location(n);
      g_.nodes.push_back(std::move(n));
      return;
    }
    bool found = false;
    if (op.find("::") != std::string::npos) {
      const RegisteredOp* r = find_registered_op(op);
      if (!r)
        fail_at(ol, oc,
                fmt::format("unknown op '{}': no op of that name is registered in this program (the library "
                            "that registers it must be loaded first: kiln-ir --load lib.so)",
                            op));
      n.op = OpId::Registered;
      auto call = std::make_shared<RegisteredCall>();
      call->op = r;
      n.attrs.registered = std::move(call);
      found = true;
    }
    for (int i = 0; i < kNumOps; ++i)
      if (op == op_name(static_cast<OpId>(i)) && static_cast<OpId>(i) != OpId::Registered)
        n.op = static_cast<OpId>(i), found = true;
    if (!found) fail_at(ol, oc, fmt::format("unknown op '{}'", op));
    bool pointwise = op_family(n.op) == OpFamily::Pointwise;
    int slot = 0;
    if (!is("{") && !is(":")) {
      do {
        if (tok_.kind == Tok::Value) {
          n.inputs.push_back(use());
        } else if (pointwise && slot < 3) {
          n.attrs.imm_mask |= static_cast<uint8_t>(1u << slot);
          n.attrs.imm[slot] = literal();
        } else {
          fail(fmt::format("expected an operand like %0, found {}", describe()));
        }
        ++slot;
        if (slot > 4096) fail("too many operands");
      } while (accept(","));
    }
    int arity = op_arity(n.op);
    if (arity >= 0 && slot != arity) fail_at(ol, oc, fmt::format("{} takes {} operands, got {}", op, arity, slot));
    attrs(n);
    expect(":");
    TensorType t = type();
    n.result = define(name, t);
    if (pointwise) n.attrs.dtype = pointwise_compute_dtype(g_, n);
    location(n);
    g_.nodes.push_back(std::move(n));
  }

  // %r, %s = fused %a, %b : type, type { <body> yield %v, %w }: the body is a graph of its own
  // scope, whose inputs ($0, $1, ...) take the operands' types; one result per yielded value.
  void fused(Node n, const std::vector<Token>& names, int line, int col) {
    if (in_body_) fail_at(line, col, "fused groups do not nest");
    n.kind = NodeKind::Fused;
    if (!is(":")) {
      do {
        n.inputs.push_back(use());
      } while (accept(","));
    }
    expect(":");
    std::vector<TensorType> types;
    int tl = tok_.line, tc = tok_.col;
    do {
      types.push_back(type());
    } while (accept(","));
    if (types.size() != names.size())
      fail_at(tl, tc, fmt::format("fused defines {} values but lists {} types", names.size(), types.size()));
    location(n);
    expect("{");
    Graph outer = std::move(g_);
    std::map<std::string, uint32_t> outer_values = std::move(values_);
    g_ = Graph();
    g_.name = outer.name + ".fused";
    values_.clear();
    in_body_ = true;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      uint32_t v = g_.add_value(outer.type(n.inputs[k]));
      g_.inputs.push_back(v);
      values_["$" + std::to_string(k)] = v;
    }
    while (!(tok_.kind == Tok::Ident && tok_.text == "yield")) {
      if (tok_.kind == Tok::End) fail("expected 'yield' before the end of the input");
      statement();
    }
    int yl = tok_.line, yc = tok_.col;
    advance();
    do {
      g_.outputs.push_back(use());
    } while (accept(","));
    if (g_.outputs.size() != names.size())
      fail_at(yl, yc, fmt::format("fused defines {} values but yields {}", names.size(), g_.outputs.size()));
    expect("}");
    g_.dim_names = dim_names_;
    n.body = std::make_shared<Graph>(std::move(g_));
    g_ = std::move(outer);
    values_ = std::move(outer_values);
    in_body_ = false;
    for (size_t k = 0; k < names.size(); ++k) n.results.push_back(define(names[k], types[k]));
    n.result = n.results[0];
    g_.nodes.push_back(std::move(n));
  }

  void location(Node& n) {
    if (!(tok_.kind == Tok::Ident && tok_.text == "loc")) return;
    advance();
    expect("(");
    if (tok_.kind != Tok::String) fail("expected a file name string in loc(...)");
    n.loc.file = tok_.text;
    advance();
    expect(":");
    int64_t line = integer();
    if (line < 0 || line > INT32_MAX) fail("line number out of range");
    n.loc.line = static_cast<int>(line);
    expect(")");
  }

  Lexer lex_;
  Token tok_;
  Graph g_;
  std::vector<std::string> dim_names_;
  DimNamesScope names_in_messages_{&dim_names_};
  std::map<std::string, uint32_t> values_;
  bool in_body_ = false;  // parsing a fused group's body
  int ret_line_ = 0, ret_col_ = 0;
};

}  // namespace

Graph parse(std::string_view text, std::string_view filename) {
  Parser p(text, filename);
  return p.graph();
}

}  // namespace kiln::ir
