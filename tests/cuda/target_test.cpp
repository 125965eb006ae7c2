// tests/cuda/target_test.cpp -- what kiln builds for a device (cuda/nvrtc.h): a cubin
// for an architecture NVRTC knows, PTX for the newest it knows below a newer device (which the
// driver compiles), an error naming both when it knows nothing at or below it; on the host CUDA
// a device made to say sm_120 runs a kernel through that PTX. bf16 stores compile for sm_75,
// which has no bf16 conversion (rounded by hand there). Library files of a CUDA major newer
// than the driver are skipped.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "codegen/cuda/emit.h"
#include "cuda/kernel_cache.h"
#include "cuda/nvrtc.h"
#include "runtime/cuda/library_cuda.h"
#include "runtime/cuda_internal.h"
#include "tests/cuda/cuda_test.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

using cuda::cuda_target;

TEST(CudaTarget, ACubinWhereNvrtcKnowsTheDevicePtxBeyondIt) {
  const std::vector<int> cuda13 = {75, 80, 86, 89, 90, 100, 120};
  EXPECT_EQ(cuda_target(90, cuda13).arch, 90);
  EXPECT_FALSE(cuda_target(90, cuda13).ptx);
  EXPECT_FALSE(cuda_target(90, {}).ptx) << "an NVRTC that cannot say: the device's own";
  // A device newer than the toolkit: PTX for the newest architecture below it.
  const std::vector<int> cuda12 = {75, 80, 86, 89, 90};
  EXPECT_EQ(cuda_target(120, cuda12).arch, 90);
  EXPECT_TRUE(cuda_target(120, cuda12).ptx);
  EXPECT_EQ(cuda_target(87, cuda12).arch, 86);
  EXPECT_TRUE(cuda_target(87, cuda12).ptx);
  test::expect_error([&] { cuda_target(70, cuda12); }, {"sm_75 to sm_90", "the device's sm_70"});
}

TEST(CudaTarget, ADeviceNewerThanNvrtcRunsItsPtx) {
  REQUIRE_HOST_CUDA();
  setenv("KILN_HOST_CUDA_CC", "120", 1);  // past the host NVRTC's sm_90
  const std::string source = codegen::cuda_prelude() + "// " +
                             std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + R"(
extern "C" __global__ void kiln_kernel(long long* out) { *out = 42; }
)";
  Tensor out = zeros({1}, DType::I64, test::kGpu);
  try {
    EXPECT_EQ(cuda::compute_capability(0), 120);
    cuda::CompiledKernel k = cuda::kernel_for(source, 0);
    void* p = out.data_ptr();
    void* args[] = {&p};
    unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
    cuda::launch(k.fn, grid, block, 0, args);
  } catch (...) {
    unsetenv("KILN_HOST_CUDA_CC");
    throw;
  }
  unsetenv("KILN_HOST_CUDA_CC");
  EXPECT_EQ(out.to(cpu).to_vector<int64_t>(), (std::vector<int64_t>{42}));
}

// A CUDA 13 library beside a CUDA 12.8 driver is skipped, named in the reason (its calls would
// fail with CUDA_ERROR_UNSUPPORTED_PTX_VERSION or worse); a 12 library, or a name without a
// major, is tried.
TEST(CudaLibraries, ALibraryNewerThanTheDriverIsSkippedAndNamed) {
  REQUIRE_HOST_CUDA();
  cuda::synchronize();  // the driver loaded
  setenv("KILN_HOST_CUDA_DRIVER_VERSION", "12080", 1);
  std::string why, opened_why;
  const bool newer = cuda::driver_allows("/usr/local/cuda/lib64/libcublas.so.13", &why);
  const bool same = cuda::driver_allows("libcublas.so.12", &opened_why);
  const bool plain = cuda::driver_allows("libcublas.so", &opened_why);
  void* lib = cuda::open_library("KILN_TEST_NO_SUCH_VARIABLE", {"libkiln_no_such_library.so.13"}, "the test's library",
                                 &opened_why);
  unsetenv("KILN_HOST_CUDA_DRIVER_VERSION");
  EXPECT_FALSE(newer);
  EXPECT_EQ(why, "/usr/local/cuda/lib64/libcublas.so.13: a CUDA 13 library, and the driver is CUDA 12.8");
  EXPECT_TRUE(same);
  EXPECT_TRUE(plain);
  EXPECT_EQ(lib, nullptr);
  EXPECT_NE(opened_why.find("the test's library could not be loaded: libkiln_no_such_library.so.13: a CUDA 13 "
                            "library, and the driver is CUDA 12.8"),
            std::string::npos)
      << opened_why;
  EXPECT_TRUE(cuda::driver_allows("libcublas.so.13", &why)) << "the driver's own version again";
}

TEST(Nvrtc, Bf16StoresCompileBeforeSm80) {
  if (test::on_host_cuda() && std::getenv("KILN_CUDA_NVRTC") && *std::getenv("KILN_CUDA_NVRTC"))
    GTEST_SKIP() << "run by ctest cuda_nvrtc with the toolkit's NVRTC";
  if (!cuda::nvrtc_available()) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  const std::string source = codegen::cuda_prelude() + R"(
extern "C" __global__ void kiln_kernel(unsigned short* out, const float* x) { out[threadIdx.x] = kiln_f2bf(x[threadIdx.x]); }
)";
  for (int arch : {75, 80, 90}) EXPECT_FALSE(cuda::compile_cubin(source, arch, "kiln_kernel").empty()) << arch;
}

}  // namespace
}  // namespace kiln
