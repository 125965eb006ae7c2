// cuda/kernel.cpp -- your own CUDA kernels (cuda/kernel.h): the text codegen/cuda/user_kernel.h
// writes, compiled through the kernel cache and launched on the current stream.
#include "cuda/kernel.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <unordered_map>

#include "codegen/cuda/user_kernel.h"
#include "cuda/kernel_cache.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/cuda.h"
#include "runtime/cuda_internal.h"
#include "runtime/recorder.h"

namespace kiln::cuda {
namespace {

// What the kernel's kiln_dims parameter holds (codegen/cuda/user_kernel.h).
struct Dims8 {
  long long size[codegen::kUserKernelMaxDims];
  long long stride[codegen::kUserKernelMaxDims];
  int ndim;
  long long numel;
};

// A variant's key: what the text depends on besides the kernel itself, and the device.
std::string variant_key(std::span<const DType> inputs, const KernelCall& call, int device) {
  std::string key = fmt::format("{}|", device);
  for (DType t : inputs) key += fmt::format("{},", dtype_name(t));
  key += "|";
  for (DType t : call.output_dtypes) key += fmt::format("{},", dtype_name(t));
  for (const auto& [n, v] : call.template_args) {
    key += "|" + n + "=";
    if (const DType* t = std::get_if<DType>(&v)) key += dtype_name(*t);
    else if (const bool* b = std::get_if<bool>(&v)) key += *b ? "true" : "false";
    else key += std::to_string(std::get<int64_t>(v)) + "i";
  }
  return key;
}

Dims8 dims_of(const Tensor& t) {
  Dims8 d{};
  d.ndim = static_cast<int>(t.dim());
  for (int64_t k = 0; k < t.dim(); ++k) d.size[k] = t.shape()[k], d.stride[k] = t.strides()[k];
  d.numel = t.numel();
  return d;
}

}  // namespace

struct Kernel::Variants {
  std::mutex mu;
  std::unordered_map<std::string, DeviceFunction> compiled;
};

Kernel::Kernel(std::string name, std::vector<std::string> input_names, std::vector<std::string> output_names,
               std::string source, std::string header)
    : name_(std::move(name)),
      inputs_(std::move(input_names)),
      outputs_(std::move(output_names)),
      source_(std::move(source)),
      header_(std::move(header)),
      variants_(std::make_shared<Variants>()) {
  KILN_CHECK(!outputs_.empty(), "cuda::Kernel {}: a kernel needs at least one output", name_);
  codegen::UserKernelText text{name_, inputs_, outputs_, {}, {}, source_, header_, {}};
  codegen::check_user_kernel_names(text);
}

std::string Kernel::full_source(std::span<const DType> input_dtypes, const KernelCall& call) const {
  codegen::UserKernelText text{
      name_, inputs_, outputs_, {input_dtypes.begin(), input_dtypes.end()}, call.output_dtypes, source_, header_, {}};
  for (const auto& [n, v] : call.template_args) text.template_args.emplace_back(n, v);
  return codegen::user_kernel_source(text);
}

std::vector<Tensor> Kernel::operator()(std::span<const Tensor> given, const KernelCall& call) const {
  KILN_CHECK(!active_recorder(),
             "cuda::Kernel {}: a user kernel runs eagerly; inside jit::trace its tensors hold no data (it is no op "
             "of the IR)",
             name_);
  KILN_CHECK(given.size() == inputs_.size(), "cuda::Kernel {}: expected {} inputs ({}), got {}", name_, inputs_.size(),
             fmt::join(inputs_, ", "), given.size());
  KILN_CHECK(call.output_shapes.size() == outputs_.size() && call.output_dtypes.size() == outputs_.size(),
             "cuda::Kernel {}: expected a shape and a dtype for each of its {} outputs ({}), got {} shapes and {} "
             "dtypes",
             name_, outputs_.size(), fmt::join(outputs_, ", "), call.output_shapes.size(), call.output_dtypes.size());
  Device device = call.device.value_or(given.empty() ? cuda::device(current_device()) : given[0].device());
  std::vector<Tensor> inputs;
  std::vector<DType> dtypes;
  for (size_t i = 0; i < given.size(); ++i) {
    const Tensor& t = given[i];
    KILN_CHECK(t.defined(), "cuda::Kernel {}: input {} ({}) is undefined", name_, i, inputs_[i]);
    KILN_CHECK(t.device() == device && device.is_cuda(),
               "cuda::Kernel {}: input {} ({}) is {}; expected every input on one CUDA device ({})", name_, i,
               inputs_[i], t.type().str(), device.str());
    KILN_CHECK(t.dim() <= codegen::kUserKernelMaxDims, "cuda::Kernel {}: input {} ({}) is {}: at most {} dims", name_,
               i, inputs_[i], t.type().str(), codegen::kUserKernelMaxDims);
    inputs.push_back(call.contiguous_inputs ? t.detach().contiguous() : t.detach());
    dtypes.push_back(t.dtype());
  }
  KILN_CHECK(device.is_cuda(), "cuda::Kernel {}: runs on a CUDA device, not {}", name_, device.str());
  std::vector<Tensor> outputs;
  for (size_t o = 0; o < outputs_.size(); ++o) {
    KILN_CHECK(call.output_shapes[o].size() <= static_cast<size_t>(codegen::kUserKernelMaxDims),
               "cuda::Kernel {}: output {} ({}) has {} dims: at most {}", name_, o, outputs_[o],
               call.output_shapes[o].size(), codegen::kUserKernelMaxDims);
    outputs.push_back(call.init_value ? full(call.output_shapes[o], *call.init_value, call.output_dtypes[o], device)
                                      : empty(call.output_shapes[o], call.output_dtypes[o], device));
  }
  std::array<int64_t, 3> grid = call.grid, block = call.block;
  if (grid == std::array<int64_t, 3>{0, 0, 0}) {  // one thread per element of the first output
    block = {block[0], 1, 1};
    grid = {std::max<int64_t>(1, (outputs[0].numel() + block[0] - 1) / std::max<int64_t>(block[0], 1)), 1, 1};
  }
  const int64_t threads = block[0] * block[1] * block[2];
  KILN_CHECK(block[0] >= 1 && block[1] >= 1 && block[2] >= 1 && threads <= 1024 && block[2] <= 64,
             "cuda::Kernel {}: a block of [{}, {}, {}] threads: each at least 1, z at most 64, 1024 in all", name_,
             block[0], block[1], block[2]);
  KILN_CHECK(grid[0] >= 1 && grid[1] >= 1 && grid[2] >= 1 && grid[0] < (int64_t{1} << 31) && grid[1] <= 65535 &&
                 grid[2] <= 65535,
             "cuda::Kernel {}: a grid of [{}, {}, {}] blocks: each at least 1, x below 2^31, y and z at most 65535",
             name_, grid[0], grid[1], grid[2]);
  KILN_CHECK(call.shared_bytes >= 0 && call.shared_bytes <= (227 << 10),
             "cuda::Kernel {}: {} bytes of shared memory: at most 227 KiB", name_, call.shared_bytes);
  if (outputs[0].numel() == 0 && call.grid == std::array<int64_t, 3>{0, 0, 0}) return outputs;  // nothing to write

  DeviceFunction fn;
  const std::string key = variant_key(dtypes, call, device.index);
  {
    std::lock_guard<std::mutex> lock(variants_->mu);
    if (auto it = variants_->compiled.find(key); it != variants_->compiled.end()) fn = it->second;
  }
  if (!fn.function) {
    try {
      fn = kernel_for(full_source(dtypes, call), device.index, name_).fn;
    } catch (const OutOfMemory&) {
      throw;
    } catch (const Error& e) {
      throw Error(fmt::format("cuda::Kernel {}: {}", name_, e.what()));
    }
    std::lock_guard<std::mutex> lock(variants_->mu);
    variants_->compiled.emplace(key, fn);
  }
  std::vector<void*> pointers;
  std::vector<Dims8> dims;
  pointers.reserve(inputs.size() + outputs.size());
  dims.reserve(inputs.size() + outputs.size());
  for (const Tensor& t : inputs) pointers.push_back(t.data_ptr()), dims.push_back(dims_of(t));
  for (const Tensor& t : outputs) pointers.push_back(t.data_ptr()), dims.push_back(dims_of(t));
  std::vector<void*> args;
  for (size_t i = 0; i < pointers.size(); ++i) args.push_back(&pointers[i]), args.push_back(&dims[i]);
  const unsigned g[3] = {static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]),
                         static_cast<unsigned>(grid[2])};
  const unsigned b[3] = {static_cast<unsigned>(block[0]), static_cast<unsigned>(block[1]),
                         static_cast<unsigned>(block[2])};
  launch(fn, g, b, static_cast<size_t>(call.shared_bytes), args.data());
  return outputs;
}

}  // namespace kiln::cuda
