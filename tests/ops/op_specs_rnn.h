// tests/ops/op_specs_rnn.h -- the Specs of rnn and rnn_backward (nn/recurrent_op.cpp): an LSTM
// or GRU stack written out in double from torch's equations, and its backward from the same
// code run on complex numbers: the imaginary part of f(x + i*eps) is eps times the directional
// derivative to machine precision (the complex step), so each input's gradient is exact
// without a derivative written by hand.
#pragma once

#include <complex>
#include <string>
#include <vector>

#include "tests/ops/op_specs_common.h"

namespace kiln::test {

struct RnnShape {
  std::string name;
  bool lstm = true;
  int64_t t = 3, n = 2, in = 3, h = 2, layers = 1;
  bool bidirectional = false, bias = true, states = true;
  bool transposed_x = false;  // x given as a view ([N, T, in] transposed)
  int64_t dirs() const { return bidirectional ? 2 : 1; }
  int64_t gates() const { return lstm ? 4 : 3; }
  size_t kinds() const { return lstm ? 2 : 1; }
};

inline std::vector<RnnShape> rnn_shapes() {
  return {
      {"lstm_2_layers_bidirectional", true, 3, 2, 3, 2, 2, true, true, true, false},
      {"gru_no_bias_no_states", false, 4, 3, 2, 3, 1, false, false, false, false},
      {"lstm_x_a_view_no_states", true, 2, 3, 4, 3, 1, false, true, false, true},
      {"gru_2_layers_bidirectional_one_step", false, 1, 2, 3, 2, 2, true, true, true, false},
  };
}

inline Attrs rnn_attrs(const RnnShape& g) {
  Attrs a;
  a.lstm = g.lstm;
  a.hidden_size = g.h;
  a.num_layers = g.layers;
  a.bidirectional = g.bidirectional;
  return a;
}

/// x, the states when given, then w_ih, w_hh (, b_ih, b_hh) per layer and direction.
inline std::vector<Tensor> rnn_inputs(const RnnShape& g, DType t) {
  std::vector<Tensor> in;
  in.push_back(g.transposed_x ? values({g.n, g.t, g.in}, t, -1, 1).transpose(0, 1)
                              : values({g.t, g.n, g.in}, t, -1, 1));
  if (g.states)
    for (size_t k = 0; k < g.kinds(); ++k) in.push_back(values({g.layers * g.dirs(), g.n, g.h}, t, -1, 1));
  for (int64_t l = 0; l < g.layers; ++l)
    for (int64_t d = 0; d < g.dirs(); ++d) {
      int64_t width = l == 0 ? g.in : g.dirs() * g.h;
      in.push_back(values({g.gates() * g.h, width}, t, -0.7, 0.7));
      in.push_back(values({g.gates() * g.h, g.h}, t, -0.7, 0.7));
      if (g.bias) {
        in.push_back(values({g.gates() * g.h}, t, -0.5, 0.5));
        in.push_back(values({g.gates() * g.h}, t, -0.5, 0.5));
      }
    }
  return in;
}

template <class S> S rnn_sigmoid(S z) { return S(1) / (S(1) + std::exp(-z)); }

/// rnn's packed result (y [T, N, D*H], h_n, c_n) from the inputs' values, in S (double or
/// complex<double>).
template <class S> std::vector<S> rnn_forward_values(const RnnShape& g, const std::vector<std::vector<S>>& in) {
  const int64_t T = g.t, N = g.n, H = g.h, D = g.dirs(), G = g.gates();
  size_t k = 1;
  const std::vector<S>* h0 = g.states ? &in[k++] : nullptr;
  const std::vector<S>* c0 = g.states && g.lstm ? &in[k++] : nullptr;
  std::vector<S> layer_in = in[0];  // [T, N, W]
  int64_t width = g.in;
  std::vector<S> hn(static_cast<size_t>(g.layers * D * N * H)), cn(hn.size());
  for (int64_t l = 0; l < g.layers; ++l) {
    std::vector<S> out(static_cast<size_t>(T * N * D * H));
    for (int64_t d = 0; d < D; ++d) {
      const std::vector<S>& w_ih = in[k++];
      const std::vector<S>& w_hh = in[k++];
      const std::vector<S>* b_ih = g.bias ? &in[k++] : nullptr;
      const std::vector<S>* b_hh = g.bias ? &in[k++] : nullptr;
      int64_t cell = l * D + d;
      for (int64_t n = 0; n < N; ++n) {
        std::vector<S> h(static_cast<size_t>(H)), c(static_cast<size_t>(H));
        for (int64_t j = 0; j < H; ++j) {
          size_t s = static_cast<size_t>((cell * N + n) * H + j);
          h[static_cast<size_t>(j)] = h0 ? (*h0)[s] : S(0);
          c[static_cast<size_t>(j)] = c0 ? (*c0)[s] : S(0);
        }
        for (int64_t step = 0; step < T; ++step) {
          int64_t t = d == 0 ? step : T - 1 - step;
          // xr = W_ih x_t + b_ih and hr = W_hh h + b_hh, per gate row
          std::vector<S> xr(static_cast<size_t>(G * H)), hr(xr.size());
          for (int64_t r = 0; r < G * H; ++r) {
            S a = b_ih ? (*b_ih)[static_cast<size_t>(r)] : S(0), b = b_hh ? (*b_hh)[static_cast<size_t>(r)] : S(0);
            for (int64_t i = 0; i < width; ++i)
              a += w_ih[static_cast<size_t>(r * width + i)] * layer_in[static_cast<size_t>((t * N + n) * width + i)];
            for (int64_t i = 0; i < H; ++i) b += w_hh[static_cast<size_t>(r * H + i)] * h[static_cast<size_t>(i)];
            xr[static_cast<size_t>(r)] = a, hr[static_cast<size_t>(r)] = b;
          }
          std::vector<S> h2(h.size());
          for (int64_t j = 0; j < H; ++j) {
            auto gate = [&](int64_t q, const std::vector<S>& v) { return v[static_cast<size_t>(q * H + j)]; };
            size_t u = static_cast<size_t>(j);
            if (g.lstm) {  // i, f, g, o
              S i = rnn_sigmoid(gate(0, xr) + gate(0, hr)), f = rnn_sigmoid(gate(1, xr) + gate(1, hr));
              S gg = std::tanh(gate(2, xr) + gate(2, hr)), o = rnn_sigmoid(gate(3, xr) + gate(3, hr));
              c[u] = f * c[u] + i * gg;
              h2[u] = o * std::tanh(c[u]);
            } else {  // r, z, n: b_hh's n part inside r's product
              S r = rnn_sigmoid(gate(0, xr) + gate(0, hr)), z = rnn_sigmoid(gate(1, xr) + gate(1, hr));
              S nn = std::tanh(gate(2, xr) + r * gate(2, hr));
              h2[u] = (S(1) - z) * nn + z * h[u];
            }
          }
          h = h2;
          for (int64_t j = 0; j < H; ++j)
            out[static_cast<size_t>((t * N + n) * D * H + d * H + j)] = h[static_cast<size_t>(j)];
        }
        for (int64_t j = 0; j < H; ++j) {
          size_t s = static_cast<size_t>((cell * N + n) * H + j);
          hn[s] = h[static_cast<size_t>(j)], cn[s] = c[static_cast<size_t>(j)];
        }
      }
    }
    layer_in = out;
    width = D * H;
  }
  // Batch-major, as rnn packs: per batch row n, y[:, n], then h_n[:, n] (and c_n[:, n]).
  std::vector<S> packed;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < D * H; ++j) packed.push_back(layer_in[static_cast<size_t>((t * N + n) * D * H + j)]);
    for (const std::vector<S>* s : {&hn, &cn}) {
      if (s == &cn && !g.lstm) continue;
      for (int64_t cell = 0; cell < g.layers * D; ++cell)
        for (int64_t j = 0; j < H; ++j) packed.push_back((*s)[static_cast<size_t>((cell * N + n) * H + j)]);
    }
  }
  return packed;
}

/// rnn's packed width per batch row: T*D*H + kinds*L*D*H.
inline int64_t rnn_row(const RnnShape& g) {
  return g.t * g.dirs() * g.h + static_cast<int64_t>(g.kinds()) * g.layers * g.dirs() * g.h;
}

inline std::vector<std::vector<double>> rnn_values(std::span<const Ref> r, size_t count) {
  std::vector<std::vector<double>> v;
  for (size_t i = 0; i < count; ++i) v.push_back(r[i].v);
  return v;
}

template <> struct Spec<OpId::Rnn> {
  static std::vector<DType> dtypes() { return {f32, f64}; }
  static std::vector<Case> cases(DType t) {
    std::vector<Case> out;
    for (const RnnShape& g : rnn_shapes()) {
      auto run = [g](std::span<const Tensor> in) { return apply(OpId::Rnn, in, rnn_attrs(g)); };
      auto ref = [g](std::span<const Ref> r) {
        std::vector<double> y = rnn_forward_values<double>(g, rnn_values(r, r.size()));
        return Ref{{g.n, rnn_row(g)}, y, {}};
      };
      out.push_back({g.name, rnn_inputs(g, t), run, ref});
    }
    return out;
  }
};

template <> struct Spec<OpId::RnnBackward> {
  static std::vector<DType> dtypes() { return {f32, f64}; }
  static std::vector<Case> cases(DType t) {
    std::vector<Case> out;
    for (const RnnShape& g : rnn_shapes()) {
      std::vector<Tensor> in = rnn_inputs(g, t);
      // x, states, params, out, grad: out need not be rnn's (the gradients do not read it).
      in.push_back(values({g.n, rnn_row(g)}, t));
      in.push_back(values({g.n, rnn_row(g)}, t));
      auto run = [g](std::span<const Tensor> x) { return apply(OpId::RnnBackward, x, rnn_attrs(g)); };
      auto ref = [g](std::span<const Ref> r) {
        // Each input element's gradient: grad . Im(rnn(inputs + i*eps*e)) / eps.
        constexpr double eps = 1e-30;
        size_t n_in = r.size() - 2;
        std::vector<std::vector<std::complex<double>>> z;
        for (size_t i = 0; i < n_in; ++i) z.emplace_back(r[i].v.begin(), r[i].v.end());
        const std::vector<double>& grad = r[n_in + 1].v;
        std::vector<double> dx, scale;  // scale: the sum of the terms' sizes
        for (size_t i = 0; i < n_in; ++i)
          for (size_t e = 0; e < z[i].size(); ++e) {
            z[i][e] += std::complex<double>(0, eps);
            std::vector<std::complex<double>> y = rnn_forward_values<std::complex<double>>(g, z);
            z[i][e] = r[i].v[e];
            double s = 0, m = 0;
            for (size_t k = 0; k < y.size(); ++k)
              s += grad[k] * y[k].imag() / eps, m += std::abs(grad[k] * y[k].imag() / eps);
            dx.push_back(s);
            scale.push_back(m);
          }
        return Ref{{static_cast<int64_t>(dx.size())}, dx, scale};
      };
      out.push_back({g.name, in, run, ref});
    }
    return out;
  }
};

}  // namespace kiln::test
