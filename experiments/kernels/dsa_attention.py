"""Sparse MLA (DSA) attention prior, leave-one-GPU-out (issues 57, 58): `hybridperf.priors.mla.sparse_mla_ms` against
aiconfigurator's `glm5_dsa_attn_module` tables (GLM-5's attention after the indexer's top-k pick: FlashMLA's sparse
kernel, SGLang 0.5.14) of the H100 and the B200, each scored with constants fitted on the other only, beside dense
pricing: MLA decode over min(context, index_topk) latents (serving's before), and a causal prefill with a window of
index_topk keys over the unpadded heads (serving's still). Likewise `index_topk_ms` against the `glm5_topk_module`
tables (the indexer's top-k selection, which serving did not price), fitted on both of the collector's score orders,
uniform scores (`flat`, the slowest radix select) and the highest last (`top_last`, 0.45x the time), by least squares: a
real indexer's scores lie between, so the fit prices their geometric middle.

    python -m experiments.kernels.dsa_attention --data ../shared/datasets --out experiments/results/dsa_attention.md
    python -m experiments.kernels.dsa_attention --data ../shared/datasets --write-constants   # fit on both GPUs

Columns: `num_heads` query heads (GLM-5's 64, TP 1), `batch_size` sequences of `isl` new tokens after `step` cached
ones, `latency` in ms of the sparse attention kernel, CUDA-graph timed. GLM-5's geometry: kv_lora 512, rope 64,
index_topk 2048.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from experiments.common import aic_table_args, ape, module_tables
from hybridperf.datasets.aiconfigurator import SYSTEM_DEVICES
from hybridperf.devices import get_device
from hybridperf.priors import mla as M
from hybridperf.priors.attention import Fitted, context_attention_ms
from hybridperf.serving.engines import get_engine

SYSTEMS = tuple(SYSTEM_DEVICES)  # aiconfigurator's systems in ../shared
KV_LORA, ROPE, TOPK, QK_NOPE, V_DIM = 512, 64, 2048, 192, 256
TABLE = "glm5_dsa_attn_module_perf.parquet"
TOPK_TABLE = "glm5_topk_module_perf.parquet"
SCRIPT = "experiments/kernels/dsa_attention.py"


def load_tables(data: Path, table: str = TABLE) -> pd.DataFrame:
    """Every system's `table` of the sparse-attention modules (the attention kernel's, or the top-k selection's
    with its rows that select: more keys than top-k)."""
    df = module_tables(data, "sparse_attention", table, SYSTEMS)
    if table == TOPK_TABLE:
        df["rows"], df["scores"], df["longest"] = M.topk_work(df["batch_size"], df["isl"], df["step"], TOPK)
        df = df[df["rows"] > 0].reset_index(drop=True)
    df["tokens"] = df["batch_size"] * df["isl"]
    df["phase"] = np.where(df["isl"] == 1, "decode", np.where(df["step"] == 0, "prefill", "prefill after a prefix"))
    df["kv"] = np.where(df["kv_cache_dtype"].astype(str).str.contains("fp8"), "fp8", "bf16")
    return df


def predict(df: pd.DataFrame, consts: M.SparseMlaConstants) -> np.ndarray:
    out = np.zeros(len(df))
    if "scores" in df:  # the top-k selection's table
        for sysname, idx in df.groupby("system").indices.items():
            g = df.iloc[idx]
            out[idx] = M.index_topk_ms(g["rows"], g["scores"], g["longest"], get_device(sysname), consts)
        return out
    for (sysname, kv), idx in df.groupby(["system", "kv"]).indices.items():
        g = df.iloc[idx]
        out[idx] = M.sparse_mla_ms(g["tokens"], g["num_heads"], KV_LORA, ROPE, TOPK, get_device(sysname), kv,
                                   constants=consts)
    return out


def dense(df: pd.DataFrame) -> np.ndarray:
    """Dense pricing: decode as dense MLA over min(context, topk) latents (serving's before); a prefill as a causal
    window of topk keys over the heads as they are, SGLang's prefill kernel family (serving's still)."""
    out = np.zeros(len(df))
    for (sysname, kv, phase), idx in df.groupby(["system", "kv", "phase"]).indices.items():
        g, dev = df.iloc[idx], get_device(sysname)
        if phase == "decode":
            keys = np.minimum(g["step"] + 1, TOPK)
            out[idx] = M.mla_decode_ms(g["batch_size"], keys, g["num_heads"], KV_LORA, ROPE, dev, kv)
        else:
            src = get_engine("sglang").attention_sources(dev.kernel_arch)[0] or None
            out[idx] = context_attention_ms(g["batch_size"], g["isl"], g["num_heads"], g["num_heads"], QK_NOPE + ROPE,
                                            dev, kv_dtype=kv, window=TOPK, prefix=g["step"], kernel_source=src,
                                            v_dim=V_DIM)
    return out


ATTENTION_FIELDS = (("efficiency", "share", 0.5, 0.05, 1.5), ("overhead_ms", "ms", 0.005, 0.0, 0.1))
TOPK_FIELDS = (("topk_row_kcycles", "kcycles", 20.0, 0.0, 200.0), ("topk_key_cycles", "cycles", 1.0, 0.0, 20.0),
               ("topk_score_cycles", "cycles", 2.0, 0.0, 50.0),
               ("topk_row_throughput_kcycles", "kcycles", 3.0, 0.0, 100.0))


def fit(train: pd.DataFrame, source: str, base: M.SparseMlaConstants, fields, loss: str) -> M.SparseMlaConstants:
    """`fields` of `base` refitted by least squares on log(predicted / measured) with `loss`."""
    def build(x):
        return replace(base, **{f: Fitted(float(v), unit, source, SCRIPT) for v, (f, unit, *_) in zip(x, fields)})

    def resid(x):
        return np.log(predict(train, build(x)) / train["latency"].to_numpy())

    r = least_squares(resid, [f[2] for f in fields], bounds=([f[3] for f in fields], [f[4] for f in fields]),
                      loss=loss, f_scale=0.2)
    return build(r.x)


def fit_on(attention: pd.DataFrame, topk: pd.DataFrame, systems) -> M.SparseMlaConstants:
    """The attention kernel's and the top-k selection's constants fitted on `systems`' rows of their tables (the
    shipped ones where no such system has rows), the systems their provenance."""
    out = M.SPARSE_CONSTANTS
    # soft-L1 weighs the attention tables' odd rows less; the top-k's two score orders are two clusters, whose
    # geometric middle only plain least squares finds
    for tables, fields, loss in ((attention, ATTENTION_FIELDS, "soft_l1"), (topk, TOPK_FIELDS, "linear")):
        mine = [s for s in systems if s in set(tables["system"])]
        if mine:
            out = fit(tables[tables["system"].isin(mine)], ", ".join(mine), out, fields, loss)
    return out


def evaluate(df: pd.DataFrame, topk: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Per held-out GPU and phase: the attention prior with the other GPU's constants beside the dense pricing, and
    the top-k selection's prior per score order."""
    rows, sel, fits = [], [], {}
    present = sorted(set(df["system"]) | set(topk["system"]))
    for held in present:
        consts = fits[held] = fit_on(df, topk, [s for s in present if s != held])
        test = df[df["system"] == held].reset_index(drop=True)
        test = test.assign(sparse=predict(test, consts), dense=dense(test))
        for phase, g in test.groupby("phase"):
            rows.append({"held_out": held, "phase": phase, "rows": len(g),
                         "dense_mape": float(np.mean(ape(g["dense"], g["latency"]))),
                         "sparse_mape": float(np.mean(ape(g["sparse"], g["latency"]))),
                         "median_ratio": float(np.median(g["sparse"] / g["latency"]))})
        test = topk[topk["system"] == held].reset_index(drop=True)
        test = test.assign(pred=predict(test, consts))
        for (phase, order), g in test.groupby([np.where(test["isl"] == 1, "decode", "prefill"), "score_mode"]):
            sel.append({"held_out": held, "phase": phase, "scores": order, "rows": len(g),
                        "mape": float(np.mean(ape(g["pred"], g["latency"]))),
                        "median_ratio": float(np.median(g["pred"] / g["latency"]))})
    return pd.DataFrame(rows), pd.DataFrame(sel), fits


def write_report(out: Path, cells: pd.DataFrame, sel: pd.DataFrame, fits: dict) -> None:
    fit_lines = [f"- {h}: efficiency {c.efficiency.value:.3f} of one SM's bf16 matrix rate, overhead "
                 f"{c.overhead_ms.value * 1e3:.1f} us; top-k row {c.topk_row_kcycles.value:.1f}k cycles + "
                 f"{c.topk_key_cycles.value:.2f} a key, throughput {c.topk_score_cycles.value:.2f} cycles a score + "
                 f"{c.topk_row_throughput_kcycles.value:.2f}k a row over the SMs (fitted on {c.efficiency.source})"
                 for h, c in fits.items()]
    lines = ["# Sparse MLA (DSA) attention prior, leave-one-GPU-out", "",
             "Reproduce: `python -m experiments.kernels.dsa_attention --data ../shared/datasets --out "
             "experiments/results/dsa_attention.md`", "",
             "aiconfigurator's `glm5_dsa_attn_module` tables (FlashMLA's sparse kernel over GLM-5's 64 heads, index "
             f"top-{TOPK}). `sparse`: `hybridperf.priors.mla.sparse_mla_ms`, one CTA per token and 64 of its heads "
             "padded to 64 (Hopper) or 128 (Blackwell), in waves over the SMs, constants fitted on the other GPU; "
             "`dense`: dense MLA decode over min(context, top-k) latents (serving's pricing before it), a causal "
             "prefill windowed at top-k (serving's pricing). MAPE = mean |pred/measured - 1| in %.", "",
             "Constants per held-out GPU:", "", *fit_lines, "",
             cells.to_markdown(index=False, floatfmt=".2f"), "",
             "## The indexer's top-k selection (`glm5_topk_module`, rows with more keys than top-k)", "",
             "`hybridperf.priors.mla.index_topk_ms`: a row per CTA (a few rows take one row's latency, many the SMs' "
             "throughput), fitted on the other GPU's rows of both score orders.", "",
             sel.to_markdown(index=False, floatfmt=".2f"), ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))


def main() -> None:
    a = aic_table_args(__doc__, "dsa_attention.md", "every GPU with a table")
    data = a.data
    df, topk = load_tables(data), load_tables(data, TOPK_TABLE)
    if a.write_constants:
        print(fit_on(df, topk, SYSTEMS))
        return
    cells, sel, fits = evaluate(df, topk)
    write_report(a.out, cells, sel, fits)
    print(cells.to_string(index=False))
    print(sel.to_string(index=False))


if __name__ == "__main__":
    main()
