// tests/distributed/ranks.h -- running N ranks of a test as processes: this binary run again
// for a disabled child test, which reads its case and output folder from the environment.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern char** environ;

namespace kiln::test {

inline std::string text_of(const std::string& path) {
  std::ifstream f(path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Runs `n` ranks of case `which` (the gtest `child` run again with RANK, WORLD_SIZE,
// MASTER_PORT, KILN_DIST_CASE and KILN_DIST_DIR set); returns their exit statuses.
inline std::vector<int> run_ranks(int n, const std::string& which, const std::string& dir, int timeout_ms,
                                  const std::string& child = "DistChild.DISABLED_Rank",
                                  const std::string& master_addr = "127.0.0.1") {
  int port = free_port();
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    for (std::string v :
         {fmt::format("RANK={}", r), fmt::format("WORLD_SIZE={}", n), fmt::format("MASTER_PORT={}", port),
          "MASTER_ADDR=" + master_addr, fmt::format("KILN_DIST_TIMEOUT_MS={}", timeout_ms), "KILN_DIST_CASE=" + which,
          "KILN_DIST_DIR=" + dir})
      env.push_back(v);
    std::vector<std::string> args = {exe, "--gtest_also_run_disabled_tests", "--gtest_filter=" + child};
    std::vector<char*> argv, envp;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&fa);
    pids.push_back(pid);
  }
  std::vector<int> status;
  for (pid_t p : pids) {
    int s = 0;
    ::waitpid(p, &s, 0);
    status.push_back(WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s));
  }
  return status;
}

inline std::string fresh_dir(const std::string& name) {
  std::filesystem::path d = std::filesystem::temp_directory_path() / fmt::format("kiln_dist_{}_{}", ::getpid(), name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace kiln::test
