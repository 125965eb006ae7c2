// runtime/ops/conv_onednn.cpp -- conv2d's passes through oneDNN (see conv_onednn.h). The only
// file that includes oneDNN's headers.
#include "runtime/ops/conv_onednn.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if KILN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <unordered_map>
#include <vector>

#include "runtime/ops/gemm.h"
#include "runtime/ops/loops.h"
#include "runtime/parallel.h"

// Debian's oneDNN runs on OpenMP (libgomp); its thread count is the calling thread's OpenMP
// setting, which each call here lowers to 1 for its duration.
extern "C" int omp_get_max_threads(void);
extern "C" void omp_set_num_threads(int);
#endif

namespace kiln::conv {

namespace {
std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("KILN_ONEDNN");
    return !(env && std::strcmp(env, "0") == 0);
  }()};
  return on;
}
}  // namespace

void set_onednn_enabled(bool on) { enabled_flag().store(on, std::memory_order_relaxed); }

#if !KILN_HAVE_ONEDNN

bool onednn_enabled() { return false; }
bool onednn_forward(const Problem&, const float*, const float*, float*) { return false; }
bool onednn_input_grad(const Problem&, const float*, const float*, float*) { return false; }
bool onednn_weight_grad(const Problem&, const float*, const float*, float*) { return false; }

#else

bool onednn_enabled() { return enabled_flag().load(std::memory_order_relaxed); }

namespace {

using dnnl::memory;
using Dims = memory::dims;

enum class Pass : int64_t { Forward, InputGrad, WeightGrad };

const dnnl::engine& engine() {
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// oneDNN on the calling thread only, for the scope's life.
class SingleThreaded {
 public:
  SingleThreaded() : saved_(omp_get_max_threads()) {
    if (saved_ != 1) omp_set_num_threads(1);
  }
  ~SingleThreaded() {
    if (saved_ != 1) omp_set_num_threads(saved_);
  }
  SingleThreaded(const SingleThreaded&) = delete;
  SingleThreaded& operator=(const SingleThreaded&) = delete;

 private:
  int saved_;
};

// One block of a problem, run as one oneDNN call: images [n0, n0 + nn) and a range of the split
// channels (groups when groups > 1; else output channels, or input channels for the input
// gradient).
struct Block {
  int64_t n0, nn, ch0, nch;
};

// Where a block's three operands lie in kiln's contiguous tensors, as oneDNN memory descs (with
// the full tensors' strides) and element offsets.
struct Operands {
  memory::desc x, w, y;
  int64_t x_off, w_off, y_off;
};

Operands operands(Pass pass, const Problem& p, const Block& b) {
  const Geometry& g = p.geo;
  int64_t kk = g.kh * g.kw, hw = g.h * g.w, pix = g.pixels(), og = p.o / p.groups;
  int64_t xc = p.c, yc = p.o, xc0 = 0, yc0 = 0;  // block's channel counts and first channels
  Dims wdims, wstrides;
  int64_t w_off = 0;
  if (p.groups > 1) {
    xc = b.nch * g.c, yc = b.nch * og, xc0 = b.ch0 * g.c, yc0 = b.ch0 * og;
    wdims = {b.nch, og, g.c, g.kh, g.kw};
    wstrides = {og * g.c * kk, g.c * kk, kk, g.kw, 1};
    w_off = b.ch0 * og * g.c * kk;
  } else if (pass == Pass::InputGrad) {
    xc = b.nch, xc0 = b.ch0;
    wdims = {p.o, b.nch, g.kh, g.kw};
    wstrides = {p.c * kk, kk, g.kw, 1};
    w_off = b.ch0 * kk;
  } else {
    yc = b.nch, yc0 = b.ch0;
    wdims = {b.nch, p.c, g.kh, g.kw};
    wstrides = {p.c * kk, kk, g.kw, 1};
    w_off = b.ch0 * p.c * kk;
  }
  auto f32 = memory::data_type::f32;
  return {memory::desc({b.nn, xc, g.h, g.w}, f32, Dims{p.c * hw, hw, g.w, 1}),
          memory::desc(wdims, f32, wstrides),
          memory::desc({b.nn, yc, g.oh, g.ow}, f32, Dims{p.o * pix, pix, g.ow, 1}),
          b.n0 * p.c * hw + xc0 * hw,
          w_off,
          b.n0 * p.o * pix + yc0 * pix};
}

// A block shape's primitives: the convolution, and the reorders between kiln's layout and the
// one the convolution chose, for its two inputs and its output (none where they agree).
struct Step {
  std::optional<dnnl::reorder> reorder;  // user layout -> the convolution's (inputs) or back (output)
  memory::desc user, inner;
  size_t scratch = 0;
  size_t inner_bytes() const { return reorder ? inner.get_size() : 0; }
};

struct Prims {
  dnnl::primitive conv;
  int in0_arg, in1_arg, out_arg;
  Step in0, in1, out;  // forward: x, w -> y; input grad: g, w -> dx; weight grad: x, g -> dw
  size_t conv_scratch = 0;
};

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

Step make_step(const memory::desc& user, const memory::desc& inner, bool to_inner) {
  Step s;
  s.user = user, s.inner = inner;
  if (user == inner) return s;
  auto pd = to_inner ? dnnl::reorder::primitive_desc(engine(), user, engine(), inner, user_scratchpad())
                     : dnnl::reorder::primitive_desc(engine(), inner, engine(), user, user_scratchpad());
  s.reorder.emplace(pd);
  s.scratch = pd.scratchpad_desc().get_size();
  return s;
}

memory::desc any(const memory::desc& d) {
  return memory::desc(d.dims(), memory::data_type::f32, memory::format_tag::any);
}

// One operand of a pass: kiln's layout, the convolution's, and the argument it is bound to.
struct Role {
  memory::desc user, inner;
  int arg;
};

// A pass's primitives from its primitive descriptor: two inputs in, one output back.
template <class Conv, class Pd>
std::unique_ptr<Prims> prims_of(const Pd& pd, const Role& in0, const Role& in1, const Role& out) {
  auto prims = std::make_unique<Prims>();
  prims->conv = Conv(pd);
  prims->in0 = make_step(in0.user, in0.inner, true);
  prims->in1 = make_step(in1.user, in1.inner, true);
  prims->out = make_step(out.user, out.inner, false);
  prims->in0_arg = in0.arg, prims->in1_arg = in1.arg, prims->out_arg = out.arg;
  prims->conv_scratch = pd.scratchpad_desc().get_size();
  return prims;
}

std::unique_ptr<Prims> make_prims(Pass pass, const Problem& p, const Block& b) {
  const Geometry& g = p.geo;
  Operands o = operands(pass, p, b);
  Dims strides{g.sh, g.sw}, dil{g.dh - 1, g.dw - 1}, pad{g.ph, g.pw};
  auto alg = dnnl::algorithm::convolution_direct;
  auto attr = user_scratchpad();
  dnnl::convolution_forward::desc forward{
      dnnl::prop_kind::forward_training, alg, any(o.x), any(o.w), any(o.y), strides, dil, pad, pad};
  if (pass == Pass::Forward) {
    dnnl::convolution_forward::primitive_desc pd(forward, attr, engine());
    return prims_of<dnnl::convolution_forward>(pd, {o.x, pd.src_desc(), DNNL_ARG_SRC},
                                               {o.w, pd.weights_desc(), DNNL_ARG_WEIGHTS},
                                               {o.y, pd.dst_desc(), DNNL_ARG_DST});
  }
  dnnl::convolution_forward::primitive_desc hint(forward, engine());
  if (pass == Pass::InputGrad) {
    dnnl::convolution_backward_data::primitive_desc pd({alg, any(o.x), any(o.w), any(o.y), strides, dil, pad, pad},
                                                       attr, engine(), hint);
    return prims_of<dnnl::convolution_backward_data>(pd, {o.y, pd.diff_dst_desc(), DNNL_ARG_DIFF_DST},
                                                     {o.w, pd.weights_desc(), DNNL_ARG_WEIGHTS},
                                                     {o.x, pd.diff_src_desc(), DNNL_ARG_DIFF_SRC});
  }
  dnnl::convolution_backward_weights::primitive_desc pd({alg, any(o.x), any(o.w), any(o.y), strides, dil, pad, pad},
                                                        attr, engine(), hint);
  return prims_of<dnnl::convolution_backward_weights>(pd, {o.x, pd.src_desc(), DNNL_ARG_SRC},
                                                      {o.y, pd.diff_dst_desc(), DNNL_ARG_DIFF_DST},
                                                      {o.w, pd.diff_weights_desc(), DNNL_ARG_DIFF_WEIGHTS});
}

// Primitives by (pass, problem, block shape); nullptr remembers that oneDNN has none. Creating
// one costs tens of microseconds, so a step's convolutions find theirs here after the first.
using Key = std::array<int64_t, 18>;
std::mutex g_cache_mutex;
std::map<Key, std::shared_ptr<const Prims> > g_cache;
constexpr size_t kCacheCapacity = 512;

// Shared, so a caller's primitives outlive a clear by another thread that fills the cache.
std::shared_ptr<const Prims> find_prims(Pass pass, const Problem& p, const Block& b) {
  const Geometry& g = p.geo;
  Key key{static_cast<int64_t>(pass),
          p.c,
          p.o,
          p.groups,
          g.h,
          g.w,
          g.kh,
          g.kw,
          g.sh,
          g.sw,
          g.ph,
          g.pw,
          g.dh,
          g.dw,
          b.nn,
          b.nch,
          0,
          0};
  std::lock_guard lock(g_cache_mutex);
  auto it = g_cache.find(key);
  if (it != g_cache.end()) return it->second;
  if (g_cache.size() >= kCacheCapacity) g_cache.clear();
  std::shared_ptr<const Prims> prims;
  try {
    SingleThreaded one;  // a primitive's blocking is chosen for the thread count it will run on
    prims = make_prims(pass, p, b);
  } catch (const dnnl::error&) {
    prims = nullptr;  // unimplemented for this shape: conv.cpp's kernels run it
  }
  return g_cache.emplace(key, std::move(prims)).first->second;
}

// 64-byte aligned scratch memory, one set per thread, grown as needed.
class Buffer {
 public:
  void* get(size_t bytes) {
    if (bytes > size_) {
      data_.reset(static_cast<char*>(::operator new (bytes, std::align_val_t{64})));
      size_ = bytes;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(char* p) const { ::operator delete (p, std::align_val_t{64}); }
  };
  std::unique_ptr<char, Free> data_;
  size_t size_ = 0;
};

// Runs one block: reorders in, the convolution, the reorder out. `in1_inner`: the second input
// already in the convolution's layout (a weight every block reads, reordered once per call).
void run_block(const Prims& pr, const float* in0, const float* in1, float* out, void* in1_inner = nullptr) {
  thread_local Buffer bufs[4];
  thread_local dnnl::stream stream(engine());
  size_t scratch = std::max({pr.conv_scratch, pr.in0.scratch, pr.in1.scratch, pr.out.scratch});
  std::optional<memory> scratch_mem;
  if (scratch)
    scratch_mem.emplace(memory::desc({static_cast<int64_t>(scratch)}, memory::data_type::u8, memory::format_tag::a),
                        engine(), bufs[3].get(scratch));
  auto exec = [&](const dnnl::primitive& prim, std::unordered_map<int, memory> args) {
    if (scratch_mem) args.emplace(DNNL_ARG_SCRATCHPAD, *scratch_mem);
    prim.execute(stream, args);
  };
  auto input = [&](const Step& s, const float* user, Buffer& buf) {
    memory user_mem(s.user, engine(), const_cast<float*>(user));
    if (!s.reorder) return user_mem;
    memory inner(s.inner, engine(), buf.get(s.inner_bytes()));
    exec(*s.reorder, {{DNNL_ARG_FROM, user_mem}, {DNNL_ARG_TO, inner}});
    return inner;
  };
  memory a = input(pr.in0, in0, bufs[0]);
  memory b = in1_inner ? memory(pr.in1.inner, engine(), in1_inner) : input(pr.in1, in1, bufs[1]);
  memory user_out(pr.out.user, engine(), out);
  memory result = pr.out.reorder ? memory(pr.out.inner, engine(), bufs[2].get(pr.out.inner_bytes())) : user_out;
  exec(pr.conv, {{pr.in0_arg, a}, {pr.in1_arg, b}, {pr.out_arg, result}});
  if (pr.out.reorder) exec(*pr.out.reorder, {{DNNL_ARG_FROM, result}, {DNNL_ARG_TO, user_out}});
  stream.wait();
}

// How a problem is cut, by its shape alone: images in blocks (at most kImageBlocks of them, of
// at least kMinBlockWork multiply-adds: each call has a fixed cost in reorders and setup), and,
// when a large problem has few images, the split channels in blocks of a multiple of 16
// (oneDNN's channel blocking) so that small batches still give every thread work.
constexpr int64_t kImageBlocks = 8;
constexpr int64_t kMinBlocks = 4;
constexpr int64_t kMinBlockWork = int64_t{1} << 20;

struct Cut {
  int64_t image_block, chan_block, chans;
  int64_t images(const Problem& p) const { return (p.n + image_block - 1) / image_block; }
  int64_t blocks(const Problem& p) const { return images(p) * ((chans + chan_block - 1) / chan_block); }
  Block block(const Problem& p, int64_t i) const {
    int64_t ib = i % images(p), cb = i / images(p);
    int64_t n0 = ib * image_block, ch0 = cb * chan_block;
    return {n0, std::min(image_block, p.n - n0), ch0, std::min(chan_block, chans - ch0)};
  }
};

Cut cut(Pass pass, const Problem& p) {
  Cut c;
  int64_t image_work = std::max<int64_t>(1, p.o * p.geo.rows() * p.geo.pixels());
  c.image_block =
      std::min(p.n, std::max((p.n + kImageBlocks - 1) / kImageBlocks, (kMinBlockWork + image_work - 1) / image_work));
  c.chans = p.groups > 1 ? p.groups : pass == Pass::InputGrad ? p.c : p.o;
  c.chan_block = c.chans;
  int64_t images = c.images(p);
  if (images < kMinBlocks && p.n * image_work >= kMinBlocks * kMinBlockWork) {
    int64_t want = (kMinBlocks + images - 1) / images;
    int64_t quantum = p.groups > 1 ? 1 : 16;
    int64_t block = ((c.chans + want - 1) / want + quantum - 1) / quantum * quantum;
    c.chan_block = std::max<int64_t>(block, std::min<int64_t>(c.chans, 16));
  }
  return c;
}

// Where oneDNN is not the faster choice (measured with Debian's oneDNN 2.6 on AVX2; see the
// conv cases of benchmarks/): a dense convolution's weight gradient of more than kDenseWeightGrad
// multiply-adds per image, over a batch of kMinBlocks images or more, is one large GEMM for
// kiln's own kernel, which OpenBLAS runs 1.1-1.8x faster than oneDNN's direct backward-weights
// kernel over blocks of images (3x3, 64 channels, batch 8 and 32). Smaller batches (oneDNN then
// splits output channels: 1.1-1.4x faster at batch 1 and 2), small convolutions and grouped
// ones (up to 5x for depthwise) go to oneDNN. Between the two, 128 channels at batch 4 is still
// 1.2x faster in oneDNN.
constexpr int64_t kDenseWeightGrad = int64_t{1} << 20;

bool prefer_kiln(Pass pass, const Problem& p) {
  return pass == Pass::WeightGrad && p.groups == 1 && p.n >= kMinBlocks &&
         p.o * p.geo.rows() * p.geo.pixels() > kDenseWeightGrad;
}

// Runs a pass over all its blocks in parallel; false if oneDNN cannot run some block shape
// (found before anything is written). Weight-gradient blocks over images write partial sums,
// added in image order afterwards.
bool run(Pass pass, const Problem& p, const float* in0, const float* in1, float* out) {
  if (!onednn_enabled() || p.n == 0 || prefer_kiln(pass, p)) return false;
  Cut c = cut(pass, p);
  int64_t blocks = c.blocks(p);
  std::vector<std::shared_ptr<const Prims> > prims(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i) {
    Block b = c.block(p, i);
    bool same_as_first = i > 0 && b.nn == c.block(p, 0).nn && b.nch == c.block(p, 0).nch;
    prims[i] = same_as_first ? prims[0] : find_prims(pass, p, b);
    if (!prims[i]) return false;
  }
  // A weight every block reads whole (blocks of images only) is reordered into the
  // convolution's layout once, not once per block: for a late layer's small images that
  // reorder is most of a block's memory traffic.
  Buffer shared_weight;
  void* weight_inner = nullptr;
  bool shared = pass != Pass::WeightGrad && blocks > 1 && c.chan_block == c.chans && prims[0]->in1.reorder;
  for (int64_t i = 1; shared && i < blocks; ++i) shared = prims[i]->in1.inner == prims[0]->in1.inner;
  if (shared) {
    const Step& w = prims[0]->in1;
    SingleThreaded one;
    thread_local dnnl::stream stream(engine());
    weight_inner = shared_weight.get(w.inner_bytes());
    Buffer scratch;
    std::unordered_map<int, memory> args{{DNNL_ARG_FROM, memory(w.user, engine(), const_cast<float*>(in1))},
                                         {DNNL_ARG_TO, memory(w.inner, engine(), weight_inner)}};
    if (w.scratch)
      args.emplace(DNNL_ARG_SCRATCHPAD,
                   memory(memory::desc({static_cast<int64_t>(w.scratch)}, memory::data_type::u8, memory::format_tag::a),
                          engine(), scratch.get(w.scratch)));
    w.reorder->execute(stream, args);
    stream.wait();
  }
  // The weight gradient's blocks over images each write a partial sum.
  int64_t parts = pass == Pass::WeightGrad ? c.images(p) : 1;
  int64_t wsize = p.o * p.geo.rows();
  std::vector<float> partials(parts > 1 ? static_cast<size_t>(parts * wsize) : 0);
  auto run_blocks = [&](int64_t i0, int64_t i1) {
    SingleThreaded one;
    for (int64_t i = i0; i < i1; ++i) {
      Block b = c.block(p, i);
      Operands o = operands(pass, p, b);
      if (pass == Pass::Forward) {
        run_block(*prims[i], in0 + o.x_off, in1 + o.w_off, out + o.y_off, weight_inner);
      } else if (pass == Pass::InputGrad) {
        run_block(*prims[i], in0 + o.y_off, in1 + o.w_off, out + o.x_off, weight_inner);
      } else {
        float* dw = parts > 1 ? partials.data() + (b.n0 / c.image_block) * wsize : out;
        run_block(*prims[i], in0 + o.x_off, in1 + o.y_off, dw + o.w_off);
      }
    }
  };
  int64_t block_macs = std::max<int64_t>(1, p.n * p.o * p.geo.rows() * p.geo.pixels() / blocks);
  parallel_for(0, blocks, std::max<int64_t>(1, gemm::kGemmParallelWork / block_macs), run_blocks);
  if (parts > 1) {
    parallel_for(0, wsize, std::max<int64_t>(1, kParallelGrain / parts), [&](int64_t e0, int64_t e1) {
      for (int64_t e = e0; e < e1; ++e) {
        float sum = partials[e];
        for (int64_t k = 1; k < parts; ++k) sum += partials[k * wsize + e];
        out[e] = sum;
      }
    });
  }
  return true;
}

}  // namespace

bool onednn_forward(const Problem& p, const float* x, const float* w, float* y) {
  return run(Pass::Forward, p, x, w, y);
}
bool onednn_input_grad(const Problem& p, const float* g, const float* w, float* dx) {
  return run(Pass::InputGrad, p, g, w, dx);
}
bool onednn_weight_grad(const Problem& p, const float* x, const float* g, float* dw) {
  return run(Pass::WeightGrad, p, x, g, dw);
}

#endif

}  // namespace kiln::conv
