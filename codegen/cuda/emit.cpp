// codegen/cuda/emit.cpp -- lowers a fused group to CUDA C (the design is in emit.h): the
// kernel's prelude, its loops and the driver that writes its passes, and the public entry
// points. The values it computes are emit_value.cpp's, in emit_scalar.cpp's scalar algebra;
// its reductions are emit_reduce.cpp's (the shared state: emit_kernel.h).
#include "codegen/cuda/emit.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "codegen/cuda/emit_kernel.h"
#include "ir/fusion.h"
#include "ir/graph.h"
#include "runtime/check.h"

namespace kiln::codegen {
namespace {

// Indices a thread handles per turn of a strided loop, their loads issued together.
constexpr int kUnroll = 4;

// Helpers every kernel's text starts with. On a device they use the hardware's conversions
// (IEEE round to nearest even, as runtime/half.h does on the CPU); the host emulation header
// defines the first group itself.
const char* kPrelude = R"(// kiln CUDA kernel
#ifndef KILN_HOST_CUDA
template <typename T> __device__ __forceinline__ T* kiln_shared() {
  extern __shared__ __align__(16) unsigned char kiln_smem[];
  return reinterpret_cast<T*>(kiln_smem);
}
__device__ __forceinline__ float kiln_f32(unsigned b) { return __uint_as_float(b); }
__device__ __forceinline__ double kiln_f64(unsigned long long b) { return __longlong_as_double((long long)b); }
__device__ __forceinline__ unsigned short kiln_f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float kiln_h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ unsigned short kiln_f2bf(float f) { unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#else  // before sm_80 there is no bf16 conversion: round to nearest even by hand (runtime/half.h's)
__device__ __forceinline__ unsigned short kiln_f2bf(float f) {
  unsigned x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (unsigned short)(x >> 16);
}
#endif
__device__ __forceinline__ float kiln_bf2f(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
#endif
// Four elements moved as one: a 16-byte load or store for 4-byte elements (two for 8-byte ones).
template <typename T> struct alignas(sizeof(T) * 4 < 16 ? sizeof(T) * 4 : 16) kiln_vec4 { T v[4]; };
__device__ __forceinline__ long long kiln_f2i64(double x) {
  return x != x ? 0 : x >= 9223372036854775808.0 ? 9223372036854775807LL : x < -9223372036854775808.0 ? (-9223372036854775807LL - 1) : (long long)x;
}
__device__ __forceinline__ int kiln_f2i32(double x) {
  return x != x ? 0 : x >= 2147483648.0 ? 2147483647 : x < -2147483648.0 ? (-2147483647 - 1) : (int)x;
}
__device__ __forceinline__ unsigned char kiln_f2u8(double x) {
  return x != x ? 0 : x >= 255.0 ? 255 : x <= 0.0 ? 0 : (unsigned char)x;
}
)";

// The layout a kernel's text depends on: with generic_strides, no input broadcasts and no
// operand has a known unit stride (outputs keep the bits that mark them reduced).
KernelLayout text_layout(const KernelLayout& l, const CudaEmitOptions& o) {
  KernelLayout t = l;
  if (!o.generic_strides) return t;
  for (OperandLayout& x : t.inputs) x.broadcast = 0, x.unit_inner = false;
  for (OperandLayout& x : t.outputs) x.unit_inner = false;
  return t;
}

}  // namespace

namespace cuda_emit {

KernelEmitter::KernelEmitter(const ir::Graph& b, const KernelLayout& l, const CudaEmitOptions& o)
    : GroupLowering(b, text_layout(l, o)), options(o) {
  if (options.immediates_as_args)
    for (const CudaImmediate& m : cuda_immediates(b)) imm_index[{m.node, m.slot}] = static_cast<int>(imm_index.size());
}

// Coordinates of `dims` from the linear index `linear` (the last dim varies fastest). In 32
// bits each division by a size is a multiply-high, an add and a shift by its multiplier
// (a.div, launch.h's cuda_divisor), and its remainder a multiply-subtract.
void KernelEmitter::coords(const std::vector<int>& dims, const std::string& linear, std::vector<std::string>& idx) {
  if (dims.empty()) return;
  if (dims.size() == 1) {
    idx[dims[0]] = linear;
    return;
  }
  std::string r = e.temp();
  e.line(fmt::format("{} {} = {};", ix(), r, linear));
  for (size_t k = dims.size(); k-- > 1;) {
    int d = dims[k];
    std::string c = e.temp();
    if (options.index32) {
      std::string q = e.temp();
      e.line(
          fmt::format("const int {0} = (int)((__umulhi((unsigned){1}, (unsigned)a.div[{2}]) + (unsigned){1}) >> "
                      "(unsigned)(a.div[{2}] >> 32));",
                      q, r, d));
      e.line(fmt::format("const int {0} = {1} - {2} * {3}; {1} = {2};", c, r, q, size(d)));
    } else {
      e.line(fmt::format("long long {0} = {1} % a.size[{2}]; {1} /= a.size[{2}];", c, r, d));
    }
    idx[d] = c;
  }
  idx[dims[0]] = r;
}
std::string KernelEmitter::count(const std::vector<int>& dims) {
  std::string p;
  for (int d : dims) p += (p.empty() ? "" : " * ") + size(d);
  return p.empty() ? (options.index32 ? "1" : "1LL") : p;
}
std::string KernelEmitter::size(int d) const {
  return options.index32 ? fmt::format("(int)a.size[{}]", d) : fmt::format("a.size[{}]", d);
}

// Every output (with full_only: the full-size ones) at the index whose `dims` coordinates
// come from linear index `i`, the other coordinates as in `base`.
KernelEmitter::Computed KernelEmitter::outputs_at(const std::vector<int>& dims, const std::string& i,
                                                  const std::vector<std::string>& base, bool full_only) {
  Computed c{base, {}};
  coords(dims, i, c.idx);
  std::map<uint32_t, Val> memo;
  for (size_t o = 0; o < n_out; ++o)
    if (!full_only || (full_output(o) && !early[o])) c.out.emplace_back(o, value(body.outputs[o], c.idx, memo));
  return c;
}
void KernelEmitter::store_all(const Computed& c) {
  for (const auto& [o, v] : c.out) store(o, v, c.idx);
}

// A strided loop, `for (i = start; i < limit; i += step)`, unrolled kUnroll times: each turn
// runs `load` for kUnroll indices first, then `use` on each result in index order, so the
// loads of a turn are in flight together (stores come after every load: the compiler may not
// move a load above a store that could alias it). A remainder loop finishes. `load` gets the
// index's name and returns what `use` takes.
template <class Load, class Use> void KernelEmitter::unrolled_loop(const std::string& start, const std::string& limit,
                                                                   const std::string& step, Load load, Use use) {
  std::string i0 = e.temp();
  e.line(fmt::format("{} {} = {};", ix(), i0, start));
  e.line(fmt::format("for (; {0} + {1} * ({2}) < {3}; {0} += {4} * ({2})) {{", i0, kUnroll - 1, step, limit, kUnroll));
  ++e.indent;
  std::vector<decltype(load(std::string()))> turn;
  for (int k = 0; k < kUnroll; ++k) {
    std::string ik = e.temp();
    e.line(fmt::format("const {} {} = {} + {} * ({});", ix(), ik, i0, k, step));
    turn.push_back(load(ik));
  }
  for (auto& t : turn) use(t);
  --e.indent;
  e.line("}");
  e.line(fmt::format("for (; {0} < {1}; {0} += {2}) {{", i0, limit, step));
  ++e.indent;
  auto t = load(i0);
  use(t);
  --e.indent;
  e.line("}");
}

// Whether an elementwise kernel moves four elements at a time along its innermost loop dim:
// every operand steps through that dim contiguously or broadcasts along it (a per-channel
// scale: read once for the four), at least one steps. Eager kernels (generic strides) stay
// scalar: their text serves any layout.
bool KernelEmitter::vectorizable() const {
  if (options.generic_strides || L.rank < 1 || !ga.reductions.empty()) return false;
  bool any = false;
  for (size_t k = 0; k < n_in + n_out; ++k) {
    const OperandLayout& o = operand(k);
    if (o.broadcast >> (L.rank - 1) & 1) continue;
    if (!o.unit_inner) return false;
    any = true;
  }
  return any;
}

// The first total / 4 * 4 elements, four a thread per turn (the same coordinates but the
// innermost), each contiguous operand moved by kiln_vec4 loads and stores, when every one's
// four elements are aligned to them: its address and its outer strides, and, past one dim,
// the innermost size a multiple of 4 (a view at an odd offset, or rows of 3: the scalar loop
// does it all). `kiln_vectored` is how many it did; the scalar loop does the rest from there.
void KernelEmitter::vector_loop(const std::string& first) {
  const int inner = L.rank - 1;
  std::vector<size_t> vec;
  std::string aligned = L.rank > 1 ? fmt::format("a.size[{}] % 4 == 0", inner) : "";
  auto also = [&](const std::string& c) { aligned += (aligned.empty() ? "" : " && ") + c; };
  for (size_t k = 0; k < n_in + n_out; ++k) {
    const OperandLayout& o = operand(k);
    if (o.broadcast >> inner & 1) continue;
    vec.push_back(k);
    size_t bytes = std::min<size_t>(4 * dtype_size(operand_dtype(k)), 16);
    also(fmt::format("((unsigned long long)a.data[{}] & {}u) == 0", k, bytes - 1));
    for (int d = 0; d < inner; ++d)
      if (!(o.broadcast >> d & 1)) also(fmt::format("a.stride[{}] % 4 == 0", k * L.rank + d));
  }
  e.line(fmt::format("const {0} kiln_vectored = {1} ? total / 4 * 4 : 0;", ix(), aligned));
  std::string v = e.temp();
  e.line(fmt::format("for ({0} {1} = 4 * ({2}); {1} < kiln_vectored; {1} += 4 * step) {{", ix(), v, first));
  ++e.indent;
  std::vector<std::string> idx(L.rank, "0");
  coords(all, v, idx);
  auto vec_type = [&](size_t k) { return fmt::format("kiln_vec4<{}>", mem_name(operand_dtype(k))); };
  for (size_t k : vec) {
    if (k >= n_in) continue;
    std::string r = e.temp();
    e.line(fmt::format("const {0} {1} = *(const {0}*)&{2};", vec_type(k), r, element(k, idx)));
    vector_reg[k] = r;
  }
  std::vector<std::string> out_reg(n_out);
  for (size_t o = 0; o < n_out; ++o) {
    out_reg[o] = e.temp();
    e.line(fmt::format("{} {};", vec_type(n_in + o), out_reg[o]));
  }
  for (int s = 0; s < 4; ++s) {
    vector_lane = s;
    std::vector<std::string> at = idx;
    at[inner] = fmt::format("({} + {})", idx[inner], s);
    std::map<uint32_t, Val> memo;
    for (size_t o = 0; o < n_out; ++o)
      e.line(fmt::format("{}.v[{}] = {};", out_reg[o], s, stored(o, value(body.outputs[o], at, memo))));
  }
  vector_lane = -1;
  vector_reg.clear();
  for (size_t o = 0; o < n_out; ++o)
    e.line(fmt::format("*({0}*)&{1} = {2};", vec_type(n_in + o), element(n_in + o, idx), out_reg[o]));
  --e.indent;
  e.line("}");
}

// The kernel's loops (emit.h), over the block index `kiln_block` of `kiln_grid` blocks.
std::string KernelEmitter::loops() {
  const std::vector<ir::GroupReduction>& reds = ga.reductions;
  std::vector<std::string> idx(L.rank, "0");
  // Full outputs that read no reduction are stored in the first pass, as its loads compute them.
  early.assign(n_out, 0);
  for (size_t o = 0; o < n_out; ++o) early[o] = !reds.empty() && full[o] && ga.level[body.outputs[o]] == 0;
  if (!reds.empty()) stash = ga.plan_stash(full, early);

  e.indent = 1;
  if (reds.empty()) {
    e.line(fmt::format("const {} total = {};", ix(), count(all)));
    e.line(fmt::format("const {} step = kiln_grid * blockDim.x;", ix()));
    std::string first = "kiln_block * blockDim.x + threadIdx.x";
    if (vectorizable()) {
      vector_loop(first);
      first = "kiln_vectored + " + first;
    }
    unrolled_loop(
        first, "total", "step", [&](const std::string& i) { return outputs_at(all, i, idx); },
        [&](const Computed& c) { store_all(c); });
  } else {
    // Tasks: a row and a part of its columns; a block or a thread each (launch.h).
    const bool by_block = options.rows_by == CudaRows::Block;
    const std::string lane = by_block ? "threadIdx.x" : "0", stride = by_block ? "blockDim.x" : "1";
    const std::string t = ix(), parts = options.index32 ? "(int)a.parts" : "a.parts",
                      chunk = options.index32 ? "(int)a.chunk" : "a.chunk";
    e.line(fmt::format("const {} rows = {}, cols = {}, tasks = rows * {};", t, count(kept), count(reduced), parts));
    if (by_block) {
      e.line(fmt::format("for ({} task = kiln_block; task < tasks; task += kiln_grid) {{", t));
    } else {
      e.line(fmt::format("const {} step = kiln_grid * blockDim.x;", t));
      e.line(fmt::format("for ({} task = kiln_block * blockDim.x + threadIdx.x; task < tasks; task += step) {{", t));
    }
    ++e.indent;
    e.line(fmt::format("const {} row = task % rows, part = task / rows, first = part * {};", t, chunk));
    e.line(fmt::format("const {} end = cols - first < {} ? cols : first + {};", t, chunk, chunk));
    partials = true;
    coords(kept, "row", idx);
    for (int lv = 1; lv <= ga.max_level; ++lv) {
      for (const ir::GroupReduction& r : reds) {
        if (ga.level[r.value] != lv) continue;
        std::string a = e.temp();
        e.line(fmt::format("{} {} = {};", cname(ct_of(r.acc)), a, identity(r.op, r.acc)));
        acc[r.value] = Val(&e, a, ct_of(r.acc));
      }
      // Per reduced index: each reduction's input (cast to its accumulator), then the stashes
      // and the combines, in index order (each thread's order, so the bits do not change).
      struct Inputs {
        std::vector<std::string> jx;
        std::vector<std::pair<const ir::GroupReduction*, Val>> in;  // per reduction of this level
        std::vector<std::pair<size_t, Val>> out;                    // the first pass: its early outputs
      };
      unrolled_loop(
          "first + " + lane, "end", stride,
          [&](const std::string& j) {
            Inputs t{idx, {}, {}};
            coords(reduced, j, t.jx);
            std::map<uint32_t, Val> memo;
            for (const ir::GroupReduction& r : reds)
              if (ga.level[r.value] == lv)
                t.in.emplace_back(&r, value(body.nodes[ga.producer[r.value]].inputs[0], t.jx, memo));
            for (size_t o = 0; o < n_out && lv == 1; ++o)
              if (early[o]) t.out.emplace_back(o, value(body.outputs[o], t.jx, memo));
            return t;
          },
          [&](const Inputs& t) {
            for (const auto& [r, in] : t.in) {
              uint32_t u = body.nodes[ga.producer[r->value]].inputs[0];
              if (auto st = stash.find(u); st != stash.end() && lv == ga.max_level) store(st->second, in, t.jx);
              Val x = e.cast(in, body.type(u).dtype, r->acc);
              const std::string& a = acc[r->value].x;
              e.line(fmt::format("{} = {};", a, combine(r->op, r->acc, a, x.as(ct_of(r->acc)))));
            }
            for (const auto& [o, v] : t.out) store(o, v, t.jx);
          });
      if (by_block)
        for (const ir::GroupReduction& r : reds)
          if (ga.level[r.value] == lv) block_reduce(r, acc[r.value].x);
      std::map<uint32_t, Val> done;  // reduced outputs this level completed
      bool any = false;
      for (size_t o = 0; o < n_out; ++o) any = any || (!full_output(o) && ga.level[body.outputs[o]] == lv);
      if (any) {
        if (by_block) e.line("if (threadIdx.x == 0) {");
        e.indent += by_block;
        for (size_t o = 0; o < n_out; ++o)
          if (!full_output(o) && ga.level[body.outputs[o]] == lv) store(o, value(body.outputs[o], idx, done), idx);
        e.indent -= by_block;
        if (by_block) e.line("}");
      }
    }
    bool any_full = false;
    for (size_t o = 0; o < n_out; ++o) any_full = any_full || (full_output(o) && !early[o]);
    if (any_full) {  // (one part: a kernel whose full outputs read its reductions is never cut)
      final_pass = true;
      unrolled_loop(
          lane, "cols", stride, [&](const std::string& j) { return outputs_at(reduced, j, idx, /*full_only=*/true); },
          [&](const Computed& c) { store_all(c); });
      final_pass = false;
    }
    --e.indent;
    e.line("}");
  }

  return e.text;
}

// The argument struct's members (emit.h), then `more`.
std::string KernelEmitter::args_struct(const std::string& name, const std::string& more) const {
  std::string out =
      fmt::format("// {} inputs, {} outputs, rank {}, reduced dims {:#x}\n", n_in, n_out, L.rank, L.reduced);
  out += fmt::format("struct {} {{\n", name);
  out += fmt::format("  long long size[{}];\n", L.rank);
  out += fmt::format("  long long stride[{}];\n", (n_in + n_out) * L.rank);
  out += fmt::format("  void* data[{}];\n", n_in + n_out);
  out += "  long long parts, chunk;\n";
  if (options.index32) out += fmt::format("  unsigned long long div[{}];  // cuda_divisor of each size\n", L.rank);
  if (!imm_index.empty()) out += fmt::format("  long long imm[{}];\n", imm_index.size());
  out += more;
  out += "};\n\n";
  return out;
}

}  // namespace cuda_emit

const char* cuda_bits_type(DType t) {
  switch (dtype_size(t)) {
    case 1: return "unsigned char";
    case 2: return "unsigned short";
    case 4: return "unsigned int";
    default: return "unsigned long long";
  }
}

std::string cuda_prelude() { return kPrelude; }

const char* cuda_element_type(DType t) { return cuda_emit::mem_name(t); }

std::vector<CudaImmediate> cuda_immediates(const ir::Graph& body) {
  std::vector<CudaImmediate> out;
  for (size_t i = 0; i < body.nodes.size(); ++i) {
    const ir::Node& n = body.nodes[i];
    if (n.kind != ir::NodeKind::Op || op_family(n.op) != OpFamily::Pointwise) continue;
    for (int k = 0; k < op_arity(n.op); ++k)
      if (input_of_slot(n.attrs.imm_mask, k) < 0) out.push_back({i, k, is_float(n.attrs.dtype)});
  }
  return out;
}

std::string emit_cuda(const ir::Graph& body, const KernelLayout& layout, const std::string& symbol,
                      const CudaEmitOptions& options) {
  cuda_emit::KernelEmitter k(body, layout, options);
  std::string loops = k.loops(), out = kPrelude, more;
  out += "\n";
  // The combines the last block runs (emit.h): device functions over arguments of their own.
  for (size_t c = 0; c < options.combines.size(); ++c) {
    const CudaEmitOptions::Combine& cc = options.combines[c];
    CudaEmitOptions co;
    co.rows_by = cc.rows_by;
    co.index32 = cc.index32;
    cuda_emit::KernelEmitter ck(*cc.body, cc.layout, co);
    std::string name = fmt::format("Combine{}", c), text = ck.loops();
    out += ck.args_struct(name, "");
    out += fmt::format(
        "__device__ void kiln_combine{}(const {}& a, const long long kiln_block, "
        "const long long kiln_grid) {{\n{}}}\n\n",
        c, name, text);
    more += fmt::format("  {} combine{};\n", name, c);
  }
  if (!options.combines.empty()) more += "  void* done;  // blocks finished: a u32, zero at launch\n";
  out += k.args_struct("Args", more);
  if (options.segments > 0) {
    KILN_CHECK(options.combines.empty(), "codegen: a batch kernel cannot combine partial results in its last block");
    // The block's segment: the last whose first block is at or before it (a binary search of
    // the table, some 8 constant loads a block for a batch of 200).
    out += fmt::format("struct Batch {{\n  Args seg[{}];\n  unsigned count, first[{}];\n}};\n\n", options.segments,
                       options.segments + 1);
    out += fmt::format("extern \"C\" __global__ __launch_bounds__({}) void {}(const Batch kiln_batch) {{\n", kCudaBlock,
                       symbol);
    out += R"(  unsigned kiln_lo = 0, kiln_hi = kiln_batch.count;
  while (kiln_hi - kiln_lo > 1) {
    const unsigned m = (kiln_lo + kiln_hi) >> 1;
    if (kiln_batch.first[m] <= blockIdx.x) kiln_lo = m;
    else kiln_hi = m;
  }
  const Args a = kiln_batch.seg[kiln_lo];
)";
    out += fmt::format(
        "  const {} kiln_block = blockIdx.x - kiln_batch.first[kiln_lo],\n"
        "      kiln_grid = kiln_batch.first[kiln_lo + 1] - kiln_batch.first[kiln_lo];\n",
        k.ix());
    out += loops;
    out += "}\n";
    return out;
  }
  out += fmt::format("extern \"C\" __global__ __launch_bounds__({}) void {}(const Args a) {{\n", kCudaBlock, symbol);
  out += fmt::format("  const {} kiln_block = blockIdx.x, kiln_grid = gridDim.x;\n", k.ix());
  out += loops;
  if (!options.combines.empty()) {
    out += R"(  // The last block to finish combines the partial results (emit.h).
  __threadfence();  // this thread's stores, seen by every block before the count
  __syncthreads();
  unsigned* kiln_flag = kiln_shared<unsigned>();
  if (threadIdx.x == 0) kiln_flag[0] = atomicAdd((unsigned*)a.done, 1u) + 1u == gridDim.x;
  __syncthreads();
  const bool kiln_last = kiln_flag[0] != 0u;
  __syncthreads();  // the slot is reused
  if (kiln_last) {
    __threadfence();
)";
    for (size_t c = 0; c < options.combines.size(); ++c)
      out += fmt::format("    kiln_combine{}(a.combine{}, 0, 1);\n", c, c);
    out += "  }\n";
  }
  out += "}\n";
  return out;
}

std::vector<uint64_t> pack_cuda_args(const KernelLayout& layout, const std::vector<int64_t>& sizes,
                                     const std::vector<int64_t>& strides, const std::vector<void*>& data,
                                     const CudaLaunch& launch, const std::vector<uint64_t>& immediates) {
  size_t n_ops = layout.inputs.size() + layout.outputs.size();
  KILN_CHECK(
      sizes.size() == static_cast<size_t>(layout.rank) && strides.size() == n_ops * layout.rank && data.size() == n_ops,
      "codegen: kernel arguments do not fit the layout");
  std::vector<uint64_t> words;
  for (int64_t s : sizes) words.push_back(static_cast<uint64_t>(s));
  for (int64_t s : strides) words.push_back(static_cast<uint64_t>(s));
  for (void* p : data) words.push_back(reinterpret_cast<uint64_t>(p));
  words.push_back(static_cast<uint64_t>(launch.parts));
  words.push_back(static_cast<uint64_t>(launch.chunk));
  if (launch.index32)
    for (int64_t s : sizes) words.push_back(cuda_divisor(s));
  words.insert(words.end(), immediates.begin(), immediates.end());
  return words;
}

int cuda_batch_capacity(size_t segment_words) {
  // Batch: the segments, then count and first[capacity + 1] (u32), rounded to 8 bytes.
  size_t per = segment_words * 8 + 4, fixed = 8 + 8;
  return static_cast<int>((kCudaMaxArgBytes - fixed) / per);
}

std::vector<uint64_t> pack_cuda_batch(const std::vector<std::vector<uint64_t>>& segments,
                                      const std::vector<int64_t>& blocks, int capacity) {
  KILN_CHECK(!segments.empty() && segments.size() == blocks.size() && segments.size() <= static_cast<size_t>(capacity),
             "codegen: a batch of {} segments does not fit {} slots", segments.size(), capacity);
  const size_t words = segments[0].size();
  std::vector<uint64_t> out(words * static_cast<size_t>(capacity), 0);
  for (size_t s = 0; s < segments.size(); ++s) {
    KILN_CHECK(segments[s].size() == words, "codegen: a batch's segments have one argument layout");
    std::copy(segments[s].begin(), segments[s].end(), out.begin() + static_cast<std::ptrdiff_t>(s * words));
  }
  std::vector<uint32_t> table(static_cast<size_t>(capacity) + 2, 0);  // count, then first[capacity + 1]
  table[0] = static_cast<uint32_t>(segments.size());
  int64_t first = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    KILN_CHECK(blocks[s] >= 1, "codegen: a batch's segment launches at least one block");
    table[s + 1] = static_cast<uint32_t>(first);
    first += blocks[s];
  }
  KILN_CHECK(first < (int64_t{1} << 31), "codegen: a batch of {} blocks is too big a grid", first);
  for (size_t s = segments.size(); s <= static_cast<size_t>(capacity); ++s) table[s + 1] = static_cast<uint32_t>(first);
  for (size_t i = 0; i < table.size(); i += 2)
    out.push_back(table[i] | (i + 1 < table.size() ? uint64_t{table[i + 1]} << 32 : 0));
  return out;
}

}  // namespace kiln::codegen
