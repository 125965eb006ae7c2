// tools/kiln_ir_run.cpp -- kiln-ir run: bind inputs and params, run as the jit does, time.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include "autograd/autograd.h"
#include "ir/passes.h"
#include "jit/executable.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "tools/kiln_ir.h"

namespace kiln::tools {
namespace {

// Sizes bound to the graph's symbolic dims (B in f32[B,784]) by the tensors given so far.
class SymbolSizes {
 public:
  // Does `shape` fit `want`? Binds each new symbol of `want` to the size given.
  bool match(const Dims& want, const Dims& shape) {
    if (want.size() != shape.size()) return false;
    for (size_t i = 0; i < want.size(); ++i) {
      if (!is_symbol(want[i])) {
        if (want[i] != shape[i]) return false;
        continue;
      }
      auto [it, fresh] = sizes_.try_emplace(want[i], shape[i]);
      if (!fresh && it->second != shape[i]) return false;
    }
    return true;
  }
  // `want` with its symbols replaced by their sizes; throws naming `what` for an unbound one.
  Dims concrete(const Dims& want, const std::string& what) const {
    Dims out = want;
    for (int64_t& d : out) {
      if (!is_symbol(d)) continue;
      auto it = sizes_.find(d);
      if (it == sizes_.end()) {
        std::string name = shape_str({d});  // "[B]"
        throw Error(fmt::format("run: {} has symbolic dim {}, which no --input binds", what,
                                name.substr(1, name.size() - 2)));
      }
      d = it->second;
    }
    return out;
  }

 private:
  std::map<int64_t, int64_t> sizes_;
};

// randn for floats, randint in [0, 4) for integers (valid as small indices), 0/1 for bool.
Tensor random_tensor(const TensorType& t) {
  if (is_float(t.dtype)) return randn(t.shape, DType::F32).to(t.dtype);
  if (t.dtype == DType::Bool) return randint(0, 2, t.shape, DType::I64).to(DType::Bool);
  return randint(0, 4, t.shape, DType::I64).to(t.dtype);
}

std::vector<Tensor> bind_inputs(const ir::Graph& g, const RunOptions& opt, SymbolSizes& sym) {
  KILN_CHECK(opt.inputs.empty() || opt.inputs.size() == g.inputs.size(),
             "run: @{} takes {} inputs, got {} --input (give all of them, or none for random)",
             g.name, g.inputs.size(), opt.inputs.size());
  std::vector<Tensor> in(g.inputs.size());
  for (size_t i = 0; i < opt.inputs.size(); ++i) {
    const TensorType& want = g.type(g.inputs[i]);
    Tensor t = load_npy(opt.inputs[i]);
    KILN_CHECK(t.dtype() == want.dtype && sym.match(want.shape, t.shape()),
               "run: {} holds {}, but input {} of @{} is {}", opt.inputs[i], t.type().str(), i,
               g.name, want.str());
    in[i] = t;
  }
  for (size_t i = opt.inputs.size(); i < g.inputs.size(); ++i) {
    TensorType t = g.type(g.inputs[i]);
    t.shape = sym.concrete(t.shape, fmt::format("input {} ({})", i, t.str()));
    in[i] = random_tensor(t);
  }
  return in;
}

std::vector<Tensor> bind_params(const Module& m, const SymbolSizes& sym) {
  const ir::Graph& g = m.graph;
  if (!m.params.empty()) return m.params;
  std::vector<Tensor> params;
  for (size_t i = 0; i < g.params.size(); ++i) {
    TensorType t = g.type(g.params[i]);
    t.shape = sym.concrete(t.shape, fmt::format("param {} ({})", i, t.str()));
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
  std::string s = nans == static_cast<int64_t>(v.size())
                      ? "all nan"
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
  KILN_CHECK(m.params.empty() || m.params.size() == g.params.size(),
             "run: the file holds {} params for @{}'s {}", m.params.size(), g.name,
             g.params.size());
  manual_seed(opt.seed);
  DimNamesScope names(&g.dim_names);  // messages name the graph's symbolic dims
  SymbolSizes sym;
  std::vector<Tensor> inputs = bind_inputs(g, opt, sym);
  std::vector<Tensor> params = bind_params(m, sym);
  NoGradGuard no_grad;  // an inference run: nothing to tape
  ir::Graph run = g;
  if (opt.fuse) {
    std::vector<std::string> passes = ir::default_pipeline();
    passes.push_back("fuse");
    run = ir::run_passes(std::move(run), passes);
  }
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
             1e3 * total / static_cast<double>(opt.repeat), opt.repeat, opt.repeat == 1 ? "" : "s",
             1e3 * best);
}

}  // namespace kiln::tools
