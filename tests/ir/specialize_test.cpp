// tests/ir/specialize_test.cpp -- symbolic dims: products (B*128, B*T) and symbolic shape
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
  EXPECT_EQ(dim_term("B*128").symbols, (std::vector<std::string_view>{"B"}));
  EXPECT_EQ(dim_term("B*128").factor, 128);
  EXPECT_TRUE(dim_term("B").alone());
  EXPECT_TRUE(dim_term("x*1").alone());  // not a product: a name
  EXPECT_EQ(dim_term("x*1").symbols[0], "x*1");
  EXPECT_TRUE(dim_term("2*B").alone());  // the number comes last
  EXPECT_EQ(dim_term("T*B*4").symbols, (std::vector<std::string_view>{"B", "T"}));
  EXPECT_EQ(dim_term_name(dim_term("T*B*4")), "B*T*4");
  EXPECT_EQ(dim_term_name(dim_term("T*T")), "T*T");
}

// A sequence model's shapes: tokens [B,T] flattened to B*T rows of an embedding, and the
// positions and a causal mask made from iota over T (kept symbolic, not a constant).
constexpr const char* kSequence = R"(graph @seq(%0: i64[B,T], %1: f32[16,8]) -> (f32[B,T,8], i64[T,T]) {
  %2 = reshape %0 {shape=[B*T]} : i64[B*T]
  %3 = index_select %1, %2 {dim=0} : f32[B*T,8]
  %4 = reshape %3 {shape=[B,T,8]} : f32[B,T,8]
  %5 = iota {shape=[T], device=cpu} : i64[T]
  %6 = reshape %5 {shape=[T,1]} : i64[T,1]
  %7 = reshape %5 {shape=[1,T]} : i64[1,T]
  %8 = sub %7, %6 : i64[T,T]
  return %4, %8
}
)";

TEST(Specialize, ProductsOfDimsRoundTripVerifyAndSpecialize) {
  Graph g = parse(kSequence);
  EXPECT_NO_THROW(verify(g));
  EXPECT_EQ(print(g, {.locations = false}), kSequence);
  // One product, one spelling, however it is written.
  std::string swapped = kSequence;
  swapped.replace(swapped.find("{shape=[B*T]} : i64[B*T]"), 24, "{shape=[T*B]} : i64[T*B]");
  EXPECT_EQ(print(parse(swapped), {.locations = false}), kSequence);
  DimSizes s = bind_dims(g, std::vector<TensorType>{{DType::I64, {3, 5}}, {DType::F32, {16, 8}}}, {}, "@seq");
  EXPECT_EQ(s.at("B"), 3);
  EXPECT_EQ(s.at("T"), 5);
  Graph c = specialize(g, s);
  EXPECT_NO_THROW(verify(c));
  EXPECT_EQ(c.type(3).str(), "f32[15,8]");
  EXPECT_EQ(c.nodes[3].attrs.shape, (Dims{5}));
  EXPECT_EQ(c.type(8).str(), "i64[5,5]");
  // A dim that is no product of its names' sizes is refused.
  std::string wrong = kSequence;
  wrong.replace(wrong.find("%6 = reshape %5 {shape=[T,1]} : i64[T,1]"), 40, "%6 = reshape %5 {shape=[B,1]} : i64[B,1]");
  expect_error([&] { verify(parse(wrong)); }, {"verify", "reshape"});
  expect_error([] { parse("graph @g(%0: f32[B*2*T]) -> (f32[B*2*T]) {\n  return %0\n}\n"); }, {"comes last"});
}

TEST(Specialize, AProductBindsTheOneNameItLeavesUnbound) {
  // T from B*T once B is known, in whichever order the inputs come.
  Graph g = parse("graph @g(%0: f32[B*T,4], %1: f32[B,2]) -> (f32[B*T,4]) {\n  return %0\n}\n");
  DimSizes s = bind_dims(g, std::vector<TensorType>{{DType::F32, {12, 4}}, {DType::F32, {3, 2}}}, {}, "@g");
  EXPECT_EQ(s.at("B"), 3);
  EXPECT_EQ(s.at("T"), 4);
  expect_error(
      [&] {
        bind_dims(g, std::vector<TensorType>{{DType::F32, {13, 4}}, {DType::F32, {3, 2}}}, {}, "@g");
      },
      {"input 0", "dim 0 (B*T) is 13", "no 3 times a size T", "B is 3"});
  // Two names unbound: no input says how B*T splits.
  Graph alone = parse("graph @g(%0: f32[B*T]) -> (f32[B*T]) {\n  return %0\n}\n");
  expect_error(
      [&] {
        bind_dims(alone, std::vector<TensorType>{{DType::F32, {12}}}, {}, "@g");
      },
      {"dim 0 (B*T) is 12", "no input gives the sizes of its names alone"});
  // A square binds its root; a size with none is refused.
  Graph square = parse("graph @g(%0: f32[T*T], %1: f32[T*4]) -> (f32[T*T]) {\n  return %0\n}\n");
  EXPECT_EQ(bind_dims(square, std::vector<TensorType>{{DType::F32, {49}}, {DType::F32, {28}}}, {}, "@g").at("T"), 7);
  expect_error(
      [&] {
        bind_dims(square, std::vector<TensorType>{{DType::F32, {50}}, {DType::F32, {28}}}, {}, "@g");
      },
      {"input 0", "dim 0 is 50, expected T*T = 49 as T is 7"});
  Graph both = parse(
      "graph @g(%0: f32[B,T]) -> (f32[B*T*2]) {\n  %1 = reshape %0 {shape=[B*T]} : f32[B*T]\n"
      "  %2 = cat %1, %1 {dim=0} : f32[B*T*2]\n  return %2\n}\n");
  EXPECT_NO_THROW(verify(both));
  EXPECT_EQ(dim_size(both, both.type(2).shape[0], {{"B", 3}, {"T", 5}}), 30);
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
  expect_error(
      [&] {
        bind_dims(g, std::vector<TensorType>{{DType::F32, {5, 64, 16}}}, names, "@tokens");
      },
      {"@tokens", "input 'tokens'", "dim 1 is 64, expected 128"});
  expect_error(
      [&] {
        bind_dims(g, std::vector<TensorType>{{DType::F64, {5, 128, 16}}}, names, "@tokens");
      },
      {"input 'tokens'", "expected dtype f32"});
  expect_error(
      [&] {
        bind_dims(g, std::vector<TensorType>{{DType::F32, {5, 128}}}, names, "@tokens");
      },
      {"input 'tokens'", "expected rank 3"});
  // One name, one size; a multiple must be that multiple.
  Graph two = parse("graph @g(%0: f32[B,2], %1: f32[B*2]) -> (f32[B,2]) {\n  return %0\n}\n");
  expect_error(
      [&] {
        bind_dims(two, std::vector<TensorType>{{DType::F32, {3, 2}}, {DType::F32, {7}}}, {}, "@g");
      },
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
