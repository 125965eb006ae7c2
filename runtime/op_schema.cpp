// runtime/op_schema.cpp -- reading and writing registered ops' schemas (runtime/op_schema.h).
#include "runtime/op_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <charconv>
#include <cmath>

#include "runtime/error.h"

namespace kiln {

namespace {

// Bounds on what a schema may hold: it is read from saved modules too.
constexpr size_t kMaxSchemaChars = 4096;
constexpr size_t kMaxArgs = 64;
constexpr size_t kMaxListItems = 64;

constexpr std::string_view kTypeNames[] = {"Tensor", "int", "float", "bool", "int[]", "float[]", "str", "ScalarType"};

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool is_identifier(std::string_view s) {
  if (s.empty() || !is_ident_start(s[0])) return false;
  for (char c : s)
    if (!is_ident_char(c)) return false;
  return true;
}

std::string float_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// A recursive-descent reader over the schema's text, failing with the column it stopped at.
class SchemaReader {
 public:
  explicit SchemaReader(std::string_view text) : text_(text) {}

  OpSchema read() {
    if (text_.size() > kMaxSchemaChars) fail(fmt::format("longer than {} characters", kMaxSchemaChars));
    OpSchema s;
    s.ns = identifier("a namespace (mylib::op)");
    expect("::");
    s.op = identifier("the op's name after '::'");
    expect("(");
    space();
    if (!accept(")")) {
      do {
        if (s.args.size() == kMaxArgs) fail(fmt::format("more than {} arguments", kMaxArgs));
        s.args.push_back(argument(s));
      } while (accept(","));
      expect(")");
    }
    expect("->");
    space();
    size_t ret = pos_;
    if (accept("(")) fail("returns one Tensor (an op of kiln's IR defines one value), not a tuple", ret);
    std::string type = identifier("the result's type");
    if (type != "Tensor") fail(fmt::format("returns one Tensor, not '{}'", type), ret);
    if (peek() == '(') fail("mutating and aliasing ops (Tensor(a!)) are not supported: return a new Tensor", pos_);
    space();
    if (pos_ != text_.size()) fail("unexpected text after the result type");
    if (s.num_tensors() == 0) fail("takes no Tensor: a registered op needs one, whose device it runs on", 0);
    // Its one spelling may be longer than the text read (spaces, 1e15 written out): bounded too.
    if (s.str().size() > kMaxSchemaChars) fail(fmt::format("longer than {} characters as written", kMaxSchemaChars), 0);
    return s;
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& what, size_t at = std::string::npos) const {
    size_t col = (at == std::string::npos ? pos_ : at) + 1;
    std::string shown(text_.substr(0, 200));
    throw Error(fmt::format("register_op: bad schema '{}{}': {} at column {}", shown, text_.size() > 200 ? "..." : "",
                            what, col));
  }
  void space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n')) ++pos_;
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool accept(std::string_view token) {
    space();
    if (text_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }
  void expect(std::string_view token) {
    if (!accept(token)) fail(fmt::format("expected '{}'", token));
  }
  std::string identifier(const char* what) {
    space();
    size_t start = pos_;
    if (!is_ident_start(peek())) fail(fmt::format("expected {}", what));
    while (is_ident_char(peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  OpSchemaArg argument(const OpSchema& s) {
    OpSchemaArg a;
    space();
    size_t type_at = pos_;
    std::string type = identifier("an argument's type");
    if (accept("[")) expect("]"), type += "[]";
    bool found = false;
    for (size_t t = 0; t < std::size(kTypeNames); ++t)
      if (kTypeNames[t] == type) a.type = static_cast<OpArgType>(t), found = true;
    if (peek() == '?' || peek() == '(')
      fail("optional and aliased arguments (Tensor?, Tensor(a!)) are not supported", pos_);
    if (!found)
      fail(fmt::format("unknown type '{}' (expected {})", type,
                       fmt::join(std::begin(kTypeNames), std::end(kTypeNames), ", ")),
           type_at);
    space();
    size_t name_at = pos_;
    a.name = identifier("the argument's name");
    if (s.find(a.name)) fail(fmt::format("argument '{}' named twice", a.name), name_at);
    if (accept("=")) {
      space();
      if (a.type == OpArgType::Tensor) fail("a Tensor argument takes no default");
      a.default_value = value(a.type);
    } else {
      for (const OpSchemaArg& b : s.args)
        if (b.default_value) fail(fmt::format("'{}' has no default but follows one that has", a.name), name_at);
    }
    return a;
  }

  OpValue value(OpArgType type) {
    size_t at = pos_;
    switch (type) {
      case OpArgType::Int: return integer();
      case OpArgType::Float: return number();
      case OpArgType::Bool: {
        std::string w = identifier("True or False");
        if (w != "True" && w != "False") fail(fmt::format("expected True or False, found '{}'", w), at);
        return w == "True";
      }
      case OpArgType::Ints: return list<int64_t>([&] { return integer(); });
      case OpArgType::Floats: return list<double>([&] { return number(); });
      case OpArgType::Str: {
        char q = peek();
        if (q != '"' && q != '\'') fail("expected a quoted string");
        size_t start = ++pos_;
        while (pos_ < text_.size() && text_[pos_] != q) {
          unsigned char c = static_cast<unsigned char>(text_[pos_]);
          if (c < 0x20 || c >= 0x7f || c == '\\' || c == '"' || c == '\'')
            fail("a string default holds printable characters only, no quotes or backslashes");
          ++pos_;
        }
        if (pos_ == text_.size()) fail("unterminated string", start - 1);
        return std::string(text_.substr(start, pos_++ - start));
      }
      case OpArgType::DType: {
        std::string w = identifier("a dtype (f32, i64, ...)");
        DType d;
        if (!parse_dtype(w, &d)) fail(fmt::format("unknown dtype '{}'", w), at);
        return d;
      }
      case OpArgType::Tensor: break;
    }
    fail("a Tensor argument takes no default");
  }

  std::string_view number_text() {
    space();
    size_t start = pos_;
    if (peek() == '-' || peek() == '+') ++pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.' ||
                                   ((text_[pos_] == '-' || text_[pos_] == '+') && (text_[pos_ - 1] == 'e'))))
      ++pos_;
    if (pos_ == start) fail("expected a number");
    return text_.substr(start, pos_ - start);
  }
  int64_t integer() {
    size_t at = pos_;
    std::string_view t = number_text();
    if (t[0] == '+') t.remove_prefix(1);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || p != t.data() + t.size()) fail(fmt::format("expected an integer, found '{}'", t), at);
    return v;
  }
  double number() {
    size_t at = pos_;
    std::string_view t = number_text();
    if (t[0] == '+') t.remove_prefix(1);
    if (t == "inf" || t == "-inf" || t == "nan") return t == "nan" ? NAN : t[0] == '-' ? -INFINITY : INFINITY;
    double v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || p != t.data() + t.size() || !std::isfinite(v))
      fail(fmt::format("expected a number, found '{}'", t), at);
    return v;
  }
  template <class T, class F> std::vector<T> list(F item) {
    expect("[");
    std::vector<T> out;
    if (accept("]")) return out;
    do {
      if (out.size() == kMaxListItems) fail(fmt::format("a list of more than {} values", kMaxListItems));
      out.push_back(item());
    } while (accept(","));
    expect("]");
    return out;
  }
};

}  // namespace

std::string_view op_arg_type_name(OpArgType t) { return kTypeNames[static_cast<size_t>(t)]; }

OpArgType op_value_type(const OpValue& v) { return static_cast<OpArgType>(v.index() + 1); }

std::string op_value_text(const OpValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) return x ? "True" : "False";
        else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(x);
        else if constexpr (std::is_same_v<T, double>) return float_text(x);
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return fmt::format("[{}]", fmt::join(x, ", "));
        else if constexpr (std::is_same_v<T, std::vector<double>>) {
          std::vector<std::string> parts;
          for (double d : x) parts.push_back(float_text(d));
          return fmt::format("[{}]", fmt::join(parts, ", "));
        } else if constexpr (std::is_same_v<T, std::string>) return "\"" + x + "\"";
        else return std::string(dtype_name(x));
      },
      v);
}

std::string OpSchema::str() const {
  std::vector<std::string> parts;
  for (const OpSchemaArg& a : args)
    parts.push_back(fmt::format("{} {}{}", op_arg_type_name(a.type), a.name,
                                a.default_value ? "=" + op_value_text(*a.default_value) : ""));
  return fmt::format("{}({}) -> Tensor", qualified_name(), fmt::join(parts, ", "));
}

size_t OpSchema::num_tensors() const {
  size_t n = 0;
  for (const OpSchemaArg& a : args) n += a.type == OpArgType::Tensor;
  return n;
}

const OpSchemaArg* OpSchema::find(std::string_view name) const {
  for (const OpSchemaArg& a : args)
    if (a.name == name) return &a;
  return nullptr;
}

OpSchema parse_op_schema(std::string_view text) { return SchemaReader(text).read(); }

bool is_registered_op_name(std::string_view name) {
  size_t sep = name.find("::");
  return sep != std::string_view::npos && is_identifier(name.substr(0, sep)) && is_identifier(name.substr(sep + 2));
}

}  // namespace kiln
