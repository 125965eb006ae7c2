// jit/disk_cache.cpp -- the on-disk kernel cache (see disk_cache.h for the format's contract).
//
// File layout, little-endian:
//   "KILNOBJ1" | u64 identity bytes | u64 object bytes | u64 xxh64(identity, object) |
//   identity | object
#include "jit/disk_cache.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "runtime/log.h"

namespace kiln::jit {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'O', 'B', 'J', '1'};
constexpr size_t kHeader = 32;

uint64_t checksum(const std::string& identity, const std::string& object) {
  XXH64_state_t* s = XXH64_createState();
  XXH64_reset(s, 0);
  XXH64_update(s, identity.data(), identity.size());
  XXH64_update(s, object.data(), object.size());
  uint64_t h = XXH64_digest(s);
  XXH64_freeState(s);
  return h;
}

uint64_t read_u64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint64_t cap_bytes() {
  const char* e = std::getenv("KILN_CACHE_MAX_MB");
  uint64_t mb = 1024;
  if (e && *e) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(e, &end, 10);
    if (end && *end == '\0') mb = v;
  }
  return mb << 20;
}

// Creates the directory (and its parents) for this user only.
bool ensure_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return true;
  fs::path parent = dir.parent_path();
  if (!parent.empty() && parent != dir && !ensure_dir(parent)) return false;
  return ::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST;
}

// Removes the least recently used entries until the directory is under 90% of the cap.
void evict(const fs::path& dir) {
  struct Entry {
    fs::path path;
    uint64_t size;
    fs::file_time_type used;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    if (f.path().extension() != ".kobj" || !f.is_regular_file(ec)) continue;
    Entry e{f.path(), static_cast<uint64_t>(f.file_size(ec)), f.last_write_time(ec)};
    total += e.size;
    entries.push_back(std::move(e));
  }
  uint64_t cap = cap_bytes();
  if (total <= cap) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& e : entries) {
    if (total <= cap / 10 * 9) break;
    if (fs::remove(e.path, ec)) {
      total -= e.size;
      log(LogTopic::Cache, fmt::format("disk cache: evicted {} ({} bytes)", e.path.filename().string(), e.size));
    }
  }
}

}  // namespace

std::string disk_cache_dir() {
  const char* d = std::getenv("KILN_CACHE_DIR");
  if (d && *d) return std::string(d) == "off" ? "" : std::string(d);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "kiln").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "kiln").string();
  return "";
}

std::string disk_cache_path(const std::string& identity) {
  std::string dir = disk_cache_dir();
  if (dir.empty()) return "";
  XXH128_hash_t h = XXH3_128bits(identity.data(), identity.size());
  return (fs::path(dir) / fmt::format("{:016x}{:016x}.kobj", h.high64, h.low64)).string();
}

std::optional<std::string> disk_cache_get(const std::string& identity) {
  std::string path = disk_cache_path(identity);
  if (path.empty()) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto reject = [&](const char* why) -> std::optional<std::string> {
    log(LogTopic::Cache, fmt::format("disk cache: ignoring {}: {}", path, why));
    return std::nullopt;
  };
  if (bytes.size() < kHeader || std::memcmp(bytes.data(), kMagic, 8) != 0) return reject("not a kiln cache entry");
  uint64_t id_len = read_u64(bytes.data() + 8), obj_len = read_u64(bytes.data() + 16);
  uint64_t sum = read_u64(bytes.data() + 24);
  if (id_len > bytes.size() || obj_len > bytes.size() || kHeader + id_len + obj_len != bytes.size())
    return reject("truncated or padded");
  std::string id = bytes.substr(kHeader, id_len);
  std::string object = bytes.substr(kHeader + id_len);
  if (id != identity) return reject("written for another kernel (hash collision)");
  if (checksum(id, object) != sum) return reject("checksum mismatch");
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // recently used: evicted last
  return object;
}

void disk_cache_put(const std::string& identity, const std::string& object) {
  std::string path = disk_cache_path(identity);
  if (path.empty()) return;
  fs::path dir = fs::path(path).parent_path();
  if (!ensure_dir(dir)) {
    log(LogTopic::Cache, fmt::format("disk cache: cannot create {}", dir.string()));
    return;
  }
  std::string bytes(kMagic, 8);
  auto put = [&](uint64_t v) { bytes.append(reinterpret_cast<const char*>(&v), 8); };
  put(identity.size());
  put(object.size());
  put(checksum(identity, object));
  bytes += identity;
  bytes += object;
  std::random_device rd;
  fs::path tmp = dir / fmt::format(".tmp-{}-{:08x}", ::getpid(), rd());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  bool ok = done == bytes.size() && ::fsync(fd) == 0;
  ::close(fd);
  std::error_code ec;
  if (!ok || (fs::rename(tmp, path, ec), ec)) {
    fs::remove(tmp, ec);
    return;
  }
  evict(dir);
}

}  // namespace kiln::jit
