// tests/cuda/host/abi_cuda.h -- how the host CUDA's pieces meet: a "cubin" from the host NVRTC
// is the magic below followed by a shared object, whose kernels are entry points the host
// driver calls to run a whole grid.
#pragma once

#include <ucontext.h>

#include <cstddef>

#define KILN_HOST_CUBIN_MAGIC "KILNHOST"
#define KILN_HOST_CUBIN_MAGIC_SIZE 8

/// Each thread of a block runs on a stack of this many bytes, aligned to its size.
#define KILN_HOST_STACK_BYTES (256u << 10)

struct KilnHostLaunch {
  unsigned grid[3];
  unsigned block[3];
  size_t shared_bytes;
  // The worker thread's scratch, reused launch after launch: a stack for each thread of a block
  // (KILN_HOST_STACK_BYTES each, aligned to that size, so that code running on one finds its
  // thread from its stack pointer) and shared_bytes + 16 bytes of shared memory. The kernels'
  // modules hold no thread_local state of their own: clang 14's LeakSanitizer misreads the
  // dynamic TLS of dlopen'd modules now and then (google/sanitizers#1409, fixed in LLVM 17) and
  // its tracer crashes at exit.
  char* const* stacks;
  unsigned char* shared;
  // The C library's swapcontext, found past a sanitizer's interceptor (driver_cuda.cpp), for
  // each fiber's first entry (emulation_cuda.h): ASan's clears the shadow of the whole stack it
  // switches to, twice per switch. Nothing instrumented runs on the kernels' stacks (the modules
  // are built without sanitizers), so there is no shadow to clear.
  int (*swap)(ucontext_t* from, const ucontext_t* to);
  // KILN_HOST_CUDA_WORKERS (default 1): how many OS threads run the launch's blocks at once.
  // They take the blocks in index order, each with scratch of its own, so inter-block protocols
  // (a split reduction's last-block combine, atomics, fences, a block waiting for a lower one)
  // race here as on a GPU. run_on_workers(l, body, ctx) calls body(ctx, stacks, shared) on each
  // worker (the first on the calling thread) and returns when every call has.
  unsigned workers;
  void (*run_on_workers)(const KilnHostLaunch* l, void (*body)(void* ctx, char* const* stacks, unsigned char* shared),
                         void* ctx);
  void* pool;  // the driver's, for run_on_workers
};

/// The calls by which a thread of the emulation (emulation_cuda.h) waits for others. A module
/// whose text names none of them runs each block's threads one after another, on one fiber:
/// the fiber scheduler would run them in that order anyway, and its two context switches per
/// thread were most of the host CUDA's time (ASan clears a fiber's stack shadow on each). A
/// barrier reached by a module that names none ends the process with a message.
inline constexpr const char* kKilnHostBarrierCalls[] = {"__syncthreads", "__syncwarp", "__shfl"};

/// A kernel `name` of a host cubin is the symbol kiln_host_entry_<name>: it runs every block
/// of the grid, each block's threads as fibers, with the kernel's arguments at params[i] as
/// cuLaunchKernel passes them. Called with launch == nullptr it describes the kernel instead:
/// it writes each parameter's size to ((size_t*)params[0])[i] (64 at most) and their count to
/// params[1], so that the driver copies the arguments when the launch is queued.
using KilnHostEntry = void (*)(const KilnHostLaunch* launch, void** params);
