// tests/cuda/host/nvrtc_cuda.cpp -- the host CUDA's NVRTC: the NVRTC calls kiln makes, with
// nvrtc.h's prototypes, compiling the same CUDA C for the host. The source is compiled by the
// host's C++ compiler (KILN_HOST_CUDA_CXX, else the one that built the tests) with
// emulation_cuda.h included first, and for each `__global__ [__launch_bounds__(n)] void name(` an entry point
// kiln_host_entry_name is appended; the "cubin" is the magic of abi_cuda.h, the size and the
// shared object, which the host driver loads. kiln loads it instead of libnvrtc when
// KILN_CUDA_NVRTC names it. Compiled kernels are kept (below, kept_kernel): the host compiler's
// work was most of the CUDA suites' time, and it is the stand-in's, not kiln's. Its version is 0.1, so kiln's disk
// cache never mixes its cubins with a real NVRTC's.
#include <nvrtc.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/cuda/host/abi_cuda.h"

#ifndef KILN_HOST_CUDA_DIR
#error "KILN_HOST_CUDA_DIR (the folder of emulation_cuda.h) must be defined"
#endif
#ifndef KILN_SOURCE_DIR
#error "KILN_SOURCE_DIR (kiln's source folder, for runtime/half.h) must be defined"
#endif
#ifndef KILN_HOST_CUDA_DEFAULT_CXX
#define KILN_HOST_CUDA_DEFAULT_CXX "c++"
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KILN_HOST_NVRTC_TSAN 1
#endif
#endif

struct _nvrtcProgram {
  std::string source, name, log, cubin;
};

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Runs argv with its output (stdout and stderr) in log_path; returns its exit status.
int run(const std::vector<std::string>& argv, const std::string& log_path) {
  // The child's freopen would flush what the program's stdout holds unwritten a second time.
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(log_path.c_str(), "w", stdout);
    if (f) dup2(fileno(stdout), 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Writes text to path once: made under a name of its own and linked into place, so a concurrent
// process sees the whole file or none, and a file already there is never rewritten.
bool write_once(const std::string& path, const std::string& text) {
  if (access(path.c_str(), R_OK) == 0) return true;
  std::string t = path + "-XXXXXX";
  int fd = mkstemp(t.data());
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (ok && link(t.c_str(), path.c_str()) != 0 && errno != EEXIST) ok = false;
  unlink(t.c_str());
  return ok;
}

// The emulation header, precompiled (most of a kernel's compile is the header): the compiler
// takes emulation_cuda.h.gch beside the emulation_cuda.h it is told to include when the flags
// match. Kept per user in $TMPDIR/kiln-host-nvrtc-<uid>/<hash of the headers, compiler and
// flags>, with copies of every header the PCH reads (emulation_cuda.h, abi_cuda.h and
// runtime/half.h; its quoted includes find the copies beside it first). Clang's PCH checks the
// time of each header it read: had it read the checkout's, a fresh clone of the same sources
// (same hash, newer times) would be refused. The copies are made once and never rewritten; each
// .gch is built under a name of its own and renamed into place, so concurrent processes never
// see half of one. The plain header when it cannot be made.
// The folder of the precompiled header, keyed by the compiler, its flags and the headers; empty
// where it could not be made.
std::string keyed_dir;

std::string header_to_include(const std::string& cxx, const std::vector<std::string>& flags) {
  static std::mutex mu;
  static std::string path;
  std::lock_guard<std::mutex> lock(mu);
  if (!path.empty()) return path;
  path = KILN_HOST_CUDA_DIR "/emulation_cuda.h";
  const std::pair<const char*, std::string> headers[] = {
      {"emulation_cuda.h", read_file(path)},
      {"abi_cuda.h", read_file(KILN_HOST_CUDA_DIR "/abi_cuda.h")},
      {"runtime/half.h", read_file(KILN_SOURCE_DIR "/runtime/half.h")},
  };
  // The layout's version leads the key: a .gch an older layout built (in a folder since
  // removed) would name a header that is gone.
  std::string key = "layout 3\n" + cxx;
  for (const auto& [name, text] : headers) key += std::string("\n") + name + "\n" + text;
  // The -I folders are left out: what they supply is in the key already (the headers' text), and
  // a clone in another folder (CI's) then finds the kernels a developer's run kept.
  for (const std::string& f : flags)
    if (f.rfind("-I", 0) != 0) key += " " + f;
  const char* tmp = std::getenv("TMPDIR");
  std::string root = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-host-nvrtc-" + std::to_string(getuid());
  mkdir(root.c_str(), 0700);
  std::string dir = root + "/" + std::to_string(std::hash<std::string>{}(key));
  mkdir(dir.c_str(), 0700);
  mkdir((dir + "/runtime").c_str(), 0700);
  mkdir((dir + "/kernels").c_str(), 0700);
  keyed_dir = dir;
  std::string header = dir + "/emulation_cuda.h", gch = header + ".gch";
  if (access(gch.c_str(), R_OK) == 0) return path = header;
  for (const auto& [name, text] : headers)
    if (!write_once(dir + "/" + name, text)) return path;
  std::string t = dir + "/gch-XXXXXX";
  int fd = mkstemp(t.data());
  if (fd < 0) return path;
  close(fd);
  std::vector<std::string> argv = {cxx};
  argv.insert(argv.end(), flags.begin(), flags.end());
  for (const std::string& a : {std::string("-x"), std::string("c++-header"), header, std::string("-o"), t})
    argv.push_back(a);
  bool built = run(argv, t + ".log") == 0 && rename(t.c_str(), gch.c_str()) == 0;
  unlink(t.c_str());
  unlink((t + ".log").c_str());
  if (built || access(gch.c_str(), R_OK) == 0) path = header;
  return path;
}

// Kernels compiled before, by this compiler with these flags and headers (keyed_dir), kept under
// a hash of their source: a CUDA suite compiles the same kernels in many processes (each test
// is one), the sanitizer suite again, and CI again on the same sources. kiln's side runs as
// ever (its NVRTC calls, its own kernel cache, emptied for each suite, and module loading);
// only the host compiler's output is reused. A kept kernel is used only when the source kept
// beside it is the same text; the shared object is linked into place first, the source last,
// so a reader never finds half of one. KILN_HOST_NVRTC_KEEP=0 compiles every time.
std::string kept_path(const std::string& source) {
  const char* keep = std::getenv("KILN_HOST_NVRTC_KEEP");
  if (keyed_dir.empty() || (keep && std::string(keep) == "0")) return "";
  return keyed_dir + "/kernels/" + std::to_string(std::hash<std::string>{}(source));
}

bool kept_kernel(const std::string& kept, const std::string& source, std::string& so) {
  if (kept.empty() || access((kept + ".cpp").c_str(), R_OK) != 0 || read_file(kept + ".cpp") != source) return false;
  so = read_file(kept + ".so");
  return !so.empty();
}

}  // namespace

extern "C" {

const char* nvrtcGetErrorString(nvrtcResult r) {
  switch (r) {
    case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
    case NVRTC_ERROR_COMPILATION: return "NVRTC_ERROR_COMPILATION";
    case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    default: return "NVRTC_ERROR_INTERNAL_ERROR";
  }
}

nvrtcResult nvrtcVersion(int* major, int* minor) {
  *major = 0;
  *minor = 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int num_headers,
                               const char* const*, const char* const*) {
  if (!prog || !src || num_headers != 0) return NVRTC_ERROR_INVALID_INPUT;
  *prog = new _nvrtcProgram{src, name ? name : "kernel.cu", "", ""};
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
  delete *prog;
  *prog = nullptr;
  return NVRTC_SUCCESS;
}

// The options (architecture, standard, fast math) are NVRTC's: the host compile ignores them.
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int, const char* const*) {
  std::string source = prog->source;
  std::set<std::string> kernels;
  std::regex global(R"(__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(\w+)\s*\()");
  for (auto it = std::sregex_iterator(source.begin(), source.end(), global); it != std::sregex_iterator(); ++it)
    kernels.insert((*it)[1]);
  bool barriers = false;
  for (const char* call : kKilnHostBarrierCalls) barriers = barriers || source.find(call) != std::string::npos;
  source += "\n// entry points for the host driver (tests/cuda/host/abi_cuda.h)\n";
  for (const std::string& k : kernels)
    source += "extern \"C\" void kiln_host_entry_" + k + "(const KilnHostLaunch* l, void** p) { kiln_host::entry(" + k +
              (barriers ? ", true" : ", false") + ", l, p); }\n";
  const char* env_cxx = std::getenv("KILN_HOST_CUDA_CXX");
  std::string cxx = env_cxx && *env_cxx ? env_cxx : KILN_HOST_CUDA_DEFAULT_CXX;
  std::vector<std::string> flags = {
      "-std=c++20", "-O1", "-g0", "-fPIC", "-w", "-ffp-contract=off", "-I" KILN_HOST_CUDA_DIR, "-I" KILN_SOURCE_DIR};
#if KILN_HOST_NVRTC_TSAN
  // In a ThreadSanitizer build the kernels are instrumented too, so races between blocks on
  // several workers (KILN_HOST_CUDA_WORKERS) are reported with the kernel's lines.
  flags.insert(flags.end(), {"-fsanitize=thread", "-gline-tables-only"});
#endif
  std::string header = header_to_include(cxx, flags);
  std::string kept = kept_path(source), so;
  auto set_cubin = [&] {
    uint64_t size = so.size();
    prog->cubin.assign(KILN_HOST_CUBIN_MAGIC, KILN_HOST_CUBIN_MAGIC_SIZE);
    prog->cubin.append(reinterpret_cast<const char*>(&size), sizeof size);
    prog->cubin += so;
  };
  if (kept_kernel(kept, source, so)) {
    prog->log.clear();
    set_cubin();
    return NVRTC_SUCCESS;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-host-nvrtc-XXXXXX";
  std::vector<char> dir(pattern.begin(), pattern.end());
  dir.push_back('\0');
  if (!mkdtemp(dir.data())) {
    prog->log = "host NVRTC: cannot make a temporary folder like " + pattern;
    return NVRTC_ERROR_INTERNAL_ERROR;
  }
  std::string d = dir.data();
  std::string src_path = d + "/kernel.cpp", so_path = d + "/kernel.so", log_path = d + "/log.txt";
  std::ofstream(src_path) << source;
  std::vector<std::string> argv = {cxx};
  argv.insert(argv.end(), flags.begin(), flags.end());
  for (const std::string& a : {std::string("-shared"), std::string("-include"), header, std::string("-x"),
                               std::string("c++"), src_path, std::string("-o"), so_path})
    argv.push_back(a);
  int status = run(argv, log_path);
  prog->log = read_file(log_path);
  if (status == 0) {
    so = read_file(so_path);
    set_cubin();
    if (!kept.empty() && !so.empty() && write_once(kept + ".so", so)) write_once(kept + ".cpp", source);
  }
  for (const std::string& f : {src_path, so_path, log_path}) unlink(f.c_str());
  rmdir(d.c_str());
  return status == 0 ? NVRTC_SUCCESS : NVRTC_ERROR_COMPILATION;
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* size) {
  if (prog->cubin.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
  *size = prog->cubin.size();
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) {
  std::memcpy(cubin, prog->cubin.data(), prog->cubin.size());
  return NVRTC_SUCCESS;
}

// The host's "PTX" is its cubin (with the terminating NUL a PTX has): what kiln loads for a
// device newer than the architectures below, which the host driver runs as any module.
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t* size) {
  if (prog->cubin.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
  *size = prog->cubin.size() + 1;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char* ptx) {
  std::memcpy(ptx, prog->cubin.data(), prog->cubin.size());
  ptx[prog->cubin.size()] = '\0';
  return NVRTC_SUCCESS;
}

// As CUDA 13's NVRTC (sm_75 to sm_90 of them): a device past sm_90 (KILN_HOST_CUDA_CC) gets PTX.
const int kArchs[] = {75, 80, 86, 89, 90};
nvrtcResult nvrtcGetNumSupportedArchs(int* n) {
  *n = static_cast<int>(sizeof kArchs / sizeof kArchs[0]);
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetSupportedArchs(int* archs) {
  std::memcpy(archs, kArchs, sizeof kArchs);
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* size) {
  *size = prog->log.size() + 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log) {
  std::memcpy(log, prog->log.c_str(), prog->log.size() + 1);
  return NVRTC_SUCCESS;
}

}  // extern "C"
