"""Loader for Vidur's (MLSys'24) fp16 compute profiles as canonical kernel records.

Layout: `data/profiling/compute/<a100|a40>/<org>/<model>/mlp.csv`. One row of `mlp.csv` is one
(num_tokens, num_tensor_parallel_workers) point of one model; for every non-attention op of a
transformer layer it holds `time_stats.<op>.{min,max,mean,median,std}` in ms, plus the model's n_head,
n_kv_head, n_embd, n_expanded_embd, use_gated_mlp. Each op becomes one canonical row (dtype fp16):

    attn_pre_proj   linear  B=1, M=num_tokens, N=n_embd,              K=(n_head + 2*n_kv_head)*head_dim/tp
    attn_post_proj  linear  B=1, M=num_tokens, N=n_embd/tp,           K=n_embd
    mlp_up_proj     linear  B=1, M=num_tokens, N=n_embd,              K=n_expanded_embd*(2 if gated)/tp
    mlp_down_proj   linear  B=1, M=num_tokens, N=n_expanded_embd/tp,  K=n_embd
    input_layernorm, post_attention_layernorm
                    ln      B=num_tokens, H=n_embd
    mlp_act         gelu    B=num_tokens, H=n_expanded_embd/tp
    add             add     B=num_tokens, H=n_embd
    emb, attn_rope  skipped (no op of our vocabulary); counted in `load_vidur_compute.last_skipped`

head_dim = n_embd / n_head. Approximations, kept on purpose so the rows stay in our op vocabulary:
* Vidur's projections are bias-free (Llama, Qwen...) while our `linear` counts a bias (K extra reads
  and B*M*K adds, a negligible share of the work).
* Llama-family models use RMSNorm, which is mapped to `ln` (LayerNorm does one more reduction).
* A gated MLP's activation is SiLU(gate) * up, mapped to `gelu` over the output width; Phi-2's is GELU.
Vidur's profiler reports CUDA kernel durations (its smallest kernels take 1-6 us), so every row has
`timing = "kernel"` (no per-call launch floor; see hybridperf.priors.launch).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.datasets.schema import COLUMNS, canonicalize
from hybridperf.errors import InputError

#: Vidur device folder -> torch device name. Vidur profiled the A100 80GB SXM4 (DGX A100 nodes) and
#: the A40 (PCIe). `h100` appears in newer Vidur releases (DGX H100, SXM5 HBM3).
VIDUR_DEVICES = {
    "a100": "NVIDIA A100-SXM4-80GB",
    "a40": "NVIDIA A40",
    "h100": "NVIDIA H100 80GB HBM3",
}

#: Vidur op -> our op
VIDUR_OPS = {
    "attn_pre_proj": "linear",
    "attn_post_proj": "linear",
    "mlp_up_proj": "linear",
    "mlp_down_proj": "linear",
    "input_layernorm": "ln",  # RMSNorm for Llama-family models: approximated as LayerNorm
    "post_attention_layernorm": "ln",
    "mlp_act": "gelu",  # SiLU(gate) * up for gated MLPs, GELU for Phi-2
    "add": "add",
}
VIDUR_SKIPPED_OPS = ("emb", "attn_rope")
STATS = ("min", "max", "mean", "median")
_CONFIG_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp", "num_tokens",
                   "num_tensor_parallel_workers")


def vidur_compute_root(path: str | Path) -> Path:
    """Accept the `vidur` folder, its parent, `data`, `data/profiling` or `data/profiling/compute`;
    return the `compute` folder (the one holding `<device>/<org>/<model>/mlp.csv`)."""
    p = Path(path)
    for cand in (p, p / "compute", p / "profiling" / "compute", p / "data" / "profiling" / "compute",
                 p / "vidur" / "data" / "profiling" / "compute"):
        if cand.is_dir() and next(cand.glob("*/*/*/mlp.csv"), None) is not None:
            return cand
    raise InputError(f"{path}: not a Vidur folder (no profiling/compute/<device>/<org>/<model>/mlp.csv inside)")


def _device_filter(devices) -> set[str] | None:
    if not devices:
        return None
    if isinstance(devices, str):
        devices = [devices]
    keys = set()
    for d in devices:
        key = str(d).strip()
        # accept the folder name ("a100") or the torch name ("NVIDIA A100-SXM4-80GB")
        keys.add(key.lower())
        keys.update(k for k, v in VIDUR_DEVICES.items() if v.lower() == key.lower())
    return keys


def _truthy(col: pd.Series) -> np.ndarray:
    if col.dtype == bool:
        return col.to_numpy()
    return col.astype(str).str.strip().str.lower().isin(("true", "1", "yes")).to_numpy()


def _shapes(raw: pd.DataFrame, vop: str) -> dict:
    """Shape columns (B, M, N, K, H) of Vidur op `vop` for every row of `raw`."""
    num = {c: pd.to_numeric(raw[c], errors="coerce").to_numpy(dtype=float)
           for c in _CONFIG_COLUMNS if c != "use_gated_mlp"}
    tokens, tp = num["num_tokens"], num["num_tensor_parallel_workers"]
    emb, exp = num["n_embd"], num["n_expanded_embd"]
    head_dim = emb / num["n_head"]
    gated = _truthy(raw["use_gated_mlp"])
    ones = np.ones(len(raw))
    nan = np.full(len(raw), np.nan)
    if vop == "attn_pre_proj":  # fused QKV projection, heads split over tp workers
        return {"B": ones, "M": tokens, "N": emb, "K": (num["n_head"] + 2 * num["n_kv_head"]) * head_dim / tp, "H": nan}
    if vop == "attn_post_proj":  # row-parallel output projection
        return {"B": ones, "M": tokens, "N": emb / tp, "K": emb, "H": nan}
    if vop == "mlp_up_proj":  # column-parallel; gate and up fused when gated
        return {"B": ones, "M": tokens, "N": emb, "K": exp * np.where(gated, 2.0, 1.0) / tp, "H": nan}
    if vop == "mlp_down_proj":
        return {"B": ones, "M": tokens, "N": exp / tp, "K": emb, "H": nan}
    if vop == "mlp_act":
        return {"B": tokens, "M": nan, "N": nan, "K": nan, "H": exp / tp}
    # norms and the residual add work on the full hidden width of every token
    return {"B": tokens, "M": nan, "N": nan, "K": nan, "H": emb}


def load_vidur_file(path: str | Path, device: str, *, stat: str = "median", on_bad: str = "drop",
                    with_meta: bool = False) -> tuple[pd.DataFrame, dict[str, int], list[str]]:
    """One Vidur `mlp.csv` as canonical rows. Returns (table, skipped-op counts, bad-row reports).

    Line numbers in the reports are those of `path`.
    """
    path = Path(path)
    if stat not in STATS:
        raise InputError(f"unknown latency statistic {stat!r}; use one of {', '.join(STATS)}")
    try:
        raw = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot parse CSV ({str(e).splitlines()[0]})") from None
    missing = [c for c in _CONFIG_COLUMNS if c not in raw.columns]
    if missing:
        raise InputError(f"{path}: not a Vidur compute profile, missing columns {missing}")
    frames, reports = [], []
    skipped = {op: len(raw) for op in VIDUR_SKIPPED_OPS if f"time_stats.{op}.{stat}" in raw.columns}
    for vop, op in VIDUR_OPS.items():
        col = f"time_stats.{vop}.{stat}"
        if col not in raw.columns:
            continue
        rows = pd.DataFrame({"OPName": op, **_shapes(raw, vop), "Latency": raw[col], "dtype": "fp16"},
                            index=raw.index)
        can = canonicalize(rows, device=device, source=str(path), require_latency=True, on_bad=on_bad, timing="kernel")
        reports.extend(f"{r} ({vop})" for r in canonicalize.last_report)
        if with_meta:
            bad = {_line_index(r, str(path)) for r in canonicalize.last_report}
            keep = [i for i in rows.index if i not in bad]
            can["vidur_op"] = vop
            can["model"] = path.parent.name
            can["tp"] = pd.to_numeric(raw.loc[keep, "num_tensor_parallel_workers"], errors="coerce").to_numpy()
        frames.append(can)
    if not frames:
        raise InputError(f"{path}: no time_stats.<op>.{stat} columns for any known Vidur op")
    return pd.concat(frames, ignore_index=True), skipped, reports


def _line_index(report: str, source: str) -> int:
    """Dataframe index of a canonicalize report "SOURCE:LINE: reason" (LINE = index + 2)."""
    try:
        return int(report[len(source) + 1:].split(":", 1)[0]) - 2
    except ValueError:
        return -1


def load_vidur_compute(root: str | Path, devices=None, *, stat: str = "median", on_bad: str = "drop",
                       with_meta: bool = False) -> pd.DataFrame:
    """All Vidur compute profiles under `root` as one canonical kernel table (hybridperf.datasets.schema.COLUMNS).

    `latency_ms` is Vidur's per-op `median` time (ms) by default (`stat` picks min/max/mean instead);
    dtype is fp16; `source` is the mlp.csv path; device is the torch name (VIDUR_DEVICES; an unknown
    folder keeps its own name). `devices` filters by folder ('a100') or torch name. `root` may be the
    `vidur` folder, its parent, or `profiling/compute`. `with_meta=True` adds vidur_op, model and tp.

    After the call, `load_vidur_compute.last_skipped` maps each skipped Vidur op (emb, attn_rope) to its
    row count and `load_vidur_compute.last_report` lists dropped bad rows as "file:line: reason (op)".
    """
    base = vidur_compute_root(root)
    wanted = _device_filter(devices)
    frames, skipped, reports = [], {}, []
    for f in sorted(base.glob("*/*/*/mlp.csv")):
        folder = f.parts[-4]
        dev = VIDUR_DEVICES.get(folder.lower(), folder)
        if wanted is not None and folder.lower() not in wanted and dev.lower() not in wanted:
            continue
        df, sk, rep = load_vidur_file(f, dev, stat=stat, on_bad=on_bad, with_meta=with_meta)
        frames.append(df)
        for k, v in sk.items():
            skipped[k] = skipped.get(k, 0) + v
        reports.extend(rep)
    load_vidur_compute.last_skipped = skipped
    load_vidur_compute.last_report = reports
    if not frames:
        raise InputError(f"{base}: no Vidur profiles" + (f" for devices {sorted(wanted)}" if wanted else ""))
    out = pd.concat(frames, ignore_index=True)
    return out if with_meta else out.loc[:, list(COLUMNS)]


load_vidur_compute.last_skipped = {}
load_vidur_compute.last_report = []
