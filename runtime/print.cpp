// runtime/print.cpp -- `std::cout << t` in PyTorch's layout: tensor([[1.0000, 2.0000], ...]).
#include <cmath>
#include <ostream>
#include <sstream>

#include "runtime/api.h"
#include "runtime/check.h"

namespace kiln {
namespace {

constexpr int64_t kSummarizeAbove = 1000;  // elements; larger tensors print their edges
constexpr int64_t kEdgeItems = 3;
constexpr size_t kLineWidth = 80;  // rows longer than this wrap

struct Style {
  bool is_float = false, all_whole = true, sci = false;
  size_t width = 1;
};

std::string format_value(double v, const Style& s, DType t) {
  if (t == DType::Bool) return v != 0 ? "True" : "False";
  if (!s.is_float) return fmt::format("{}", static_cast<int64_t>(v));
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (s.sci) return fmt::format("{:.4e}", v);
  if (s.all_whole) return fmt::format("{:.0f}.", v);
  return fmt::format("{:.4f}", v);
}

// Index lists per dim, with -1 standing for "..." when summarizing.
std::vector<int64_t> shown(int64_t n, bool summarize) {
  std::vector<int64_t> idx;
  if (!summarize || n <= 2 * kEdgeItems) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
    idx.push_back(-1);
    for (int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
  }
  return idx;
}

void print_dim(std::ostream& os, const std::vector<double>& v, const Dims& shape, size_t d, int64_t offset,
               const Style& s, DType t, bool summarize, size_t indent) {
  if (d == shape.size()) {
    std::string txt = format_value(v[static_cast<size_t>(offset)], s, t);
    os << std::string(s.width > txt.size() ? s.width - txt.size() : 0, ' ') << txt;
    return;
  }
  int64_t stride = 1;
  for (size_t i = d + 1; i < shape.size(); ++i) stride *= shape[i];
  os << '[';
  auto idx = shown(shape[d], summarize);
  bool row = d + 1 == shape.size();
  // A row puts as many values on a line as fit in kLineWidth after its indent (PyTorch's rule).
  size_t room = kLineWidth - std::min(kLineWidth, indent + d);
  size_t per_line = std::max<size_t>(1, room / (s.width + 2));
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k > 0) {
      os << ',';
      if (row && k % per_line != 0) os << ' ';
      else os << std::string(row ? 1 : shape.size() - d - 1, '\n') << std::string(indent + d + 1, ' ');
    }
    if (idx[k] < 0) os << (row ? " ..." : "...");
    else print_dim(os, v, shape, d + 1, offset + idx[k] * stride, s, t, summarize, indent);
  }
  os << ']';
}

// Appends the values the printout shows (all of them unless summarizing) to `out`.
void collect_shown(const std::vector<double>& v, const Dims& shape, size_t d, int64_t offset, bool summarize,
                   std::vector<double>* out) {
  if (d == shape.size()) {
    out->push_back(v[static_cast<size_t>(offset)]);
    return;
  }
  int64_t stride = 1;
  for (size_t i = d + 1; i < shape.size(); ++i) stride *= shape[i];
  for (int64_t i : shown(shape[d], summarize))
    if (i >= 0) collect_shown(v, shape, d + 1, offset + i * stride, summarize, out);
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  if (!t.has_storage()) t.data_ptr();  // throws: a traced tensor has no values to print
  std::vector<double> v = t.to_vector<double>();
  Style s;
  s.is_float = is_float(t.dtype());
  bool summarize = t.numel() > kSummarizeAbove;
  std::vector<double> seen;  // as in PyTorch, only the values shown decide the format
  collect_shown(v, t.shape(), 0, 0, summarize, &seen);
  double lo = INFINITY, hi = 0;
  for (double x : seen) {
    if (!std::isfinite(x)) continue;
    s.all_whole = s.all_whole && x == std::floor(x);
    double a = std::abs(x);
    if (a > 0) lo = std::min(lo, a);
    hi = std::max(hi, a);
  }
  // PyTorch's rule: scientific notation when the range is wide or values are extreme.
  if (s.is_float && lo != INFINITY) s.sci = hi / lo > 1000.0 || hi > 1e8 || lo < 1e-4;
  if (s.is_float && s.sci) s.all_whole = false;
  // Float columns are as wide as the finite nonzero values; "nan", "inf" or "-0." may stick out.
  for (double x : seen)
    if (!s.is_float || (std::isfinite(x) && x != 0)) s.width = std::max(s.width, format_value(x, s, t.dtype()).size());
  os << "tensor(";
  if (t.dim() == 0) os << format_value(v[0], s, t.dtype());
  else if (t.numel() == 0) os << "[]";
  else print_dim(os, v, t.shape(), 0, 0, s, t.dtype(), summarize, 7);
  bool default_dtype = t.dtype() == DType::F32 || t.dtype() == DType::I64 || t.dtype() == DType::Bool;
  if (t.numel() == 0 && t.dim() != 1) os << ", size=" << shape_str(t.shape());
  if (!default_dtype) os << ", dtype=" << dtype_name(t.dtype());
  if (!t.device().is_cpu()) os << ", device=" << t.device().str();
  return os << ')';
}

std::string Tensor::str() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

}  // namespace kiln
