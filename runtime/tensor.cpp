// runtime/tensor.cpp -- Storage, TensorImpl and the Tensor handle's own methods.
#include "runtime/tensor.h"

#include <cstring>
#include <ostream>

#include "runtime/allocator.h"
#include "runtime/api.h"
#include "runtime/autograd_meta.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/cuda.h"
#include "runtime/op.h"
#include "runtime/ops/loops.h"
#include "runtime/recorder.h"

namespace kiln {

namespace {
thread_local const std::vector<std::string>* t_dim_names = nullptr;
}  // namespace

DimNamesScope::DimNamesScope(const std::vector<std::string>* names) : prev_(t_dim_names) { t_dim_names = names; }
DimNamesScope::~DimNamesScope() { t_dim_names = prev_; }

std::string shape_str(const Dims& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    const std::vector<std::string>* names = t_dim_names;
    bool named = is_symbol(shape[i]) && names && symbol_index(shape[i]) < names->size();
    s += named ? (*names)[symbol_index(shape[i])] : std::to_string(shape[i]);  // lists in errors may be negative
  }
  return s + "]";
}

std::string TensorType::str() const {
  std::string s = fmt::format("{}{}", dtype_name(dtype), shape_str(shape));
  if (!device.is_cpu()) s += "@" + device.str();
  return s;
}
std::ostream& operator<<(std::ostream& os, const TensorType& t) { return os << t.str(); }

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  allocator_ = &backend(device).allocator(device);
  data_ = allocator_->allocate(nbytes);
  if (Recorder* r = active_recorder()) r->on_new_storage(this);
}

Storage::Storage(size_t nbytes, Device device, Allocator& allocator)
    : nbytes_(nbytes), device_(device), allocator_(&allocator) {
  data_ = allocator_->allocate(nbytes);
  if (Recorder* r = active_recorder()) r->on_new_storage(this);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {
  if (Recorder* r = active_recorder()) r->on_new_storage(this);
}

Storage::~Storage() {
  if (allocator_) allocator_->deallocate(data_, nbytes_);
  else if (deleter_) deleter_(data_);
}

TensorImpl::TensorImpl() = default;
TensorImpl::~TensorImpl() = default;

Dims contiguous_strides(const Dims& shape) {
  Dims s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return s;
}

int64_t check_shape(const Dims& shape, const char* op) {
  int64_t n = 1, reach = 1;  // reach: product of the nonzero dims, which the strides multiply
  for (int64_t d : shape) {
    KILN_CHECK(d >= 0, "{}: negative dimension in shape {}", op, shape_str(shape));
    KILN_CHECK(d <= INT64_MAX / 16 / reach, "{}: shape {} is too large", op, shape_str(shape));
    reach *= std::max<int64_t>(d, 1);
    n *= d;
  }
  return n;
}

Tensor Tensor::empty(const TensorType& type) {
  auto impl = make_ref<TensorImpl>();
  int64_t n = check_shape(type.shape, "empty");
  impl->storage = make_ref<Storage>(static_cast<size_t>(n * dtype_size(type.dtype)), type.device);
  impl->shape = type.shape;
  impl->strides = contiguous_strides(type.shape);
  impl->dtype = type.dtype;
  impl->device = type.device;
  return Tensor(std::move(impl));
}

Tensor Tensor::placeholder(const TensorType& type) {
  check_shape(type.shape, "placeholder");  // its strides must fit, as for empty()
  auto impl = make_ref<TensorImpl>();
  impl->shape = type.shape;
  impl->strides = contiguous_strides(type.shape);
  impl->dtype = type.dtype;
  impl->device = type.device;
  return Tensor(std::move(impl));
}

int64_t wrap_dim(int64_t dim, int64_t rank, const char* op) {
  int64_t r = std::max<int64_t>(rank, 1);  // a 0-d tensor accepts dim 0 and -1, like PyTorch
  KILN_CHECK(dim >= -r && dim < r, "{}: dim {} is out of range for a tensor of rank {}", op, dim, rank);
  return dim < 0 ? dim + r : dim;
}

int64_t wrap_dim(int64_t dim, const Tensor& t, const char* op) {
  int64_t r = std::max<int64_t>(t.dim(), 1);
  KILN_CHECK(dim >= -r && dim < r, "{}: dim {} is out of range for {} (rank {})", op, dim, t.type().str(), t.dim());
  return dim < 0 ? dim + r : dim;
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, *this, "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, *this, "stride")]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // as PyTorch: no element lies out of place
  int64_t expected = 1;
  for (size_t i = impl_->shape.size(); i-- > 0;) {
    if (impl_->shape[i] == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= impl_->shape[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  KILN_CHECK(defined(), "data_ptr: the tensor is undefined");
  if (!has_storage()) {
    Recorder* r = active_recorder();
    throw Error(
        fmt::format("reading values: tensor {} {} has no data while it is traced; its values exist only when "
                    "the compiled function runs. Return it as an output instead, and branch with where() "
                    "rather than on a value read with item()",
                    type().str(), r ? r->describe(impl()) : std::string("(a placeholder)")));
  }
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * dtype_size(impl_->dtype);
}

template <class T> T* Tensor::data() const {
  KILN_CHECK(dtype() == dtype_of<T>(), "data: tensor is {} but {} was asked for", type().str(),
             dtype_name(dtype_of<T>()));
  return static_cast<T*>(data_ptr());
}

template <class T> T Tensor::item() const {
  KILN_CHECK(defined(), "item: the tensor is undefined");
  KILN_CHECK(numel() == 1, "item: tensor {} has {} elements, expected exactly one", type().str(), numel());
  if (!device().is_cpu() && has_storage()) return to(cpu).item<T>();  // the value, read on the host
  return visit_dtype(dtype(), [&](auto v) -> T {
    using S = decltype(v);
    S s = *static_cast<const S*>(data_ptr());
    if constexpr (kIsHalf<S>) return static_cast<T>(static_cast<float>(s));
    else return static_cast<T>(s);
  });
}

template <class T> std::vector<T> Tensor::to_vector() const {
  KILN_CHECK(defined(), "to_vector: the tensor is undefined");
  if (!device().is_cpu() && has_storage()) return to(cpu).to_vector<T>();  // read on the host
  Tensor c = contiguous();
  std::vector<T> out(static_cast<size_t>(c.numel()));
  visit_dtype(c.dtype(), [&](auto v) {
    using S = decltype(v);
    const S* p = static_cast<const S*>(c.data_ptr());
    for (size_t i = 0; i < out.size(); ++i) {
      if constexpr (kIsHalf<S>) out[i] = static_cast<T>(static_cast<float>(p[i]));
      else out[i] = static_cast<T>(p[i]);
    }
  });
  return out;
}

#define KILN_INSTANTIATE(T)            \
  template T* Tensor::data<T>() const; \
  template T Tensor::item<T>() const;  \
  template std::vector<T> Tensor::to_vector<T>() const;
KILN_INSTANTIATE(float)
KILN_INSTANTIATE(double)
KILN_INSTANTIATE(int32_t)
KILN_INSTANTIATE(int64_t)
KILN_INSTANTIATE(uint8_t)
KILN_INSTANTIATE(bool)
#undef KILN_INSTANTIATE
template Half* Tensor::data<Half>() const;
template BFloat16* Tensor::data<BFloat16>() const;

// ---- views and conveniences: thin layers over the API in runtime/ops/*.cpp
Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  int64_t r = dim();
  d0 = wrap_dim(d0, *this, "transpose");
  d1 = wrap_dim(d1, *this, "transpose");
  Dims order(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) order[i] = i;
  std::swap(order[d0], order[d1]);
  return permute(order);
}
Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, "t: expected a tensor of rank <= 2, got {}", type().str());
  return dim() < 2 ? *this : transpose(0, 1);
}
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  KILN_CHECK(length >= 0, "narrow: negative length {}", length);
  int64_t dd = wrap_dim(d, *this, "narrow");
  int64_t n = shape()[dd];
  if (start < 0) start += n;
  KILN_CHECK(start >= 0 && start <= n && length <= n - start,
             "narrow: start {} and length {} are out of bounds for dim {} of {}", start, length, d, type().str());
  return slice(dd, start, start + length);
}
Tensor Tensor::select(int64_t d, int64_t index) const {
  int64_t dd = wrap_dim(d, *this, "select");
  KILN_CHECK(dim() > 0, "select: cannot index a 0-d tensor");
  int64_t n = shape()[dd];
  KILN_CHECK(index >= -n && index < n, "select: index {} is out of range for dim {} of {}", index, d, type().str());
  if (index < 0) index += n;
  return slice(dd, index, index + 1).squeeze(dd);
}
Tensor Tensor::squeeze() const {
  Dims s;
  for (int64_t v : shape())
    if (v != 1) s.push_back(v);
  return s.size() == shape().size() ? *this : reshape(s);
}
Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  int64_t dd = wrap_dim(d, *this, "squeeze");
  if (shape()[dd] != 1) return *this;
  Dims s = shape();
  s.erase(static_cast<size_t>(dd));
  return reshape(s);
}
Tensor Tensor::unsqueeze(int64_t d) const {
  int64_t dd = wrap_dim(d, dim() + 1, "unsqueeze");
  Dims s = shape();
  s.insert(static_cast<size_t>(dd), 1);
  return reshape(s);
}
Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  int64_t s = wrap_dim(start, *this, "flatten"), e = wrap_dim(end, *this, "flatten");
  KILN_CHECK(s <= e, "flatten: start dim {} is after end dim {}", start, end);
  Dims out;
  for (int64_t i = 0; i < s; ++i) out.push_back(shape()[i]);
  int64_t m = 1;
  for (int64_t i = s; i <= e; ++i) m *= shape()[i];
  out.push_back(m);
  for (int64_t i = e + 1; i < dim(); ++i) out.push_back(shape()[i]);
  return reshape(out);
}
Tensor Tensor::contiguous() const { return is_contiguous() ? *this : apply(OpId::Copy, {*this}); }
Tensor Tensor::clone() const { return apply(OpId::Copy, {*this}); }
Tensor Tensor::to(DType t) const { return dtype() == t ? *this : cast(*this, t); }
Tensor Tensor::to(Device d) const {
  if (device() == d) return *this;
  Attrs a;
  a.device = d;
  return apply(OpId::ToDevice, {*this}, a);
}

Tensor Tensor::pin_memory() const {
  KILN_CHECK(defined() && device().is_cpu(), "pin_memory: {} is not a CPU tensor",
             defined() ? type().str() : "undefined");
  if (is_pinned()) return *this;
  Allocator& pinned = cuda::pinned_memory_allocator();
  Tensor out(make_ref<TensorImpl>());
  TensorImpl& o = *out.impl();
  o.storage = make_ref<Storage>(static_cast<size_t>(numel()) * dtype_size(dtype()), cpu, pinned);
  o.shape = shape();
  o.strides = contiguous_strides(shape());
  o.dtype = dtype();
  o.device = cpu;
  copy_into(*this, out);
  return out;
}

bool Tensor::is_pinned() const {
  return defined() && device().is_cpu() && impl()->storage && cuda::is_pinned(impl()->storage->data());
}

void Tensor::record_stream(const cuda::Stream& s) const {
  KILN_CHECK(defined() && device().is_cuda() && impl()->storage, "record_stream: {} is not a CUDA tensor",
             defined() ? type().str() : "undefined");
  KILN_CHECK(s.device_index() == device().index, "record_stream: the tensor is on {}, the stream on cuda:{}",
             device().str(), s.device_index());
  const Storage& st = *impl()->storage;
  if (st.allocator()) st.allocator()->record_stream(st.data(), s.handle());
}

Tensor Tensor::sum() const { return kiln::sum(*this); }
Tensor Tensor::sum(const Dims& dims, bool keepdim) const { return kiln::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return kiln::mean(*this); }
Tensor Tensor::mean(const Dims& dims, bool keepdim) const { return kiln::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return kiln::max(*this); }
Tensor Tensor::min() const { return kiln::min(*this); }
Tensor Tensor::argmax(int64_t d, bool keepdim) const { return kiln::argmax(*this, d, keepdim); }
Tensor Tensor::matmul(const Tensor& o) const { return kiln::matmul(*this, o); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::pow(const Tensor& e) const { return kiln::pow(*this, e); }
Tensor Tensor::pow(Scalar e) const { return kiln::pow(*this, e); }

}  // namespace kiln
