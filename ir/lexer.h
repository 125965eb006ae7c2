// ir/lexer.h -- the tokens of the IR's text form, for ir/parser.cpp alone. Hostile input is
// expected: an error is a kiln::Error "file:line:col: message".
#pragma once

#include <fmt/format.h>

#include <cctype>
#include <string>
#include <string_view>

#include "runtime/error.h"

namespace kiln::ir::text {

enum class Tok { End, Value, Global, Ident, Int, Float, String, Punct };

struct Token {
  Tok kind = Tok::End;
  std::string text;  // identifier / punctuation / string contents / number text / value name
  int line = 1, col = 1;
};

class Lexer {
 public:
  Lexer(std::string_view src, std::string_view file) : src_(src), file_(file) {}

  [[noreturn]] void fail(int line, int col, const std::string& msg) const {
    throw Error(fmt::format("{}:{}:{}: {}", file_, line, col, msg));
  }

  Token next() {
    skip_space();
    Token t;
    t.line = line_;
    t.col = col_;
    if (pos_ >= src_.size()) return t;
    char c = src_[pos_];
    if (c == '$') {  // an operand of a fused group's body: $0, $1, ...
      get();
      t.kind = Tok::Value;
      t.text = "$" + word();
      if (t.text.size() == 1) fail(t.line, t.col, "expected an operand number after '$'");
      return t;
    }
    if (c == '@' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '"') {  // @"a name with any bytes"
      get();
      t = string(t);
      t.kind = Tok::Global;
      if (t.text.empty()) fail(t.line, t.col, "expected a name after '@'");
      return t;
    }
    if (c == '%' || c == '@') {
      get();
      t.kind = c == '%' ? Tok::Value : Tok::Global;
      t.text = word();
      if (t.text.empty()) fail(t.line, t.col, fmt::format("expected a name after '{}'", c));
      return t;
    }
    if (c == '"') return string(t);
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        ((c == '-' || c == '+') && pos_ + 1 < src_.size() &&
         (std::isdigit(static_cast<unsigned char>(src_[pos_ + 1])) || src_.substr(pos_ + 1, 3) == "inf" ||
          src_.substr(pos_ + 1, 3) == "nan"))) {
      return number(t);
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      t.kind = Tok::Ident;
      t.text = word();
      // A registered op's name: mylib::rotary (a type's ':' is never followed by another).
      if (src_.substr(pos_, 2) == "::" && pos_ + 2 < src_.size() &&
          (std::isalpha(static_cast<unsigned char>(src_[pos_ + 2])) || src_[pos_ + 2] == '_')) {
        get(), get();
        t.text += "::" + word();
      }
      return t;
    }
    if (c == '-' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '>') {
      get(), get();
      t.kind = Tok::Punct;
      t.text = "->";
      return t;
    }
    if (std::string_view("()[]{},:=*").find(c) != std::string_view::npos) {
      t.kind = Tok::Punct;
      t.text = std::string(1, get());
      return t;
    }
    unsigned char u = static_cast<unsigned char>(c);  // bytes that don't print are shown as hex
    fail(t.line, t.col,
         std::isprint(u) ? fmt::format("unexpected character '{}'", c) : fmt::format("unexpected byte 0x{:02x}", u));
  }

 private:
  char get() {
    char c = src_[pos_++];
    if (c == '\n') ++line_, col_ = 1;
    else ++col_;
    return c;
  }
  void skip_space() {
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        get();
      } else if (c == '/' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '/') {  // comment
        while (pos_ < src_.size() && src_[pos_] != '\n') get();
      } else {
        break;
      }
    }
  }
  // A quoted string, the printer's escapes undone: \" \\ and \xNN (any byte).
  Token string(Token t) {
    get();  // the opening quote
    t.kind = Tok::String;
    auto hex = [&](char h) -> int {
      if (h >= '0' && h <= '9') return h - '0';
      if (h >= 'a' && h <= 'f') return h - 'a' + 10;
      if (h >= 'A' && h <= 'F') return h - 'A' + 10;
      return -1;
    };
    while (pos_ < src_.size() && src_[pos_] != '"') {
      if (src_[pos_] == '\n') fail(t.line, t.col, "unterminated string");
      if (src_[pos_] != '\\') {
        t.text += get();
        continue;
      }
      int line = line_, col = col_;
      get();
      char e = pos_ < src_.size() ? get() : '\0';
      if (e == '"' || e == '\\') {
        t.text += e;
      } else if (e == 'x' && pos_ + 1 < src_.size() && hex(src_[pos_]) >= 0 && hex(src_[pos_ + 1]) >= 0) {
        int hi = hex(get()), lo = hex(get());
        t.text += static_cast<char>(hi * 16 + lo);
      } else {
        fail(line, col, "unknown escape in a string (the text knows \\\", \\\\ and \\xNN)");
      }
    }
    if (pos_ >= src_.size()) fail(t.line, t.col, "unterminated string");
    get();
    return t;
  }
  std::string word() {
    std::string w;
    while (pos_ < src_.size() &&
           (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_' || src_[pos_] == '.')) {
      w += get();
    }
    return w;
  }
  Token number(Token t) {
    std::string s;
    if (src_[pos_] == '-' || src_[pos_] == '+') s += get();
    if (src_.substr(pos_, 3) == "inf" || src_.substr(pos_, 3) == "nan") {
      t.kind = Tok::Float;
      t.text = s + std::string(src_.substr(pos_, 3));
      get(), get(), get();
      return t;
    }
    bool is_float = false;
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        s += get();
      } else if (c == '.' || c == 'e' || c == 'E') {
        is_float = true;
        s += get();
        if ((c == 'e' || c == 'E') && pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) s += get();
      } else {
        break;
      }
    }
    t.kind = is_float ? Tok::Float : Tok::Int;
    t.text = s;
    return t;
  }

  std::string_view src_, file_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

}  // namespace kiln::ir::text
