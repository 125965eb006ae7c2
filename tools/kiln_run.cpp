// tools/kiln_run.cpp -- kiln-run: starts the processes of a data-parallel job on this machine,
// with the environment distributed::options_from_env() reads.
//
//   kiln-run -n 2 ./train --epochs 5          ranks 0 and 1 here (MASTER_ADDR 127.0.0.1, a
//                                              free MASTER_PORT)
//   kiln-run -n 2 --nnodes 2 --node-rank 0 --master-addr host0 --master-port 29500 ./train
//                                              this machine's share of a 4-rank job on two machines
//                                              (run the same with --node-rank 1 on host1)
//
// Each process gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. When one exits
// with an error, the others are stopped (SIGTERM, then SIGKILL after 5 s) and kiln-run exits
// with its status, so a failed rank never leaves the others waiting.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstring>
#include <map>
#include <string_view>
#include <thread>

extern char** environ;

namespace {

// A port nobody listens on now (the OS picks it), for a single-machine job.
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 29500;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

int status_of(int s) { return WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("kiln-run: start the ranks of a data-parallel job on this machine", "kiln-run");
  int n = 1, nnodes = 1, node_rank = 0, port = 0;
  std::string addr = "127.0.0.1";
  std::vector<std::string> command;
  app.add_option("-n,--nproc", n, "processes on this machine")->check(CLI::Range(1, 1024));
  app.add_option("--nnodes", nnodes, "machines in the job (default 1)")->check(CLI::Range(1, 4096));
  app.add_option("--node-rank", node_rank, "this machine's index, 0..nnodes-1 (default 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", addr, "where rank 0 serves the rendezvous (default 127.0.0.1)");
  app.add_option("--master-port", port, "its port (default: a free one, single-machine jobs only)")
      ->check(CLI::Range(1, 65535));
  app.prefix_command();  // the first word that is not an option starts the program's command line
  app.footer("  PROGRAM [ARGS...]   the program each rank runs, and its arguments");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (node_rank >= nnodes) {
    fmt::print(stderr, "kiln-run: --node-rank {} is outside 0..{}\n", node_rank, nnodes - 1);
    return 2;
  }
  if (nnodes > 1 && port == 0) {
    fmt::print(stderr, "kiln-run: a job on {} machines needs --master-port (the same on every machine)\n", nnodes);
    return 2;
  }
  if (port == 0) port = free_port();
  command = app.remaining();
  if (command.empty()) {
    fmt::print(stderr, "kiln-run: no program to run (kiln-run -n 2 ./train ...)\n");
    return 2;
  }

  std::map<pid_t, int> ranks;  // pid -> rank
  for (int local = 0; local < n; ++local) {
    int rank = node_rank * n + local;
    std::vector<std::string> env;
    // Inherited values of the variables set below would win (getenv takes the first): dropped.
    for (char** e = environ; *e; ++e) {
      std::string_view v(*e);
      bool ours = false;
      for (std::string_view name : {"RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT="})
        ours = ours || v.substr(0, name.size()) == name;
      if (!ours) env.emplace_back(v);
    }
    env.push_back(fmt::format("RANK={}", rank));
    env.push_back(fmt::format("LOCAL_RANK={}", local));
    env.push_back(fmt::format("WORLD_SIZE={}", n * nnodes));
    env.push_back("MASTER_ADDR=" + addr);
    env.push_back(fmt::format("MASTER_PORT={}", port));
    std::vector<char*> args, envp;
    for (std::string& a : command) args.push_back(a.data());
    args.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    int rc = posix_spawnp(&pid, command[0].c_str(), nullptr, nullptr, args.data(), envp.data());
    if (rc != 0) {
      fmt::print(stderr, "kiln-run: cannot start '{}': {}\n", command[0], std::strerror(rc));
      for (auto& [p, r] : ranks) ::kill(p, SIGTERM);
      for (auto& [p, r] : ranks) ::waitpid(p, nullptr, 0);
      return 1;
    }
    ranks[pid] = rank;
  }
  int result = 0;
  bool stopping = false;
  auto stop_at = std::chrono::steady_clock::time_point::max();
  while (!ranks.empty()) {
    int s = 0;
    pid_t pid = ::waitpid(-1, &s, stopping ? WNOHANG : 0);
    if (pid == 0) {  // stopping, and some are still running
      if (std::chrono::steady_clock::now() > stop_at)
        for (auto& [p, r] : ranks) ::kill(p, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (pid < 0) break;
    auto it = ranks.find(pid);
    if (it == ranks.end()) continue;
    int rank = it->second, status = status_of(s);
    ranks.erase(it);
    if (status != 0 && !stopping) {
      result = status;
      stopping = true;
      stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      if (!ranks.empty())
        fmt::print(stderr, "kiln-run: rank {} exited with status {}; stopping the others\n", rank, status);
      for (auto& [p, r] : ranks) ::kill(p, SIGTERM);
    }
  }
  return result;
}
