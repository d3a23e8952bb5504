"""Time PyTorch `scaled_dot_product_attention` kernels on this GPU: the backends transformers' SDPA path
reaches (flash with `is_causal`, memory-efficient with an explicit mask or in fp32), grouped-query
(`enable_gqa`), and decode (one query token against a cache), forward and forward+backward.

Timing as `../shared/datasets/measured/h100_sdpa_fp8`: CUDA events around one eager call, 3 warm-ups,
up to 20 calls; `latency_ms` the mean of the fastest 20%. `backend` is the kernel the profiler saw.

    python -m experiments.gpu.sdpa_collect --out experiments/data/measured/h100/sdpa/kernels.csv
"""
from __future__ import annotations

import argparse
import csv
import json

import torch
import torch.nn.functional as F

DT = {"bf16": torch.bfloat16, "fp32": torch.float32}


def timed(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    k = max(1, len(ts) // 5)
    return sum(ts[:k]) / k, ts[len(ts) // 2]


def backend_of(fn) -> str:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = " ".join(e.key for e in prof.key_averages()).lower()
    for key, name in (("flash", "flash"), ("fmha", "efficient"), ("efficient", "efficient"), ("cutlass", "efficient"),
                      ("cudnn", "cudnn")):
        if key in names:
            return name
    return "math"


def case(op, dtype, b, h, kvh, sq, skv, d, mask):
    """mask: causal (is_causal=True), none, or explicit (a boolean causal mask)."""
    dt = DT[dtype]
    train = op == "sdpa_fwd_bwd"
    q = torch.randn(b, h, sq, d, device="cuda", dtype=dt, requires_grad=train)
    k = torch.randn(b, kvh, skv, d, device="cuda", dtype=dt, requires_grad=train)
    v = torch.randn(b, kvh, skv, d, device="cuda", dtype=dt, requires_grad=train)
    kw = {"enable_gqa": kvh != h}
    if mask == "causal":
        kw["is_causal"] = True
    elif mask == "explicit":
        kw["attn_mask"] = torch.ones(sq, skv, device="cuda", dtype=torch.bool).tril(skv - sq)
    g = torch.randn(b, h, sq, d, device="cuda", dtype=dt) if train else None

    def fn():
        o = F.scaled_dot_product_attention(q, k, v, **kw)
        if train:
            o.backward(g)

    ms, med = timed(fn)
    return ms, med, backend_of(fn)


def grid():
    for dtype in ("bf16", "fp32"):
        for op in ("sdpa_fwd", "sdpa_fwd_bwd"):
            for (b, h, kvh, s, d) in ((1, 32, 8, 2048, 128), (4, 32, 8, 1024, 128), (8, 16, 16, 512, 64),
                                      (2, 12, 12, 1024, 64), (1, 32, 32, 4096, 128), (16, 12, 12, 256, 64),
                                      (4, 28, 4, 2048, 128), (2, 16, 16, 2048, 256)):
                for mask in ("causal", "none", "explicit"):
                    if dtype == "fp32" and s * b > 8192:
                        continue
                    yield op, dtype, b, h, kvh, s, s, d, mask
    for dtype in ("bf16",):  # decode: one query token, no mask
        for (b, h, kvh, d) in ((1, 32, 8, 128), (8, 32, 8, 128), (32, 32, 8, 128), (1, 32, 32, 128),
                               (16, 12, 12, 64), (64, 32, 8, 128)):
            for kv in (512, 2048, 8192):
                yield "sdpa_fwd", dtype, b, h, kvh, 1, kv, d, "none"
    for (b, h, kvh, d) in ((8, 32, 8, 128), (16, 12, 12, 64)):
        for kv in (512, 4096):
            yield "sdpa_fwd", "fp32", b, h, kvh, 1, kv, d, "none"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows = []
    for c in grid():
        try:
            ms, med, be = case(*c)
        except RuntimeError as e:  # a backend that refuses the case (or memory)
            print("skip", c, str(e).splitlines()[0])
            torch.cuda.empty_cache()
            continue
        rows.append(dict(zip(("op", "dtype", "batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim", "mask"), c),
                         latency_ms=round(ms, 5), median_ms=round(med, 5), backend=be))
        print(rows[-1], flush=True)
        torch.cuda.empty_cache()
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    import transformers

    with open(a.out.replace(".csv", "_env.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "transformers": transformers.__version__}, f)


if __name__ == "__main__":
    main()
