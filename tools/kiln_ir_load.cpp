// tools/kiln_ir_load.cpp -- kiln-ir's file reading: format detection, saved modules, IR text,
// output files.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>

#include "jit/module_file.h"
#include "runtime/check.h"
#include "runtime/safetensors.h"
#include "tools/kiln_ir.h"

namespace kiln::tools {
namespace {

std::string read_file(const std::string& path) {
  if (path == "-") {
    std::ostringstream s;
    s << std::cin.rdbuf();
    return s.str();
  }
  std::error_code ec;
  KILN_CHECK(!std::filesystem::is_directory(path, ec), "cannot read '{}': it is a directory", path);
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot read '{}': {}", path, std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  KILN_CHECK(!f.bad(), "cannot read '{}': read failed", path);
  return text;
}

Module load_ir_text(std::string_view bytes, const std::string& path) {
  Module m;
  m.graph = ir::parse(bytes, path == "-" ? "<stdin>" : path);
  m.format = "ir";
  return m;
}

// A saved module: loaded (so checked whole, as jit::load checks it), then its graph and
// tensors in the graph's order.
Module load_saved(std::string_view bytes, const std::string& path) {
  std::string name = path == "-" ? "<stdin>" : path;
  jit::LoadedFunction f = jit::load_bytes(bytes, name);
  Module m;
  m.graph = f.graph();
  m.format = "module";
  m.info = f.info();
  m.tensors = std::string(jit::split_module(bytes, name).tensors);
  std::map<std::string, Tensor> tensors = safetensors_from_bytes(m.tensors, name);
  for (const std::string& p : m.graph.param_names) m.params.push_back(tensors.at(p));
  for (const jit::ValueInfo& v : m.info->inputs) m.input_names.push_back(v.name);
  return m;
}

// One entry per file format, tried in order; the first whose `sniff` accepts the bytes reads
// them. IR text is the fallback, so it comes last.
struct Format {
  const char* name;
  bool (*sniff)(std::string_view bytes);
  Module (*load)(std::string_view bytes, const std::string& path);
};
constexpr Format kFormats[] = {
    {"module", jit::is_module_file, load_saved},
    {"ir", [](std::string_view) { return true; }, load_ir_text},
};

}  // namespace

Module load_module(const std::string& path) {
  std::string bytes = read_file(path);
  for (const Format& f : kFormats)
    if (f.sniff(bytes)) return f.load(bytes, path);
  throw Error(fmt::format("{}: not a file kiln-ir can read", path));
}

void write_text(const std::string& path, std::string_view text) {
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return;
  }
  std::ofstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot write '{}': {}", path, std::strerror(errno));
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  f.close();
  KILN_CHECK(!f.fail(), "cannot write '{}': write failed", path);
}

}  // namespace kiln::tools
