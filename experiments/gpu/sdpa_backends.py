"""Which PyTorch SDPA backend transformers' default `sdpa` attention runs on this GPU, and what each backend
costs: whole-model steps under each backend forced (`torch.nn.attention.sdpa_kernel`) and under the
default, one SDPA call's host and device time per backend, and the host's dispatch cost of a tiny op.

Two lendings of the same H100 type (torch 2.11, transformers 5.17, the same `measure_modern` script) timed
Llama-3-8B's bf16 SDPA decode at 21.5 and 42.7 ms while its eager decode took 33 ms on both; the second
lease's profile ran cuDNN's SDPA kernels. This separates the backend from the host.

    python -m experiments.gpu.sdpa_backends --out experiments/data/measured/h100/sdpa_backends   # on a GPU

Method: models built as `measure_modern.build_model` (random bf16 weights on the GPU), steps as
`measure_modern.model_step`, timed by `measure_modern.call_ms` (CUDA events around one call, mean of the
fastest half). `sdpa_call` rows: 200 back-to-back calls of one decode-shaped SDPA; `host_us` = wall time of
the loop / 200 without synchronising inside it (the host's cost per call when the GPU keeps up),
`device_us` = CUDA events around the same loop / 200 (the device's pace, or the host's where the host is
slower). `tiny_add` times `torch.add(a, b, out=c)` on 16
elements the same way: the host's per-op dispatch and launch cost. `grow_call` rows: GROW_CALLS successive
decode-shaped SDPA calls whose keys and values are one token longer each call (built beforehand, as a
growing cache hands them over), each timed by the wall clock with a synchronize on both sides:
`host_us` is the first call, `device_us` the median of the others (a backend that builds an execution plan
per new shape pays it on every call); `seq` is the first call's key length.
"""
from __future__ import annotations

import argparse
import csv
import json
import platform
import time
from contextlib import nullcontext
from pathlib import Path

from experiments.gpu.measure_modern import build_model, call_ms, loop_us, model_step, parse_models

MODELS = [("llama3_8b", None), ("qwen3_1_7b", None)]
#: (mode, batch, seq)
RUNS = [("decode", 1, 1024), ("decode", 8, 2048), ("decode", 32, 1024), ("inf", 1, 512), ("inf", 4, 1024)]
BACKENDS = ["default", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"]
#: decode-shaped SDPA calls over a growing key length: (batch, heads, kv_heads, head_dim, first key length)
GROW_SHAPES = [(8, 32, 8, 128, 2048), (1, 32, 8, 128, 1024), (64, 16, 16, 128, 512), (8, 8, 4, 256, 2048),
               (128, 28, 4, 128, 256)]
GROW_CALLS = 8
COLUMNS = ["what", "model", "mode", "batch", "seq", "backend", "measured_ms", "host_us", "device_us", "note"]


def backend_ctx(torch, name: str):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return nullcontext() if name == "default" else sdpa_kernel([getattr(SDPBackend, name)])


def grow_calls(torch):
    """`grow_call` rows (module docstring), per GROW_SHAPES shape and backend."""
    F = torch.nn.functional
    for b, h, kvh, d, kv0 in GROW_SHAPES:
        q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
        for j, name in enumerate(BACKENDS):  # each backend its own key lengths: no plan another one built
            first = kv0 + j * GROW_CALLS
            kvs = [[torch.randn(b, kvh, first + i, d, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
                   for i in range(GROW_CALLS)]
            row = {"what": "grow_call", "batch": b, "seq": first, "backend": name, "note": f"heads {h}/{kvh} dim {d}"}
            times = []
            try:
                with backend_ctx(torch, name), torch.no_grad():
                    for k, v in kvs:
                        torch.cuda.synchronize()
                        t = time.perf_counter()
                        F.scaled_dot_product_attention(q, k, v, enable_gqa=h != kvh)
                        torch.cuda.synchronize()
                        times.append((time.perf_counter() - t) * 1e6)
                rest = sorted(times[1:])
                row.update(host_us=round(times[0], 1), device_us=round(rest[len(rest) // 2], 1))
            except RuntimeError as e:
                row["note"] += "; " + str(e).splitlines()[0][:80]
            yield row
            del kvs
            torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=300.0, help="stop starting new models after this")
    ap.add_argument("--models", default="",
                    help="comma-separated config[:layers] of examples/configs (default: MODELS)")
    args = ap.parse_args(argv)
    models = parse_models(args.models, MODELS)
    import torch
    import transformers

    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version(), "transformers": transformers.__version__, "cpu": cpu}
    (out / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    F = torch.nn.functional
    with (out / "backends.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        a, b, c = (torch.randn(16, device="cuda") for _ in range(3))
        host, dev = loop_us(torch, lambda: torch.add(a, b, out=c), 2000)
        w.writerow({"what": "tiny_add", "host_us": round(host, 2), "device_us": round(dev, 2)})
        q = torch.randn(8, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(8, 8, 2048, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        for name in BACKENDS:
            try:
                with backend_ctx(torch, name), torch.no_grad():
                    host, dev = loop_us(torch, lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
                w.writerow({"what": "sdpa_call", "batch": 8, "seq": 2048, "backend": name, "host_us": round(host, 2),
                            "device_us": round(dev, 2)})
            except RuntimeError as e:
                w.writerow({"what": "sdpa_call", "batch": 8, "seq": 2048, "backend": name, "note": str(e)[:100]})
        f.flush()
        for row in grow_calls(torch):
            w.writerow(row)
        f.flush()
        for model_name, layers in models:
            if time.time() - t0 > args.budget_s:
                break
            model, _ = build_model(torch, model_name, layers, "bf16", "sdpa")
            step = None
            for mode, batch, seq in RUNS:
                for name in BACKENDS:
                    row = {"what": "model", "model": model_name, "mode": mode, "batch": batch, "seq": seq, "backend": name}
                    try:
                        with backend_ctx(torch, name):
                            step = model_step(torch, model, mode, batch, seq)
                            row["measured_ms"] = round(call_ms(torch, step)[0], 4)
                    except RuntimeError as e:  # a backend that refuses the shape or the mask
                        row["note"] = str(e).splitlines()[0][:100]
                    w.writerow(row)
                    f.flush()
                    print(row, flush=True)
            del model, step  # the step's closure holds the model too
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
