// tools/fuzz/verify_fuzz.cpp -- libFuzzer target: parse, then verify (kiln::Error or pass),
// then the jit's default pipeline and fusion on every graph that verifies, and the LLVM IR of
// every group fusion formed: none of these may fail on a verified graph.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "ir/graph.h"
#include "ir/passes.h"
#include "jit/executable.h"
#include "jit/kernel_cache.h"
#include "runtime/error.h"
#include "tools/fuzz/fuzz_ops.h"

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
    ir::Graph fused = ir::fuse(out);
    ir::verify(fused);
    for (const ir::Node& n : fused.nodes) {
      if (n.kind != ir::NodeKind::Fused) continue;
      std::vector<Dims> shapes, strides;
      for (uint32_t v : n.inputs) {
        shapes.push_back(fused.type(v).shape);
        strides.push_back(contiguous_strides(fused.type(v).shape));
      }
      jit::kernel_source(*n.body, jit::kernel_args(n, shapes, strides).layout);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "the pipeline, fusion or codegen failed on a verified graph: %s\n", e.what());
    std::abort();
  }
  return 0;
}
