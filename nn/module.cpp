// nn/module.cpp -- parameter registry, modes, state_dict.
#include "nn/module.h"

#include <set>

#include "autograd/autograd.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/safetensors.h"

namespace kiln::nn {

void Module::check_name(const std::string& name) const {
  KILN_CHECK(!name.empty() && name.find('.') == std::string::npos,
             "register: name \"{}\" must be non-empty and contain no '.'", name);
  auto taken = [&](const auto& list) {
    for (const auto& [n, _] : list)
      if (n == name) return true;
    return false;
  };
  KILN_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_),
             "register: name \"{}\" is already taken in this module", name);
}

Tensor& Module::register_parameter(const std::string& name, Tensor& t, bool requires_grad) {
  check_name(name);
  KILN_CHECK(t.defined(), "register_parameter: \"{}\" is undefined", name);
  if (requires_grad && !t.requires_grad()) t.requires_grad_();
  params_.emplace_back(name, &t);
  return t;
}

Tensor& Module::register_buffer(const std::string& name, Tensor& t) {
  check_name(name);
  buffers_.emplace_back(name, &t);
  return t;
}

template <class F> void Module::visit(const std::string& prefix, F&& f) const {
  f(prefix, *this);
  for (const auto& [name, child] : children_) child->visit(prefix + name + ".", f);
}

std::vector<std::pair<std::string, Tensor>> Module::every_named_parameter() const {
  std::vector<std::pair<std::string, Tensor>> out;
  visit("", [&](const std::string& p, const Module& m) {
    for (const auto& [n, t] : m.params_) out.emplace_back(p + n, *t);
  });
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<const TensorImpl*> seen;
  for (auto& [n, t] : every_named_parameter())
    if (seen.insert(t.impl()).second) out.emplace_back(n, t);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  visit("", [&](const std::string& p, const Module& m) {
    for (const auto& [n, t] : m.buffers_)
      if (t->defined()) out.emplace_back(p + n, *t);
  });
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.zero_grad();
}

namespace {

// Points a parameter's (or buffer's) impl at new data, so every handle to it sees the data;
// its gradient is dropped (it no longer matches).
void rebind(Tensor* t, const Tensor& data) {
  Tensor c = data.contiguous();
  TensorImpl* impl = t->impl();
  impl->storage = c.impl()->storage;
  impl->offset = c.offset();
  impl->strides = c.strides();
  impl->dtype = c.dtype();
  impl->device = c.device();
  impl->view_base.reset();
  t->zero_grad();
}

}  // namespace

void Module::to(DType dtype) {
  KILN_CHECK(is_float(dtype), "Module::to: parameters must stay floating point, got {}", dtype_name(dtype));
  NoGradGuard no_grad;
  visit("", [&](const std::string&, const Module& m) {
    auto convert = [&](Tensor* t) {
      if (t->defined() && is_float(t->dtype()) && t->dtype() != dtype) rebind(t, t->to(dtype));
    };
    for (auto& [n, t] : m.params_) convert(t);
    for (auto& [n, t] : m.buffers_) convert(t);
  });
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  visit("", [&](const std::string&, const Module& m) {
    auto move = [&](Tensor* t) {
      if (t->defined() && t->device() != device) rebind(t, t->to(device));
    };
    for (auto& [n, t] : m.params_) move(t);
    for (auto& [n, t] : m.buffers_) move(t);
  });
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : every_named_parameter()) out[n] = t;
  for (auto& [n, t] : named_buffers()) out[n] = t;
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  NoGradGuard no_grad;
  std::map<std::string, Tensor> mine = state_dict();
  if (strict) {
    std::vector<std::string> missing, unexpected;
    for (auto& [n, t] : mine)
      if (!state.count(n)) missing.push_back(n);
    for (auto& [n, t] : state)
      if (!mine.count(n)) unexpected.push_back(n);
    KILN_CHECK(missing.empty() && unexpected.empty(), "load_state_dict: missing keys [{}], unexpected keys [{}]",
               fmt::join(missing, ", "), fmt::join(unexpected, ", "));
  }
  for (auto& [n, t] : mine) {
    auto it = state.find(n);
    if (it == state.end()) continue;
    KILN_CHECK(it->second.shape() == t.shape(), "load_state_dict: \"{}\" is {} in the state but {} in the module", n,
               it->second.type().str(), t.type().str());
    Tensor dst = t;
    dst.copy_(it->second);
  }
}

void Module::save(const std::string& path) const { save_safetensors(state_dict(), path); }
void Module::load(const std::string& path, bool strict) { load_state_dict(load_safetensors(path), strict); }

void Sequential::push_back(std::shared_ptr<UnaryModule> m) {
  KILN_CHECK(m != nullptr, "Sequential: cannot add a null module");
  register_module(std::to_string(layers_.size()), *m);
  layers_.push_back(std::move(m));
}

void ModuleList::push_back(std::shared_ptr<Module> m) {
  KILN_CHECK(m != nullptr, "ModuleList: cannot add a null module");
  register_module(std::to_string(items_.size()), *m);
  items_.push_back(std::move(m));
}
void ModuleList::wrong_type(size_t i) const {
  throw Error(fmt::format("ModuleList: item {} is not of the type asked for", i));
}

void ModuleDict::insert(const std::string& name, std::shared_ptr<Module> m) {
  KILN_CHECK(m != nullptr, "ModuleDict: cannot add a null module as \"{}\"", name);
  register_module(name, *m);
  items_.emplace_back(name, std::move(m));
}
bool ModuleDict::contains(const std::string& name) const {
  for (const auto& [n, m] : items_)
    if (n == name) return true;
  return false;
}
Module& ModuleDict::operator[](const std::string& name) {
  for (auto& [n, m] : items_)
    if (n == name) return *m;
  throw Error(fmt::format("ModuleDict: no module named \"{}\" (has {})", name, fmt::join(keys(), ", ")));
}
std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [n, m] : items_) out.push_back(n);
  return out;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& l : layers_) h = l->forward(h);
  return h;
}

}  // namespace kiln::nn
