// tests/autograd/op_gradcheck_test.cpp -- every op in ops.def either has a derivative that
// matches central finite differences (in f64, through broadcasting, views and immediates),
// or says it is not differentiable. A new op fails here until it has one or the other.
#include <gtest/gtest.h>

#include <functional>
#include <map>

#include <kiln/kiln.h>

#include "runtime/collective.h"
#include "runtime/op.h"
#include "tests/distributed/solo_group.h"
#include "tests/ops/op_specs_registered.h"

using namespace kiln;

namespace {

using Fn = std::function<Tensor(std::span<const Tensor>)>;

struct Case {
  std::string name;
  std::vector<Tensor> inputs;  // f64; those requiring grad are checked
  Fn fn;
  autograd::GradcheckOptions options = {};
};

Tensor random_leaf(const Dims& shape, double lo = -2, double hi = 2) {
  return (rand(shape, f64) * (hi - lo) + lo).requires_grad_();
}
// Values bounded away from 0 (for division, log, ...), of either sign when `signed_`.
Tensor away_from_zero(const Dims& shape, bool signed_) {
  Tensor mag = rand(shape, f64) * 1.5 + 0.5;
  Tensor s = signed_ ? where(rand(shape, f64) < 0.5, -1.0, 1.0) : ones(shape, f64);
  return (mag * s).detach().requires_grad_();
}

using Unary = Tensor (*)(const Tensor&);
// A unary op on a plain input, a transposed (non-contiguous) view, and an expanded view.
std::vector<Case> unary_cases(const std::string& name, std::function<Tensor(const Tensor&)> f,
                              Tensor (*make)(const Dims&)) {
  return {
      {name + "/plain", {make({3, 4})}, [f](std::span<const Tensor> in) { return f(in[0]); }},
      {name + "/transposed", {make({4, 3})}, [f](std::span<const Tensor> in) { return f(in[0].t()); }},
      {name + "/expanded",
       {make({3, 1})},
       [f](std::span<const Tensor> in) {
         return f(in[0].expand({3, 5}));
       }},
  };
}
Tensor any_values(const Dims& s) { return random_leaf(s); }
Tensor positive(const Dims& s) { return away_from_zero(s, false); }
Tensor nonzero(const Dims& s) { return away_from_zero(s, true); }
Tensor above_minus_one(const Dims& s) { return random_leaf(s, -0.5, 2); }

// A binary op with broadcasting ([3,1] with [4]), with a scalar on either side, and on views.
std::vector<Case> binary_cases(const std::string& name, std::function<Tensor(const Tensor&, const Tensor&)> f,
                               std::function<Tensor(const Tensor&, Scalar)> fs,
                               std::function<Tensor(Scalar, const Tensor&)> sf, Tensor (*lhs)(const Dims&),
                               Tensor (*rhs)(const Dims&), double scalar) {
  return {
      {name + "/broadcast", {lhs({3, 1}), rhs({4})}, [f](std::span<const Tensor> in) { return f(in[0], in[1]); }},
      {name + "/views",
       {lhs({4, 3}), rhs({3, 8})},
       [f](std::span<const Tensor> in) { return f(in[0].t(), in[1].slice(1, 0, 8, 2)); }},
      {name + "/tensor_scalar", {lhs({2, 3})}, [fs, scalar](std::span<const Tensor> in) { return fs(in[0], scalar); }},
      {name + "/scalar_tensor", {rhs({2, 3})}, [sf, scalar](std::span<const Tensor> in) { return sf(scalar, in[0]); }},
  };
}

std::map<OpId, std::vector<Case>> all_cases() {
  std::map<OpId, std::vector<Case>> c;
  auto un = [&](OpId id, const char* n, Unary f, Tensor (*make)(const Dims&)) { c[id] = unary_cases(n, f, make); };
  un(OpId::Neg, "neg", neg, any_values);
  un(OpId::Abs, "abs", abs, nonzero);
  un(OpId::Sign, "sign", sign, nonzero);
  un(OpId::Exp, "exp", exp, any_values);
  un(OpId::Log, "log", log, positive);
  un(OpId::Log1p, "log1p", log1p, above_minus_one);
  un(OpId::Expm1, "expm1", expm1, any_values);
  un(OpId::Sqrt, "sqrt", sqrt, positive);
  un(OpId::Rsqrt, "rsqrt", rsqrt, positive);
  un(OpId::Reciprocal, "reciprocal", reciprocal, nonzero);
  un(OpId::Sin, "sin", sin, any_values);
  un(OpId::Cos, "cos", cos, any_values);
  un(OpId::Tanh, "tanh", tanh, any_values);
  un(OpId::Erf, "erf", erf, any_values);
  un(OpId::Sigmoid, "sigmoid", sigmoid, any_values);
  un(OpId::Relu, "relu", relu, nonzero);
  un(OpId::Silu, "silu", silu, any_values);
  c[OpId::Gelu] = unary_cases(
      "gelu", [](const Tensor& x) { return gelu(x); }, any_values);
  c[OpId::GeluTanh] = unary_cases(
      "gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, any_values);
  // Piecewise constant: keep inputs away from the jumps so finite differences see zero.
  auto off_integers = [](const Dims& s) {
    return (floor(rand(s, f64) * 6 - 3) + 0.3 + rand(s, f64) * 0.3).detach().requires_grad_();
  };
  c[OpId::Floor] = unary_cases(
      "floor", [](const Tensor& x) { return floor(x); }, off_integers);
  c[OpId::Ceil] = unary_cases(
      "ceil", [](const Tensor& x) { return ceil(x); }, off_integers);
  c[OpId::Round] = unary_cases(
      "round", [](const Tensor& x) { return round(x); }, off_integers);

  auto bin = [&](OpId id, const char* n, Tensor (*f)(const Tensor&, const Tensor&), Tensor (*fs)(const Tensor&, Scalar),
                 Tensor (*sf)(Scalar, const Tensor&), Tensor (*l)(const Dims&), Tensor (*r)(const Dims&),
                 double s) { c[id] = binary_cases(n, f, fs, sf, l, r, s); };
  bin(OpId::Add, "add", add, add, add, any_values, any_values, 1.5);
  bin(OpId::Sub, "sub", sub, sub, sub, any_values, any_values, 1.5);
  bin(OpId::Mul, "mul", mul, mul, mul, any_values, any_values, 1.5);
  bin(OpId::Div, "div", div, div, div, any_values, nonzero, 1.5);
  bin(OpId::Pow, "pow", pow, pow, pow, positive, any_values, 1.7);
  // Distinct values, so no ties (where the derivative jumps).
  c[OpId::Maximum] = binary_cases(
      "maximum", [](auto& a, auto& b) { return maximum(a, b); }, [](auto& a, Scalar s) { return maximum(a, s); },
      [](Scalar s, auto& b) { return maximum(b, s); }, any_values, any_values, 0.25);
  c[OpId::Minimum] = binary_cases(
      "minimum", [](auto& a, auto& b) { return minimum(a, b); }, [](auto& a, Scalar s) { return minimum(a, s); },
      [](Scalar s, auto& b) { return minimum(b, s); }, any_values, any_values, 0.25);
  // y away from 0, where the gradient jumps; y's own derivative is 0.
  c[OpId::ReluGrad] = {
      {"relu_grad",
       {nonzero({3, 4}), random_leaf({3, 4})},
       [](std::span<const Tensor> in) { return relu_grad(in[0], in[1]); }},
      {"relu_grad/broadcast",
       {nonzero({4}), random_leaf({3, 4})},
       [](std::span<const Tensor> in) { return relu_grad(in[0], in[1]); }},
  };
  c[OpId::Where] = {
      {"where/tensors",
       {random_leaf({3, 4}), random_leaf({4})},
       [](std::span<const Tensor> in) { return where(in[0] > 0, in[0], in[1]); }},
      {"where/scalar", {random_leaf({3, 4})}, [](std::span<const Tensor> in) { return where(in[0] > 0, 2.0, in[0]); }},
  };
  c[OpId::Clamp] = {
      {"clamp/scalars", {random_leaf({4, 5})}, [](std::span<const Tensor> in) { return clamp(in[0], -0.7, 0.9); }},
      {"clamp/one_sided",
       {random_leaf({4, 5})},
       [](std::span<const Tensor> in) { return clamp(in[0], std::nullopt, 0.3); }},
      {"clamp/tensors",
       {random_leaf({4, 5}), random_leaf({5}, -2, -0.1), random_leaf({4, 1}, 0.1, 2)},
       [](std::span<const Tensor> in) { return clamp(in[0], in[1], in[2]); }},
  };
  // Through f32, so finite differences need a step far above f32's resolution.
  c[OpId::Cast] = {{"cast/f32_roundtrip",
                    {random_leaf({3, 2})},
                    [](std::span<const Tensor> in) { return (in[0].to(f32) * 2.0f).to(f64); },
                    {.eps = 1e-2, .atol = 1e-4, .rtol = 1e-3}}};

  auto red = [](const std::string& n, std::function<Tensor(const Tensor&, const Dims&, bool)> f,
                Tensor (*make)(const Dims&)) {
    return std::vector<Case>{
        {n + "/all", {make({2, 3, 4})}, [f](std::span<const Tensor> in) { return f(in[0], {}, false); }},
        {n + "/middle_keepdim", {make({2, 3, 4})}, [f](std::span<const Tensor> in) { return f(in[0], {1}, true); }},
        {n + "/outer_two",
         {make({2, 3, 4})},
         [f](std::span<const Tensor> in) {
           return f(in[0], {0, 2}, false);
         }},
        {n + "/permuted",
         {make({4, 2, 3})},
         [f](std::span<const Tensor> in) {
           return f(in[0].permute({1, 2, 0}), {-1}, false);
         }},
    };
  };
  c[OpId::Sum] = red(
      "sum", [](auto& x, auto& d, bool k) { return sum(x, d, k); }, any_values);
  c[OpId::Prod] = red(
      "prod", [](auto& x, auto& d, bool k) { return prod(x, d, k); }, nonzero);
  c[OpId::Prod].push_back({"prod/with_zeros",
                           {from_vector<double>({0, 2, 3, 0.5, 0, 0, 4, 1.5, -2}, {3, 3}).requires_grad_()},
                           [](std::span<const Tensor> in) { return prod(in[0], {1}); }});
  c[OpId::MaxReduce] = red(
      "amax", [](auto& x, auto& d, bool k) { return amax(x, d, k); }, any_values);
  c[OpId::MinReduce] = red(
      "amin", [](auto& x, auto& d, bool k) { return amin(x, d, k); }, any_values);

  c[OpId::Reshape] = {{"reshape", {random_leaf({3, 4})}, [](std::span<const Tensor> in) {
                         return in[0].t().reshape({2, 6}) * 1.0;
                       }}};
  c[OpId::Permute] = {{"permute", {random_leaf({2, 3, 4})}, [](std::span<const Tensor> in) {
                         return in[0].permute({2, 0, 1}) * 1.0;
                       }}};
  c[OpId::Slice] = {
      {"slice/step1", {random_leaf({5, 4})}, [](std::span<const Tensor> in) { return in[0].slice(0, 1, 4) * 1.0; }},
      {"slice/step3", {random_leaf({7, 4})}, [](std::span<const Tensor> in) { return in[0].slice(0, 1, 7, 3) * 1.0; }},
      {"select", {random_leaf({3, 4})}, [](std::span<const Tensor> in) { return in[0].select(1, 2) * 1.0; }},
  };
  c[OpId::Expand] = {{"expand", {random_leaf({3, 1})}, [](std::span<const Tensor> in) {
                        return in[0].expand({2, 3, 4}) * 1.0;
                      }}};
  c[OpId::Copy] = {
      {"contiguous", {random_leaf({3, 4})}, [](std::span<const Tensor> in) { return in[0].t().contiguous(); }}};
  c[OpId::ToDevice] = {{"to_device", {random_leaf({3, 4})}, [](std::span<const Tensor> in) {
                          Attrs a;
                          a.device = cpu;  // x.to(cpu) would return x itself; the op copies
                          return apply(OpId::ToDevice, {in[0].t()}, a);
                        }}};
  c[OpId::Cat] = {{"cat",
                   {random_leaf({2, 3}), random_leaf({4, 3})},
                   [](std::span<const Tensor> in) {
                     return cat({in[0], in[1]}, 0);
                   }},
                  {"stack", {random_leaf({2, 3}), random_leaf({2, 3})}, [](std::span<const Tensor> in) {
                     return stack({in[0], in[1].t().t()}, 1);
                   }}};
  c[OpId::Pad] = {{"pad",
                   {random_leaf({3, 4})},
                   [](std::span<const Tensor> in) {
                     return pad(in[0], {1, 2, 0, 1}, 0.5);
                   }},
                  {"pad/crop", {random_leaf({3, 4})}, [](std::span<const Tensor> in) {
                     return pad(in[0], {-1, 1});
                   }}};
  c[OpId::Cumsum] = {
      {"cumsum", {random_leaf({3, 4})}, [](std::span<const Tensor> in) { return cumsum(in[0], 1); }},
      {"cumsum_dim0_of_view", {random_leaf({4, 3})}, [](std::span<const Tensor> in) { return cumsum(in[0].t(), 0); }},
      {"sort_values",
       {random_leaf({3, 5})},
       [](std::span<const Tensor> in) { return cumsum(std::get<0>(sort(in[0], 1, true)), 1); }},
      {"topk_values", {random_leaf({4, 6})}, [](std::span<const Tensor> in) {
         return std::get<0>(topk(in[0], 3, 0)) * 2;
       }}};
  c[OpId::Gather] = {{"gather", {random_leaf({3, 4})}, [](std::span<const Tensor> in) {
                        return gather(in[0], 1, from_vector<int64_t>({0, 3, 3, 1, 2, 0}, {3, 2}));
                      }}};
  c[OpId::IndexSelect] = {{"index_select",
                           {random_leaf({4, 3})},
                           [](std::span<const Tensor> in) {
                             return index_select(in[0], 0, from_vector<int64_t>({3, 0, 3}));
                           }},
                          {"embedding",
                           {random_leaf({5, 2})},
                           [](std::span<const Tensor> in) {
                             return embedding(from_vector<int64_t>({1, 4, 1, 0}, {2, 2}), in[0]);
                           }},
                          {"embedding/repeats", {random_leaf({6, 4})}, [](std::span<const Tensor> in) {
                             return embedding(from_vector<int64_t>({5, 1, 5, 5, 0, 1, 2, 5, 1}, {3, 3}), in[0]);
                           }}};
  c[OpId::ScatterAdd] = {
      {"scatter_add",
       {random_leaf({3, 4}), random_leaf({2, 4})},
       [](std::span<const Tensor> in) {
         return scatter_add(in[0], 0, from_vector<int64_t>({0, 2, 2, 1, 0, 0, 1, 1}, {2, 4}), in[1]);
       }},
      {"scatter_add/dim1_views", {random_leaf({4, 3}), random_leaf({5, 2})}, [](std::span<const Tensor> in) {
         Tensor idx = from_vector<int64_t>({3, -1, 0, 3, 3}, {1, 5}).expand({2, 5});
         return scatter_add(in[0].t(), 1, idx, in[1].t());
       }}};
  c[OpId::IndexAdd] = {
      {"index_add",
       {random_leaf({4, 3}), random_leaf({5, 3})},
       [](std::span<const Tensor> in) {
         return index_add(in[0], 0, from_vector<int64_t>({3, 0, -1, 3, 1}), in[1]);
       }},
      {"index_add/last_dim_views", {random_leaf({3, 4}), random_leaf({6, 4})}, [](std::span<const Tensor> in) {
         return index_add(in[0].t(), 1, from_vector<int32_t>({2, 2, 0, 1, 2, 0}), in[1].t());
       }}};
  // The matmul-epilogue pass's ops: bias [n], a [m,k], b [k,n], b a transposed view.
  for (OpId id : {OpId::Addmm, OpId::AddmmRelu, OpId::AddmmGeluTanh})
    c[id] = {{std::string(op_name(id)) + "/2d",
              {random_leaf({3}), random_leaf({4, 5}), random_leaf({3, 5})},
              [id](std::span<const Tensor> in) {
                return apply(id, {in[0], in[1], in[2].t()});
              }}};
  c[OpId::Matmul] = {
      {"matmul/2d",
       {random_leaf({3, 4}), random_leaf({4, 2})},
       [](std::span<const Tensor> in) { return matmul(in[0], in[1]); }},
      {"matmul/batched_broadcast",
       {random_leaf({2, 1, 3, 4}), random_leaf({3, 4, 2})},
       [](std::span<const Tensor> in) { return matmul(in[0], in[1]); }},
      {"matmul/vectors",
       {random_leaf({4}), random_leaf({4, 3}), random_leaf({3})},
       [](std::span<const Tensor> in) { return matmul(matmul(in[0], in[1]), in[2]); }},
      {"matmul/transposed",
       {random_leaf({4, 3}), random_leaf({2, 4})},
       [](std::span<const Tensor> in) { return matmul(in[0].t(), in[1].t()); }},
      // One weight for a whole batch: its gradient is one product over the folded batch.
      {"matmul/batch_against_weight",
       {random_leaf({2, 3, 4, 5}), random_leaf({5, 3})},
       [](std::span<const Tensor> in) { return matmul(in[0].transpose(0, 1), in[1]); }},
      {"matmul/batch_against_vector",
       {random_leaf({2, 3, 4}), random_leaf({4})},
       [](std::span<const Tensor> in) { return matmul(in[0], in[1]); }},
  };
  // attention: q, k, v and a float mask, each differentiated; causal with a transposed q.
  auto attention_attrs = [](double scale, bool causal) {
    Attrs a;
    a.scale = scale, a.causal = causal;
    return a;
  };
  c[OpId::Attention] = {
      {"attention/float_mask",
       {random_leaf({2, 3, 4}), random_leaf({2, 5, 4}), random_leaf({2, 5, 3}), random_leaf({3, 5})},
       [=](std::span<const Tensor> in) {
         return apply(OpId::Attention, {in[0], in[1], in[2], in[3]}, attention_attrs(0.5, false));
       }},
      {"attention/causal_views",
       {random_leaf({2, 4, 6}), random_leaf({2, 6, 4}), random_leaf({2, 6, 2})},
       [=](std::span<const Tensor> in) {
         return apply(OpId::Attention, {in[0].transpose(1, 2), in[1], in[2]}, attention_attrs(0.8, true));
       }}};
  // rnn: an LSTM of 2 bidirectional layers from given states, a GRU from zeros with x a view.
  auto rnn_attrs = [](bool lstm, int64_t h, int64_t layers, bool bidirectional) {
    Attrs a;
    a.lstm = lstm, a.hidden_size = h, a.num_layers = layers, a.bidirectional = bidirectional;
    return a;
  };
  {
    std::vector<Tensor> lstm{random_leaf({3, 2, 3}), random_leaf({4, 2, 2}), random_leaf({4, 2, 2})};
    for (int64_t l = 0; l < 2; ++l)
      for (int d = 0; d < 2; ++d)
        for (Dims s : {Dims{8, l == 0 ? 3 : 4}, Dims{8, 2}, Dims{8}, Dims{8}})
          lstm.push_back(random_leaf(s, -0.7, 0.7));
    std::vector<Tensor> gru{random_leaf({2, 3, 2}), random_leaf({9, 2}, -0.7, 0.7), random_leaf({9, 3}, -0.7, 0.7)};
    c[OpId::Rnn] = {{"rnn/lstm_2_layers_bidirectional", lstm,
                     [=](std::span<const Tensor> in) { return apply(OpId::Rnn, in, rnn_attrs(true, 2, 2, true)); }},
                    {"rnn/gru_from_zeros_x_a_view", gru, [=](std::span<const Tensor> in) {
                       return apply(OpId::Rnn, {in[0].transpose(0, 1), in[1], in[2]}, rnn_attrs(false, 3, 1, false));
                     }}};
  }
  c[OpId::Conv2d] = {
      {"conv2d/plain",
       {random_leaf({2, 3, 5, 5}), random_leaf({4, 3, 3, 3}), random_leaf({4})},
       [](std::span<const Tensor> in) { return conv2d(in[0], in[1], in[2]); }},
      {"conv2d/stride_pad_dilation_groups",
       {random_leaf({1, 4, 7, 6}), random_leaf({6, 2, 3, 2})},
       [](std::span<const Tensor> in) {
         return conv2d(in[0], in[1], {}, {2, 1}, {1, 2}, {2, 1}, 2);
       }},
      {"conv2d/depthwise",
       {random_leaf({2, 3, 5, 6}), random_leaf({6, 1, 3, 3})},
       [](std::span<const Tensor> in) {
         return conv2d(in[0], in[1], {}, {2, 1}, {1, 1}, {1, 1}, 3);
       }},
      {"conv2d/1x1_batch_of_partial_blocks",
       {random_leaf({5, 4, 3, 3}), random_leaf({2, 4, 1, 1})},
       [](std::span<const Tensor> in) { return conv2d(in[0], in[1]); }},
  };
  // conv2d's gradient ops, each differentiated in both operands (their vjps are conv2d and
  // each other).
  auto conv_attrs = [](const Dims& shape) {
    Attrs a;
    a.stride = {2, 1}, a.padding = {1, 0}, a.dilation = {1, 2}, a.groups = 2, a.shape = shape;
    return a;
  };
  c[OpId::Conv2dInputGrad] = {{"conv2d_input_grad",
                               {random_leaf({2, 4, 3, 3}), random_leaf({4, 1, 2, 2})},
                               [conv_attrs](std::span<const Tensor> in) {
                                 return apply(OpId::Conv2dInputGrad, {in[0], in[1]}, conv_attrs({2, 2, 5, 5}));
                               }}};
  c[OpId::Conv2dWeightGrad] = {{"conv2d_weight_grad",
                                {random_leaf({2, 2, 5, 5}), random_leaf({2, 4, 3, 3})},
                                [conv_attrs](std::span<const Tensor> in) {
                                  return apply(OpId::Conv2dWeightGrad, {in[0], in[1]}, conv_attrs({4, 1, 2, 2}));
                                }}};
  c[OpId::MaxPool2d] = {
      {"max_pool2d",
       {random_leaf({2, 2, 5, 6})},
       [](std::span<const Tensor> in) {
         return max_pool2d(in[0], {2, 3}, {2, 2}, {1, 1});
       }},
      {"max_pool2d/ceil",
       {random_leaf({1, 2, 5, 5})},
       [](std::span<const Tensor> in) {
         return max_pool2d(in[0], {2, 2}, {2, 2}, {0, 0}, true);
       }},
      {"max_pool2d/overlapping_3d_view",
       {random_leaf({7, 6, 2})},
       [](std::span<const Tensor> in) {
         return max_pool2d(in[0].permute({2, 1, 0}), {3, 3}, {1, 2}, {1, 0}, true);
       }},
  };
  c[OpId::AvgPool2d] = {
      {"avg_pool2d/include_pad",
       {random_leaf({2, 2, 5, 6})},
       [](std::span<const Tensor> in) {
         return avg_pool2d(in[0], {3, 2}, {2, 1}, {1, 1}, true);
       }},
      {"avg_pool2d/exclude_pad",
       {random_leaf({1, 2, 5, 5})},
       [](std::span<const Tensor> in) {
         return avg_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}, false);
       }},
      {"avg_pool2d/3d_view",
       {random_leaf({6, 5, 2})},
       [](std::span<const Tensor> in) {
         return avg_pool2d(in[0].permute({2, 0, 1}), {2, 3}, {1, 2}, {1, 1});
       }},
  };
  // The ops the pools' derivatives run, called directly.
  auto pool_attrs = [](Dims kernel, Dims stride, Dims padding, bool flag, Dims in_shape = {}) {
    Attrs a;
    a.kernel = kernel, a.stride = stride, a.padding = padding;
    a.ceil_mode = flag, a.count_include_pad = flag, a.shape = in_shape;
    return a;
  };
  Attrs mp = pool_attrs({2, 3}, {1, 2}, {1, 1}, true);
  c[OpId::MaxPool2dBackward] = {
      {"max_pool2d_backward",
       {rand({2, 2, 5, 6}, f64), random_leaf({2, 2, 6, 4})},
       [mp](std::span<const Tensor> in) {
         return apply(OpId::MaxPool2dBackward, {in[0], in[1]}, mp);
       }},
      {"max_pool2d_backward/x_gets_none",
       {random_leaf({3, 4, 4}), random_leaf({3, 5, 3})},
       [mp](std::span<const Tensor> in) {
         return apply(OpId::MaxPool2dBackward, {in[0], in[1]}, mp);
       }},
  };
  Attrs ap = pool_attrs({3, 2}, {2, 1}, {1, 1}, false, {2, 2, 5, 6});
  c[OpId::AvgPool2dBackward] = {
      {"avg_pool2d_backward",
       {random_leaf({2, 2, 3, 7})},
       [ap](std::span<const Tensor> in) { return apply(OpId::AvgPool2dBackward, {in[0]}, ap); }},
  };
  // A group of this process alone: the sum's gradient is the gradient; max's and min's too
  // (this rank holds every extremum).
  for (Combine r : {Combine::Sum, Combine::Max})
    c[OpId::AllReduce].push_back(
        {std::string("all_reduce/") + std::string(combine_name(r)),
         {random_leaf({3, 4})},
         [r](std::span<const Tensor> in) { return all_reduce_op(in[0].t(), test::solo_group().id(), r); }});
  // A registered op: its derivative, written with kiln ops (tests/ops/op_specs_registered.h).
  c[OpId::Registered] = {{"registered/mul_add",
                          {random_leaf({3, 4}), random_leaf({3, 4})},
                          [](std::span<const Tensor> in) { return test::mul_add_op()(in[0], in[1], 3); }}};
  return c;
}

const std::map<OpId, std::vector<Case>>& cases() {
  static const auto c = [] {
    manual_seed(1234);
    return all_cases();
  }();
  return c;
}

std::vector<OpId> every_op() {
  std::vector<OpId> ids;
  for (int i = 0; i < kNumOps; ++i) ids.push_back(static_cast<OpId>(i));
  return ids;
}

class OpGradient : public ::testing::TestWithParam<OpId> {};

TEST_P(OpGradient, MatchesFiniteDifferencesOrIsDeclaredNonDifferentiable) {
  OpId id = GetParam();
  const OpDef& def = op_def(id);
  if (!def.differentiable) {
    EXPECT_EQ(def.vjp, nullptr) << op_name(id) << " says it is not differentiable but has a vjp";
    GTEST_SKIP() << op_name(id) << " is declared not differentiable (no gradient flows through it)";
  }
  ASSERT_NE(def.vjp, nullptr) << op_name(id) << " has neither a vjp nor differentiable = false";
  auto it = cases().find(id);
  ASSERT_NE(it, cases().end()) << op_name(id) << " has a vjp but no gradcheck case here: add one";
  for (const Case& c : it->second) {
    std::string err = autograd::gradcheck(c.fn, c.inputs, c.options);
    EXPECT_EQ(err, "") << c.name;
  }
}

TEST_P(OpGradient, SecondDerivativeOfDifferentiableOpsRuns) {
  // Rules are written with Tensor ops, so backward itself is differentiable: check d/dx of
  // sum(grad) against finite differences of the first derivative for the first case.
  OpId id = GetParam();
  if (!op_def(id).differentiable) GTEST_SKIP() << op_name(id) << " is declared not differentiable";
  auto it = cases().find(id);
  ASSERT_NE(it, cases().end());
  const Case& c = it->second.front();
  Fn first = [&c](std::span<const Tensor> in) {
    Tensor y = c.fn(in);
    std::vector<Tensor> req;
    for (const Tensor& t : in)
      if (t.requires_grad()) req.push_back(t);
    Tensor seed = ones_like(y);
    auto g = autograd::grad(std::span<const Tensor>(&y, 1), req, std::span<const Tensor>(&seed, 1), true, true, true);
    Tensor total = zeros({}, f64);
    for (const Tensor& gi : g)
      if (gi.defined()) total = total + sum(gi * gi);
    // A linear op's gradient does not depend on its input: keep the result connected so
    // the (zero) second derivative is still computed and compared.
    for (const Tensor& t : req) total = total + sum(t) * 0.0;
    return total;
  };
  // Ops whose first derivative is piecewise constant have an identically zero second one;
  // gradcheck then compares zeros, which still exercises create_graph.
  autograd::GradcheckOptions opt = c.options;
  opt.eps = std::max(opt.eps, 1e-5);
  opt.atol = std::max(opt.atol, 1e-4);
  std::string err = autograd::gradcheck(first, c.inputs, opt);
  EXPECT_EQ(err, "") << c.name;
}

INSTANTIATE_TEST_SUITE_P(EveryOp, OpGradient, ::testing::ValuesIn(every_op()),
                         [](const auto& info) { return std::string(op_name(info.param)); });

}  // namespace
