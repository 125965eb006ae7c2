// codegen/cuda/nvrtc.h -- CUDA C to device code with NVRTC, which needs no GPU (std types only;
// nvrtc_cuda.cpp loads libnvrtc at run time). Without the CUDA toolkit at configure time,
// codegen/cuda/unavailable.cpp says so.
#pragma once

#include <string>

namespace kiln::codegen::cuda {

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
/// The PTX of `source` for compute_<arch>, for reading (kiln-ir codegen --ptx).
std::string compile_ptx(const std::string& source, int arch, const std::string& name);

}  // namespace kiln::codegen::cuda
