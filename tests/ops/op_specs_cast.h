// tests/ops/op_specs_cast.h -- the Spec of cast: eager's conversion of a value between dtypes.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/ops/op_specs_common.h"

namespace kiln::test {

// ---- conversion -----------------------------------------------------------------------------
/// What eager's cast gives for the value v of a `from` tensor stored as `to` (dtype.h CastKind):
/// floats to integers go toward zero and saturate (NaN gives 0); integers narrow by dropping high
/// bits; anything to bool is "nonzero"; to floats, the nearest value (the tolerance's business).
inline double cast_ref(double v, DType from, DType to) {
  if (to == DType::Bool) return v != 0 ? 1.0 : 0.0;
  if (is_float(to)) return stored_as(to, v);
  if (!is_float(from)) return stored_as(to, v);  // integers wrap; only u8 is narrower here
  if (std::isnan(v)) return 0;
  double t = std::trunc(v);
  double lo = to == DType::U8 ? 0 : to == DType::I32 ? -2147483648.0 : -9223372036854775808.0;
  double hi = to == DType::U8 ? 255 : to == DType::I32 ? 2147483647.0 : 9223372036854775807.0;
  return std::clamp(t, lo, hi);
}
template <> struct Spec<OpId::Cast> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    std::vector<Case> out;
    for (DType to : kAllDTypes) {
      auto ref = [t, to](std::span<const Ref> r) {
        Ref o = r[0];
        for (double& x : o.v) x = cast_ref(x, t, to);
        return o;
      };
      auto run = [to](std::span<const Tensor> in) { return cast(in[0], to); };
      out.push_back({"to_" + std::string(dtype_name(to)), {values({4, 9}, t, -300, 300)}, run, ref});
      out.push_back({"view_to_" + std::string(dtype_name(to)), {transposed(5, 3, t, -2.5, 2.5)}, run, ref});
    }
    return out;
  }
};

}  // namespace kiln::test
