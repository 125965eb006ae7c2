// runtime/simd/kernels.cpp -- picks the kernel table for this CPU, once.
#include "runtime/simd/kernels.h"

#include "runtime/api.h"

#include <cstdlib>
#include <cstring>

namespace kiln::simd {
namespace {

enum class Isa { Scalar, Avx2, Avx512 };

Isa detect() {
#if defined(__x86_64__) && defined(KILN_HAVE_SIMD)
  __builtin_cpu_init();
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  Isa best = avx512 ? Isa::Avx512 : avx2 ? Isa::Avx2 : Isa::Scalar;
  if (const char* env = std::getenv("KILN_ISA")) {  // may only lower the level
    if (std::strcmp(env, "scalar") == 0) return Isa::Scalar;
    if (std::strcmp(env, "avx2") == 0 && avx2) return Isa::Avx2;
  }
  return best;
#else
  return Isa::Scalar;
#endif
}

KernelTable make_table() {
  KernelTable t;
  switch (detect()) {
#if defined(KILN_HAVE_SIMD)
    case Isa::Avx512:
      isa_avx512::fill(t);
      t.isa = "avx512";
      break;
    case Isa::Avx2:
      isa_avx2::fill(t);
      t.isa = "avx2";
      break;
#endif
    default:
      isa_scalar::fill(t);
      t.isa = "scalar";
      break;
  }
  return t;
}

}  // namespace

const KernelTable& kernels() {
  static const KernelTable table = make_table();
  return table;
}

}  // namespace kiln::simd

namespace kiln {
const char* cpu_kernel_isa() { return simd::kernels().isa; }
}  // namespace kiln
