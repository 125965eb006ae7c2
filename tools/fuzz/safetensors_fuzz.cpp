// tools/fuzz/safetensors_fuzz.cpp -- libFuzzer target: the safetensors reader on arbitrary bytes
// must either give tensors that fit in the file or throw kiln::Error; never crash, never build
// an unbounded JSON header, never allocate past what the bytes could hold.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "runtime/api.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::map<std::string, Tensor> tensors;
  try {
    tensors = safetensors_from_bytes(bytes, "fuzz.safetensors");
  } catch (const Error&) {
    return 0;
  }
  uint64_t total = 0;
  for (const auto& [name, t] : tensors) {
    total += static_cast<uint64_t>(t.numel() * dtype_size(t.dtype()));
    if (t.numel() > 0 && is_float(t.dtype())) (void)t.to(f64).sum().item<double>();
  }
  if (total > size) {
    std::fprintf(stderr, "%zu tensors of %llu bytes from a %zu-byte file\n", tensors.size(),
                 static_cast<unsigned long long>(total), size);
    std::abort();
  }
  return 0;
}
