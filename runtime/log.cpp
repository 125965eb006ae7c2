// runtime/log.cpp -- topic-filtered logging to stderr.
#include "runtime/log.h"

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string>

namespace kiln {
namespace {
const char* kNames[] = {"jit", "codegen", "cache", "cuda"};

unsigned topics() {
  static const unsigned mask = [] {
    const char* env = std::getenv("KILN_LOG");
    if (!env) return 0u;
    std::string s = env;
    if (s == "all" || s == "1") return ~0u;
    unsigned m = 0;
    for (unsigned i = 0; i < std::size(kNames); ++i) {
      std::string name = kNames[i];
      size_t p = s.find(name);
      // a whole word in the comma-separated list
      while (p != std::string::npos) {
        bool start = p == 0 || s[p - 1] == ',';
        bool end = p + name.size() == s.size() || s[p + name.size()] == ',';
        if (start && end) m |= 1u << i;
        p = s.find(name, p + 1);
      }
    }
    return m;
  }();
  return mask;
}
}  // namespace

bool log_enabled(LogTopic t) { return topics() >> static_cast<unsigned>(t) & 1; }

namespace {
std::mutex& stderr_mu() {
  static std::mutex mu;
  return mu;
}
}  // namespace

void log(LogTopic t, std::string_view message) {
  if (!log_enabled(t)) return;
  std::lock_guard<std::mutex> lock(stderr_mu());
  std::fprintf(stderr, "[kiln:%s] %.*s\n", kNames[static_cast<unsigned>(t)], static_cast<int>(message.size()),
               message.data());
}

void warn(std::string_view message) {
  std::lock_guard<std::mutex> lock(stderr_mu());
  std::fprintf(stderr, "[kiln:warning] %.*s\n", static_cast<int>(message.size()), message.data());
}

}  // namespace kiln
