// tools/fuzz/module_fuzz.cpp -- libFuzzer target: jit::load_bytes on arbitrary bytes must either
// give a function whose parameters fit in the file or throw kiln::Error; never crash, never
// allocate past what the bytes could hold. (It does not call the function: a call compiles.)
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "ir/graph.h"
#include "jit/save.h"
#include "runtime/error.h"
#include "tools/fuzz/fuzz_ops.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    jit::LoadedFunction f = jit::load_bytes(bytes, "fuzz.kiln");
    uint64_t total = 0;
    for (const jit::ParameterInfo& p : f.info().parameters)
      total += static_cast<uint64_t>(p.type.shape.product() * dtype_size(p.type.dtype));
    if (total > size) {
      std::fprintf(stderr, "parameters of %llu bytes from a %zu-byte file\n", static_cast<unsigned long long>(total),
                   size);
      std::abort();
    }
    (void)ir::print(f.graph());
  } catch (const Error&) {
  }
  return 0;
}
