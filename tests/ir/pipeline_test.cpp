// tests/ir/pipeline_test.cpp -- a pass that fails leaves a reproducer the user can replay: a new
// private file (never a predictable name that someone else could plant a symlink at), named in
// the error with the kiln-ir command. And the parser's global state stays bounded.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "ir/graph.h"
#include "ir/passes.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

// Verifies after canonicalize: the type below disagrees with add's rule, so the pass "fails".
constexpr const char* kBroken = R"(graph @f(%0: f32[2,3], %1: f32[3]) -> (f32[3]) {
  %2 = add %0, %1 : f32[3]
  return %2
})";

std::string failure_of(const ir::Graph& g) {
  try {
    ir::run_passes(g, std::vector<std::string>{"canonicalize"});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The path between "the input graph is in " and the next ';'.
std::string reproducer_path(const std::string& msg) {
  const std::string key = "the input graph is in ";
  size_t at = msg.find(key);
  if (at == std::string::npos) return "";
  at += key.size();
  return msg.substr(at, msg.find(';', at) - at);
}

class Reproducer : public testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::path(testing::TempDir()) / ("kiln-pipeline-test-" + std::to_string(::getpid()));
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
    saved_tmpdir_ = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "";
    saved_repro_ = std::getenv("KILN_REPRO_DIR") ? std::getenv("KILN_REPRO_DIR") : "";
    ::setenv("TMPDIR", tmp_.c_str(), 1);
    ::unsetenv("KILN_REPRO_DIR");
  }
  void TearDown() override {
    auto restore = [](const char* name, const std::string& v) {
      if (v.empty()) ::unsetenv(name);
      else ::setenv(name, v.c_str(), 1);
    };
    restore("TMPDIR", saved_tmpdir_);
    restore("KILN_REPRO_DIR", saved_repro_);
    fs::remove_all(tmp_);
  }
  fs::path tmp_;
  std::string saved_tmpdir_, saved_repro_;
};

TEST_F(Reproducer, GoesToANewPrivateFileNamedInTheError) {
  ir::Graph g = ir::parse(kBroken);
  std::string msg = failure_of(g);
  ASSERT_NE(msg.find("pass canonicalize failed on @f"), std::string::npos) << msg;
  std::string path = reproducer_path(msg);
  ASSERT_FALSE(path.empty()) << msg;
  EXPECT_EQ(fs::path(path).parent_path(), tmp_ / ("kiln-" + std::to_string(::geteuid())));
  EXPECT_NE(msg.find("kiln-ir opt " + path + " --passes=canonicalize"), std::string::npos) << msg;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u) << "readable by others";
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(ir::print(ir::parse(text)), ir::print(g));
  // The same failure again gets a file of its own: nothing predictable to plant a link at.
  EXPECT_NE(reproducer_path(failure_of(g)), path);
}

TEST_F(Reproducer, AScratchFolderSomeoneElseMadeIsRefusedAndTheErrorStillExplains) {
  fs::path planted = tmp_ / ("kiln-" + std::to_string(::geteuid()));
  fs::create_directories(tmp_ / "attacker");
  fs::create_directory_symlink(tmp_ / "attacker", planted);
  std::string msg = failure_of(ir::parse(kBroken));
  EXPECT_NE(msg.find("pass canonicalize failed on @f"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nowhere"), std::string::npos) << msg;
  EXPECT_NE(msg.find("symlink"), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_empty(tmp_ / "attacker"));
}

// Dimension names belong to the graph that uses them (interned per parse): parsing text with
// ever new names grows nothing that outlives the graph, the same name means one dim within a
// graph (its fused bodies included), and one text holds a bounded number of names.
TEST(DimSymbols, NamesArePerGraph) {
  using ir::Graph, ir::parse, ir::print;
  auto text = [](const std::string& name) {
    return fmt::format("graph @f(%0: f32[{0},3]) -> (f32[{0},3]) {{\n  %1 = exp %0 : f32[{0},3]\n  return %1\n}}\n",
                       name);
  };
  for (int i = 0; i < 1000; ++i) {
    Graph g = parse(text("fresh_name_" + std::to_string(i)));
    ASSERT_EQ(g.dim_names.size(), 1u);
    EXPECT_EQ(g.type(g.inputs[0]).shape[0], symbol_dim(0));  // each parse starts afresh
  }
  Graph g = parse(text("B"));
  EXPECT_EQ(print(g), text("B"));
  std::string many = "graph @f(";
  for (size_t i = 0; i <= Graph::kMaxDimNames; ++i) many += fmt::format("{}%{}: f32[d{}]", i ? ", " : "", i, i);
  many += ") -> () {\n  return\n}\n";
  try {
    parse(many);
    ADD_FAILURE() << "parsed more names than a graph holds";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 4096 symbolic dim names"), std::string::npos) << e.what();
  }
}

// jit's lowering pipeline (the rewrites within rounding, then fuse) runs through run_passes
// like every pipeline, with the fuse pass's options: a node jit keeps out (taped) stays an op.
TEST(LoweringPipeline, FusesWithTheGivenOptions) {
  ir::Graph g = ir::parse(R"(graph @f(%0: f32[8]) -> (f32[8]) {
  %1 = exp %0 : f32[8]
  %2 = tanh %1 : f32[8]
  %3 = neg %2 : f32[8]
  return %3
})");
  for (ir::Node& n : g.nodes) n.grad = n.op == OpId::Tanh;
  std::vector<std::string> names = ir::lowering_pipeline();
  EXPECT_EQ(names.back(), "fuse");
  ir::PipelineOptions kept;
  kept.fuse.keep_out = [](const ir::Node& n) { return n.grad; };
  // Kept out, tanh splits the chain into single ops, which stay ops (a group of one is
  // dissolved); with the defaults the three are one group.
  std::string with_options = ir::print(ir::run_passes(g, names, kept));
  EXPECT_EQ(with_options.find("fused"), std::string::npos) << with_options;
  std::string without = ir::print(ir::run_passes(g, names));
  EXPECT_NE(without.find("fused"), std::string::npos) << without;
}

}  // namespace
}  // namespace kiln
