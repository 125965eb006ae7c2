// tests/jit/random_program.cpp -- random programs: running them, and the generator's values
// (arguments, captured tensors, literals) and bookkeeping.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <memory>

#include "random_generator.h"

namespace kiln::test {
namespace {

Tensor random_data(const Dims& shape, DType dtype) {
  if (dtype == DType::I32) return randint(-3, 4, shape, DType::I32);
  return randn(shape, dtype) * 1.5;
}

}  // namespace

std::vector<Tensor> Program::run(std::span<const Tensor> arguments) const {
  std::vector<Tensor> vals;
  for (const Step& s : steps) vals.push_back(s(arguments, vals));
  std::vector<Tensor> out;
  for (size_t i : outputs) out.push_back(vals[i]);
  return out;
}

std::vector<Tensor> Program::fresh_args() const {
  std::vector<Tensor> out;
  for (const Tensor& a : args) out.push_back(random_data(a.shape(), a.dtype()));
  return out;
}

Program random_program(uint64_t seed, int length) { return Generator(seed).make(length); }

Generator::Generator(uint64_t seed) : rng_(seed) { manual_seed(seed); }

Program Generator::make(int length) {
  new_arg(random_shape(3), DType::F32);
  while (static_cast<int>(vals_.size()) < length) step();
  std::vector<size_t>& out = p_.outputs;
  out.push_back(vals_.size() - 1);
  for (int i = uniform(0, 2); i > 0; --i) {
    size_t j = static_cast<size_t>(uniform(0, static_cast<int>(vals_.size()) - 1));
    if (std::find(out.begin(), out.end(), j) == out.end()) out.push_back(j);
  }
  p_.text += fmt::format("return {}\n", fmt::join(out, ", "));
  return std::move(p_);
}

Dims Generator::random_shape(int max_rank) {
  Dims s;
  for (int r = uniform(0, max_rank); r > 0; --r) s.push_back(uniform(1, 4));
  return s;
}

Dims Generator::random_axes(int64_t rank) {
  Dims axes;
  for (int64_t d = 0; d < rank; ++d)
    if (coin(0.5)) axes.push_back(coin(0.3) ? d - rank : d);
  return axes;
}

size_t Generator::add(const std::string& what, Step s) {
  Tensor r = s(p_.args, vals_);
  vals_.push_back(r);
  p_.steps.push_back(std::move(s));
  p_.text += fmt::format("%{} = {} : {}\n", vals_.size() - 1, what, r.type().str());
  return vals_.size() - 1;
}

size_t Generator::new_arg(const Dims& shape, DType dtype) {
  size_t k = p_.args.size();
  p_.args.push_back(random_data(shape, dtype));
  return add(fmt::format("arg {}", k), [k](auto args, auto&) { return args[k]; });
}

// A program runs on the device of its first argument (the CUDA differential test moves the
// arguments): captured tensors are copied there once, when first read eagerly (a trace then
// captures the copy), and literals are made there.
size_t Generator::captured(const Dims& shape, DType dtype) {
  std::string name = fmt::format("c{}", p_.captured.size());
  Tensor c = random_data(shape, dtype);
  p_.captured.emplace_back(name, c);
  auto copies = std::make_shared<std::vector<Tensor>>(1, c);
  return add(name, [copies](auto args, auto&) {
    Device d = args[0].device();
    for (const Tensor& t : *copies)
      if (t.device() == d) return t;
    copies->push_back(copies->front().to(d));
    return copies->back();
  });
}

size_t Generator::literal(const Dims& shape, DType dtype) {
  if (coin(0.5)) {
    double v = number();
    return add(fmt::format("full {}", v),
               [shape, v, dtype](auto args, auto&) { return full(shape, v, dtype, args[0].device()); });
  }
  return add("arange", [shape, dtype](auto args, auto&) {
    return (arange(shape.product()).to(dtype).to(args[0].device()) * 0.25 - 1.0).reshape(shape);
  });
}

size_t Generator::operand(const Tensor& x) {
  std::vector<size_t> fits;
  for (size_t j = 0; j < vals_.size(); ++j) {
    try {
      if (broadcast_shapes(x.shape(), vals_[j].shape()).product() <= kMaxNumel) fits.push_back(j);
    } catch (const Error&) {  // shapes that do not broadcast
    }
  }
  if (!fits.empty() && coin(0.4)) return pick<size_t>(fits);
  Dims s;
  int64_t drop = std::min<int64_t>(x.dim(), uniform(0, 1));
  for (int64_t i = drop; i < x.dim(); ++i) s.push_back(coin(0.3) ? 1 : x.shape()[i]);
  if (drop == 0 && coin(0.1) && x.numel() * 2 <= kMaxNumel) s.insert(0, 2);
  DType dt = coin(0.15) ? DType::F64 : coin(0.1) ? DType::I32 : x.dtype();
  int kind = uniform(0, 2);
  if (kind == 0) return new_arg(s, dt);
  if (kind == 1) return captured(s, dt);
  return literal(s, dt == DType::I32 ? DType::F32 : dt);
}

size_t Generator::input() {
  int n = static_cast<int>(vals_.size());
  for (int tries = 0; tries < 8; ++tries) {
    int i = coin(0.7) ? uniform(std::max(0, n - 3), n - 1) : uniform(0, n - 1);
    if (is_float(vals_[static_cast<size_t>(i)].dtype())) return static_cast<size_t>(i);
  }
  return new_arg(random_shape(3), DType::F32);
}

}  // namespace kiln::test
