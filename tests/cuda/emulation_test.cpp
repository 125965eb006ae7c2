// tests/cuda/emulation_test.cpp -- the host CUDA runs CUDA C honestly: hand-written kernels,
// compiled by the host NVRTC and launched through kiln's module loader on the host driver. A
// block reduction is right with its __syncthreads and wrong without it; warp shuffles exchange
// values between the 32 lanes; grids of several blocks see their indices; a barrier that not
// every thread reaches ends the process. The real NVRTC compiles the same kernels for sm_80
// and sm_90 (Nvrtc.*, run by ctest cuda_nvrtc with the toolkit's NVRTC).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/nvrtc.h"
#include "runtime/cuda_internal.h"

namespace kiln {
namespace {

bool host_driver_and_nvrtc() {
  const char* d = std::getenv("KILN_CUDA_DRIVER");
  const char* n = std::getenv("KILN_CUDA_NVRTC");
  return d && n && std::string(d).find("kiln_host_cuda") != std::string::npos &&
         std::string(n).find("kiln_host_cuda") != std::string::npos;
}

#define REQUIRE_HOST_NVRTC() \
  if (!host_driver_and_nvrtc()) GTEST_SKIP() << "KILN_CUDA_DRIVER and KILN_CUDA_NVRTC do not name the host CUDA"

// Sums 256 values per block in shared memory: a tree that needs a barrier between levels.
const char* kBlockSum = R"(
extern "C" __global__ void block_sum(const float* in, float* out) {
  float* s = kiln_shared<float>();
  unsigned t = threadIdx.x;
  s[t] = in[blockIdx.x * blockDim.x + t];
  SYNC;
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) s[t] += s[t + stride];
    SYNC;
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
)";

// The same over a warp with shuffles, in a grid-stride loop.
const char* kWarpSum = R"(
extern "C" __global__ void warp_sum(const float* in, float* out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  float v = 0;
  for (; i < n; i += (long long)gridDim.x * blockDim.x) v += in[i];
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  if (threadIdx.x % 32 == 0) atomicAdd(out, v);
}
)";

// Device code for the kernels above when a real NVRTC compiles them.
const char* kDevicePrelude = R"(
#ifndef KILN_HOST_CUDA
template <typename T> __device__ T* kiln_shared() { extern __shared__ __align__(16) unsigned char s[]; return (T*)s; }
#endif
)";

std::string with_sync(const char* src, bool sync) {
  return std::string(kDevicePrelude) + (sync ? "#define SYNC __syncthreads()\n" : "#define SYNC\n") + src;
}

cuda::DeviceFunction load(const std::string& src, const std::string& name) {
  std::string cubin = cuda::compile_cubin(src, cuda::compute_capability(0), name);
  return cuda::load_function(0, cubin, name);
}

std::vector<float> block_sums(bool sync) {
  Tensor in = arange(1024).to(f32).to(cuda::device(0));
  Tensor out = empty({4}, f32, cuda::device(0));
  cuda::DeviceFunction f = load(with_sync(kBlockSum, sync), "block_sum");
  void* a = in.data_ptr();
  void* b = out.data_ptr();
  void* args[] = {&a, &b};
  unsigned grid[3] = {4, 1, 1}, block[3] = {256, 1, 1};
  cuda::launch(f, grid, block, 256 * sizeof(float), args);
  return out.to(cpu).to_vector<float>();
}

// Each block's first thread counts itself in, then waits (a bounded while) until every block
// of the grid has: they meet only if the blocks run at once.
const char* kMeet = R"(
extern "C" __global__ void meet(unsigned* started, unsigned* met) {
  if (threadIdx.x != 0) return;
  atomicAdd(started, 1u);
  for (long long i = 0; i < (1ll << 34) && atomicAdd(started, 0u) < gridDim.x; ++i) {
  }
  if (atomicAdd(started, 0u) == gridDim.x) atomicAdd(met, 1u);
}
)";

// With KILN_HOST_CUDA_WORKERS (ctest cuda_concurrent_blocks: 4), a launch's blocks run on that
// many OS threads at once, as a GPU's multiprocessors run them: two blocks that wait for each
// other meet. (Blocks run one after another, the first would wait out its bound alone.)
TEST(HostCuda, BlocksRunAtOnceOnSeveralWorkers) {
  REQUIRE_HOST_NVRTC();
  const char* w = std::getenv("KILN_HOST_CUDA_WORKERS");
  if (!w || std::atoi(w) < 2) GTEST_SKIP() << "KILN_HOST_CUDA_WORKERS is below 2: blocks run one after another";
  Tensor counts = zeros({2}, DType::I32, cuda::device(0));
  cuda::DeviceFunction f = load(kMeet, "meet");
  void* started = counts.data_ptr();
  void* met = static_cast<int32_t*>(counts.data_ptr()) + 1;
  void* args[] = {&started, &met};
  unsigned grid[3] = {2, 1, 1}, block[3] = {32, 1, 1};
  cuda::launch(f, grid, block, 0, args);
  EXPECT_EQ(counts.to(cpu).to_vector<int32_t>(), (std::vector<int32_t>{2, 2}));
}

// Two blocks that meet as above, then both write one word, with nothing ordering the writes: a
// data race. scripts/sanitize.sh runs these two in its ThreadSanitizer build of the host CUDA
// and passes only if TSan reports each, with SYNC a barrier (the block's threads are fibers)
// and without (they run one after another): its runs of the reduction, attention and sort
// tests would be silent about a race it cannot see.
const char* kUnorderedWrites = R"(
extern "C" __global__ void unordered_writes(unsigned* started, unsigned* word) {
  SYNC;
  if (threadIdx.x != 0) return;
  atomicAdd(started, 1u);
  for (long long i = 0; i < (1ll << 34) && atomicAdd(started, 0u) < gridDim.x; ++i) {
  }
  // The second block writes a little later: TSan misses two accesses made at the same moment
  // (each checks the word's history before the other has written to it).
  for (volatile int i = 0; blockIdx.x == 1 && i < 100000; i = i + 1) {
  }
  *word = blockIdx.x + 1;
}
)";

void unordered_writes(bool sync) {
  const char* w = std::getenv("KILN_HOST_CUDA_WORKERS");
  if (!w || std::atoi(w) < 2) GTEST_SKIP() << "KILN_HOST_CUDA_WORKERS is below 2: blocks run one after another";
  // The word 64 bytes from the counter: TSan keeps the last few accesses per 8 bytes, and the
  // spinning reads of a counter beside it could push the first write out.
  Tensor counts = zeros({17}, DType::I32, cuda::device(0));
  cuda::DeviceFunction f = load(with_sync(kUnorderedWrites, sync), "unordered_writes");
  void* started = counts.data_ptr();
  void* word = static_cast<int32_t*>(counts.data_ptr()) + 16;
  void* args[] = {&started, &word};
  unsigned grid[3] = {2, 1, 1}, block[3] = {32, 1, 1};
  cuda::launch(f, grid, block, 0, args);
  std::vector<int32_t> got = counts.to(cpu).to_vector<int32_t>();
  EXPECT_EQ(got[0], 2);
  EXPECT_TRUE(got[16] == 1 || got[16] == 2) << got[16];
}

TEST(HostCuda, PlantedRaceBetweenBlocksWithBarriers) {
  REQUIRE_HOST_NVRTC();
  unordered_writes(true);
}

TEST(HostCuda, PlantedRaceBetweenBlocksWithoutBarriers) {
  REQUIRE_HOST_NVRTC();
  unordered_writes(false);
}

TEST(HostCuda, ABlockReductionIsRightWithItsBarriers) {
  REQUIRE_HOST_NVRTC();
  std::vector<float> want;
  for (int b = 0; b < 4; ++b) want.push_back(float(256 * 256 * b + 255 * 256 / 2));
  EXPECT_EQ(block_sums(true), want);
}

TEST(HostCuda, ABlockReductionWithoutBarriersIsWrong) {
  REQUIRE_HOST_NVRTC();
  std::vector<float> got = block_sums(false);
  float want0 = 255 * 256 / 2;
  EXPECT_NE(got[0], want0) << "a kernel missing __syncthreads gave the right sum: the emulation runs threads in "
                              "lockstep, so it cannot catch a missing barrier";
}

TEST(HostCuda, WarpShufflesExchangeBetweenLanesAcrossAGrid) {
  REQUIRE_HOST_NVRTC();
  int64_t n = 10000;
  Tensor in = arange(n).to(f32).to(cuda::device(0));
  Tensor out = zeros({1}).to(cuda::device(0));
  cuda::DeviceFunction f = load(with_sync(kWarpSum, true), "warp_sum");
  void* a = in.data_ptr();
  void* b = out.data_ptr();
  long long count = n;
  void* args[] = {&a, &b, &count};
  unsigned grid[3] = {3, 1, 1}, block[3] = {64, 1, 1};
  cuda::launch(f, grid, block, 0, args);
  EXPECT_EQ(out.to(cpu).item<float>(), float(n * (n - 1) / 2));
}

// Launches kernel `name` of `src` on one warp, writing out[threadIdx.x], and waits for it.
void launch_one_warp(const char* src, const char* name) {
  Tensor out = empty({32}, f32, cuda::device(0));
  cuda::DeviceFunction f = load(src, name);
  void* a = out.data_ptr();
  void* args[] = {&a};
  unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
  cuda::launch(f, grid, block, 0, args);
  cuda::synchronize();
}

TEST(HostCuda, ABarrierNotEveryThreadReachesEndsTheProcess) {
  REQUIRE_HOST_NVRTC();
  const char* src = R"(
extern "C" __global__ void divergent(float* out) {
  if (threadIdx.x < 16) __syncthreads();  // half the block waits here, half at the warp's
  else __syncwarp();
  out[threadIdx.x] = 1;
}
)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(launch_one_warp(src, "divergent"), "deadlocked");
}

// A module whose text names no barrier runs its threads one after another on one fiber
// (abi_cuda.h); a barrier it reaches anyway, through a name pasted together, is not run wrong.
TEST(HostCuda, ABarrierTheModulesTextDoesNotNameEndsTheProcess) {
  REQUIRE_HOST_NVRTC();
  const char* src = R"(
#define KILN_PASTE(a, b) a##b
extern "C" __global__ void hidden(float* out) {
  KILN_PASTE(__sync, threads)();
  out[threadIdx.x] = 1;
}
)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(launch_one_warp(src, "hidden"), "does not name");
}

// The toolkit's NVRTC compiles the same CUDA C for the architectures kiln supports.
TEST(Nvrtc, CompilesTheEmulationKernelsForSm80AndSm90) {
  if (host_driver_and_nvrtc()) GTEST_SKIP() << "run by ctest cuda_nvrtc with the toolkit's NVRTC";
  if (!cuda::nvrtc_available()) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  for (int arch : {80, 90}) {
    EXPECT_FALSE(cuda::compile_cubin(with_sync(kBlockSum, true), arch, "block_sum").empty());
    EXPECT_FALSE(cuda::compile_cubin(with_sync(kWarpSum, true), arch, "warp_sum").empty());
    std::string ptx = cuda::compile_ptx(with_sync(kWarpSum, true), arch, "warp_sum");
    EXPECT_NE(ptx.find(".entry warp_sum"), std::string::npos) << ptx.substr(0, 400);
  }
  try {
    cuda::compile_cubin("extern \"C\" __global__ void broken( {", 90, "broken");
    ADD_FAILURE() << "a kernel with a syntax error compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel broken does not compile for sm_90"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
