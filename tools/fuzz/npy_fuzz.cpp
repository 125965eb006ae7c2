// tools/fuzz/npy_fuzz.cpp -- libFuzzer target: the .npy reader on arbitrary bytes must either
// give a tensor that holds what the header promised or throw kiln::Error; never crash, read out
// of bounds or allocate past what the bytes could hold.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "runtime/api.h"
#include "runtime/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Tensor t;
  try {
    t = npy_from_bytes(bytes, "fuzz.npy");
  } catch (const Error&) {
    return 0;
  }
  if (static_cast<uint64_t>(t.numel() * dtype_size(t.dtype())) > size) {
    std::fprintf(stderr, "a %s from %zu bytes: more data than the file holds\n", t.type().str().c_str(), size);
    std::abort();
  }
  if (t.numel() > 0 && is_float(t.dtype())) (void)t.to(f64).sum().item<double>();  // every element readable
  return 0;
}
