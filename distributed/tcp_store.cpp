// distributed/tcp_store.cpp -- the store's server (a thread per client, a map under a mutex)
// and client (one connection, a request at a time). The wire format: a request is an op byte
// ('S' set, 'G' get, 'I' identify), a u32 key length and the key, and for a set a u32 value
// length and the value; a get's reply is a found byte and, when found, a u32 length and the
// value; a set's reply is one byte; an identify's key is the client's rank, and has no reply.
// Lengths are bounded, so a stray client cannot make the server allocate.
#include "distributed/tcp_store.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "runtime/check.h"

namespace kiln::distributed {
namespace {

constexpr uint32_t kMaxKey = 1 << 10, kMaxValue = 1 << 20;

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k, n -= static_cast<size_t>(k);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t k = ::recv(fd, c, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k, n -= static_cast<size_t>(k);
  }
  return true;
}

bool read_string(int fd, uint32_t bound, std::string* s) {
  uint32_t n = 0;
  if (!read_all(fd, &n, 4) || n > bound) return false;
  s->resize(n);
  return read_all(fd, s->data(), n);
}

// The addresses of host:port (IPv4 or IPv6), or a kiln::Error naming them.
addrinfo* resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res);
  KILN_CHECK(rc == 0, "distributed: cannot resolve the rendezvous address {}:{} (MASTER_ADDR): {}", host, port,
             gai_strerror(rc));
  return res;
}

// A client retrying while rank 0 starts can be given the server's port as its own source port
// and connect to itself (TCP's simultaneous open): that is no server.
bool connected_to_itself(int fd) {
  sockaddr_storage a{}, b{};
  socklen_t la = sizeof a, lb = sizeof b;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &la) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&b), &lb) != 0)
    return false;
  if (la == lb && std::memcmp(&a, &b, la) == 0) {
    errno = ECONNREFUSED;
    return true;
  }
  return false;
}

}  // namespace

struct TcpStore::Server {
  int listen_fd = -1;
  std::thread acceptor;
  std::mutex mu;
  std::map<std::string, std::string> values;
  std::vector<int> clients;
  std::vector<std::thread> handlers;
  std::atomic<bool> stopping{false};

  // Answers one client until its connection ends; then, unless the server is stopping, a
  // client that said which rank it is is marked gone.
  void serve(int fd) {
    std::string rank;
    serve_requests(fd, &rank);
    if (!rank.empty() && !stopping) {
      std::lock_guard<std::mutex> lock(mu);
      values["gone/" + rank] = "1";
    }
  }

  void serve_requests(int fd, std::string* rank) {
    for (;;) {
      char op = 0;
      std::string key, value;
      if (!read_all(fd, &op, 1) || !read_string(fd, kMaxKey, &key)) return;
      if (op == 'I') {
        *rank = key;
      } else if (op == 'S') {
        if (!read_string(fd, kMaxValue, &value)) return;
        {
          std::lock_guard<std::mutex> lock(mu);
          values[key] = std::move(value);
        }
        char ack = 1;
        if (!write_all(fd, &ack, 1)) return;
      } else if (op == 'G') {
        bool found = false;
        {
          std::lock_guard<std::mutex> lock(mu);
          auto it = values.find(key);
          if (it != values.end()) found = true, value = it->second;
        }
        char f = found;
        uint32_t n = static_cast<uint32_t>(value.size());
        if (!write_all(fd, &f, 1) || (found && (!write_all(fd, &n, 4) || !write_all(fd, value.data(), n)))) return;
      } else {
        return;  // not a client of ours
      }
    }
  }

  void run() {
    while (!stopping) {
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (stopping || errno == EBADF || errno == EINVAL) return;  // closed: stopping
        // Out of descriptors, an aborted connection: transient; the ranks retry meanwhile.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      // A client's host that vanishes (powered off, unplugged) sends no reset: keepalive
      // probes end its idle connection within about 4 s, and the user timeout one with a
      // reply in flight, so it is marked gone (serve()).
      int idle = 1, interval = 1, probes = 3, unacked_ms = 4000;
      ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
      ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &unacked_ms, sizeof unacked_ms);
      std::lock_guard<std::mutex> lock(mu);
      try {
        handlers.emplace_back([this, fd] { serve(fd); });
        clients.push_back(fd);
      } catch (const std::system_error&) {  // no thread for it: that client is refused
        ::close(fd);
      }
    }
  }

  ~Server() {
    stopping = true;
    ::shutdown(listen_fd, SHUT_RDWR);
    ::close(listen_fd);
    if (acceptor.joinable()) acceptor.join();
    std::vector<std::thread> hs;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (int fd : clients) ::shutdown(fd, SHUT_RDWR);
      hs = std::move(handlers);
    }
    for (std::thread& t : hs) t.join();
    for (int fd : clients) ::close(fd);
  }
};

TcpStore::TcpStore(const std::string& host, int port, bool serve, std::chrono::milliseconds timeout)
    : where_(fmt::format("{}:{}", host, port)) {
  KILN_CHECK(port > 0 && port < 65536, "distributed: port {} (MASTER_PORT) is not a TCP port", port);
  if (serve) {
    // A job on one machine (a loopback MASTER_ADDR) stays private to it; otherwise the store
    // listens on every interface, as the name may map to a loopback address on rank 0's own
    // machine (Debian's /etc/hosts gives the host name 127.0.1.1) while the others reach it
    // through the network.
    ::freeaddrinfo(resolve(host, port, false));  // a name that does not resolve is an error here too
    addrinfo* res = resolve(is_loopback(host) ? host : "", port, true);
    std::string why = "no address";
    int fd = -1;
    for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
      fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) break;
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
    ::freeaddrinfo(res);
    KILN_CHECK(fd >= 0,
               "distributed: rank 0 cannot serve the rendezvous on {}: {} (is another job using "
               "MASTER_PORT {}?)",
               where_, why, port);
    server_ = std::make_unique<Server>();
    server_->listen_fd = fd;
    server_->acceptor = std::thread([s = server_.get()] { s->run(); });
  }
  // Connect, retrying while the server is not up yet (rank 0 may start last).
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string why;
  for (;;) {
    addrinfo* res = resolve(host, port, false);
    for (addrinfo* a = res; a && fd_ < 0; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 && !connected_to_itself(fd)) {
        fd_ = fd;
        break;
      }
      why = std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(res);
    if (fd_ >= 0) break;
    KILN_CHECK(std::chrono::steady_clock::now() < deadline,
               "distributed: no rendezvous server at {} after {} ms ({}): is rank 0 running, and MASTER_ADDR and "
               "MASTER_PORT the same on every rank?",
               where_, timeout.count(), why);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Every request is bounded too: a server that stops answering (rank 0 stopped, its machine
  // gone) is an error within the timeout, never a hang.
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  KILN_CHECK(key.size() <= kMaxKey && value.size() <= kMaxValue, "distributed: store key '{}' or its value is too long",
             key);
  char op = 'S', ack = 0;
  uint32_t k = static_cast<uint32_t>(key.size()), v = static_cast<uint32_t>(value.size());
  bool ok = write_all(fd_, &op, 1) && write_all(fd_, &k, 4) && write_all(fd_, key.data(), k) && write_all(fd_, &v, 4) &&
            write_all(fd_, value.data(), v) && read_all(fd_, &ack, 1);
  KILN_CHECK(ok, "distributed: the rendezvous store at {} (served by rank 0) is unreachable: did rank 0 exit?", where_);
}

bool TcpStore::try_get(const std::string& key, std::vector<char>* value) {
  char op = 'G', found = 0;
  uint32_t k = static_cast<uint32_t>(key.size()), n = 0;
  bool ok =
      write_all(fd_, &op, 1) && write_all(fd_, &k, 4) && write_all(fd_, key.data(), k) && read_all(fd_, &found, 1);
  if (ok && found) {
    ok = read_all(fd_, &n, 4) && n <= kMaxValue;
    if (ok) {
      value->resize(n);
      ok = read_all(fd_, value->data(), n);
    }
  }
  KILN_CHECK(ok, "distributed: the rendezvous store at {} (served by rank 0) is unreachable: did rank 0 exit?", where_);
  return found;
}

void TcpStore::identify(int rank) {
  char op = 'I';
  std::string key = std::to_string(rank);
  uint32_t k = static_cast<uint32_t>(key.size());
  bool ok = write_all(fd_, &op, 1) && write_all(fd_, &k, 4) && write_all(fd_, key.data(), k);
  KILN_CHECK(ok, "distributed: the rendezvous store at {} (served by rank 0) is unreachable: did rank 0 exit?", where_);
}

std::vector<char> TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<char> v;
  for (auto pause = std::chrono::microseconds(100);; pause = std::min(pause * 2, std::chrono::microseconds(20000))) {
    if (try_get(key, &v)) return v;
    KILN_CHECK(std::chrono::steady_clock::now() < deadline,
               "distributed: timed out after {} ms waiting for '{}' in the rendezvous store at {}", timeout.count(),
               key, where_);
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace kiln::distributed
