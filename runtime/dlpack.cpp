// runtime/dlpack.cpp -- see dlpack.h.
#include "runtime/dlpack.h"

#include <dlpack/dlpack.h>
#include <fmt/format.h>

#include <memory>
#include <vector>

#include "runtime/autograd_meta.h"
#include "runtime/check.h"

namespace kiln {
namespace {

// What an exported capsule owns: the DLPack struct, its shape and strides, and a handle on the
// tensor (whose storage is then alive until the deleter runs).
struct Export {
  DLManagedTensor managed{};
  Tensor keep;
  std::vector<int64_t> shape, strides;
};

struct DTypeCode {
  DType dtype;
  uint8_t code, bits;
};
constexpr DTypeCode kCodes[] = {
    {DType::F32, kDLFloat, 32}, {DType::F64, kDLFloat, 64}, {DType::F16, kDLFloat, 16}, {DType::BF16, kDLBfloat, 16},
    {DType::I32, kDLInt, 32},   {DType::I64, kDLInt, 64},   {DType::U8, kDLUInt, 8},
};

std::string code_name(uint8_t code) {
  switch (code) {
    case kDLInt: return "int";
    case kDLUInt: return "uint";
    case kDLFloat: return "float";
    case kDLBfloat: return "bfloat";
    case kDLComplex: return "complex";
    case kDLOpaqueHandle: return "opaque handle";
    default: return fmt::format("code {}", code);
  }
}

// Runs the producer's deleter once, unless release() handed it on.
struct Owned {
  DLManagedTensor* m;
  ~Owned() {
    if (m && m->deleter) m->deleter(m);
  }
  DLManagedTensor* release() { return std::exchange(m, nullptr); }
};

}  // namespace

DLManagedTensor* to_dlpack(const Tensor& t) {
  KILN_CHECK(t.defined(), "to_dlpack: the tensor is undefined");
  KILN_CHECK(!t.requires_grad(),
             "to_dlpack: the tensor {} requires grad; a DLPack consumer cannot record its uses, so export "
             "t.detach()",
             t.type().str());
  KILN_CHECK(t.has_storage(), "to_dlpack: the tensor {} has no data (a tracer's tensor)", t.type().str());
  const DTypeCode* dc = nullptr;
  for (const DTypeCode& c : kCodes)
    if (c.dtype == t.dtype()) dc = &c;
  KILN_CHECK(dc, "to_dlpack: {} cannot be expressed in DLPack 0.6 (kDLBool came in 0.8); export t.to(u8)",
             t.type().str());
  auto e = std::make_unique<Export>();
  e->keep = t;
  e->shape.assign(t.shape().begin(), t.shape().end());
  e->strides.assign(t.strides().begin(), t.strides().end());
  DLTensor& d = e->managed.dl_tensor;
  d.data = t.data_ptr();
  d.device = t.device().is_cuda() ? DLDevice{kDLCUDA, t.device().index} : DLDevice{kDLCPU, 0};
  d.ndim = static_cast<int>(t.dim());
  d.dtype = DLDataType{dc->code, dc->bits, 1};
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->managed.manager_ctx = e.get();
  e->managed.deleter = [](DLManagedTensor* self) { delete static_cast<Export*>(self->manager_ctx); };
  return &e.release()->managed;
}

Tensor from_dlpack(DLManagedTensor* m) {
  KILN_CHECK(m != nullptr, "from_dlpack: the DLManagedTensor is null");
  Owned owned{m};  // from here on, every way out runs the deleter once
  const DLTensor& d = m->dl_tensor;
  if (d.device.device_type == kDLCUDA || d.device.device_type == kDLCUDAManaged)
    throw Error(fmt::format("from_dlpack: the tensor lives on cuda:{}, and this build of kiln has no CUDA backend",
                            d.device.device_id));
  KILN_CHECK(d.device.device_type == kDLCPU || d.device.device_type == kDLCUDAHost,
             "from_dlpack: device type {} is not one kiln has (kDLCPU, or kDLCUDAHost memory read on the CPU)",
             static_cast<int>(d.device.device_type));
  KILN_CHECK(d.dtype.lanes == 1, "from_dlpack: dtype {}{} with {} lanes; kiln tensors hold one lane",
             code_name(d.dtype.code), d.dtype.bits, d.dtype.lanes);
  const DTypeCode* dc = nullptr;
  for (const DTypeCode& c : kCodes)
    if (c.code == d.dtype.code && c.bits == d.dtype.bits) dc = &c;
  KILN_CHECK(dc, "from_dlpack: dtype {}{} has no kiln dtype (kiln takes float16/32/64, bfloat16, int32/64, uint8)",
             code_name(d.dtype.code), d.dtype.bits);
  constexpr int kMaxRank = 64;
  KILN_CHECK(d.ndim >= 0 && d.ndim <= kMaxRank, "from_dlpack: rank {} (kiln takes 0 to {})", d.ndim, kMaxRank);
  KILN_CHECK(d.ndim == 0 || d.shape != nullptr, "from_dlpack: a rank-{} tensor with a null shape", d.ndim);
  Dims shape, strides;
  for (int i = 0; i < d.ndim; ++i) {
    KILN_CHECK(d.shape[i] >= 0, "from_dlpack: size {} of dim {} is negative", d.shape[i], i);
    shape.push_back(d.shape[i]);
  }
  if (d.strides) {
    for (int i = 0; i < d.ndim; ++i) {
      KILN_CHECK(d.strides[i] >= 0, "from_dlpack: stride {} of dim {} is negative (kiln's views have none)",
                 d.strides[i], i);
      strides.push_back(d.strides[i]);
    }
  } else {
    strides = contiguous_strides(shape);  // DLPack: null strides mean compact row-major
  }
  // The bytes the view spans, so Storage knows its size; any overflow is a bad tensor.
  int64_t size = dtype_size(dc->dtype), numel = 1, extent = 1;
  bool overflow = false;
  for (int i = 0; i < d.ndim; ++i) {
    int64_t reach = 0;
    overflow |= __builtin_mul_overflow(numel, shape[i], &numel);
    if (shape[i] > 0) overflow |= __builtin_mul_overflow(shape[i] - 1, strides[i], &reach);
    overflow |= __builtin_add_overflow(extent, reach, &extent);
  }
  int64_t nbytes = 0;
  overflow |= __builtin_mul_overflow(numel == 0 ? 0 : extent, size, &nbytes);
  KILN_CHECK(!overflow && nbytes <= (int64_t{1} << 62),
             "from_dlpack: sizes {} with strides {} span more memory than there is", shape_str(shape),
             shape_str(strides));
  auto* data = static_cast<char*>(d.data);
  KILN_CHECK(data != nullptr || numel == 0, "from_dlpack: data is null for {} elements", numel);
  KILN_CHECK(d.byte_offset <= static_cast<uint64_t>(INT64_MAX), "from_dlpack: byte_offset {} out of range",
             d.byte_offset);
  if (data) data += d.byte_offset;
  KILN_CHECK(reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(size) == 0,
             "from_dlpack: the {} data at {} is not aligned to its {}-byte elements", dtype_name(dc->dtype),
             static_cast<const void*>(data), size);
  auto impl = make_ref<TensorImpl>();
  DLManagedTensor* producer = owned.m;
  impl->storage = make_ref<Storage>(data, static_cast<size_t>(nbytes), cpu, [producer](void*) {
    if (producer->deleter) producer->deleter(producer);
  });
  owned.release();  // the storage runs the deleter now
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dc->dtype;
  return Tensor(std::move(impl));
}

}  // namespace kiln
