// tests/unit/files_test.cpp -- the shared file and process handling (runtime/files.h): bounded
// reads that refuse symlinks where asked, atomic replacement, O_EXCL creation, private folders
// checked before they are trusted, and programs run without a shell.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/files.h"
#include "test_util.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

class Files : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) / ("kiln-files-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ::chmod(dir_.c_str(), 0700);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }
  static std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  size_t entries() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }
  fs::path dir_;
};

TEST_F(Files, ReadBoundedReadsWholeFilesWithinTheirBound) {
  write(dir_ / "a", "hello");
  EXPECT_EQ(files::read_bounded((dir_ / "a").string(), 5, "test"), "hello");
  test::expect_error([&] { files::read_bounded((dir_ / "a").string(), 4, "reader"); },
                     {"reader", "5 bytes", "more than the 4"});
  test::expect_error([&] { files::read_bounded((dir_ / "none").string(), 9, "reader"); }, {"reader", "cannot open"});
  test::expect_error([&] { files::read_bounded(dir_.string(), 9, "reader"); }, {"reader", "not a regular file"});
}

TEST_F(Files, ReadBoundedRefusesSymlinksWhenAsked) {
  write(dir_ / "target", "secret");
  fs::create_symlink(dir_ / "target", dir_ / "link");
  EXPECT_EQ(files::read_bounded((dir_ / "link").string(), 99, "test"), "secret");  // followed by default
  test::expect_error([&] { files::read_bounded((dir_ / "link").string(), 99, "cache", true); },
                     {"cache", "link", "symlink"});
}

TEST_F(Files, WriteAtomicReplacesTheFileAndLeavesNothingElse) {
  fs::path p = dir_ / "ckpt";
  write(p, "old contents");
  files::write_atomic(p.string(), "new", "save");
  EXPECT_EQ(read(p), "new");
  EXPECT_EQ(entries(), 1u) << "a temporary file was left behind";
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0666u & ~mask) << "a saved file gets the mode any new file gets";
  std::string priv = files::write_new(dir_.string(), "private-", "", "x", "test");
  ASSERT_EQ(::stat(priv.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "write_new's files are this user's only";
}

// The last step (the rename) failing: here the target is a folder, which a file cannot replace
// (as root too). The error names it, the temporary file is gone and the old contents stay.
TEST_F(Files, AFailedWriteLeavesTheOldContentsAndNoTemporary) {
  fs::create_directories(dir_ / "ckpt");
  write(dir_ / "ckpt" / "inside", "old");
  test::expect_error([&] { files::write_atomic((dir_ / "ckpt").string(), "new", "save"); }, {"save", "cannot write"});
  EXPECT_EQ(read(dir_ / "ckpt" / "inside"), "old");
  EXPECT_EQ(entries(), 1u) << "the temporary file was left behind";
}

TEST_F(Files, WriteNewNeverReusesAName) {
  std::string a = files::write_new(dir_.string(), "repro-", ".ir", "one", "test");
  std::string b = files::write_new(dir_.string(), "repro-", ".ir", "two", "test");
  EXPECT_NE(a, b);
  EXPECT_EQ(read(a), "one");
  EXPECT_EQ(read(b), "two");
  EXPECT_EQ(fs::path(a).extension(), ".ir");
}

TEST_F(Files, PrivateFoldersAreCheckedBeforeTheyAreTrusted) {
  EXPECT_EQ(files::private_dir_problem(dir_.string()), "");
  fs::path open = dir_ / "open";
  fs::create_directories(open);
  ::chmod(open.c_str(), 0777);
  EXPECT_NE(files::private_dir_problem(open.string()).find("others can write"), std::string::npos);
  fs::create_directory_symlink(dir_, dir_ / "link");
  EXPECT_NE(files::private_dir_problem((dir_ / "link").string()).find("symlink"), std::string::npos);
  write(dir_ / "file", "x");
  EXPECT_NE(files::private_dir_problem((dir_ / "file").string()).find("not a directory"), std::string::npos);
  EXPECT_EQ(files::ensure_private_dir((dir_ / "made" / "deep").string()), "");
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "made" / "deep").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(Files, TheUserScratchFolderIsRefusedWhenSomeoneElseMadeIt) {
  std::string saved = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "";
  ::setenv("TMPDIR", dir_.c_str(), 1);
  std::string mine = files::user_temp_dir();
  EXPECT_EQ(files::private_dir_problem(mine), "");
  fs::remove_all(mine);
  fs::create_directory_symlink(dir_, mine);  // planted by "someone else"
  test::expect_error([&] { files::user_temp_dir(); }, {"refusing", "symlink"});
  if (saved.empty()) ::unsetenv("TMPDIR");
  else ::setenv("TMPDIR", saved.c_str(), 1);
}

TEST_F(Files, ProgramsRunWithoutAShell) {
  EXPECT_EQ(files::run_program({"echo", "a b", "$(touch x)", "'; touch y; '"}).value_or("?"),
            "a b $(touch x) '; touch y; '\n");
  EXPECT_FALSE(fs::exists("x") || fs::exists("y"));
  EXPECT_EQ(files::run_program({"sh", "-c", "echo $KILN_FILES_TEST"}, {"KILN_FILES_TEST=given"}).value_or("?"),
            "given\n");
  EXPECT_FALSE(files::run_program({"false"}).has_value());
  EXPECT_FALSE(files::run_program({"/nonexistent/program"}).has_value());
}

}  // namespace
}  // namespace kiln
