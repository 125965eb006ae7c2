// tests/ir/golden_test.cpp -- runs every tests/ir/<dir>/<case>.ir (format: golden_cases.h):
// parse, the RUN steps, print without locations, compare exactly. UPDATE_GOLDEN=1 rewrites the
// EXPECT blocks instead (EXPECT-ERROR lines are never rewritten).
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>

#include "golden_cases.h"
#include "ir/graph.h"
#include "ir/passes.h"

namespace kiln::ir {
namespace {

namespace fs = std::filesystem;
using test::GoldenCase;

// Parses and runs the steps; the printed graph without locations.
std::string run(const GoldenCase& c) {
  Graph g = parse(c.input, c.name);
  for (const std::string& step : c.steps) {
    if (step == "verify") verify(g);
    else if (step != "parse") g = run_passes(std::move(g), std::vector<std::string>{step});
  }
  return print(g, {.locations = false});
}

class GoldenFile : public testing::TestWithParam<std::string> {};

TEST_P(GoldenFile, GivesTheExpectedText) {
  GoldenCase c = test::load_case(GetParam());
  ASSERT_EQ(c.malformed, "") << c.name;
  std::string got;
  try {
    got = run(c);
  } catch (const std::exception& e) {
    EXPECT_TRUE(c.expect_error) << c.name << ": unexpected error: " << e.what();
    EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos)
        << c.name << ": the error\n  " << e.what() << "\nlacks\n  " << c.expected;
    return;
  }
  ASSERT_FALSE(c.expect_error) << c.name << ": expected an error with '" << c.expected << "', got\n" << got;
  const char* update = std::getenv("UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    if (got != c.expected)
      std::ofstream(test::kGoldenRoot / c.name, std::ios::binary) << c.input << test::kExpectLine << "\n" << got;
    return;
  }
  EXPECT_EQ(got, c.expected) << c.name << " (UPDATE_GOLDEN=1 rewrites the EXPECT block)";
}

std::string test_name(const testing::TestParamInfo<std::string>& info) {
  std::string s = info.param.substr(0, info.param.size() - 3);
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(golden, GoldenFile, testing::ValuesIn(test::golden_case_names()), test_name);

TEST(GoldenFiles, CoverEveryRegisteredPass) {
  for (const PassInfo& p : all_passes()) {
    size_t n = 0;
    if (fs::is_directory(test::kGoldenRoot / p.name))
      for (const auto& e : fs::directory_iterator(test::kGoldenRoot / p.name)) n += e.path().extension() == ".ir";
    EXPECT_GE(n, 1u) << "tests/ir/" << p.name << "/ needs golden cases";
  }
}

TEST(GoldenFiles, LiveInFoldersNamedAfterPasses) {
  for (const auto& e : fs::directory_iterator(test::kGoldenRoot)) {
    if (!e.is_directory()) continue;
    std::string dir = e.path().filename().string();
    if (dir == "verify" || dir == "parse") continue;
    EXPECT_NO_THROW(find_pass(dir)) << "tests/ir/" << dir << "/ names no pass";
  }
}

}  // namespace
}  // namespace kiln::ir
