// cuda/nvrtc_cuda.cpp -- NVRTC, loaded with dlopen (KILN_CUDA_NVRTC, else the CUDA 13
// or 12 libnvrtc on the library path or in /usr/local/cuda): CUDA C to a cubin for one
// architecture, or to PTX. Needs no GPU. The only file that includes nvrtc.h.
#include "cuda/nvrtc.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "runtime/cuda/library_cuda.h"
#include "runtime/error.h"

namespace kiln::cuda {
namespace {

// clang-format off: one entry a line (the formatter would stair-step them)
#define KILN_NVRTC_FUNCTIONS(X) \
  X(nvrtcVersion)               \
  X(nvrtcGetErrorString)        \
  X(nvrtcCreateProgram)         \
  X(nvrtcDestroyProgram)        \
  X(nvrtcCompileProgram)        \
  X(nvrtcGetProgramLogSize)     \
  X(nvrtcGetProgramLog)         \
  X(nvrtcGetCUBINSize)          \
  X(nvrtcGetCUBIN)              \
  X(nvrtcGetPTXSize)            \
  X(nvrtcGetPTX)
// clang-format on

struct Nvrtc {
#define KILN_NVRTC_DECLARE(fn) decltype(&::fn) fn = nullptr;
  KILN_NVRTC_FUNCTIONS(KILN_NVRTC_DECLARE)
#undef KILN_NVRTC_DECLARE
  bool ok = false;
  std::string reason, version, path;
  std::vector<int> archs;  // what it compiles for (nvrtcGetSupportedArchs, NVRTC 11.2 on)
};

Nvrtc load() {
  Nvrtc n;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("KILN_CUDA_NVRTC"); env && *env) {
    candidates.push_back(env);
  } else {
    candidates = {"libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.13", "libnvrtc.so.12",
                  "/usr/local/cuda/lib64/libnvrtc.so.12"};
  }
  void* lib = nullptr;
  std::string errors;
  for (const std::string& c : candidates) {
    std::string unsuited;
    if (!kiln::cuda::driver_allows(c, &unsuited)) {  // a CUDA 13 NVRTC's code on a 12 driver
      errors += fmt::format("{}{}", errors.empty() ? "" : "; ", unsuited);
      continue;
    }
    lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      n.path = c;
      break;
    }
    errors += fmt::format("{}{}", errors.empty() ? "" : "; ", dlerror());
  }
  if (!lib) {
    n.reason = "NVRTC could not be loaded: " + errors;
    return n;
  }
#define KILN_NVRTC_LOAD(fn) n.fn = reinterpret_cast<decltype(n.fn)>(dlsym(lib, #fn));
  KILN_NVRTC_FUNCTIONS(KILN_NVRTC_LOAD)
#undef KILN_NVRTC_LOAD
#define KILN_NVRTC_CHECK(fn) \
  if (!n.fn) n.reason = fmt::format("NVRTC ({}) lacks {}", n.path, #fn);
  KILN_NVRTC_FUNCTIONS(KILN_NVRTC_CHECK)
#undef KILN_NVRTC_CHECK
  if (!n.reason.empty()) return n;
  int major = 0, minor = 0;
  n.nvrtcVersion(&major, &minor);
  n.version = fmt::format("{}.{}", major, minor);
  auto count = reinterpret_cast<nvrtcResult (*)(int*)>(dlsym(lib, "nvrtcGetNumSupportedArchs"));
  auto archs = reinterpret_cast<nvrtcResult (*)(int*)>(dlsym(lib, "nvrtcGetSupportedArchs"));
  int num = 0;
  if (count && archs && count(&num) == NVRTC_SUCCESS && num > 0) {
    n.archs.resize(static_cast<size_t>(num));
    if (archs(n.archs.data()) != NVRTC_SUCCESS) n.archs.clear();
    std::sort(n.archs.begin(), n.archs.end());
  }
  n.ok = true;
  return n;
}

const Nvrtc& nvrtc() {
  static const Nvrtc n = load();
  return n;
}

const Nvrtc& require(const char* what) {
  const Nvrtc& n = nvrtc();
  if (!n.ok) throw Error(fmt::format("{}: {}", what, n.reason));
  return n;
}

// Every kernel's options besides its architecture. --fmad=false: each op rounds its result, as
// the eager kernels and the CPU's do; contracting x * y - m into one FMA skips a rounding (on an
// H200, layer_norm of a product over a size-1 dim gave x * y - mean != 0, so 1 / it was finite,
// not inf).
const char* const kOptions[] = {"--std=c++17", "--fmad=false"};

// Compiles `source` for sm_<arch> (cubin) or compute_<arch> (PTX); the log in errors.
nvrtcProgram compile(const Nvrtc& n, const std::string& source, int arch, bool cubin, const std::string& name) {
  nvrtcProgram prog = nullptr;
  nvrtcResult r = n.nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS)
    throw Error(fmt::format("nvrtc: cannot create a program for {}: {}", name, n.nvrtcGetErrorString(r)));
  std::string gpu = fmt::format("--gpu-architecture={}_{}", cubin ? "sm" : "compute", arch);
  const char* options[] = {gpu.c_str(), kOptions[0], kOptions[1]};
  r = n.nvrtcCompileProgram(prog, 3, options);
  if (r != NVRTC_SUCCESS) {
    size_t size = 0;
    n.nvrtcGetProgramLogSize(prog, &size);
    std::string log(size, '\0');
    if (size) n.nvrtcGetProgramLog(prog, log.data());
    n.nvrtcDestroyProgram(&prog);
    throw Error(fmt::format("nvrtc: kernel {} does not compile for sm_{} ({}):\n{}", name, arch,
                            n.nvrtcGetErrorString(r), log.c_str()));
  }
  return prog;
}

}  // namespace

bool nvrtc_available() { return nvrtc().ok; }

std::string nvrtc_unavailable_reason() { return nvrtc().reason; }

std::string nvrtc_version() { return require("nvrtc").version; }

std::vector<int> nvrtc_supported_archs() { return require("nvrtc").archs; }

std::string nvrtc_options() { return fmt::format("{} {}", kOptions[0], kOptions[1]); }

std::string compile_cubin(const std::string& source, int arch, const std::string& name) {
  const Nvrtc& n = require("nvrtc");
  nvrtcProgram prog = compile(n, source, arch, true, name);
  size_t size = 0;
  n.nvrtcGetCUBINSize(prog, &size);
  std::string out(size, '\0');
  if (size) n.nvrtcGetCUBIN(prog, out.data());
  n.nvrtcDestroyProgram(&prog);
  if (out.empty()) throw Error(fmt::format("nvrtc: kernel {} compiled to an empty cubin for sm_{}", name, arch));
  return out;
}

std::string compile_ptx(const std::string& source, int arch, const std::string& name) {
  const Nvrtc& n = require("nvrtc");
  nvrtcProgram prog = compile(n, source, arch, false, name);
  size_t size = 0;
  nvrtcResult r = n.nvrtcGetPTXSize(prog, &size);
  std::string out(size, '\0');
  if (r == NVRTC_SUCCESS && size) n.nvrtcGetPTX(prog, out.data());
  n.nvrtcDestroyProgram(&prog);
  if (r != NVRTC_SUCCESS) throw Error(fmt::format("nvrtc: no PTX for kernel {} from this NVRTC ({})", name, n.path));
  if (!out.empty() && out.back() == '\0') out.pop_back();  // the size counts its terminating NUL
  return out;
}

}  // namespace kiln::cuda
