// tools/fuzz/disk_cache_fuzz.cpp -- libFuzzer target: a hostile file in the kernel cache folder
// is rejected, never loaded. The bytes are decoded directly and also read back through the
// cache itself (a private folder under $TMPDIR). An entry is only ever accepted when it is
// exactly the header, the identity asked for and the object, with a matching checksum.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "jit/disk_cache.h"
#include "runtime/files.h"

namespace {
const std::string kIdentity = "fuzz identity: kernel source, target, compiler, kiln version";

void check(const std::optional<std::string>& object, size_t size) {
  if (object && object->size() + 32 + kIdentity.size() != size) {
    std::fprintf(stderr, "accepted an entry whose object (%zu bytes) does not fill the file (%zu bytes)\n",
                 object->size(), size);
    std::abort();
  }
}
}  // namespace

std::string& cache_dir() {
  static std::string dir = kiln::files::user_temp_dir() + "/fuzz-disk-cache-" + std::to_string(::getpid());
  return dir;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("KILN_CACHE_DIR", cache_dir().c_str(), 1);
  std::atexit([] { std::filesystem::remove_all(cache_dir()); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  check(jit::disk_cache_decode(bytes, kIdentity), size);
  // The same bytes as a file in the cache folder, found through the cache's own reader.
  static bool ready = (jit::disk_cache_put(kIdentity, "seed object"), true);  // makes the private folder
  (void)ready;
  std::ofstream(jit::disk_cache_path(kIdentity), std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
  check(jit::disk_cache_get(kIdentity), size);
  return 0;
}
