// benchmarks/onednn_bench.cpp -- the 3x3 convolutions of train_bench.cpp through Debian's oneDNN
// called directly, forward and backward, NCHW tensors in and out (the input and output reordered
// to oneDNN's blocked layout on every call, the weight once), on oneDNN's own OpenMP threads.
// kiln's conv2d runs oneDNN inside (runtime/ops/conv_onednn.cpp), cut into shape-fixed blocks of
// single-threaded calls on kiln's pool; this column shows what that costs or gains against
// oneDNN's own threading. Built only when oneDNN is installed, outside best/torch.
#include <benchmark/benchmark.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <string>
#include <vector>

#include "benchmarks/bench_cases.h"

namespace bench = kiln::bench;

namespace {

using dnnl::memory;

// One case's engine, stream and dims (oneDNN's grouped weights are [g, o/g, c/g, kh, kw]).
struct Setup {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
  memory::dims src, wei, dst;
  explicit Setup(const bench::ConvCase& c)
      : src{c.n, c.c, c.hw, c.hw},
        wei(c.depthwise ? memory::dims{c.c, 1, 1, 3, 3} : memory::dims{c.c, c.c, 3, 3}),
        dst(src) {}
  static memory::desc any(const memory::dims& d) {
    return memory::desc(d, memory::data_type::f32, memory::format_tag::any);
  }
};

void conv_forward(benchmark::State& s, bench::ConvCase c) {
  Setup e(c);
  auto [eng, stream, src, wei, dst] = e;
  auto f32 = memory::data_type::f32;
  auto any = [](const memory::dims& d) { return Setup::any(d); };
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                       any(src), any(wei), any(dst), {1, 1}, {1, 1}, {1, 1});
  dnnl::convolution_forward::primitive_desc pd(desc, eng);
  std::vector<float> x(static_cast<size_t>(c.n * c.c * c.hw * c.hw), 0.5f), y(x.size());
  std::vector<float> w(static_cast<size_t>(c.c * (c.c / c.groups()) * 9), 0.01f);
  memory user_src({src, f32, memory::format_tag::nchw}, eng, x.data());
  memory user_dst({dst, f32, memory::format_tag::nchw}, eng, y.data());
  memory user_wei({wei, f32, c.depthwise ? memory::format_tag::goihw : memory::format_tag::oihw}, eng, w.data());
  memory src_m(pd.src_desc(), eng), wei_m(pd.weights_desc(), eng), dst_m(pd.dst_desc(), eng);
  dnnl::reorder(user_wei, wei_m).execute(stream, user_wei, wei_m);
  dnnl::reorder to_src(user_src, src_m), from_dst(dst_m, user_dst);
  dnnl::convolution_forward conv(pd);
  auto run = [&] {
    to_src.execute(stream, user_src, src_m);
    conv.execute(stream, {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, wei_m}, {DNNL_ARG_DST, dst_m}});
    from_dst.execute(stream, dst_m, user_dst);
    stream.wait();
  };
  run();
  for (auto _ : s) run();
  bench::count_flops(s, c.flops(false));
}

// Both gradients (data and weights) from an NCHW upstream gradient, as conv2d's backward would
// run them: the inputs reordered in and the gradients reordered out on every call.
void conv_backward(benchmark::State& s, bench::ConvCase c) {
  Setup e(c);
  auto [eng, stream, src, wei, dst] = e;
  auto f32 = memory::data_type::f32;
  auto any = [](const memory::dims& d) { return Setup::any(d); };
  auto alg = dnnl::algorithm::convolution_direct;
  dnnl::convolution_forward::primitive_desc hint(
      {dnnl::prop_kind::forward_training, alg, any(src), any(wei), any(dst), {1, 1}, {1, 1}, {1, 1}}, eng);
  dnnl::convolution_backward_data::primitive_desc data_pd({alg, any(src), any(wei), any(dst), {1, 1}, {1, 1}, {1, 1}},
                                                          eng, hint);
  dnnl::convolution_backward_weights::primitive_desc wei_pd({alg, any(src), any(wei), any(dst), {1, 1}, {1, 1}, {1, 1}},
                                                            eng, hint);
  auto nchw = memory::format_tag::nchw, oihw = c.depthwise ? memory::format_tag::goihw : memory::format_tag::oihw;
  std::vector<float> x(static_cast<size_t>(c.n * c.c * c.hw * c.hw), 0.5f), g(x.size(), 0.25f), dx(x.size());
  std::vector<float> w(static_cast<size_t>(c.c * (c.c / c.groups()) * 9), 0.01f), dw(w.size());
  memory user_x({src, f32, nchw}, eng, x.data()), user_g({dst, f32, nchw}, eng, g.data());
  memory user_dx({src, f32, nchw}, eng, dx.data()), user_w({wei, f32, oihw}, eng, w.data());
  memory user_dw({wei, f32, oihw}, eng, dw.data());
  memory g_data(data_pd.diff_dst_desc(), eng), w_data(data_pd.weights_desc(), eng), dx_m(data_pd.diff_src_desc(), eng);
  memory g_wei(wei_pd.diff_dst_desc(), eng), x_wei(wei_pd.src_desc(), eng), dw_m(wei_pd.diff_weights_desc(), eng);
  dnnl::convolution_backward_data bwd_data(data_pd);
  dnnl::convolution_backward_weights bwd_wei(wei_pd);
  auto run = [&] {
    dnnl::reorder(user_g, g_data).execute(stream, user_g, g_data);
    dnnl::reorder(user_w, w_data).execute(stream, user_w, w_data);
    bwd_data.execute(stream, {{DNNL_ARG_DIFF_DST, g_data}, {DNNL_ARG_WEIGHTS, w_data}, {DNNL_ARG_DIFF_SRC, dx_m}});
    dnnl::reorder(dx_m, user_dx).execute(stream, dx_m, user_dx);
    dnnl::reorder(user_g, g_wei).execute(stream, user_g, g_wei);
    dnnl::reorder(user_x, x_wei).execute(stream, user_x, x_wei);
    bwd_wei.execute(stream, {{DNNL_ARG_SRC, x_wei}, {DNNL_ARG_DIFF_DST, g_wei}, {DNNL_ARG_DIFF_WEIGHTS, dw_m}});
    dnnl::reorder(dw_m, user_dw).execute(stream, dw_m, user_dw);
    stream.wait();
  };
  run();
  for (auto _ : s) run();
  bench::count_flops(s, c.flops(true));
}

int register_cases() {
  for (const bench::ConvCase& c : bench::conv_cases())
    for (bool backward : {false, true})
      benchmark::RegisterBenchmark((c.name(backward) + "/onednn").c_str(), backward ? conv_backward : conv_forward, c)
          ->UseRealTime()
          ->MinTime(0.2);
  return 0;
}
const int registered = register_cases();

}  // namespace
