// examples/custom_ops.cpp -- your own ops, in one program:
//   - a rotary position embedding registered as an op (mylib::rotary), with a CPU kernel, a CUDA
//     kernel of its own (cuda::Kernel) and its derivative written with kiln ops;
//   - a straight-through estimator as a custom autograd function (fake quantization whose
//     gradient passes where the input was in range);
//   - both inside the example GPT's traced whole training step; its forward saved, then served
//     by another program that registers the op (and refused by one that does not).
//
//   custom_ops [--device cpu|cuda:K] [--steps N] [--save FILE]   check the ops, train, save
//   custom_ops serve FILE [--without-rotary]                     load FILE and run it
//
// Both modes print a line "logits checksum X" for the same tokens, so a script can compare
// the trained program's forward with the served file's.
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "examples/models/gpt_task.h"

using namespace kiln;
using autograd::AutogradContext;
using autograd::tensor_list;

namespace {

// ---- mylib::rotary: x [..., T, D] rotated pairwise by angles whose cosines and sines are
// tables [T, D/2]. Pairs are (d, d + D/2) (GPT-NeoX's layout), or (2i, 2i + 1) when
// interleaved (the original RoFormer's): out1 = x1 cos - x2 sin, out2 = x2 cos + x1 sin.

const RegisteredOp* g_rotary = nullptr;

Tensor rotary(const Tensor& x, const Tensor& cos_t, const Tensor& sin_t, bool interleaved = false) {
  return (*g_rotary)(x, cos_t, sin_t, interleaved);
}

// The two halves of each pair, as views of x.
std::pair<Tensor, Tensor> halves(const Tensor& x, bool interleaved) {
  int64_t d = x.shape().back();
  if (interleaved) return {x.slice(-1, 0, d, 2), x.slice(-1, 1, d, 2)};
  return {x.slice(-1, 0, d / 2), x.slice(-1, d / 2, d)};
}

// The rule: what the op gives, and every mistake a caller can make, said with the types.
TensorType rotary_rule(const OpCall& c) {
  const Tensor &x = c.input(0), &cs = c.input(1), &sn = c.input(2);
  auto fail = [&](const std::string& what) {
    throw Error(what + " (got x " + x.type().str() + ", cos " + cs.type().str() + ", sin " + sn.type().str() + ")");
  };
  if (x.dtype() != DType::F32 && x.dtype() != DType::F64) fail("expected f32 or f64");
  if (cs.dtype() != x.dtype() || sn.dtype() != x.dtype()) fail("expected cos and sin of x's dtype");
  if (x.dim() < 2 || x.shape().back() % 2 != 0) fail("expected x [..., T, D] with D even");
  Dims table{x.shape()[x.dim() - 2], x.shape().back() / 2};
  if (cs.shape() != table || sn.shape() != table) fail("expected cos and sin of shape [T, D/2]");
  return {x.dtype(), x.shape()};
}

template <class T> void rotary_loop(const Tensor& x, const Tensor& cs, const Tensor& sn, bool interleaved, Tensor& y) {
  const T* px = static_cast<const T*>(x.data_ptr());
  const T* pc = static_cast<const T*>(cs.data_ptr());
  const T* ps = static_cast<const T*>(sn.data_ptr());
  T* py = static_cast<T*>(y.data_ptr());
  int64_t d = x.shape().back(), half = d / 2, t = x.shape()[x.dim() - 2];
  for (int64_t row = 0; row < x.numel() / d; ++row) {
    const T* angles_c = pc + (row % t) * half;
    const T* angles_s = ps + (row % t) * half;
    for (int64_t p = 0; p < half; ++p) {
      int64_t i1 = interleaved ? 2 * p : p, i2 = interleaved ? 2 * p + 1 : p + half;
      T a = px[row * d + i1], b = px[row * d + i2];
      py[row * d + i1] = a * angles_c[p] - b * angles_s[p];
      py[row * d + i2] = b * angles_c[p] + a * angles_s[p];
    }
  }
}

Tensor rotary_cpu(const OpCall& c) {
  Tensor x = c.input(0).contiguous(), cs = c.input(1).contiguous(), sn = c.input(2).contiguous();
  Tensor y = empty(x.shape(), x.dtype());
  if (x.dtype() == DType::F32) rotary_loop<float>(x, cs, sn, c.get<bool>("interleaved"), y);
  else rotary_loop<double>(x, cs, sn, c.get<bool>("interleaved"), y);
  return y;
}

// One thread per element of y: it reads its own element and its pair's.
const char* kRotaryBody = R"(
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= y_dims.numel) return;
  long long d = y_dims.size[y_dims.ndim - 1], half = d / 2;
  long long k = i % d, t = (i / d) % y_dims.size[y_dims.ndim - 2];
  bool first = INTERLEAVED ? k % 2 == 0 : k < half;
  long long pair = INTERLEAVED ? k / 2 : (first ? k : k - half);
  long long other = INTERLEAVED ? (k ^ 1) : (first ? k + half : k - half);
  T c = cosines[t * half + pair], s = sines[t * half + pair];
  T a = x[i], b = x[i - k + other];
  y[i] = first ? a * c - b * s : a * c + b * s;
)";

Tensor rotary_cuda(const OpCall& c, const cuda::Stream&) {
  static const cuda::Kernel kernel("rotary", {"x", "cosines", "sines"}, {"y"}, kRotaryBody);
  const Tensor& x = c.input(0);
  cuda::KernelCall call;
  call.output_shapes = {x.shape()};
  call.output_dtypes = {x.dtype()};
  call.template_args = {{"T", x.dtype()}, {"INTERLEAVED", c.get<bool>("interleaved")}};
  return kernel({x, c.input(1), c.input(2)}, call)[0];  // on kiln's current stream
}

// The derivative: x's gradient is the gradient rotated back (the op itself, with -sin); the
// tables' are sums over the leading dims.
tensor_list rotary_derivative(const OpCall& c, const Tensor&, const Tensor& grad) {
  const Tensor &x = c.input(0), &cs = c.input(1), &sn = c.input(2);
  bool interleaved = c.get<bool>("interleaved");
  tensor_list g(3);
  if (c.needs_input_grad(0)) g[0] = rotary(grad, cs, -sn, interleaved);
  auto [x1, x2] = halves(x, interleaved);
  auto [g1, g2] = halves(grad, interleaved);
  auto to_table = [&](const Tensor& v) { return v.reshape({-1, cs.shape()[0], cs.shape()[1]}).sum({0}); };
  if (c.needs_input_grad(1)) g[1] = to_table(g1 * x1 + g2 * x2);
  if (c.needs_input_grad(2)) g[2] = to_table(g2 * x1 - g1 * x2);
  return g;
}

void register_rotary() {
  g_rotary = &register_op("mylib::rotary(Tensor x, Tensor cos, Tensor sin, bool interleaved=False) -> Tensor")
                  .rule(rotary_rule)
                  .cpu(rotary_cpu)
                  .cuda(rotary_cuda)
                  .derivative(rotary_derivative);
}

// The same with kiln's own ops, to check the kernels against.
Tensor rotary_reference(const Tensor& x, const Tensor& cs, const Tensor& sn, bool interleaved) {
  auto [x1, x2] = halves(x, interleaved);
  Tensor o1 = x1 * cs - x2 * sn, o2 = x2 * cs + x1 * sn;
  return interleaved ? stack({o1, o2}, -1).reshape(x.shape()) : cat({o1, o2}, -1);
}

// The tables for positions 0..t-1 of heads of size d (base 10000, as LLaMA's).
std::pair<Tensor, Tensor> rotary_tables(int64_t t, int64_t d, DType dtype, Device device) {
  Tensor inv_freq = exp(arange(d / 2).to(f64) * (-2.0 * std::log(10000.0) / double(d)));
  Tensor angles = (arange(t).to(f64).unsqueeze(1) * inv_freq.unsqueeze(0)).to(dtype).to(device);
  return {cos(angles), sin(angles)};
}

// ---- The straight-through estimator: values rounded to steps of 1/scale within [-clip, clip];
// its gradient passes where the input was inside the range, and is zero outside (round's own
// derivative would be zero everywhere).
struct FakeQuantize : autograd::Function<FakeQuantize> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, double scale, double clip) {
    ctx->save_for_backward({x});
    ctx->saved_data["clip"] = clip;
    return round(clamp(x, -clip, clip) * scale) / scale;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    Tensor x = ctx->get_saved_variables()[0];
    Tensor inside = (abs(x) <= ctx->saved_data["clip"].to_double()).to(g[0].dtype());
    return {g[0] * inside, Tensor(), Tensor()};
  }
};

void check(bool ok, const std::string& what) {
  if (!ok) throw Error("custom_ops: " + what);
}

// The kernels against the reference, and the derivative by finite differences, on `device`.
void check_rotary(Device device) {
  manual_seed(1);
  for (bool interleaved : {false, true}) {
    Tensor x = randn({2, 3, 5, 8}, f64).to(device);
    auto [cs, sn] = rotary_tables(5, 8, f64, device);
    double err = max(abs(rotary(x, cs, sn, interleaved) - rotary_reference(x, cs, sn, interleaved))).item<double>();
    check(err < 1e-12, "rotary differs from its reference by " + std::to_string(err));
    std::vector<Tensor> leaves = {x.requires_grad_(), cs.requires_grad_(), sn.requires_grad_()};
    std::string bad = autograd::gradcheck(
        [&](std::span<const Tensor> in) { return rotary(in[0], in[1], in[2], interleaved); }, leaves);
    check(bad.empty(), "rotary's derivative: " + bad);
    std::printf("rotary on %s (interleaved=%d): kernel = reference (max error %.1e), gradients checked\n",
                device.str().c_str(), interleaved, err);
  }
}

void check_fake_quantize() {
  Tensor x = from_vector<float>({-3.f, -0.9f, 0.13f, 0.5f, 2.f}).requires_grad_();
  Tensor y = FakeQuantize::apply(x, 4.0, 1.0);
  sum(y).backward();
  std::vector<float> want = {-1.f, -1.f, 0.25f, 0.5f, 1.f}, grad = {0, 1, 1, 1, 0};
  check(y.detach().to_vector<float>() == want && x.grad().to_vector<float>() == grad,
        "FakeQuantize gives the wrong values or gradient");
  std::printf("FakeQuantize: values on a 1/4 grid within [-1, 1], gradient passed only inside\n");
}

examples::GPTConfig gpt_config() {
  examples::GPTConfig c{.vocab = 256, .context = 16, .embed = 32, .heads = 4, .layers = 2, .dropout = 0};
  int64_t head_size = c.embed / c.heads;
  c.rotate = [head_size](const Tensor& qk) {
    auto [cs, sn] = rotary_tables(qk.shape()[2], head_size, qk.dtype(), qk.device());
    return rotary(qk, cs, sn);
  };
  c.mlp_activation = [](const Tensor& a) { return FakeQuantize::apply(a, 16.0, 4.0); };
  return c;
}

// The tokens both modes score: two rows of counting bytes.
Tensor probe_tokens() { return (arange(32) * 7).reshape({2, 16}); }

void print_checksum(const Tensor& logits) {
  std::printf("logits checksum %.5f\n",
              sum(logits * cos(arange(logits.numel()).reshape(logits.shape()))).item<double>());
}

int train(Device device, int64_t steps, const std::string& path) {
  check_rotary(cpu);
  if (device.is_cuda()) check_rotary(device);
  check_fake_quantize();

  manual_seed(2);
  examples::GPTTask task(gpt_config(), 8);
  task.net.to(device);
  optim::AdamW opt(task.net.parameters(), 3e-3, {.weight_decay = 0.1});
  auto step = [&](std::span<const Tensor> batch) { return examples::train_step(task, opt, batch); };
  std::optional<jit::Function> traced;
  double first = 0, last = 0;
  for (int64_t i = 0; i < steps; ++i) {
    std::vector<Tensor> batch = examples::batch_on(task, i, device);
    if (!traced) traced = jit::trace_tensors(step, batch, "train_step");
    last = traced->call(batch)[0].item<double>();
    if (i == 0) first = last;
    if ((i + 1) % 10 == 0) std::printf("step %3lld  loss %.4f\n", static_cast<long long>(i + 1), last);
  }
  std::string text = ir::print(traced->graph());
  size_t rotaries = 0;
  for (size_t at = text.find("= mylib::rotary "); at != std::string::npos; at = text.find("= mylib::rotary ", at + 1))
    ++rotaries;
  std::printf("the traced step runs mylib::rotary %zu times (the forward's queries and keys, and the derivative's)\n",
              rotaries);
  check(last < first, "the loss did not fall: " + std::to_string(first) + " -> " + std::to_string(last));

  jit::SaveOptions options;
  options.dynamic(0, 0, "B");
  options.input_names = {"tokens"};
  std::vector<Tensor> example = examples::batch_on(task, 0, device);
  examples::save_forward(task, example, path, options);
  std::printf("saved the forward to %s (it names mylib::rotary and its schema, and holds no code)\n", path.c_str());
  task.net.eval();
  NoGradGuard no_grad;
  print_checksum(task.net(probe_tokens().to(device)).to(cpu));
  return 0;
}

int serve(const std::string& path, bool with_rotary) {
  if (with_rotary) register_rotary();
  try {
    jit::LoadedFunction forward = jit::load(path, cpu);  // served on the CPU, wherever it trained
    print_checksum(forward(probe_tokens()));
    return 0;
  } catch (const Error& e) {
    std::printf("refused: %s\n", e.what());
    return with_rotary ? 1 : 0;  // without the op, refusing is the right answer
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && args[0] == "serve") {
      check(args.size() >= 2, "usage: custom_ops serve FILE [--without-rotary]");
      return serve(args[1], !(args.size() > 2 && args[2] == "--without-rotary"));
    }
    std::string device = "cpu", path = "custom_ops.kiln";
    int64_t steps = 40;
    for (size_t i = 0; i < args.size(); ++i) {
      check(i + 1 < args.size(), "usage: custom_ops [--device cpu|cuda:K] [--steps N] [--save FILE]");
      if (args[i] == "--device") device = args[++i];
      else if (args[i] == "--steps") steps = std::stoll(args[++i]);
      else if (args[i] == "--save") path = args[++i];
      else check(false, "unknown argument " + args[i]);
    }
    register_rotary();
    return train(parse_device(device), steps, path);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
