// runtime/device.h -- where a tensor's memory lives: the CPU or a CUDA device.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { CPU, CUDA };

/// `cpu` or `cuda:N`. CUDA support is loaded at run time, so a device is just a name here.
struct Device {
  DeviceType type = DeviceType::CPU;
  int16_t index = 0;

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  friend bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
};

inline constexpr Device cpu{DeviceType::CPU, 0};
inline Device cuda(int index = 0) { return Device{DeviceType::CUDA, static_cast<int16_t>(index)}; }
std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace kiln
