"""aiconfigurator's kernel tables (`aiconfigurator-core`'s `systems/data/<system>/<op>/<framework>/<version>/`)
as one canonical long table: gemm, context_attention, generation_attention and moe rows of every
framework and version of a system.

What the columns mean and how latency was timed (read off the package's collectors,
`collector/helper.py:benchmark_with_power` and `collector/<framework>/collect_*.py`):

- Every latency is milliseconds per call of one layer's op, captured in a CUDA graph (eager only
  where capture failed) after warmups and replayed `num_runs` times (more for fast kernels, up to
  3000), timed with CUDA events: GPU time of the kernels the framework launches for that op, without
  Python dispatch, but with the gaps between its kernels.
- `gemm`: `Linear(k, n)` of the framework on a bf16 activation `x[m, k]`; `k` is the reduction, `n`
  the output features, `m` the tokens. The row's time includes what the framework's linear does
  besides the matmul: quantizing the bf16 activation for fp8 (per-tensor, dynamic), fp8_block
  (1x128 groups) and nvfp4 (16-element blocks), and dequantizing for weight-only int4/int8. Weights
  smaller than L2 are replicated (up to 5 copies, time divided by the copies) so they come from DRAM.
  `gemm_dtype`: bfloat16, fp8 (per-tensor scales), fp8_block (128x128 weight blocks, 1x128 activation
  groups; DeepGEMM on Hopper/Blackwell), nvfp4 (Blackwell only), int4_wo / int8_wo (weight-only,
  bf16 activations), sq (SmoothQuant int8 x int8).
- `context_attention` (prefill): `batch_size` sequences of `isl` new tokens, `num_heads` query heads,
  `num_key_value_heads`, `head_dim`, causal; `step` is 0 in every table here (no cached prefix), and
  `window_size` > 0 a sliding window. `attn_dtype` is the math, `kv_cache_dtype` the cache's.
- `generation_attention` (decode): one token per sequence (`isl` = 1) against `step` cached tokens.
- `moe`: one MoE layer's experts on EP rank 0 of `moe_ep_size`, with `moe_tp_size`-way sharded experts:
  `num_tokens` is every token of the layer (routing, local grouped GEMMs, finalize). `distribution`
  `balanced` spreads tokens evenly over experts; `power_law_<alpha>` samples expert loads from a power
  law and puts the heaviest experts on rank 0 (the rank timed), so skew makes the timed rank slower;
  a power-law row is the mean over 5 sampled routings.

`collection_meta.yaml` beside a table says how it was collected. A `reuse.yaml` declares which other
version's table aiconfigurator reads for this version; a parquet file beside it is still its own
measurement (TensorRT-LLM 1.3.0rc23's fresh DeepSeek-V4 MoE shapes, vLLM 0.22.0's older B200 runs) and
is loaded like any other; a folder with only a `reuse.yaml` has nothing to load.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.errors import InputError

#: aiconfigurator system id -> the catalog's device name (torch's name for the GPU)
SYSTEM_DEVICES = {
    "a100_sxm": "NVIDIA A100-SXM4-80GB",
    "h100_sxm": "NVIDIA H100 80GB HBM3",
    "l40s": "NVIDIA L40S",
    "b200_sxm": "NVIDIA B200",
}

#: op family -> (op folder, table file stem)
TABLES = {
    "gemm": ("gemm", "gemm_perf"),
    "context_attention": ("attention", "context_attention_perf"),
    "generation_attention": ("attention", "generation_attention_perf"),
    "moe": ("moe", "moe_perf"),
}

#: op family -> the table's shape and dtype columns (as aiconfigurator names them)
SHAPE_COLUMNS = {
    "gemm": ("m", "n", "k", "gemm_dtype"),
    "context_attention": ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "beam_width",
                          "attn_dtype", "kv_cache_dtype", "step", "window_size"),
    "generation_attention": ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "beam_width",
                             "attn_dtype", "kv_cache_dtype", "step", "window_size"),
    "moe": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
            "moe_dtype", "distribution"),
}
#: op family -> its dtype column (the `dtype` of the canonical table)
DTYPE_COLUMN = {"gemm": "gemm_dtype", "context_attention": "attn_dtype", "generation_attention": "attn_dtype",
                "moe": "moe_dtype"}
#: defaults of columns older tables lack
DEFAULTS = {"window_size": 0, "beam_width": 1, "step": 0, "kv_cache_dtype": "bfloat16", "distribution": "balanced"}
META_COLUMNS = ("system", "framework", "version", "op_name", "kernel_source", "dtype")


def aiconfigurator_root(path: str | Path) -> Path:
    """Accept `../shared/datasets`, its `aiconfigurator/` folder or `systems/data`; return `systems/data`."""
    p = Path(path)
    for cand in (p / "aiconfigurator" / "systems" / "data", p / "systems" / "data", p):
        if cand.is_dir() and any((cand / s).is_dir() for s in SYSTEM_DEVICES):
            return cand
    raise InputError(f"{path}: not an aiconfigurator systems/data folder")


def table_files(root: str | Path, systems=None, ops=None) -> list[tuple[str, str, Path]]:
    """(system, op family, parquet path) of every collected kernel table, sorted."""
    base = aiconfigurator_root(root)
    out = []
    for system in sorted(systems or SYSTEM_DEVICES):
        if system not in SYSTEM_DEVICES:
            raise InputError(f"unknown aiconfigurator system {system!r}; known: {sorted(SYSTEM_DEVICES)}")
        for op, (folder, stem) in TABLES.items():
            if ops and op not in ops:
                continue
            out += [(system, op, f) for f in sorted((base / system / folder).glob(f"*/*/{stem}.parquet"))]
    return out


def canonical(df: pd.DataFrame, op: str, system: str | None = None) -> pd.DataFrame:
    """One table's rows in the canonical columns: META_COLUMNS, every family's shape columns
    (absent ones NaN/None), `latency_ms` (NaN where the table has no latency)."""
    out = pd.DataFrame(index=df.index)
    out["system"] = system if system is not None else df.get("system", "")
    for c in ("framework", "version", "kernel_source"):
        out[c] = df[c].astype(str) if c in df else ""
    out["op_name"] = op
    for c in SHAPE_COLUMNS[op]:
        out[c] = df[c] if c in df else DEFAULTS.get(c, np.nan)
    out["dtype"] = out[DTYPE_COLUMN[op]].astype(str)
    out["latency_ms"] = pd.to_numeric(df["latency"], errors="coerce") if "latency" in df else np.nan
    return out


def load_kernels(root: str | Path, systems=None, ops=None) -> pd.DataFrame:
    """Every gemm/attention/moe row of `systems` (default: the four shared ones) as one canonical
    table; rows with a non-positive or missing latency are dropped."""
    frames = []
    for system, op, f in table_files(root, systems, ops):
        frames.append(canonical(pd.read_parquet(f), op, system))
    if not frames:
        raise InputError(f"{root}: no aiconfigurator kernel tables for {systems or sorted(SYSTEM_DEVICES)}")
    out = pd.concat(frames, ignore_index=True)
    lat = out["latency_ms"].to_numpy(dtype=np.float64)
    out = out[np.isfinite(lat) & (lat > 0)].reset_index(drop=True)
    for c in META_COLUMNS + ("gemm_dtype", "attn_dtype", "kv_cache_dtype", "moe_dtype", "distribution"):
        if c in out:
            out[c] = out[c].astype("category")
    return out
