// nn/describe.h -- how an nn error names a tensor: its type, or "undefined" (a layer's
// optional inputs and states may be absent).
#pragma once

#include <string>

#include "runtime/tensor.h"

namespace kiln::nn {

inline std::string type_of(const Tensor& t) { return t.defined() ? t.type().str() : "undefined"; }

}  // namespace kiln::nn
