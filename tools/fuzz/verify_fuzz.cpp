// tools/fuzz/verify_fuzz.cpp -- libFuzzer target: parse, then verify (kiln::Error or pass),
// then the jit's default pipeline on every graph that verifies: a pass must not fail there.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "ir/graph.h"
#include "ir/passes.h"
#include "runtime/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ir::Graph g;
  try {
    g = ir::parse(text, "fuzz.ir");
    ir::verify(g);
  } catch (const Error&) {
    return 0;
  }
  static const std::vector<std::string> pipeline = ir::default_pipeline();
  try {
    ir::Graph out = ir::run_passes(std::move(g), pipeline);
    ir::verify(out);
  } catch (const Error& e) {
    std::fprintf(stderr, "the default pipeline failed on a verified graph: %s\n", e.what());
    std::abort();
  }
  return 0;
}
