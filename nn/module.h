// nn/module.h -- Module: named parameters, buffers and submodules, train/eval, state_dict.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace kiln::nn {

/// Base of every layer and model. A module registers its parameters (tensors that train),
/// buffers (state that doesn't) and submodules under names, so they can be listed
/// recursively ("fc1.weight"), saved and loaded. Modules are not copyable or movable: they
/// register their members by address, and models hold them as members or via shared_ptr.
///
///   struct Mlp : nn::Module {
///     nn::Linear fc1{784, 256}, fc2{256, 10};
///     Mlp() { register_module("fc1", fc1); register_module("fc2", fc2); }
///     Tensor operator()(const Tensor& x) { return fc2(relu(fc1(x))); }
///   };
class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  /// Parameters of this module and its submodules, depth first, with dotted names. A tensor
  /// registered twice (a tied weight: `head.weight = embed.weight;`) is listed once, under its
  /// first name, as torch lists it, so an optimizer updates it once; state_dict keeps both names.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<std::pair<std::string, Module*>> named_children() const { return children_; }

  /// Training mode (dropout active) or evaluation mode; recursive.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Drops every parameter's gradient.
  void zero_grad();
  /// Converts every parameter and floating buffer to `dtype`, in place (handles stay valid).
  void to(DType dtype);
  /// Moves every parameter and buffer to `device`, in place (handles stay valid; gradients are
  /// dropped). As in PyTorch, move a model before making its optimizer, whose state is made
  /// where the parameters are.
  void to(Device device);

  /// Parameters and buffers by dotted name (the tensors themselves, not copies).
  std::map<std::string, Tensor> state_dict() const;
  /// Copies values into the registered tensors. strict: names must match exactly.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);
  /// state_dict() to and from a safetensors file.
  void save(const std::string& path) const;
  void load(const std::string& path, bool strict = true);

 protected:
  /// Registers `t` (a member of the derived class) as a parameter; it will require grad.
  Tensor& register_parameter(const std::string& name, Tensor& t, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor& t);
  template <class M> M& register_module(const std::string& name, M& m) {
    check_name(name);
    children_.emplace_back(name, &m);
    return m;
  }

 private:
  void check_name(const std::string& name) const;
  std::vector<std::pair<std::string, Tensor>> every_named_parameter() const;  // ties repeated
  template <class F> void visit(const std::string& prefix, F&& f) const;

  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

/// A module with one tensor in and one out: what Sequential chains.
class UnaryModule : public Module {
 public:
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

/// Runs its modules in order.
///   nn::Sequential net;
///   net.add<nn::Linear>(784, 256); net.add<nn::ReLU>(); net.add<nn::Linear>(256, 10);
class Sequential : public UnaryModule {
 public:
  Sequential() = default;
  template <class M, class... Args> M& add(Args&&... args) {
    auto m = std::make_shared<M>(std::forward<Args>(args)...);
    push_back(m);
    return *m;
  }
  void push_back(std::shared_ptr<UnaryModule> m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  UnaryModule& operator[](size_t i) { return *layers_.at(i); }

 private:
  std::vector<std::shared_ptr<UnaryModule>> layers_;
};

/// Submodules in a list, registered as "0", "1", ... (torch.nn.ModuleList).
///   nn::ModuleList blocks;
///   for (int i = 0; i < 4; ++i) blocks.add<Block>(256);
///   for (auto& b : blocks) h = static_cast<Block&>(*b)(h);
class ModuleList : public Module {
 public:
  template <class M, class... Args> M& add(Args&&... args) {
    auto m = std::make_shared<M>(std::forward<Args>(args)...);
    push_back(m);
    return *m;
  }
  void push_back(std::shared_ptr<Module> m);
  size_t size() const { return items_.size(); }
  Module& operator[](size_t i) { return *items_.at(i); }
  /// Item i as its own type (a kiln::Error when it is not one).
  template <class M> M& at(size_t i) {
    M* m = dynamic_cast<M*>(items_.at(i).get());
    if (!m) wrong_type(i);
    return *m;
  }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }

 private:
  [[noreturn]] void wrong_type(size_t i) const;
  std::vector<std::shared_ptr<Module>> items_;
};

/// Submodules by name, in insertion order (torch.nn.ModuleDict).
class ModuleDict : public Module {
 public:
  template <class M, class... Args> M& add(const std::string& name, Args&&... args) {
    auto m = std::make_shared<M>(std::forward<Args>(args)...);
    insert(name, m);
    return *m;
  }
  void insert(const std::string& name, std::shared_ptr<Module> m);
  bool contains(const std::string& name) const;
  Module& operator[](const std::string& name);
  size_t size() const { return items_.size(); }
  std::vector<std::string> keys() const;

 private:
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> items_;
};

/// Returns its input (torch.nn.Identity): a placeholder in a Sequential.
class Identity : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return x; }
};

}  // namespace kiln::nn
