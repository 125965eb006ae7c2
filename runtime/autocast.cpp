// runtime/autocast.cpp -- the per-thread autocast state (runtime/autocast.h).
#include "runtime/autocast.h"

#include "runtime/check.h"

namespace kiln {

namespace {
thread_local std::optional<DType> t_autocast;
}  // namespace

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : previous_(t_autocast) {
  KILN_CHECK(dtype == DType::BF16 || dtype == DType::F16, "autocast: the dtype must be bf16 or f16, got {}",
             dtype_name(dtype));
  t_autocast = enabled ? std::optional<DType>(dtype) : std::nullopt;
}

AutocastGuard::~AutocastGuard() { t_autocast = previous_; }

std::optional<DType> autocast_dtype() { return t_autocast; }

Tensor autocast_low(const Tensor& x) {
  if (!t_autocast || !x.defined() || !is_float(x.dtype()) || x.dtype() == *t_autocast) return x;
  return x.to(*t_autocast);
}

Tensor autocast_wide(const Tensor& x) {
  if (!t_autocast || !x.defined() || (x.dtype() != DType::F16 && x.dtype() != DType::BF16)) return x;
  return x.to(DType::F32);
}

}  // namespace kiln
