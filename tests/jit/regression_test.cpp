// tests/jit/regression_test.cpp -- programs that once gave wrong answers, kept as traced IR in
// tests/jit/regressions/ (the random generator that found them will change; these files don't).
// Each runs op by op on the eager kernels (the meaning), through the jit's passes and fused
// executable, and from the optimized graph's text.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "ir/passes.h"
#include "jit/executable.h"
#include "jit/run.h"
#include "jit_test_util.h"

namespace kiln {
namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Tensor random_value(const TensorType& t) {
  if (t.dtype == DType::I32 || t.dtype == DType::I64) return randint(-3, 4, t.shape, t.dtype);
  return (randn(t.shape, DType::F64) * 1.5).to(t.dtype);
}

// The same bits (NaN's sign included: the folded constants go through the IR's text).
void expect_same_bits(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.type().str(), want.type().str());
  EXPECT_TRUE(test::bitwise_equal(got, want)) << "got\n" << got << "\nwant\n" << want;
}

void check_regression(const std::filesystem::path& file) {
  SCOPED_TRACE(file.filename().string());
  ir::Graph g = ir::parse(read_file(file), file.filename().string());
  ir::verify(g);
  manual_seed(1);
  std::vector<Tensor> inputs, params;
  for (uint32_t v : g.inputs) inputs.push_back(random_value(g.type(v)));
  for (uint32_t v : g.params) params.push_back(random_value(g.type(v)));
  std::vector<Tensor> want = jit::run_graph(g, inputs, params);

  ir::Graph opt = ir::run_passes(g, ir::default_pipeline());
  std::string text = test::text_of(opt);
  SCOPED_TRACE("optimized:\n" + text);
  std::vector<Tensor> folded = jit::run_graph(ir::parse(text, "optimized.ir"), inputs, params);
  jit::Executable exec(ir::fuse(opt));
  std::vector<Tensor> fused = exec.run(inputs, params);
  ASSERT_EQ(folded.size(), want.size());
  ASSERT_EQ(fused.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(fmt::format("output {}", i));
    expect_same_bits(folded[i], want[i]);
    EXPECT_TRUE(test::close_enough(fused[i], want[i])) << "fused\n" << fused[i] << "\nwant\n" << want[i];
  }
}

TEST(Regression, ProgramsThatOnceFailedAgreeEagerFoldedAndFused) {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(KILN_JIT_REGRESSION_DIR)) {
    if (e.path().extension() != ".ir") continue;
    check_regression(e.path());
    ++files;
  }
  EXPECT_GE(files, 4);
}

}  // namespace
}  // namespace kiln
