// runtime/creation.cpp -- tensors made from nothing: empty, zeros, full, eye, vectors.
// These make data rather than transform it, so they are not ops: inside a trace, a tensor
// they make is a constant. (arange is the exception: an op, runtime/ops/iota.cpp.)
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/api.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/ops/loops.h"
#include "runtime/parallel.h"

namespace kiln {

Tensor empty(const Dims& shape, DType dtype, Device device) { return Tensor::empty({dtype, shape, device}); }

Tensor full(const Dims& shape, Scalar value, DType dtype, Device device) {
  // Another device's memory is written through its backend. On CUDA, one value broadcast there
  // (a memset when its bytes are alike), not a whole tensor made here and uploaded.
  if (device.is_cuda()) {
    Tensor t = empty(shape, dtype, device);
    if (t.numel() > 0) copy_between(full({}, value, dtype, cpu), t);
    return t;
  }
  if (!device.is_cpu()) return full(shape, value, dtype, cpu).to(device);
  Tensor t = empty(shape, dtype, device);
  int64_t n = t.numel(), es = dtype_size(dtype);
  char* p = static_cast<char*>(t.data_ptr());
  char one[8];
  visit_dtype(dtype, [&](auto v) {
    using T = decltype(v);
    T x;
    if constexpr (kIsHalf<T>) x = T(value.to<float>());
    else x = value.to<T>();
    std::memcpy(one, &x, sizeof(T));
  });
  bool zero = true;
  for (int64_t i = 0; i < es; ++i) zero = zero && one[i] == 0;
  if (zero) {
    zero_bytes(p, n * es);
    return t;
  }
  // In parallel: one thread cannot write memory at the rate the cores together can.
  parallel_for(0, n, std::max<int64_t>(1, (int64_t{1} << 20) / es),
               [&](int64_t b, int64_t e) { convert(one, 0, dtype, p + b * es, es, dtype, e - b); });
  return t;
}

Tensor zeros(const Dims& shape, DType dtype, Device device) { return full(shape, 0, dtype, device); }
Tensor ones(const Dims& shape, DType dtype, Device device) { return full(shape, 1, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, Scalar v) { return full(t.shape(), v, t.dtype(), t.device()); }
Tensor scalar_tensor(Scalar value) { return full({}, value, value.default_dtype()); }
Tensor scalar_tensor(Scalar value, DType dtype) { return full({}, value, dtype); }

Tensor linspace(double start, double stop, int64_t steps, DType dtype) {
  KILN_CHECK(steps >= 0, "linspace: steps must be non-negative, got {}", steps);
  Tensor t = empty({steps}, DType::F64);
  double* p = t.data<double>();
  double step = steps > 1 ? (stop - start) / double(steps - 1) : 0;
  // Fill from both ends, as PyTorch does, so the last value is exactly `stop`; a single step
  // is `start`.
  int64_t half = std::max<int64_t>(steps / 2, 1);
  for (int64_t i = 0; i < steps; ++i) p[i] = i < half ? start + step * double(i) : stop - step * double(steps - 1 - i);
  return t.to(dtype);
}

Tensor eye(int64_t n, int64_t m, DType dtype) {
  if (m < 0) m = n;
  KILN_CHECK(n >= 0, "eye: n must be non-negative, got {}", n);
  Tensor t = zeros({n, m}, dtype);
  int64_t es = dtype_size(dtype);
  char one[8];
  Tensor o = ones({1}, dtype);
  std::memcpy(one, o.data_ptr(), static_cast<size_t>(es));
  char* p = static_cast<char*>(t.data_ptr());
  for (int64_t i = 0; i < std::min(n, m); ++i) std::memcpy(p + (i * m + i) * es, one, static_cast<size_t>(es));
  return t;
}

template <class T> Tensor from_vector(const std::vector<T>& values, const Dims& shape) {
  Dims s = shape.empty() ? Dims{static_cast<int64_t>(values.size())} : shape;
  KILN_CHECK(s.product() == static_cast<int64_t>(values.size()), "from_vector: {} values do not fill shape {}",
             values.size(), shape_str(s));
  Tensor t = empty(s, dtype_of<T>());
  if constexpr (std::is_same_v<T, bool>) {
    auto* p = t.data<bool>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  } else if (!values.empty()) {  // an empty vector's data() may be null, which memcpy forbids
    std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
  }
  return t;
}
template Tensor from_vector(const std::vector<float>&, const Dims&);
template Tensor from_vector(const std::vector<double>&, const Dims&);
template Tensor from_vector(const std::vector<int32_t>&, const Dims&);
template Tensor from_vector(const std::vector<int64_t>&, const Dims&);
template Tensor from_vector(const std::vector<uint8_t>&, const Dims&);
template Tensor from_vector(const std::vector<bool>&, const Dims&);
template Tensor from_vector(const std::vector<Half>&, const Dims&);
template Tensor from_vector(const std::vector<BFloat16>&, const Dims&);

Tensor tensor(std::initializer_list<float> values) { return from_vector(std::vector<float>(values)); }

Tensor from_blob(void* data, const Dims& shape, DType dtype, std::function<void(void*)> deleter, const Dims& strides) {
  KILN_CHECK(data != nullptr || shape.product() == 0, "from_blob: data is null");
  KILN_CHECK(strides.empty() || strides.size() == shape.size(), "from_blob: {} strides for a shape of rank {}",
             strides.size(), shape.size());
  auto impl = make_ref<TensorImpl>();
  Dims st = strides.empty() ? contiguous_strides(shape) : strides;
  int64_t extent = 1;  // elements spanned, to size the storage
  for (size_t i = 0; i < shape.size(); ++i) {
    KILN_CHECK(shape[i] >= 0 && st[i] >= 0, "from_blob: negative size or stride");
    if (shape[i] > 0) extent += (shape[i] - 1) * st[i];
  }
  if (shape.product() == 0) extent = 0;
  impl->storage = make_ref<Storage>(data, static_cast<size_t>(extent * dtype_size(dtype)), cpu, std::move(deleter));
  impl->shape = shape;
  impl->strides = st;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

}  // namespace kiln
