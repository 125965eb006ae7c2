// distributed/tcp_store.h -- the rendezvous's key-value store over TCP, as PyTorch's c10d has
// one: rank 0 serves it on MASTER_ADDR:MASTER_PORT, every rank (rank 0 too) is a client. The
// collectives never go through it (they are Gloo's); it carries the ranks' addresses at
// start-up and, per collective, which ranks arrived (so a timeout names the missing one), and
// which ranks' connections to it ended (so a broken collective names the rank that left).
// Internal (not installed).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace kiln::distributed {

/// A name or address of this machine's loopback interface: a job that stays on one machine.
inline bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

class TcpStore {
 public:
  /// Connects to host:port, first serving it when `serve` (rank 0). Throws kiln::Error naming
  /// the address: a port already in use, a name that does not resolve, or no server within
  /// `timeout`.
  TcpStore(const std::string& host, int port, bool serve, std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  /// Sets (or replaces) a key.
  void set(const std::string& key, const std::vector<char>& value);
  /// The key's value, waiting for it up to `timeout`; throws kiln::Error naming the key then.
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout);
  /// The key's value now, or false.
  bool try_get(const std::string& key, std::vector<char>* value);
  /// Tells the server which rank this client is. From then on, when this client's connection
  /// ends before the server stops (its process died, or TCP keepalive found its host
  /// unreachable, within about 4 s), the server sets "gone/<rank>": a collective that broke
  /// with every rank present can name the one that left.
  void identify(int rank);

  struct Server;

 private:
  std::unique_ptr<Server> server_;
  int fd_ = -1;
  std::string where_;  // "host:port", for errors
};

}  // namespace kiln::distributed
