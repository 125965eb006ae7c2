// cuda/nvrtc.h -- CUDA C to device code with NVRTC, which needs no GPU (std types only;
// nvrtc_cuda.cpp loads libnvrtc at run time). Without the CUDA toolkit at configure time,
// cuda/unavailable.cpp says so.
#pragma once

#include <string>
#include <vector>

namespace kiln::cuda {

/// Whether NVRTC loaded (KILN_CUDA_NVRTC, else libnvrtc of CUDA 13 or 12), and why not.
bool nvrtc_available();
std::string nvrtc_unavailable_reason();
/// "13.0": part of the disk cache's key for cubins.
std::string nvrtc_version();
/// The options every kernel is compiled with besides its architecture: part of the key too.
std::string nvrtc_options();

/// Compiles `source` into a cubin for sm_<arch> (80 for sm_80); `name` names the program in
/// errors, which carry NVRTC's log.
std::string compile_cubin(const std::string& source, int arch, const std::string& name);
/// The PTX of `source` for compute_<arch>: for reading (kiln-ir codegen --ptx), and for a
/// device newer than NVRTC knows (cuda_target), which the driver compiles.
std::string compile_ptx(const std::string& source, int arch, const std::string& name);
/// The architectures this NVRTC compiles for, ascending (nvrtcGetSupportedArchs; empty when it
/// cannot say, or is the host CUDA's).
std::vector<int> nvrtc_supported_archs();

/// How a kernel is built for a device of compute capability `device_arch` (90 for 9.0) by an
/// NVRTC that targets `supported` (ascending; empty: assume the device's): a cubin for
/// sm_<device_arch> when it is supported, else PTX for the newest supported architecture below
/// it, which the driver compiles for the device (a GPU newer than the toolkit: each kernel would
/// fail otherwise). A kiln::Error when NVRTC supports nothing at or below the device.
struct CudaTarget {
  int arch = 0;
  bool ptx = false;
};
CudaTarget cuda_target(int device_arch, const std::vector<int>& supported);

}  // namespace kiln::cuda
