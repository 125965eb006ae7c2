// tests/ir/golden_cases.h -- reads the golden case files under tests/ir/<dir>/<case>.ir.
//
// A case file: `// RUN: fold,cse,dce` (pass names; `verify` runs the verifier, `parse` nothing
// more), the input graph, then `// EXPECT:` and the printed result, or `// EXPECT-ERROR: text`
// with a piece of the error's message.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::ir::test {

inline const std::filesystem::path kGoldenRoot = KILN_IR_TEST_DIR;
inline constexpr std::string_view kRunLine = "// RUN:", kExpectLine = "// EXPECT:", kErrorLine = "// EXPECT-ERROR:";

struct GoldenCase {
  std::string name;   // "<dir>/<case>.ir", also the file name in parse errors
  std::string input;  // the file up to the EXPECT line: line numbers stay the file's
  std::vector<std::string> steps;
  bool expect_error = false;
  std::string expected;   // the printed graph, or a piece of the error message
  std::string malformed;  // why the file is not a case, or ""
};

inline std::string trim(std::string s) {
  s.erase(0, s.find_first_not_of(" \t"));
  s.erase(s.find_last_not_of(" \t\r\n") + 1);
  return s;
}

inline GoldenCase load_case(const std::string& name) {
  GoldenCase c{name, "", {}, false, "", ""};
  std::ifstream f(kGoldenRoot / name, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  if (text.rfind(kRunLine, 0) != 0) c.malformed = "the first line must be `// RUN: passes`";
  std::stringstream run(trim(text.substr(kRunLine.size(), text.find('\n') - kRunLine.size())));
  for (std::string step; std::getline(run, step, ',');) c.steps.push_back(trim(step));
  size_t at = 0;
  for (size_t next; at < text.size(); at = next) {
    next = std::min(text.find('\n', at), text.size()) + 1;
    std::string_view line = std::string_view(text).substr(at, next - at);
    if (line.rfind(kErrorLine, 0) == 0) {
      c.expect_error = true;
      c.expected = trim(std::string(line.substr(kErrorLine.size())));
      break;
    }
    if (line.rfind(kExpectLine, 0) == 0) {
      c.expected = next < text.size() ? text.substr(next) : "";
      break;
    }
  }
  if (at >= text.size()) c.malformed = "no `// EXPECT:` or `// EXPECT-ERROR:` line";
  c.input = text.substr(0, std::min(at, text.size()));
  return c;
}

/// Every case file, as "<dir>/<case>.ir", sorted.
inline std::vector<std::string> golden_case_names() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::recursive_directory_iterator(kGoldenRoot))
    if (e.is_regular_file() && e.path().extension() == ".ir")
      names.push_back(e.path().lexically_relative(kGoldenRoot).generic_string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kiln::ir::test
