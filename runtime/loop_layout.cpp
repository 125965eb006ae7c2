// runtime/loop_layout.cpp -- see loop_layout.h.
#include "runtime/loop_layout.h"

#include <vector>

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
  Dims out_shape;
  std::vector<Dims> out_strides(strides.size());
  uint64_t out_groups = 0;
  bool prev_group = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool group = groups && (*groups >> d & 1);
    if (!out_shape.empty() && group == prev_group) {
      bool mergeable = true;
      for (size_t k = 0; k < strides.size() && mergeable; ++k)
        mergeable = out_strides[k].back() == strides[k][d] * shape[d];
      if (mergeable) {
        out_shape.back() *= shape[d];
        for (size_t k = 0; k < strides.size(); ++k) out_strides[k].back() = strides[k][d];
        continue;
      }
    }
    if (group) out_groups |= uint64_t{1} << out_shape.size();
    out_shape.push_back(shape[d]);
    for (size_t k = 0; k < strides.size(); ++k) out_strides[k].push_back(strides[k][d]);
    prev_group = group;
  }
  shape = std::move(out_shape);
  for (size_t k = 0; k < strides.size(); ++k) strides[k] = std::move(out_strides[k]);
  if (groups) *groups = out_groups;
}

}  // namespace kiln
