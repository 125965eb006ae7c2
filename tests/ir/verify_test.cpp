// tests/ir/verify_test.cpp -- what the verifier rejects in graphs the text form cannot spell
// (a pass builds them): uses before definitions, wrong operand counts.
#include <gtest/gtest.h>

#include <string>

#include "ir/graph.h"

namespace kiln::ir {
namespace {

std::string verify_error(const Graph& g) {
  try {
    verify(g);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

Graph two_exps() {
  return parse(
      "graph @f(%0: f32[2]) -> (f32[2]) {\n  %1 = exp %0 : f32[2]\n  %2 = exp %1 : f32[2]\n"
      "  return %2\n}\n");
}

TEST(Verify, RejectsAUseBeforeTheDefinition) {
  Graph g = two_exps();
  std::swap(g.nodes[0], g.nodes[1]);
  EXPECT_EQ(verify_error(g),
            "verify: @f: node 0 (%2 = exp %1 : f32[2]): uses %1 before it is defined [line 2 of the "
            "printed graph]");
}

TEST(Verify, RejectsAnOutputNothingDefines) {
  Graph g = two_exps();
  g.nodes.pop_back();
  EXPECT_EQ(verify_error(g), "verify: @f: returns value 2, which is not defined");
}

TEST(Verify, RejectsTheWrongNumberOfOperands) {
  Graph g = two_exps();
  g.nodes[1].inputs.push_back(0);
  EXPECT_EQ(verify_error(g),
            "verify: @f: node 1 (%2 = exp %1 : f32[2]): exp takes 1 operands, has 2 [line 3 of the "
            "printed graph]");
}

TEST(Verify, RejectsAValueDefinedTwice) {
  Graph g = two_exps();
  g.nodes[1].result = 1;
  EXPECT_EQ(verify_error(g), "verify: @f: value 1 is defined twice");
}

}  // namespace
}  // namespace kiln::ir
