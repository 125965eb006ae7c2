// cuda/rnn.cpp -- the rnn ops' CUDA kernel: cuDNN's RNN calls (cuda/rnn_cuda.cpp), else, where
// cuDNN declines, the ops' own CPU kernel (the unrolled composite nn registers), which runs
// on the CUDA tensors op by op. The backward runs cuDNN's forward again for the reserve: its
// size is cuDNN's per device, so it is no IR value.
#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "cuda/libraries.h"
#include "cuda/op_kernels.h"
#include "runtime/autograd_meta.h"
#include "runtime/log.h"
#include "runtime/ops/rnn.h"

namespace kiln::cuda {

void rnn(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  using namespace rnn_op;
  if (out.numel() == 0) return;
  Operands o = operands_of(id, in, a);
  auto by_composite = [&] { op_def(id).cpu(id, in, a, out); };
  if (o.x.numel() == 0) return by_composite();
  GradModeGuard no_grad(false);
  RnnSpec spec{a.lstm, o.x.shape()[2], a.hidden_size, a.num_layers, a.bidirectional, has_bias(o, a), o.x.dtype()};
  Tensor x = o.x.contiguous();
  Tensor hx = o.states.empty() ? Tensor() : o.states[0].contiguous();
  Tensor cx = o.states.size() > 1 ? o.states[1].contiguous() : Tensor();
  std::vector<Tensor> params;
  for (const Tensor& p : o.params) params.push_back(p.contiguous());
  std::string why;
  std::optional<RnnForward> f = rnn_forward(spec, x, hx, cx, params, id == OpId::RnnBackward, &why);
  if (!f) {
    log(LogTopic::Cuda, fmt::format("{}: by its composite, not through cuDNN: {}", op_name(id), why));
    return by_composite();
  }
  if (id == OpId::Rnn) {
    std::vector<Tensor> parts{f->y, f->hy};
    if (a.lstm) parts.push_back(f->cy);
    return write(pack_rows(parts), out);
  }
  std::vector<Dims> shapes = result_shapes(o.x, a);
  std::vector<Tensor> gys = unpack_rows(o.grad, shapes);
  for (Tensor& g : gys) g = g.contiguous();
  RnnGrads g = rnn_backward(spec, x, hx, cx, *f, gys[0], gys[1], a.lstm ? gys[2] : Tensor(), /*weights=*/true);
  std::vector<Tensor> parts{g.dx};
  if (!o.states.empty()) parts.push_back(g.dhx);
  if (o.states.size() > 1) parts.push_back(g.dcx);
  parts.insert(parts.end(), g.dparams.begin(), g.dparams.end());
  write(pack(parts), out);
}

}  // namespace kiln::cuda
