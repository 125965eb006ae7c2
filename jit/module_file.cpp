// jit/module_file.cpp -- reading and framing the sections of a saved module.
#include "jit/module_file.h"

#include <fmt/format.h>

#include "runtime/check.h"

namespace kiln::jit {
namespace {

constexpr std::string_view kTags[] = {"META", "IR  ", "TENS"};
constexpr std::string_view kWhat[] = {"metadata", "IR", "tensors"};

uint64_t read_le(std::string_view b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<size_t>(i)]);
  return v;
}

std::string le(uint64_t v, int bytes) {
  std::string s(static_cast<size_t>(bytes), '\0');
  for (int i = 0; i < bytes; ++i) s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  return s;
}

// A tag as text, its unprintable bytes as \xNN.
std::string printable(std::string_view tag) {
  std::string s;
  for (char c : tag) {
    auto u = static_cast<unsigned char>(c);
    s += u >= 32 && u < 127 && c != '"' && c != '\\' ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }
  return s;
}

}  // namespace

bool is_module_file(std::string_view bytes) { return bytes.substr(0, kModuleMagic.size()) == kModuleMagic; }

ModuleSections split_module(std::string_view bytes, const std::string& name) {
  KILN_CHECK(is_module_file(bytes), "jit::load: {}: not a saved kiln module (it does not start with \"KILNMOD\")",
             name);
  KILN_CHECK(bytes.size() >= 12, "jit::load: {}: truncated: {} bytes, too short for the header", name, bytes.size());
  ModuleSections s;
  s.version = static_cast<uint32_t>(read_le(bytes, 8, 4));
  KILN_CHECK(s.version >= 1 && s.version <= kModuleFormat,
             "jit::load: {}: written by format {}; this kiln reads 1..{}{}", name, s.version, kModuleFormat,
             s.version > kModuleFormat ? " (a newer kiln wrote it)" : "");
  std::string_view* out[] = {&s.meta, &s.ir, &s.tensors};
  size_t at = 12;
  for (size_t k = 0; k < 3; ++k) {
    KILN_CHECK(bytes.size() - at >= 12, "jit::load: {}: truncated before the {} section (at byte {} of {})", name,
               kWhat[k], at, bytes.size());
    std::string_view tag = bytes.substr(at, 4);
    KILN_CHECK(tag == kTags[k], "jit::load: {}: expected the {} section (\"{}\") at byte {}, found \"{}\"", name,
               kWhat[k], kTags[k], at, printable(tag));
    uint64_t n = read_le(bytes, at + 4, 8);
    at += 12;
    KILN_CHECK(n <= bytes.size() - at, "jit::load: {}: the {} section claims {} bytes but {} remain", name, kWhat[k], n,
               bytes.size() - at);
    *out[k] = bytes.substr(at, static_cast<size_t>(n));
    at += static_cast<size_t>(n);
  }
  KILN_CHECK(at == bytes.size(), "jit::load: {}: {} bytes after the last section", name, bytes.size() - at);
  return s;
}

std::vector<std::string> module_frames(uint64_t meta, uint64_t ir, uint64_t tensors) {
  std::string head(kModuleMagic);
  head += le(kModuleFormat, 4);
  return {head + std::string(kTags[0]) + le(meta, 8), std::string(kTags[1]) + le(ir, 8),
          std::string(kTags[2]) + le(tensors, 8)};
}

}  // namespace kiln::jit
