// tests/cuda/runtime_test.cpp -- the CUDA runtime, on the host CUDA (tests/cuda/host) and on a
// GPU (scripts/run.sh gpu): the driver loaded through dlopen, devices, copies between host and
// devices, streams ordered by events, the caching allocator on device memory, pinned memory,
// errors. The tests that need the host driver's delay or its limits run on it alone.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "tests/cuda/cuda_test.h"
#include "tests/jit/jit_test_util.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

TEST(CudaRuntime, TheHostDriverGivesTwoDevices) {
  REQUIRE_HOST_CUDA();
  ASSERT_TRUE(cuda::is_available()) << cuda::unavailable_reason();
  EXPECT_EQ(cuda::unavailable_reason(), "");
  EXPECT_EQ(cuda::device_count(), 2);
  EXPECT_EQ(cuda::device(1).str(), "cuda:1");
  EXPECT_EQ(Device("cuda:1"), cuda::device(1));
  EXPECT_EQ(Device("cuda"), cuda::device(0));
}

TEST(CudaRuntime, TensorsRoundTripThroughADevice) {
  REQUIRE_CUDA();
  manual_seed(1);
  Tensor x = randn({5, 7});
  Tensor d = x.to(cuda::device(0));
  EXPECT_EQ(d.device(), cuda::device(0));
  EXPECT_EQ(d.type().str(), "f32[5,7]@cuda:0");
  Tensor back = d.to(cpu);
  EXPECT_TRUE(back.device().is_cpu());
  EXPECT_EQ(back.to_vector<float>(), x.to_vector<float>());
  // Through the host's conversions: a transposed source, and a CPU view as destination.
  Tensor t = x.t().to("cuda:0");
  EXPECT_EQ(t.to(cpu).to_vector<float>(), x.t().contiguous().to_vector<float>());
  Tensor dst = zeros({10, 7});
  Tensor view = dst.t().slice(1, 2, 7).t();  // [5,7], strides [1,10]... as rows 2..6
  view.copy_(d);
  EXPECT_EQ(view.contiguous().to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(dst.slice(0, 0, 2).sum().item<float>(), 0.0f) << "written outside the view";
  // item() and to_vector read through the device.
  EXPECT_EQ(d.to(cpu)[2][3].item<float>(), x[2][3].item<float>());
}

TEST(CudaRuntime, CopiesBetweenTwoDevicesGoThroughTheHost) {
  REQUIRE_DEVICES(2);
  Tensor x = arange(12).to(f32).reshape({3, 4});
  Tensor a = x.to(cuda::device(0));
  Tensor b = a.to(cuda::device(1));
  EXPECT_EQ(b.device(), cuda::device(1));
  EXPECT_EQ(b.to(cpu).to_vector<float>(), x.to_vector<float>());
}

TEST(CudaRuntime, HostConversionsOnTheWayIn) {
  REQUIRE_CUDA();
  Tensor x = arange(6).reshape({2, 3});  // i64
  Tensor d = empty({2, 3}, f64, cuda::device(0));
  d.copy_(x);  // converted on the host, then copied
  EXPECT_EQ(d.to(cpu).to_vector<double>(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  Tensor row = empty({4, 3}, f64, cuda::device(0));
  row.copy_(from_vector<double>({7, 8, 9}));  // broadcast on the host
  EXPECT_EQ(row.to(cpu).to_vector<double>(), (std::vector<double>{7, 8, 9, 7, 8, 9, 7, 8, 9, 7, 8, 9}));
}

TEST(CudaRuntime, StreamGuardsSetTheCurrentStream) {
  REQUIRE_CUDA();
  cuda::Stream main = cuda::current_stream();
  EXPECT_EQ(main, cuda::default_stream());
  cuda::Stream side = cuda::Stream::create();
  EXPECT_NE(side.handle(), 0u);
  {
    cuda::StreamGuard g(side);
    EXPECT_EQ(cuda::current_stream(), side);
  }
  EXPECT_EQ(cuda::current_stream(), main);
}

TEST(CudaRuntime, AStreamGuardOnAnotherDeviceSetsTheCurrentDevice) {
  REQUIRE_DEVICES(2);
  cuda::Stream on1 = cuda::Stream::create(1);
  {
    cuda::StreamGuard g(on1);
    EXPECT_EQ(cuda::current_device(), 1);
    EXPECT_EQ(cuda::current_stream(), on1);
  }
  EXPECT_EQ(cuda::current_device(), 0);
}

// The host driver delays every queued task (KILN_HOST_CUDA_DELAY_US in this suite's
// environment), so stream order is really exercised: a read on another stream races the
// writes unless an event orders them.
TEST(CudaRuntime, AnEventOrdersWorkAcrossStreams) {
  REQUIRE_HOST_CUDA();
  cuda::Stream writer = cuda::Stream::create(), reader = cuda::Stream::create();
  Tensor target = empty({1 << 12}, f32, cuda::device(0));
  {
    cuda::StreamGuard g(writer);
    for (int i = 0; i < 40; ++i) target.copy_(full({1 << 12}, 1.0));  // a queue of work
    target.copy_(full({1 << 12}, 3.0));                               // its last write
  }
  cuda::Event written;
  written.record(writer);
  written.block(reader);
  Tensor seen;
  {
    cuda::StreamGuard g(reader);
    seen = target.to(cpu);
  }
  EXPECT_EQ(seen[123].item<float>(), 3.0f) << "the reader ran before the event it waits for";
  EXPECT_TRUE(written.query());
}

TEST(CudaRuntime, WithoutAnEventTheOtherStreamReadsTooEarly) {
  REQUIRE_HOST_CUDA();
  if (!std::getenv("KILN_HOST_CUDA_DELAY_US")) GTEST_SKIP() << "needs the host driver's delay";
  cuda::Stream writer = cuda::Stream::create(), reader = cuda::Stream::create();
  Tensor target = empty({1 << 10}, f32, cuda::device(0));
  target.copy_(full({1 << 10}, 1.0));
  cuda::synchronize();
  {
    cuda::StreamGuard g(writer);
    for (int i = 0; i < 40; ++i) target.copy_(full({1 << 10}, 1.0));
    target.copy_(full({1 << 10}, 2.0));
  }
  Tensor early;
  {
    cuda::StreamGuard g(reader);
    early = target.to(cpu);  // no event: runs beside the writer's queue
  }
  cuda::synchronize();
  EXPECT_EQ(early[0].item<float>(), 1.0f) << "the host CUDA ran another stream's work first: streams are not "
                                             "independent queues there";
  EXPECT_EQ(target.to(cpu)[0].item<float>(), 2.0f);
}

TEST(CudaRuntime, EventsTime) {
  REQUIRE_CUDA();
  cuda::Event start(true), end(true);
  start.record();
  Tensor x = empty({1 << 20}, f32, cuda::device(0));
  x.copy_(full({1 << 20}, 1.0));
  end.record();
  end.synchronize();
  EXPECT_GE(start.elapsed_ms(end), 0.0);
  cuda::Event untimed;
  untimed.record();
  test::expect_error([&] { untimed.elapsed_ms(end); }, {"elapsed_ms", "timing"});
}

TEST(CudaRuntime, TheCachingAllocatorReusesDeviceMemory) {
  REQUIRE_CUDA();
  cuda::synchronize();
  AllocatorStats s0 = cuda::memory_stats(0);
  const void* first;
  {
    Tensor a = empty({1000}, f32, cuda::device(0));
    first = a.data_ptr();
    EXPECT_EQ(cuda::memory_stats(0).in_use, s0.in_use + 4096) << "4000 bytes round up to 512-byte blocks";
  }
  EXPECT_EQ(cuda::memory_stats(0).in_use, s0.in_use);
  Tensor b = empty({1000}, f32, cuda::device(0));
  EXPECT_EQ(b.data_ptr(), first) << "the freed block, on the same stream";
  AllocatorStats s1 = cuda::memory_stats(0);
  EXPECT_GE(s1.reserved, s1.in_use);
  EXPECT_GE(s1.peak_in_use, s1.in_use);
  EXPECT_GT(s1.system_allocs, 0);
}

TEST(CudaRuntime, ATensorRecordedOnAnotherStreamIsHeldUntilThatStreamIsDone) {
  REQUIRE_HOST_CUDA();
  if (!std::getenv("KILN_HOST_CUDA_DELAY_US")) GTEST_SKIP() << "needs the host driver's delay";
  cuda::Stream side = cuda::Stream::create();
  const void* p;
  {
    Tensor a = empty({2048}, f32, cuda::device(0));
    p = a.data_ptr();
    {
      cuda::StreamGuard g(side);
      for (int i = 0; i < 100; ++i) a.copy_(full({2048}, 1.0));  // side is busy with a for 10 ms
    }
    a.record_stream(side);
  }
  Tensor b = empty({2048}, f32, cuda::device(0));
  EXPECT_NE(b.data_ptr(), p) << "reused while the side stream still used it";
  side.synchronize();
  Tensor c = empty({2048}, f32, cuda::device(0));
  EXPECT_EQ(c.data_ptr(), p);
}

TEST(CudaRuntime, PinnedMemoryCopiesAsynchronously) {
  REQUIRE_CUDA();
  Tensor x = arange(1000).to(f32);
  EXPECT_FALSE(x.is_pinned());
  Tensor p = x.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_TRUE(p.device().is_cpu());
  EXPECT_EQ(p.to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(p.pin_memory().data_ptr(), p.data_ptr()) << "already pinned";
  Tensor d = p.to(cuda::device(0));
  EXPECT_EQ(d.to(cpu).to_vector<float>(), x.to_vector<float>());
}

// Pinned memory comes through the calling thread's device: it neither makes a context on GPU 0
// (every DDP rank would, and under exclusive-process mode all but rank 0 fail) nor leaves the
// thread bound to one. The driver's current context says which device it used.
//
// cuCtxGetCurrent(CUcontext*) called as int(void**): the tests include no CUDA header, so
// UBSan's function-type check is off for this one call (the two types have one ABI).
#if defined(__clang__)
#define KILN_NO_FUNCTION_CHECK __attribute__((no_sanitize("function")))
#else
#define KILN_NO_FUNCTION_CHECK
#endif
KILN_NO_FUNCTION_CHECK int current_context(void* fn, void** out) { return reinterpret_cast<int (*)(void**)>(fn)(out); }

TEST(CudaRuntime, PinnedMemoryUsesTheCurrentDevice) {
  REQUIRE_DEVICES(2);
  const char* path = std::getenv("KILN_CUDA_DRIVER");
  void* lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  void* get_current = dlsym(lib, "cuCtxGetCurrent");
  ASSERT_NE(get_current, nullptr);
  cuda::set_device(1);
  Tensor on_one = ones({3}).to(cuda::device(1));  // the thread now runs in device 1's context
  void* before = nullptr;
  void* after = nullptr;
  ASSERT_EQ(current_context(get_current, &before), 0);
  Tensor pinned = ones({123457}).pin_memory();  // a size no earlier block has: a new allocation
  ASSERT_EQ(current_context(get_current, &after), 0);
  cuda::set_device(0);
  EXPECT_TRUE(pinned.is_pinned());
  EXPECT_EQ(after, before);
  dlclose(lib);
}

// A long-lived pinned staging block keeps an event per copy still in flight, not one per copy
// it ever made (the host driver counts the events alive).
TEST(CudaRuntime, PinnedBlocksKeepOnlyTheirCopiesInFlight) {
  REQUIRE_HOST_CUDA();
  ASSERT_TRUE(cuda::is_available());  // the driver loaded, for dlopen below to find
  void* lib = dlopen(std::getenv("KILN_CUDA_DRIVER"), RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto live_events = reinterpret_cast<long long (*)()>(dlsym(lib, "kiln_host_live_events"));
  ASSERT_NE(live_events, nullptr);
  Tensor staging = arange(1000).to(f32).pin_memory(), on_device = empty({1000}, f32, cuda::device(0));
  on_device.copy_(staging);
  cuda::synchronize();
  const long long before = live_events();
  for (int i = 0; i < 200; ++i) {
    on_device.copy_(staging);
    cuda::synchronize();
  }
  EXPECT_LE(live_events() - before, 1);
  EXPECT_EQ(on_device.to(cpu).to_vector<float>(), staging.to_vector<float>());
  dlclose(lib);
}

// An eager gather or scatter returns without waiting for the device; a bad index is an error at
// the next call that does (here: reading a result), naming the op, and the checks start clean
// after it. With synchronous checks the error comes from the call itself.
TEST(CudaRuntime, ABadIndexIsReportedAtTheNextRead) {
  REQUIRE_CUDA();
  const Device gpu = cuda::device(0);
  Tensor x = randn({4, 6}).to(gpu), good = full({4, 1}, 5, DType::I64).to(gpu);
  Tensor bad = full({4, 1}, 6, DType::I64).to(gpu);
  Tensor picked = gather(x, 1, bad);  // returns: its check is pending
  Tensor fine = gather(x, 1, good);
  test::expect_error([&] { fine.to(cpu); }, {"gather: index 6 is out of range for a dim of size 6",
                                             "at the next call that waited for cuda:0", "KILN_CUDA_SYNC_CHECKS=1"});
  test::expect_close(gather(x, 1, good).to(cpu), gather(x.to(cpu), 1, good.to(cpu)).to_vector<double>());
  for (int i = 0; i < 300; ++i) gather(x, 1, good);  // more than the slots: read as they run out
  cuda::synchronize();
  gather(x, 1, bad);
  test::expect_error([] { cuda::synchronize(); }, {"gather: index 6 is out of range"});
  cuda::set_sync_index_checks(true);
  test::expect_error([&] { gather(x, 1, bad); }, {"gather: index 6 is out of range for a dim of size 6"});
  cuda::set_sync_index_checks(false);
}

TEST(CudaRuntime, ErrorsNameTheDeviceAndTheLimits) {
  REQUIRE_HOST_CUDA();
  test::expect_error([] { empty({4}, f32, cuda::device(5)); }, {"cuda:5 does not exist", "2 CUDA devices"});
  try {
    empty({int64_t(1) << 40}, f32, cuda::device(0));
    ADD_FAILURE() << "4 TiB were allocated";
  } catch (const OutOfMemory& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cuda:0: out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("4.00 TiB"), std::string::npos) << m;
    EXPECT_NE(m.find("free of 4.00 GiB"), std::string::npos) << m;
  }
  test::expect_error([] { cuda::Stream::create(3); }, {"cuda:3 does not exist"});
}

// With the cache limit at 0 every free goes to the driver, while the kernels that read the
// memory may still be queued: the driver's free waits for them (the host driver's too).
TEST(CudaRuntime, WithoutTheCacheMemoryIsFreedAfterTheWorkThatUsesIt) {
  REQUIRE_CUDA();
  Device d = cuda::device(0);
  Allocator& memory = backend(d).allocator(d);
  int64_t limit = memory.stats().cache_limit;
  memory.set_cache_limit(0);
  int64_t mallocs = memory.stats().system_allocs;
  Tensor y = full({4 << 20}, 1.5, f32, d);   // 16 MiB: a segment of its own
  for (int i = 0; i < 4; ++i) y = y * 2.0f;  // each step frees the tensor before, its reader queued
  Tensor host = y.to(cpu);
  EXPECT_EQ(amin(host).item<float>(), 24.0f);
  EXPECT_EQ(amax(host).item<float>(), 24.0f);
  EXPECT_GE(memory.stats().system_allocs - mallocs, 5) << "the limit of 0 kept memory cached";
  memory.set_cache_limit(limit);
}

// rand, randn and randint on a device draw the CPU's numbers for the same seed.
TEST(CudaRuntime, RandomCreationOnADeviceDrawsTheCpusNumbers) {
  REQUIRE_CUDA();
  Device d = cuda::device(0);
  for (int which = 0; which < 3; ++which) {
    auto draw = [&](Device on) {
      manual_seed(21);
      return which == 0 ? rand({5, 7}, f32, on) : which == 1 ? randn({5, 7}, f32, on) : randint(-3, 9, {5, 7}, i64, on);
    };
    Tensor host = draw(cpu), device = draw(d);
    EXPECT_EQ(device.device(), d);
    EXPECT_EQ(device.to(cpu).to_vector<double>(), host.to_vector<double>()) << "case " << which;
  }
}

// Run by ctest cuda_unavailable with KILN_CUDA_DRIVER naming a file that does not exist.
// An eager op that ran before with these operands' types and layouts finds its kernel from a
// key of them: no group IR, no kernel text, no text hash (the kernel cache is not asked). Its
// numbers are its own: `x * 3.5` after `x * 2.5` multiplies by 3.5. Hand-written kernels
// (gather, sort, pools, random, the strided copy) find theirs by variant the same way.
TEST(CudaRuntime, AnEagerOpThatRanBeforeBuildsNoKernelText) {
  REQUIRE_CUDA();
  Device gpu = cuda::device(0);
  manual_seed(5);
  Tensor x = randn({3, 5}), y = randn({5}), idx = from_vector<int64_t>({2, 0, 1});
  Tensor img = randn({1, 2, 6, 6});
  Tensor xg = x.to(gpu), yg = y.to(gpu), ig = idx.to(gpu), imgg = img.to(gpu);
  auto run = [&](double c) {
    return std::vector<Tensor>{xg + yg,
                               xg * c,
                               (xg * c).sum({1}),
                               xg.t().contiguous(),
                               index_select(xg, 0, ig),
                               max_pool2d(imgg, {2, 2}),
                               argsort(xg, 1),
                               randn({4}, f32, gpu)};
  };
  run(2.5);
  const jit::KernelCacheStats before = jit::kernel_cache_stats();
  manual_seed(6);
  std::vector<Tensor> got = run(3.5);
  const jit::KernelCacheStats after = jit::kernel_cache_stats();
  EXPECT_EQ(after.hits + after.misses, before.hits + before.misses) << "no kernel looked up by its text";
  manual_seed(6);
  std::vector<Tensor> want = {x + y,
                              x * 3.5,
                              (x * 3.5).sum({1}),
                              x.t().contiguous(),
                              index_select(x, 0, idx),
                              max_pool2d(img, {2, 2}),
                              argsort(x, 1),
                              randn({4})};
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(test::close_enough(got[i].to(cpu), want[i]));
  }
  // Another shape is another key: looked up (and compiled or found) by its text once.
  Tensor z = randn({7}).to(gpu);
  (z * 2.0).to(cpu);
  EXPECT_GT(jit::kernel_cache_stats().hits + jit::kernel_cache_stats().misses, after.hits + after.misses);
}

TEST(CudaUnavailable, SaysWhyAndRefusesCudaTensors) {
  const char* d = std::getenv("KILN_CUDA_DRIVER");
  if (!d || std::string(d) != "/nonexistent/libcuda.so.1") GTEST_SKIP() << "run by ctest cuda_unavailable";
  EXPECT_FALSE(cuda::is_available());
  EXPECT_EQ(cuda::device_count(), 0);
  std::string why = cuda::unavailable_reason();
  EXPECT_NE(why.find("/nonexistent/libcuda.so.1"), std::string::npos) << why;
  EXPECT_NE(why.find("could not be loaded"), std::string::npos) << why;
  test::expect_error([] { empty({2}, f32, cuda::device(0)); },
                     {"device cuda:0 is not available", "/nonexistent/libcuda.so.1"});
  test::expect_error([] { zeros({2}).to("cuda:0"); }, {"device cuda:0 is not available"});
  test::expect_error([] { zeros({2}).pin_memory(); }, {"pin_memory", "CUDA is not available"});
}

}  // namespace
}  // namespace kiln
