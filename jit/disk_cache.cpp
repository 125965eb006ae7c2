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
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "runtime/error.h"
#include "runtime/files.h"
#include "runtime/log.h"

namespace kiln::jit {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'O', 'B', 'J', '1'};
constexpr size_t kHeader = 32;
constexpr int64_t kMaxEntry = int64_t{256} << 20;  // kernels are kilobytes; anything near this is not ours

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

// The cache is usable only in a private folder (ours, not writable by others, not a symlink):
// it holds machine code kiln runs. Checked on every read and write (one lstat; both are rare:
// once per kernel a process loads or compiles), so a folder swapped for a symlink meanwhile is
// caught too; a refusal is said once per folder. A missing folder is a plain miss for a read.
bool dir_usable(const std::string& dir, bool create) {
  struct stat st;
  if (!create && ::lstat(dir.c_str(), &st) != 0) return false;
  std::string problem = create ? files::ensure_private_dir(dir) : files::private_dir_problem(dir);
  if (problem.empty()) return true;
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (warned.insert(dir).second)
    warn(fmt::format("disk cache disabled: {}: {}. Use a folder of your own (KILN_CACHE_DIR), or KILN_CACHE_DIR=off",
                     dir, problem));
  return false;
}

constexpr auto kStaleTemp = std::chrono::hours(1);  // a writer that died mid-write left it
constexpr int kWritesPerScan = 64;

// Scans the folder: removes stale temporary files, then the least recently used entries until
// it is under 90% of the cap. Returns the bytes of entries left.
uint64_t scan_and_evict(const fs::path& dir) {
  struct Entry {
    fs::path path;
    uint64_t size;
    fs::file_time_type used;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  auto now = fs::file_time_type::clock::now();
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    if (!f.is_regular_file(ec) || f.is_symlink(ec)) continue;
    std::string name = f.path().filename().string();
    if (name.rfind(".tmp-", 0) == 0) {
      if (now - f.last_write_time(ec) > kStaleTemp && fs::remove(f.path(), ec))
        log(LogTopic::Cache, fmt::format("disk cache: removed stale {}", name));
      continue;
    }
    if (f.path().extension() != ".kobj") continue;
    Entry e{f.path(), static_cast<uint64_t>(f.file_size(ec)), f.last_write_time(ec)};
    total += e.size;
    entries.push_back(std::move(e));
  }
  uint64_t cap = cap_bytes();
  if (total <= cap) return total;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& e : entries) {
    if (total <= cap / 10 * 9) break;
    if (fs::remove(e.path, ec)) {
      total -= e.size;
      log(LogTopic::Cache, fmt::format("disk cache: evicted {} ({} bytes)", e.path.filename().string(), e.size));
    }
  }
  return total;
}

// Eviction without a directory scan per write: the first write of a process scans, later ones
// add their size to an estimate and scan again when it passes the cap or every 64 writes
// (other processes write too).
void maybe_evict(const fs::path& dir, uint64_t written) {
  static std::mutex mu;
  static std::map<std::string, std::pair<uint64_t, int>> estimate;  // dir -> (bytes, writes since scan)
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = estimate.try_emplace(dir.string(), 0, 0);
  auto& [bytes, writes] = it->second;
  bytes += written;
  if (!fresh && bytes <= cap_bytes() && ++writes < kWritesPerScan) return;
  bytes = scan_and_evict(dir);
  writes = 0;
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

std::optional<std::string> disk_cache_decode(std::string_view bytes, const std::string& identity, std::string* why) {
  auto reject = [&](const char* reason) -> std::optional<std::string> {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (bytes.size() < kHeader || std::memcmp(bytes.data(), kMagic, 8) != 0) return reject("not a kiln cache entry");
  uint64_t id_len = read_u64(bytes.data() + 8), obj_len = read_u64(bytes.data() + 16);
  uint64_t sum = read_u64(bytes.data() + 24);
  uint64_t body = bytes.size() - kHeader;  // each length checked alone first: their sum may wrap
  if (id_len > body || obj_len > body || id_len + obj_len != body) return reject("truncated or padded");
  std::string_view id = bytes.substr(kHeader, id_len);
  if (id != identity) return reject("written for another kernel (hash collision)");
  std::string object(bytes.substr(kHeader + id_len));
  if (checksum(identity, object) != sum) return reject("checksum mismatch");
  return object;
}

std::optional<std::string> disk_cache_get(const std::string& identity) {
  std::string path = disk_cache_path(identity);
  if (path.empty() || !dir_usable(fs::path(path).parent_path().string(), /*create=*/false)) return std::nullopt;
  auto reject = [&](const std::string& why) -> std::optional<std::string> {
    log(LogTopic::Cache, fmt::format("disk cache: ignoring {}: {}", path, why));
    return std::nullopt;
  };
  std::string bytes;
  try {
    if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT)
      return std::nullopt;  // the usual miss: the caller says it
    bytes = files::read_bounded(path, kMaxEntry, "disk cache", /*no_follow=*/true);
  } catch (const Error& e) {
    return reject(e.what());
  }
  std::string why;
  std::optional<std::string> object = disk_cache_decode(bytes, identity, &why);
  if (!object) return reject(why);
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);  // recently used: evicted last
  return object;
}

void disk_cache_put(const std::string& identity, const std::string& object) {
  std::string path = disk_cache_path(identity);
  if (path.empty()) return;
  fs::path dir = fs::path(path).parent_path();
  if (!dir_usable(dir.string(), /*create=*/true)) return;
  std::string bytes(kMagic, 8);
  auto put = [&](uint64_t v) { bytes.append(reinterpret_cast<const char*>(&v), 8); };
  put(identity.size());
  put(object.size());
  put(checksum(identity, object));
  bytes += identity;
  bytes += object;
  std::string tmp;
  try {
    tmp = files::write_new(dir.string(), ".tmp-", "", bytes, "disk cache");
  } catch (const Error& e) {
    log(LogTopic::Cache, e.what());  // best effort: a full or read-only disk costs a recompile
    return;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return;
  }
  maybe_evict(dir, bytes.size());
}

}  // namespace kiln::jit
