"""Which GPU kernels torch.bmm and F.linear launch for each shape, read off a torch.profiler trace.

The GEMM prior picks tiles by minimising time, except for fp32 torch.bmm, whose tiles cuBLAS's batched
heuristic fixes per architecture (`hybridperf.priors.constants.BATCHED_SGEMM_TRACES`, read off NeuSight's
kernel traces for Pascal and Ampere). This script gives the same facts for the GPU it runs on: one row
per (shape, kernel) with the kernel's name, grid, block and profiler duration. The table is used
leave-one-GPU-out: a GPU is never scored with tiles read off its own trace. `traced_tiles` reads the
tiles back (`experiments/kernels/priors_report.py` checks the library's table against them).

    python -m experiments.gpu.kernel_trace --out experiments/out/kernel_trace.csv     # on a GPU machine
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd

from experiments.common import add_out_argument


def shapes() -> list[tuple]:
    """(op, B, M, N, K) in NeuSight's naming (C[M,K] = A[M,N] @ B[N,K]): attention's two bmm at several
    sequence lengths and head counts, and transformer-layer linears."""
    rows = []
    for s in (128, 256, 512, 1024, 2048, 4096):
        for b in (16, 48, 128):
            rows += [("bmm", b, s, 64, s), ("bmm", b, s, s, 64), ("bmm", b, s, 128, s), ("bmm", b, s, s, 128)]
    for t in (512, 2048, 8192):
        for h, f in ((1024, 4096), (2560, 10240)):
            rows += [("linear", 1, t, h, h), ("linear", 1, t, h, f), ("linear", 1, t, f, h)]
    return rows


def traced_tiles(trace_csv: Path) -> dict:
    """{arch: {device: (rows, cols) tiles}} of the fp32 torch.bmm kernels in a trace this script wrote,
    kept to the tile sizes of `hybridperf.priors.gemm.TILES`, in both orientations (the xmma names are
    rows x columns, the cutlass SIMT names' orientation is not established, and Hopper ran both)."""
    from hybridperf.devices import get_device
    from hybridperf.priors.gemm import TILES

    df = pd.read_csv(trace_csv)
    df = df[(df["op"] == "bmm") & (df["dtype"] == "float32")]
    ours = {(t[0], t[1]) for t in TILES}
    out: dict = {}
    for dev, g in df.groupby("device"):
        sizes = g["kernel"].str.extract(r"(?:tilesize|sgemm_)(\d+)x(\d+)").dropna().astype(int)
        tiles = {t for a, b in sizes.itertuples(index=False) for t in ((a, b), (b, a))} & ours
        out.setdefault(get_device(dev).arch, {})[dev] = tuple(sorted(tiles))
    return out


def trace(torch, op: str, b: int, m: int, n: int, k: int, dtype, repeats: int = 3) -> list[dict]:
    """Kernels one call launches (the last of `repeats` profiled calls), with grid, block and duration."""
    dev = "cuda"
    if op == "bmm":
        a, w = torch.randn(b, m, n, device=dev, dtype=dtype), torch.randn(b, n, k, device=dev, dtype=dtype)
        fn = lambda: torch.bmm(a, w)  # noqa: E731
    else:
        a, w = torch.randn(m, n, device=dev, dtype=dtype), torch.randn(k, n, device=dev, dtype=dtype)
        bias = torch.randn(k, device=dev, dtype=dtype)
        fn = lambda: torch.nn.functional.linear(a, w, bias)  # noqa: E731
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel"]
    per_call = len(kernels) // repeats
    last = sorted(kernels, key=lambda e: e["ts"])[-per_call:] if per_call else []
    return [{"op": op, "B": b, "M": m, "N": n, "K": k, "kernel": e["name"],
             "grid": "x".join(str(v) for v in e.get("args", {}).get("grid", [])),
             "block": "x".join(str(v) for v in e.get("args", {}).get("block", [])),
             "dur_us": e.get("dur")} for e in last]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_out_argument(ap, "kernel_trace.csv")
    ap.add_argument("--dtypes", default="float32,float16", help="comma-separated torch dtypes")
    a = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("kernel_trace needs a CUDA GPU", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False  # NeuSight's fp32 (and `hybridperf collect`'s)
    rows = []
    for dt in a.dtypes.split(","):
        for op, b, m, n, k in shapes():
            rows += [{**r, "dtype": dt} for r in trace(torch, op, b, m, n, k, getattr(torch, dt))]
    df = pd.DataFrame(rows)
    df.insert(0, "device", torch.cuda.get_device_name())
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(a.out, index=False)
    short = df.assign(kernel=df["kernel"].str.slice(0, 70))
    print(short.groupby(["dtype", "op", "kernel"]).size().to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
