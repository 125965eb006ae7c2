// runtime/backend.h -- what a device is to the runtime: a backend registered for its type,
// which owns the device's memory (an Allocator), runs the op list's kernels on it, copies
// between it and the CPU, and waits for its queued work. apply() and Storage reach devices
// only through this interface, as they reach the tracer only through Recorder; the CPU backend
// is the first implementation, registered before main.
#pragma once

#include <span>

#include "runtime/allocator.h"
#include "runtime/op.h"

namespace kiln {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  /// The allocator of device `d` (of this backend's type).
  virtual Allocator& allocator(Device d) = 0;
  /// Runs op `id`'s kernel into `out`: a fresh contiguous tensor on the device. The inputs are
  /// on the device too, or 0-d CPU tensors (the CPU-scalar rule).
  virtual void run(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out) = 0;
  /// dst = src, src broadcast to dst's shape and converted to its dtype. Each of them is on this
  /// backend's device or on the CPU.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  /// Returns when the work queued on device `d` is done.
  virtual void synchronize(Device d) = 0;
};

/// Makes `backend` the one for devices of `type` (it must outlive its use); nullptr removes it.
/// The CPU's cannot be replaced.
void register_backend(DeviceType type, DeviceBackend* backend);
/// The backend of device `d`; throws kiln::Error when none is registered for its type.
DeviceBackend& backend(Device d);

/// dst = src (broadcast, converted) between any two devices: through the backend of the one
/// that is not the CPU, and through host memory between two devices of different types.
void copy_between(const Tensor& src, const Tensor& dst);

/// Waits for device d's queued work (nothing to wait for on the CPU).
void synchronize(Device d = cpu);

}  // namespace kiln
