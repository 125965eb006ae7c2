// runtime/symbols.cpp -- named dimensions: a symbolic size is a negative number that names an
// entry of one process-wide table, so shapes stay plain Dims.
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/check.h"
#include "runtime/tensor.h"

namespace kiln {
namespace {
struct Table {
  std::mutex mu;
  std::deque<std::string> names;  // deque: references stay valid as it grows
  std::unordered_map<std::string, int64_t> ids;
};
Table& table() {
  static Table* t = new Table();
  return *t;
}
}  // namespace

int64_t dim_symbol(std::string_view name) {
  KILN_CHECK(!name.empty(), "dim_symbol: empty name");
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  // The table lives as long as the process: a bound, so that text naming ever new symbols
  // (a hostile IR file, parsed again and again) cannot grow it without end.
  constexpr size_t kMaxSymbols = size_t{1} << 16;
  auto found = t.ids.find(std::string(name));
  if (found != t.ids.end()) return found->second;
  KILN_CHECK(t.names.size() < kMaxSymbols, "dim_symbol: more than {} distinct dimension names in this process ('{}')",
             kMaxSymbols, name);
  auto [it, fresh] = t.ids.try_emplace(std::string(name), 0);
  if (fresh) {
    t.names.emplace_back(name);
    it->second = -static_cast<int64_t>(t.names.size());
  }
  return it->second;
}

std::string_view dim_symbol_name(int64_t dim) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (dim >= 0 || static_cast<uint64_t>(-(dim + 1)) >= t.names.size()) return {};
  return t.names[static_cast<size_t>(-(dim + 1))];
}

}  // namespace kiln
