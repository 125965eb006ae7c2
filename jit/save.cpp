// jit/save.cpp -- jit::save: a Function's plan as a module file (jit/module_file.h). The graph
// saved is the optimized one before fusion (the loading machine fuses for itself); its
// constants become parameters named const.N, so every tensor lies in the safetensors section.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "ir/passes.h"
#include "jit/module_file.h"
#include "jit/save.h"
#include "jit/tracer.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/files.h"
#include "runtime/registered_op.h"
#include "runtime/safetensors.h"

#ifndef KILN_VERSION_STRING
#define KILN_VERSION_STRING "unknown"
#endif

namespace kiln::jit {
namespace {

using nlohmann::json;

// ---- dynamic dims: trace again with other sizes, and turn what changed into symbols -------

// One dynamic dim: its name, the (input, dim) places it sizes, and the two sizes traced.
struct DynamicDim {
  std::string name;
  std::vector<std::pair<size_t, size_t>> places;
  int64_t base = 0, other = 0;
};

std::vector<DynamicDim> dynamic_dims(const SavedPlan& sp, const SaveOptions& o) {
  std::vector<DynamicDim> dims;
  for (const SaveOptions::Dynamic& d : o.dynamic_dims) {
    KILN_CHECK(!d.name.empty() &&
                   std::all_of(d.name.begin(), d.name.end(),
                               [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }) &&
                   !std::isdigit(static_cast<unsigned char>(d.name[0])),
               "jit::save: dynamic dim name '{}' must be an identifier (letters, digits, _)", d.name);
    KILN_CHECK(d.input < sp.example_inputs.size(), "jit::save: dynamic dim {}: @{} has {} inputs, not {}", d.name,
               sp.name, sp.example_inputs.size(), d.input + 1);
    const Tensor& x = sp.example_inputs[d.input];
    int64_t k = d.dim < 0 ? d.dim + x.dim() : d.dim;
    KILN_CHECK(k >= 0 && k < x.dim(), "jit::save: dynamic dim {}: input {} is {}, which has no dim {}", d.name, d.input,
               x.type().str(), d.dim);
    auto it = std::find_if(dims.begin(), dims.end(), [&](const DynamicDim& e) { return e.name == d.name; });
    if (it == dims.end()) {
      dims.push_back({d.name, {}, x.shape()[k], 0});
      it = dims.end() - 1;
    }
    KILN_CHECK(x.shape()[k] == it->base, "jit::save: dynamic dim {} is {} in input {} but {} elsewhere", d.name,
               x.shape()[k], d.input, it->base);
    it->places.emplace_back(d.input, static_cast<size_t>(k));
  }
  // Trace at sizes of at least 2 (a size 1 broadcasts, and a trace may drop work for it).
  for (DynamicDim& d : dims) {
    d.base = std::max<int64_t>(d.base, 2);
    d.other = d.base + 1;
  }
  return dims;
}

// The plan's function traced and optimized with the dynamic dims at `sizes` (the graph in
// trace.graph, with the bindings of that trace).
Trace trace_at(const SavedPlan& sp, const std::vector<DynamicDim>& dims, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> inputs;
  for (const Tensor& x : sp.example_inputs) inputs.push_back(x);
  for (size_t j = 0; j < dims.size(); ++j)
    for (auto [i, k] : dims[j].places) {
      TensorType t = inputs[i].type();
      t.shape[k] = sizes[j];
      Tensor p = Tensor::placeholder(t);
      if (inputs[i].requires_grad()) p.requires_grad_();
      inputs[i] = p;
    }
  GradModeGuard mode(sp.grad_mode);
  Trace t = trace_function(sp.fn, inputs, sp.name, sp.names);
  t.graph = ir::run_passes(std::move(t.graph), ir::default_pipeline());
  return t;
}

struct Symbolizer {
  const std::vector<DynamicDim>& dims;
  const ir::Graph& base;
  std::vector<ir::Graph> variants;  // one per dynamic dim: that dim at its other size
  ir::Graph out;

  [[noreturn]] void fail(const std::string& what) const {
    std::vector<std::string> names;
    for (const DynamicDim& d : dims) names.push_back(d.name);
    throw Error(
        fmt::format("jit::save: @{}: dims {} cannot stay dynamic: {}", base.name, fmt::join(names, ", "), what));
  }

  // The symbol for one size: `v` in the base graph, `w[j]` in variant j (dim j at its other
  // size). A size that grows by other/base with dim j holds that dim once, by (other/base)^2
  // twice (T*T); what is left once the dims' sizes are divided out is the product's number.
  int64_t symbol(int64_t v, const std::vector<int64_t>& w, const std::string& where) {
    ir::DimTerm term;
    int64_t rest = v;
    for (size_t j = 0; j < dims.size(); ++j) {
      if (w[j] == v) continue;
      const DynamicDim& d = dims[j];
      int power = 0;
      for (int e = 1; e <= 3 && !power; ++e) {
        // v * (other/base)^e == w[j], in integers: v * other^e == w[j] * base^e.
        __int128 lhs = v, rhs = w[j];
        for (int i = 0; i < e; ++i) lhs *= d.other, rhs *= d.base;
        if (lhs == rhs) power = e;
      }
      for (int i = 0; i < power; ++i) {
        if (rest % d.base != 0) power = 0;
        rest /= d.base;
      }
      if (power == 0 || rest < 1)
        fail(fmt::format("{} is {} at {} = {} and {} at {} = {}: no product of the dynamic dims and a number", where, v,
                         d.name, d.base, w[j], d.name, d.other));
      for (int i = 0; i < power; ++i) term.symbols.push_back(d.name);
    }
    if (term.symbols.empty()) return v;
    if (rest > (int64_t{1} << 31))
      fail(fmt::format("{} is {} times the dynamic dims: a factor past 2^31", where, rest));
    std::sort(term.symbols.begin(), term.symbols.end());
    term.factor = rest;
    return out.dim(ir::dim_term_name(term));
  }

  Dims symbolic(const Dims& shape, const std::vector<const Dims*>& others, const std::string& where) {
    Dims s = shape;
    for (size_t i = 0; i < s.size(); ++i) {
      std::vector<int64_t> w;
      for (const Dims* o : others) w.push_back((*o)[i]);
      s[i] = symbol(shape[i], w, fmt::format("{} (dim {})", where, i));
    }
    return s;
  }

  ir::Graph run() {
    out = base;
    for (const ir::Graph& v : variants)
      if (v.types.size() != base.types.size() || v.nodes.size() != base.nodes.size() || v.inputs != base.inputs ||
          v.params != base.params || v.outputs != base.outputs)
        fail("the traced graph's structure changes with the size (a branch or a loop on it)");
    std::set<uint32_t> in_params(base.params.begin(), base.params.end());
    for (uint32_t v = 0; v < base.types.size(); ++v) {
      const TensorType& t = base.type(v);
      std::vector<const Dims*> others;
      for (const ir::Graph& g : variants) {
        if (g.type(v).shape.size() != t.shape.size() || g.type(v).dtype != t.dtype)
          fail(fmt::format("value %{} changes rank or dtype with the size", v));
        others.push_back(&g.type(v).shape);
      }
      Dims s = symbolic(t.shape, others, fmt::format("value %{} ({})", v, t.str()));
      if (s != t.shape && in_params.count(v))
        fail(fmt::format("captured tensor %{} ({}) changes shape with the size", v, t.str()));
      out.types[v].shape = s;
    }
    std::vector<SizeNumber> numbers;  // immediates that are sizes, made numel nodes below
    for (size_t i = 0; i < base.nodes.size(); ++i) {
      const ir::Node& n = base.nodes[i];
      std::string where = fmt::format("node {} ({})", i, ir::print_node(base, n));
      std::vector<const Dims*> others;
      std::vector<std::vector<double>> imm_values(3);  // per slot, its value in each variant
      for (const ir::Graph& g : variants) {
        const ir::Node& m = g.nodes[i];
        if (m.kind != n.kind || m.inputs != n.inputs || !defined_values_equal(m, n))
          fail(where + " differs in structure between sizes");
        if (n.kind == ir::NodeKind::Const) {
          if (!(m.constant.type() == n.constant.type()) || !equal_bytes(m.constant, n.constant))
            fail(where + ": a constant depends on the size (a count, an index range or random draws' offsets)");
          continue;
        }
        if (n.kind != ir::NodeKind::Op) continue;
        if (m.attrs.shape.size() != n.attrs.shape.size()) fail(where + " changes rank with the size");
        ir::Node a = n, b = m;
        a.attrs.shape.clear();
        b.attrs.shape.clear();
        // A pointwise op's number may be a size (a mean's count): compared apart, below.
        bool compare_numbers = op_family(n.op) == OpFamily::Pointwise && a.attrs.imm_mask == b.attrs.imm_mask;
        for (int k = 0; compare_numbers && k < 3; ++k)
          if ((a.attrs.imm_mask >> k & 1) != 0) {
            imm_values[static_cast<size_t>(k)].push_back(b.attrs.imm[k].to_double());
            b.attrs.imm[k] = a.attrs.imm[k];
          }
        if (ir::node_key(base, a) != ir::node_key(g, b))
          fail(where + ": its attributes depend on the size (a slice's bound, a window)");
        others.push_back(&m.attrs.shape);
      }
      if (n.kind == ir::NodeKind::Op && !n.attrs.shape.empty())
        out.nodes[i].attrs.shape = symbolic(n.attrs.shape, others, where);
      for (int k = 0; k < 3 && !variants.empty(); ++k) {
        const std::vector<double>& w = imm_values[static_cast<size_t>(k)];
        double v = n.attrs.imm[k].to_double();
        if (w.empty() || std::all_of(w.begin(), w.end(), [&](double x) { return x == v || (x != x && v != v); }))
          continue;
        auto whole = [](double x) { return x >= 1 && x < 9.0e15 && x == std::floor(x); };
        if (!whole(v) || !std::all_of(w.begin(), w.end(), whole))
          fail(
              fmt::format("{}: its number {} depends on the size, and is no size (only a number that is a product "
                          "of the dynamic dims, as a mean's count, can stay dynamic)",
                          where, v));
        std::vector<int64_t> sizes;
        for (double x : w) sizes.push_back(static_cast<int64_t>(x));
        numbers.push_back({i, k, symbol(static_cast<int64_t>(v), sizes, fmt::format("{} (number {})", where, k))});
      }
    }
    with_sizes_as_numbers(numbers);
    return out;
  }

  // Each number that is a size becomes an operand: a numel node (the size as a 0-d host tensor
  // of the op's compute dtype, f32 for f16 and bf16 so that it stays exact) just before it.
  struct SizeNumber {
    size_t node;
    int slot;
    int64_t symbol;
  };
  void with_sizes_as_numbers(const std::vector<SizeNumber>& numbers) {
    if (numbers.empty()) return;
    std::vector<ir::Node> nodes;
    for (size_t i = 0; i < out.nodes.size(); ++i) {
      ir::Node n = out.nodes[i];
      for (const SizeNumber& s : numbers) {
        if (s.node != i) continue;
        DType t = n.attrs.dtype == DType::F16 || n.attrs.dtype == DType::BF16 ? DType::F32 : n.attrs.dtype;
        ir::Node c;
        c.kind = ir::NodeKind::Op;
        c.op = OpId::Numel;
        c.attrs.shape = {s.symbol};
        c.attrs.dtype = t;
        c.result = out.add_value(TensorType{t, {}, cpu});
        c.loc = n.loc;
        nodes.push_back(c);
        int before = 0;  // the operands before the slot that are tensors
        for (int j = 0; j < s.slot; ++j) before += (n.attrs.imm_mask >> j & 1) == 0;
        n.inputs.insert(n.inputs.begin() + before, c.result);
        n.attrs.imm_mask = static_cast<uint8_t>(n.attrs.imm_mask & ~(1u << s.slot));
        n.attrs.imm[s.slot] = Scalar();
      }
      nodes.push_back(std::move(n));
    }
    out.nodes = std::move(nodes);
  }

  static bool defined_values_equal(const ir::Node& a, const ir::Node& b) {
    auto x = ir::defined_values(a), y = ir::defined_values(b);
    return std::equal(x.begin(), x.end(), y.begin(), y.end());
  }
  static bool equal_bytes(const Tensor& a, const Tensor& b) {
    size_t n = static_cast<size_t>(a.numel() * dtype_size(a.dtype()));
    if (n == 0) return true;
    Tensor x = a.to(cpu).contiguous(), y = b.to(cpu).contiguous();  // constants of a CUDA trace too
    return std::memcmp(x.data_ptr(), y.data_ptr(), n) == 0;
  }
};

// The graph with the dynamic dims as symbols, in base->graph; `base` keeps the bindings of
// the trace it came from (the tensors it captured, the gradients it reads and leaves), which
// are the file's: the plan's own trace may have seen other gradients defined.
void symbolize(const SavedPlan& sp, const std::vector<DynamicDim>& dims, Trace* base) {
  std::vector<int64_t> sizes;
  for (const DynamicDim& d : dims) sizes.push_back(d.base);
  *base = trace_at(sp, dims, sizes);
  Symbolizer s{dims, base->graph, {}, {}};
  for (size_t j = 0; j < dims.size(); ++j) {
    std::vector<int64_t> other = sizes;
    other[j] = dims[j].other;
    s.variants.push_back(trace_at(sp, dims, other).graph);
  }
  ir::Graph g = s.run();
  // The arguments' dynamic dims are the symbols themselves.
  for (const DynamicDim& d : dims)
    for (auto [i, k] : d.places) {
      const TensorType& t = g.type(g.inputs[i]);
      KILN_CHECK(is_symbol(t.shape[k]) && g.dim_names[symbol_index(t.shape[k])] == d.name,
                 "jit::save: dynamic dim {}: input {} dim {} does not follow it (the function does not read it?)",
                 d.name, i, k);
    }
  base->graph = std::move(g);
}

// ---- constants to parameters, names, metadata ------------------------------------------

// Moves every constant of g into its params (named const.N), with the data in `values`.
void constants_to_params(ir::Graph& g, std::vector<Tensor>& values) {
  std::vector<ir::Node> nodes;
  size_t k = 0;
  for (ir::Node& n : g.nodes) {
    if (n.kind != ir::NodeKind::Const) {
      nodes.push_back(std::move(n));
      continue;
    }
    g.params.push_back(n.result);
    g.param_names.push_back(fmt::format("const.{}", k++));
    values.push_back(n.constant);
  }
  g.nodes = std::move(nodes);
}

std::string type_text(const ir::Graph& g, uint32_t v) {
  DimNamesScope names(&g.dim_names);
  return g.type(v).str();
}

}  // namespace

void save(const Function& fn, const std::string& path, const SaveOptions& options) {
  SavedPlan sp = FunctionAccess::last_plan(fn);
  std::vector<DynamicDim> dims = dynamic_dims(sp, options);
  Trace retraced;
  if (!dims.empty()) symbolize(sp, dims, &retraced);
  const Trace& t = dims.empty() ? sp.trace : retraced;
  ir::Graph g = dims.empty() ? sp.graph : std::move(retraced.graph);
  KILN_CHECK(dims.empty() || t.rng_input < 0,
             "jit::save: @{} draws random numbers: its draws' offsets depend on the sizes, so it saves with static "
             "dims only",
             sp.name);
  // A module is saved for the CPU: a graph traced on one device (all its values there) is
  // written with every value on the CPU, and jit::load(path, device) moves it where it runs.
  // A graph that moves data between devices keeps its devices.
  bool one_device = true;
  for (const TensorType& ty : g.types) one_device = one_device && ty.device == g.types.front().device;
  if (one_device)
    for (TensorType& ty : g.types) ty.device = cpu;

  // Names: the graph's own (trace_module), then the options', then param.N; unique.
  std::vector<Tensor> values = t.params;
  g.param_names.resize(g.params.size());
  std::set<std::string> taken;
  for (size_t i = 0; i < g.params.size(); ++i) {
    std::string& name = g.param_names[i];
    if (name.empty())
      for (const auto& [n, x] : options.parameter_names)
        if (x.impl() == values[i].impl()) name = n;
    if (name.empty() || taken.count(name)) name = fmt::format("param.{}", i);
    KILN_CHECK(taken.insert(name).second, "jit::save: two captured tensors are named '{}'", name);
  }
  size_t num_params = g.params.size();
  constants_to_params(g, values);
  // Gradients the trace bound as inputs (a parameter's grad() was set when it was traced) but
  // that nothing reads: not part of what a call needs.
  std::vector<char> read(g.types.size(), 0);
  for (const ir::Node& n : g.nodes)
    for (uint32_t v : n.inputs) read[v] = 1;
  for (uint32_t v : g.outputs) read[v] = 1;
  std::vector<uint32_t> kept_inputs;
  std::vector<std::pair<size_t, size_t>> grad_inputs;  // (param, position in kept_inputs)
  int rng_input = -1;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    auto grad = std::find_if(t.grad_inputs.begin(), t.grad_inputs.end(), [&](auto& e) { return e.second == i; });
    if (grad != t.grad_inputs.end() && !read[g.inputs[i]]) continue;
    if (grad != t.grad_inputs.end()) grad_inputs.emplace_back(grad->first, kept_inputs.size());
    if (static_cast<int>(i) == t.rng_input) rng_input = static_cast<int>(kept_inputs.size());
    kept_inputs.push_back(g.inputs[i]);
  }
  g.inputs = std::move(kept_inputs);
  ir::verify(g);

  json meta;
  meta["format"] = kModuleFormat;
  meta["kiln_version"] = KILN_VERSION_STRING;
  meta["name"] = g.name;
  meta["training_step"] = t.ran_backward;
  json inputs = json::array(), outputs = json::array(), graph_inputs = json::array(), graph_outputs = json::array();
  for (size_t i = 0; i < t.num_args; ++i) {
    std::string name = i < options.input_names.size() ? options.input_names[i] : fmt::format("input{}", i);
    inputs.push_back({{"name", name}, {"type", type_text(g, g.inputs[i])}});
  }
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    if (i < t.num_args) graph_inputs.push_back({{"kind", "arg"}, {"index", i}});
    else if (static_cast<int>(i) == rng_input) graph_inputs.push_back({{"kind", "random_state"}});
    else {
      auto it = std::find_if(grad_inputs.begin(), grad_inputs.end(), [&](auto& e) { return e.second == i; });
      KILN_ASSERT(it != grad_inputs.end());
      graph_inputs.push_back({{"kind", "grad"}, {"param", g.param_names[it->first]}});
    }
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    if (i < t.num_results) {
      std::string name = i < options.output_names.size() ? options.output_names[i] : fmt::format("output{}", i);
      outputs.push_back({{"name", name}, {"type", type_text(g, g.outputs[i])}});
      graph_outputs.push_back({{"kind", "result"}});
      continue;
    }
    auto it = std::find_if(t.grad_outputs.begin(), t.grad_outputs.end(), [&](auto& e) { return e.second == i; });
    KILN_ASSERT(it != t.grad_outputs.end());
    graph_outputs.push_back({{"kind", "grad"}, {"param", g.param_names[it->first]}});
  }
  meta["inputs"] = inputs;
  meta["outputs"] = outputs;
  meta["graph_inputs"] = graph_inputs;
  meta["graph_outputs"] = graph_outputs;
  json cleared = json::array();
  for (size_t p : t.grad_cleared) cleared.push_back(g.param_names[p]);
  meta["grads_cleared"] = cleared;
  json dyn = json::array();
  for (const DynamicDim& d : dims) {
    json places = json::array();
    for (auto [i, k] : d.places) places.push_back({i, k});
    dyn.push_back({{"name", d.name}, {"places", places}});
  }
  meta["dynamic_dims"] = dyn;
  json params = json::array(), assigns = json::array();
  for (size_t i = 0; i < g.params.size(); ++i)
    params.push_back({{"name", g.param_names[i]}, {"kind", i < num_params ? "parameter" : "constant"}});
  for (const ir::Node& n : g.nodes)
    if (n.kind == ir::NodeKind::Assign)
      for (size_t i = 0; i < g.params.size(); ++i)
        if (g.params[i] == n.inputs[0]) assigns.push_back(g.param_names[i]);
  meta["parameters"] = params;
  meta["assigns"] = assigns;
  // Registered ops by name and schema (never their code): load finds them in its program.
  json registered = json::array();
  std::set<const RegisteredOp*> listed;
  for (const ir::Node& n : g.nodes)
    if (n.kind == ir::NodeKind::Op && n.op == OpId::Registered && listed.insert(n.attrs.registered->op).second)
      registered.push_back(
          {{"name", n.attrs.registered->op->name()}, {"schema", n.attrs.registered->op->schema_text()}});
  if (!registered.empty()) meta["registered_ops"] = registered;
  if (t.rng_input >= 0) {
    std::vector<int64_t> state = random_state(0).to_vector<int64_t>();
    meta["random"] = {{"draws", t.rng_draws}, {"seed", state[0]}, {"offset", state[1]}};
  }

  std::map<std::string, Tensor> tensors;
  for (size_t i = 0; i < g.params.size(); ++i) tensors[g.param_names[i]] = values[i];
  std::string meta_text = meta.dump(1);
  std::string ir_text = ir::print(g, {.locations = false});
  SafetensorsPieces data = safetensors_pieces(tensors);
  std::vector<std::string> frames = module_frames(meta_text.size(), ir_text.size(), data.size());
  std::vector<std::string_view> pieces = {frames[0], meta_text, frames[1], ir_text, frames[2]};
  for (std::string_view v : data.views()) pieces.push_back(v);
  files::write_atomic(path, pieces, "jit::save");
}

}  // namespace kiln::jit
