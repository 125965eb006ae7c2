// runtime/tensor.h -- Tensor: a reference-counted handle to shaped, strided, typed memory.
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/device.h"
#include "runtime/dims.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/ref.h"
#include "runtime/scalar.h"

namespace kiln {

class Allocator;  // runtime/allocator.h

/// dtype + shape + device: the one spelling of a tensor's type, printed `f32[2,3]` (a device
/// other than the CPU follows: `f32[2,3]@cuda:0`) in IR, errors and kernel names.
struct TensorType {
  DType dtype = DType::F32;
  Dims shape;
  Device device = cpu;
  std::string str() const;
  friend bool operator==(const TensorType& a, const TensorType& b) {
    return a.dtype == b.dtype && a.shape == b.shape && a.device == b.device;
  }
};
std::ostream& operator<<(std::ostream& os, const TensorType& t);
/// "[2,3]"; a symbolic dim prints as its name ("[B,784]") where a DimNamesScope names it.
std::string shape_str(const Dims& shape);
/// Symbolic dims (the IR's `f32[B,784]`): a negative size, -(k + 1) for entry k of the names
/// its graph keeps (ir::Graph::dim_names). Names are per graph, so no table outlives a parse.
inline bool is_symbol(int64_t dim) { return dim < 0; }
inline int64_t symbol_dim(size_t k) { return -static_cast<int64_t>(k) - 1; }
inline size_t symbol_index(int64_t dim) { return static_cast<size_t>(-(dim + 1)); }
/// While alive, shape_str() and TensorType::str() on this thread print symbolic dims with
/// `names` (the IR's printer, parser and verifier install their graph's). Scopes nest.
class DimNamesScope {
 public:
  explicit DimNamesScope(const std::vector<std::string>* names);
  ~DimNamesScope();
  DimNamesScope(const DimNamesScope&) = delete;
  DimNamesScope& operator=(const DimNamesScope&) = delete;

 private:
  const std::vector<std::string>* prev_;
};

/// A block of device memory that tensors view. Views of one tensor share one Storage, and with
/// it the version counter that in-place ops bump (autograd uses it to detect stale saves).
class Storage final : public RefCounted {
 public:
  /// Allocates `nbytes` from the device's allocator.
  Storage(size_t nbytes, Device device);
  /// Allocates `nbytes` from `allocator` (page-locked host memory for pin_memory()).
  Storage(size_t nbytes, Device device, Allocator& allocator);
  /// Wraps memory owned elsewhere; `deleter` runs when the last view goes away.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  /// The allocator it came from (nullptr for wrapped memory).
  Allocator* allocator() const { return allocator_; }
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // the device's, for memory it allocated (else deleter_)
  std::function<void(void*)> deleter_;
  std::atomic<uint32_t> version_{0};
};

struct AutogradMeta;  // runtime/autograd_meta.h: grad, grad_fn, requires_grad
namespace cuda {
class Stream;  // runtime/cuda.h
}

/// What a Tensor handle points to. Plain data; invariants are kept by Tensor and apply().
struct TensorImpl final : RefCounted {
  Ref<Storage> storage;  // null for a tensor without data (a tracer's tensor)
  int64_t offset = 0;    // in elements
  Dims shape;
  Dims strides;  // in elements
  DType dtype = DType::F32;
  Device device = cpu;
  std::unique_ptr<AutogradMeta> autograd;
  Ref<TensorImpl> view_base;  // for a view: the tensor whose storage it views (never a view)

  TensorImpl();
  ~TensorImpl();
};

/// A tensor. Copying a Tensor copies the handle, not the data (like torch::Tensor); views
/// (reshape, permute, slice, expand, ...) share storage with their base.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Ref<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// A new contiguous tensor with uninitialized contents.
  static Tensor empty(const TensorType& type);
  /// A tensor with a type but no data: what a tracer hands to the traced function, and what
  /// the IR verifier runs shape rules on. Reading its values throws.
  static Tensor placeholder(const TensorType& type);

  bool defined() const { return static_cast<bool>(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  const Dims& shape() const { return impl_->shape; }
  const Dims& strides() const { return impl_->strides; }
  int64_t dim() const { return static_cast<int64_t>(impl_->shape.size()); }
  /// Size of dimension `d`; negative `d` counts from the end.
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return impl_->shape.product(); }
  int64_t offset() const { return impl_->offset; }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->device; }
  TensorType type() const { return {impl_->dtype, impl_->shape, impl_->device}; }
  bool is_contiguous() const;
  bool has_storage() const { return static_cast<bool>(impl_->storage); }
  /// Address of element [0,...,0]. Throws when the tensor has no data (while tracing).
  void* data_ptr() const;
  /// Typed address of element [0,...,0]; T must match dtype().
  template <class T> T* data() const;
  /// The single element of a tensor with one element, converted to T.
  template <class T> T item() const;
  /// The elements in row-major order, converted to T.
  template <class T> std::vector<T> to_vector() const;

  // Views: share storage with *this.
  Tensor view(const Dims& shape) const;     // no copy; throws when the strides don't allow it
  Tensor reshape(const Dims& shape) const;  // a view when possible, else a copy
  Tensor permute(const Dims& order) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // transpose of a matrix (rank <= 2)
  Tensor slice(int64_t dim, int64_t start, int64_t stop, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand(const Dims& shape) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;

  // Autograd (see autograd/autograd.h).
  bool requires_grad() const;
  /// Marks a leaf as needing gradients (or not); returns *this.
  Tensor& requires_grad_(bool on = true);
  /// The gradient accumulated by backward(); undefined until then.
  Tensor grad() const;
  void set_grad(const Tensor& g);
  /// Drops the accumulated gradient (the next backward starts from nothing).
  void zero_grad();
  /// True for tensors not made by a recorded op (what backward accumulates .grad() into).
  bool is_leaf() const;
  /// Name of the op that made this tensor ("mul"), or "" for a leaf.
  std::string grad_fn_name() const;
  /// Reverse mode from this tensor; `gradient` may be omitted for a single-element tensor.
  void backward(const Tensor& gradient = {}, bool retain_graph = false, bool create_graph = false) const;
  /// The same data without autograd history (shares storage).
  Tensor detach() const;

  // In-place ops: write into this tensor's storage and bump its version. Under autograd they
  // are recorded; one that would corrupt a saved tensor makes backward throw, not lie.
  Tensor& add_(const Tensor& other);
  Tensor& add_(Scalar other);
  Tensor& sub_(const Tensor& other);
  Tensor& sub_(Scalar other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(Scalar other);
  Tensor& clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi);
  Tensor& zero_();
  Tensor& fill_(Scalar value);
  /// Copies `src` (broadcast and converted) into this tensor.
  Tensor& copy_(const Tensor& src);

  Tensor contiguous() const;  // *this when already contiguous
  Tensor clone() const;
  Tensor to(DType dtype) const;  // *this when the dtype already matches
  /// A copy on `device` (*this when already there); gradients flow back to this device.
  Tensor to(Device device) const;
  /// A copy in page-locked host memory (a CPU tensor; *this when already pinned), from which
  /// copies to CUDA devices run asynchronously. Needs CUDA.
  Tensor pin_memory() const;
  bool is_pinned() const;
  /// Marks this CUDA tensor's memory as used by work queued on `stream` (besides the stream
  /// it was allocated on): when freed, it is reused only after that work has run. Call it
  /// when a tensor made on one stream is used on another, as in PyTorch.
  void record_stream(const cuda::Stream& stream) const;

  // Reductions and common ops as methods, for LibTorch-style code.
  Tensor sum() const;
  Tensor sum(const Dims& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Dims& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor abs() const;
  Tensor sqrt() const;
  Tensor pow(const Tensor& e) const;
  Tensor pow(Scalar e) const;

  std::string str() const;  // the same text as operator<<

 private:
  Ref<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

/// Normalizes a possibly negative dim against `rank`; throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t rank, const char* op);
/// The same against t's rank; the error names t's type.
int64_t wrap_dim(int64_t dim, const Tensor& t, const char* op);
/// The element count of `shape`, after checking that no size is negative and that the count
/// and every stride fit comfortably in int64 (else a kiln::Error naming `op`).
int64_t check_shape(const Dims& shape, const char* op);
/// Row-major strides of a contiguous tensor of this shape.
Dims contiguous_strides(const Dims& shape);

}  // namespace kiln
