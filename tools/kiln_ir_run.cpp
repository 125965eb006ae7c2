// tools/kiln_ir_run.cpp -- kiln-ir run: bind inputs and params, run as the jit does, time.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include "autograd/autograd.h"
#include "ir/passes.h"
#include "ir/specialize.h"
#include "jit/executable.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "tools/kiln_ir.h"

namespace kiln::tools {
namespace {

// randn for floats, randint in [0, 4) for integers (valid as small indices), 0/1 for bool.
Tensor random_tensor(const TensorType& t) {
  if (is_float(t.dtype)) return randn(t.shape, DType::F32).to(t.dtype);
  if (t.dtype == DType::Bool) return randint(0, 2, t.shape, DType::I64).to(DType::Bool);
  return randint(0, 4, t.shape, DType::I64).to(t.dtype);
}

// The sizes of the graph's dims: from the --input files (a symbol takes the size it meets
// first; later inputs must agree), then from --dim NAME=SIZE.
struct Bound {
  std::vector<Tensor> inputs;
  ir::DimSizes sizes;
};

Bound bind_inputs(const Module& m, const RunOptions& opt) {
  const ir::Graph& g = m.graph;
  Bound b;
  b.inputs.resize(g.inputs.size());
  size_t positional = 0, given = 0;
  for (const std::string& spec : opt.inputs) {
    size_t eq = spec.find('=');
    given += eq == std::string::npos ||
             std::find(m.input_names.begin(), m.input_names.end(), spec.substr(0, eq)) == m.input_names.end();
  }
  KILN_CHECK(given == 0 || given == g.inputs.size(),
             "run: @{} takes {} inputs, got {} --input (give all of them in order, none for random, or a module's by "
             "name=file.npy)",
             g.name, g.inputs.size(), given);
  for (const std::string& spec : opt.inputs) {
    size_t i = positional;
    std::string path = spec;
    size_t eq = spec.find('=');
    auto named = eq == std::string::npos ? m.input_names.end()
                                         : std::find(m.input_names.begin(), m.input_names.end(), spec.substr(0, eq));
    if (named != m.input_names.end()) {
      i = static_cast<size_t>(named - m.input_names.begin());
      path = spec.substr(eq + 1);
    } else {
      ++positional;
    }
    KILN_CHECK(i < g.inputs.size(), "run: @{} takes {} inputs; '{}' would be input {}{}", g.name, g.inputs.size(), spec,
               i, m.input_names.empty() ? "" : fmt::format(" (its inputs: {})", fmt::join(m.input_names, ", ")));
    KILN_CHECK(!b.inputs[i].defined(), "run: input {} is given twice", i);
    Tensor t = load_npy(path);
    const TensorType& want = g.type(g.inputs[i]);
    bool fits = t.dtype() == want.dtype && t.dim() == static_cast<int64_t>(want.shape.size());
    for (size_t d = 0; fits && d < want.shape.size(); ++d) {
      int64_t w = want.shape[d], n = t.shape()[d];
      if (!is_symbol(w)) {
        fits = w == n;
        continue;
      }
      // A product with another name unbound waits for the final check (ir::bind_dims's rule).
      ir::DimTerm term = ir::dim_term(g.dim_names.at(symbol_index(w)));
      fits = ir::bind_term(term, n, b.sizes) != ir::TermBinding::Conflict;
    }
    KILN_CHECK(fits, "run: {} holds {}, but input {}{} of @{} is {}", path, t.type().str(), i,
               i < m.input_names.size() ? " (" + m.input_names[i] + ")" : "", g.name, want.str());
    b.inputs[i] = t;
  }
  for (auto& [name, size] : parse_dims(g, opt.dims)) {
    auto it = b.sizes.find(name);
    KILN_CHECK(it == b.sizes.end() || it->second == size, "run: --dim {}={} but the inputs give {}", name, size,
               it == b.sizes.end() ? 0 : it->second);
    b.sizes[name] = size;
  }
  auto concrete = [&](TensorType t, const std::string& what) {
    for (int64_t& d : t.shape) {
      if (!is_symbol(d)) continue;
      for (std::string_view name : ir::dim_term(g.dim_names.at(symbol_index(d))).symbols)
        KILN_CHECK(b.sizes.count(name),
                   "run: {} has symbolic dim {}, which no --input or --dim binds (give --dim {}=N)", what, name, name);
      d = ir::dim_size(g, d, b.sizes);
    }
    return t;
  };
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (!b.inputs[i].defined()) b.inputs[i] = random_tensor(concrete(g.type(g.inputs[i]), fmt::format("input {}", i)));
  return b;
}

std::vector<Tensor> bind_params(const Module& m) {
  const ir::Graph& g = m.graph;
  if (!m.params.empty()) return m.params;
  std::vector<Tensor> params;
  for (size_t i = 0; i < g.params.size(); ++i) {
    TensorType t = g.type(g.params[i]);
    for (int64_t d : t.shape)
      KILN_CHECK(!is_symbol(d), "run: param {} ({}) has a symbolic shape: give the module's tensors", i, t.str());
    params.push_back(random_tensor(t));
  }
  return params;
}

// "min -1.2 max 3.4 mean 0.5 first [..]" over every element, NaNs counted apart.
std::string summary(const Tensor& t) {
  if (t.numel() == 0) return "empty";
  std::vector<double> v = t.to_vector<double>();
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
  int64_t nans = 0;
  for (double x : v) {
    if (std::isnan(x)) {
      ++nans;
      continue;
    }
    lo = std::min(lo, x), hi = std::max(hi, x), sum += x;
  }
  std::vector<double> first(v.begin(), v.begin() + std::min<size_t>(v.size(), 6));
  std::string s = nans == static_cast<int64_t>(v.size()) ? "all nan"
                                                         : fmt::format("min {:.6g} max {:.6g} mean {:.6g}", lo, hi,
                                                                       sum / static_cast<double>(v.size() - nans));
  if (nans && nans < static_cast<int64_t>(v.size())) s += fmt::format(" nans {}", nans);
  return s + fmt::format(" first [{:.6g}{}]", fmt::join(first, ", "), v.size() > 6 ? ", ..." : "");
}

void save_outputs(const std::vector<Tensor>& outs, const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < outs.size(); ++i) {
    std::string path = (std::filesystem::path(dir) / fmt::format("out{}.npy", i)).string();
    save_npy(outs[i], path);
    fmt::print("wrote {}\n", path);
  }
}

}  // namespace

void run_module(const Module& m, const RunOptions& opt) {
  const ir::Graph& g = m.graph;
  KILN_CHECK(opt.repeat >= 1, "run: --repeat must be at least 1, got {}", opt.repeat);
  KILN_CHECK(m.params.empty() || m.params.size() == g.params.size(), "run: the file holds {} params for @{}'s {}",
             m.params.size(), g.name, g.params.size());
  manual_seed(opt.seed);
  DimNamesScope names(&g.dim_names);  // messages name the graph's symbolic dims
  Bound bound = bind_inputs(m, opt);
  std::vector<Tensor>& inputs = bound.inputs;
  std::vector<Tensor> params = bind_params(m);
  NoGradGuard no_grad;  // an inference run: nothing to tape
  // Symbolic dims take the bound sizes first, so the graph fuses as a traced one does.
  ir::Graph run = opt.fuse || m.format == "module" ? fused_graph(g, bound.sizes) : ir::specialize(g, bound.sizes);
  for (ir::Node& n : run.nodes) n.grad = false;
  jit::Executable exec(std::move(run));
  double total = 0, best = std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < opt.repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Tensor> outs = exec.run(inputs, params);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += s, best = std::min(best, s);
    if (r > 0) continue;
    // Printed before the next run: assigns may update params that outputs alias.
    for (size_t i = 0; i < outs.size(); ++i)
      fmt::print("output {}: {}  {}\n", i, outs[i].type().str(), summary(outs[i]));
    if (!opt.save_dir.empty()) save_outputs(outs, opt.save_dir);
  }
  jit::ExecutableStats st = exec.stats();
  fmt::print("plan: {} fused kernel{}, {} eager op{}, {} bytes of planned workspace\n", st.kernels,
             st.kernels == 1 ? "" : "s", st.ops, st.ops == 1 ? "" : "s", st.planned_bytes);
  fmt::print("time: {:.4g} ms per call (mean of {} run{}, min {:.4g} ms)\n",
             1e3 * total / static_cast<double>(opt.repeat), opt.repeat, opt.repeat == 1 ? "" : "s", 1e3 * best);
}

}  // namespace kiln::tools
