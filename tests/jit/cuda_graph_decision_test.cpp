// tests/jit/cuda_graph_decision_test.cpp -- which compiled plans replay as CUDA graphs
// (jit/graph_replay.h), decided from the plan alone: no device is needed, so these run on every
// build. Capture and replay themselves run on the host CUDA (tests/cuda/graph_test.cpp).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "jit/graph_replay.h"

namespace kiln::jit {
namespace {

// A plan as jit runs it: nothing taped (the text does not carry the mark; jit clears it on
// the plans of differentiable and no-grad calls).
ir::Graph plan(const std::string& text) {
  ir::Graph g = ir::parse(text);
  for (ir::Node& n : g.nodes) n.grad = false;
  return g;
}

std::string refusal(const std::string& text) { return graph_replay_refusal(plan(text)); }

TEST(CudaGraphDecision, AStaticPlanOnOneDeviceReplays) {
  EXPECT_EQ(refusal("graph @f(%0: f32[8,8]@cuda:0, %1: f32[8]@cuda:0) -> (f32[8,8]@cuda:0) {\n"
                    "  %2 = matmul %0, %0 : f32[8,8]@cuda:0\n"
                    "  %3 = fused %2, %1 : f32[8,8]@cuda:0 {\n"
                    "    %0 = add $0, $1 : f32[8,8]@cuda:0\n"
                    "    %1 = relu %0 : f32[8,8]@cuda:0\n"
                    "    yield %1\n"
                    "  }\n"
                    "  return %3\n"
                    "}\n"),
            "");
}

TEST(CudaGraphDecision, ACpuScalarConstantIsPartOfTheGraph) {
  // Its value is read when the kernel is launched: the same at every replay.
  EXPECT_EQ(refusal("graph @f(%0: f32[4]@cuda:0) -> (f32[4]@cuda:0) {\n"
                    "  %1 = const 2.0 : f32[]\n"
                    "  %2 = mul %0, %1 : f32[4]@cuda:0\n"
                    "  return %2\n"
                    "}\n"),
            "");
}

TEST(CudaGraphDecision, CpuScalarsAreTheHostPart) {
  // An optimizer's learning rate and step count: 0-d CPU params, the step count incremented on
  // the host, the rate read by a device op. The host part runs at every call; the rate is
  // copied into a device scalar before each launch.
  ir::Graph g = plan(
      "graph @f(%0: f32[4]@cuda:0) params(%1: f32[4]@cuda:0 \"w\", %2: f64[] \"lr\", "
      "%3: f64[] \"step\") -> (f32[4]@cuda:0) {\n"
      "  %4 = add %3, 1 : f64[]\n"
      "  %5 = mul %0, %2 : f32[4]@cuda:0\n"
      "  %6 = sub %1, %5 : f32[4]@cuda:0\n"
      "  assign %1, %6\n"
      "  assign %3, %4\n"
      "  return %5\n"
      "}\n");
  ReplayLayout l = replay_layout(g);
  ASSERT_EQ(l.refusal, "");
  EXPECT_EQ(l.crossing, std::vector<uint32_t>{2});
  EXPECT_EQ(l.host, (std::vector<char>{ReplayLayout::kHost, ReplayLayout::kDevice, ReplayLayout::kDevice,
                                       ReplayLayout::kDevice, ReplayLayout::kHost}));
  ASSERT_EQ(l.host_assigns.size(), 1u);
  EXPECT_EQ(l.host_assigns[0], (std::pair<size_t, uint32_t>{2, 4}));
}

TEST(CudaGraphDecision, AConstantCopiedToTheDeviceIsCopiedOnce) {
  ReplayLayout l =
      replay_layout(plan("graph @f(%0: f32[2]@cuda:0) -> (f32[2]@cuda:0) {\n"
                         "  %1 = const [1.5, 2.5] : f32[2]\n"
                         "  %2 = to_device %1 {device=cuda:0} : f32[2]@cuda:0\n"
                         "  %3 = mul %0, %2 : f32[2]@cuda:0\n"
                         "  return %3\n"
                         "}\n"));
  ASSERT_EQ(l.refusal, "");
  EXPECT_TRUE(l.crossing.empty());
  EXPECT_EQ(l.uploads, std::vector<uint32_t>{1});
}

TEST(CudaGraphDecision, AValueTheHostReadsFromTheDeviceIsRefused) {
  std::string why = refusal(
      "graph @f(%0: f32[4]@cuda:0) -> (f32[]) {\n"
      "  %1 = sum %0 {axes=[], keepdim=false} : f32[]@cuda:0\n"
      "  %2 = to_device %1 {device=cpu} : f32[]\n"
      "  return %2\n"
      "}\n");
  EXPECT_NE(why.find("%1 (f32[]@cuda:0) is read on the cpu: that waits for the device"), std::string::npos) << why;
}

TEST(CudaGraphDecision, TwoDevicesAreRefused) {
  std::string why = refusal(
      "graph @f(%0: f32[4]@cuda:0, %1: f32[4]@cuda:1) -> (f32[4]@cuda:0, f32[4]@cuda:1) {\n"
      "  %2 = exp %0 : f32[4]@cuda:0\n"
      "  %3 = exp %1 : f32[4]@cuda:1\n"
      "  return %2, %3\n"
      "}\n");
  EXPECT_NE(why.find("is not on cuda:0"), std::string::npos) << why;
}

TEST(CudaGraphDecision, ACpuPlanIsNotACudaGraph) {
  ir::Graph g = plan("graph @f(%0: f32[4]) -> (f32[4]) {\n  %1 = exp %0 : f32[4]\n  return %1\n}\n");
  EXPECT_FALSE(uses_cuda(g));
  EXPECT_EQ(graph_replay_refusal(g), "it runs on the cpu");
}

TEST(CudaGraphDecision, RandomDrawsReadTheGeneratorsStateFromTheHost) {
  // The state (seed, offset) is an argument each call reserves its draws with: a host value,
  // copied in before each launch, so every replay draws anew.
  ReplayLayout l =
      replay_layout(plan("graph @f(%0: f32[4]@cuda:0, %1: i64[2]) -> (f32[4]@cuda:0) {\n"
                         "  %2 = rand %1 {shape=[4], dtype=f32} : f32[4]@cuda:0\n"
                         "  %3 = mul %0, %2 : f32[4]@cuda:0\n"
                         "  return %3\n"
                         "}\n"));
  EXPECT_EQ(l.refusal, "");
  EXPECT_EQ(l.crossing, std::vector<uint32_t>{1});
}

TEST(CudaGraphDecision, TapedOpsAreRefused) {
  ir::Graph g = ir::parse(
      "graph @f(%0: f32[4]@cuda:0) -> (f32[4]@cuda:0) {\n"
      "  %1 = exp %0 : f32[4]@cuda:0\n"
      "  return %1\n"
      "}\n");
  EXPECT_EQ(graph_replay_refusal(g), "op exp records autograd: the tape keeps each call's tensors");
}

TEST(CudaGraphDecision, CollectivesAreRefused) {
  std::string why = refusal(
      "graph @f(%0: f32[4]@cuda:0) -> (f32[4]@cuda:0) {\n"
      "  %1 = all_reduce %0 {group=1, reduce=sum} : f32[4]@cuda:0\n"
      "  return %1\n"
      "}\n");
  EXPECT_EQ(why, "op all_reduce is a collective");
}

TEST(CudaGraphDecision, DynamicShapesAreRefused) {
  std::string why = refusal(
      "graph @f(%0: f32[n,4]@cuda:0) -> (f32[n,4]@cuda:0) {\n"
      "  %1 = exp %0 : f32[n,4]@cuda:0\n"
      "  return %1\n"
      "}\n");
  EXPECT_NE(why.find("has a dynamic shape"), std::string::npos) << why;
}

TEST(CudaGraphDecision, AnOutputThatViewsAnArgumentIsRefused) {
  std::string why = refusal(
      "graph @f(%0: f32[2,4]@cuda:0) -> (f32[4,2]@cuda:0, f32[2,4]@cuda:0) {\n"
      "  %1 = permute %0 {axes=[1,0]} : f32[4,2]@cuda:0\n"
      "  %2 = exp %0 : f32[2,4]@cuda:0\n"
      "  return %1, %2\n"
      "}\n");
  EXPECT_EQ(why, "output 0 is a view of an argument: a replay returns copies");
  // An argument returned as itself is fine: plans return a copy of it anyway.
  EXPECT_EQ(refusal("graph @f(%0: f32[4]@cuda:0) -> (f32[4]@cuda:0, f32[4]@cuda:0) {\n"
                    "  %1 = exp %0 : f32[4]@cuda:0\n"
                    "  return %0, %1\n"
                    "}\n"),
            "");
}

TEST(CudaGraphDecision, TheSwitchTurnsEveryPlanOff) {
  const char* text =
      "graph @f(%0: f32[4]@cuda:0) -> (f32[4]@cuda:0) {\n  %1 = exp %0 : f32[4]@cuda:0\n  return %1\n}\n";
  ASSERT_EQ(refusal(text), "");
  set_cuda_graphs_enabled(false);
  std::string off = refusal(text);
  set_cuda_graphs_enabled(true);
  EXPECT_EQ(off, "CUDA graphs are off (KILN_CUDA_GRAPHS=0 or jit::set_cuda_graphs_enabled)");
  EXPECT_EQ(refusal(text), "");
}

}  // namespace
}  // namespace kiln::jit
