// cuda/target.cpp -- cuda_target (nvrtc.h): what NVRTC builds for a device, a pure
// function of the two architectures, so the tests read it without a GPU.
#include <fmt/format.h>

#include <algorithm>

#include "cuda/nvrtc.h"
#include "runtime/error.h"

namespace kiln::cuda {

CudaTarget cuda_target(int device_arch, const std::vector<int>& supported) {
  if (supported.empty() || std::find(supported.begin(), supported.end(), device_arch) != supported.end())
    return {device_arch, false};
  int best = 0;
  for (int a : supported)
    if (a <= device_arch) best = std::max(best, a);
  if (best == 0)
    throw Error(
        fmt::format("nvrtc: this NVRTC compiles for sm_{} to sm_{}, none at or below the device's sm_{}; kiln "
                    "needs an NVRTC that knows the device (or older devices)",
                    supported.front(), supported.back(), device_arch));
  return {best, true};
}

}  // namespace kiln::cuda
