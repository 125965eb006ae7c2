// jit/cuda_eager.cpp -- the CUDA backend's generated kernels for eager ops: each pointwise op,
// cast and reduction runs as the fused kernel of a group of one op (codegen/cuda, the same
// formulas as every other kernel), compiled by NVRTC through the kernel cache and launched on
// the current stream; and the strided copy every device-side copy uses. Installed into the
// runtime's CUDA op table when the library loads (runtime/cuda_kernels.h): the runtime sits
// below the code generators. Immediates are kernel arguments, so `x * lr` compiles one kernel
// for every learning rate; a 0-d CPU operand (PyTorch's CPU-scalar rule) becomes one too.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "codegen/cuda/emit.h"
#include "codegen/cuda/indexed.h"
#include "codegen/cuda/matmul.h"
#include "codegen/cuda/pool.h"
#include "codegen/cuda/random.h"
#include "ir/builder.h"
#include "ir/fusion.h"
#include "ir/graph.h"
#include "jit/cuda_graph.h"
#include "jit/cuda_group.h"
#include "jit/executable.h"
#include "jit/group_runner.h"
#include "jit/kernels.h"
#include "runtime/api.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/cuda_kernels.h"
#include "runtime/log.h"
#include "runtime/loop_layout.h"
#include "runtime/ops/loops.h"

namespace kiln::jit {
namespace {

int sm_count(int device) {
  static std::mutex mu;
  static std::unordered_map<int, int> counts;
  std::lock_guard<std::mutex> lock(mu);
  auto it = counts.find(device);
  if (it == counts.end()) it = counts.emplace(device, std::max(1, cuda::multiprocessor_count(device))).first;
  return it->second;
}

// Launches `source` (its one argument: the words `args`) with `blocks` blocks of kCudaBlock
// threads, at most 32 per multiprocessor: the kernels loop over what is left.
void launch_source(const std::string& source, const std::vector<uint64_t>& args, int64_t blocks, int device) {
  blocks = std::clamp<int64_t>(blocks, 1, int64_t{sm_count(device)} * 32);
  CudaKernel k = cuda_kernel_for(source, device);
  unsigned grid[3] = {static_cast<unsigned>(blocks), 1, 1}, block[3] = {codegen::kCudaBlock, 1, 1};
  void* param = const_cast<uint64_t*>(args.data());
  cuda::launch(k.fn, grid, block, codegen::kCudaSharedBytes, &param);
}
int64_t blocks_for(int64_t threads) { return (threads + codegen::kCudaBlock - 1) / codegen::kCudaBlock; }

// The grid of a kernel of emit_cuda over `layout`: a block per kept index with a reduction,
// else a thread per element, at most 32 blocks per multiprocessor (the kernels loop over what
// is left); 0 for an empty domain.
int64_t grid_for(const codegen::KernelLayout& layout, const std::vector<int64_t>& sizes, int device) {
  int64_t work = 1;
  for (int d = 0; d < layout.rank; ++d)
    if (!(layout.reduced >> d & 1)) work *= sizes[static_cast<size_t>(d)];
  for (int64_t s : sizes)
    if (s == 0) return 0;
  return std::clamp<int64_t>(layout.reduced ? work : blocks_for(work), 1, int64_t{sm_count(device)} * 32);
}

// Launches a kernel of emit_cuda over `layout` with the argument words `args`.
void launch(const codegen::KernelLayout& layout, const std::vector<int64_t>& sizes, const std::string& source,
            const std::vector<uint64_t>& args, int device) {
  if (int64_t blocks = grid_for(layout, sizes, device)) launch_source(source, args, blocks, device);
}

// The bits an immediate travels in: a double's for a float compute dtype, else an int64.
uint64_t immediate_bits(const Scalar& v, bool is_float_op) {
  uint64_t bits;
  if (is_float_op) {
    double d = v.to<double>();
    std::memcpy(&bits, &d, 8);
  } else {
    bits = static_cast<uint64_t>(v.to<int64_t>());
  }
  return bits;
}

}  // namespace

namespace {

// Reductions of more elements per output than kSplitMin, into fewer kept indices than a grid of
// kSplitRows blocks per multiprocessor, run in parts (CudaGroup::Split) of at least kSplitMin
// elements: enough blocks to fill the device, then a second, small reduction.
constexpr int64_t kSplitMin = 4096;
constexpr int64_t kSplitRows = 4;

void split_reduction(CudaGroup& g, const ir::Graph& body, int device) {
  codegen::KernelLayout& L = g.layout;
  if (L.reduced == 0) return;
  int64_t rows = 1, cols = 1;
  for (int d = 0; d < L.rank; ++d) (L.reduced >> d & 1 ? cols : rows) *= g.sizes[static_cast<size_t>(d)];
  int64_t want = int64_t{sm_count(device)} * kSplitRows;
  if (rows == 0 || rows >= want || cols < 2 * kSplitMin || L.rank >= 16) return;
  std::vector<OpId> combine = terminal_reductions(body);
  if (combine.empty()) return;
  for (uint32_t o : body.outputs)  // partial results in f16/bf16 would round twice
    if (body.type(o).dtype == DType::F16 || body.type(o).dtype == DType::BF16) return;
  int d = 0;
  while (!(L.reduced >> d & 1)) ++d;  // the outermost reduced dim
  int64_t size = g.sizes[static_cast<size_t>(d)];
  int64_t inner = cols / size;  // the other reduced dims' elements
  int64_t runs = std::min({(want + rows - 1) / rows, size * inner / kSplitMin, size});
  if (runs < 2) return;
  int64_t run = size / runs;
  CudaGroup::Split& sp = g.split;
  sp.dim = d;
  sp.runs = runs;
  sp.run = run;
  sp.rest = size - runs * run;
  sp.combine = std::move(combine);
  // Dim d becomes (runs: kept, run: reduced). Inputs step run * stride through the parts; the
  // partial outputs step one output's elements (they are [parts, output...], contiguous).
  size_t n_in = L.inputs.size(), n_ops = n_in + L.outputs.size(), rank = static_cast<size_t>(L.rank);
  std::vector<int64_t> strides;
  for (size_t k = 0; k < n_ops; ++k) {
    for (size_t e = 0; e < rank; ++e) {
      int64_t s = g.strides[k * rank + e];
      if (e == static_cast<size_t>(d)) {
        int64_t per_part = k < n_in ? s * run : body.type(body.outputs[k - n_in]).shape.product();
        if (k < n_in) sp.input_step.push_back(s * run);
        strides.push_back(per_part);
      }
      strides.push_back(s);
    }
  }
  g.strides = std::move(strides);
  g.sizes[static_cast<size_t>(d)] = run;
  g.sizes.insert(g.sizes.begin() + d, runs);
  // The layout: one more dim; d kept, the dims from d on move one up.
  uint32_t low = L.reduced & ((1u << d) - 1), high = L.reduced >> d;
  L.reduced = low | (high << (d + 1));
  ++L.rank;
  for (size_t k = 0; k < n_ops; ++k) {
    codegen::OperandLayout& o = k < n_in ? L.inputs[k] : L.outputs[k - n_in];
    o.broadcast = 0;
    for (int e = 0; e < L.rank; ++e)
      if (g.strides[k * static_cast<size_t>(L.rank) + static_cast<size_t>(e)] == 0) o.broadcast |= 1u << e;
  }
  L.parallel_dim = -1;
}

// The sizes of a split group's last, shorter part: one part of `rest` elements.
std::vector<int64_t> rest_sizes(const CudaGroup& g) {
  std::vector<int64_t> sizes = g.sizes;
  sizes[static_cast<size_t>(g.split.dim)] = 1;
  sizes[static_cast<size_t>(g.split.dim) + 1] = g.split.rest;
  return sizes;
}

// Queues g's kernel over `sizes` with operand pointers `data`.
void launch_words(const CudaGroup& g, const std::vector<int64_t>& sizes, const std::vector<void*>& data,
                  int64_t blocks) {
  if (blocks == 0) return;  // nothing to compute
  std::vector<uint64_t> args = codegen::pack_cuda_args(g.layout, sizes, g.strides, data, g.immediates);
  unsigned grid[3] = {static_cast<unsigned>(blocks), 1, 1}, block[3] = {codegen::kCudaBlock, 1, 1};
  void* param = args.data();
  cuda::launch(g.fn, grid, block, codegen::kCudaSharedBytes, &param);
}

}  // namespace

CudaGroup prepare_group_cuda(const ir::Node& fused, std::span<const Tensor> inputs, bool eager) {
  const ir::Graph& body = *fused.body;
  std::vector<Dims> shapes, strides;
  for (const Tensor& x : inputs) {
    shapes.push_back(x.shape());
    strides.push_back(x.strides());
  }
  KernelArgs ka = kernel_args(fused, shapes, strides);
  codegen::CudaEmitOptions options;
  options.immediates_as_args = options.generic_strides = eager;
  CudaGroup g;
  g.layout = std::move(ka.layout);
  g.sizes = std::move(ka.sizes);
  g.strides = std::move(ka.strides);
  if (eager)
    for (const codegen::CudaImmediate& m : codegen::cuda_immediates(body))
      g.immediates.push_back(immediate_bits(body.nodes[m.node].attrs.imm[m.slot], m.is_float));
  int device = body.type(body.outputs[0]).device.index;
  split_reduction(g, body, device);
  CudaKernel k = cuda_kernel_for(codegen::emit_cuda(body, g.layout, "kiln_kernel", options), device);
  g.fn = k.fn;
  g.symbol = std::move(k.symbol);
  g.blocks = grid_for(g.layout, g.sizes, device);
  if (g.split.rest > 0) g.split.rest_blocks = grid_for(g.layout, rest_sizes(g), device);
  return g;
}

void launch_group_cuda(const CudaGroup& g, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  for (const Tensor& y : outputs)
    KILN_CHECK(y.is_contiguous() && y.device().index == g.fn.device && y.device().is_cuda(),
               "fused group: outputs are contiguous tensors on cuda:{}", g.fn.device);
  std::vector<void*> data;
  data.reserve(inputs.size() + outputs.size());
  for (const Tensor& x : inputs) data.push_back(x.data_ptr());
  const CudaGroup::Split& sp = g.split;
  if (sp.dim < 0) {
    for (const Tensor& y : outputs) data.push_back(y.data_ptr());
    launch_words(g, g.sizes, data, g.blocks);
    return;
  }
  // In parts: partial results, then their reduction into the outputs.
  int64_t parts = sp.runs + (sp.rest > 0);
  std::vector<Tensor> partial;
  for (const Tensor& y : outputs) {
    Dims shape = y.shape();
    shape.insert(0, parts);
    partial.push_back(Tensor::empty({y.dtype(), shape, y.device()}));
    data.push_back(partial.back().data_ptr());
  }
  launch_words(g, g.sizes, data, g.blocks);
  if (sp.rest > 0) {  // the shorter last part: one more part of `rest` elements
    for (size_t k = 0; k < inputs.size(); ++k)
      data[k] = static_cast<char*>(data[k]) + sp.runs * sp.input_step[k] * dtype_size(inputs[k].dtype());
    for (size_t j = 0; j < outputs.size(); ++j) data[inputs.size() + j] = partial[j][sp.runs].data_ptr();
    launch_words(g, rest_sizes(g), data, sp.rest_blocks);
  }
  for (size_t j = 0; j < outputs.size(); ++j) {
    Attrs attrs;
    attrs.axes = {0};
    copy_between(apply(sp.combine[j], {partial[j]}, attrs), outputs[j]);
  }
}

void run_group_cuda(const ir::Node& fused, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                    bool eager) {
  launch_group_cuda(prepare_group_cuda(fused, inputs, eager), inputs, outputs);
}

namespace {

// One op on CUDA tensors as a group of one: a 0-d CPU operand of a pointwise op becomes an
// immediate; any other operand must be on the output's device (apply() checked).
void run_single_op(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out) {
  Attrs a = attrs;
  std::vector<Tensor> operands;
  bool pointwise = op_family(id) == OpFamily::Pointwise;
  for (size_t t = 0; t < in.size(); ++t) {
    const Tensor& x = in[t];
    if (pointwise && x.device().is_cpu()) {
      int slot = slot_of_input(attrs.imm_mask, static_cast<int>(t));
      a.imm[slot] = is_float(x.dtype()) ? Scalar(x.item<double>()) : Scalar(x.item<int64_t>());
      a.imm_mask |= static_cast<uint8_t>(1u << slot);
      continue;
    }
    operands.push_back(x.device().is_cpu() ? x.to(out.device()) : x);
  }
  auto body = std::make_shared<ir::Graph>();
  std::vector<uint32_t> ins;
  for (const Tensor& x : operands) {
    ins.push_back(body->add_value(x.type()));
    body->inputs.push_back(ins.back());
  }
  ir::Node n;
  n.op = id;
  n.attrs = a;
  n.inputs = ins;
  n.result = body->add_value(out.type());
  body->nodes.push_back(n);
  body->outputs.push_back(n.result);
  ir::Node fused;
  fused.kind = ir::NodeKind::Fused;
  fused.body = body;
  run_group_cuda(fused, operands, {&out, 1}, true);
}

// dst = src on one device: broadcast, converted, any strides on either side.
void copy_on_device(const Tensor& src, const Tensor& dst) {
  Dims shape = dst.shape();
  std::vector<Dims> st = {broadcast_strides(src.shape(), src.strides(), shape, "copy"), dst.strides()};
  merge_dims(shape, st);
  if (shape.empty()) {
    shape.push_back(1);
    for (Dims& s : st) s.push_back(0);
  }
  codegen::KernelLayout L;
  L.rank = static_cast<int>(shape.size());
  std::vector<int64_t> strides;
  for (size_t k = 0; k < 2; ++k) {
    codegen::OperandLayout o;
    o.dtype = k == 0 ? src.dtype() : dst.dtype();
    for (int d = 0; d < L.rank; ++d) {
      strides.push_back(st[k][d]);
      if (st[k][d] == 0) o.broadcast |= 1u << d;
    }
    o.unit_inner = st[k].back() == 1;
    (k == 0 ? L.inputs : L.outputs).push_back(o);
  }
  ir::Graph body;
  uint32_t x = body.add_value({src.dtype(), src.shape(), dst.device()});
  body.inputs.push_back(x);
  ir::Node n;
  n.op = OpId::Cast;
  n.attrs.dtype = dst.dtype();
  n.inputs = {x};
  n.result = body.add_value({dst.dtype(), dst.shape(), dst.device()});
  body.nodes.push_back(n);
  body.outputs.push_back(n.result);
  std::vector<int64_t> sizes(shape.begin(), shape.end());
  std::string source = codegen::emit_cuda(body, L, "kiln_kernel");
  launch(L, sizes, source, codegen::pack_cuda_args(L, sizes, strides, {src.data_ptr(), dst.data_ptr()}),
         dst.device().index);
}

// ---- indexed ops: codegen/cuda/indexed.h ------------------------------------------------

void put(std::vector<uint64_t>& w, int64_t v) { w.push_back(static_cast<uint64_t>(v)); }
void put(std::vector<uint64_t>& w, const void* p) { w.push_back(reinterpret_cast<uint64_t>(p)); }
void put(std::vector<uint64_t>& w, const Dims& d) {
  for (int64_t v : d) put(w, v);
}

// Two int64 on the device, zero: {1, the bad index} after a kernel met an index out of range.
// A checked index op's error flag (i64[2]: found, the index), set by its kernel and read here
// after it ran. Under a CUDA graph capture, which cannot wait for it, it is a slot of the
// graph's flags, read by the plan's next call (jit/cuda_graph.h).
Tensor error_flag(Device d, const char* op, int64_t size) {
  if (CapturedChecks* checks = captured_checks()) return checks->flag(op, size);
  return zeros({2}, DType::I64, d);
}
void check_flag(const Tensor& flag, const char* op, int64_t size) {
  if (captured_checks()) return;
  std::vector<int64_t> f = flag.to(cpu).to_vector<int64_t>();
  KILN_CHECK(f[0] == 0, "{}: index {} is out of range for a dim of size {}", op, f[1], size);
}

// A rank of at least 1: a 0-d tensor is one element of a rank-1 loop.
Dims at_least_1d(const Dims& d, int64_t fill) { return d.empty() ? Dims{fill} : d; }

// out[p] = x[p with dim replaced by index(p)]: gather and index_select.
void pick(const Tensor& x, int64_t dim, const Tensor& idx, Dims idx_st, const Tensor& out, const char* op) {
  if (out.numel() == 0) return;
  Dims x_st = at_least_1d(x.strides(), 0);
  int64_t dim_size = x.dim() == 0 ? 1 : x.shape()[dim], dim_stride = x.dim() == 0 ? 0 : x.strides()[dim];
  x_st[x.dim() == 0 ? 0 : dim] = 0;
  Dims sizes = at_least_1d(out.shape(), 1);
  Tensor flag = error_flag(out.device(), op, dim_size);
  std::vector<uint64_t> w;
  put(w, sizes);
  put(w, at_least_1d(out.strides(), 1));
  put(w, x_st);
  put(w, at_least_1d(idx_st, 0));
  for (const void* p : {out.data_ptr(), x.data_ptr(), idx.data_ptr(), flag.data_ptr()}) put(w, p);
  put(w, dim_size);
  put(w, dim_stride);
  launch_source(codegen::cuda_pick_kernel(x.dtype(), idx.dtype(), static_cast<int>(sizes.size())), w,
                blocks_for(out.numel()), out.device().index);
  check_flag(flag, op, dim_size);
}

// out = x, then src added at index(q) along dim: scatter_add and index_add. f16 and bf16 sum
// in f32 and round once, as the CPU's scatter does (runtime/ops/index.cpp).
void scatter(const Tensor& x, int64_t dim, const Tensor& idx, const Dims& idx_st, const Tensor& src,
             const Tensor& out, const char* op) {
  if (is_float(out.dtype()) && dtype_size(out.dtype()) == 2) {
    Tensor acc = Tensor::empty({DType::F32, out.shape(), out.device()});
    Tensor wide = src.to(DType::F32);
    scatter(x.to(DType::F32), dim, idx, idx_st, wide, acc, op);
    copy_on_device(acc, out);
    return;
  }
  copy_on_device(x, out);
  if (src.numel() == 0) return;
  Dims out_st = out.strides();
  out_st[dim] = 0;
  Tensor flag = error_flag(out.device(), op, out.shape()[dim]);
  std::vector<uint64_t> w;
  put(w, src.shape());
  put(w, src.strides());
  put(w, out_st);
  put(w, idx_st);
  for (const void* p : {out.data_ptr(), src.data_ptr(), idx.data_ptr(), flag.data_ptr()}) put(w, p);
  put(w, dim);
  put(w, out.shape()[dim]);
  put(w, out.strides()[dim]);
  launch_source(codegen::cuda_scatter_kernel(out.dtype(), idx.dtype(), static_cast<int>(src.dim())), w,
                blocks_for(src.numel() / std::max<int64_t>(src.shape()[dim], 1)), out.device().index);
  check_flag(flag, op, out.shape()[dim]);
}

// argmax/argmin: the rows the CPU's kernel scans (the reduced dim last, contiguous).
void arg(OpId id, const Tensor& x, const Attrs& a, const Tensor& out) {
  KILN_CHECK(a.axes.size() <= 1, "{}: expected one dim or none, got {}", op_name(id), shape_str(a.axes));
  Tensor rows;
  if (a.axes.empty()) {
    rows = x.reshape({1, x.numel()});
  } else {
    int64_t d = a.axes[0] < 0 ? a.axes[0] + x.dim() : a.axes[0];
    Dims order;
    for (int64_t i = 0; i < x.dim(); ++i)
      if (i != d) order.push_back(i);
    order.push_back(d);
    rows = x.dim() == 0 ? x.reshape({1, 1}) : x.permute(order).contiguous();
    rows = rows.reshape({-1, rows.dim() == 0 ? 1 : rows.shape().back()});
  }
  rows = rows.contiguous();
  std::vector<uint64_t> w;
  put(w, rows.shape()[0]);
  put(w, rows.shape()[1]);
  put(w, rows.data_ptr());
  put(w, out.data_ptr());
  if (rows.shape()[0] == 0) return;
  launch_source(codegen::cuda_arg_kernel(rows.dtype(), id == OpId::Argmax), w, rows.shape()[0], out.device().index);
}

// ---- scans and orderings along one dim: contiguous rows (runtime/ops/scan.cpp) ------------

void cumsum_rows(const Tensor& x, const Attrs& a, const Tensor& out) {
  along_dim_rows(x, a.dim, out, [&](const Tensor& rows, const Tensor& orows) {
    std::vector<uint64_t> w;
    put(w, rows.shape()[0]);
    put(w, rows.shape()[1]);
    put(w, rows.data_ptr());
    put(w, orows.data_ptr());
    launch_source(codegen::cuda_cumsum_kernel(rows.dtype(), a.reverse), w, blocks_for(rows.shape()[0]),
                  out.device().index);
  });
}

void iota(const Tensor& out) {
  if (out.numel() == 0) return;
  std::vector<uint64_t> w;
  put(w, out.numel());
  put(w, out.data_ptr());
  launch_source(codegen::cuda_iota_kernel(), w, blocks_for(out.numel()), out.device().index);
}

void order_rows(const Tensor& x, const Attrs& a, const Tensor& out) {
  along_dim_rows(x, a.dim, out, [&](const Tensor& rows, const Tensor& orows) {
    std::vector<uint64_t> w;
    put(w, rows.shape()[0]);
    put(w, rows.shape()[1]);
    put(w, orows.shape()[1]);
    put(w, rows.data_ptr());
    put(w, orows.data_ptr());
    launch_source(codegen::cuda_order_kernel(rows.dtype(), a.descending), w, blocks_for(rows.numel()),
                  out.device().index);
  });
}

// ---- matmul: cuBLAS for floats, codegen/cuda/matmul.h for integers ---------------------------

// A stack of matrices as a strided-batched GEMM reads it: one stride between matrices, and
// each matrix either row-major (unit column stride) or transposed (unit row stride), with its
// leading dimension. Anything else is copied into a contiguous stack first.
struct Matrices {
  Tensor t;              // [batch..., rows, cols] (broadcast batch dims have stride 0)
  int64_t batch_stride;  // elements between consecutive matrices of the flattened batch
  bool transposed;       // stored column by column
  int64_t ld;            // elements between rows (row-major) or columns (transposed)
};

Matrices matrices(Tensor t, int64_t rows, int64_t cols) {
  const Dims& shape = t.shape();
  const Dims& st = t.strides();
  size_t nb = shape.size() - 2;
  // The batch dims as one: strides that step as one run (size-1 dims ignored), or all zero.
  bool flat = true;
  int64_t stride = 0, expect = -1;
  for (size_t d = nb; d-- > 0;) {
    if (shape[d] == 1) continue;
    if (expect < 0) {
      stride = st[d];
      expect = st[d] * shape[d];
    } else if (st[d] == expect || (st[d] == 0 && stride == 0)) {
      expect = st[d] * shape[d];
    } else {
      flat = false;
    }
  }
  int64_t rs = st[nb], cs = st[nb + 1];
  bool row_major = cs == 1 && (rows <= 1 || rs >= std::max<int64_t>(cols, 1));
  bool col_major = rs == 1 && (cols <= 1 || cs >= std::max<int64_t>(rows, 1));
  if (!flat || !(row_major || col_major)) {
    t = t.contiguous();
    return {t, rows * cols, false, std::max<int64_t>(cols, 1)};
  }
  if (row_major) return {t, stride, false, rows <= 1 ? std::max<int64_t>(cols, 1) : rs};
  return {t, stride, true, cols <= 1 ? std::max<int64_t>(rows, 1) : cs};
}

void matmul(std::span<const Tensor> in, const Tensor& out) {
  Tensor a = in[0], b = in[1];
  if (a.dim() == 1) a = a.unsqueeze(0);
  if (b.dim() == 1) b = b.unsqueeze(-1);
  int64_t m = a.shape()[a.dim() - 2], k = a.shape().back(), n = b.shape().back();
  // out is [batch..., m, n] with m (n) left out where a (b) was a vector.
  int64_t nb = out.dim() - (in[0].dim() >= 2 ? 1 : 0) - (in[1].dim() >= 2 ? 1 : 0);
  Dims batch;
  for (int64_t i = 0; i < nb; ++i) batch.push_back(out.shape()[i]);
  Dims ea = batch, eb = batch;
  ea.push_back(m), ea.push_back(k), eb.push_back(k), eb.push_back(n);
  Matrices A = matrices(a.expand(ea), m, k), B = matrices(b.expand(eb), k, n);
  int64_t count = batch.product();
  if (out.numel() == 0) return;
  if (k == 0) return copy_between(zeros({}, out.dtype()), out);
  int device = out.device().index;
  if (is_float(out.dtype())) {
    // Row-major C = A B is column-major C^T = B^T A^T: B's stack first.
    cuda::gemm(device, out.dtype(), B.transposed, A.transposed, n, m, k, B.t.data_ptr(), B.ld, B.batch_stride,
               A.t.data_ptr(), A.ld, A.batch_stride, out.data_ptr(), n, m * n, count);
    return;
  }
  std::vector<uint64_t> w;
  for (int64_t v : {count, m, n, k}) put(w, v);
  for (const Matrices* x : {&A, &B}) {
    put(w, x->batch_stride);
    put(w, x->transposed ? 1 : x->ld);
    put(w, x->transposed ? x->ld : 1);
  }
  for (const void* p : {A.t.data_ptr(), B.t.data_ptr(), out.data_ptr()}) put(w, p);
  launch_source(codegen::cuda_int_matmul_kernel(out.dtype()), w, blocks_for(count * m * n), device);
}

// ---- pools: codegen/cuda/pool.h ---------------------------------------------------------------

// The geometry words: planes, h, w, oh, ow, kernel, stride, padding, count_include_pad.
void put_geometry(std::vector<uint64_t>& w, const Dims& in, const Dims& pooled, const Attrs& a) {
  size_t r = in.size();
  int64_t h = in[r - 2], wd = in[r - 1];
  put(w, h * wd == 0 ? 0 : in.product() / (h * wd));
  for (int64_t v : {h, wd, pooled[r - 2], pooled[r - 1], a.kernel[0], a.kernel[1], a.stride[0], a.stride[1],
                    a.padding[0], a.padding[1], int64_t{a.count_include_pad}})
    put(w, v);
}
// A rank-3 or rank-4 tensor's planes: inner count, outer and inner strides, row and column.
void put_planes(std::vector<uint64_t>& w, const Tensor& t) {
  const Dims& st = t.strides();
  int64_t r = t.dim();
  for (int64_t v : {std::max<int64_t>(t.shape()[r - 3], 1), r == 4 ? st[0] : 0, st[r - 3], st[r - 2], st[r - 1]})
    put(w, v);
}

void pool(OpId id, const Tensor& x, const Attrs& a, const Tensor& out) {
  if (out.numel() == 0) return;
  codegen::CudaPool kind = id == OpId::AvgPool2d ? codegen::CudaPool::Avg
                           : id == OpId::MaxPool2d ? codegen::CudaPool::Max : codegen::CudaPool::Indices;
  std::vector<uint64_t> w;
  put_geometry(w, x.shape(), out.shape(), a);
  put_planes(w, x);
  put(w, x.data_ptr());
  put(w, out.data_ptr());
  launch_source(codegen::cuda_pool_kernel(kind, x.dtype()), w, blocks_for(out.numel()), out.device().index);
}

// max_pool2d_backward(x, grad) and avg_pool2d_backward(grad) into out (the input's shape).
void pool_backward(OpId id, const Tensor& x, const Tensor& grad, const Attrs& a, const Tensor& out) {
  if (out.numel() == 0) return;
  bool max = id == OpId::MaxPool2dBackward;
  std::vector<uint64_t> w;
  put_geometry(w, out.shape(), grad.shape(), a);
  put_planes(w, grad);
  put_planes(w, max ? x : grad);
  for (const void* p : {grad.data_ptr(), max ? x.data_ptr() : grad.data_ptr(), out.data_ptr()}) put(w, p);
  launch_source(codegen::cuda_pool_backward_kernel(max ? codegen::CudaPool::Max : codegen::CudaPool::Avg,
                                                   out.dtype()),
                w, blocks_for(out.numel()), out.device().index);
}

// rand and randn from the state on the device: codegen/cuda/random.h.
void draw(OpId id, const Tensor& state, const Tensor& out) {
  if (out.numel() == 0) return;
  std::vector<uint64_t> w;
  put(w, out.numel());
  put(w, state.contiguous().data_ptr());
  put(w, out.data_ptr());
  std::string source = id == OpId::Rand ? codegen::cuda_rand_kernel(out.dtype()) : codegen::cuda_randn_kernel(out.dtype());
  launch_source(source, w, blocks_for(out.numel()), out.device().index);
}

// The cuBLASLt epilogue of an addmm op: the one its activation names.
cuda::Epilogue epilogue_of(OpId id) {
  switch (id) {
    case OpId::AddmmRelu: return cuda::Epilogue::ReluBias;
    case OpId::AddmmGeluTanh: return cuda::Epilogue::GeluBias;
    default: return cuda::Epilogue::Bias;
  }
}

// addmm, addmm_relu, addmm_gelu_tanh (runtime/ops/addmm.cpp): one cuBLASLt GEMM with the bias
// and activation as its epilogue; where cuBLASLt declines, the GEMM, then the bias and the
// activation as one generated kernel over its result, in place.
void addmm(OpId id, std::span<const Tensor> in, const Tensor& out) {
  const Tensor &bias = in[0], &a = in[1], &b = in[2];
  int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  if (out.numel() > 0 && k > 0) {
    // Row-major out = a b + bias is column-major out^T = b^T a^T + bias (a bias per row).
    Matrices A = matrices(a, m, k), B = matrices(b, k, n);
    Tensor bias_values = bias.contiguous();
    std::string why;
    if (cuda::gemm_epilogue(out.device().index, out.dtype(), epilogue_of(id), B.transposed, A.transposed, n, m, k,
                            B.t.data_ptr(), B.ld, A.t.data_ptr(), A.ld, bias_values.data_ptr(), out.data_ptr(), n,
                            &why))
      return;
    if (log_enabled(LogTopic::Cuda))
      log(LogTopic::Cuda, fmt::format("{}: {}; the GEMM, then a kernel for the bias and activation", op_name(id), why));
  }
  Tensor ab[] = {a, b};
  matmul(ab, out);
  ir::Builder group("addmm epilogue");
  uint32_t z = group.op(OpId::Add, {group.input(out.type()), group.input(bias.type())});
  if (id == OpId::AddmmRelu) z = group.op(OpId::Relu, {z});
  if (id == OpId::AddmmGeluTanh) z = group.op(OpId::GeluTanh, {z});
  group.output(z);
  ir::Node fused;
  fused.kind = ir::NodeKind::Fused;
  fused.body = std::make_shared<ir::Graph>(group.finish());
  Tensor operands[] = {out, bias};
  run_group_cuda(fused, operands, {&out, 1}, true);
}

void run_op(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out) {
  switch (id) {
    case OpId::Matmul: return matmul(in, out);
    case OpId::Addmm:
    case OpId::AddmmRelu:
    case OpId::AddmmGeluTanh: return addmm(id, in, out);
    case OpId::Rand:
    case OpId::Randn: return draw(id, in[0], out);
    case OpId::MaxPool2d:
    case OpId::AvgPool2d:
    case OpId::MaxPool2dIndices: return pool(id, in[0], attrs, out);
    case OpId::MaxPool2dBackward: return pool_backward(id, in[0], in[1], attrs, out);
    case OpId::AvgPool2dBackward: return pool_backward(id, in[0], in[0], attrs, out);
    case OpId::Copy: return copy_on_device(in[0], out);
    case OpId::Cat: return cat_into(in, attrs.dim, out);
    case OpId::Pad: return pad_into(in[0], attrs.pads, attrs.value, out);
    case OpId::Argmax:
    case OpId::Argmin: return arg(id, in[0], attrs, out);
    case OpId::Cumsum: return cumsum_rows(in[0], attrs, out);
    case OpId::Argsort:
    case OpId::TopkIndices: return order_rows(in[0], attrs, out);
    case OpId::Iota: return iota(out);
    case OpId::Gather: {
      const Tensor& idx = in[1];
      Dims st(static_cast<size_t>(idx.dim()), 0);
      for (int64_t d = 0; d < idx.dim(); ++d) st[d] = idx.shape()[d] == 1 ? 0 : idx.strides()[d];
      return pick(in[0], attrs.dim, idx, st, out, "gather");
    }
    case OpId::IndexSelect: {
      Dims st(static_cast<size_t>(out.dim()), 0);
      st[attrs.dim] = in[1].dim() == 0 ? 0 : in[1].strides()[0];
      return pick(in[0], attrs.dim, in[1], st, out, "index_select");
    }
    case OpId::ScatterAdd: return scatter(in[0], attrs.dim, in[1], in[1].strides(), in[2], out, "scatter_add");
    case OpId::IndexAdd: {
      Dims st(static_cast<size_t>(in[2].dim()), 0);
      st[attrs.dim] = in[1].dim() == 0 ? 0 : in[1].strides()[0];
      return scatter(in[0], attrs.dim, in[1], st, in[2], out, "index_add");
    }
    default: break;
  }
  KILN_CHECK(op_family(id) != OpFamily::Reduce || ir::fusible_reduction(id), "{}: no CUDA kernel for {} yet",
             op_name(id), out.type().str());
  run_single_op(id, in, attrs, out);
}

// By family, which ops.def gives as constant data: the OpDefs themselves are made during static
// initialization too, in another order.
// The CUDA backend of the compiled plans' fused groups (jit/group_runner.h): the group's
// kernel compiled for the operands' layout, its numbers baked in, queued on the current stream.
class CudaRunner final : public GroupRunner {
 public:
  CudaRunner(const ir::Node& fused, std::span<const Tensor> inputs)
      : group_(prepare_group_cuda(fused, inputs, /*eager=*/false)) {}
  const std::string& symbol() const override { return group_.symbol; }
  void launch(std::span<const Tensor> inputs, std::span<const Tensor> outputs) const override {
    launch_group_cuda(group_, inputs, outputs);
  }

 private:
  CudaGroup group_;
};

const bool g_installed = [] {
  register_group_backend(DeviceType::CUDA, [](const ir::Node& fused, std::span<const Tensor> inputs) {
    return std::unique_ptr<GroupRunner>(std::make_unique<CudaRunner>(fused, inputs));
  });
  for (int i = 0; i < kNumOps; ++i) {
    auto id = static_cast<OpId>(i);
    OpFamily f = op_family(id);
    if (f == OpFamily::Pointwise || f == OpFamily::Cast || f == OpFamily::Reduce ||
        (f == OpFamily::Copy && id != OpId::ToDevice) || id == OpId::Matmul || id == OpId::Addmm ||
        id == OpId::AddmmRelu || id == OpId::AddmmGeluTanh || id == OpId::MaxPool2d ||
        id == OpId::AvgPool2d || id == OpId::MaxPool2dIndices || id == OpId::MaxPool2dBackward ||
        id == OpId::AvgPool2dBackward || id == OpId::Rand || id == OpId::Randn || id == OpId::Cumsum ||
        id == OpId::Argsort || id == OpId::TopkIndices || id == OpId::Iota)
      cuda::set_op_kernel(id, run_op);
  }
  cuda::set_copy_kernel(copy_on_device);
  return true;
}();

}  // namespace
}  // namespace kiln::jit
