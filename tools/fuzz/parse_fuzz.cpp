// tools/fuzz/parse_fuzz.cpp -- libFuzzer target: ir::parse on arbitrary bytes must either
// succeed or throw kiln::Error, and whatever parses must print and parse back to the same text.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ir/graph.h"
#include "runtime/error.h"
#include "tools/fuzz/fuzz_ops.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ir::Graph g;
  try {
    g = ir::parse(text, "fuzz.ir");
  } catch (const Error&) {
    return 0;  // a clean parse error: what hostile input should get
  }
  std::string printed = ir::print(g);
  std::string again;
  try {
    again = ir::print(ir::parse(printed, "printed.ir"));
  } catch (const Error& e) {
    std::fprintf(stderr, "printed text does not parse: %s\n%s", e.what(), printed.c_str());
    std::abort();
  }
  if (again != printed) {
    std::fprintf(stderr, "print/parse is not a fixed point:\n%s\n---\n%s", printed.c_str(), again.c_str());
    std::abort();
  }
  return 0;
}
