// runtime/device.h -- where a tensor's memory lives: the CPU, a CUDA device, or a device whose
// backend a program registers itself (runtime/backend.h).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace kiln {

enum class DeviceType : uint8_t { CPU, CUDA, Plugin };
inline constexpr int kNumDeviceTypes = 3;

/// `cpu`, `cuda:N`, or `plugin:N` (an out-of-tree backend, such as the tests' fake device).
/// A device is just a name here: what runs on it is the backend registered for its type.
struct Device {
  DeviceType type = DeviceType::CPU;
  int16_t index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int16_t i) : type(t), index(i) {}
  /// A device by name, as PyTorch takes one: x.to("cuda:1"), empty({2}, f32, "cuda")
  /// (parse_device; throws kiln::Error for another name).
  Device(const char* name);
  Device(const std::string& name) : Device(name.c_str()) {}

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  friend bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
};

inline constexpr Device cpu{DeviceType::CPU, 0};
// cuda:N is cuda::device(N) (runtime/cuda.h): kiln::cuda is the namespace of CUDA's streams,
// events and devices.
inline Device plugin(int index = 0) { return Device{DeviceType::Plugin, static_cast<int16_t>(index)}; }
/// "cpu", "cuda", "plugin".
const char* device_type_name(DeviceType type);
/// The device a name means, as Device::str() writes it ("cpu", "cuda:1"; "cuda" is "cuda:0").
/// Throws kiln::Error naming what was expected.
Device parse_device(std::string_view name);
std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace kiln
