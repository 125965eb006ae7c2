// jit/cuda_launch.cpp -- launching the CUDA backend's kernels (jit/cuda_eager.h): at most 32
// blocks per multiprocessor (the kernels loop over what is left), with each device's
// multiprocessor count asked once; and the argument words of the hand-written kernels. The
// generated kernels' grids are codegen/cuda/launch.h's.
#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "codegen/cuda/emit.h"
#include "jit/cuda_eager.h"
#include "jit/kernels.h"
#include "runtime/cuda_kernels.h"

namespace kiln::jit::cuda_eager {

int sm_count(int device) {
  static std::mutex mu;
  static std::unordered_map<int, int> counts;
  std::lock_guard<std::mutex> lock(mu);
  auto it = counts.find(device);
  if (it == counts.end()) it = counts.emplace(device, std::max(1, cuda::multiprocessor_count(device))).first;
  return it->second;
}

void launch_source(const std::string& source, const std::vector<uint64_t>& args, int64_t blocks, int device,
                   int64_t shared_bytes) {
  blocks = std::clamp<int64_t>(blocks, 1, int64_t{sm_count(device)} * 32);
  CudaKernel k = cuda_kernel_for(source, device);
  unsigned grid[3] = {static_cast<unsigned>(blocks), 1, 1}, block[3] = {codegen::kCudaBlock, 1, 1};
  void* param = const_cast<uint64_t*>(args.data());
  size_t shared = static_cast<size_t>(shared_bytes < 0 ? codegen::kCudaSharedBytes : shared_bytes);
  cuda::launch(k.fn, grid, block, shared, &param);
}
int64_t blocks_for(int64_t threads) { return (threads + codegen::kCudaBlock - 1) / codegen::kCudaBlock; }

void put(std::vector<uint64_t>& w, int64_t v) { w.push_back(static_cast<uint64_t>(v)); }
void put(std::vector<uint64_t>& w, const void* p) { w.push_back(reinterpret_cast<uint64_t>(p)); }
void put(std::vector<uint64_t>& w, const Dims& d) {
  for (int64_t v : d) put(w, v);
}

}  // namespace kiln::jit::cuda_eager
