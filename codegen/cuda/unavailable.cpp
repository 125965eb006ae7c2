// codegen/cuda/unavailable.cpp -- codegen/cuda/nvrtc.h in a kiln built without the CUDA toolkit.
#include "codegen/cuda/nvrtc.h"

#include "runtime/error.h"

namespace kiln::codegen::cuda {
namespace {
const char* kReason = "kiln was built without CUDA (no CUDA toolkit at configure time), so it has no NVRTC";
}

bool nvrtc_available() { return false; }
std::string nvrtc_unavailable_reason() { return kReason; }
std::string nvrtc_version() { throw Error(std::string("nvrtc: ") + kReason); }
std::string nvrtc_options() { throw Error(std::string("nvrtc: ") + kReason); }
std::string compile_cubin(const std::string&, int, const std::string&) { throw Error(std::string("nvrtc: ") + kReason); }
std::string compile_ptx(const std::string&, int, const std::string&) { throw Error(std::string("nvrtc: ") + kReason); }
std::vector<int> nvrtc_supported_archs() { return {}; }

}  // namespace kiln::codegen::cuda
