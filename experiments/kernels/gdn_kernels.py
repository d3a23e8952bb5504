"""Linear-attention (gated delta rule) kernels, leave-one-GPU-out (issues 57, 58): `hybridperf.priors.linear_attention`
against aiconfigurator's `gdn_perf` tables (A100: SGLang 0.5.10; H100, B200, L40S: SGLang 0.5.14, vLLM 0.24,
TensorRT-LLM 1.3), Qwen3.5's layer geometries at TP 1-16. Each GPU is scored with constants fitted on the others only:
the conv's and the recurrence's on every other GPU, the chunked rule's on the other GPUs of its kernel family (fla's
Triton kernels; FlashInfer's, which vLLM runs on Hopper and Blackwell). Beside it, serving's pricing before: a decode
step's recurrence as one pass over the states at DRAM speed or a kernel floor, prefill's conv and chunked rule not at
all.

    python -m experiments.kernels.gdn_kernels --data ../shared/datasets --out experiments/results/gdn_kernels.md
    python -m experiments.kernels.gdn_kernels --data ../shared/datasets --write-constants   # fit on every GPU

Columns: `batch_size` sequences of `seq_len` tokens (context) or one token (generation), `num_k_heads` and
`num_v_heads` on the rank, `head_k_dim`, `head_v_dim`, `latency` ms. The collector replays one state, so a state that
fits in L2 is read from it (the prior's `resident`).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from experiments.common import aic_table_args, ape, module_tables
from hybridperf.devices import get_device
from hybridperf.priors import linear_attention as L
from hybridperf.priors.attention import Fitted
from hybridperf.serving.cost import kernel_floor_ms

SYSTEMS = {"a100_sxm": "A100-SXM4-80GB", "h100_sxm": "H100-SXM", "b200_sxm": "B200", "l40s": "L40S"}
KERNELS = {"causal_conv1d_update": "conv_update", "causal_conv1d_fn": "conv", "fused_recurrent": "recurrent",
           "chunk_gated_delta_rule": "chunk"}
#: the constants each kernel's rows fit
GROUPS = {"conv": ("conv_kcycles", "conv_bytes"), "conv_update": ("update_kcycles", "update_bytes"),
          "recurrent": ("recurrent_kcycles", "recurrent_passes"),
          "chunk": ("chunk_kcycles", "step_kcycles", "fill_kcycles", "chunk_flops")}
SCALE = {"chunk_flops": 1e6}  # fitted in MFLOPs
SCRIPT = "experiments/kernels/gdn_kernels.py"


def load_tables(data: Path) -> pd.DataFrame:
    df = module_tables(data, "linear_attention", "gdn_perf.parquet", SYSTEMS)
    df["kernel"] = df["kernel_source"].map(lambda s: next(v for k, v in KERNELS.items() if s.startswith(k)))
    df["family"] = np.where(df["kernel_source"].str.endswith("flashinfer"), "flashinfer", "triton")
    df["channels"] = 2 * df["num_k_heads"] * df["head_k_dim"] + df["num_v_heads"] * df["head_v_dim"]
    return df.reset_index(drop=True)


def predict(df: pd.DataFrame, c: L.LinearAttentionConstants) -> np.ndarray:
    """The prior's time of every row, its state in L2 while it fits (as the collector replays it)."""
    out = np.zeros(len(df))
    for sysname, g in df.groupby("system"):
        dev = get_device(SYSTEMS[sysname])
        for kernel, k in g.groupby("kernel"):
            idx = df.index.get_indexer(k.index)
            b = k["batch_size"].to_numpy(float)
            if kernel in ("conv", "conv_update"):
                tokens = b * (k["seq_len"].to_numpy(float) if kernel == "conv" else 1.0)
                out[idx] = L.conv_ms(tokens, k["channels"].to_numpy(float), dev, c, resident=True,
                                     update=kernel == "conv_update")
            elif kernel == "recurrent":
                out[idx] = L.recurrent_ms(b, k["num_v_heads"].to_numpy(float), k["head_k_dim"].to_numpy(float),
                                          k["head_v_dim"].to_numpy(float), dev, c, resident=True)
            else:
                out[idx] = [float(L.chunk_ms(s, t, v, dev, c)) for s, t, v in
                            zip(b, k["seq_len"], k["num_v_heads"])]
    return out


def before(df: pd.DataFrame) -> np.ndarray:
    """Serving's pricing before: the recurrence one DRAM pass over the states or a floor, the rest nothing (0)."""
    out = np.zeros(len(df))
    for sysname, g in df.groupby("system"):
        dev = get_device(SYSTEMS[sysname])
        r = g[g["kernel"] == "recurrent"]
        state = 2.0 * r["batch_size"] * r["num_v_heads"] * r["head_k_dim"] * r["head_v_dim"] * L.STATE_BYTES
        t = np.maximum(L._mem_ms(state.to_numpy(float), dev, False), kernel_floor_ms(dev))
        out[df.index.get_indexer(r.index)] = t
    return out


def with_values(c: L.LinearAttentionConstants, names, values, source: str) -> L.LinearAttentionConstants:
    return replace(c, **{n: Fitted(float(v) * SCALE.get(n, 1.0), getattr(c, n).unit, source, SCRIPT)
                         for n, v in zip(names, values)})


def fit(df: pd.DataFrame, c: L.LinearAttentionConstants, group: str) -> L.LinearAttentionConstants:
    """`group`'s constants fitted on `df`'s rows of its kernels (soft-L1 log loss)."""
    names = GROUPS[group]
    rows = df[df["kernel"] == group].reset_index(drop=True)
    y = rows["latency"].to_numpy(float)
    source = ", ".join(sorted(set(rows["system"])))
    x0 = [getattr(c, n).value / SCALE.get(n, 1.0) for n in names]
    res = least_squares(lambda v: np.log(predict(rows, with_values(c, names, v, source)) / y), x0,
                        bounds=(1e-3, np.inf), loss="soft_l1", f_scale=0.1)
    return with_values(c, names, res.x, source)


def fit_all(df: pd.DataFrame) -> dict:
    """Constants per chunked-rule family ({"triton": ..., "flashinfer": ...}): the conv's and the recurrence's fitted on
    every row of `df`, the chunked rule's on its family's rows (a family `df` lacks gets Triton's)."""
    c = L.LinearAttentionConstants()  # the class's round guesses, not the shipped fit
    for group in ("conv", "conv_update", "recurrent"):
        c = fit(df, c, group)
    chunks = df[df["kernel"] == "chunk"]
    out = {fam: fit(g, c, "chunk") for fam, g in chunks.groupby("family")}
    return {fam: out.get(fam, out.get("triton", c)) for fam in ("triton", "flashinfer")}


def predict_with(df: pd.DataFrame, consts: dict) -> np.ndarray:
    out = np.zeros(len(df))
    for fam, g in df.groupby("family"):
        out[df.index.get_indexer(g.index)] = predict(g.reset_index(drop=True), consts[fam])
    return out


def loso(df: pd.DataFrame) -> pd.DataFrame:
    """Each GPU's rows predicted with constants fitted on the other GPUs (`pred`), and serving's pricing before."""
    out = df.copy()
    out["before"] = before(df)
    for sysname in sorted(df["system"].unique()):
        mine = (df["system"] == sysname).to_numpy()
        consts = fit_all(df[~mine].reset_index(drop=True))
        out.loc[mine, "pred"] = predict_with(df[mine].reset_index(drop=True), consts)
        print(f"held out {sysname}: done", flush=True)
    return out


def cells(pred: pd.DataFrame) -> pd.DataFrame:
    """MAPE % per (GPU, framework, kernel): held out, and serving's pricing before (recurrence only: 100% where
    it priced nothing). `dram`: the recurrence's rows whose states outgrow L2, as serving's do."""
    p = pred.assign(err=ape(pred["pred"], pred["latency"]),
                    was=np.where(pred["before"] > 0, ape(pred["before"].clip(lower=1e-12), pred["latency"]), 100.0))
    state = p["batch_size"] * p["num_v_heads"] * p["head_k_dim"] * p["head_v_dim"] * L.STATE_BYTES
    l2 = p["system"].map(lambda s: get_device(SYSTEMS[s]).l2_mb * 1e6)
    p["dram"] = (p["kernel"] == "recurrent") & (state > l2)
    rows = []
    for (s, fw, k), g in p.groupby(["system", "fw", "kernel"]):
        d = g[g["dram"]]
        rows.append({"gpu": s, "framework": fw, "kernel": k, "rows": len(g), "before_mape": round(g["was"].mean(), 1),
                     "held_out_mape": round(g["err"].mean(), 1), "median_ape": round(g["err"].median(), 1),
                     "dram_rows_mape": round(d["err"].mean(), 1) if len(d) else None})
    return pd.DataFrame(rows)


def constants_text(consts: dict) -> str:
    lines = []
    for fam, c in consts.items():
        vals = ", ".join(f"{n}={getattr(c, n).value:.4g}" for n in L.PARAMS)
        lines.append(f"{fam}: {vals} (fitted on {c.chunk_flops.source})")
    return "\n".join(lines)


def write_report(out: Path, table: pd.DataFrame, consts: dict) -> None:
    k = table.groupby(["gpu", "kernel"]).apply(
        lambda g: np.average(g["held_out_mape"], weights=g["rows"]), include_groups=False).round(1).unstack()
    text = f"""# Linear-attention (gated delta rule) kernels: held out per GPU

Reproduce: `python -m experiments.kernels.gdn_kernels --data ../shared/datasets` (`hybridperf.priors.linear_attention`
against aiconfigurator's `gdn_perf` tables; every GPU scored with constants fitted on the others only; the chunked
rule's per kernel family: fla's Triton kernels, FlashInfer's). `before_mape`: serving's pricing before (the recurrence
as one DRAM pass over the states or a kernel floor; the conv and the chunked rule priced at nothing, 100%).
`dram_rows_mape`: the recurrence's rows whose states outgrow L2, as every decode step's do in serving.

Held-out MAPE % per GPU and kernel (rows weighted):

{k.to_markdown()}

{table.to_markdown(index=False)}

Shipped constants (`--write-constants`, fitted on every GPU):

```
{constants_text(consts)}
```
"""
    out.write_text(text)


def main() -> None:
    a = aic_table_args(__doc__, "gdn_kernels.md", "every GPU")
    df = load_tables(a.data)
    shipped = fit_all(df)
    if a.write_constants:
        print(constants_text(shipped))
        return
    table = cells(loso(df))
    write_report(a.out, table, shipped)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
