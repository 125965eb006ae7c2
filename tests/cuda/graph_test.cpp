// tests/cuda/graph_test.cpp -- CUDA graphs: stream capture and replay (runtime/cuda_internal.h)
// and compiled plans replayed as graphs (cuda/graph.h): a replay gives the results of the
// launches it replaces, bit for bit, forward, through the compiled backward and as a whole
// training step. On the host CUDA, whose driver records a captured stream's work and queues it
// again at each launch, and on a GPU. Which plans replay is decided without a device
// (tests/jit/cuda_graph_decision_test.cpp).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <string>
#include <thread>
#include <vector>

#include "ir/passes.h"
#include "jit/executable.h"
#include "jit/trace.h"
#include "runtime/cuda_internal.h"
#include "tests/cuda/cuda_test.h"
#include "tests/jit/jit_test_util.h"

namespace kiln {
namespace {

using test::kGpu;

bool same_bits(const Tensor& a, const Tensor& b) { return test::bitwise_equal(a.to(cpu), b.to(cpu)); }

// Graphs on or off for a scope.
struct Graphs {
  explicit Graphs(bool on) : was(jit::cuda_graphs_enabled()) { jit::set_cuda_graphs_enabled(on); }
  ~Graphs() { jit::set_cuda_graphs_enabled(was); }
  bool was;
};

TEST(CudaGraphCapture, AReplayRunsTheWorkTheCaptureRecorded) {
  REQUIRE_CUDA();
  Tensor x = randn({1000}).to(kGpu);
  Tensor y;
  std::string why;
  // y is allocated from the graph's pool, computed by nothing yet.
  std::unique_ptr<cuda::CapturedGraph> graph = test::capture([&] { y = exp(x) * 2.0f + x; }, &why);
  ASSERT_TRUE(graph) << why;
  for (int i = 0; i < 3; ++i) {
    Tensor fresh = randn({1000});
    x.copy_(fresh.to(kGpu));
    graph->launch();
    EXPECT_TRUE(test::close_enough(y.to(cpu), exp(fresh) * 2.0f + fresh)) << "replay " << i;
  }
}

// full() of any value fills by memsets, which a capture records (of the element's width; 8 bytes as two
// halves), not an upload from pageable memory, which a capture refuses: cuDNN's sequence
// lengths in a traced LSTM step are full({N}, T, i32).
TEST(CudaGraphCapture, FullOfAnyValueIsCaptured) {
  REQUIRE_CUDA();
  cuda::Stream side = cuda::Stream::create(0);
  cuda::synchronize(0);
  struct Fill {
    DType dtype;
    double value;
  };
  const Fill fills[] = {{DType::U8, 7},          {DType::F16, 1.5}, {DType::BF16, -2},
                        {DType::I32, 50},        {DType::F32, 0.1}, {DType::I64, -3},
                        {DType::I64, 1LL << 40}, {DType::F64, 0.1}, {DType::F64, -0.0}};
  for (const Fill& f : fills) {
    SCOPED_TRACE(std::string(dtype_name(f.dtype)) + " " + std::to_string(f.value));
    Tensor y;
    std::unique_ptr<cuda::CapturedGraph> graph;
    {
      cuda::StreamGuard on_side(side);
      cuda::begin_capture(side);
      y = full({5, 3}, f.value, f.dtype, kGpu).slice(0, 1, 5);  // (sliced: a view at an offset reads it back)
      std::string why;
      graph = cuda::end_capture(side, &why);
      ASSERT_TRUE(graph) << why;
    }
    graph->launch();
    EXPECT_TRUE(test::bitwise_equal(y.to(cpu), full({4, 3}, f.value, f.dtype)));
  }
}

// Destroying a graph waits for its replays' streams, not the device: a device-wide wait would
// end the capture another stream (another thread's, here this one's) is making.
TEST(CudaGraphCapture, DestroyingAGraphLeavesAnotherCaptureAlone) {
  REQUIRE_CUDA();
  Tensor x = randn({100}).to(kGpu);
  cuda::Stream side = cuda::Stream::create(0), other = cuda::Stream::create(0);
  cuda::synchronize(0);
  std::unique_ptr<cuda::CapturedGraph> old;
  std::string why;
  {
    cuda::StreamGuard on_side(side);
    cuda::begin_capture(side);
    Tensor y = x * 3.0f;
    old = cuda::end_capture(side, &why);
    ASSERT_TRUE(old) << why;
    old->launch();
  }
  cuda::StreamGuard on_other(other);
  cuda::begin_capture(other);
  Tensor z = x + 1.0f;
  old.reset();  // while `other` is capturing
  std::unique_ptr<cuda::CapturedGraph> graph = cuda::end_capture(other, &why);
  ASSERT_TRUE(graph) << why;
  graph->launch();
  EXPECT_TRUE(test::close_enough(z.to(cpu), x.to(cpu) + 1.0f));
}

// Work another thread queues on a stream being captured would land in the graph; the host
// driver ends such a capture. kiln's captures run on a stream of their own per thread, never one
// of the pool that Stream::create hands out round robin.
TEST(CudaGraphCapture, AnotherThreadsWorkOnTheCapturedStreamEndsTheCapture) {
  REQUIRE_HOST_CUDA();
  Tensor x = randn({100}).to(kGpu);
  cuda::Stream side = cuda::Stream::create(0);
  cuda::synchronize(0);
  std::string why;
  {
    cuda::StreamGuard on_side(side);
    cuda::begin_capture(side);
    Tensor y = x * 3.0f;
    std::thread([&] {
      cuda::StreamGuard also(side);
      Tensor z = x + 1.0f;
    }).join();
    EXPECT_FALSE(cuda::end_capture(side, &why));
  }
  EXPECT_NE(why.find("CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"), std::string::npos) << why;
  cuda::Stream mine = cuda::capture_stream(0);
  for (int i = 0; i < 80; ++i) EXPECT_NE(cuda::Stream::create(0), mine);
  EXPECT_EQ(cuda::capture_stream(0), mine);
  cuda::Stream theirs;
  std::thread([&] { theirs = cuda::capture_stream(0); }).join();
  EXPECT_NE(theirs, cuda::default_stream(0));
  EXPECT_NE(theirs, mine) << "held by this thread";
}

// On any CUDA: a thread captures on its capture stream while another launches on pool streams
// (round robin, past the pool's 32): the graph replays its own work only, and the other
// thread's ran.
TEST(CudaGraphCapture, ACaptureBesideAnotherThreadsLaunches) {
  REQUIRE_CUDA();
  Tensor x = randn({1000}).to(kGpu);
  cuda::synchronize(0);
  std::vector<Tensor> theirs;
  std::unique_ptr<cuda::CapturedGraph> graph;
  std::string why;
  Tensor y;
  cuda::Stream side = cuda::capture_stream(0);
  {
    cuda::StreamGuard on_side(side);
    cuda::begin_capture(side);
    std::thread other([&] {
      for (int i = 0; i < 64; ++i) {
        cuda::StreamGuard g(cuda::Stream::create(0));
        theirs.push_back(x * float(i));
      }
    });
    y = exp(x) * 2.0f + x;
    other.join();
    graph = cuda::end_capture(side, &why);
  }
  ASSERT_TRUE(graph) << why;
  graph->launch();
  cuda::synchronize(0);
  Tensor host = x.to(cpu);
  EXPECT_TRUE(test::close_enough(y.to(cpu), exp(host) * 2.0f + host));
  for (int i = 0; i < 64; ++i)
    EXPECT_TRUE(test::close_enough(theirs[static_cast<size_t>(i)].to(cpu), host * float(i))) << i;
}

// A replay on one stream, then a call on another at once: the second waits for the first's
// use of the graph's buffers before staging its input into them.
TEST(CudaGraphReplay, CallsOnTwoStreamsDoNotShareTheBuffersInFlight) {
  REQUIRE_CUDA();
  Graphs on(true);
  auto fn = [](const Tensor& x) { return exp(x) * 2.0f + sin(x); };
  jit::Function f = jit::trace(fn, {randn({4096}).to(kGpu)}, "two_streams");
  for (int i = 0; i < 2; ++i) f(randn({4096}).to(kGpu));  // warmed up and captured
  cuda::Stream a = cuda::Stream::create(0), b = cuda::Stream::create(0);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 6; ++i) xs.push_back(randn({4096}));
  cuda::synchronize(0);
  for (int i = 0; i < 6; ++i) {
    cuda::StreamGuard g(i % 2 ? b : a);
    ys.push_back(f(xs[static_cast<size_t>(i)].to(kGpu)));
  }
  cuda::synchronize(0);
  EXPECT_GE(f.stats().graph_replays, 6);
  for (int i = 0; i < 6; ++i)
    EXPECT_TRUE(test::close_enough(ys[static_cast<size_t>(i)].to(cpu), fn(xs[static_cast<size_t>(i)]))) << "call " << i;
}

TEST(CudaGraphCapture, ASynchronizingCallEndsTheCapture) {
  REQUIRE_CUDA();
  cuda::Stream side = cuda::Stream::create(0);
  Tensor x = randn({10}).to(kGpu);
  cuda::synchronize(0);  // x is ready for the side stream
  cuda::StreamGuard on_side(side);
  cuda::begin_capture(side);
  Tensor y = x + 1.0f;
  EXPECT_THROW(side.synchronize(), Error);
  std::string why;
  EXPECT_FALSE(cuda::end_capture(side, &why));
  EXPECT_NE(why.find("CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"), std::string::npos) << why;
  // The stream works as before.
  EXPECT_TRUE(test::close_enough((x * 3.0f).to(cpu), x.to(cpu) * 3.0f));
}

TEST(CudaGraphCapture, ADefaultStreamIsNotCaptured) {
  REQUIRE_CUDA();
  try {
    cuda::begin_capture(cuda::default_stream(0));
    FAIL() << "captured a default stream";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("default stream cannot be captured"), std::string::npos) << e.what();
  }
}

Tensor mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2) {
  return softmax(matmul(gelu(matmul(x, w1) + b1), w2), -1);
}

TEST(CudaGraphReplay, AForwardReplaysWithTheResultsOfItsLaunches) {
  REQUIRE_CUDA();
  manual_seed(1);
  Tensor w1 = randn({32, 64}).to(kGpu), b1 = randn({64}).to(kGpu), w2 = randn({64, 10}).to(kGpu);
  auto fn = [&](const Tensor& x) { return mlp(x, w1, b1, w2); };
  std::vector<Tensor> xs;
  for (int i = 0; i < 4; ++i) xs.push_back(randn({16, 32}));
  std::vector<Tensor> with, without, kept;
  {
    Graphs on(true);
    jit::Function f = jit::trace(fn, {xs[0].to(kGpu)}, "mlp");
    // Each call's input at an address of its own: a replay must read the one it is given.
    for (const Tensor& x : xs) with.push_back(f(kept.emplace_back(x.to(kGpu))));
    EXPECT_EQ(f.stats().graph_refusal, "");
    EXPECT_EQ(f.stats().graph_replays, 3) << "every call after the first";
  }
  {
    Graphs off(false);
    jit::Function f = jit::trace(fn, {xs[0].to(kGpu)}, "mlp");
    for (const Tensor& x : xs) without.push_back(f(x.to(kGpu)));
    EXPECT_EQ(f.stats().graph_replays, 0);
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_TRUE(same_bits(with[i], without[i])) << "call " << i;
    EXPECT_TRUE(test::close_enough(with[i].to(cpu), mlp(xs[i], w1.to(cpu), b1.to(cpu), w2.to(cpu)))) << "call " << i;
  }
  // Each call got its own result: the next replay did not overwrite it.
  EXPECT_FALSE(same_bits(with[1], with[2]));
}

TEST(CudaGraphReplay, TheCompiledBackwardReplaysToo) {
  REQUIRE_CUDA();
  manual_seed(2);
  Tensor w1 = randn({32, 64}), b1 = randn({64}), w2 = randn({64, 10});
  auto run = [&](bool graphs) {
    Graphs g(graphs);
    std::vector<Tensor> ps;
    for (const Tensor& p : {w1, b1, w2}) ps.push_back(p.to(kGpu).detach().requires_grad_());
    auto loss_of = [&](const Tensor& x) { return (mlp(x, ps[0], ps[1], ps[2]) * x.sum({-1}, true)).sum(); };
    jit::Function f = jit::trace(loss_of, {randn({8, 32}).to(kGpu)}, "loss");
    manual_seed(7);
    std::vector<Tensor> out;
    for (int i = 0; i < 3; ++i) {
      Tensor loss = f(randn({8, 32}).to(kGpu));
      loss.backward();
      out.push_back(loss.detach());
    }
    for (const Tensor& p : ps) out.push_back(p.grad());
    if (graphs) {
      EXPECT_EQ(f.stats().graph_replays, 4) << "2 forwards and 2 backwards";
    }
    return out;
  };
  std::vector<Tensor> with = run(true), without = run(false);
  for (size_t i = 0; i < with.size(); ++i)
    EXPECT_TRUE(same_bits(with[i], without[i]))
        << "value " << i << " differs by " << (with[i] - without[i]).abs().max().item<float>();
}

// A whole training step: the forward, the backward and the update (assigns into the params)
// replay as one graph, while the optimizer's scalars on the CPU (the step count it increments,
// the learning rate a schedule changes) are computed on the host at each call and copied in:
// training goes on bit for bit as without a graph.
void train_with_and_without_graphs(bool adam) {
  auto train = [adam](bool graphs) {
    Graphs g(graphs);
    manual_seed(3);
    nn::Linear l1(20, 32), l2(32, 5);
    l1.to(kGpu);
    l2.to(kGpu);
    std::vector<Tensor> params{l1.weight, l1.bias, l2.weight, l2.bias};
    std::unique_ptr<optim::Optimizer> opt;
    if (adam) opt = std::make_unique<optim::AdamW>(params, 0.01);
    else opt = std::make_unique<optim::SGD>(params, 0.1, optim::SgdOptions{.momentum = 0.9, .dampening = 0.1});
    auto step = [&](const Tensor& x, const Tensor& y) {
      opt->zero_grad();
      Tensor loss = cross_entropy(l2(gelu(l1(x))), y);
      loss.backward();
      opt->step();
      return loss;
    };
    Tensor x = randn({64, 20}), y = randint(0, 5, {64}, DType::I64);
    jit::Function traced = jit::trace(step, {x.to(kGpu), y.to(kGpu)}, "step");
    std::vector<Tensor> out;
    for (int i = 0; i < 6; ++i) {
      if (i == 4) opt->set_lr(adam ? 0.003 : 0.05);
      out.push_back(traced(x.to(kGpu), y.to(kGpu)));
    }
    if (graphs) {
      EXPECT_EQ(traced.stats().graph_refusal, "");
      EXPECT_EQ(traced.stats().graph_replays, 5) << "every call after the first";
    }
    for (const Tensor& p : params) out.push_back(p.detach().clone());
    return out;
  };
  std::vector<Tensor> with = train(true), without = train(false);
  for (size_t i = 0; i < with.size(); ++i) EXPECT_TRUE(same_bits(with[i], without[i])) << "value " << i;
  EXPECT_LT(with[5].item<float>(), with[0].item<float>()) << "it trains";
}

// A slice's gradient is the slice's values padded with zeros, filled by a memset, which a
// capture records (an upload from pageable memory ends the capture: the zoo's tiny GPT, whose
// positions are a slice of its table, never replayed as a graph).
TEST(CudaGraphReplay, ASlicesGradientReplays) {
  REQUIRE_CUDA();
  Graphs on(true);
  manual_seed(3);
  Tensor table = randn({16, 8}).to(kGpu).requires_grad_();
  auto loss_of = [&](const Tensor& x) { return (table.slice(0, 0, 5) * x).sum(); };
  jit::Function f = jit::trace(loss_of, {randn({5, 8}).to(kGpu)}, "slice");
  Tensor x;
  for (int i = 0; i < 3; ++i) {
    table.set_grad({});
    x = randn({5, 8});
    f(x.to(kGpu)).backward();
  }
  EXPECT_EQ(f.stats().graph_refusal, "");
  EXPECT_EQ(f.stats().graph_replays, 4) << "2 forwards and 2 backwards";
  Tensor g = table.grad().to(cpu);
  EXPECT_TRUE(same_bits(g.slice(0, 0, 5), x));
  EXPECT_EQ(g.slice(0, 5, 16).abs().sum().item<double>(), 0.0);
}

TEST(CudaGraphReplay, AWholeSgdStepReplays) {
  REQUIRE_CUDA();
  train_with_and_without_graphs(false);
}

TEST(CudaGraphReplay, AWholeAdamWStepReplays) {
  REQUIRE_CUDA();
  train_with_and_without_graphs(true);
}

// A gather's index check cannot wait inside a graph: each replay defers its flags to the
// device's next synchronizing call, as an eager gather does; the graph keeps replaying.
TEST(CudaGraphReplay, ABadIndexInAReplayIsReportedAtTheNextRead) {
  REQUIRE_CUDA();
  Graphs g(true);
  jit::Function f = jit::trace([](const Tensor& x, const Tensor& i) { return gather(x, 1, i) * 2.0f; },
                               {randn({4, 6}).to(kGpu), zeros({4, 1}, DType::I64).to(kGpu)}, "pick");
  Tensor x = randn({4, 6}).to(kGpu), good = full({4, 1}, 5, DType::I64).to(kGpu);
  Tensor bad = full({4, 1}, 6, DType::I64).to(kGpu);
  f(x, good);
  f(x, good);  // captured
  EXPECT_TRUE(test::close_enough(f(x, good).to(cpu), (gather(x, 1, good) * 2.0f).to(cpu)));
  EXPECT_EQ(f.stats().graph_replays, 2);
  f(x, bad);              // replayed: its check is read at the next call that waits for the device
  Tensor y = f(x, good);  // replayed, not waiting
  try {
    y.to(cpu);
    FAIL() << "the bad index went unreported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gather: index 6 is out of range for a dim of size 6"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(f.stats().graph_refusal, "");
  EXPECT_TRUE(test::close_enough(f(x, good).to(cpu), (gather(x, 1, good) * 2.0f).to(cpu))) << "reported once";
  EXPECT_EQ(f.stats().graph_replays, 5);
}

// The host CUDA's counts of the calls that made the host wait for a device, and of uploads
// from pageable memory.
long long host_count(const char* which) {
  void* lib = dlopen(std::getenv("KILN_CUDA_DRIVER"), RTLD_LAZY);
  auto count = lib ? reinterpret_cast<long long (*)()>(dlsym(lib, which)) : nullptr;
  EXPECT_NE(count, nullptr) << which;
  long long n = count ? count() : -1;
  if (lib) dlclose(lib);
  return n;
}

// A replayed step never waits for the device: its index checks are deferred, the host values
// it reads (the random state of its dropout, the learning rate) go up from page-locked memory,
// and its inputs and outputs are copied on the device.
TEST(CudaGraphReplay, AReplayNeverWaitsForTheDevice) {
  REQUIRE_HOST_CUDA();
  Graphs g(true);
  manual_seed(8);
  nn::Linear l1(20, 32), l2(32, 6);
  l1.to(kGpu);
  l2.to(kGpu);
  optim::AdamW opt({l1.weight, l1.bias, l2.weight, l2.bias}, 0.01);
  auto step = [&](const Tensor& x, const Tensor& i, const Tensor& y) {
    opt.zero_grad();
    Tensor h = nn::dropout(gelu(l1(x)), 0.1, true);
    Tensor loss = cross_entropy(gather(l2(h), 1, i), y);
    loss.backward();
    opt.step();
    return loss;
  };
  Tensor x = randn({16, 20}).to(kGpu), i = randint(0, 6, {16, 4}, DType::I64).to(kGpu);
  Tensor y = randint(0, 4, {16}, DType::I64).to(kGpu);
  jit::Function f = jit::trace(step, {x, i, y}, "step");
  f(x, i, y);
  f(x, i, y);  // captured
  cuda::synchronize();
  const long long waits = host_count("kiln_host_cuda_synchronizations");
  const long long pageable = host_count("kiln_host_cuda_pageable_uploads");
  std::vector<Tensor> losses;
  for (int k = 0; k < 5; ++k) losses.push_back(f(x, i, y));
  EXPECT_EQ(host_count("kiln_host_cuda_synchronizations"), waits) << "a replay waited for the device";
  EXPECT_EQ(host_count("kiln_host_cuda_pageable_uploads"), pageable) << "a replay uploaded from pageable memory";
  EXPECT_EQ(f.stats().graph_replays, 6);
  EXPECT_EQ(f.stats().graph_refusal, "");
  EXPECT_NE(losses[0].item<float>(), losses[1].item<float>()) << "each replay draws its own dropout mask";
}

// Parameters passed at other addresses (a loaded module moved, a plan run by hand): the plan
// is captured again for them.
TEST(CudaGraphReplay, MovedParametersAreCapturedAgain) {
  REQUIRE_CUDA();
  Graphs g(true);
  ir::Graph plan = ir::parse(
      "graph @f(%0: f32[4,8]@cuda:0) params(%1: f32[8,8]@cuda:0 \"w\") -> (f32[4,8]@cuda:0) {\n"
      "  %2 = matmul %0, %1 : f32[4,8]@cuda:0\n"
      "  %3 = tanh %2 : f32[4,8]@cuda:0\n"
      "  return %3\n"
      "}\n");
  for (ir::Node& n : plan.nodes) n.grad = false;
  jit::Executable exec(ir::fuse(plan));
  Tensor x = randn({4, 8}), w = randn({8, 8}), w2 = randn({8, 8});
  Tensor xd = x.to(kGpu), wd = w.to(kGpu), w2d = w2.to(kGpu);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(test::close_enough(exec.run({&xd, 1}, {&wd, 1})[0].to(cpu), tanh(matmul(x, w)))) << "call " << i;
  EXPECT_EQ(exec.stats().graph_captures, 1u);
  EXPECT_TRUE(test::close_enough(exec.run({&xd, 1}, {&w2d, 1})[0].to(cpu), tanh(matmul(x, w2))));
  EXPECT_EQ(exec.stats().graph_captures, 2u);
  EXPECT_EQ(exec.stats().graph_replays, 3u);
}

// Device inputs that stay where they are (an optimizer's gradients, a reused batch buffer) are
// read in place: a replay copies nothing in. An input met elsewhere captures the plan again, with
// every input copied into the graph's buffers from then on; later moves capture nothing.
TEST(CudaGraphReplay, InputsThatStayPutAreReadInPlace) {
  REQUIRE_HOST_CUDA();
  Graphs g(true);
  auto fn = [](const Tensor& x, const Tensor& y) { return exp(x) * y + 1.0f; };
  Tensor x = randn({64, 8}), y = randn({8});
  Tensor xd = x.to(kGpu), yd = y.to(kGpu);
  jit::Function f = jit::trace(fn, {xd, yd}, "in_place");
  f(xd, yd);
  f(xd, yd);  // captured
  EXPECT_EQ(f.stats().graph_captures, 1);
  const long long copies = host_count("kiln_host_cuda_device_copies");
  for (int k = 0; k < 3; ++k) {
    x = randn({64, 8});
    xd.copy_(x);  // new values, same place (an upload): the replay reads them
    EXPECT_TRUE(test::close_enough(f(xd, yd).to(cpu), fn(x, y))) << "call " << k;
  }
  EXPECT_EQ(host_count("kiln_host_cuda_device_copies") - copies, 3) << "the outputs' copies out only";
  EXPECT_EQ(f.stats().graph_captures, 1);
  EXPECT_EQ(f.stats().graph_replays, 4);
  for (int k = 0; k < 3; ++k) {
    Tensor x2 = randn({64, 8}), y2 = randn({8});
    EXPECT_TRUE(test::close_enough(f(x2.to(kGpu), y2.to(kGpu)).to(cpu), fn(x2, y2))) << "moved, call " << k;
  }
  EXPECT_EQ(f.stats().graph_captures, 2) << "captured again once, then staged";
  EXPECT_EQ(f.stats().graph_replays, 7);
  EXPECT_EQ(f.stats().graph_refusal, "");
}

// Dropout in a graph: each call reserves its draws on the host and the replay reads that state,
// so the masks are fresh at every call and the same as without a graph.
TEST(CudaGraphReplay, RandomDrawsAreFreshAtEveryReplay) {
  REQUIRE_CUDA();
  auto masks = [](bool graphs) {
    Graphs g(graphs);
    manual_seed(11);
    jit::Function f =
        jit::trace([](const Tensor& x) { return nn::dropout(x, 0.5, true); }, {randn({256}).to(kGpu)}, "drop");
    Tensor x = ones({256}).to(kGpu);
    std::vector<Tensor> out;
    for (int i = 0; i < 4; ++i) out.push_back(f(x));
    if (graphs) {
      EXPECT_EQ(f.stats().graph_refusal, "");
      EXPECT_EQ(f.stats().graph_replays, 3);
    }
    return out;
  };
  std::vector<Tensor> with = masks(true), without = masks(false);
  for (size_t i = 0; i < with.size(); ++i) EXPECT_TRUE(same_bits(with[i], without[i])) << "call " << i;
  EXPECT_FALSE(same_bits(with[2], with[3])) << "each replay draws anew";
}

}  // namespace
}  // namespace kiln
