// cuda/attention.cpp -- attention and attention_backward on CUDA: codegen/cuda/attention.h's
// kernels, launched on the current stream. Head dims beyond the kernels' shared memory (or of
// size 0) run the composite instead: correct, with the L x S weights in memory.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "codegen/cuda/attention.h"
#include "cuda/launch.h"
#include "cuda/op_kernels.h"
#include "runtime/api.h"
#include "runtime/autograd_meta.h"
#include "runtime/check.h"
#include "runtime/cuda_internal.h"
#include "runtime/ops/attention.h"

namespace kiln::cuda {
namespace {

using codegen::CudaAttention;
using codegen::CudaAttentionPass;

uint64_t bits_of(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

}  // namespace

bool attention_takes_mma(CudaAttention k, int device) {
  static const bool enabled = [] {
    const char* e = std::getenv("KILN_CUDA_ATTENTION_MMA");
    return !(e && std::string(e) == "0");
  }();
  if (!enabled || (k.dtype != DType::F16 && k.dtype != DType::BF16 && k.dtype != DType::F32) ||
      compute_capability(device) < 80)
    return false;
  k.mma = true;
  for (CudaAttentionPass pass : {CudaAttentionPass::Forward, CudaAttentionPass::Backward}) {
    k.pass = pass;
    if (codegen::cuda_attention_tile_rows(k) == 0) return false;
  }
  return true;
}

namespace {

// What every pass's argument struct holds, up to the result and the stats.
struct Launch {
  CudaAttention kernel;
  attention::Sizes z;
  std::vector<uint64_t> words;
  int device = 0;
  std::vector<Tensor> keep;  // the converted operands, alive until the launches are queued
};

Launch prepare_launch(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  attention::Operands o = attention::operands_of(id, in, a);
  Launch l;
  l.z = attention::sizes_of(o);
  l.device = out.device().index;
  DType t = o.q.dtype(), ct = t == DType::F64 ? DType::F64 : DType::F32;
  l.kernel.dtype = t;
  l.kernel.e = l.z.e, l.kernel.ev = l.z.ev;
  l.kernel.causal = a.causal;
  l.kernel.dropout = o.state.defined();
  l.kernel.tf32 = l.kernel.dtype == DType::F32 && allow_tf32();
  l.kernel.mma = attention_takes_mma(l.kernel, l.device);
  Tensor mask;
  attention::MaskLayout ml;
  if (o.mask.defined()) {
    bool is_bool = o.mask.dtype() == DType::Bool;
    l.kernel.mask = is_bool ? codegen::CudaAttentionMask::Bool : codegen::CudaAttentionMask::Float;
    mask = is_bool ? o.mask : o.mask.to(ct);  // converted before it is broadcast
    ml = attention::mask_layout(mask, o);
    if (ml.batch_sizes.size() > 4) {  // batch dims that do not merge: the mask in full
      Dims shape = attention::leading(o.q.shape(), 1);
      shape.push_back(l.z.s);
      mask = mask.expand(shape).contiguous();
      ml = attention::mask_layout(mask, o);
    }
  }
  Tensor q = o.q.contiguous(), k = o.k.contiguous(), v = o.v.contiguous();
  Tensor fwd_out = o.out.defined() ? (a.lse ? attention::output_of(o.out, o.q, o.v) : o.out).contiguous() : Tensor(),
         grad = o.grad.defined() ? (a.lse ? attention::output_of(o.grad, o.q, o.v) : o.grad).contiguous() : Tensor();
  auto& w = l.words;
  for (int64_t n : {l.z.batch, l.z.l, l.z.s, l.z.e, l.z.ev}) put(w, n);
  for (const Tensor* x : {&q, &k, &v, &fwd_out, &grad, &mask}) put(w, x->defined() ? x->data_ptr() : nullptr);
  put(w, static_cast<int64_t>(ml.batch_sizes.size()));
  for (size_t d = 0; d < 4; ++d) put(w, d < ml.batch_sizes.size() ? ml.batch_sizes[d] : 1);
  for (size_t d = 0; d < 4; ++d) put(w, d < ml.batch_strides.size() ? ml.batch_strides[d] : 0);
  put(w, ml.row_stride);
  put(w, ml.col_stride);
  Tensor state = o.state.defined() ? o.state.contiguous() : Tensor();
  put(w, state.defined() ? state.data_ptr() : nullptr);
  double p = a.dropout_p.to_double();
  w.push_back(bits_of(a.scale.to_double()));
  w.push_back(bits_of(p > 0 ? 1.0 / (1.0 - p) : 1.0));
  w.push_back(bits_of(1.0 - p));
  l.keep = {q, k, v, fwd_out, grad, mask, state};
  return l;
}

// cuda_attention_kernel over the CudaAttention's fields, one by one: a launch's variant key
// (cuda/launch.h). A field added to CudaAttention is added here.
std::string attention_source(CudaAttentionPass pass, DType dtype, int64_t e, int64_t ev,
                             codegen::CudaAttentionMask mask, bool causal, bool dropout, bool mma, bool tf32) {
  return codegen::cuda_attention_kernel({pass, dtype, e, ev, mask, causal, dropout, mma, tf32});
}
static_assert(sizeof(codegen::CudaAttention) == 32, "attention_source passes every field of CudaAttention");

// The argument words after the operands (codegen/cuda/attention.h's Args).
struct Tail {
  const void *result = nullptr, *stats = nullptr, *lse = nullptr, *lse_grad = nullptr, *dq_acc = nullptr,
             *sems = nullptr;
};

// Runs `pass` over `rows` rows of each batch entry (Rows: a warp a row of all of them).
void run_pass(Launch& l, CudaAttentionPass pass, const Tail& t, int64_t rows) {
  l.kernel.pass = pass;
  std::vector<uint64_t> w = l.words;
  for (const void* p : {t.result, t.stats, t.lse, t.lse_grad, t.dq_acc, t.sems}) put(w, p);
  int per_block =
      pass == CudaAttentionPass::Rows ? codegen::cuda_attention_warps() : codegen::cuda_attention_block_rows(l.kernel);
  int64_t entries = pass == CudaAttentionPass::Rows ? 1 : l.z.batch;
  int64_t blocks = entries * ((rows + per_block - 1) / per_block);
  // The kernels count their tasks (a batch entry's block of rows) in 32 bits: a register less.
  KILN_CHECK(blocks < (int64_t{1} << 31), "attention: {} batch entries of {} rows are {} tasks, past 2^31", l.z.batch,
             rows, blocks);
  const codegen::CudaAttention& k = l.kernel;
  launch_generated(attention_source, std::tuple(k.pass, k.dtype, k.e, k.ev, k.mask, k.causal, k.dropout, k.mma, k.tf32),
                   w, blocks, l.device, codegen::cuda_attention_shared_bytes(k), pass == CudaAttentionPass::Backward);
}

// The kernels' head dims, or the composite's (and attention_backward's through autograd).
bool fits_kernels(const attention::Sizes& z, DType t) {
  CudaAttention k;
  k.dtype = t, k.e = z.e, k.ev = z.ev;
  for (CudaAttentionPass pass : {CudaAttentionPass::Forward, CudaAttentionPass::Queries, CudaAttentionPass::Keys}) {
    k.pass = pass;
    if (codegen::cuda_attention_tile_rows(k) == 0) return false;
  }
  return z.e > 0 && z.ev > 0;
}

void by_composite(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  attention::Operands o = attention::operands_of(id, in, a);
  std::vector<Tensor> fwd = {o.q, o.k, o.v};
  if (o.mask.defined()) fwd.push_back(o.mask);
  if (o.state.defined()) fwd.push_back(o.state);
  Tensor result;
  if (id == OpId::Attention) {
    GradModeGuard no_grad(false);
    result = attention::composite(fwd, a);
    if (a.lse) result = attention::pack_lse(attention::composite_lse(fwd, a), result);
  } else {
    GradModeGuard grad(true);
    std::vector<Tensor> leaves;
    for (int t = 0; t < 3; ++t) fwd[t] = fwd[t].detach().requires_grad_(), leaves.push_back(fwd[t]);
    Tensor y = attention::composite(fwd, a);
    Tensor g = a.lse ? (y * attention::output_of(o.grad, o.q, o.v)).sum() +
                           (attention::composite_lse(fwd, a) * attention::lse_of(o.grad, o.q, o.v).to(y.dtype())).sum()
                     : (y * o.grad).sum();
    Tensor outs[] = {g};
    std::vector<Tensor> grads = autograd::grad(outs, leaves);
    std::vector<Tensor> flat;
    Dims batch = attention::leading(o.q.shape(), 2);
    for (Tensor& x : grads) {
      Dims shape = batch;
      shape.push_back(-1);
      flat.push_back(x.reshape(shape));
    }
    GradModeGuard no_grad(false);
    result = cat(flat, -1);
  }
  GradModeGuard no_grad(false);
  copy_on_device(result, out);
}

}  // namespace

void attention_op(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  if (out.numel() == 0) return;
  attention::Operands o = attention::operands_of(id, in, a);
  attention::Sizes z = attention::sizes_of(o);
  DType t = o.q.dtype(), ct = t == DType::F64 ? DType::F64 : DType::F32;
  if (z.s == 0) {  // no keys: empty sums, and a log-sum-exp of -inf
    GradModeGuard no_grad(false);
    Tensor none = zeros({}, out.dtype(), out.device());
    if (id == OpId::Attention && a.lse)
      none = attention::pack_lse(full({z.batch, z.l}, -std::numeric_limits<double>::infinity(), ct, out.device()),
                                 zeros({z.batch, z.l, z.ev}, t, out.device()));
    return copy_on_device(none, out);
  }
  if (!fits_kernels(z, t)) return by_composite(id, in, a, out);
  Launch l = prepare_launch(id, in, a, out);
  const int64_t lse_bytes = attention::lse_elements(z, t) * static_cast<int64_t>(dtype_size(t));
  if (id == OpId::Attention) {
    Tail tail;
    tail.result = static_cast<const char*>(out.data_ptr()) + (a.lse ? lse_bytes : 0);
    tail.lse = a.lse ? out.data_ptr() : nullptr;
    return run_pass(l, CudaAttentionPass::Forward, tail, z.l);
  }
  // The forward's log-sum-exp: in `out` with lse (and its gradient in `grad`), else from the
  // forward run again.
  Tensor packed = a.lse ? o.out.contiguous() : Tensor(), packed_grad = a.lse ? o.grad.contiguous() : Tensor();
  if (!packed.defined()) {
    Attrs fa = a;
    fa.lse = true;
    std::vector<Tensor> fin = {o.q, o.k, o.v};
    if (o.mask.defined()) fin.push_back(o.mask);
    if (o.state.defined()) fin.push_back(o.state);
    packed = Tensor::empty({t, {attention::lse_elements(z, t) + z.batch * z.l * z.ev}, out.device()});
    attention_op(OpId::Attention, fin, fa, packed);
  }
  Tensor stats = Tensor::empty({ct, {z.batch * z.l, 2}, out.device()});
  Tail tail;
  tail.result = out.data_ptr(), tail.stats = stats.data_ptr(), tail.lse = packed.data_ptr();
  tail.lse_grad = packed_grad.defined() ? packed_grad.data_ptr() : nullptr;
  run_pass(l, CudaAttentionPass::Rows, tail, z.batch * z.l);
  if (!l.kernel.mma) {
    run_pass(l, CudaAttentionPass::Queries, tail, z.l);
    return run_pass(l, CudaAttentionPass::Keys, tail, z.s);
  }
  CudaAttention bk = l.kernel;
  bk.pass = CudaAttentionPass::Backward;
  const int64_t tile = codegen::cuda_attention_tile_rows(bk);
  Tensor sems = zeros({z.batch * ((z.l + tile - 1) / tile)}, DType::I32, out.device());
  Tensor dq_acc = Tensor::empty({DType::F32, {z.batch * z.l, z.e}, out.device()});
  tail.dq_acc = dq_acc.data_ptr(), tail.sems = sems.data_ptr();
  run_pass(l, CudaAttentionPass::Backward, tail, z.s);
}

}  // namespace kiln::cuda
