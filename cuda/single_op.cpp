// cuda/single_op.cpp -- the ops that run as the fused kernel of a group of one op: each
// pointwise op, cast and fusible reduction (codegen/cuda, the same formulas as every other
// kernel, through cuda/group.h). Immediates are kernel arguments, so `x * lr` compiles one
// kernel for every learning rate; a 0-d CPU operand (PyTorch's CPU-scalar rule) becomes one
// too. Here also the strided copy every device-side copy uses (a cast of a group of one), the
// movement ops built on it, and rand and randn (codegen/cuda/random.h).
#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "codegen/cuda/emit.h"
#include "codegen/cuda/random.h"
#include "cuda/group.h"
#include "cuda/launch.h"
#include "cuda/op_kernels.h"
#include "ir/graph.h"
#include "runtime/check.h"
#include "runtime/loop_layout.h"
#include "runtime/ops/loops.h"

namespace kiln::cuda {

namespace {

// An eager call's key: everything prepare_group reads from it but its numbers (the op, its
// attributes, its operands' dtypes, shapes and strides, the result's type and device). Raw
// words in a buffer of the thread's, so building and hashing it costs a few hundred
// nanoseconds where the group's IR, text and text hash cost tens of microseconds.
class KeyWriter {
 public:
  static constexpr size_t kCapacity = 1024;  // words; a longer key (rank in the hundreds) is not cached
  void word(int64_t v) {
    if (n_ < kCapacity) words_[n_] = v;
    ++n_;
  }
  void operator()(const Dims& d) {
    word(static_cast<int64_t>(d.size()));
    for (int64_t v : d) word(v);
  }
  void operator()(int64_t v) { word(v); }
  void operator()(bool v) { word(v); }
  void operator()(DType t) { word(static_cast<int64_t>(t)); }
  void operator()(Combine c) { word(static_cast<int64_t>(c)); }
  void operator()(Device d) { word(static_cast<int64_t>(d.type) << 16 | static_cast<uint16_t>(d.index)); }
  void operator()(const Scalar& v) {
    word(static_cast<int64_t>(v.kind()));
    double d = v.to_double();
    int64_t bits;
    std::memcpy(&bits, &d, 8);
    word(bits);
    word(v.to_int());
  }
  /// The key's bytes; empty when it did not fit.
  std::string_view bytes() const {
    return n_ <= kCapacity ? std::string_view(reinterpret_cast<const char*>(words_.data()), n_ * 8)
                           : std::string_view();
  }

 private:
  std::array<int64_t, kCapacity> words_;
  size_t n_ = 0;
};

std::string_view write_key(KeyWriter& w, OpId id, const Attrs& a, std::span<const Tensor> operands, const Tensor& out) {
  w.word(static_cast<int64_t>(id));
  w.word(a.imm_mask);  // (the numbers in a.imm are arguments, not part of the kernel)
#define ATTR(Field, name, Type, Kind, init) w(a.name);
#include "runtime/attrs.def"
#undef ATTR
  for (const Tensor& x : operands) {
    w(x.dtype());
    w(x.shape());
    w(x.strides());
    w(x.device());
  }
  w(out.dtype());
  w(out.shape());
  w(out.device());
  return w.bytes();
}

// The groups eager calls prepared, by key: a call that ran before launches its kernel with its
// own numbers. Bounded: a program whose shapes never repeat (a growing sequence) starts over
// past kMaxEntries rather than growing without end.
struct EagerKernel {
  PreparedGroup group;
  std::vector<codegen::CudaImmediate> immediates;
};
constexpr size_t kMaxEntries = 8192;
struct KeyHash {
  using is_transparent = void;  // found by a string_view over the thread's key buffer, no copy
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct EagerKernels {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const EagerKernel>, KeyHash, std::equal_to<>> by_key;
};
EagerKernels& eager_kernels() {
  static auto* k = new EagerKernels();  // never destroyed: eager ops may run at exit
  return *k;
}

}  // namespace

// A 0-d CPU operand of a pointwise op becomes an immediate; any other operand must be on the
// output's device (apply() checked). A call whose key ran before skips the group's IR, kernel
// text and hash: its prepared group launches with this call's numbers.
void single_op(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out) {
  Attrs a = attrs;
  std::vector<Tensor> operands;
  operands.reserve(in.size());
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
  KeyWriter writer;
  const std::string_view key = write_key(writer, id, a, operands, out);
  EagerKernels& cache = eager_kernels();
  std::shared_ptr<const EagerKernel> found;  // (a pointer copied under the lock, not the entry)
  if (!key.empty()) {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.by_key.find(key);
    if (it != cache.by_key.end()) found = it->second;
  }
  if (found) {
    std::vector<uint64_t> imm;
    imm.reserve(found->immediates.size());
    for (const codegen::CudaImmediate& m : found->immediates) imm.push_back(immediate_bits(a.imm[m.slot], m.is_float));
    launch_group(found->group, operands, {&out, 1}, &imm);
    return;
  }
  std::vector<TensorType> types;
  for (const Tensor& x : operands) types.push_back(x.type());
  ir::Node fused = single_op_group(id, a, types, out.type());
  auto entry = std::make_shared<const EagerKernel>(
      EagerKernel{prepare_group(fused, operands, /*eager=*/true), codegen::cuda_immediates(*fused.body)});
  launch_group(entry->group, operands, {&out, 1});
  if (key.empty() || !entry->group.stages.empty()) return;  // (no stages for one op: they take their own numbers)
  std::lock_guard<std::mutex> lock(cache.mu);
  if (cache.by_key.size() >= kMaxEntries) cache.by_key.clear();
  cache.by_key.emplace(std::string(key), std::move(entry));
}

namespace {

// The strided copy's kernel text for a layout: a cast of a group of one, its loop `rank` dims,
// each side's zero strides (`from_zero`, `to_zero`: a bit per dim) and whether its innermost
// dim is unit-strided. Its sizes and strides are arguments: one kernel per variant
// (cuda/launch.h's key).
codegen::KernelLayout copy_layout(DType from, DType to, int rank, uint32_t from_zero, uint32_t to_zero, bool unit_from,
                                  bool unit_to) {
  codegen::KernelLayout L;
  L.rank = rank;
  codegen::OperandLayout in, out;
  in.dtype = from, in.broadcast = from_zero, in.unit_inner = unit_from;
  out.dtype = to, out.broadcast = to_zero, out.unit_inner = unit_to;
  L.inputs.push_back(in);
  L.outputs.push_back(out);
  return L;
}
std::string copy_source(DType from, DType to, int rank, uint32_t from_zero, uint32_t to_zero, bool unit_from,
                        bool unit_to, bool index32) {
  ir::Graph body;
  uint32_t x = body.add_value({from, Dims(static_cast<size_t>(rank), 1), cpu});
  body.inputs.push_back(x);
  ir::Node n;
  n.op = OpId::Cast;
  n.attrs.dtype = to;
  n.inputs = {x};
  n.result = body.add_value({to, Dims(static_cast<size_t>(rank), 1), cpu});
  body.nodes.push_back(n);
  body.outputs.push_back(n.result);
  codegen::CudaEmitOptions options;
  options.index32 = index32;
  return codegen::emit_cuda(body, copy_layout(from, to, rank, from_zero, to_zero, unit_from, unit_to), "kiln_kernel",
                            options);
}

}  // namespace

// dst = src on one device: broadcast, converted, any strides on either side.
void copy_on_device(const Tensor& src, const Tensor& dst) {
  Dims shape = dst.shape();
  std::vector<Dims> st = {broadcast_strides(src.shape(), src.strides(), shape, "copy"), dst.strides()};
  merge_dims(shape, st);
  if (shape.empty()) {
    shape.push_back(1);
    for (Dims& s : st) s.push_back(0);
  }
  const int rank = static_cast<int>(shape.size());
  uint32_t zero[2] = {0, 0};
  std::vector<int64_t> strides;
  for (size_t k = 0; k < 2; ++k)
    for (int d = 0; d < rank; ++d) {
      strides.push_back(st[k][d]);
      if (st[k][d] == 0) zero[k] |= 1u << d;
    }
  const bool unit_from = st[0].back() == 1, unit_to = st[1].back() == 1;
  codegen::KernelLayout L = copy_layout(src.dtype(), dst.dtype(), rank, zero[0], zero[1], unit_from, unit_to);
  std::vector<int64_t> sizes(shape.begin(), shape.end());
  int device = dst.device().index;
  codegen::CudaLaunch grid = codegen::plan_cuda_launch(L, sizes, sm_count(device), codegen::CudaWork::Elements);
  if (grid.blocks == 0) return;
  grid.index32 = codegen::index32_fits(sizes, strides, grid);
  launch_generated(
      copy_source, std::tuple(src.dtype(), dst.dtype(), rank, zero[0], zero[1], unit_from, unit_to, grid.index32),
      codegen::pack_cuda_args(L, sizes, strides, {src.data_ptr(), dst.data_ptr()}, grid), grid.blocks, device);
}

void copy(OpId, std::span<const Tensor> in, const Attrs&, const Tensor& out) { copy_on_device(in[0], out); }
void cat(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) { cat_into(in, a.dim, out); }
void pad(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) { pad_into(in[0], a.pads, a.value, out); }

// rand and randn from the state on the device: codegen/cuda/random.h.
void draw(OpId id, std::span<const Tensor> in, const Attrs&, const Tensor& out) {
  const Tensor& state = in[0];
  if (out.numel() == 0) return;
  std::vector<uint64_t> w;
  put(w, out.numel());
  put(w, state.contiguous().data_ptr());
  put(w, out.data_ptr());
  launch_generated(id == OpId::Rand ? codegen::cuda_rand_kernel : codegen::cuda_randn_kernel, std::tuple(out.dtype()),
                   w, blocks_for(out.numel()), out.device().index);
}

}  // namespace kiln::cuda
