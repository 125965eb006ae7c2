// tests/ir/builder_test.cpp -- graphs built in C++ get their types from the shape rules.
#include "ir/builder.h"

#include <gtest/gtest.h>

#include <kiln/kiln.h>

#include "jit/run.h"

namespace kiln::ir {
namespace {

TEST(Builder, TypesComeFromTheShapeRulesAndTheGraphRuns) {
  Builder b("affine");
  uint32_t x = b.input({f32, {4, 3}}), w = b.param({f32, {3, 2}}, "w");
  Attrs half;
  half.imm_mask = 2;
  half.imm[1] = 0.5;
  uint32_t y = b.op(OpId::Mul, {b.op(OpId::Matmul, {x, w})}, half);
  Attrs sum_rows;
  sum_rows.axes = {1};
  b.output(b.op(OpId::Sum, {b.op(OpId::Relu, {y})}, sum_rows));
  Graph g = b.finish();
  EXPECT_EQ(print(g),
            "graph @affine(%0: f32[4,3]) params(%1: f32[3,2] \"w\") -> (f32[4]) {\n"
            "  %2 = matmul %0, %1 : f32[4,2]\n"
            "  %3 = mul %2, 0.5 : f32[4,2]\n"
            "  %4 = relu %3 : f32[4,2]\n"
            "  %5 = sum %4 {axes=[1], keepdim=false} : f32[4]\n"
            "  return %5\n"
            "}\n");
  Tensor xs = randn({4, 3}), ws = randn({3, 2});
  Tensor in[] = {xs}, params[] = {ws};
  EXPECT_TRUE(allclose(jit::run_graph(g, in, params)[0], sum(relu(matmul(xs, ws) * 0.5), {1})));
}

TEST(Builder, AnIllTypedNodeThrowsWhereItIsAdded) {
  Builder b;
  uint32_t x = b.input({f32, {4, 3}}), y = b.input({f32, {5, 2}});
  try {
    b.op(OpId::Matmul, {x, y});
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inner dimensions differ"), std::string::npos) << e.what();
  }
}

TEST(Builder, SymbolicDimsFlowThroughAndAssignsVerify) {
  Builder b("step");
  int64_t batch = b.dim("B");
  uint32_t x = b.input({f32, {batch, 3}}), m = b.param({f32, {3}}, "m");
  Attrs over_rows;
  over_rows.axes = {0};
  uint32_t s = b.op(OpId::Sum, {x}, over_rows);
  b.assign(m, b.op(OpId::Add, {m, s}));
  b.output(b.op(OpId::Exp, {x}));
  Graph g = b.finish();
  EXPECT_NE(print(g).find("-> (f32[B,3])"), std::string::npos) << print(g);
  EXPECT_EQ(b.dim("B"), batch);
  EXPECT_EQ(parse(print(g)).nodes.size(), g.nodes.size());
}

}  // namespace
}  // namespace kiln::ir
