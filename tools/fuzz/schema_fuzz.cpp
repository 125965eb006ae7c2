// tools/fuzz/schema_fuzz.cpp -- libFuzzer target: parse_op_schema on arbitrary bytes (schemas
// come from users and from saved modules) must either succeed or throw kiln::Error, and what
// parses must write a spelling that parses back to itself.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/error.h"
#include "runtime/op_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  OpSchema s;
  try {
    s = parse_op_schema(text);
  } catch (const Error&) {
    return 0;
  }
  std::string written = s.str();
  try {
    if (parse_op_schema(written).str() == written) return 0;
    std::fprintf(stderr, "the spelling is not a fixed point: %s\n", written.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "the written schema does not parse: %s\n%s\n", e.what(), written.c_str());
  }
  std::abort();
}
