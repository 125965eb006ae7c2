// tests/jit/disk_cache_test.cpp -- the on-disk kernel cache treats its files as untrusted: a
// damaged, truncated or foreign entry is never returned; writes are atomic, the directory is
// private, and the size cap evicts the least recently used entries.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "jit/disk_cache.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

class DiskCache : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln-disk-cache-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    saved_ = std::getenv("KILN_CACHE_DIR") ? std::getenv("KILN_CACHE_DIR") : "";
    ::setenv("KILN_CACHE_DIR", (dir_ / "nested" / "kiln").c_str(), 1);
  }
  void TearDown() override {
    if (saved_.empty()) ::unsetenv("KILN_CACHE_DIR");
    else ::setenv("KILN_CACHE_DIR", saved_.c_str(), 1);
    ::unsetenv("KILN_CACHE_MAX_MB");
    fs::remove_all(dir_);
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  static void write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  fs::path dir_;
  std::string saved_;
};

TEST_F(DiskCache, StoresAndFindsAnEntryInAPrivateDirectory) {
  EXPECT_FALSE(jit::disk_cache_get("kernel A").has_value());
  jit::disk_cache_put("kernel A", std::string("\x7f"
                                              "ELF object bytes\0\x01",
                                              20));
  auto got = jit::disk_cache_get("kernel A");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, std::string("\x7f"
                              "ELF object bytes\0\x01",
                              20));
  EXPECT_FALSE(jit::disk_cache_get("kernel B").has_value());
  struct stat st {};
  ASSERT_EQ(::stat(jit::disk_cache_dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const auto& f : fs::directory_iterator(jit::disk_cache_dir()))  // no temporary left behind
    EXPECT_EQ(f.path().extension(), ".kobj") << f.path();
}

TEST_F(DiskCache, DamagedEntriesAreIgnored) {
  const std::string id = "kernel C", object(4000, 'x');
  jit::disk_cache_put(id, object);
  std::string path = jit::disk_cache_path(id), good = read(path);
  ASSERT_FALSE(good.empty());
  for (size_t at : {size_t{0}, size_t{9}, size_t{17}, size_t{25}, size_t{40}, good.size() - 1}) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x5a);
    write(path, bad);
    EXPECT_FALSE(jit::disk_cache_get(id).has_value()) << "a byte flipped at " << at;
  }
  for (size_t len : {size_t{0}, size_t{7}, size_t{31}, size_t{33}, good.size() - 1}) {
    write(path, good.substr(0, len));
    EXPECT_FALSE(jit::disk_cache_get(id).has_value()) << "truncated to " << len;
  }
  write(path, good + "trailing");
  EXPECT_FALSE(jit::disk_cache_get(id).has_value()) << "padded";
  // An entry for another identity at this path (a hash collision) is not this kernel.
  jit::disk_cache_put("kernel D", object);
  write(path, read(jit::disk_cache_path("kernel D")));
  EXPECT_FALSE(jit::disk_cache_get(id).has_value());
  // Rewriting repairs it.
  jit::disk_cache_put(id, object);
  EXPECT_EQ(jit::disk_cache_get(id).value_or(""), object);
}

TEST_F(DiskCache, TheSizeCapEvictsTheLeastRecentlyUsed) {
  ::setenv("KILN_CACHE_MAX_MB", "1", 1);
  const std::string big(400 << 10, 'k');  // three of these pass the 1 MiB cap
  jit::disk_cache_put("first", big);
  jit::disk_cache_put("second", big);
  // Make "first" the oldest and "second" recently used.
  fs::last_write_time(jit::disk_cache_path("first"), fs::file_time_type::clock::now() - std::chrono::hours(2));
  fs::last_write_time(jit::disk_cache_path("second"), fs::file_time_type::clock::now() - std::chrono::hours(1));
  ASSERT_TRUE(jit::disk_cache_get("second").has_value());  // a read marks it used
  jit::disk_cache_put("third", big);
  EXPECT_FALSE(jit::disk_cache_get("first").has_value());
  EXPECT_TRUE(jit::disk_cache_get("second").has_value());
  EXPECT_TRUE(jit::disk_cache_get("third").has_value());
}

// The cache holds code kiln runs: a folder others can write, or a symlink, is refused (with a
// warning) rather than read from or written to.
TEST_F(DiskCache, AFolderOthersCanWriteIsNotUsed) {
  fs::path open = dir_ / "open";
  fs::create_directories(open);
  ::chmod(open.c_str(), 0777);
  ::setenv("KILN_CACHE_DIR", open.c_str(), 1);
  jit::disk_cache_put("kernel F", "bytes");
  EXPECT_TRUE(fs::is_empty(open)) << "wrote into a folder others can write";
  ::chmod(open.c_str(), 0700);
  jit::disk_cache_put("kernel F", "bytes");
  ASSERT_TRUE(jit::disk_cache_get("kernel F").has_value());
  ::chmod(open.c_str(), 0777);  // someone opened it up afterwards: its entries are not trusted
  EXPECT_FALSE(jit::disk_cache_get("kernel F").has_value());

  fs::path link = dir_ / "link";
  fs::create_directory_symlink(open, link);
  ::chmod(open.c_str(), 0700);
  ::setenv("KILN_CACHE_DIR", link.c_str(), 1);
  EXPECT_FALSE(jit::disk_cache_get("kernel F").has_value()) << "read through a symlinked folder";
}

TEST_F(DiskCache, AnEntryThatIsASymlinkIsIgnored) {
  jit::disk_cache_put("kernel G", "object");
  std::string path = jit::disk_cache_path("kernel G");
  fs::rename(path, dir_ / "elsewhere");
  fs::create_symlink(dir_ / "elsewhere", path);
  EXPECT_FALSE(jit::disk_cache_get("kernel G").has_value());
}

TEST_F(DiskCache, StaleTemporaryFilesAreCollected) {
  ::setenv("KILN_CACHE_DIR", (dir_ / "fresh").c_str(), 1);  // a folder this process has not written yet
  fs::create_directories(dir_ / "fresh");
  ::chmod((dir_ / "fresh").c_str(), 0700);
  write((dir_ / "fresh" / ".tmp-dead-writer").string(), "half an entry");
  write((dir_ / "fresh" / ".tmp-live-writer").string(), "being written");
  fs::last_write_time(dir_ / "fresh" / ".tmp-dead-writer", fs::file_time_type::clock::now() - std::chrono::hours(2));
  jit::disk_cache_put("kernel H", "object");  // a process's first write scans the folder
  EXPECT_FALSE(fs::exists(dir_ / "fresh" / ".tmp-dead-writer"));
  EXPECT_TRUE(fs::exists(dir_ / "fresh" / ".tmp-live-writer"));
}

// Threads writing and reading entries at once (the same identities and their own): a read
// finds nothing or the whole object, never a mix (writes go through a temporary file and a
// rename). TSan runs this (scripts/sanitize.sh).
TEST_F(DiskCache, ThreadsWritingAndReadingAtOnceSeeWholeEntries) {
  constexpr int kThreads = 6, kRounds = 40;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        std::string shared = "shared kernel " + std::to_string(r % 4);
        std::string own = "kernel of thread " + std::to_string(t) + " round " + std::to_string(r);
        std::string object = std::string(3000 + 100 * (r % 4), static_cast<char>('a' + r % 4));
        jit::disk_cache_put(shared, object);
        jit::disk_cache_put(own, own + " object");
        std::optional<std::string> got = jit::disk_cache_get(shared);
        if (got && *got != object) ++wrong;
        if (jit::disk_cache_get(own).value_or("") != own + " object") ++wrong;
      }
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  for (const auto& f : fs::directory_iterator(jit::disk_cache_dir()))  // no temporary left behind
    EXPECT_EQ(f.path().extension(), ".kobj") << f.path();
}

TEST(DiskCacheDecode, RejectsEveryMalformedEntry) {
  std::string why;
  EXPECT_FALSE(jit::disk_cache_decode("", "id", &why).has_value());
  EXPECT_EQ(why, "not a kiln cache entry");
  std::string header("KILNOBJ1", 8);
  auto u64 = [](uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); };
  // Lengths whose sum wraps around to the body's size must not pass.
  std::string wrap = header + u64(~uint64_t{0}) + u64(3) + u64(0) + "abcd";
  EXPECT_FALSE(jit::disk_cache_decode(wrap, "a", &why).has_value());
  EXPECT_EQ(why, "truncated or padded");
}

TEST_F(DiskCache, OffDisablesIt) {
  ::setenv("KILN_CACHE_DIR", "off", 1);
  EXPECT_EQ(jit::disk_cache_dir(), "");
  jit::disk_cache_put("kernel E", "bytes");
  EXPECT_FALSE(jit::disk_cache_get("kernel E").has_value());
}

}  // namespace
}  // namespace kiln
