// codegen/cuda/matmul.cpp -- the integer matmul kernel (see matmul.h).
#include "codegen/cuda/matmul.h"

#include <fmt/format.h>

#include "codegen/cuda/emit.h"
#include "runtime/check.h"

namespace kiln::codegen {

std::string cuda_int_matmul_kernel(DType t) {
  const char* c;
  switch (t) {
    case DType::I32: c = "int"; break;
    case DType::I64: c = "long long"; break;
    case DType::U8: c = "unsigned char"; break;
    default: throw Error(fmt::format("codegen: the integer matmul kernel does not take {}", dtype_name(t)));
  }
  return cuda_prelude() + fmt::format(R"(
struct Args {{
  long long batch, m, n, k, a_b, a_r, a_c, b_b, b_r, b_c;
  const void* a; const void* b; void* c;
}};

extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args g) {{
  const long long total = g.batch * g.m * g.n;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {{
    long long col = i % g.n, row = (i / g.n) % g.m, b = i / (g.n * g.m);
    const {1}* pa = (const {1}*)g.a + b * g.a_b + row * g.a_r;
    const {1}* pb = (const {1}*)g.b + b * g.b_b + col * g.b_c;
    unsigned long long acc = 0;
    for (long long j = 0; j < g.k; ++j)
      acc += (unsigned long long)(long long)pa[j * g.a_c] * (unsigned long long)(long long)pb[j * g.b_r];
    (({1}*)g.c)[i] = ({1})(long long)acc;
  }}
}}
)",
                                      kCudaBlock, c);
}

}  // namespace kiln::codegen
