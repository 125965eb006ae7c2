// tests/cuda/host/rnn_cuda.cpp -- the host cuDNN's recurrent networks: cuDNN 9's RNN calls
// (descriptors, weight space, cudnnRNNForward, cudnnRNNBackwardData_v8 and
// cudnnRNNBackwardWeights_v8) for LSTM and GRU stacks, computing in double on the handle's
// stream. It refuses, at the call, what the real library refuses or would get wrong: unpacked
// layouts without PADDED_IO, descriptors that disagree, spaces smaller than asked for, host
// pointers, a weight-gradient call that does not follow its data-gradient call.
// Its weight space keeps each pseudo-layer's blocks in cuDNN's order (input matrices, recurrent
// matrices, their biases, gate by gate); KILN_HOST_CUDNN_RNN_GAPS=1 leaves gaps between the
// blocks, so the caller's placement must come from cudnnGetRNNWeightParams.
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "tests/cuda/host/dnn_cuda.h"

struct cudnnDropoutStruct {
  float p = 0;
};
struct cudnnRNNStruct {
  bool set = false;
  cudnnRNNMode_t mode = CUDNN_LSTM;
  bool bias = true, bidirectional = false, padded_io = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int input = 0, hidden = 0, layers = 0;
};
struct cudnnRNNDataStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnRNNDataLayout_t layout = CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED;
  int max_t = 0, batch = 0, vec = 0;
  bool uniform = true;  // every sequence max_t long
};

namespace {

using Vec = std::vector<double>;

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }
long long bytes_of(cudnnDataType_t t) { return t == CUDNN_DATA_DOUBLE ? 8 : t == CUDNN_DATA_FLOAT ? 4 : 2; }

// One network over [T, N] sequences, copied out of the descriptors for a task.
struct Net {
  bool lstm = true, bias = true;
  int g = 4, hidden = 0, input = 0, layers = 0, dirs = 1, t_len = 0, n = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  long long gap = 0;  // elements between weight-space blocks

  int lds() const { return layers * dirs; }
  int in_of(int p) const { return p / dirs == 0 ? input : hidden * dirs; }
  long long nh() const { return static_cast<long long>(n) * hidden; }
  // The weight space, in elements: per pseudo-layer, G input matrices [H, in], G recurrent
  // [H, H], then G input and G recurrent biases [H], each block followed by `gap`.
  long long layer_numel(int p) const {
    return g * (static_cast<long long>(hidden) * in_of(p) + gap) + g * (static_cast<long long>(hidden) * hidden + gap) +
           (bias ? 2LL * g * (hidden + gap) : 0);
  }
  long long layer_start(int p) const {
    long long s = 0;
    for (int q = 0; q < p; ++q) s += layer_numel(q);
    return s;
  }
  long long total() const { return layer_start(lds()); }
  long long matrix_at(int p, int id) const {
    long long w_block = static_cast<long long>(hidden) * in_of(p) + gap,
              r_block = static_cast<long long>(hidden) * hidden + gap;
    return layer_start(p) + (id < g ? id * w_block : g * w_block + (id - g) * r_block);
  }
  long long bias_at(int p, int id) const {
    return layer_start(p) + g * (static_cast<long long>(hidden) * in_of(p) + gap) +
           g * (static_cast<long long>(hidden) * hidden + gap) + id * (hidden + gap);
  }
  // The reserve, in doubles: per pseudo-layer and time step, the gates' activations [G, N, H],
  // c, h and (GRU) the recurrent product of n's gate, then the gates' gradients on the input
  // side and on the recurrent side [G, N, H] each.
  long long step_numel() const { return nh() * (3LL * g + 3); }
  long long reserve_bytes() const { return 8LL * lds() * t_len * step_numel(); }
  double* step_at(double* r, int p, int t) const { return r + (static_cast<long long>(p) * t_len + t) * step_numel(); }
  // Offsets within a step's block.
  long long acts() const { return 0; }
  long long cell() const { return g * nh(); }
  long long hid() const { return (g + 1) * nh(); }
  long long hn() const { return (g + 2) * nh(); }
  long long dwx() const { return (g + 3) * nh(); }
  long long drh() const { return (2LL * g + 3) * nh(); }
  // The forward's time step before `step` of pseudo-layer p in its own order (-1: none).
  int time_of(int p, int step) const { return p % dirs == 0 ? step : t_len - 1 - step; }
};

const size_t kWorkspace = 64;  // what the emulation asks for, and checks it gets

Net net_of(const cudnnRNNStruct& r, const cudnnRNNDataStruct& x) {
  Net net;
  net.lstm = r.mode == CUDNN_LSTM;
  net.g = net.lstm ? 4 : 3;
  net.bias = r.bias;
  net.hidden = r.hidden, net.input = r.input, net.layers = r.layers, net.dirs = r.bidirectional ? 2 : 1;
  net.type = r.type;
  net.t_len = x.max_t, net.n = x.batch;
  const char* gaps = std::getenv("KILN_HOST_CUDNN_RNN_GAPS");
  net.gap = gaps && std::string(gaps) == "1" ? 8 : 0;
  return net;
}

// The layer input of pseudo-layer p at time t, sample b: x for the first layer, else the layer
// below's outputs of both directions (kept in the reserve).
Vec layer_input(const Net& net, const void* x, double* r, int p, int t, int b) {
  int in = net.in_of(p);
  Vec v(static_cast<size_t>(in));
  if (p / net.dirs == 0) {
    for (int j = 0; j < in; ++j)
      v[size_t(j)] = host_dnn::load(x, net.type, (static_cast<long long>(t) * net.n + b) * in + j);
    return v;
  }
  int below = (p / net.dirs - 1) * net.dirs;
  for (int d = 0; d < net.dirs; ++d) {
    const double* h = net.step_at(r, below + d, t) + net.hid() + static_cast<long long>(b) * net.hidden;
    for (int k = 0; k < net.hidden; ++k) v[size_t(d * net.hidden + k)] = h[k];
  }
  return v;
}

// The state of pseudo-layer p before its step `step`: from the reserve, or the initial one.
double state_before(const Net& net, double* r, const void* initial, long long part, int p, int step, long long i) {
  if (step > 0) return net.step_at(r, p, net.time_of(p, step - 1))[part + i];
  return initial ? host_dnn::load(initial, net.type, p * net.nh() + i) : 0.0;
}

// W x (rows of matrix block id) for one sample: out[k] = sum_j W[k][j] v[j] (+ bias).
double row_dot(const Net& net, const void* w, long long at, int cols, int k, const Vec& v) {
  double acc = 0;
  for (int j = 0; j < cols; ++j)
    acc += host_dnn::load(w, net.type, at + static_cast<long long>(k) * cols + j) * v[size_t(j)];
  return acc;
}

void forward(const Net& net, const void* x, void* y, const void* hx, void* hy, const void* cx, void* cy, const void* w,
             double* r) {
  const int H = net.hidden, G = net.g;
  const long long NH = net.nh();
  for (int p = 0; p < net.lds(); ++p)
    for (int step = 0; step < net.t_len; ++step) {
      int t = net.time_of(p, step);
      double* s = net.step_at(r, p, t);
      for (int b = 0; b < net.n; ++b) {
        Vec in = layer_input(net, x, r, p, t, b), hp(size_t(H), 0.0);
        for (int j = 0; j < H; ++j) hp[size_t(j)] = state_before(net, r, hx, net.hid(), p, step, b * H + j);
        for (int k = 0; k < H; ++k) {
          double wx[4], rh[4];
          for (int gi = 0; gi < G; ++gi) {
            wx[gi] = row_dot(net, w, net.matrix_at(p, gi), net.in_of(p), k, in);
            rh[gi] = row_dot(net, w, net.matrix_at(p, G + gi), H, k, hp);
            if (net.bias)
              wx[gi] += host_dnn::load(w, net.type, net.bias_at(p, gi) + k),
                  rh[gi] += host_dnn::load(w, net.type, net.bias_at(p, G + gi) + k);
          }
          long long i = static_cast<long long>(b) * H + k;
          double h;
          if (net.lstm) {
            double a[4];
            for (int gi = 0; gi < 4; ++gi) a[gi] = gi == 2 ? std::tanh(wx[gi] + rh[gi]) : sigmoid(wx[gi] + rh[gi]);
            double c = a[1] * state_before(net, r, cx, net.cell(), p, step, i) + a[0] * a[2];
            h = a[3] * std::tanh(c);
            for (int gi = 0; gi < 4; ++gi) s[net.acts() + gi * NH + i] = a[gi];
            s[net.cell() + i] = c;
          } else {
            double rg = sigmoid(wx[0] + rh[0]), z = sigmoid(wx[1] + rh[1]), nn = std::tanh(wx[2] + rg * rh[2]);
            h = (1 - z) * nn + z * hp[size_t(k)];
            s[net.acts() + i] = rg, s[net.acts() + NH + i] = z, s[net.acts() + 2 * NH + i] = nn;
            s[net.hn() + i] = rh[2];
          }
          s[net.hid() + i] = h;
        }
      }
    }
  for (int p = 0; p < net.lds(); ++p) {
    const double* last = net.step_at(r, p, net.time_of(p, net.t_len - 1));
    for (long long i = 0; i < NH; ++i) {
      host_dnn::store(hy, net.type, p * NH + i, last[net.hid() + i]);
      if (cy) host_dnn::store(cy, net.type, p * NH + i, last[net.cell() + i]);
    }
  }
  int top = (net.layers - 1) * net.dirs;
  for (int d = 0; d < net.dirs; ++d)
    for (int t = 0; t < net.t_len; ++t)
      for (int b = 0; b < net.n; ++b)
        for (int k = 0; k < H; ++k)
          host_dnn::store(y, net.type, (static_cast<long long>(t) * net.n + b) * H * net.dirs + d * H + k,
                          net.step_at(r, top + d, t)[net.hid() + static_cast<long long>(b) * H + k]);
}

void backward_data(const Net& net, const void* dy, void* dx, const void* hx, const void* dhy, void* dhx, const void* cx,
                   const void* dcy, void* dcx, const void* w, double* r) {
  const int H = net.hidden, G = net.g, T = net.t_len, N = net.n;
  const long long NH = net.nh();
  // The gradient reaching each layer's outputs [T, N, D * H], from the top down.
  Vec d_out(static_cast<size_t>(static_cast<long long>(T) * N * H * net.dirs));
  for (size_t i = 0; i < d_out.size(); ++i) d_out[i] = host_dnn::load(dy, net.type, static_cast<long long>(i));
  for (int l = net.layers - 1; l >= 0; --l) {
    const int in = net.in_of(l * net.dirs);
    Vec d_in(static_cast<size_t>(static_cast<long long>(T) * N * in), 0.0);
    for (int d = 0; d < net.dirs; ++d) {
      int p = l * net.dirs + d;
      Vec dh(static_cast<size_t>(NH)), dc(static_cast<size_t>(NH), 0.0);
      for (long long i = 0; i < NH; ++i) {
        dh[size_t(i)] = dhy ? host_dnn::load(dhy, net.type, p * NH + i) : 0.0;
        if (net.lstm && dcy) dc[size_t(i)] = host_dnn::load(dcy, net.type, p * NH + i);
      }
      for (int step = T - 1; step >= 0; --step) {
        int t = net.time_of(p, step);
        double* s = net.step_at(r, p, t);
        Vec dh_prev(static_cast<size_t>(NH), 0.0);
        for (long long i = 0; i < NH; ++i) {
          int b = static_cast<int>(i / H), k = static_cast<int>(i % H);
          double g = dh[size_t(i)] + d_out[size_t((static_cast<long long>(t) * N + b) * H * net.dirs + d * H + k)];
          double hp = state_before(net, r, hx, net.hid(), p, step, i);
          const double* a = s + net.acts();
          if (net.lstm) {
            double ig = a[i], fg = a[NH + i], gg = a[2 * NH + i], og = a[3 * NH + i], tc = std::tanh(s[net.cell() + i]);
            double dcc = dc[size_t(i)] + g * og * (1 - tc * tc);
            double pre[4] = {dcc * gg * ig * (1 - ig),
                             dcc * state_before(net, r, cx, net.cell(), p, step, i) * fg * (1 - fg),
                             dcc * ig * (1 - gg * gg), g * tc * og * (1 - og)};
            for (int gi = 0; gi < 4; ++gi) s[net.dwx() + gi * NH + i] = s[net.drh() + gi * NH + i] = pre[gi];
            dc[size_t(i)] = dcc * fg;
          } else {
            double rg = a[i], z = a[NH + i], nn = a[2 * NH + i];
            double an = g * (1 - z) * (1 - nn * nn), ar = an * s[net.hn() + i] * rg * (1 - rg),
                   az = g * (hp - nn) * z * (1 - z);
            s[net.dwx() + i] = s[net.drh() + i] = ar;
            s[net.dwx() + NH + i] = s[net.drh() + NH + i] = az;
            s[net.dwx() + 2 * NH + i] = an;
            s[net.drh() + 2 * NH + i] = an * rg;
            dh_prev[size_t(i)] = g * z;
          }
          (void)k;
        }
        // Through the matrices: to the previous state and to the layer's input.
        for (int b = 0; b < N; ++b)
          for (int gi = 0; gi < G; ++gi)
            for (int k = 0; k < H; ++k) {
              long long i = static_cast<long long>(b) * H + k;
              double gr = s[net.drh() + gi * NH + i], gx = s[net.dwx() + gi * NH + i];
              for (int j = 0; j < H; ++j)
                dh_prev[size_t(b * H + j)] +=
                    host_dnn::load(w, net.type, net.matrix_at(p, G + gi) + static_cast<long long>(k) * H + j) * gr;
              for (int j = 0; j < in; ++j)
                d_in[size_t((static_cast<long long>(t) * N + b) * in + j)] +=
                    host_dnn::load(w, net.type, net.matrix_at(p, gi) + static_cast<long long>(k) * in + j) * gx;
            }
        dh = dh_prev;
      }
      for (long long i = 0; i < NH; ++i) {
        if (dhx) host_dnn::store(dhx, net.type, p * NH + i, dh[size_t(i)]);
        if (dcx) host_dnn::store(dcx, net.type, p * NH + i, dc[size_t(i)]);
      }
    }
    d_out = d_in;
  }
  for (size_t i = 0; i < d_out.size(); ++i) host_dnn::store(dx, net.type, static_cast<long long>(i), d_out[i]);
}

void backward_weights(const Net& net, const void* x, const void* hx, void* dw, double* r) {
  const int H = net.hidden, G = net.g;
  const long long NH = net.nh();
  Vec acc(static_cast<size_t>(net.total()), 0.0);
  for (int p = 0; p < net.lds(); ++p) {
    const int in = net.in_of(p);
    for (int step = 0; step < net.t_len; ++step) {
      int t = net.time_of(p, step);
      const double* s = net.step_at(r, p, t);
      for (int b = 0; b < net.n; ++b) {
        Vec v = layer_input(net, x, r, p, t, b);
        for (int gi = 0; gi < G; ++gi)
          for (int k = 0; k < H; ++k) {
            long long i = static_cast<long long>(b) * H + k;
            double gx = s[net.dwx() + gi * NH + i], gr = s[net.drh() + gi * NH + i];
            for (int j = 0; j < in; ++j)
              acc[size_t(net.matrix_at(p, gi) + static_cast<long long>(k) * in + j)] += gx * v[size_t(j)];
            for (int j = 0; j < H; ++j)
              acc[size_t(net.matrix_at(p, G + gi) + static_cast<long long>(k) * H + j)] +=
                  gr *
                  state_before(net, const_cast<double*>(r), hx, net.hid(), p, step, static_cast<long long>(b) * H + j);
            if (net.bias) acc[size_t(net.bias_at(p, gi) + k)] += gx, acc[size_t(net.bias_at(p, G + gi) + k)] += gr;
          }
      }
    }
  }
  for (size_t i = 0; i < acc.size(); ++i)
    if (acc[i] != 0)
      host_dnn::store(dw, net.type, static_cast<long long>(i),
                      host_dnn::load(dw, net.type, static_cast<long long>(i)) + acc[i]);
}

// What a reserve last went through, so the weight gradient can insist on following the data
// gradient (cuDNN's order: the second reads what the first left in the reserve).
enum class Stage { Forward, BackwardData };
std::mutex g_mu;
std::map<const void*, Stage>& stages() {
  static auto* m = new std::map<const void*, Stage>;
  return *m;
}

bool packed_state(const cudnnTensorStruct* d, const Net& net) {
  return d && d->dims == 3 && d->type == net.type && d->n == net.lds() && d->c == net.n && d->h == net.hidden &&
         d->sh == 1 && d->sc == net.hidden && d->sn == net.n * net.hidden;
}

// Checks a call's descriptors and spaces against each other: the network, or a status.
cudnnStatus_t check_call(const cudnnRNNStruct* rnn, const cudnnRNNDataStruct* x, const cudnnRNNDataStruct* y,
                         const cudnnTensorStruct* h, const cudnnTensorStruct* c, const int32_t* lengths,
                         size_t weight_bytes, const void* weights, size_t work_bytes, const void* work, Net* net) {
  if (!rnn || !rnn->set || !x || !x->set || !y || !y->set) return CUDNN_STATUS_BAD_PARAM;
  if (x->layout != CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED || !x->uniform) return CUDNN_STATUS_NOT_SUPPORTED;
  if (!rnn->padded_io) return CUDNN_STATUS_BAD_PARAM;  // unpacked layouts need PADDED_IO
  *net = net_of(*rnn, *x);
  if (x->type != rnn->type || y->type != rnn->type || x->vec != rnn->input || y->vec != rnn->hidden * net->dirs ||
      y->batch != x->batch || y->max_t != x->max_t || y->layout != x->layout)
    return CUDNN_STATUS_BAD_PARAM;
  if (!packed_state(h, *net) || (net->lstm && !packed_state(c, *net))) return CUDNN_STATUS_BAD_PARAM;
  if (weight_bytes != static_cast<size_t>(net->total() * bytes_of(net->type)) ||
      !kiln_host_device_range(weights, weight_bytes))
    return CUDNN_STATUS_BAD_PARAM;
  if (work_bytes < kWorkspace || !kiln_host_device_range(work, kWorkspace)) return CUDNN_STATUS_BAD_PARAM;
  if (!kiln_host_device_range(lengths, sizeof(int32_t) * static_cast<size_t>(x->batch))) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

// On the stream: the device's sequence lengths must say what the descriptor said.
void check_lengths(const int32_t* lengths, const Net& net) {
  for (int b = 0; b < net.n; ++b)
    if (lengths[b] != net.t_len) {
      std::fprintf(stderr, "host cuDNN: devSeqLengths[%d] is %d, the descriptor said %d\n", b, lengths[b], net.t_len);
      std::abort();
    }
}

bool on_device(const void* p, long long elems, const Net& net) {
  return p == nullptr || kiln_host_device_range(p, static_cast<size_t>(elems * bytes_of(net.type)));
}

}  // namespace

extern "C" {

cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d, cudnnDataType_t t, int nb, const int dims[],
                                         const int strides[]) {
  if (nb != 3) return CUDNN_STATUS_NOT_SUPPORTED;  // the RNN states' [L * D, N, H]: all kiln asks for
  *d = {t, dims[0], dims[1], dims[2], 1, strides[0], strides[1], strides[2], 1, 3};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t* d) { return host_dnn::create(d); }
cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t d) { return host_dnn::destroy(d); }
cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t d, cudnnHandle_t, float p, void* states, size_t bytes,
                                        unsigned long long) {
  if (p != 0 && (!states || bytes == 0)) return CUDNN_STATUS_BAD_PARAM;
  if (p != 0) return CUDNN_STATUS_NOT_SUPPORTED;  // cuDNN's own dropout: kiln draws its own
  d->p = p;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t* d) { return host_dnn::create(d); }
cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t d) { return host_dnn::destroy(d); }
cudnnStatus_t cudnnSetRNNDescriptor_v8(cudnnRNNDescriptor_t d, cudnnRNNAlgo_t algo, cudnnRNNMode_t mode,
                                       cudnnRNNBiasMode_t bias, cudnnDirectionMode_t dir,
                                       cudnnRNNInputMode_t input_mode, cudnnDataType_t type, cudnnDataType_t prec,
                                       cudnnMathType_t, int32_t input, int32_t hidden, int32_t proj, int32_t layers,
                                       cudnnDropoutDescriptor_t dropout, uint32_t aux) {
  if (input <= 0 || hidden <= 0 || layers <= 0 || proj != hidden) return CUDNN_STATUS_BAD_PARAM;
  bool prec_ok = type == CUDNN_DATA_DOUBLE ? prec == CUDNN_DATA_DOUBLE
                 : type == CUDNN_DATA_HALF ? prec == CUDNN_DATA_HALF || prec == CUDNN_DATA_FLOAT
                                           : prec == CUDNN_DATA_FLOAT;
  if (!prec_ok) return CUDNN_STATUS_BAD_PARAM;
  if (algo != CUDNN_RNN_ALGO_STANDARD || (mode != CUDNN_LSTM && mode != CUDNN_GRU) ||
      input_mode != CUDNN_LINEAR_INPUT || (bias != CUDNN_RNN_DOUBLE_BIAS && bias != CUDNN_RNN_NO_BIAS) ||
      (dropout && dropout->p != 0) || host_dnn::listed("rnn") || host_dnn::listed(host_dnn::type_name(type)))
    return CUDNN_STATUS_NOT_SUPPORTED;
  d->set = true;
  d->mode = mode, d->bias = bias == CUDNN_RNN_DOUBLE_BIAS, d->bidirectional = dir == CUDNN_BIDIRECTIONAL;
  d->type = type, d->input = input, d->hidden = hidden, d->layers = layers;
  d->padded_io = (aux & CUDNN_RNN_PADDED_IO_ENABLED) != 0;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateRNNDataDescriptor(cudnnRNNDataDescriptor_t* d) { return host_dnn::create(d); }
cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t d) { return host_dnn::destroy(d); }
cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t d, cudnnDataType_t type, cudnnRNNDataLayout_t layout,
                                        int max_t, int batch, int vec, const int lengths[], void*) {
  if (max_t <= 0 || batch <= 0 || vec <= 0 || !lengths) return CUDNN_STATUS_BAD_PARAM;
  d->set = true;
  d->type = type, d->layout = layout, d->max_t = max_t, d->batch = batch, d->vec = vec;
  d->uniform = true;
  for (int b = 0; b < batch; ++b) {
    if (lengths[b] <= 0 || lengths[b] > max_t) return CUDNN_STATUS_BAD_PARAM;
    d->uniform = d->uniform && lengths[b] == max_t;
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t, cudnnRNNDescriptor_t d, size_t* bytes) {
  if (!d->set) return CUDNN_STATUS_BAD_PARAM;
  cudnnRNNDataStruct one;
  one.max_t = one.batch = 1;
  Net net = net_of(*d, one);
  *bytes = static_cast<size_t>(net.total() * bytes_of(net.type));
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t, cudnnRNNDescriptor_t d, cudnnForwardMode_t mode,
                                        cudnnRNNDataDescriptor_t x, size_t* work, size_t* reserve) {
  if (!d->set || !x->set) return CUDNN_STATUS_BAD_PARAM;
  *work = kWorkspace;
  *reserve = mode == CUDNN_FWD_MODE_TRAINING ? static_cast<size_t>(net_of(*d, *x).reserve_bytes()) : 0;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetRNNWeightParams(cudnnHandle_t, cudnnRNNDescriptor_t d, int32_t p, size_t bytes, const void* w,
                                      int32_t id, cudnnTensorDescriptor_t m_desc, void** m_addr,
                                      cudnnTensorDescriptor_t b_desc, void** b_addr) {
  if (!d->set) return CUDNN_STATUS_BAD_PARAM;
  cudnnRNNDataStruct one;
  one.max_t = one.batch = 1;
  Net net = net_of(*d, one);
  if (p < 0 || p >= net.lds() || id < 0 || id >= 2 * net.g ||
      bytes != static_cast<size_t>(net.total() * bytes_of(net.type)))
    return CUDNN_STATUS_BAD_PARAM;
  auto* base = static_cast<char*>(const_cast<void*>(w));
  int cols = id < net.g ? net.in_of(p) : net.hidden;
  if (m_addr) *m_addr = base + net.matrix_at(p, id) * bytes_of(net.type);
  if (m_desc) *m_desc = {net.type, 1, net.hidden, cols, 1, net.hidden * cols, cols, 1, 1, 3};
  if (b_addr) *b_addr = net.bias ? base + net.bias_at(p, id) * bytes_of(net.type) : nullptr;
  if (b_desc) *b_desc = {net.type, 1, net.hidden, 1, 1, net.hidden, 1, 1, 1, 3};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnRNNForward(cudnnHandle_t h, cudnnRNNDescriptor_t rnn, cudnnForwardMode_t mode,
                              const int32_t lengths[], cudnnRNNDataDescriptor_t xd, const void* x,
                              cudnnRNNDataDescriptor_t yd, void* y, cudnnTensorDescriptor_t hd, const void* hx,
                              void* hy, cudnnTensorDescriptor_t cd, const void* cx, void* cy, size_t weight_bytes,
                              const void* w, size_t work_bytes, void* work, size_t reserve_bytes, void* reserve) {
  Net net;
  cudnnStatus_t s = check_call(rnn, xd, yd, hd, cd, lengths, weight_bytes, w, work_bytes, work, &net);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  const long long states = net.lds() * net.nh();
  bool training = mode == CUDNN_FWD_MODE_TRAINING;
  if (training && (reserve_bytes < static_cast<size_t>(net.reserve_bytes()) ||
                   !kiln_host_device_range(reserve, static_cast<size_t>(net.reserve_bytes()))))
    return CUDNN_STATUS_BAD_PARAM;
  if (!x || !y || !hy || !on_device(x, static_cast<long long>(net.t_len) * net.n * net.input, net) ||
      !on_device(y, static_cast<long long>(net.t_len) * net.n * net.hidden * net.dirs, net) ||
      !on_device(hx, states, net) || !on_device(hy, states, net) || !on_device(cx, states, net) ||
      !on_device(cy, states, net))
    return CUDNN_STATUS_BAD_PARAM;
  if (training) {
    std::lock_guard<std::mutex> lock(g_mu);
    stages()[reserve] = Stage::Forward;
  }
  if (!net.lstm) cx = nullptr, cy = nullptr;
  kiln_host_enqueue(
      reinterpret_cast<CUstream>(h->stream),
      [=] {
        check_lengths(lengths, net);
        std::vector<double> local;
        double* r = static_cast<double*>(reserve);
        if (!training) {
          local.resize(static_cast<size_t>(net.reserve_bytes() / 8));
          r = local.data();
        }
        forward(net, x, y, hx, hy, cx, cy, w, r);
      },
      "host_cudnn_rnn_forward");
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnRNNBackwardData_v8(cudnnHandle_t h, cudnnRNNDescriptor_t rnn, const int32_t lengths[],
                                      cudnnRNNDataDescriptor_t yd, const void*, const void* dy,
                                      cudnnRNNDataDescriptor_t xd, void* dx, cudnnTensorDescriptor_t hd, const void* hx,
                                      const void* dhy, void* dhx, cudnnTensorDescriptor_t cd, const void* cx,
                                      const void* dcy, void* dcx, size_t weight_bytes, const void* w, size_t work_bytes,
                                      void* work, size_t reserve_bytes, void* reserve) {
  Net net;
  cudnnStatus_t s = check_call(rnn, xd, yd, hd, cd, lengths, weight_bytes, w, work_bytes, work, &net);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (reserve_bytes < static_cast<size_t>(net.reserve_bytes()) || !dy || !dx) return CUDNN_STATUS_BAD_PARAM;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = stages().find(reserve);
    if (it == stages().end()) return CUDNN_STATUS_BAD_PARAM;  // no training forward made this reserve
    it->second = Stage::BackwardData;
  }
  if (!net.lstm) cx = dcy = nullptr, dcx = nullptr;
  kiln_host_enqueue(
      reinterpret_cast<CUstream>(h->stream),
      [=] {
        check_lengths(lengths, net);
        backward_data(net, dy, dx, hx, dhy, dhx, cx, dcy, dcx, w, static_cast<double*>(reserve));
      },
      "host_cudnn_rnn_backward_data");
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnRNNBackwardWeights_v8(cudnnHandle_t h, cudnnRNNDescriptor_t rnn, cudnnWgradMode_t add,
                                         const int32_t lengths[], cudnnRNNDataDescriptor_t xd, const void* x,
                                         cudnnTensorDescriptor_t hd, const void* hx, cudnnRNNDataDescriptor_t yd,
                                         const void*, size_t weight_bytes, void* dw, size_t work_bytes, void* work,
                                         size_t reserve_bytes, void* reserve) {
  if (add != CUDNN_WGRAD_MODE_ADD) return CUDNN_STATUS_NOT_SUPPORTED;  // cuDNN 9 only adds
  Net net;
  cudnnStatus_t s = check_call(rnn, xd, yd, hd, hd, lengths, weight_bytes, dw, work_bytes, work, &net);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (reserve_bytes < static_cast<size_t>(net.reserve_bytes()) || !x) return CUDNN_STATUS_BAD_PARAM;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = stages().find(reserve);
    if (it == stages().end() || it->second != Stage::BackwardData) return CUDNN_STATUS_BAD_PARAM;
  }
  kiln_host_enqueue(
      reinterpret_cast<CUstream>(h->stream),
      [=] {
        check_lengths(lengths, net);
        backward_weights(net, x, hx, dw, static_cast<double*>(reserve));
      },
      "host_cudnn_rnn_backward_weights");
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
