// runtime/loop_layout.cpp -- see loop_layout.h.
#include "runtime/loop_layout.h"

#include "runtime/check.h"
#include "runtime/tensor.h"

namespace kiln {

Dims broadcast_strides(const Dims& shape, const Dims& strides, const Dims& domain, const char* what) {
  size_t r = domain.size();
  KILN_CHECK(shape.size() <= r, "{}: {} has more dims than {}", what, shape_str(shape), shape_str(domain));
  Dims s(r, 0);
  size_t lead = r - shape.size();
  for (size_t j = lead; j < r; ++j) {
    int64_t size = shape[j - lead];
    if (size == 1 || domain[j] == 1) continue;
    KILN_CHECK(size == domain[j], "{}: {} does not broadcast to {}", what, shape_str(shape), shape_str(domain));
    s[j] = strides[j - lead];
  }
  return s;
}

void merge_dims(Dims& shape, std::span<Dims> strides, uint64_t* groups) {
  // In place (dim d moves to w <= d), so the eager loops pay no allocation per op.
  size_t w = 0;
  uint64_t out_groups = 0;
  bool prev_group = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool group = groups && (*groups >> d & 1);
    if (w > 0 && group == prev_group) {
      bool mergeable = true;
      for (size_t k = 0; k < strides.size() && mergeable; ++k)
        mergeable = strides[k][w - 1] == strides[k][d] * shape[d];
      if (mergeable) {
        shape[w - 1] *= shape[d];
        for (Dims& s : strides) s[w - 1] = s[d];
        continue;
      }
    }
    if (group) out_groups |= uint64_t{1} << w;
    shape[w] = shape[d];
    for (Dims& s : strides) s[w] = s[d];
    ++w;
    prev_group = group;
  }
  shape.resize(w);
  for (Dims& s : strides) s.resize(w);
  if (groups) *groups = out_groups;
}

}  // namespace kiln
