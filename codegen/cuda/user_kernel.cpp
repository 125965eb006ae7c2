// codegen/cuda/user_kernel.cpp -- the CUDA C around a user's kernel body (user_kernel.h).
#include "codegen/cuda/user_kernel.h"

#include <fmt/format.h>

#include <cctype>
#include <set>

#include "codegen/cuda/emit.h"
#include "runtime/check.h"

namespace kiln::codegen {
namespace {

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// The operand sizes and strides every user kernel reads, and the offset of a flat index.
static_assert(kUserKernelMaxDims == 8, "kiln_dims below holds 8 dims");
constexpr const char* kUserPrelude = R"(struct kiln_dims {
  long long size[8];
  long long stride[8];
  int ndim;
  long long numel;
};
// The element offset of flat (row-major) index i in an operand of dims d.
__device__ __forceinline__ long long kiln_offset(long long i, const kiln_dims& d) {
  long long at = 0;
  for (int k = d.ndim - 1; k >= 0; --k) {
    at += (i % d.size[k]) * d.stride[k];
    i /= d.size[k];
  }
  return at;
}
)";

}  // namespace

void check_user_kernel_names(const UserKernelText& k) {
  KILN_CHECK(!k.name.empty() && k.name.find_first_of("\"\\\n\r") == std::string::npos,
             "cuda::Kernel: the name '{}' must be non-empty, without quotes, backslashes or line breaks", k.name);
  std::set<std::string> seen;
  auto check = [&](const std::string& n, const char* what) {
    KILN_CHECK(is_identifier(n), "cuda::Kernel {}: {} name '{}' is not a C identifier", k.name, what, n);
    KILN_CHECK(n.rfind("kiln_", 0) != 0, "cuda::Kernel {}: {} name '{}' starts with kiln_, which kiln's own names use",
               k.name, what, n);
    KILN_CHECK(seen.insert(n).second, "cuda::Kernel {}: the name '{}' is used twice", k.name, n);
  };
  for (const std::string& n : k.input_names) check(n, "input");
  for (const std::string& n : k.output_names) check(n, "output");
  for (const auto& [n, v] : k.template_args) check(n, "template argument");
  // (kiln names the entry point by finding the first "kiln_kernel(" of the text.)
  KILN_CHECK(k.header.find("kiln_kernel(") == std::string::npos,
             "cuda::Kernel {}: the header may not name kiln_kernel, the entry point kiln writes", k.name);
}

std::string user_kernel_source(const UserKernelText& k) {
  check_user_kernel_names(k);
  KILN_ASSERT(k.input_dtypes.size() == k.input_names.size() && k.output_dtypes.size() == k.output_names.size());
  std::string out = cuda_prelude();
  out += kUserPrelude;
  out += fmt::format("// the user kernel \"{}\"\n", k.name);
  for (const auto& [n, v] : k.template_args) {
    if (const DType* t = std::get_if<DType>(&v)) out += fmt::format("typedef {} {};\n", cuda_element_type(*t), n);
    else if (const bool* b = std::get_if<bool>(&v)) out += fmt::format("constexpr bool {} = {};\n", n, *b);
    else out += fmt::format("constexpr long long {} = {}LL;\n", n, std::get<int64_t>(v));
  }
  if (!k.header.empty()) out += fmt::format("#line 1 \"{} (header)\"\n{}\n", k.name, k.header);
  std::string params;
  for (size_t i = 0; i < k.input_names.size(); ++i)
    params += fmt::format("{}const {}* __restrict__ {}, const kiln_dims {}_dims", params.empty() ? "" : ", ",
                          cuda_element_type(k.input_dtypes[i]), k.input_names[i], k.input_names[i]);
  for (size_t i = 0; i < k.output_names.size(); ++i)
    params += fmt::format("{}{}* __restrict__ {}, const kiln_dims {}_dims", params.empty() ? "" : ", ",
                          cuda_element_type(k.output_dtypes[i]), k.output_names[i], k.output_names[i]);
  out += fmt::format("extern \"C\" __global__ void kiln_kernel({}) {{\n#line 1 \"{}\"\n{}\n}}\n", params, k.name,
                     k.source);
  return out;
}

}  // namespace kiln::codegen
