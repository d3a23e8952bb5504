"""Measure kernels in aiconfigurator's perf-table schema on this machine, so that a new GPU's rows can
be fed straight to `predict-kernels --calibration` (`hybridperf collect --schema aiconfigurator`).

What each op runs (PyTorch's own kernels, not a serving engine's; inputs created once, seeded):

* `gemm`: a framework's Linear on a `x[m, k]` activation and an `(n, k)` weight, no bias:
    - bfloat16 / float16 / float32: `torch.nn.functional.linear(x, w)`;
    - fp8: as aiconfigurator's fp8 rows, the bf16 activation quantized per tensor (dynamic amax scale)
      then `torch._scaled_mm` with per-tensor scales and bf16 output, on GPUs with fp8 tensor cores
      (compute capability 8.9+); n and k must be multiples of 16, m is padded to a multiple of 16.
* `context_attention`: causal `scaled_dot_product_attention` over `batch_size` sequences of `isl`
  tokens, grouped-query heads by `enable_gqa` (repeated K/V on a torch without it), `attn_dtype`.
* `generation_attention`: one query token per sequence against a cache of `step` tokens plus itself.

A row this machine cannot run (fp8 without fp8 tensor cores, a sliding window, an fp8 KV cache, out of
memory) is skipped with its reason, as the NeuSight collector skips shapes. Timing as that collector
(`collector.time_calls`, the mean of the fastest calls) except on CUDA, where `graph_calls` back-to-back
calls are captured in a CUDA graph and replayed between two events, as aiconfigurator's collectors time
(no Python or launch gaps); eager where capture fails. torch is imported only inside `collect_aic`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.csvio import read_table
from hybridperf.datasets.collector import (ProgressBar, cpu_name, fastest_mean, import_torch, measure_to_csv,
                                           resolve_device, time_calls)
from hybridperf.errors import InputError

#: the float dtype names `collect` measures (gemm and attention rows), as torch's dtype names
FLOAT_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
                "float32": "float32", "fp32": "float32"}
#: fp8's largest e4m3 value: the per-tensor scale maps the activation's amax onto it
E4M3_MAX = 448.0


class Unsupported(Exception):
    """A row this machine or torch cannot run; the message says why."""


@dataclass(frozen=True)
class AicOp:
    """One collectable op: the columns its rows need, the text columns' defaults, and its builder
    `(torch, row, device) -> (fn, args, kernel_source)`."""

    columns: tuple[str, ...]
    defaults: dict
    build: object


def _ints(row, cols) -> list[int]:
    return [int(row[c]) for c in cols]


def _float_dtype(torch, name: str, what: str):
    key = FLOAT_DTYPES.get(str(name).strip().lower())
    if key is None:
        raise Unsupported(f"{what} {name} cannot be collected by torch here (bfloat16, float16 or float32; "
                          "fp8 only for gemm)")
    return getattr(torch, key)


def has_fp8(torch, device: str) -> bool:
    """Whether torch can run fp8 GEMMs (`torch._scaled_mm`) on `device`: a CUDA GPU of compute
    capability 8.9+ (Ada, Hopper, Blackwell) and a torch with float8_e4m3fn."""
    if not device.startswith("cuda") or not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return False
    return tuple(torch.cuda.get_device_capability(torch.device(device))) >= (8, 9)


def _gemm(torch, row, device):
    m, n, k = _ints(row, ("m", "n", "k"))
    dt = str(row["gemm_dtype"]).strip().lower()
    if dt != "fp8":
        dtype = _float_dtype(torch, dt, "gemm_dtype")
        x = torch.randn(m, k, device=device, dtype=dtype)
        w = torch.randn(n, k, device=device, dtype=dtype)
        return torch.nn.functional.linear, (x, w), "torch.nn.functional.linear"
    if not has_fp8(torch, device):
        raise Unsupported(f"fp8 GEMMs need a CUDA GPU with fp8 tensor cores (compute capability 8.9+); this is {device}")
    if n % 16 or k % 16:
        raise Unsupported("fp8 GEMMs (torch._scaled_mm) need n and k multiples of 16")
    x = torch.randn(-(-m // 16) * 16, k, device=device, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=device, dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    one = torch.ones((), device=device, dtype=torch.float32)

    def linear_fp8(x, w, scale_w):
        xq, scale_x = quantize_fp8(torch, x)
        return torch._scaled_mm(xq, w.t(), scale_a=scale_x, scale_b=scale_w, out_dtype=torch.bfloat16)

    return linear_fp8, (x, w, one), "torch._scaled_mm"


def quantize_fp8(torch, x):
    """(e4m3 tensor, fp32 scale): dynamic per-tensor quantization in as few passes as torch allows, one
    max reduction and one scaled cast written straight to fp8, as the engines' fused quantization does
    (vLLM's `scaled_fp8_quant`: a max reduction, then a quantize kernel). Materializing `x.abs()` and an
    fp32 copy would put two more full passes into every row's time."""
    scale = (torch.linalg.vector_norm(x, ord=float("inf"), dtype=torch.float32) / E4M3_MAX).clamp_min(1e-12)
    xq = torch.empty(x.shape, device=x.device, dtype=torch.float8_e4m3fn)
    torch.div(x, scale, out=xq)
    return xq, scale


def _sdpa(torch, q, k, v, causal: bool):
    """(fn, args): SDPA with grouped-query heads by `enable_gqa`, or K/V repeated on a torch without it."""
    F = torch.nn.functional
    if q.shape[1] == k.shape[1]:
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)), (q, k, v)
    try:
        F.scaled_dot_product_attention(q[:1, :, :1], k[:1, :, :1], v[:1, :, :1], enable_gqa=True)
    except TypeError:  # torch < 2.5
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)), (q, k, v)
    return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)), (q, k, v)


def _attention_inputs(torch, row, device, q_len: int, kv_len: int):
    b, h, kvh, d = _ints(row, ("batch_size", "num_heads", "num_key_value_heads", "head_dim"))
    if h % kvh:
        raise Unsupported(f"num_heads {h} is not a multiple of num_key_value_heads {kvh}")
    if float(row["window_size"]) > 0:
        raise Unsupported("sliding-window attention is not collected (SDPA would need an explicit mask)")
    dtype = _float_dtype(torch, row["attn_dtype"], "attn_dtype")
    if FLOAT_DTYPES.get(str(row["kv_cache_dtype"]).strip().lower()) != str(dtype).split(".")[-1]:
        raise Unsupported(f"kv_cache_dtype {row['kv_cache_dtype']} differs from attn_dtype {row['attn_dtype']}; "
                          "torch SDPA runs one dtype")
    kw = {"device": device, "dtype": dtype}
    return (torch.randn(b, h, q_len, d, **kw), torch.randn(b, kvh, kv_len, d, **kw),
            torch.randn(b, kvh, kv_len, d, **kw))


def _context(torch, row, device):
    isl = int(row["isl"])
    if float(row["step"]) > 0:
        raise Unsupported("context attention over a cached prefix (step > 0) is not collected")
    fn, args = _sdpa(torch, *_attention_inputs(torch, row, device, isl, isl), causal=True)
    return fn, args, "torch_sdpa"


def _generation(torch, row, device):
    isl, step = int(row["isl"]), int(row["step"])
    if isl != 1 or step < 1:
        raise Unsupported("generation attention rows need isl 1 and step >= 1 (one new token against the cache)")
    fn, args = _sdpa(torch, *_attention_inputs(torch, row, device, 1, step + 1), causal=False)
    return fn, args, "torch_sdpa"


_ATTN = ("batch_size", "num_heads", "num_key_value_heads", "head_dim")
_ATTN_DEFAULTS = {"attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "window_size": 0, "step": 0, "isl": 1}
#: op_name -> what `collect_aic` runs for it (moe is a serving engine's fused kernels: not collectable)
AIC_OPS = {
    "gemm": AicOp(("m", "n", "k", "gemm_dtype"), {}, _gemm),
    "context_attention": AicOp((*_ATTN, "isl"), _ATTN_DEFAULTS, _context),
    "generation_attention": AicOp((*_ATTN, "step"), _ATTN_DEFAULTS, _generation),
}
_TEXT = ("gemm_dtype", "attn_dtype", "kv_cache_dtype")


def load_aic_shapes(path: str | Path) -> pd.DataFrame:
    """Rows to measure (aiconfigurator columns, e.g. from `hybridperf suggest --schema aiconfigurator`),
    checked: a known collectable op_name, the op's columns, positive whole sizes. One-line InputError."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such shapes file")
    df = read_table(path, "shapes file")
    if "op_name" not in df.columns:
        raise InputError(f"{path}: no op_name column (aiconfigurator schema: {', '.join(AIC_OPS)})")
    df = df.drop(columns=[c for c in ("latency", "pred_ms", "pred_lo_ms", "pred_hi_ms") if c in df.columns])
    if df.empty:
        raise InputError(f"{path}: no shapes to measure")
    ops = df["op_name"].astype(str).str.strip().str.lower()
    bad = sorted(set(ops) - set(AIC_OPS))
    if bad:
        raise InputError(f"{path}: op_name {bad[:3]} cannot be collected; collectable: {', '.join(AIC_OPS)}")
    df["op_name"] = ops.to_numpy()
    for op in sorted(set(ops)):
        spec, m = AIC_OPS[op], (ops == op).to_numpy()
        for c, v in spec.defaults.items():
            df[c] = df[c].where(df[c].notna() | ~m, v) if c in df.columns else np.where(m, v, None)
        for c in spec.columns:
            if c not in df.columns or df.loc[m, c].isna().any():
                raise InputError(f"{path}: {op} rows need a {c} value")
            if c in _TEXT:
                continue
            v = pd.to_numeric(df.loc[m, c], errors="coerce").to_numpy(dtype=np.float64)
            ok = np.isfinite(v) & (v > 0) & (v == np.round(v))
            if not ok.all():
                line = int(np.flatnonzero(m)[np.argmax(~ok)]) + 2
                raise InputError(f"{path}:{line}: {op} needs a positive whole {c}, got {df.loc[m, c].iloc[np.argmax(~ok)]!r}")
    return df.reset_index(drop=True)


def time_graph(torch, fn, args, *, warmup: int, repeats: int, graph_calls: int = 10) -> list[float]:
    """Per-call latencies (ms) on CUDA: `graph_calls` calls captured in one CUDA graph, each replay
    timed with CUDA events and divided by `graph_calls`."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the capture stream (cuBLAS workspaces, lazy init)
        for _ in range(max(warmup, 1)):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(graph_calls):
            fn(*args)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(repeats):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        out.append(float(start.elapsed_time(end)) / graph_calls)
    return out


def _timed(torch, fn, args, cuda: bool, warmup: int, repeats: int) -> tuple[list[float], str]:
    if cuda:
        try:
            return time_graph(torch, fn, args, warmup=warmup, repeats=repeats), "cuda_graph"
        except RuntimeError:  # a kernel that cannot be captured: timed eagerly, as NeuSight's collector does
            torch.cuda.synchronize()
    return time_calls(torch, fn, args, cuda=cuda, warmup=warmup, repeats=repeats), "cuda_events" if cuda else "cpu"


def collect_aic(shapes: pd.DataFrame, *, device: str | None = None, warmup: int = 5, repeats: int = 25,
                fastest: int = 5, progress: bool = True) -> pd.DataFrame:
    """Measure every row of `shapes` (`load_aic_shapes`' output). Returns the rows with aiconfigurator's
    `kernel_source`, `framework` (torch), `version`, `latency` (ms) and `device`, `torch_version`,
    `timing`; after the call `collect_aic.last_report` lists the skipped rows and why."""
    if repeats < 1 or not 1 <= fastest <= repeats or warmup < 0:
        raise InputError(f"need --repeats >= 1, 1 <= --fastest <= --repeats and --warmup >= 0 "
                         f"(got {repeats}, {fastest}, {warmup})")
    torch = import_torch()
    dev = resolve_device(torch, device)
    cuda = dev.startswith("cuda")
    name = torch.cuda.get_device_name(torch.device(dev)).strip() if cuda else cpu_name()
    version = torch.__version__.split("+")[0]
    torch.manual_seed(0)
    rows, report = [], []
    with ProgressBar(progress, len(shapes), name) as advance, torch.no_grad():
        for i, (_, row) in enumerate(shapes.iterrows()):
            try:
                fn, args, source = AIC_OPS[row["op_name"]].build(torch, row, dev)
                samples, timing = _timed(torch, fn, args, cuda, warmup, repeats)
                del args
            except (Unsupported, RuntimeError, MemoryError) as e:  # also OOM, or a kernel the backend lacks
                msg = str(e).splitlines()[0] if str(e) else type(e).__name__
                report.append(f"{row['op_name']} (row {i + 1}): {msg}")
                if cuda:
                    torch.cuda.empty_cache()
                advance()
                continue
            rows.append({**row.to_dict(), "kernel_source": source, "framework": "torch", "version": version,
                         "latency": fastest_mean(samples, fastest), "device": name, "torch_version": version,
                         "timing": timing})
            advance()
    collect_aic.last_report = report
    if not rows:
        raise InputError(f"no kernel could be measured on {name}" + (f": {report[0]}" if report else ""))
    return pd.DataFrame(rows)


collect_aic.last_report = []


def collect_aic_to_csv(shapes_path: str | Path, out: str | Path, **kw) -> pd.DataFrame:
    """load_aic_shapes + collect_aic, written to `out` (CSV). Returns the table."""
    shapes = load_aic_shapes(shapes_path)
    return measure_to_csv(out, lambda: collect_aic(shapes, **kw))


__all__ = ["AIC_OPS", "load_aic_shapes", "collect_aic", "collect_aic_to_csv", "time_graph", "has_fp8", "quantize_fp8"]
