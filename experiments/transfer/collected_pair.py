"""Our collector's rows at the same 620 shapes on two GPUs (`experiments/data/measured/{h100,h200}/aic_collect/`):
`predict-kernels` on a GPU no table holds, and the prior's scaling of one GPU's time to another.

1. zero-shot: the shipped aiconfigurator bundle (fitted on A100, H100, L40S and B200 tables) on our H200 rows,
   a GPU it never saw, beside our H100 rows (a GPU it trained on, though not on these PyTorch kernels);
2. the pair: measured H200 / H100 time of each call, against the prior's and the hybrid's ratio, and the
   H100 measurement times the predicted ratio taken as the H200's time (one GPU measured, the other predicted);
3. few-shot: k of our H200 rows calibrate the bundle (`calibrate_to`, as `predict-kernels --calibration`), the
   other half is scored (the halves split once per op, seeded; the k rows drawn with seeds 0-2).

    python -m experiments.transfer.collected_pair [--out experiments/results/collected_pair.md]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from experiments.common import REPO, RESULTS, ape, inside, md, write_report
from experiments.transfer.aic_fewshot import score, split, summary
from hybridperf import aic_kernels
from hybridperf.aic_kernels import AicPredictor, dtype_of
from hybridperf.aic_rows import validate
from hybridperf.devices import get_device
from hybridperf.transfer.aic_calibrate import calibrate_to

MEASURED = REPO / "experiments" / "data" / "measured"
PAIR = (("H100", "NVIDIA H100 80GB HBM3", "h100"), ("H200", "NVIDIA H200", "h200"))
BINS = [0, 10, 50, 500, np.inf]  # the H100's time (us)
KS = (8, 16, 32, 64)
SEEDS = (0, 1, 2)


def load_rows(tag: str) -> pd.DataFrame:
    return validate(pd.read_csv(MEASURED / tag / "aic_collect" / "collected.csv"))


def cells(rows: pd.DataFrame, pred: pd.DataFrame) -> pd.DataFrame:
    """Per (op, dtype): rows, MAPE, median signed error (%), 90% coverage."""
    y, p = rows["latency"].to_numpy(), pred["pred_ms"].to_numpy()
    d = pd.DataFrame({"op": rows["op_name"].to_numpy(), "dtype": dtype_of(rows), "err": (p / y - 1) * 100,
                      "ape": ape(p, y), "cov": inside(y, pred["lo_ms"], pred["hi_ms"])})
    out = [g.groupby(["op", "dtype"]).agg(rows=("err", "size"), mape=("ape", "mean"), median_err=("err", "median"),
                                          cov=("cov", "mean")) for g in (d, d.assign(op="all", dtype="all"))]
    out = pd.concat(out).reset_index()
    out["cov"] *= 100
    return out.round(1)


def pair_table(a: pd.DataFrame, b: pd.DataFrame, prior: tuple, hybrid: tuple) -> pd.DataFrame:
    """Measured H200 / H100 per (op, dtype, H100 time bin) against the prior's and the hybrid's ratio;
    `H100 x ratio MAPE`: the H100 measurement times the hybrid's ratio, scored as the H200's time."""
    d = pd.DataFrame({"op": a["op_name"].to_numpy(), "dtype": dtype_of(a),
                      "bin": pd.cut(a["latency"].to_numpy() * 1e3, BINS, right=False).astype(str),
                      "meas": b["latency"].to_numpy() / a["latency"].to_numpy(),
                      "prior": prior[1] / prior[0], "hybrid": hybrid[1] / hybrid[0]})
    d["ape"] = np.abs(d["hybrid"] / d["meas"] - 1) * 100
    rows = []
    for key, g in [*d.groupby(["op", "dtype", "bin"]), (("all", "all", "all"), d)]:
        rows.append({"op": key[0], "dtype": key[1], "H100 time (us)": key[2], "rows": len(g),
                     "measured H200/H100": round(g["meas"].median(), 3),
                     "10-90%": f"{g['meas'].quantile(0.1):.2f}-{g['meas'].quantile(0.9):.2f}",
                     "prior": round(g["prior"].median(), 3), "hybrid": round(g["hybrid"].median(), 3),
                     "H100 x ratio MAPE %": round(g["ape"].mean(), 1)})
    return pd.DataFrame(rows)


def prefill_residual(base: AicPredictor, pairs) -> pd.DataFrame:
    """Our SDPA prefills priced as shipped (the prior: `aic_kernels.ENGINE_RESIDUALS`) and with the prefill residual
    applied as to an engine's rows: MAPE of all of them, and the error range of the one-token prefills of 128 or more
    sequences."""
    out = []
    for name, rows, dev in pairs:
        m = (rows["op_name"] == "context_attention").to_numpy()
        y, one = rows["latency"].to_numpy()[m], ((rows["isl"] == 1) & (rows["batch_size"] >= 128)).to_numpy()[m]
        shipped = base.predict(rows, dev)["pred_ms"].to_numpy()[m]
        kept, aic_kernels.ENGINE_RESIDUALS = aic_kernels.ENGINE_RESIDUALS, ()
        try:
            residual = base.predict(rows, dev)["pred_ms"].to_numpy()[m]
        finally:
            aic_kernels.ENGINE_RESIDUALS = kept
        for label, p in (("prior (shipped)", shipped), ("prior x the prefill residual", residual)):
            e = (p / y - 1) * 100
            out.append({"gpu": name, "priced by": label, "prefill rows": int(m.sum()),
                        "MAPE %": round(ape(p, y).mean(), 1),
                        "one-token prefills, >= 128 sequences": f"{e[one].min():+.0f} to {e[one].max():+.0f}% "
                                                                f"({int(one.sum())} rows)"})
    return pd.DataFrame(out)


def fewshot(base: AicPredictor, rows: pd.DataFrame, device) -> tuple[pd.DataFrame, int]:
    pool, test = split(rows, len(rows))
    out = [score(base, test, device).assign(k=0, seed=0)]
    for k in KS:
        for seed in SEEDS:
            out.append(score(calibrate_to(base, pool.sample(k, random_state=seed), device), test, device)
                       .assign(k=k, seed=seed))
    return pd.concat(out), len(test)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default=None, help="aiconfigurator kernel bundle (default: the shipped one)")
    ap.add_argument("--out", default=str(RESULTS / "collected_pair.md"))
    args = ap.parse_args()
    t0 = time.time()
    base = AicPredictor.load(args.bundle)
    (a_name, a_gpu, a_tag), (b_name, b_gpu, b_tag) = PAIR
    a, b = load_rows(a_tag), load_rows(b_tag)
    keys = ["op_name", "m", "n", "k", "gemm_dtype", "batch_size", "isl", "step", "num_heads", "num_key_value_heads",
            "head_dim", "attn_dtype", "kv_cache_dtype", "window_size"]
    if not a[keys].fillna(-1).reset_index(drop=True).equals(b[keys].fillna(-1).reset_index(drop=True)):
        raise SystemExit(f"error: the {a_name} and {b_name} rows are not the same shapes in the same order")
    dev_a, dev_b = get_device(a_gpu), get_device(b_gpu)
    pa, pb = base.predict(a, dev_a), base.predict(b, dev_b)
    ra, rb = base.predict(a, dev_a, prior_only=True), base.predict(b, dev_b, prior_only=True)
    zero = pd.concat([cells(b, pb).assign(gpu=f"{b_name} (never trained on)"),
                      cells(a, pa).assign(gpu=f"{a_name} (a training GPU)"),
                      cells(b, rb).assign(gpu=f"{b_name}, prior alone")])
    zero = zero[["gpu", *[c for c in zero.columns if c != "gpu"]]]
    pair = pair_table(a, b, (ra["pred_ms"].to_numpy(), rb["pred_ms"].to_numpy()),
                      (pa["pred_ms"].to_numpy(), pb["pred_ms"].to_numpy()))
    res, n_test = fewshot(base, b, dev_b)
    prefill = prefill_residual(base, ((a_name, a, dev_a), (b_name, b, dev_b)))
    per_k = summary(res, ["k"])
    per_cell = summary(res[res["k"].isin([0, 32])], ["op", "dtype", "k"])
    allp = pair[pair["op"] == "all"].iloc[0]
    text = "\n".join([
        f"# Our collector on two GPUs: {a_name} and {b_name} at the same {len(a)} shapes",
        "",
        f"Reproduce: `python -m experiments.transfer.collected_pair` ({time.time() - t0:.0f} s). Rows: "
        f"`experiments/data/measured/{{{a_tag},{b_tag}}}/aic_collect/` (PyTorch's GEMMs, `_scaled_mm` and SDPA, "
        "captured in CUDA graphs; method in the READMEs), shapes drawn from aiconfigurator's H100 tables. The "
        "predictor is the shipped aiconfigurator bundle, fitted on the A100, H100, L40S and B200 tables: the "
        f"{b_name} is in none of them.",
        "",
        "## 1. `predict-kernels`, zero-shot",
        "",
        md(zero),
        "",
        "PyTorch's SDPA prefills take the prior (`aic_kernels.ENGINE_RESIDUALS`): the prefill residual, learned on "
        "engines' rows, prices the engines' per-call work around their kernels, which a bare SDPA call does not do:",
        "",
        md(prefill),
        "",
        "## 2. One GPU's time scaled to the other",
        "",
        f"Median measured {b_name} / {a_name} time of the same call, by the {a_name}'s time, against the medians "
        f"of the prior's and the hybrid's ratios. Over all rows: measured {allp['measured H200/H100']}, prior "
        f"{allp['prior']}, hybrid {allp['hybrid']}; the {a_name}'s measurement times the hybrid's ratio predicts "
        f"the {b_name}'s time at {allp['H100 x ratio MAPE %']}% MAPE.",
        "",
        md(pair),
        "",
        f"## 3. Few-shot on the {b_name}",
        "",
        f"Our {b_name} rows split in half once (seeded, per op); k random rows of the first half calibrate the "
        "bundle, the other "
        f"{n_test} are scored. MAPE and coverage (%), the k rows drawn with seeds {', '.join(map(str, SEEDS))} "
        "(averaged).",
        "",
        md(per_k),
        "",
        "Per cell, k = 0 and 32:",
        "",
        md(per_cell),
        "",
    ])
    write_report(args.out, text)


if __name__ == "__main__":
    main()
