// runtime/files.cpp -- see files.h.
#include "runtime/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "runtime/error.h"

namespace kiln::files {
namespace fs = std::filesystem;
namespace {

std::string errno_text() { return std::strerror(errno); }

// Writes every piece to fd, then fsyncs; false on any failure.
bool write_all(int fd, std::span<const std::string_view> pieces) {
  for (std::string_view bytes : pieces) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      done += static_cast<size_t>(w);
    }
  }
  return ::fsync(fd) == 0;
}

}  // namespace

std::string private_dir_problem(const std::string& dir) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return fmt::format("cannot stat it: {}", errno_text());
  if (S_ISLNK(st.st_mode)) return "it is a symlink";
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  if (st.st_uid != ::geteuid())
    return fmt::format("it is owned by uid {}, not by this user (uid {})", st.st_uid, ::geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return fmt::format("others can write to it (mode {:o})", st.st_mode & 07777);
  return "";
}

std::string ensure_private_dir(const std::string& dir) {
  if (dir.empty()) return "no directory given";
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    fs::path parent = fs::path(dir).parent_path();
    std::error_code ec;
    if (!parent.empty() && parent != fs::path(dir))
      fs::create_directories(parent, ec);  // shared parents: their own modes
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return fmt::format("cannot create it: {}", errno_text());
  }
  return private_dir_problem(dir);
}

std::string user_temp_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string dir = fmt::format("{}/kiln-{}", base && *base ? base : "/tmp", ::geteuid());
  std::string problem = ensure_private_dir(dir);
  if (!problem.empty())
    throw Error(
        fmt::format("kiln: refusing the scratch folder {}: {} (remove it, or set TMPDIR elsewhere)", dir, problem));
  return dir;
}

std::string read_bounded(const std::string& path, int64_t max_bytes, const char* what, bool no_follow) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (no_follow ? O_NOFOLLOW : 0));
  if (fd < 0) {
    if (no_follow && errno == ELOOP)
      throw Error(fmt::format("{}: {} is a symlink, which this reader refuses", what, path));
    throw Error(fmt::format("{}: cannot open {}: {}", what, path, errno_text()));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) throw Error(fmt::format("{}: cannot stat {}: {}", what, path, errno_text()));
  if (!S_ISREG(st.st_mode)) throw Error(fmt::format("{}: {} is not a regular file", what, path));
  if (st.st_size > max_bytes)
    throw Error(
        fmt::format("{}: {} is {} bytes, more than the {} this reader accepts", what, path, st.st_size, max_bytes));
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t r = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error(fmt::format("{}: reading {} failed: {}", what, path, errno_text()));
    if (r == 0) throw Error(fmt::format("{}: {} shrank while it was read", what, path));
    done += static_cast<size_t>(r);
  }
  return bytes;
}

std::string write_new(const std::string& dir, const std::string& prefix, const std::string& suffix,
                      std::span<const std::string_view> pieces, const char* what, unsigned mode) {
  std::random_device rd;
  std::string path;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    path = (fs::path(dir.empty() ? "." : dir) / fmt::format("{}{:08x}{:08x}{}", prefix, rd(), rd(), suffix)).string();
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0)
    throw Error(fmt::format("{}: cannot write a new file in {}: {}", what, dir.empty() ? "." : dir, errno_text()));
  bool ok = write_all(fd, pieces);
  int saved = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    errno = saved;
    throw Error(fmt::format("{}: writing {} failed: {}", what, path, errno_text()));
  }
  return path;
}

void write_atomic(const std::string& path, std::string_view bytes, const char* what) {
  write_atomic(path, std::span<const std::string_view>(&bytes, 1), what);
}

void write_atomic(const std::string& path, std::span<const std::string_view> pieces, const char* what) {
  fs::path target(path);
  std::string dir = target.parent_path().string();
  // Mode 0666 less the umask, as a plain new file gets: a checkpoint is not a private file.
  std::string tmp = write_new(dir, "." + target.filename().string() + ".tmp-", "", pieces, what, 0666);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw Error(fmt::format("{}: cannot write {}: {}", what, path, why));
  }
}

std::optional<std::string> run_program(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  if (argv.empty()) return std::nullopt;
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;  // the additions first: getenv finds the first of a name
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  for (char** e = environ; *e; ++e) envp.push_back(*e);
  envp.push_back(nullptr);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    return std::nullopt;
  }
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t r = ::read(pipe_fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return out;
}

}  // namespace kiln::files
