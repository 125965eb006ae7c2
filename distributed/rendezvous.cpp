// distributed/rendezvous.cpp -- joining a process group: its options from the launcher's
// environment, this rank's address for its peers, and the Gloo engine's rendezvous through the
// TcpStore that rank 0 serves (distributed/tcp_store.h).
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed/gloo_backend.h"
#include "distributed/process_group.h"
#include "distributed/tcp_store.h"
#include "runtime/check.h"

namespace kiln::distributed {
namespace {

int env_int(const char* name, int fallback, bool required) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    KILN_CHECK(!required,
               "distributed: {} is not set (launch with kiln-run or set RANK, WORLD_SIZE, MASTER_ADDR "
               "and MASTER_PORT)",
               name);
    return fallback;
  }
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  KILN_CHECK(*end == '\0' && x >= 0 && x <= INT32_MAX, "distributed: {}='{}' is not a non-negative integer", name, v);
  return static_cast<int>(x);
}

// The address the other ranks reach this one at: the interface that routes toward MASTER_ADDR,
// or when that is a loopback address (rank 0's machine, whose own name Debian maps to
// 127.0.1.1) the first non-loopback IPv4 interface that is up. KILN_DIST_HOSTNAME overrides.
std::string address_for_peers(const std::string& master, int port) {
  std::string found;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(master.c_str(), std::to_string(port).c_str(), &hints, &res) == 0) {
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    socklen_t len = sizeof a;
    char buf[INET_ADDRSTRLEN] = {};
    // A datagram socket's connect only picks the route; nothing is sent.
    if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
        ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf))
      found = buf;
    if (fd >= 0) ::close(fd);
    ::freeaddrinfo(res);
  }
  if (!found.empty() && !is_loopback(found)) return found;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i && (found.empty() || is_loopback(found)); i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
          (i->ifa_flags & IFF_LOOPBACK))
        continue;
      char buf[INET_ADDRSTRLEN] = {};
      if (::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf)) found = buf;
    }
    ::freeifaddrs(ifs);
  }
  KILN_CHECK(!found.empty() && !is_loopback(found),
             "distributed: this machine has no network address the other "
             "ranks could reach it at (MASTER_ADDR {} is not a loopback address); set KILN_DIST_HOSTNAME",
             master);
  return found;
}

// Gloo's store interface over ours.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(TcpStore& s, std::chrono::milliseconds timeout) : s_(s), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override { s_.set("gloo/" + key, data); }
  std::vector<char> get(const std::string& key) override { return s_.get("gloo/" + key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const std::string& k : keys) s_.get("gloo/" + k, timeout);
  }

 private:
  TcpStore& s_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

Options options_from_env() {
  Options o;
  o.rank = env_int("RANK", -1, true);
  o.world_size = env_int("WORLD_SIZE", -1, true);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) o.master_addr = a;
  o.master_port = env_int("MASTER_PORT", o.master_port, false);
  o.timeout = std::chrono::milliseconds(env_int("KILN_DIST_TIMEOUT_MS", static_cast<int>(o.timeout.count()), false));
  if (const char* h = std::getenv("KILN_DIST_HOSTNAME"); h && *h) o.hostname = h;
  o.check = env_int("KILN_DIST_CHECK", 1, false) != 0;
  return o;
}

namespace detail {

GlooBackend::GlooBackend(const Options& o) : o_(o) {
  KILN_CHECK(o.world_size >= 1, "distributed: world_size must be at least 1, got {}", o.world_size);
  KILN_CHECK(o.rank >= 0 && o.rank < o.world_size, "distributed: rank {} is outside 0..{}", o.rank, o.world_size - 1);
  KILN_CHECK(o.timeout.count() > 0, "distributed: the timeout must be positive");
  // Gloo writes to its sockets without MSG_NOSIGNAL: a peer that died would kill this process
  // with SIGPIPE instead of failing the collective with an error naming it. Ignored, unless
  // the program handles SIGPIPE itself.
  struct sigaction old_action {};
  if (::sigaction(SIGPIPE, nullptr, &old_action) == 0 && old_action.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  store_ = std::make_unique<TcpStore>(o.master_addr, o.master_port, o.rank == 0, o.timeout);
  store_->identify(o.rank);
  gloo::transport::tcp::attr attr;
  attr.hostname = !o.hostname.empty()          ? o.hostname
                  : is_loopback(o.master_addr) ? "127.0.0.1"
                                               : address_for_peers(o.master_addr, o.master_port);
  try {
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    ctx_ = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world_size);
    ctx_->setTimeout(o.timeout);
    StoreAdapter adapter(*store_, o.timeout);
    ctx_->connectFullMesh(adapter, dev);
    // Every rank has connected before any leaves the rendezvous (rank 0's store must outlive
    // the others' reads of it).
    gloo::BarrierOptions b(ctx_);
    b.setTag(next_tag_++);
    gloo::barrier(b);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(fmt::format("distributed: rank {} of {} could not connect to the others through {}:{} within {} ms: {}",
                            o.rank, o.world_size, o.master_addr, o.master_port, o.timeout.count(), e.what()));
  }
  worker_ = std::thread([this] { run(); });
}

}  // namespace detail
}  // namespace kiln::distributed
