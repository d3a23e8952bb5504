"""Which aiconfigurator-schema kernels to measure on a new GPU, so that a few rows pin the shifts
`transfer.aic_calibrate.calibrate_to` fits: one per op and one per (op, dtype).

The picks are spread first over the cells (op, dtype) the device can run (fp8 only with fp8 tensor
cores, nvfp4 only with fp4 ones, `DeviceSpec.peak_tflops`): the first round gives each op one row (the
op-wide shift, which also covers the dtypes left unmeasured), later rounds one more row per cell, the
larger cells first. Within a cell, n rows sit at the n middle quantiles of the prior's compute-over-
memory time (one row: the balanced middle; two: a memory-bound and a compute-bound one), each the
candidate of middling duration at that quantile, so the rows speak for the cell's regimes rather than
its extremes (floor-bound calls, the largest shapes). Deterministic; no measurement is needed to choose.
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from hybridperf.aic_kernels import AicPredictor, dtype_of, prior_terms
from hybridperf.aic_rows import validate
from hybridperf.devices import DeviceSpec
from hybridperf.errors import InputError

#: what a dtype needs of the device's tensor cores (a `peak_tflops` key), by the dtype's name
NEEDS_PEAK = (("fp4", "fp4_tc"), ("fp8", "fp8_tc"), ("sq", "int8_tc"), ("bfloat16", "bf16_tc"))


def runs_dtype(device: DeviceSpec, dtype: str) -> bool:
    """Whether `device` has the tensor cores a dtype label (gemm_dtype, moe_dtype or `attn/kv`) needs."""
    return all(device.peak_tflops.get(key, 0.0) > 0 for part in str(dtype).split("/")
               for name, key in NEEDS_PEAK if name in part)


def default_candidates() -> pd.DataFrame:
    """Transformer-typical rows that `hybridperf collect --schema aiconfigurator` can run: linear layers
    in bf16 and fp8 (tokens x hidden sizes of 4k-8k models), causal prefill and decode attention in bf16
    with grouped-query heads, head_dim 128."""
    rows = []
    dims = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (8192, 8192), (28672, 8192), (8192, 28672))
    for dt, m, (n, k) in itertools.product(("bfloat16", "fp8"), (1, 8, 64, 256, 1024, 4096, 16384), dims):
        rows.append({"op_name": "gemm", "m": m, "n": n, "k": k, "gemm_dtype": dt})
    heads = ((32, 8), (64, 8), (32, 32))
    for b, s, (h, kvh) in itertools.product((1, 4, 16), (512, 2048, 8192), heads):
        rows.append({"op_name": "context_attention", "batch_size": b, "isl": s, "num_heads": h,
                     "num_key_value_heads": kvh, "head_dim": 128})
    for b, s, (h, kvh) in itertools.product((1, 8, 64, 256), (1024, 4096, 16384), heads):
        rows.append({"op_name": "generation_attention", "batch_size": b, "isl": 1, "step": s, "num_heads": h,
                     "num_key_value_heads": kvh, "head_dim": 128})
    out = pd.DataFrame(rows)
    out["attn_dtype"] = np.where(out["op_name"] == "gemm", None, "bfloat16")
    out["kv_cache_dtype"] = out["attn_dtype"]
    return out


def _quantile_picks(regime: np.ndarray, size: np.ndarray, n: int) -> list[int]:
    """Positions of n rows at the n middle quantiles of `regime`, each the one of middling `size`
    among the rows nearest that quantile."""
    order = np.argsort(regime, kind="stable")
    picks: list[int] = []
    for i in range(n):
        centre = int(round((i + 0.5) / n * (len(order) - 1)))
        half = max(1, len(order) // (4 * n))
        window = [int(j) for j in order[max(0, centre - half): centre + half + 1] if int(j) not in picks]
        if not window:
            window = [int(j) for j in order if int(j) not in picks]
        mid = np.median(size[window])
        picks.append(min(window, key=lambda j: (abs(size[j] - mid), j)))
    return picks


def allocate(cells: pd.DataFrame, k: int) -> dict:
    """Rows per cell (`op`, `dtype`, `rows` columns): one per op first (its largest cell), then one more
    per cell, larger cells first, until k rows are given or every candidate is."""
    cells = cells.sort_values(["rows", "op", "dtype"], ascending=[False, True, True])
    first = cells.drop_duplicates("op")
    order = [(r.op, r.dtype) for r in first.itertuples()]
    order += [(r.op, r.dtype) for r in cells.itertuples() if (r.op, r.dtype) not in order]
    size = {(r.op, r.dtype): int(r.rows) for r in cells.itertuples()}
    given = dict.fromkeys(order, 0)
    while k > 0 and any(given[c] < size[c] for c in order):
        for c in order:
            if k > 0 and given[c] < size[c]:
                given[c] += 1
                k -= 1
    return given


def suggest_rows(predictor: AicPredictor, candidates: pd.DataFrame, device: DeviceSpec, k: int,
                 max_ms: float = 200.0) -> pd.DataFrame:
    """The `k` rows of `candidates` (aiconfigurator schema) to measure on `device`, in their order, with
    `pred_ms`, `pred_lo_ms`, `pred_hi_ms`. Rows of dtypes the device cannot run, rows predicted slower
    than `max_ms` and rows whose tensors fill over a quarter of its memory are left out (measuring stays
    quick and fits)."""
    if k < 1:
        raise InputError(f"-k must be at least 1, got {k}")
    rows = validate(candidates, "candidates").reset_index(drop=True)
    dts = dtype_of(rows)
    keep = np.array([runs_dtype(device, d) for d in dts], dtype=bool)
    if not keep.any():
        raise InputError(f"{device.name} runs none of the candidates' dtypes ({', '.join(sorted(set(dts))[:4])})")
    pred = predictor.predict(rows, device)
    terms = prior_terms(rows, device, predictor.gemm_c, predictor.moe_c)
    keep &= ((pred["pred_ms"] <= max_ms) & (terms["bytes"] <= device.mem_bytes / 4)).to_numpy()
    if not keep.any():
        raise InputError(f"every candidate is predicted slower than {max_ms:g} ms or needs over a quarter of "
                         f"{device.name}'s memory")
    regime = np.log(np.maximum(terms["compute_ms"].to_numpy(), 1e-9) / np.maximum(terms["memory_ms"].to_numpy(), 1e-9))
    size = np.log(np.maximum(pred["pred_ms"].to_numpy(), 1e-9))
    cell = pd.DataFrame({"op": rows["op_name"].to_numpy(), "dtype": dts})[keep]
    given = allocate(cell.groupby(["op", "dtype"]).size().rename("rows").reset_index(), k)
    chosen = []
    for (op, dt), n in given.items():
        idx = cell.index[(cell["op"] == op) & (cell["dtype"] == dt)].to_numpy()
        chosen += [int(idx[j]) for j in _quantile_picks(regime[idx], size[idx], n)] if n else []
    chosen = sorted(chosen)
    out = candidates.reset_index(drop=True).iloc[chosen].copy()
    out["pred_ms"] = pred["pred_ms"].to_numpy()[chosen]
    out["pred_lo_ms"] = pred["lo_ms"].to_numpy()[chosen]
    out["pred_hi_ms"] = pred["hi_ms"].to_numpy()[chosen]
    return out.reset_index(drop=True)
