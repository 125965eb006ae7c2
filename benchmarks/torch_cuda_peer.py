#!/usr/bin/env python3
# benchmarks/torch_cuda_peer.py -- PyTorch 2 on the same GPU, for kiln_cuda_bench's cases under
# the same names: run the two in one session on one machine and compare ratios only.
#
#   python3 benchmarks/torch_cuda_peer.py [--min-time SECONDS]
#   python3 benchmarks/torch_cuda_peer.py --models [NAME,...] [--variants eager,compile,...] [--json PATH]
#   python3 benchmarks/torch_cuda_peer.py --profile [--models NAME,...] [--steps 3] [--top 20] --json PATH
#
# --models runs the example models' training steps instead (torch_cuda_models.py, the rows
# kiln_cuda_bench calls cuda/model/NAME/VARIANT; benchmarks/compare_cuda_models.py prints the
# two side by side). --profile [--models ...] records them with torch.profiler, a JSON object a
# line per model and variant in --json (kiln_cuda_profile's fields; compare_cuda_profiles.py
# prints the two side by side), with PyTorch's eager floor from the tensors autograd saves.
#
# Each iteration ends with torch.cuda.synchronize(), as kiln_cuda_bench's do, so a time is the
# device's work plus the framework's launch overhead. TF32 is off for matmuls and convolutions
# (kiln's default; PyTorch's cuDNN default is on). Not part of the build or the tests: PyTorch
# is a peer to measure against by hand, never a dependency.
import argparse
import math
import time

import torch
import torch.nn.functional as F

dev = torch.device("cuda", 0)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
M64 = 64 << 20
ROWS = (16384, 4096)
N = 4096


def timed(name, body, min_time, bytes_=None, flops=None):
    body()
    torch.cuda.synchronize()
    iters, start = 0, time.perf_counter()
    while True:
        body()
        torch.cuda.synchronize()
        iters += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time and iters >= 3:
            break
    per = elapsed / iters
    extra = ""
    if bytes_:
        extra += f"  {bytes_ / per / 1e9:8.1f} GB/s"
    if flops:
        extra += f"  {flops / per / 1e12:8.2f} TFLOP/s"
    print(f"cuda/{name:<44} {per * 1e3:10.4f} ms{extra}", flush=True)


def gelu_9ops(x):
    cube = x * x * x
    inner = (x + cube * 0.044715) * 0.7978845608
    return x * 0.5 * (torch.tanh(inner) + 1.0)


def step(opt, loss_of):
    def body():
        opt.zero_grad()
        loss_of().backward()
        opt.step()
    return body


class Digits(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc = torch.nn.Linear(32 * 2 * 2, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        return self.fc(h.flatten(1))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False)
        self.conv2 = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False)

    def forward(self, x):
        return F.relu(self.conv2(F.relu(self.conv1(x))) + x)


class Encoder(torch.nn.Module):  # bench_cases.h's EncoderBlock
    V, D, H, HID, B, T, P = 256, 256, 8, 1024, 16, 128, 0.1

    def __init__(self):
        super().__init__()
        D = self.D
        self.embed = torch.nn.Embedding(self.V, D)
        self.ln1, self.ln2, self.ln_f = (torch.nn.LayerNorm(D) for _ in range(3))
        self.qkv, self.proj = torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)
        self.fc1, self.fc2 = torch.nn.Linear(D, self.HID), torch.nn.Linear(self.HID, D)
        self.head = torch.nn.Linear(D, self.V)

    def attention(self, x):
        b, t, dh = x.shape[0], x.shape[1], self.D // self.H
        q = self.qkv(x)
        heads = lambda i: q.narrow(-1, i * self.D, self.D).reshape(b, t, self.H, dh).permute(0, 2, 1, 3)
        scores = heads(0) @ heads(1).transpose(-2, -1) * (1.0 / math.sqrt(dh))
        a = F.dropout(torch.softmax(scores, -1), self.P, self.training)
        return self.proj((a @ heads(2)).permute(0, 2, 1, 3).reshape(b, t, self.D))

    def forward(self, tokens):
        x = self.embed(tokens)
        x = x + F.dropout(self.attention(self.ln1(x)), self.P, self.training)
        x = x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh")), self.P, self.training)
        return self.head(self.ln_f(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--models", nargs="?", const="alexnet,vgg19_bn,resnet50,mobilenet_v2,gnmt,ncf,gpt")
    ap.add_argument("--variants", default="eager,compile")
    ap.add_argument("--json")
    ap.add_argument("--profile", action="store_true",
                    help="record the models' steps with torch.profiler (JSON lines to --json)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    t = args.min_time
    if not torch.cuda.is_available():
        raise SystemExit("torch_cuda_peer.py: PyTorch sees no CUDA device")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    if args.profile:
        import torch_cuda_models
        names = (args.models or "alexnet,vgg19_bn,resnet50,mobilenet_v2,gnmt,ncf,gpt").split(",")
        torch_cuda_models.profile(names, args.variants.split(","), args.json or "/dev/stdout", args.steps, args.top)
        return
    if args.models:
        import json
        import torch_cuda_models
        torch_cuda_models.run(args.models.split(","), args.variants.split(","))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                           "rows": torch_cuda_models.ROWS}, f, indent=1)
        return
    x, y = torch.randn(M64, device=dev), torch.empty(M64, device=dev)
    z = torch.randn(M64, device=dev)
    timed("copy_64M", lambda: y.copy_(x), t, bytes_=8.0 * M64)
    timed("add_64M", lambda: x + z, t, bytes_=12.0 * M64)
    timed("gelu9_64M", lambda: gelu_9ops(x), t, bytes_=8.0 * M64)
    timed("gelu_64M (F.gelu tanh, one kernel)", lambda: F.gelu(x, approximate="tanh"), t, bytes_=8.0 * M64)
    del x, y, z
    r = torch.randn(*ROWS, device=dev)
    w, b = torch.randn(ROWS[1], device=dev), torch.randn(ROWS[1], device=dev)
    timed("softmax[16384x4096]", lambda: torch.softmax(r, -1), t, bytes_=8.0 * r.numel())
    timed("layer_norm[16384x4096]", lambda: F.layer_norm(r, (ROWS[1],), w, b), t, bytes_=8.0 * r.numel())
    del r
    for dt, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        q, k, v, g = (torch.randn(8, 12, 1024, 64, device=dev).to(dt) for _ in range(4))
        for x in (q, k, v):
            x.requires_grad_()

        def attention(q=q, k=k, v=v, g=g):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(y, (q, k, v), g)
        timed(f"attention_causal[8x12x1024x64]_{name}/torch", attention, t,
              flops=3.5 * 4.0 * 8 * 12 * 1024 * 1024 * 64 / 2)
        del q, k, v, g
    for dt, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        a, c = torch.randn(N, N, device=dev).to(dt), torch.randn(N, N, device=dev).to(dt)
        timed(f"matmul_4096_{name}/torch", lambda: a @ c, t, flops=2.0 * N ** 3)

    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(784, 256).to(dev), torch.nn.Linear(256, 10).to(dev)
    opt = torch.optim.SGD(list(fc1.parameters()) + list(fc2.parameters()), 0.01)
    xm, ym = torch.randn(256, 784, device=dev), torch.randint(0, 10, (256,), device=dev)
    mlp_flops = 2 * (2.0 * 256 * 784 * 256) + 3 * (2.0 * 256 * 256 * 10)
    timed("mlp_train_step[256]", step(opt, lambda: F.cross_entropy(fc2(F.relu(fc1(xm))), ym)), t, flops=mlp_flops)

    net = Digits().to(dev)
    opt = torch.optim.Adam(net.parameters(), 3e-3)
    xd, yd = torch.rand(32, 1, 8, 8, device=dev), torch.randint(0, 10, (32,), device=dev)
    timed("digits_train_step[32]", step(opt, lambda: F.cross_entropy(net(xd), yd)), t)

    blk = Block().to(dev)
    opt = torch.optim.SGD(blk.parameters(), 0.01)
    xb, tb = torch.randn(8, 64, 32, 32, device=dev), torch.randn(8, 64, 32, 32, device=dev)
    timed("resnet_block_train_step[8]", step(opt, lambda: F.mse_loss(blk(xb), tb)), t,
          flops=5 * 2.0 * 8 * 64 * 32 * 32 * 64 * 9)

    enc = Encoder().to(dev)
    opt = torch.optim.AdamW(enc.parameters(), 1e-3)
    E = Encoder
    tok = torch.randint(0, E.V, (E.B, E.T), device=dev)
    nxt = torch.randint(0, E.V, (E.B * E.T,), device=dev)
    n, d = float(E.B * E.T), float(E.D)
    flops = 3 * (2 * n * d * (3 * d + d + 2 * E.HID + E.V) + 2 * 2.0 * E.B * E.T * E.T * d)
    timed("transformer_block_train_step[16x128]",
          step(opt, lambda: F.cross_entropy(enc(tok).reshape(E.B * E.T, E.V), nxt)), t, flops=flops)


if __name__ == "__main__":
    main()
