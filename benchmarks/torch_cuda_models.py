# benchmarks/torch_cuda_models.py -- the example models (examples/models/zoo.h) in PyTorch, for
# kiln_cuda_bench's cuda/model/NAME/VARIANT rows under the same names (torch_cuda_peer.py
# --models runs them): torchvision's alexnet, vgg19_bn, resnet50 and mobilenet_v2, and a GPT-2
# small, a GNMT-style translator and NeuMF written as kiln's examples are, at full size with
# the batches of examples::gpu_benchmark_batch and the same optimizers. Variants: eager and
# compile (torch.compile of the model; the optimizer runs eagerly), each with TF32 off (kiln's
# default), with TF32 allowed (_tf32) and under autocast(bf16) (_bf16). Three warm-up steps
# (the first compiles), then 10 timed, each ending in a synchronize; peak_GB is
# torch.cuda.max_memory_allocated over them. profile_row records three steps with
# torch.profiler instead (torch_cuda_peer.py --profile). Not part of the build or the tests.
import math
import time

import torch
import torch.nn.functional as F

dev = torch.device("cuda", 0)
BATCH = {"alexnet": 128, "vgg19_bn": 64, "resnet50": 64, "mobilenet_v2": 64, "gnmt": 64, "ncf": 65536, "gpt": 8}


# ---- GPT-2 small, as examples/models/gpt.h: pre-norm blocks, tanh GELU, tied head ----------
class Block(torch.nn.Module):
    def __init__(self, d, heads, p):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.heads, self.p = heads, p

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.reshape(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).chunk(3, -1))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0, is_causal=True)
        x = x + F.dropout(self.proj(y.transpose(1, 2).reshape(b, t, c)), self.p, self.training)
        return x + F.dropout(self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh")), self.p, self.training)


class GPT(torch.nn.Module):
    def __init__(self, vocab=50257, context=1024, d=768, heads=12, layers=12, p=0.1):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(vocab, d), torch.nn.Embedding(context, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads, p) for _ in range(layers))
        self.ln_f, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight
        self.p = p
        for name, w in self.named_parameters():
            if not (name.endswith(".bias") or "ln" in name):
                torch.nn.init.normal_(w, 0.0, 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight")) else 0.02)

    def forward(self, idx):
        x = F.dropout(self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device)), self.p, self.training)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


# ---- GNMT-style, as examples/models/others.h -------------------------------------------------
class GNMT(torch.nn.Module):
    def __init__(self, vocab=32000, hidden=1024, layers=4, p=0.2):
        super().__init__()
        H = hidden
        self.src_embed, self.tgt_embed = torch.nn.Embedding(vocab, H), torch.nn.Embedding(vocab, H)
        self.enc_first = torch.nn.LSTM(H, H // 2, batch_first=True, bidirectional=True)
        self.enc_rest = torch.nn.ModuleList(torch.nn.LSTM(H, H, batch_first=True) for _ in range(layers - 1))
        self.dec_first = torch.nn.LSTM(H, H, batch_first=True)
        self.dec_rest = torch.nn.ModuleList(torch.nn.LSTM(2 * H, H, batch_first=True) for _ in range(layers - 1))
        self.query, self.key = torch.nn.Linear(H, H, bias=False), torch.nn.Linear(H, H, bias=False)
        self.score, self.classifier = torch.nn.Linear(H, 1, bias=False), torch.nn.Linear(H, vocab)
        self.p = p

    def forward(self, src, tgt):
        h = F.dropout(self.enc_first(self.src_embed(src))[0], self.p, self.training)
        for i, lstm in enumerate(self.enc_rest):
            out = lstm(h)[0]
            h = F.dropout(out + h if i >= 1 else out, self.p, self.training)
        d = self.dec_first(self.tgt_embed(tgt))[0]
        e = self.score(torch.tanh(self.query(d).unsqueeze(2) + self.key(h).unsqueeze(1))).squeeze(3)
        context = torch.softmax(e, -1) @ h
        for i, lstm in enumerate(self.dec_rest):
            out = lstm(torch.cat([F.dropout(d, self.p, self.training), context], 2))[0]
            d = out + d if i >= 1 else out
        return self.classifier(F.dropout(d, self.p, self.training))


# ---- NeuMF, as examples/models/others.h ------------------------------------------------------
class NCF(torch.nn.Module):
    def __init__(self, users=138493, items=26744, factors=8, mlp=(64, 32, 16, 8)):
        super().__init__()
        E = torch.nn.Embedding
        self.gmf_user, self.gmf_item = E(users, factors), E(items, factors)
        self.mlp_user, self.mlp_item = E(users, mlp[0] // 2), E(items, mlp[0] // 2)
        layers = []
        for a, b in zip(mlp[:-1], mlp[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        self.mlp = torch.nn.Sequential(*layers)
        self.predict = torch.nn.Linear(factors + mlp[-1], 1)
        for e in (self.gmf_user, self.gmf_item, self.mlp_user, self.mlp_item):
            torch.nn.init.normal_(e.weight, 0, 0.01)

    def forward(self, user, item):
        gmf = self.gmf_user(user) * self.gmf_item(item)
        m = self.mlp(torch.cat([self.mlp_user(user), self.mlp_item(item)], 1))
        return self.predict(torch.cat([gmf, m], 1)).squeeze(1)


def task(name):
    """(model, batch tensors, loss(model, batch), optimizer factory) for one model, on dev."""
    n = BATCH[name]
    if name in ("alexnet", "vgg19_bn", "resnet50", "mobilenet_v2"):
        import torchvision
        model = getattr(torchvision.models, name)(num_classes=1000)
        batch = (torch.randn(n, 3, 224, 224, device=dev), torch.randint(0, 1000, (n,), device=dev))
        loss = lambda m, b: F.cross_entropy(m(b[0]), b[1])
        opt = lambda ps: torch.optim.SGD(ps, 0.01, momentum=0.9, weight_decay=1e-4)
    elif name == "gpt":
        model = GPT()
        tok = torch.randint(0, 50257, (n, 1025), device=dev)
        batch = (tok[:, :-1].contiguous(), tok[:, 1:].contiguous())
        loss = lambda m, b: F.cross_entropy(m(b[0]).reshape(-1, 50257), b[1].reshape(-1))
        opt = lambda ps: torch.optim.AdamW(ps, 3e-3, weight_decay=0.1)
    elif name == "gnmt":
        model = GNMT()
        src = torch.randint(1, 32000, (n, 50), device=dev)
        tgt = torch.cat([torch.zeros(n, 1, dtype=torch.long, device=dev), src.flip(1)], 1)
        batch = (src, tgt[:, :50].contiguous(), tgt[:, 1:].contiguous())
        loss = lambda m, b: F.cross_entropy(m(b[0], b[1]).reshape(-1, 32000), b[2].reshape(-1))
        opt = lambda ps: torch.optim.Adam(ps, 1e-3)
    elif name == "ncf":
        model = NCF()
        batch = (torch.randint(0, 138493, (n,), device=dev), torch.randint(0, 26744, (n,), device=dev),
                 torch.randint(0, 2, (n,), device=dev).float())
        loss = lambda m, b: F.binary_cross_entropy_with_logits(m(b[0], b[1]), b[2])
        opt = lambda ps: torch.optim.Adam(ps, 1e-3)
    else:
        raise ValueError(name)
    return model.to(dev), batch, loss, opt


ROWS = []  # each row timed: {"name", "ms", "peak_GB"}, for --json


def prepare(name, variant):
    """(step, model, opt, batch, loss_of): one training step of `name` as `variant` runs it."""
    compiled, tf32, bf16 = variant.startswith("compile"), variant.endswith("_tf32"), variant.endswith("_bf16")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(0)
    model, batch, loss_of, make_opt = task(name)
    model.train()
    opt = make_opt(model.parameters())
    run_model = torch.compile(model) if compiled else model

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of(run_model, batch)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()

    return step, model, opt, batch, loss_of


def model_row(name, variant, warmup=3, timed=10):
    step, model, opt, _, _ = prepare(name, variant)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats(0)
    first = time.perf_counter()
    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(timed):
        step()
    per = (time.perf_counter() - start) / timed
    peak = torch.cuda.max_memory_allocated(0) / 1e9
    ROWS.append({"name": f"cuda/model/{name}/{variant}", "ms": per * 1e3, "peak_GB": peak})
    print(f"cuda/model/{name}/{variant:<14} {per * 1e3:10.2f} ms  peak_GB={peak:.2f}  "
          f"warmup={start - first:.1f}s", flush=True)
    del model, opt, step
    torch.cuda.empty_cache()


def eager_floor(model, opt, batch, loss_of):
    """What PyTorch's eager step must move, as kiln's jit::EagerFloor counts it (jit/cost.h), from
    the tensors autograd saves (saved_tensors_hooks, by storage): activations written and read,
    saved parameters and inputs read again, parameters read three times (forward, the
    optimizer's read and write), gradients twice, optimizer state and buffers twice, inputs once."""
    params = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()}
    inputs = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in batch}
    saved = {}

    def pack(t):
        st = t.untyped_storage()
        saved[st.data_ptr()] = st.nbytes()
        return t

    opt.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_of(model, batch)
    loss.backward()
    opt.zero_grad(set_to_none=True)
    state = sum(v.untyped_storage().nbytes() for st in opt.state.values() for v in st.values()
                if torch.is_tensor(v) and v.dim() > 0)
    state += sum(b.untyped_storage().nbytes() for b in model.buffers())  # BatchNorm's running statistics
    activations = sum(n for ptr, n in saved.items() if ptr not in params and ptr not in inputs)
    reread = sum(n for ptr, n in saved.items() if ptr in params or ptr in inputs)
    p, i = sum(params.values()), sum(inputs.values())
    return {"activations": activations, "reread": reread, "parameters": p, "state": state, "inputs": i,
            "bytes": 2 * activations + reread + 5 * p + 2 * state + i}


def kernel_rows(trace_path, steps, top):
    """The device's kernels, copies and memsets in a torch.profiler Chrome trace: per name, calls
    and ms per step and share, by total time; and per step the kernels, the busy and total time."""
    import json
    events = json.load(open(trace_path))["traceEvents"]
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    by_name, spans = {}, []
    for e in device:
        r = by_name.setdefault(e["name"], [0, 0.0])
        r[0] += 1
        r[1] += e["dur"]
        spans.append((e["ts"], e["ts"] + e["dur"]))
    busy, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            busy += b - max(a, end)
            end = b
    total = sum(r[1] for r in by_name.values())
    rows = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]
    return {"device_kernels": sum(1 for e in device if e["cat"] == "kernel") / steps,
            "device_busy_ms": busy / 1e3 / steps, "device_total_ms": total / 1e3 / steps,
            "top": [{"name": n, "calls": c / steps, "ms": us / 1e3 / steps, "share": us / total if total else 0}
                    for n, (c, us) in rows]}


def profile_row(name, variant, warmup=3, steps=3, top=20):
    """One row of torch_cuda_peer.py --profile (the fields kiln_cuda_profile writes)."""
    import os
    import tempfile
    from torch.profiler import ProfilerActivity, profile
    step, model, opt, batch, loss_of = prepare(name, variant)
    for _ in range(warmup):
        step()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - start) / steps
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        row = kernel_rows(path, steps, top)
    row.update({"model": name, "variant": variant, "steps": steps, "wall_ms": wall * 1e3})
    if variant == "eager":
        row["eager_floor"] = eager_floor(model, opt, batch, loss_of)
    del model, opt, step
    torch.cuda.empty_cache()
    return row


def run(names, variants):
    for name in names:
        for variant in variants:
            try:
                model_row(name, variant)
            except Exception as e:  # a missing torchvision, an out-of-memory: the next row still runs
                print(f"cuda/model/{name}/{variant:<14} failed: {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)


def profile(names, variants, json_path, steps=3, top=20):
    """profile_row for each variant and model, a JSON object a line in json_path as each finishes
    (every model's eager step before the first torch.compile: a time limit cuts compiles first)."""
    import json
    for variant in variants:
        for name in names:
            try:
                row = profile_row(name, variant, steps=steps, top=top)
            except Exception as e:  # as run()'s
                print(f"profile {name}/{variant}: failed: {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
                continue
            with open(json_path, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"profile {name}/{variant}: {row['wall_ms']:.2f} ms a step, the device busy "
                  f"{row['device_busy_ms']:.2f} ms, {row['device_kernels']:.0f} kernels", flush=True)
