// tests/cuda/cuda_test.h -- which CUDA a test runs on. The suite runs on the host CUDA in CI
// (tests/cuda/host_env.cpp points KILN_CUDA_* at libkiln_host_cuda.so unless they are set), and
// on a real GPU under scripts/run.sh gpu, which empties those variables. A test of kiln's
// behaviour runs on either (REQUIRE_CUDA); a test of the host CUDA itself, or one that needs its
// per-task delay or its two devices, only there (REQUIRE_HOST_CUDA).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "runtime/cuda.h"
#include "runtime/cuda_internal.h"

namespace kiln::test {

/// The device most tests run on.
inline const Device kGpu = cuda::device(0);

inline bool on_host_cuda() {
  const char* d = std::getenv("KILN_CUDA_DRIVER");
  return d && std::string(d).find("kiln_host_cuda") != std::string::npos;
}

/// The graph of what `work` queues on a new stream of cuda:0 while that stream captures (its
/// tensors come from the graph's pool); null, with `*why`, when the capture was refused.
inline std::unique_ptr<cuda::CapturedGraph> capture(const std::function<void()>& work, std::string* why) {
  cuda::Stream side = cuda::Stream::create(0);
  cuda::synchronize(0);
  cuda::StreamGuard on_side(side);
  cuda::begin_capture(side);
  work();
  return cuda::end_capture(side, why);
}

}  // namespace kiln::test

#define REQUIRE_CUDA() \
  if (!::kiln::cuda::is_available()) GTEST_SKIP() << "no CUDA here: " << ::kiln::cuda::unavailable_reason()

#define REQUIRE_HOST_CUDA()          \
  if (!::kiln::test::on_host_cuda()) \
  GTEST_SKIP() << "a test of the host CUDA: KILN_CUDA_DRIVER does not name libkiln_host_cuda.so"

/// `n` devices or more (the host CUDA has 2).
#define REQUIRE_DEVICES(n)                \
  REQUIRE_CUDA();                         \
  if (::kiln::cuda::device_count() < (n)) \
  GTEST_SKIP() << "needs " << (n)         \
               << " CUDA devices, this "  \
                  "machine has "          \
               << ::kiln::cuda::device_count()
