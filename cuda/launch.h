// cuda/launch.h -- launching the CUDA layer's hand-written kernels (codegen/cuda's indexed,
// sort, matmul, pool, random and attention kernels): at most 32 blocks per multiprocessor (the
// kernels loop over what is left), each device's multiprocessor count asked once, and their
// argument words. Fused groups' grids are codegen/cuda/launch.h's (cuda/group.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "runtime/cuda_internal.h"
#include "runtime/dims.h"

namespace kiln::cuda {

/// Multiprocessors of CUDA device `device` (asked once per device).
int sm_count(int device);
/// Launches `fn` (its one argument: the words `args`) with `blocks` blocks of kCudaBlock
/// threads, at most 32 per multiprocessor: the kernels loop over what is left. Dynamic shared
/// memory: `shared_bytes`, or kCudaSharedBytes when negative. With `whole_grid`, all `blocks`
/// (below 2^31), for a kernel whose blocks wait for lower ones and so cannot loop.
void launch_function(const DeviceFunction& fn, const std::vector<uint64_t>& args, int64_t blocks, int device,
                     int64_t shared_bytes = -1, bool whole_grid = false);
/// A hand-written kernel's variant: its generator and the numbers its text depends on (dtypes,
/// ranks, flags). The text is written, hashed and compiled once per variant, device and
/// process; a launch that has run before finds its kernel from these few words (an eager op's
/// launch costs microseconds, a kernel's text and hash tens of them).
using VariantKey = std::array<int64_t, 10>;
/// The kernel `make(ctx)` writes for `key`, compiled for `device` (make runs on its first use).
DeviceFunction variant_function(const VariantKey& key, int device, std::string (*make)(const void*), const void* ctx);
/// Launches the kernel `generate(args...)` writes (a codegen/cuda generator; its arguments
/// numbers, dtypes, enums or flags: with the generator, the variant's key, so key and text
/// cannot disagree), as launch_function does. The text is written on the variant's first
/// launch on `device` only.
template <class... P, class... A> void launch_generated(std::string (*generate)(P...), const std::tuple<A...>& args,
                                                        const std::vector<uint64_t>& words, int64_t blocks, int device,
                                                        int64_t shared_bytes = -1, bool whole_grid = false) {
  static_assert(sizeof...(A) <= 9, "a variant's key holds the generator and 9 numbers");
  static_assert(((std::is_integral_v<A> || std::is_enum_v<A>)&&...), "a variant's numbers: integers, enums, flags");
  VariantKey key{static_cast<int64_t>(reinterpret_cast<uintptr_t>(generate))};
  std::apply(
      [&](const A&... a) {
        size_t k = 1;
        ((key[k++] = static_cast<int64_t>(a)), ...);
      },
      args);
  struct Call {
    std::string (*generate)(P...);
    const std::tuple<A...>& args;
  } call{generate, args};
  auto make = [](const void* c) -> std::string {
    const Call& m = *static_cast<const Call*>(c);
    return std::apply([&](const A&... a) { return m.generate(a...); }, m.args);
  };
  launch_function(variant_function(key, device, make, &call), words, blocks, device, shared_bytes, whole_grid);
}
/// Launches `source` as launch_function does, compiled through the kernel cache (its text
/// hashed on every call: for kernels whose text varies beyond a variant's numbers).
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
