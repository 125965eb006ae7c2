// tests/jit/random_steps.cpp -- the ops random programs are made of: pointwise with tensors
// and numbers, reductions, views, matmul, cat, softmax, layer_norm and casts.
#include <fmt/format.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <optional>

#include "random_generator.h"
#include "random_ops.h"

namespace kiln::test {

void Generator::step() {
  size_t i = input();
  Tensor x = vals_[i];
  int k = uniform(0, 99);
  if (x.numel() > kMaxNumel / 3 && coin(0.5)) return reduce_step(i, x);
  if (k < 18) {
    auto [name, f] = pick(unary_ops());
    add(fmt::format("{} %{}", name, i), [i, f = f](auto, auto& v) { return f(v[i]); });
  } else if (k < 34) {
    size_t j = operand(x);
    auto [name, f] = pick(binary_ops());
    if (coin(0.3)) std::swap(i, j);
    add(fmt::format("{} %{}, %{}", name, i, j), [i, j, f = f](auto, auto& v) { return f(v[i], v[j]); });
  } else if (k < 46) {
    auto [name, f] = pick(number_ops());
    double s = number();
    add(fmt::format("{} %{} s={}", name, i, s), [i, s, f = f](auto, auto& v) { return f(v[i], s); });
  } else if (k < 58) {
    reduce_step(i, x);
  } else if (k < 76) {
    view_step(i, x);
  } else {
    shape_step(i, x, uniform(0, 5));
  }
}

void Generator::reduce_step(size_t i, const Tensor& x) {
  int64_t r = x.dim();
  Dims axes = random_axes(r);
  bool keep = coin(0.5);
  int64_t d = r == 0 ? 0 : uniform(static_cast<int>(-r), static_cast<int>(r - 1));
  int kind = uniform(0, r == 0 ? 4 : 9);
  std::string what = fmt::format("%{} axes={} keepdim={}", i, shape_str(axes), keep);
  switch (kind) {
    case 0: add("sum " + what, [=](auto, auto& v) { return sum(v[i], axes, keep); }); break;
    case 1: add("mean " + what, [=](auto, auto& v) { return mean(v[i], axes, keep); }); break;
    case 2: add("amax " + what, [=](auto, auto& v) { return amax(v[i], axes, keep); }); break;
    case 3: add("amin " + what, [=](auto, auto& v) { return amin(v[i], axes, keep); }); break;
    case 4: add("prod " + what, [=](auto, auto& v) { return prod(v[i], axes, keep); }); break;
    case 5: {
      int64_t c = uniform(0, 1);
      add(fmt::format("var c={} {}", c, what), [=](auto, auto& v) { return var(v[i], axes, c, keep); });
      break;
    }
    case 6: add("std " + what, [=](auto, auto& v) { return kiln::std(v[i], axes, 0, keep); }); break;
    case 7: add("logsumexp " + what, [=](auto, auto& v) { return logsumexp(v[i], axes, keep); }); break;
    case 8:
      add(fmt::format("argmax %{} dim={} keepdim={}", i, d, keep),
          [=](auto, auto& v) { return argmax(v[i], d, keep).to(v[i].dtype()); });
      break;
    default:
      add(fmt::format("max+min %{} dim={} keepdim={}", i, d, keep),
          [=](auto, auto& v) { return max(v[i], d, keep) + min(v[i], d, keep); });
  }
}

void Generator::view_step(size_t i, const Tensor& x) {
  int64_t r = x.dim();
  auto dim = [&](int64_t rank) { return static_cast<int64_t>(uniform(0, static_cast<int>(rank) - 1)); };
  int kind = uniform(0, 9);
  if (r == 0 && kind != 0 && kind != 6) kind = 6;
  if (r == 1 && (kind == 1 || kind == 2)) kind = 3;
  auto view = [&](const std::string& what, std::function<Tensor(const Tensor&)> f) {
    add(fmt::format("{} %{}", what, i), [i, f](auto, auto& v) { return f(v[i]); });
  };
  Dims s = x.shape();
  if (kind == 0) {
    Dims to{-1};
    int64_t n = x.numel(), a = uniform(1, 4);
    if (n % a == 0 && coin(0.5)) to = {a, n / a};
    else if (coin(0.5)) (to = s).insert(static_cast<size_t>(uniform(0, static_cast<int>(r))), 1);
    view(fmt::format("reshape {}", shape_str(to)), [to](const Tensor& t) { return t.reshape(to); });
  } else if (kind == 1) {
    Dims order;
    for (int64_t d = 0; d < r; ++d) order.push_back(d);
    std::shuffle(order.begin(), order.end(), rng_);
    view(fmt::format("permute {}", shape_str(order)), [order](const Tensor& t) { return t.permute(order); });
  } else if (kind == 2) {
    int64_t a = dim(r), b = dim(r) - (coin(0.5) ? r : 0);
    view(fmt::format("transpose {} {}", a, b), [a, b](const Tensor& t) { return t.transpose(a, b); });
  } else if (kind == 3) {
    int64_t d = dim(r), n = s[d];
    int64_t start = uniform(0, static_cast<int>(n) - 1),
            stop = uniform(static_cast<int>(start) + 1, static_cast<int>(n));
    int64_t step = uniform(1, 2);
    view(fmt::format("slice d={} {}:{}:{}", d, start, stop, step),
         [=](const Tensor& t) { return t.slice(d, start, stop, step); });
  } else if (kind == 4) {
    Dims to = s;
    for (int64_t& e : to)
      if (e == 1 && x.numel() * 3 <= kMaxNumel) e = uniform(2, 3);
    if (to == s) to.insert(0, 2), s.insert(0, 1);
    Dims from = s;
    view(fmt::format("expand {}", shape_str(to)), [from, to](const Tensor& t) { return t.reshape(from).expand(to); });
  } else if (kind == 5) {
    view("squeeze", [](const Tensor& t) { return t.squeeze(); });
  } else if (kind == 6) {
    int64_t d = uniform(0, static_cast<int>(r));
    view(fmt::format("unsqueeze {}", d), [d](const Tensor& t) { return t.unsqueeze(d); });
  } else if (kind == 7) {
    int64_t a = dim(r), b = uniform(static_cast<int>(a), static_cast<int>(r) - 1);
    view(fmt::format("flatten {} {}", a, b), [a, b](const Tensor& t) { return t.flatten(a, b); });
  } else if (kind == 8) {
    int64_t d = dim(r), idx = uniform(0, static_cast<int>(s[d]) - 1);
    view(fmt::format("select {} {}", d, idx), [d, idx](const Tensor& t) { return t.select(d, idx); });
  } else {
    view("transpose(0,-1).contiguous", [](const Tensor& t) { return t.transpose(0, -1).contiguous(); });
  }
}

void Generator::shape_step(size_t i, const Tensor& x, int kind) {
  int64_t r = x.dim();
  if (r == 0) return view_step(i, x);
  DType dt = x.dtype();
  auto same_type = [&](const Dims& s) { return coin(0.5) ? new_arg(s, dt) : captured(s, dt); };
  if (kind == 0) {  // matmul
    int64_t k = x.shape()[r - 1], n = uniform(1, 4);
    if (r >= 2 && coin(0.3)) {
      add(fmt::format("matmul %{}, %{}^T", i, i), [i](auto, auto& v) { return matmul(v[i], v[i].transpose(-1, -2)); });
      return;
    }
    Dims s;
    for (int64_t d = 0; d + 2 < r; ++d) s.push_back(coin(0.3) ? 1 : x.shape()[d]);
    s.push_back(k);
    if (r >= 2 || coin(0.6)) s.push_back(n);
    size_t j = same_type(s);
    add(fmt::format("matmul %{}, %{}", i, j), [i, j](auto, auto& v) { return matmul(v[i], v[j]); });
  } else if (kind == 1) {  // cat
    int64_t d = uniform(0, static_cast<int>(r) - 1);
    Dims s = x.shape();
    s[d] = uniform(1, 3);
    size_t j = coin(0.3) ? i : same_type(s);
    int64_t at = coin(0.5) ? d : d - r;
    add(fmt::format("cat %{}, %{} dim={}", i, j, at), [=](auto, auto& v) { return cat({v[i], v[j]}, at); });
  } else if (kind <= 3) {  // softmax, log_softmax
    int64_t d = uniform(static_cast<int>(-r), static_cast<int>(r) - 1);
    bool lg = kind == 3;
    add(fmt::format("{} %{} dim={}", lg ? "log_softmax" : "softmax", i, d),
        [=](auto, auto& v) { return lg ? log_softmax(v[i], d) : softmax(v[i], d); });
  } else if (kind == 4) {  // layer_norm
    int64_t kk = uniform(1, static_cast<int>(std::min<int64_t>(r, 2)));
    Dims ns;
    for (int64_t d = r - kk; d < r; ++d) ns.push_back(x.shape()[d]);
    std::optional<size_t> w, b;
    if (coin(0.6)) w = same_type(ns);
    if (coin(0.6)) b = same_type(ns);
    double eps = coin(0.5) ? 1e-5 : 1e-2;
    add(fmt::format("layer_norm %{} {} w={} b={}", i, shape_str(ns), w ? int(*w) : -1, b ? int(*b) : -1),
        [=](auto, auto& v) { return layer_norm(v[i], ns, w ? v[*w] : Tensor(), b ? v[*b] : Tensor(), eps); });
  } else {  // cast
    DType to = dt == DType::F32 ? DType::F64 : DType::F32;
    add(fmt::format("cast %{} {}", i, dtype_name(to)), [i, to](auto, auto& v) { return v[i].to(to); });
  }
}

}  // namespace kiln::test
