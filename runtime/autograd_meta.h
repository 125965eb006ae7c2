// runtime/autograd_meta.h -- what a tensor carries for autograd (filled in by autograd/).
#pragma once

#include "runtime/tensor.h"

namespace kiln {

struct AutogradMeta {
  virtual ~AutogradMeta() = default;
};

}  // namespace kiln
