// cuda/launch.h -- launching the CUDA layer's hand-written kernels (codegen/cuda's indexed,
// sort, matmul, pool, random and attention kernels): at most 32 blocks per multiprocessor (the
// kernels loop over what is left), each device's multiprocessor count asked once, and their
// argument words. Fused groups' grids are codegen/cuda/launch.h's (cuda/group.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dims.h"

namespace kiln::cuda {

/// Multiprocessors of CUDA device `device` (asked once per device).
int sm_count(int device);
/// Launches `source` (its one argument: the words `args`) with `blocks` blocks of kCudaBlock
/// threads, at most 32 per multiprocessor: the kernels loop over what is left. Dynamic shared
/// memory: `shared_bytes`, or kCudaSharedBytes when negative.
void launch_source(const std::string& source, const std::vector<uint64_t>& args, int64_t blocks, int device,
                   int64_t shared_bytes = -1);
/// The op whose kernel runs on this thread (cuda/op_table.cpp's dispatch sets it), or nullptr:
/// what names the hand-written kernels it launches for the profiler.
const char* current_op();
/// Sets current_op() while it lives.
class CurrentOp {
 public:
  explicit CurrentOp(const char* op);
  ~CurrentOp();
  CurrentOp(const CurrentOp&) = delete;
  CurrentOp& operator=(const CurrentOp&) = delete;

 private:
  const char* previous_;
};
/// Blocks of kCudaBlock threads for `threads` threads.
int64_t blocks_for(int64_t threads);
/// Appends argument words for a hand-written kernel.
void put(std::vector<uint64_t>& w, int64_t v);
void put(std::vector<uint64_t>& w, const void* p);
void put(std::vector<uint64_t>& w, const Dims& d);

}  // namespace kiln::cuda
