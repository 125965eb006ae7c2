// tests/ir/specialize_test.cpp -- symbolic dims: multiples (B*128) and symbolic shape
// attributes parse, print and verify; bind_dims binds and checks a call's sizes; specialize
// gives the concrete graph, which fuses as a traced one does.
#include <gtest/gtest.h>

#include "ir/graph.h"
#include "ir/passes.h"
#include "ir/specialize.h"
#include "tests/unit/test_util.h"

namespace kiln::ir {
namespace {

using test::expect_error;

// Tokens over a batch B: [B,128,16] flattened to [B*128,16], a row softmax, and back.
constexpr const char* kTokens = R"(graph @tokens(%0: f32[B,128,16]) -> (f32[B,128,16]) {
  %1 = reshape %0 {shape=[B*128,16]} : f32[B*128,16]
  %2 = amax %1 {axes=[1], keepdim=true} : f32[B*128,1]
  %3 = sub %1, %2 : f32[B*128,16]
  %4 = exp %3 : f32[B*128,16]
  %5 = sum %4 {axes=[1], keepdim=true} : f32[B*128,1]
  %6 = div %4, %5 : f32[B*128,16]
  %7 = reshape %6 {shape=[B,128,16]} : f32[B,128,16]
  return %7
}
)";

TEST(Specialize, MultiplesAndSymbolicShapesRoundTripAndVerify) {
  Graph g = parse(kTokens);
  EXPECT_NO_THROW(verify(g));
  EXPECT_EQ(print(g, {.locations = false}), kTokens);
  EXPECT_EQ(dim_factor("B*128").base, "B");
  EXPECT_EQ(dim_factor("B*128").factor, 128);
  EXPECT_EQ(dim_factor("B").factor, 1);
  EXPECT_EQ(dim_factor("x*1").factor, 1);  // not a multiple: a name
}

TEST(Specialize, VerifyRejectsAMultipleThatDoesNotFollow) {
  std::string text = kTokens;
  text.replace(text.find("%7 = reshape %6 {shape=[B,128,16]} : f32[B,128,16]"), 50,
               "%7 = reshape %6 {shape=[B,64,32]} : f32[B,128,16]");
  Graph g = parse(text);
  expect_error([&] { verify(g); }, {"verify", "reshape"});
  expect_error([] { parse("graph @g(%0: f32[B*1]) -> (f32[B*1]) {\n  return %0\n}\n"); }, {"factor from 2 to 2^31"});
  expect_error([] { parse("graph @g(%0: f32[B*10000000000000]) -> (f32[B*10000000000000]) {\n  return %0\n}\n"); },
               {"factor from 2 to 2^31"});
  // Multiples of a base no dim names alone stay multiples of one size.
  Graph m = parse("graph @g(%0: f32[B*2]) -> (f32[B*4]) {\n  %1 = cat %0, %0 {dim=0} : f32[B*4]\n  return %1\n}\n");
  EXPECT_NO_THROW(verify(m));
}

TEST(Specialize, BindsSizesFromTheArgumentsAndChecksThem) {
  Graph g = parse(kTokens);
  std::vector<std::string> names = {"tokens"};
  DimSizes s = bind_dims(g, std::vector<TensorType>{{DType::F32, {5, 128, 16}}}, names, "@tokens");
  EXPECT_EQ(s.at("B"), 5);
  EXPECT_EQ(dim_size(g, g.type(2).shape[0], s), 640);
  expect_error([&] { bind_dims(g, std::vector<TensorType>{{DType::F32, {5, 64, 16}}}, names, "@tokens"); },
               {"@tokens", "input 'tokens'", "dim 1 is 64, expected 128"});
  expect_error([&] { bind_dims(g, std::vector<TensorType>{{DType::F64, {5, 128, 16}}}, names, "@tokens"); },
               {"input 'tokens'", "expected dtype f32"});
  expect_error([&] { bind_dims(g, std::vector<TensorType>{{DType::F32, {5, 128}}}, names, "@tokens"); },
               {"input 'tokens'", "expected rank 3"});
  // One name, one size; a multiple must be that multiple.
  Graph two = parse("graph @g(%0: f32[B,2], %1: f32[B*2]) -> (f32[B,2]) {\n  return %0\n}\n");
  expect_error([&] { bind_dims(two, std::vector<TensorType>{{DType::F32, {3, 2}}, {DType::F32, {7}}}, {}, "@g"); },
               {"input 1", "dim 0 is 7, expected B*2 = 6 as B is 3"});
  EXPECT_EQ(bind_dims(two, std::vector<TensorType>{{DType::F32, {3, 2}}, {DType::F32, {6}}}, {}, "@g").at("B"), 3);
}

TEST(Specialize, TheConcreteGraphFusesAsATracedOneDoes) {
  Graph g = parse(kTokens);
  Graph c = specialize(g, {{"B", 3}});
  EXPECT_NO_THROW(verify(c));
  EXPECT_TRUE(c.dim_names.empty());
  EXPECT_EQ(c.type(c.inputs[0]).str(), "f32[3,128,16]");
  EXPECT_EQ(c.nodes[0].attrs.shape, (Dims{384, 16}));
  std::vector<std::string> passes = default_pipeline();
  passes.push_back("fuse");
  Graph f = run_passes(c, passes);
  int fused = 0;
  for (const Node& n : f.nodes) fused += n.kind == NodeKind::Fused;
  EXPECT_EQ(fused, 1) << print(f);
  expect_error([&] { specialize(g, {}); }, {"no size for symbolic dim B"});
}

}  // namespace
}  // namespace kiln::ir
