// jit/save.h -- saved compiled functions: jit::save writes a traced function (a forward, or a
// whole training step with its optimizer state) to one file; jit::load gives it back as a
// callable in any process, without the C++ that traced it.
//
//   jit::SaveOptions opt;
//   opt.dynamic(0, 0, "B");                        // input 0's dim 0 takes any size when loaded
//   jit::save_module(net, example, "net.kiln", opt);
//   ...                                            // another program, another machine
//   jit::LoadedFunction f = jit::load("net.kiln");
//   Tensor logits = f(images);                     // any batch size
//
// The file holds data only (metadata, the graph as IR text, tensors in the safetensors layout),
// never machine code: load parses and verifies it, and the first call compiles (through the
// disk cache), so a file from elsewhere cannot make this process run code of its choosing.
// Every length in it is checked against the file's size before anything is allocated. Files
// of every earlier format version keep loading (tests/compat); a newer one says so.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "ir/graph.h"
#include "jit/trace.h"
#include "runtime/tensor.h"

namespace kiln::jit {

struct SaveOptions {
  struct Dynamic {
    size_t input;  // argument index
    int64_t dim;   // dim of it (negative: from the end)
    std::string name;
  };
  /// Dims saved as symbols (`f32[B,784]`): the loaded function accepts any size there. Dims
  /// with one name are one size (the batch dim of images and labels). A dim stays a symbol
  /// in the saved graph wherever it (or a multiple of it, `B*128`) reaches.
  std::vector<Dynamic> dynamic_dims;
  /// Names for the arguments and results in the signature ("images"); default input0, ...
  std::vector<std::string> input_names, output_names;
  /// Names for captured tensors, matched by identity (a module's named_parameters()): a
  /// traced lambda's parameters are otherwise named param.0, param.1, ... (trace_module's are
  /// named already).
  ParamNames parameter_names;

  SaveOptions& dynamic(size_t input, int64_t dim, std::string name) {
    dynamic_dims.push_back({input, dim, std::move(name)});
    return *this;
  }
};

/// Saves the plan `fn` used last: an inference forward (traced with grad mode off, or with
/// nothing requiring grad) or a whole training step (a function that calls backward()). The
/// parameters, buffers and optimizer state it captured are saved with their values now; a
/// step that draws random numbers also keeps the generator's state. The file is replaced
/// atomically. Throws kiln::Error for a differentiable forward (call it under NoGradGuard
/// first) and for a dynamic dim the graph cannot keep symbolic (a number or constant that
/// depends on it), naming the node.
void save(const Function& fn, const std::string& path, const SaveOptions& options = {});

/// Traces `m`'s forward on `example_input` with grad mode off and saves it; its parameters are
/// named by the module's state_dict keys. Put the module in eval() first for serving.
template <class M>
void save_module(M& m, const Tensor& example_input, const std::string& path, const SaveOptions& options = {}) {
  NoGradGuard no_grad;
  save(trace_module(m, example_input), path, options);
}

/// One argument or result of a loaded function: its name and its type as text, with dynamic
/// dims by name ("f32[B,1,28,28]").
struct ValueInfo {
  std::string name;
  std::string type;
};

struct ParameterInfo {
  std::string name;
  TensorType type;
  bool constant = false;  // a constant of the trace (not a parameter a user replaces)
};

/// What a saved module says about itself (kiln-ir inspect prints it).
struct ModuleInfo {
  uint32_t format = 0;         // the file's format version
  std::string kiln_version;    // the kiln that wrote it
  std::string name;            // the traced function's
  bool training_step = false;  // a whole step: it updates its parameters on every call
  std::vector<ValueInfo> inputs, outputs;
  std::vector<std::string> dynamic_dims;
  std::vector<ParameterInfo> parameters;  // in the graph's order, constants included
  std::vector<std::string> assigns;       // parameters a call writes
  int64_t random_draws = 0;               // numbers a call draws (0: none)
};

/// A function read from a saved module. Copies share one state (parameters, plans); calls are
/// thread-safe, as a traced Function's are.
class LoadedFunction {
 public:
  /// Runs on `inputs` (their count, dtypes, ranks and static dims as saved; dynamic dims any
  /// size, the same for one name): compiles on the first call of each signature (nothing new
  /// where the disk cache has the kernels). A training step runs untaped and updates its
  /// parameters and optimizer state; a forward runs as a traced one does (with grad mode on
  /// and parameters requiring grad, its backward is compiled too).
  std::vector<Tensor> call(std::span<const Tensor> inputs) const;
  template <class... T> Tensor operator()(const T&... inputs) const {
    Tensor args[] = {Tensor(inputs)...};
    std::vector<Tensor> out = call(std::span<const Tensor>(args, sizeof...(T)));
    return out.empty() ? Tensor() : out[0];
  }

  /// The graph as saved: symbolic dims, parameters by name, constants as parameters named
  /// const.N.
  const ir::Graph& graph() const;
  /// The graph the last call compiled (fused, concrete sizes); throws before the first call.
  ir::Graph compiled_graph() const;
  const ModuleInfo& info() const;
  const std::vector<ValueInfo>& inputs() const { return info().inputs; }
  const std::vector<ValueInfo>& outputs() const { return info().outputs; }
  Stats stats() const;

  /// The parameters, buffers and optimizer state, by name (constants left out): the live
  /// tensors the calls read. Writing into one in place changes what the next call computes.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  Tensor parameter(const std::string& name) const;
  /// Copies `value` into the parameter `name` (same dtype and shape, else kiln::Error).
  void set_parameter(const std::string& name, const Tensor& value);
  /// Copies each tensor of a safetensors file into the parameter of its name. With `strict`,
  /// a parameter the file lacks or a tensor no parameter takes is an error.
  void load_parameters(const std::string& safetensors_path, bool strict = true);
  /// The parameters (constants left out) as a state dict, for save_safetensors.
  std::map<std::string, Tensor> state_dict() const;

  /// Moves the parameters, buffers, optimizer state and constants to `device` (as copies;
  /// requires_grad kept): later calls take inputs there and compile for it. A module saved on
  /// one device runs on another. Not concurrently with calls.
  void to(Device device);

  /// A step that draws random numbers keeps the generator's state from when it was saved:
  /// this puts the generator there, so the loaded step draws what the original would next.
  void restore_random_state() const;

  struct State;

 private:
  friend LoadedFunction load_bytes(std::string_view, const std::string&, std::optional<Device>);
  std::shared_ptr<State> state_;
};

/// Reads a saved module (jit::save); throws kiln::Error naming the file and what is wrong.
LoadedFunction load(const std::string& path);
/// The same with its tensors on `device` (as LoadedFunction::to moves them):
/// jit::load(path, cuda::device(0)). A graph saved with values on several devices (one that
/// moved its data to a GPU itself) is placed wholly on `device` as it loads, so a module
/// trained on a GPU serves on a machine without one: jit::load(path, cpu).
LoadedFunction load(const std::string& path, Device device);
/// The same from the file's bytes; `name` stands for the file in errors.
LoadedFunction load_bytes(std::string_view bytes, const std::string& name = "<bytes>",
                          std::optional<Device> device = std::nullopt);

}  // namespace kiln::jit
