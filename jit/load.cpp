// jit/load.cpp -- jit::load: a module file back to a callable. The saved graph is checked
// against its metadata and tensors, then wrapped as a jit::Function whose "function" replays
// the graph on the eager ops: each new signature traces that replay (with the dynamic dims
// bound to the call's sizes), so a loaded function is planned, fused, cached and threaded
// exactly as a traced one, and compiles nothing the disk cache already has.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "ir/passes.h"
#include "ir/specialize.h"
#include "jit/module_file.h"
#include "jit/run.h"
#include "jit/save.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/files.h"
#include "runtime/registered_op.h"
#include "runtime/safetensors.h"

namespace kiln::jit {

namespace {
using nlohmann::json;

// How one graph input or output is bound per call.
struct Binding {
  enum Kind { Arg, Grad, RandomState, Result } kind = Arg;
  size_t index = 0;  // Arg: argument index; Grad: parameter index
};
}  // namespace

struct LoadedFunction::State {
  std::string file;  // for errors
  ModuleInfo info;
  ir::Graph graph;
  std::vector<Tensor> params;  // graph.params' tensors, constants included
  std::vector<Binding> graph_inputs, graph_outputs;
  std::vector<size_t> grads_cleared;
  std::vector<std::string> input_names;
  Tensor random_state;  // the generator when saved; undefined when the graph draws nothing
  std::unique_ptr<Function> fn;

  // One call of the saved function on the eager ops (traced by fn for each new signature).
  std::vector<Tensor> replay(std::span<const Tensor> args) const {
    std::vector<TensorType> types;
    for (const Tensor& x : args) types.push_back(x.type());
    ir::DimSizes sizes = ir::bind_dims(graph, types, input_names, "@" + info.name);
    ir::Graph g = sizes.empty() ? graph : ir::specialize(graph, sizes);
    std::vector<Tensor> bound(g.inputs.size());
    for (size_t i = 0; i < bound.size(); ++i) {
      const Binding& b = graph_inputs[i];
      if (b.kind == Binding::Arg) bound[i] = args[b.index];
      else if (b.kind == Binding::RandomState) bound[i] = kiln::random_state(info.random_draws);
      else {
        bound[i] = params[b.index].grad();
        KILN_CHECK(bound[i].defined(), "@{}: the saved step reads the gradient of '{}', which is not set", info.name,
                   info.parameters[b.index].name);
      }
    }
    std::vector<Tensor> outs = run_graph(g, bound, params);
    std::vector<Tensor> results;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (graph_outputs[i].kind == Binding::Result) results.push_back(outs[i]);
      else Tensor(params[graph_outputs[i].index]).set_grad(outs[i]);
    }
    for (size_t p : grads_cleared) Tensor(params[p]).zero_grad();
    return results;
  }

  // The callable: a Function over the replay, its parameters named as saved (its plans hold
  // the parameter tensors: made again when they are replaced).
  void make_function() {
    ParamNames named;
    for (size_t i = 0; i < params.size(); ++i) named.emplace_back(info.parameters[i].name, params[i]);
    State* self = this;  // the Function lives inside the state it reads
    fn = std::make_unique<Function>([self](std::span<const Tensor> in) { return self->replay(in); }, info.name,
                                    std::move(named));
  }

  size_t find(const std::string& name) const {
    for (size_t i = 0; i < info.parameters.size(); ++i)
      if (info.parameters[i].name == name && !info.parameters[i].constant) return i;
    std::vector<std::string> names;
    for (const ParameterInfo& p : info.parameters)
      if (!p.constant) names.push_back(p.name);
    throw Error(fmt::format("@{}: no parameter '{}' (it has: {})", info.name, name, fmt::join(names, ", ")));
  }
};

namespace {

// The metadata's JSON, bounded as it parses: values at most 6 deep (the deepest field, a dynamic dim's places, is 5).
json parse_meta(std::string_view text, const std::string& file) {
  json::parser_callback_t bound = [&](int depth, json::parse_event_t, json&) {
    if (depth > 6) throw Error(fmt::format("jit::load: {}: the metadata nests deeper than the format does", file));
    return true;
  };
  try {
    json j = json::parse(text, bound);
    KILN_CHECK(j.is_object(), "jit::load: {}: the metadata is not a JSON object", file);
    return j;
  } catch (const json::exception& e) {
    throw Error(fmt::format("jit::load: {}: the metadata is not valid JSON: {}", file, e.what()));
  }
}

// Typed reads of metadata fields, each failing with the file and the field's name.
struct Meta {
  const json& j;
  const std::string& file;
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(fmt::format("jit::load: {}: metadata field '{}' {}", file, field, what));
  }
  const json& at(const json& o, const std::string& field) const {
    if (!o.is_object() || !o.contains(field)) fail(field, "is missing");
    return o[field];
  }
  std::string str(const json& o, const std::string& field) const {
    const json& v = at(o, field);
    if (!v.is_string()) fail(field, "must be a string");
    return v.get<std::string>();
  }
  int64_t integer(const json& o, const std::string& field, int64_t lo, int64_t hi) const {
    const json& v = at(o, field);
    if (!v.is_number_integer()) fail(field, "must be an integer");
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
      fail(field, fmt::format("is {}, too large", v.dump()));
    int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) fail(field, fmt::format("is {}, outside {}..{}", v.dump(), lo, hi));
    return x;
  }
  bool boolean(const json& o, const std::string& field) const {
    const json& v = at(o, field);
    if (!v.is_boolean()) fail(field, "must be true or false");
    return v.get<bool>();
  }
  const json& array(const json& o, const std::string& field) const {
    const json& v = at(o, field);
    if (!v.is_array()) fail(field, "must be an array");
    return v;
  }
};

std::string type_text(const ir::Graph& g, uint32_t v) {
  DimNamesScope names(&g.dim_names);
  return g.type(v).str();
}

}  // namespace

LoadedFunction load(const std::string& path) {
  // Bounded by the real size; the bytes are ours from here (a file changing under us is read
  // once, whole).
  std::string bytes = files::read_bounded(path, std::numeric_limits<int64_t>::max(), "jit::load");
  return load_bytes(bytes, path);
}

namespace {

// Every value of `g` on `device`: its moves and positions too (a size stays a host number).
void retarget(ir::Graph& g, Device device) {
  for (TensorType& t : g.types) t.device = device;
  for (ir::Node& n : g.nodes) {
    if (n.kind != ir::NodeKind::Op) continue;
    if (n.op == OpId::ToDevice || n.op == OpId::Iota) n.attrs.device = device;
    if (n.op == OpId::Numel) g.types[n.result].device = cpu;
  }
}

// Whether retarget(g, device) would change nothing.
bool placed_on(const ir::Graph& g, Device device) {
  std::vector<bool> size(g.types.size(), false);
  for (const ir::Node& n : g.nodes)
    if (n.kind == ir::NodeKind::Op && n.op == OpId::Numel) size[n.result] = true;
  for (size_t v = 0; v < g.types.size(); ++v)
    if (!size[v] && g.types[v].device != device) return false;
  return true;
}

// The signature and parameters `info` describes, as the retargeted graph `g` has them.
void retype(ModuleInfo& info, const ir::Graph& g, Device device) {
  for (size_t i = 0; i < info.inputs.size(); ++i) info.inputs[i].type = type_text(g, g.inputs[i]);
  for (size_t i = 0; i < info.outputs.size(); ++i) info.outputs[i].type = type_text(g, g.outputs[i]);
  for (ParameterInfo& p : info.parameters) p.type.device = device;
}

}  // namespace

LoadedFunction load_bytes(std::string_view bytes, const std::string& file, std::optional<Device> device) {
  ModuleSections sec = split_module(bytes, file);
  auto st = std::make_shared<LoadedFunction::State>();
  st->file = file;
  json j = parse_meta(sec.meta, file);
  Meta m{j, file};
  ModuleInfo& info = st->info;
  info.format = sec.version;
  info.kiln_version = m.str(j, "kiln_version");
  info.name = m.str(j, "name");
  info.training_step = m.boolean(j, "training_step");
  KILN_CHECK(m.integer(j, "format", 1, UINT32_MAX) == sec.version,
             "jit::load: {}: the metadata says format {} but the header says {}", file, j["format"].dump(),
             sec.version);

  // Registered ops: each must be registered here, with the schema the module was saved with,
  // before the IR that calls them is read.
  std::set<std::string> registered;
  if (j.contains("registered_ops")) {
    for (const json& r : m.array(j, "registered_ops")) {
      std::string name = m.str(r, "name"), schema = m.str(r, "schema");
      KILN_CHECK(is_registered_op_name(name) && name.size() <= 256,
                 "jit::load: {}: metadata field 'registered_ops' names '{}', which is no op name (ns::name)", file,
                 name.substr(0, 256));
      const RegisteredOp* op = find_registered_op(name);
      KILN_CHECK(op != nullptr,
                 "jit::load: {}: the module calls {}, which this program has not registered (expected "
                 "register_op(\"{}\") before loading)",
                 file, name, schema.substr(0, 4096));
      KILN_CHECK(op->schema_text() == schema,
                 "jit::load: {}: the module calls {} with schema {}, but this program registered it as {}", file, name,
                 schema.substr(0, 4096), op->schema_text());
      registered.insert(name);
    }
  }

  // The graph: parsed and verified as any IR text is.
  try {
    st->graph = ir::parse(sec.ir, file + " (IR section)");
    ir::verify(st->graph);
  } catch (const Error& e) {
    throw Error(fmt::format("jit::load: {}: {}", file, e.what()));
  }
  const ir::Graph& g = st->graph;
  for (const ir::Node& n : g.nodes)
    if (n.kind == ir::NodeKind::Op && n.op == OpId::Registered)
      KILN_CHECK(registered.count(n.attrs.registered->op->name()),
                 "jit::load: {}: the IR calls {}, which the metadata's registered_ops does not list", file,
                 n.attrs.registered->op->name());
  KILN_CHECK(g.name == info.name, "jit::load: {}: the metadata names @{} but the graph is @{}", file, info.name,
             g.name);
  auto disagree = [&](const std::string& what) {
    return Error(fmt::format("jit::load: {}: the IR disagrees with the metadata: {}", file, what));
  };

  // Parameters: one tensor of exactly its param's type each, nothing else in the section.
  const json& params = m.array(j, "parameters");
  if (params.size() != g.params.size())
    throw disagree(fmt::format("{} parameters listed, the graph has {}", params.size(), g.params.size()));
  std::map<std::string, Tensor> tensors;
  try {
    tensors = safetensors_from_bytes(sec.tensors, file + " (tensors section)");
  } catch (const Error& e) {
    throw Error(fmt::format("jit::load: {}", e.what()));
  }
  std::set<std::string> names;
  for (size_t i = 0; i < params.size(); ++i) {
    ParameterInfo p;
    p.name = m.str(params[i], "name");
    std::string kind = m.str(params[i], "kind");
    if (kind != "parameter" && kind != "constant")
      m.fail("kind", fmt::format("is '{}', not parameter or constant", kind));
    p.constant = kind == "constant";
    p.type = g.type(g.params[i]);
    if (i < g.param_names.size() && g.param_names[i] != p.name)
      throw disagree(
          fmt::format("parameter {} is '{}' in the metadata, '{}' in the graph", i, p.name, g.param_names[i]));
    KILN_CHECK(names.insert(p.name).second, "jit::load: {}: two parameters are named '{}'", file, p.name);
    for (int64_t d : p.type.shape)
      if (is_symbol(d))
        throw disagree(fmt::format("parameter '{}' has a symbolic shape {}", p.name, type_text(g, g.params[i])));
    auto it = tensors.find(p.name);
    KILN_CHECK(it != tensors.end(), "jit::load: {}: the tensors section has no '{}' ({})", file, p.name, p.type.str());
    KILN_CHECK(it->second.dtype() == p.type.dtype && it->second.shape() == p.type.shape,
               "jit::load: {}: tensor '{}' is {} but the graph's parameter is {}", file, p.name,
               it->second.type().str(), p.type.str());
    st->params.push_back(it->second);  // host data: placed below
    info.parameters.push_back(p);
  }
  for (const auto& [name, t] : tensors)
    KILN_CHECK(names.count(name), "jit::load: {}: tensor '{}' ({}) is no parameter of the graph", file, name,
               t.type().str());
  auto param_index = [&](const json& o) {
    std::string name = m.str(o, "param");
    for (size_t i = 0; i < info.parameters.size(); ++i)
      if (info.parameters[i].name == name) return i;
    throw disagree(fmt::format("'{}' names no parameter", name));
  };

  // Inputs: the arguments first, in order, then gradients read and the generator's state.
  const json& inputs = m.array(j, "inputs");
  const json& gin = m.array(j, "graph_inputs");
  if (gin.size() != g.inputs.size())
    throw disagree(fmt::format("{} graph inputs listed, the graph has {}", gin.size(), g.inputs.size()));
  if (inputs.size() > gin.size())
    throw disagree(fmt::format("{} arguments but {} graph inputs", inputs.size(), gin.size()));
  bool draws = false;
  for (size_t i = 0; i < gin.size(); ++i) {
    std::string kind = m.str(gin[i], "kind");
    Binding b;
    if (kind == "arg") {
      b = {Binding::Arg, static_cast<size_t>(m.integer(gin[i], "index", 0, INT32_MAX))};
      if (b.index != i || i >= inputs.size()) throw disagree(fmt::format("graph input {} is argument {}", i, b.index));
    } else if (kind == "grad") {
      b = {Binding::Grad, param_index(gin[i])};
      if (i < inputs.size()) throw disagree(fmt::format("graph input {} is a gradient among the arguments", i));
      if (!(g.type(g.inputs[i]) == info.parameters[b.index].type))
        throw disagree(fmt::format("graph input {} (the gradient of '{}') is {}", i, info.parameters[b.index].name,
                                   type_text(g, g.inputs[i])));
    } else if (kind == "random_state") {
      b = {Binding::RandomState, 0};
      if (draws || i < inputs.size() || !(g.type(g.inputs[i]) == TensorType{DType::I64, {2}}))
        throw disagree(fmt::format("graph input {} is not one i64[2] generator state after the arguments", i));
      draws = true;
    } else {
      m.fail("kind", fmt::format("is '{}', not arg, grad or random_state", kind));
    }
    st->graph_inputs.push_back(b);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    ValueInfo v{m.str(inputs[i], "name"), m.str(inputs[i], "type")};
    if (v.type != type_text(g, g.inputs[i]))
      throw disagree(
          fmt::format("input '{}' is {} in the metadata, {} in the graph", v.name, v.type, type_text(g, g.inputs[i])));
    st->input_names.push_back(v.name);
    info.inputs.push_back(v);
  }

  // Outputs: the results first, then gradients left in parameters' grad().
  const json& outputs = m.array(j, "outputs");
  const json& gout = m.array(j, "graph_outputs");
  if (gout.size() != g.outputs.size())
    throw disagree(fmt::format("{} graph outputs listed, the graph has {}", gout.size(), g.outputs.size()));
  for (size_t i = 0; i < gout.size(); ++i) {
    std::string kind = m.str(gout[i], "kind");
    if (kind == "result") {
      if (i != info.outputs.size() || i >= outputs.size())
        throw disagree(fmt::format("graph output {} is a result out of order", i));
      ValueInfo v{m.str(outputs[i], "name"), m.str(outputs[i], "type")};
      if (v.type != type_text(g, g.outputs[i]))
        throw disagree(fmt::format("output '{}' is {} in the metadata, {} in the graph", v.name, v.type,
                                   type_text(g, g.outputs[i])));
      info.outputs.push_back(v);
      st->graph_outputs.push_back({Binding::Result, i});
    } else if (kind == "grad") {
      size_t p = param_index(gout[i]);
      if (!(g.type(g.outputs[i]) == info.parameters[p].type))
        throw disagree(fmt::format("graph output {} (the gradient of '{}') is {}", i, info.parameters[p].name,
                                   type_text(g, g.outputs[i])));
      st->graph_outputs.push_back({Binding::Grad, p});
    } else {
      m.fail("kind", fmt::format("is '{}', not result or grad", kind));
    }
  }
  if (outputs.size() != info.outputs.size())
    throw disagree(fmt::format("{} outputs listed, {} results", outputs.size(), info.outputs.size()));
  for (const json& c : m.array(j, "grads_cleared")) {
    if (!c.is_string()) m.fail("grads_cleared", "must hold parameter names");
    st->grads_cleared.push_back(param_index(json{{"param", c}}));
  }
  for (const json& d : m.array(j, "dynamic_dims")) {
    std::string name = m.str(d, "name");
    if (std::find(g.dim_names.begin(), g.dim_names.end(), name) == g.dim_names.end())
      throw disagree(fmt::format("dynamic dim {} is no dim of the graph", name));
    info.dynamic_dims.push_back(name);
  }
  for (const json& a : m.array(j, "assigns")) {
    if (!a.is_string()) m.fail("assigns", "must hold parameter names");
    info.assigns.push_back(a.get<std::string>());
  }
  if (draws) {
    const json& r = m.at(j, "random");
    info.random_draws = m.integer(r, "draws", 0, INT64_MAX / 2);
    st->random_state =
        from_vector<int64_t>({m.integer(r, "seed", INT64_MIN, INT64_MAX), m.integer(r, "offset", 0, INT64_MAX)});
  }

  // The file's tensors are host data. A graph that keeps its values on several devices gets
  // each parameter where it says, unless the caller places the whole graph.
  if (device) {
    retarget(st->graph, *device);
    retype(info, st->graph, *device);
  }
  for (size_t i = 0; i < st->params.size(); ++i) {
    Device where = info.parameters[i].type.device;
    if (st->params[i].device() == where) continue;
    try {
      st->params[i] = st->params[i].to(where);
    } catch (const Error& e) {
      throw Error(
          fmt::format("jit::load: {}: the graph keeps parameter '{}' on {}, which this process cannot "
                      "reach (jit::load(path, cpu) places it all on the CPU): {}",
                      file, info.parameters[i].name, where.str(), e.what()));
    }
  }

  st->make_function();
  LoadedFunction f;
  f.state_ = std::move(st);
  return f;
}

std::vector<Tensor> LoadedFunction::call(std::span<const Tensor> inputs) const {
  const State& s = *state_;
  KILN_CHECK(inputs.size() == s.info.inputs.size(), "@{}: takes {} inputs ({}), got {}", s.info.name,
             s.info.inputs.size(), fmt::join(s.input_names, ", "), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    KILN_CHECK(inputs[i].defined(), "@{}: input '{}' is undefined", s.info.name, s.input_names[i]);
  // A call whose types differ from every earlier one's is a new signature: it traces the
  // replay, whose bind_dims names a wrong dtype, rank or dim. A call that finds its plan pays
  // for nothing more than a traced function's does.
  if (!s.info.training_step) return s.fn->call(inputs);
  NoGradGuard no_grad;  // the step's gradients are inside its graph
  return s.fn->call(inputs);
}

const ir::Graph& LoadedFunction::graph() const { return state_->graph; }
ir::Graph LoadedFunction::compiled_graph() const { return state_->fn->graph(); }
const ModuleInfo& LoadedFunction::info() const { return state_->info; }
Stats LoadedFunction::stats() const { return state_->fn->stats(); }

std::vector<std::pair<std::string, Tensor>> LoadedFunction::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < state_->params.size(); ++i)
    if (!state_->info.parameters[i].constant) out.emplace_back(state_->info.parameters[i].name, state_->params[i]);
  return out;
}

Tensor LoadedFunction::parameter(const std::string& name) const { return state_->params[state_->find(name)]; }

void LoadedFunction::to(Device device) {
  State& s = *state_;
  NoGradGuard no_grad;
  bool moved = false;
  for (Tensor& p : s.params) {
    if (p.device() == device) continue;
    Tensor copy = p.to(device).detach();
    if (p.requires_grad()) copy.requires_grad_();
    p = copy;
    moved = true;
  }
  if (!moved && placed_on(s.graph, device)) return;
  // The saved graph's values, moves and positions follow: its calls take inputs on `device` now.
  retarget(s.graph, device);
  retype(s.info, s.graph, device);
  s.make_function();
}

LoadedFunction load(const std::string& path, Device device) {
  std::string bytes = files::read_bounded(path, std::numeric_limits<int64_t>::max(), "jit::load");
  return load_bytes(bytes, path, device);  // placed on `device` as it loads
}

void LoadedFunction::set_parameter(const std::string& name, const Tensor& value) {
  State& s = *state_;
  size_t i = s.find(name);
  KILN_CHECK(value.defined() && value.dtype() == s.params[i].dtype() && value.shape() == s.params[i].shape(),
             "@{}: parameter '{}' is {}, got {}", s.info.name, name, s.params[i].type().str(),
             value.defined() ? value.type().str() : std::string("an undefined tensor"));
  NoGradGuard no_grad;
  s.params[i].copy_(value);
}

void LoadedFunction::load_parameters(const std::string& path, bool strict) {
  std::map<std::string, Tensor> file = load_safetensors(path);
  if (strict) {
    for (const auto& [name, t] : named_parameters())
      KILN_CHECK(file.count(name), "@{}: {} has no tensor '{}' ({})", state_->info.name, path, name, t.type().str());
  }
  for (const auto& entry : file) {
    const std::string& name = entry.first;  // named, not bound: the lambda captures it (clang 14)
    bool known = std::any_of(state_->info.parameters.begin(), state_->info.parameters.end(),
                             [&](const ParameterInfo& p) { return p.name == name && !p.constant; });
    if (!known) {
      KILN_CHECK(!strict, "@{}: {} holds '{}', which is no parameter", state_->info.name, path, name);
      continue;
    }
    set_parameter(name, entry.second);
  }
}

std::map<std::string, Tensor> LoadedFunction::state_dict() const {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : named_parameters()) out[name] = t;
  return out;
}

void LoadedFunction::restore_random_state() const {
  if (state_->random_state.defined()) set_random_state(state_->random_state);
}

}  // namespace kiln::jit
