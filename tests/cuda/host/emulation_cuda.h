// tests/cuda/host/emulation_cuda.h -- what CUDA C needs to compile and run on the host: the
// host NVRTC (nvrtc_cuda.cpp) compiles generated kernels with this header included first.
//
// A launch runs the grid's blocks in index order, one after another on one OS thread, or with
// KILN_HOST_CUDA_WORKERS on that many at once; a block's threads are fibers (ucontext) on its
// OS thread, each running until it reaches a barrier or ends, in thread order. So a
// barrier is a real barrier: __syncthreads() waits for every live thread of the block,
// __syncwarp() and the warp shuffles for the 32 lanes of a warp, and code that reads what
// another thread wrote without one reads what was there before (a block's dynamic shared
// memory starts filled with 0xa5 bytes each time). Barriers no thread can pass end the process
// with a message. Kept small: the subset kiln's generator emits (dynamic shared memory only,
// through kiln_shared<T>()).
#pragma once

#include <ucontext.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "abi_cuda.h"
#include "runtime/half.h"  // the CPU's f16 and bf16 conversions stand in for the hardware's

#define KILN_HOST_CUDA 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// Under ThreadSanitizer (the host NVRTC of a TSan build compiles kernels with it:
// nvrtc_cuda.cpp), the few functions that switch stacks are left uninstrumented: a fiber
// abandoned at the end of a launch, or a function entered on one stack and left on another,
// would otherwise unbalance the OS thread's shadow call stack until it overflows. TSan sees
// each worker's OS thread, not its fibers: a block's threads share one, which is what finds
// races between blocks and never reports two threads of a block ordered by a barrier.
#if defined(__SANITIZE_THREAD__)
#define KILN_HOST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KILN_HOST_TSAN 1
#endif
#endif
#ifdef KILN_HOST_TSAN
#define KILN_HOST_SWITCHES __attribute__((noinline, disable_sanitizer_instrumentation))
#else
#define KILN_HOST_SWITCHES __attribute__((noinline))
#endif

namespace kiln_host {

enum class State { Runnable, AtBlockBarrier, AtWarpBarrier, Done };

struct Block;

// Switching: a fiber is entered the first time with the C library's swapcontext (the one way
// onto a new stack without assembly), and from then on, both ways, with __builtin_setjmp and
// __builtin_longjmp, which keep no signal mask: swapcontext's two system calls per switch were
// most of the host CUDA's time. The builtins save the frame and stack pointers and a resume
// address; the function around each __builtin_setjmp saves every callee-saved register.
// __builtin_longjmp may not be called from the function that holds its __builtin_setjmp, hence
// jump_to.
using JumpBuffer = void* [5];

[[noreturn]] KILN_HOST_SWITCHES inline void jump_to(JumpBuffer& to) { __builtin_longjmp(to, 1); }

// A thread of the block: it lives at the low end of its own stack (abi_cuda.h), so the code
// running on that stack finds it from the stack pointer, with no thread_local. A fiber runs its
// thread of each block of the launch in turn.
struct Fiber {
  ucontext_t context;  // its first entry
  JumpBuffer resume;   // where it waits, once started
  bool started = false;
  dim3 thread_idx;
  unsigned linear = 0;
  State state = State::Runnable;
  Block* block = nullptr;
};

struct Block {
  dim3 block_idx, block_dim, grid_dim;
  unsigned char* shared = nullptr;
  size_t shared_bytes = 0;
  unsigned long long warp_slots[32][32];  // a value per lane, per warp, for shuffles
  ucontext_t scheduler;                   // left by the first entry of each fiber, never resumed
  JumpBuffer scheduler_resume;            // where the scheduler waits while a fiber runs
  int (*swap)(ucontext_t*, const ucontext_t*) = nullptr;  // KilnHostLaunch::swap
  bool straight = false;  // the module has no barrier: threads run one after another (run_grid)
  void (*body)(void*) = nullptr;
  void* body_arg = nullptr;
  std::atomic<unsigned long long>* next = nullptr;  // the launch's next block, shared by its workers
  // What ThreadSanitizer is told of fences (__threadfence), since it models none: a fence makes
  // the worker's next atomic a release, and acquires the one before it.
  bool release_next = false;
  const void* last_atomic = nullptr;
};

constexpr size_t kFiberBytes = (sizeof(Fiber) + 63) / 64 * 64;  // the stack proper starts above it

// Only for code running on a fiber's stack: a kernel's body and what it calls.
inline Fiber& fiber() {
  auto sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  return *reinterpret_cast<Fiber*>(sp & ~static_cast<uintptr_t>(KILN_HOST_STACK_BYTES - 1));
}
inline Block& block() { return *fiber().block; }

// On a fiber: waits in state s until the scheduler resumes it.
KILN_HOST_SWITCHES inline void yield_to_scheduler(State s) {
  Fiber& f = fiber();
  if (f.block->straight) {
    std::fprintf(stderr, "host CUDA: a kernel reached a barrier its module's text does not name "
                         "(abi_cuda.h, kKilnHostBarrierCalls)\n");
    std::abort();
  }
  f.state = s;
  if (__builtin_setjmp(f.resume) == 0) jump_to(f.block->scheduler_resume);
}

// A fiber's life: its thread of each block, parked as done between blocks. Never returns: the
// fibers of a launch are abandoned where they wait when its last block is done.
KILN_HOST_SWITCHES inline void trampoline() {
  for (;;) {
    Fiber& f = fiber();
    f.block->body(f.block->body_arg);
    yield_to_scheduler(State::Done);
  }
}

// On the scheduler: runs fiber f until it waits or its thread is done.
KILN_HOST_SWITCHES inline void resume(Block& b, Fiber& f) {
  if (__builtin_setjmp(b.scheduler_resume) != 0) return;
  if (!f.started) {
    f.started = true;
    b.swap(&b.scheduler, &f.context);
  }
  jump_to(f.resume);
}

// Runs one block: every thread as a fiber, released from barriers when all that can reach
// them have.
inline void run_block(Block& b, Fiber* const* fibers, unsigned threads) {
  for (unsigned i = 0; i < threads; ++i) fibers[i]->state = State::Runnable;
  for (;;) {
    for (unsigned i = 0; i < threads; ++i) {
      Fiber& f = *fibers[i];
      if (f.state == State::Runnable) resume(b, f);
    }
    bool all_done = true, released = false;
    bool block_ready = true;  // every live thread waits at __syncthreads
    for (unsigned i = 0; i < threads; ++i) {
      if (fibers[i]->state != State::Done) all_done = false;
      if (fibers[i]->state != State::Done && fibers[i]->state != State::AtBlockBarrier) block_ready = false;
    }
    if (all_done) break;
    if (block_ready) {
      for (unsigned i = 0; i < threads; ++i)
        if (fibers[i]->state == State::AtBlockBarrier) fibers[i]->state = State::Runnable, released = true;
    }
    for (unsigned w = 0; w * 32 < threads; ++w) {  // each warp whose live lanes all wait
      bool ready = true, any = false;
      for (unsigned i = w * 32; i < threads && i < w * 32 + 32; ++i) {
        if (fibers[i]->state == State::AtWarpBarrier) any = true;
        else if (fibers[i]->state != State::Done) ready = false;
      }
      if (!ready || !any) continue;
      for (unsigned i = w * 32; i < threads && i < w * 32 + 32; ++i)
        if (fibers[i]->state == State::AtWarpBarrier) fibers[i]->state = State::Runnable, released = true;
    }
    if (!released) {
      std::fprintf(stderr, "host CUDA: block (%u,%u,%u) deadlocked: threads wait at barriers the others never reach\n",
                   b.block_idx.x, b.block_idx.y, b.block_idx.z);
      std::abort();
    }
  }
}

// Thread i of a block of dim d, x fastest.
inline dim3 thread_index(unsigned i, dim3 d) { return dim3{i % d.x, (i / d.x) % d.y, i / (d.x * d.y)}; }

// Runs run_one() for each block this worker takes, in index order (x fastest), its shared
// memory refilled with 0xa5.
template <typename F>
void for_each_block(Block& b, F&& run_one) {
  const unsigned long long gx = b.grid_dim.x, gy = b.grid_dim.y, total = gx * gy * b.grid_dim.z;
  for (;;) {
    const unsigned long long u = b.next->fetch_add(1, std::memory_order_relaxed);
    if (u >= total) break;
    std::memset(b.shared, 0xa5, b.shared_bytes + 16);
    b.release_next = false, b.last_atomic = nullptr;
    b.block_idx = dim3{static_cast<unsigned>(u % gx), static_cast<unsigned>(u / gx % gy),
                       static_cast<unsigned>(u / (gx * gy))};
    run_one();
  }
}

// Runs the whole grid on the first thread's fiber, thread after thread: what run_block does
// when no thread ever waits, with one switch per launch.
KILN_HOST_SWITCHES inline void run_straight() {
  Fiber& f = fiber();
  Block& b = *f.block;
  const unsigned threads = b.block_dim.x * b.block_dim.y * b.block_dim.z;
  for_each_block(b, [&] {
    for (unsigned i = 0; i < threads; ++i) {
      f.linear = i;
      f.thread_idx = thread_index(i, b.block_dim);
      b.body(b.body_arg);
    }
  });
  jump_to(b.scheduler_resume);
}

// Runs the blocks of a launch one worker takes, on its scratch (stacks, shared); `body` runs
// the kernel for the current thread. `barriers`: whether the kernel's module names one
// (abi_cuda.h); without, no thread can wait for another.
inline void run_blocks(const KilnHostLaunch& l, bool barriers, void (*body)(void*), void* arg, char* const* stacks,
                       unsigned char* shared, std::atomic<unsigned long long>* next) {
  Block b;
  b.next = next;
  b.grid_dim = dim3{l.grid[0], l.grid[1], l.grid[2]};
  b.block_dim = dim3{l.block[0], l.block[1], l.block[2]};
  b.body = body;
  b.body_arg = arg;
  b.shared = shared;
  b.shared_bytes = l.shared_bytes;
  b.swap = l.swap;
  b.straight = !barriers;
  const unsigned threads = b.straight ? 1 : l.block[0] * l.block[1] * l.block[2];
  std::vector<Fiber*> fibers(threads);
  for (unsigned i = 0; i < threads; ++i) {
    Fiber& f = *(fibers[i] = new (stacks[i]) Fiber);
    f.block = &b;
    f.linear = i;
    f.thread_idx = thread_index(i, b.block_dim);
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = stacks[i] + kFiberBytes;
    f.context.uc_stack.ss_size = KILN_HOST_STACK_BYTES - kFiberBytes;
    f.context.uc_link = nullptr;  // neither entry point returns
    makecontext(&f.context, b.straight ? run_straight : trampoline, 0);
  }
  if (b.straight) resume(b, *fibers[0]);
  else for_each_block(b, [&] { run_block(b, fibers.data(), threads); });
}

// Runs every block of a launch, on its workers.
inline void run_grid(const KilnHostLaunch& l, bool barriers, void (*body)(void*), void* arg) {
  std::atomic<unsigned long long> next{0};
  if (l.workers <= 1 || static_cast<unsigned long long>(l.grid[0]) * l.grid[1] * l.grid[2] <= 1)
    return run_blocks(l, barriers, body, arg, l.stacks, l.shared, &next);
  struct Work {
    const KilnHostLaunch* l;
    bool barriers;
    void (*body)(void*);
    void* arg;
    std::atomic<unsigned long long>* next;
  } w{&l, barriers, body, arg, &next};
  l.run_on_workers(&l, [](void* ctx, char* const* stacks, unsigned char* shared) {
    const Work& w = *static_cast<const Work*>(ctx);
    run_blocks(*w.l, w.barriers, w.body, w.arg, stacks, shared, w.next);
  }, &w);
}

template <typename... A, size_t... I>
void call(void (*f)(A...), void** p, std::index_sequence<I...>) {
  f(*static_cast<A*>(p[I])...);
}

// A kernel's entry: runs its grid, or describes its parameters (abi_cuda.h).
template <typename... A>
void entry(void (*f)(A...), bool barriers, const KilnHostLaunch* l, void** p) {
  if (!l) {
    size_t sizes[] = {sizeof(A)..., 0};
    std::memcpy(p[0], sizes, sizeof...(A) * sizeof(size_t));
    p[1] = reinterpret_cast<void*>(sizeof...(A));
    return;
  }
  struct Closure {
    void (*f)(A...);
    void** p;
  } c{f, p};
  run_grid(*l, barriers, [](void* arg) {
    auto* c = static_cast<Closure*>(arg);
    call(c->f, c->p, std::index_sequence_for<A...>{});
  }, &c);
}

template <typename T>
T shuffle(T v, unsigned lane_from) {
  static_assert(sizeof(T) <= 8, "a shuffled value is at most 8 bytes");
  Fiber& f = fiber();
  unsigned warp = f.linear / 32, lane = f.linear % 32;
  unsigned long long bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  block().warp_slots[warp][lane] = bits;
  yield_to_scheduler(State::AtWarpBarrier);
  bits = block().warp_slots[warp][lane_from % 32];
  yield_to_scheduler(State::AtWarpBarrier);  // nobody overwrites a slot still to be read
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}

inline unsigned lane() { return fiber().linear % 32; }

}  // namespace kiln_host

#define threadIdx (kiln_host::fiber().thread_idx)
#define blockIdx (kiln_host::block().block_idx)
#define blockDim (kiln_host::block().block_dim)
#define gridDim (kiln_host::block().grid_dim)
#define warpSize 32

inline void __syncthreads() { kiln_host::yield_to_scheduler(kiln_host::State::AtBlockBarrier); }
// Blocks on several workers see each other's writes in the order a fence gives. A device's
// atomics are relaxed, and blocks order their writes by a fence before an atomic (a release)
// and one after it (an acquire), as a split reduction's last block does (codegen/cuda/emit.cpp).
// ThreadSanitizer models no fences (LLVM 14's fence hook does nothing), so under it the fence
// is told as those orders on the atomics themselves: the next atomic of the block's worker
// releases, and the last one is read again with acquire.
inline void __threadfence() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#ifdef KILN_HOST_TSAN
  kiln_host::Block& b = kiln_host::block();
  if (b.last_atomic) (void)__atomic_load_n(static_cast<const unsigned char*>(b.last_atomic), __ATOMIC_ACQUIRE);
  b.release_next = true;
#endif
}
inline void __syncwarp(unsigned = 0xffffffffu) { kiln_host::yield_to_scheduler(kiln_host::State::AtWarpBarrier); }

template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int = 32) {
  return kiln_host::shuffle(v, kiln_host::lane() ^ static_cast<unsigned>(lane_mask));
}
template <typename T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int = 32) {
  unsigned from = kiln_host::lane() + delta;
  return kiln_host::shuffle(v, from < 32 ? from : kiln_host::lane());
}
template <typename T>
T __shfl_sync(unsigned, T v, int src_lane, int = 32) {
  return kiln_host::shuffle(v, static_cast<unsigned>(src_lane));
}

/// The block's dynamic shared memory (extern __shared__ on a device).
template <typename T>
T* kiln_shared() {
  return reinterpret_cast<T*>(kiln_host::block().shared);
}

inline float kiln_f32(unsigned b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline double kiln_f64(unsigned long long b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}
inline unsigned short kiln_f2h(float f) { return kiln::Half::from_float(f); }
inline float kiln_h2f(unsigned short h) { return kiln::Half::to_float(h); }
inline unsigned short kiln_f2bf(float f) { return kiln::BFloat16::from_float(f); }
inline float kiln_bf2f(unsigned short b) { return kiln::BFloat16::to_float(b); }

template <typename T>
T atomicAdd(T* address, T v) {
  int order = __ATOMIC_RELAXED;
#ifdef KILN_HOST_TSAN
  kiln_host::Block& b = kiln_host::block();
  if (b.release_next) order = __ATOMIC_RELEASE;
  b.release_next = false, b.last_atomic = address;
#endif
  T expected, desired;
  __atomic_load(address, &expected, __ATOMIC_RELAXED);
  do {
    desired = expected + v;
  } while (!__atomic_compare_exchange(address, &expected, &desired, false, order, __ATOMIC_RELAXED));
  return expected;
}

// A flag another block sets: read with acquire, written with release (ld.acquire.gpu and
// st.release.gpu on a device: codegen/cuda/attention_mma.cpp).
inline unsigned kiln_load_acquire(const unsigned* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void kiln_store_release(unsigned* p, unsigned v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

// The warp-level matrix instructions (wmma: codegen/cuda/attention_mma.cpp) on 16x16 tiles.
// A device spreads a fragment over the warp's lanes in a layout of its own; here each lane
// holds the whole tile, so code that reads a fragment's elements (which no kernel may) gets
// no layout it could come to rely on. A store writes only the lane's share of the tile
// (every 32nd element), so a lane that reads another's part before a __syncwarp reads what
// was there before, as on a device. Misaligned pointers or strides end the process, as the
// instruction faults on a device.
namespace kiln_host {
struct MmaTile {
  float v[256];
};
inline void mma_check(const void* p, int ld, int bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ld * bytes) % 16 != 0 || ld < 16) {
    std::fprintf(stderr, "host CUDA: wmma.%s at %p with stride %d: misaligned\n", what, p, ld);
    std::abort();
  }
}
inline void mma_zero(MmaTile& t) {
  for (float& x : t.v) x = 0.f;
}
/// Element (r, c) of the tile from p[r * ld + c], or from p[c * ld + r] when `transposed`
/// (a B operand read column-major); f16 or bf16 bits.
inline void mma_load(MmaTile& t, const unsigned short* p, int ld, bool transposed, bool bf16) {
  mma_check(p, ld, 2, "load");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      unsigned short bits = transposed ? p[c * ld + r] : p[r * ld + c];
      t.v[r * 16 + c] = bf16 ? kiln::BFloat16::to_float(bits) : kiln::Half::to_float(bits);
    }
}
/// x rounded to TF32 as cvt.rna.tf32.f32 does: 10 mantissa bits, to nearest, ties away from 0.
inline float tf32(float x) {
  unsigned bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & ~0x1fffu;
  std::memcpy(&x, &bits, 4);
  return x;
}
/// As mma_load, from f32 (a tile of the 3xTF32 kernels: two m16n16k8 fragments a device loads
/// from p and its second half): `part` 1 the TF32 rounding of each element, 2 what that leaves,
/// rounded to TF32 in turn.
inline void mma_load_tf32(MmaTile& t, const float* p, int ld, bool transposed, int part) {
  mma_check(p, ld, 4, "load");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      const float x = transposed ? p[c * ld + r] : p[r * ld + c];
      t.v[r * 16 + c] = part == 1 ? tf32(x) : tf32(x - tf32(x));
    }
}
/// d += a b, in f32.
inline void mma(MmaTile& d, const MmaTile& a, const MmaTile& b) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      float s = d.v[r * 16 + c];
      for (int k = 0; k < 16; ++k) s += a.v[r * 16 + k] * b.v[k * 16 + c];
      d.v[r * 16 + c] = s;
    }
}
inline void mma_store(float* p, const MmaTile& t, int ld) {
  mma_check(p, ld, 4, "store");
  for (unsigned e = lane(); e < 256; e += 32) p[e / 16 * ld + e % 16] = t.v[e];
}
}  // namespace kiln_host

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline unsigned __umulhi(unsigned a, unsigned b) { return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
