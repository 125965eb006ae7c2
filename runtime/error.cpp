// runtime/error.cpp -- throwing helpers, out of line so call sites stay small.
#include "runtime/error.h"

#include <fmt/format.h>

#include <ostream>

#include "runtime/device.h"

namespace kiln {

void throw_error(const std::string& message) { throw Error(message); }

void throw_internal(const char* cond, const char* file, int line) {
  throw InternalError(fmt::format("kiln internal error: {} ({}:{})", cond, file, line));
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index);
}
std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

}  // namespace kiln
