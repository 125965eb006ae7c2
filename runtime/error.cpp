// runtime/error.cpp -- throwing helpers, out of line so call sites stay small.
#include "runtime/error.h"

#include <fmt/format.h>

#include <cstdint>
#include <ostream>

#include "runtime/device.h"

namespace kiln {

void throw_error(const std::string& message) { throw Error(message); }

void throw_internal(const char* cond, const char* file, int line) {
  throw InternalError(fmt::format("kiln internal error: {} ({}:{})", cond, file, line));
}

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return "cuda";
    case DeviceType::Plugin: return "plugin";
  }
  return "?";
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("{}:{}", device_type_name(type), index);
}

Device::Device(const char* name) : Device(parse_device(name)) {}

Device parse_device(std::string_view name) {
  std::string_view kind = name.substr(0, name.find(':'));
  for (int t = 0; t < kNumDeviceTypes; ++t) {
    auto type = static_cast<DeviceType>(t);
    if (kind != device_type_name(type)) continue;
    if (kind.size() == name.size()) return Device{type, 0};
    std::string_view digits = name.substr(kind.size() + 1);
    int index = 0;
    bool ok = !digits.empty() && digits.size() <= 5 && type != DeviceType::CPU;
    for (char c : digits) {
      ok = ok && c >= '0' && c <= '9';
      if (ok) index = index * 10 + (c - '0');
    }
    if (ok && index <= INT16_MAX) return Device{type, static_cast<int16_t>(index)};
    break;
  }
  throw Error(fmt::format("unknown device '{}' (expected cpu, cuda:N or plugin:N)", name));
}
std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

}  // namespace kiln
