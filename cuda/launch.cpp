// cuda/launch.cpp -- launching the hand-written kernels (cuda/launch.h).
#include "cuda/launch.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "codegen/cuda/emit.h"
#include "cuda/kernel_cache.h"
#include "runtime/check.h"
#include "runtime/cuda_internal.h"

namespace kiln::cuda {

int sm_count(int device) {
  static std::mutex mu;
  static std::unordered_map<int, int> counts;
  std::lock_guard<std::mutex> lock(mu);
  auto it = counts.find(device);
  if (it == counts.end()) it = counts.emplace(device, std::max(1, multiprocessor_count(device))).first;
  return it->second;
}

void launch_function(const DeviceFunction& fn, const std::vector<uint64_t>& args, int64_t blocks, int device,
                     int64_t shared_bytes, bool whole_grid) {
  KILN_CHECK(!whole_grid || blocks < (int64_t{1} << 31), "cuda launch: a grid of {} blocks, past 2^31 - 1", blocks);
  blocks = whole_grid ? std::max<int64_t>(blocks, 1) : std::clamp<int64_t>(blocks, 1, int64_t{sm_count(device)} * 32);
  unsigned grid[3] = {static_cast<unsigned>(blocks), 1, 1}, block[3] = {codegen::kCudaBlock, 1, 1};
  void* param = const_cast<uint64_t*>(args.data());
  size_t shared = static_cast<size_t>(shared_bytes < 0 ? codegen::kCudaSharedBytes : shared_bytes);
  launch(fn, grid, block, shared, &param);
}

void launch_source(const std::string& source, const std::vector<uint64_t>& args, int64_t blocks, int device,
                   int64_t shared_bytes) {
  const char* op = current_op();
  launch_function(kernel_for(source, device, op ? op : "").fn, args, blocks, device, shared_bytes);
}

DeviceFunction variant_function(const VariantKey& key, int device, std::string (*make)(const void*), const void* ctx) {
  static std::mutex mu;
  static auto* kernels =
      new std::map<std::pair<VariantKey, int>, DeviceFunction>();  // never destroyed, as kernel_for's
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = kernels->find({key, device});
    if (it != kernels->end()) return it->second;
  }
  const char* op = current_op();
  DeviceFunction fn = kernel_for(make(ctx), device, op ? op : "").fn;  // (compiled outside the lock)
  std::lock_guard<std::mutex> lock(mu);
  return kernels->emplace(std::pair{key, device}, fn).first->second;
}

namespace {
thread_local const char* t_op = nullptr;
}
const char* current_op() { return t_op; }
CurrentOp::CurrentOp(const char* op) : previous_(t_op) { t_op = op; }
CurrentOp::~CurrentOp() { t_op = previous_; }

int64_t blocks_for(int64_t threads) { return (threads + codegen::kCudaBlock - 1) / codegen::kCudaBlock; }

void put(std::vector<uint64_t>& w, int64_t v) { w.push_back(static_cast<uint64_t>(v)); }
void put(std::vector<uint64_t>& w, const void* p) { w.push_back(reinterpret_cast<uint64_t>(p)); }
void put(std::vector<uint64_t>& w, const Dims& d) {
  for (int64_t v : d) put(w, v);
}

}  // namespace kiln::cuda
