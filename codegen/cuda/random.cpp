// codegen/cuda/random.cpp -- the Philox kernels' CUDA C (see random.h).
#include "codegen/cuda/random.h"

#include <fmt/format.h>

#include "codegen/cuda/emit.h"
#include "runtime/check.h"

namespace kiln::codegen {
namespace {

// Philox 4x32-10 of one counter under key seed, as runtime/simd/kernels_isa.cpp's philox.
const char* kPhilox = R"(
__device__ __forceinline__ void kiln_philox(unsigned long long seed, unsigned long long counter, unsigned w[4]) {
  unsigned c0 = (unsigned)counter, c1 = (unsigned)(counter >> 32), c2 = 0, c3 = 0;
  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    unsigned long long p0 = (unsigned long long)c0 * 0xD2511F53u, p1 = (unsigned long long)c2 * 0xCD9E8D57u;
    unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned)(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = (unsigned)p1;
    c2 = n2;
    c3 = (unsigned)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  w[0] = c0; w[1] = c1; w[2] = c2; w[3] = c3;
}

__device__ __forceinline__ double kiln_uniform53(unsigned hi, unsigned lo) {
  unsigned long long bits = ((unsigned long long)hi << 21) ^ (lo >> 11);
  return (double)(bits & ((1ull << 53) - 1)) * 0x1p-53;
}
)";

const char* kArgs = R"(
struct Args { long long n; const long long* state; void* out; };
)";

// The statement storing double or float `v` into element i of the output, as the CPU's
// copy_into converts (to f16 and bf16 through f32).
std::string store(DType t, const char* v) {
  switch (t) {
    case DType::F32: return fmt::format("((float*)a.out)[i] = (float)({});", v);
    case DType::F64: return fmt::format("((double*)a.out)[i] = (double)({});", v);
    case DType::F16: return fmt::format("((unsigned short*)a.out)[i] = kiln_f2h((float)({}));", v);
    case DType::BF16: return fmt::format("((unsigned short*)a.out)[i] = kiln_f2bf((float)({}));", v);
    default: break;
  }
  throw Error(fmt::format("codegen: random draws are float, not {}", dtype_name(t)));
}

std::string kernel(int per_counter, const std::string& value, DType t) {
  return cuda_prelude() + kPhilox + kArgs +
         fmt::format(R"(
extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{
  const unsigned long long seed = (unsigned long long)a.state[0], first = (unsigned long long)a.state[1];
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (long long)gridDim.x * blockDim.x) {{
    unsigned w[4];
    kiln_philox(seed, first + (unsigned long long)(i / {1}), w);
    const int j = (int)(i % {1});
    (void)j;
    {2}
  }}
}}
)",
                     kCudaBlock, per_counter, value + "\n    " + store(t, "v"));
}

}  // namespace

std::string cuda_philox_source() { return kPhilox; }

std::string cuda_rand_kernel(DType t) {
  if (t == DType::F64) return kernel(2, "double v = kiln_uniform53(w[2 * j], w[2 * j + 1]);", t);
  // The top bits a significand holds (24 for f32, 11 for f16, 8 for bf16), times 2^-bits.
  int drop = t == DType::F32 ? 8 : t == DType::F16 ? 21 : 24;
  return kernel(4, fmt::format("float v = (float)(w[j] >> {}) * 0x1p-{}f;", drop, 32 - drop), t);
}

std::string cuda_randn_kernel(DType t) {
  return kernel(1, R"(double u1 = 1.0 - (double)w[2] * 0x1p-32;
    double u2 = kiln_uniform53(w[0], w[1]);
    double v = sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);)",
                t);
}

}  // namespace kiln::codegen
