"""Held-out serving accuracy on aiconfigurator's silicon runs (H100 and B200 rows of silicon_sample.csv).

Each system is scored with a calibration (a per-engine TTFT constant; prefill and decode GPU-time scales,
eager/graph iteration overheads and wave weight shared by the engines; interval quantiles from
its rows each predicted with its model left out) fitted on the other system's rows only, and with attention, MLA
decode and collective constants fitted without its kernel and NCCL tables (`fold_models`). Reports the share of rows
predicted (refusals with reasons), TTFT/TPOT MAPE and 90%-interval coverage per (system, backend, mode),
and the same rows with the constants fitted in-sample (the calibration's own limit),
writes experiments/results/serving_silicon.{md,png}, and with --write-calibration stores the calibration
fitted on all systems as hybridperf/serving/calibration.json (what the CLI uses).

    python -m experiments.serving.serving_silicon [--write-calibration]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from hybridperf.devices import get_device
from hybridperf.errors import HybridperfError
from hybridperf.priors.llm_gemm import gemm_ms, spec_matrix_peak
from hybridperf.serving.api import Worker, agg_components
from hybridperf.serving.calibration import Calibration, EngineCalibration
from hybridperf.serving.cost import GEMM_PEAK_SHARE, KERNEL_CONSTANTS, KV_DTYPE_BYTES, KernelModels, Parallel
from hybridperf.serving.engines import get_engine
from hybridperf.serving import measured
from hybridperf.serving.rows import concurrency_of, predict_rows, row_request

from experiments.common import DATA as SHARED, RESULTS  # noqa: E402
from experiments.serving.fold_models import FoldModels

DATA = SHARED / "aiconfigurator"
SYSTEMS = ("h100_sxm", "b200_sxm")


def components(df: pd.DataFrame, models: KernelModels | None = None) -> pd.DataFrame:
    """Uncalibrated (gpu_ms, eager, graph) components of TTFT and of the decode phase per agg row, in lock-step
    waves (w) and in the staggered steady state (s), priced with `models` (the shipped ones when None)."""
    recs = []
    for i, row in zip(df.index, df.to_dict("records")):
        if row["mode"] != "agg":
            continue
        try:
            req = row_request(row, DATA / "model_configs")
            wk = Worker(Parallel(req["tp"], req["pp"], req["attention_dp"], req["moe_tp"], req["ep"]),
                        req["precision"], req["moe_precision"], KV_DTYPE_BYTES[req["kv_dtype"]])
            c = agg_components(req["config"], req["device"], req["engine"], wk, req["isl"], req["osl"],
                               req["concurrency"], closed_loop=True, models=models)
        except HybridperfError:
            continue
        rec = {"idx": i, "engine": get_engine(req["engine"]).name, "osl": req["osl"],
               "ttft": row["silicon_ttft_ms"], "tpot": row["silicon_tpot_ms"],
               "sp_floor": prefill_floor(get_device(req["device"]))}
        for mode, key in (("w", "wave"), ("s", "steady")):
            for ph, name in (("t", "ttft"), ("d", "decode")):
                rec.update({f"{ph}{mode}{j}": v for j, v in enumerate(c[key][name])})
        recs.append(rec)
    return pd.DataFrame(recs).set_index("idx")


#: calibration parameters shared by every engine (decode and prefill GPU-time scales, eager and graph per-layer
#: host time, wave weight): the GPU-time scales correct the kernel priors, not an engine; only the per-request
#: TTFT constant (the benchmark harness's) stays per engine. Fitted per engine, the shared ones moved with each
#: system's mix of models and engine versions (sglang's eager time 0 on one system, 1.1 ms per layer on the other;
#: held-out TPOT 1.3 points worse; a per-engine prefill scale: TTFT 43.0% against 41.5%)
SHARED_PARAMS = ("s", "e", "g", "a", "sp")
PARAMS = ("s", "e", "g", "k", "a", "sp")  # gpu_scale, eager_ms, graph_ms, ttft_ms, wave_weight, prefill_scale
LOWER = dict(s=0.5, e=0, g=0, k=0, a=0, sp=0.5)
UPPER = dict(s=5, e=2, g=1, k=1000, a=1, sp=5)
START = dict(s=1.5, e=0.05, g=0.02, k=20.0, a=0.5, sp=1.5)


def prefill_floor(device) -> float:
    """The lowest prefill scale a run on `device` may be fitted with: one at which the GEMM prior's largest bf16
    GEMM (8192^3) stays within `cost.GEMM_PEAK_SHARE` of the peak. Fitted on H100 alone (0.85 of peak), an
    unbounded scale took 0.82, a GEMM at 1.04x its peak (held out, B200 TensorRT-LLM's TTFT coverage 87 -> 80%)."""
    m = 8192
    ms = gemm_ms(m, m, m, "bfloat16", device, constants=KERNEL_CONSTANTS, replayed=False)
    return float(2.0 * m ** 3 / (ms * 1e-3) / spec_matrix_peak(device, "bf16")) / GEMM_PEAK_SHARE


def fit_engines(c: pd.DataFrame) -> dict:
    """Least squares on log(predicted / measured) of TTFT and TPOT over every engine's rows at once (soft-L1:
    the few runs an engine version or a benchmark hiccup put far off weigh less), the SHARED_PARAMS one
    value for all engines, each bounded to a physical range (the prefill scale at least the rows' GPUs'
    `prefill_floor`). Engines with fewer than 5 rows are left out."""
    engines = sorted(e for e, g in c.groupby("engine") if len(g) >= 5)
    c = c[c.engine.isin(engines)]
    who = c.engine.map({e: i for i, e in enumerate(engines)}).to_numpy()
    slots, x0, lo, hi = {}, [], [], []
    lower = {**LOWER, "sp": max(LOWER["sp"], float(c["sp_floor"].max()))}
    for p in PARAMS:
        n = 1 if p in SHARED_PARAMS else len(engines)
        slots[p] = (len(x0), n)
        x0 += [START[p]] * n
        lo += [lower[p]] * n
        hi += [UPPER[p]] * n
    d = np.maximum(c["osl"].to_numpy() - 1, 1)

    def value(x, p):
        i, n = slots[p]
        return np.full(len(c), x[i]) if n == 1 else np.asarray(x[i:i + n])[who]

    def comp(ph, j, a):
        return a * c[f"{ph}w{j}"].to_numpy() + (1 - a) * c[f"{ph}s{j}"].to_numpy()

    def resid(x):
        s, e, g, k, a, sp = (value(x, p) for p in PARAMS)
        ttft = sp * comp("t", 0, a) + e * comp("t", 1, a) + g * comp("t", 2, a) + k
        tpot = (s * comp("d", 0, a) + e * comp("d", 1, a) + g * comp("d", 2, a)) / d
        return np.concatenate([np.log(np.maximum(ttft, 1e-6) / c.ttft.to_numpy()),
                               np.log(np.maximum(tpot, 1e-6) / c.tpot.to_numpy())])

    r = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.2)
    out = {}
    for j, eng in enumerate(engines):
        v = {p: float(r.x[slots[p][0] + (0 if slots[p][1] == 1 else j)]) for p in PARAMS}
        out[eng] = EngineCalibration(gpu_scale=v["s"], eager_ms=v["e"], graph_ms=v["g"], ttft_ms=v["k"],
                                     wave_weight=v["a"], prefill_scale=v["sp"])
    return out


#: rows a stratum needs for quantiles of its own (else its runs take the pooled ones)
MIN_STRATUM_ROWS = 30


def log_quantiles(pred: pd.DataFrame) -> tuple[dict, dict]:
    """5% and 95% quantiles of log(measured / predicted) per metric over the predicted rows outside any
    stratum (`interval_stratum`), and per stratum over its own rows; a stratum of fewer than MIN_STRATUM_ROWS
    rows joins the pooled ones."""
    ok = pred[pred.reason == ""]

    def q(g):
        return {m: tuple(float(np.quantile(np.log(g[f"silicon_{m}_ms"] / g[f"pred_{m}_ms"]), p)) for p in (0.05, 0.95))
                for m in ("ttft", "tpot")}
    strata = ok["interval_stratum"].fillna("")
    strata = strata.where(strata.map(strata.value_counts()) >= MIN_STRATUM_ROWS, "")  # too few: pooled
    return q(ok[strata == ""]), {k: q(g) for k, g in ok[strata != ""].groupby(strata[strata != ""])}


def out_of_model_predictions(df: pd.DataFrame, comps: pd.DataFrame, engines: dict,
                             models: KernelModels | None = None) -> pd.DataFrame:
    """Every row of `df` predicted by engine constants fitted without its model's rows (leave one model out;
    an engine whose only model is the one left out keeps `engines`' constants): a residual spread that
    holds what a system of new models and engine versions does to the prediction, which in-sample residuals
    do not."""
    paths = df["model_path"].fillna("")
    preds = []
    for path in sorted(paths.unique()):
        out = paths == path
        fold = fit_engines(comps[comps.index.isin(df.index[~out])])
        cal = Calibration(engines={**engines, **fold})
        preds.append(predict_rows(df[out], DATA / "model_configs", cal, models))
    return pd.concat(preds).loc[df.index]


def fit(df: pd.DataFrame, comps: pd.DataFrame, provenance: str, quantiles: tuple | None = None,
        models: KernelModels | None = None) -> Calibration:
    """Engine constants fitted on `df`'s agg rows (`comps`, priced with `models`); the intervals
    (`log_quantiles`) from `quantiles`, else from `df`'s own rows each predicted with its model left out of
    the fit."""
    engines = fit_engines(comps)
    if quantiles is None:
        quantiles = log_quantiles(out_of_model_predictions(df, comps, engines, models))
    return Calibration(engines=engines, log_quantiles=quantiles[0], stratum_quantiles=quantiles[1],
                       provenance=provenance)


def score(pred: pd.DataFrame, keys=("system", "backend", "mode")) -> pd.DataFrame:
    rows = []
    for k, g in pred.groupby(list(keys)):
        ok = g[g.reason == ""]
        rec = dict(zip(keys, k)) | {"rows": len(g), "predicted": len(ok) / len(g)}
        for m in ("ttft", "tpot"):
            meas, p = ok[f"silicon_{m}_ms"], ok[f"pred_{m}_ms"]
            rec[f"{m}_mape"] = float(np.mean(np.abs(p / meas - 1))) * 100 if len(ok) else np.nan
            rec[f"{m}_cov"] = float(np.mean((ok[f"pred_{m}_lo_ms"] <= meas) & (meas <= ok[f"pred_{m}_hi_ms"]))) * 100 \
                if len(ok) else np.nan
        rows.append(rec)
    return pd.DataFrame(rows)


def osl_pair_spread(df: pd.DataFrame, max_concurrency: int = 8) -> pd.DataFrame:
    """Runs identical but for their output length, at low concurrency, where a request's TTFT is its own
    prefill and should not depend on how long the others decode: per (system, backend) the pairs, their
    median TTFT ratio (larger over smaller) and its mean excess. What no model of these columns can
    explain sets a floor under TTFT MAPE."""
    agg = df[df["mode"] == "agg"].copy()
    agg["conc"] = [concurrency_of(r) for r in agg.to_dict("records")]
    keys = ["system", "backend", "backend_version", "model_path", "gemm_quant_mode", "moe_quant_mode", "tp_size",
            "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "isl", "conc"]
    agg = agg[agg["conc"] <= max_concurrency]
    agg = agg.assign(**{k: agg[k].astype(object).fillna("") for k in keys})  # NaN keys group as one "" value
    rows = []
    for k, g in agg.groupby(keys):
        v = g.groupby("osl")["silicon_ttft_ms"].median().to_numpy()
        rows += [{"system": k[0], "backend": k[1], "ratio": max(a, b) / min(a, b)}
                 for i, a in enumerate(v) for b in v[i + 1:]]
    pairs = pd.DataFrame(rows, columns=["system", "backend", "ratio"])
    return pairs.groupby(["system", "backend"])["ratio"].agg(
        pairs="size", median_ratio="median", mean_excess_pct=lambda r: float((r - 1).mean() * 100)).reset_index()


def monotone_mape_fit(x, y) -> np.ndarray:
    """The non-decreasing-in-x fit minimising mean |fit / y - 1| (tied x share one value): L1 isotonic
    regression with weights 1/y by pool-adjacent-violators, each pooled block at its weighted median."""
    def wmed(v, w):
        o = np.argsort(v, kind="stable")
        return v[o][np.searchsorted(np.cumsum(w[o]), w.sum() / 2.0)]

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    blocks = []  # [values, weights, fitted value]
    for xv in np.unique(x):
        v = y[x == xv]
        blocks.append([v, 1.0 / v, wmed(v, 1.0 / v)])
        while len(blocks) > 1 and blocks[-2][2] > blocks[-1][2]:
            v2, w2, _ = blocks.pop()
            v1, w1, _ = blocks.pop()
            v, w = np.concatenate([v1, v2]), np.concatenate([w1, w2])
            blocks.append([v, w, wmed(v, w)])
    fit = np.empty_like(y)  # blocks hold the rows of ascending x in turn: put each level back on its rows
    fit[np.concatenate([np.flatnonzero(x == xv) for xv in np.unique(x)])] = \
        np.concatenate([np.full(len(b[0]), b[2]) for b in blocks])
    return fit


def monotone_floor(df: pd.DataFrame) -> pd.DataFrame:
    """Disaggregated runs that do not say how many workers they used: per (system, backend), the TPOT MAPE of
    the best TPOT non-decreasing in concurrency within each configuration (same columns but concurrency),
    fitted on the scored rows themselves (`monotone_mape_fit`). With worker counts fixed, TPOT cannot fall as
    concurrency rises; what this in-sample fit still misses is set by what the rows leave out (worker counts,
    speculative decoding): a floor under any predictor that is monotone in concurrency."""
    g = df[(df["mode"] == "disagg") & df["decode_num_workers"].isna() & (df["silicon_tpot_ms"] > 0)].copy()
    if g.empty:
        return pd.DataFrame(columns=["system", "backend", "rows", "floor_tpot_mape"])
    g["conc"] = [concurrency_of(r) for r in g.to_dict("records")]
    keys = ["system", "backend", "backend_version", "model_path", "precision", "isl", "osl", "prefill_tp_size",
            "decode_tp_size", "decode_attention_dp_size", "decode_moe_ep_size"]
    rows = []
    for k, h in g.groupby(keys, dropna=False):
        y = h["silicon_tpot_ms"].to_numpy()
        ape = np.abs(monotone_mape_fit(h["conc"].to_numpy(), y) / y - 1.0) * 100.0
        rows += [{"system": k[0], "backend": k[1], "ape": a} for a in ape]
    return pd.DataFrame(rows).groupby(["system", "backend"])["ape"].agg(rows="size", floor_tpot_mape="mean").reset_index()


def overall(pred: pd.DataFrame) -> dict:
    ok = pred[pred.reason == ""]
    out = {"rows": len(pred), "predicted": len(ok) / len(pred) * 100}
    for m in ("ttft", "tpot"):
        meas = ok[f"silicon_{m}_ms"]
        out[f"{m}_mape"] = float(np.mean(np.abs(ok[f"pred_{m}_ms"] / meas - 1))) * 100
        out[f"{m}_median_ape"] = float(np.median(np.abs(ok[f"pred_{m}_ms"] / meas - 1))) * 100
        out[f"{m}_cov"] = float(np.mean((ok[f"pred_{m}_lo_ms"] <= meas) & (meas <= ok[f"pred_{m}_hi_ms"]))) * 100
    # a closed loop's e2e, TTFT + TPOT x (osl - 1), and its interval as `predict-serving` composes it (the parts'
    # bounds summed: `serving.api._result`)
    decode = ok["osl"] - 1
    meas = ok["silicon_ttft_ms"] + ok["silicon_tpot_ms"] * decode
    lo, hi = (ok[f"pred_ttft_{b}_ms"] + ok[f"pred_tpot_{b}_ms"] * decode for b in ("lo", "hi"))
    out["e2e_cov"] = float(np.mean((lo <= meas) & (meas <= hi))) * 100
    # the rule before: e2e scaled by the wider of TTFT's and TPOT's quantiles
    e2e = ok["pred_ttft_ms"] + ok["pred_tpot_ms"] * decode
    ratio = {b: [ok[f"pred_{m}_{b}_ms"] / ok[f"pred_{m}_ms"] for m in ("ttft", "tpot")] for b in ("lo", "hi")}
    lo, hi = e2e * np.minimum(*ratio["lo"]), e2e * np.maximum(*ratio["hi"])
    out["e2e_cov_widest"] = float(np.mean((lo <= meas) & (meas <= hi))) * 100
    return out


def in_sample(df: pd.DataFrame, comps: pd.DataFrame) -> pd.DataFrame:
    """The aggregated rows the engine constants are fitted on (`components`), each predicted with constants
    fitted on its own system's such rows (in-sample, by the fit's own loss). Where this is no closer than held
    out, what is left is not the carrying of the constants to a new GPU."""
    preds = []
    for system in SYSTEMS:
        mine = df.index[(df.system == system) & df.index.isin(comps.index)]
        engines = fit_engines(comps[comps.index.isin(mine)])
        preds.append(predict_rows(df.loc[mine], DATA / "model_configs", Calibration(engines=engines)))
    return pd.concat(preds)


def offset_free_mape(pred: pd.DataFrame) -> dict:
    """MAPE per metric once each configuration's (`measured.KEYS`, as calibration groups runs) median error is
    divided out: what no constant per GPU, engine, version or model could remove (the error over concurrency,
    lengths and parallelism)."""
    ok = pred[pred.reason == ""]
    groups = measured.config_key(ok)
    out = {"configurations": int(groups.nunique())}
    for m in ("ttft", "tpot"):
        r = ok[f"pred_{m}_ms"] / ok[f"silicon_{m}_ms"]
        out[m] = float(np.mean(np.abs(r / r.groupby(groups).transform("median") - 1))) * 100
    return out


#: columns that with the configuration and the concurrency make two runs the same run
SAME_RUN = ("isl", "osl", "tp_size", "pp_size", "attention_dp_size", "moe_ep_size", "gemm_quant_mode",
            "moe_quant_mode", "batch_size")


def one_measured_run(pred: pd.DataFrame) -> dict:
    """Few-shot calibration (`serving.measured`) scored on held-out predictions: in each configuration with at
    least three aggregated runs, the run of lowest concurrency is taken as measured on the user's deployment and
    calibrates the others, which are scored before and after (MAPE and 90% coverage per metric)."""
    ok = pred[measured.aggregated(pred)].assign(reason="")
    keys = measured.config_key(ok)
    conc = pd.Series([concurrency_of(r) for r in ok.to_dict("records")], index=ok.index)
    big = keys.map(keys.value_counts()) >= 3
    first = conc[big].groupby(keys[big]).idxmin()
    # a scored run that repeats its configuration's measured run (same lengths, split, quantization, concurrency)
    # would score the measurement itself: left out
    run = keys + "|" + ok.reindex(columns=list(SAME_RUN)).astype(object).fillna("").astype(str).agg("|".join, axis=1) \
        + "|" + conc.astype(str)
    repeat = run.isin(run.loc[first.to_numpy()].to_numpy())
    rest = ok[big & ~repeat]
    after = measured.calibrate(rest, measured.offsets(ok.loc[first.to_numpy()]))
    out = {"configurations": int(len(first)), "rows": int(len(rest)),
           "repeats": int((big & repeat).sum() - len(first))}
    for m in ("ttft", "tpot"):
        meas = rest[f"silicon_{m}_ms"]
        for tag, df in (("before", rest), ("after", after)):
            out[f"{m}_{tag}"] = float(np.mean(np.abs(df[f"pred_{m}_ms"] / meas - 1))) * 100
            inside = (df[f"pred_{m}_lo_ms"] <= meas) & (meas <= df[f"pred_{m}_hi_ms"])
            out[f"{m}_cov_{tag}"] = float(np.mean(inside)) * 100
    return out


def plot(pred: pd.DataFrame, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    ok = pred[pred.reason == ""]
    for ax, m in zip(axes, ("ttft", "tpot")):
        for (sys_, mode), g in ok.groupby(["system", "mode"]):
            ax.scatter(g[f"silicon_{m}_ms"], g[f"pred_{m}_ms"], s=6, alpha=0.5, label=f"{sys_} {mode}")
        lim = [ok[[f"silicon_{m}_ms", f"pred_{m}_ms"]].min().min(), ok[[f"silicon_{m}_ms", f"pred_{m}_ms"]].max().max()]
        ax.plot(lim, lim, "k--", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel=f"measured {m.upper()} (ms)", ylabel=f"predicted {m.upper()} (ms)",
               title=f"{m.upper()}, each system held out")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def cli_seconds(df: pd.DataFrame, rows: int = 1000) -> tuple[float, float]:
    """Wall seconds, process start included, of one `predict-serving` call and of `--rows` on `rows` runs
    (the issue's speed targets: under 5 s a call, under 60 s per 1,000 runs)."""
    import subprocess
    import sys
    import tempfile

    cfg = DATA / "model_configs" / "meta-llama--Meta-Llama-3.1-70B_config.json"
    one = [sys.executable, "-m", "hybridperf", "predict-serving", "--config", str(cfg), "--device", "h100_sxm",
           "--engine", "vllm", "--isl", "1024", "--osl", "1024", "--concurrency", "64", "--tp", "4",
           "--precision", "fp8", "--json"]
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs.csv"
        df.sample(min(rows, len(df)), random_state=0).to_csv(runs, index=False)
        many = [sys.executable, "-m", "hybridperf", "predict-serving", "--rows", str(runs), "--configs",
                str(DATA / "model_configs"), "--output", str(Path(tmp) / "out.csv")]
        out = []
        for cmd in (one, many):
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            out.append(time.perf_counter() - t0)
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-calibration", action="store_true")
    ap.add_argument("--out", default=str(RESULTS), help="folder for serving_silicon.md/.png (default results/)")
    ap.add_argument("--predictions", help="also write the held-out predictions (CSV) here")
    args = ap.parse_args()
    out = Path(args.out) / "serving_silicon"
    df = pd.read_csv(DATA / "systems/silicon_sample.csv")
    df = df[df.system.isin(SYSTEMS)].reset_index(drop=True)
    t0 = time.time()
    comps = components(df)
    preds, cals, fold_models = [], {}, FoldModels()
    for held in SYSTEMS:
        train = df.system != held
        models = fold_models.for_held_out(held)
        others = ", ".join(s for s in SYSTEMS if s != held)
        cal = fit(df[train], components(df[train], models),
                  f"silicon_sample.csv rows of {others} (experiments/serving/serving_silicon.py)", models=models)
        cals[held] = cal
        preds.append(predict_rows(df[~train], DATA / "model_configs", cal, models))
    pred = pd.concat(preds)
    if args.predictions:
        pred.to_csv(args.predictions, index=False)
    t1 = time.time()
    table = score(pred)
    tot = overall(pred)
    out.parent.mkdir(parents=True, exist_ok=True)
    plot(pred, out.with_suffix(".png"))
    reasons = pred[pred.reason != ""].groupby("reason").size().sort_values(ascending=False)
    agg = pred[pred["mode"] == "agg"]
    lines = ["# Serving: held-out accuracy on aiconfigurator's silicon runs", "",
             "Reproduce: `python -m experiments.serving.serving_silicon` (each system scored with a calibration "
             "fitted on the other system only; physics from the project's kernel priors and collective model, their "
             "attention, MLA decode, sparse MLA, linear-attention and collective constants fitted without the scored "
             "system's tables).", "",
             f"Rows: {tot['rows']}; predicted {tot['predicted']:.1f}%. TTFT MAPE {tot['ttft_mape']:.1f}% (median APE "
             f"{tot['ttft_median_ape']:.1f}%), coverage {tot['ttft_cov']:.1f}%; TPOT MAPE {tot['tpot_mape']:.1f}% "
             f"(median APE {tot['tpot_median_ape']:.1f}%), coverage {tot['tpot_cov']:.1f}%; e2e (TTFT + TPOT x "
             f"(osl - 1)) coverage {tot['e2e_cov']:.1f}% (e2e scaled by the wider of their quantiles instead: "
             f"{tot['e2e_cov_widest']:.1f}%). "
             f"Targets: >= 90% predicted, TPOT <= 12%, TTFT <= 20%, coverage 80-95%.", "",
             table.to_markdown(index=False, floatfmt=".1f"), "",
             "Per interval stratum (`interval_stratum`: a disaggregated run without its worker counts has "
             "quantiles of its own, from the other system's such runs):", "",
             score(pred.assign(interval_stratum=pred["interval_stratum"].fillna("").replace("", "other runs")),
                   ("interval_stratum",)).to_markdown(index=False, floatfmt=".1f"),
             "", "Aggregated runs by attention data-parallelism (attention-DP runs pay the experts' dispatch and "
             "combine):", "",
             score(agg.assign(attention_dp=np.where(agg["attention_dp_size"].fillna(1) > 1, "attention-DP", "none")),
                   ("attention_dp",)).to_markdown(index=False, floatfmt=".1f"),
             "", "Calibration fitted per held-out system:", ""]
    for held, cal in cals.items():
        eng = "; ".join(f"{k}: scale {v.prefill_scale:.2f}/{v.gpu_scale:.2f}, eager {v.eager_ms * 1e3:.0f} "
                        f"us/layer, graph {v.graph_ms * 1e3:.0f} us/layer, ttft {v.ttft_ms:.1f} ms, "
                        f"wave weight {v.wave_weight:.2f}"
                        for k, v in cal.engines.items())
        q = "; ".join(f"{name or 'other runs'}: " + ", ".join(f"{k} [{lo:.2f}, {hi:.2f}]" for k, (lo, hi) in qs.items())
                      for name, qs in [("", cal.log_quantiles), *cal.stratum_quantiles.items()])
        lines.append(f"- scoring {held}: {eng}; log-residual 5/95%: {q}")
    lines += ["", "Refused rows:", ""] + ([f"- {n} x {r}" for r, n in reasons.items()] or ["- none"])
    lines += ["", "Runs identical but for their output length, at concurrency <= 8 (a request's TTFT is its own "
              "prefill there): how far apart their measured TTFTs are (`osl_pair_spread`).", "",
              osl_pair_spread(df).to_markdown(index=False, floatfmt=".2f")]
    floor = monotone_floor(df)
    lines += ["", "Disaggregated runs without worker counts: the TPOT MAPE of the MAPE-optimal fit non-decreasing "
              "in concurrency per configuration, fitted on these rows themselves (`monotone_floor`); overall "
              f"{np.average(floor['floor_tpot_mape'], weights=floor['rows']):.1f}%. Our held-out predictions of "
              "the same rows are in the interval-stratum table above.", "",
              floor.to_markdown(index=False, floatfmt=".1f")]
    own = in_sample(df, comps)
    fitted = pred.loc[own.index]  # the same runs held out (predict_rows keeps the rows' index)
    mine, held, flat = overall(own), overall(fitted), offset_free_mape(own)
    side = score(fitted)[["system", "backend", "mode", "ttft_mape", "tpot_mape"]].merge(
        score(own)[["system", "backend", "mode", "ttft_mape", "tpot_mape"]], on=["system", "backend", "mode"],
        suffixes=("_held_out", "_in_sample"))
    lines += ["", f"Fitted on the scored system itself: on the {mine['rows']} aggregated runs the engine constants "
              "are fitted on, constants fitted on that system's own such runs (in-sample, by the fit's soft-L1 log "
              f"loss, not MAPE) give TTFT {mine['ttft_mape']:.1f}% and TPOT {mine['tpot_mape']:.1f}% MAPE, against "
              f"{held['ttft_mape']:.1f}% and {held['tpot_mape']:.1f}% held out: fitting them on the GPU itself does "
              f"not close the gap to the targets. Dividing out each of the {flat['configurations']} configurations' "
              f"median error ({', '.join(measured.KEYS)}) as well leaves TTFT {flat['ttft']:.1f}% and TPOT "
              f"{flat['tpot']:.1f}%: most of the error moves with concurrency, lengths and parallelism inside a "
              "configuration.", "", side.to_markdown(index=False, floatfmt=".1f")]
    one = one_measured_run(pred)
    lines += ["", "One measured run per configuration (`predict-serving --rows ... --calibration MEASURED.csv`, "
              "`serving.measured`): in each of the {configurations} configurations ({keys}) with at least three "
              "aggregated runs, its lowest-concurrency run is taken as measured and scales the predictions of the "
              "other {rows} ({repeats} runs that repeat a measured one left out; its log ratio times n / (n + 1) "
              "= 0.5, which beat 0.75 and 1 on these runs). "
              "TTFT {ttft_before:.1f} -> {ttft_after:.1f}% MAPE "
              "(coverage {ttft_cov_before:.1f} -> {ttft_cov_after:.1f}%), TPOT {tpot_before:.1f} -> {tpot_after:.1f}% "
              "(coverage {tpot_cov_before:.1f} -> {tpot_cov_after:.1f}%), every prediction held out as above."
              .format(keys=", ".join(measured.KEYS), **one)]
    call_s, rows_s = cli_seconds(df)
    lines += ["", f"Time: {t1 - t0:.0f} s for components, fits and {len(pred)} predicted rows on the shared 2-core "
              f"machine. CLI, process start included: one `predict-serving` call {call_s:.1f} s, `--rows` on 1,000 "
              f"runs {rows_s:.1f} s.", "", "![scatter](serving_silicon.png)"]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:8]))
    if args.write_calibration:  # the interval of a GPU the fit has not seen: the held-out residuals' spread
        fit(df, comps, "silicon_sample.csv rows of " + ", ".join(SYSTEMS) + "; interval from their leave-one-"
            "system-out residuals (experiments/serving/serving_silicon.py --write-calibration)", log_quantiles(pred)).save()


if __name__ == "__main__":
    main()
