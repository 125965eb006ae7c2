// jit/group_runner.cpp -- the runners of fused groups, by device type (jit/group_runner.h).
#include "jit/group_runner.h"

#include <array>
#include <atomic>

#include "runtime/check.h"

namespace kiln::jit {
namespace {

std::array<std::atomic<GroupBackend>, kNumDeviceTypes>& group_backends() {
  static std::array<std::atomic<GroupBackend>, kNumDeviceTypes> b{};
  return b;
}

std::array<std::atomic<GroupLaunches>, kNumDeviceTypes>& launch_planners() {
  static std::array<std::atomic<GroupLaunches>, kNumDeviceTypes> p{};
  return p;
}

std::array<std::atomic<GroupBatch>, kNumDeviceTypes>& batch_planners() {
  static std::array<std::atomic<GroupBatch>, kNumDeviceTypes> p{};
  return p;
}

}  // namespace

void register_group_batch(DeviceType type, GroupBatch batch) {
  batch_planners()[static_cast<size_t>(type)].store(batch, std::memory_order_release);
}

int group_batch(const ir::Node& fused, Device device, int multiprocessors) {
  GroupBatch p = batch_planners()[static_cast<size_t>(device.type)].load(std::memory_order_acquire);
  return p ? p(fused, multiprocessors) : 1;
}

void register_group_launches(DeviceType type, GroupLaunches launches) {
  launch_planners()[static_cast<size_t>(type)].store(launches, std::memory_order_release);
}

int64_t group_launches(const ir::Node& fused, Device device, int multiprocessors) {
  GroupLaunches p = launch_planners()[static_cast<size_t>(device.type)].load(std::memory_order_acquire);
  return p ? p(fused, multiprocessors) : 1;
}

void register_group_backend(DeviceType type, GroupBackend backend) {
  group_backends()[static_cast<size_t>(type)].store(backend, std::memory_order_release);
}

bool has_group_backend(DeviceType type) {
  return group_backends()[static_cast<size_t>(type)].load(std::memory_order_acquire) != nullptr;
}

std::unique_ptr<GroupRunner> prepare_group(const ir::Node& fused, Device device, std::span<const Tensor> inputs) {
  GroupBackend b = group_backends()[static_cast<size_t>(device.type)].load(std::memory_order_acquire);
  KILN_CHECK(b, "fused group: no code generator for {}", device.str());
  return b(fused, inputs);
}

}  // namespace kiln::jit
