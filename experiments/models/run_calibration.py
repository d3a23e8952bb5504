"""Whole-model calibration from k measured runs (`predict-model --measured-runs`), scored on runs the
calibration did not see.

For every GPU with whole-model measurements, each run in turn is the target; k of the GPU's other runs
(every subset, at most DRAWS of them) calibrate the composition (`hybridperf.graphs.measured_runs`),
and the target is predicted. Reported: MAPE per GPU and k (k = 0 is the zero-shot prediction), and
the coverage of the 90% interval.

  * NeuSight's eager labels (7 GPUs): the zero-shot constants of each GPU are fitted without it (as in
    `model_latency.py`), and the calibration's prior sds (SIGMA_SCALE, SIGMA_RUN) are re-estimated by
    empirical Bayes on the *other* GPUs' labels. Kernels: the analytical prior (the kernel bundle equals
    it on NeuSight's fp32 tables), with each GPU's tiles and BLAS table from the other GPUs' traces.
  * Our own H100 and H200 runs (`experiments/data/measured/*/models.csv`; no NeuSight label is Hopper):
    the shipped bundle, constants and sds; fp32 runs calibrate fp32 targets, half-precision runs
    half-precision ones.

    python -m experiments.models.run_calibration --out experiments/out/run_calibration     (~1 min)
"""
from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import REPO, add_data_argument, add_out_argument

from experiments.models import model_latency as ml
from hybridperf.graphs.compose import OOD_WIDEN, device_time_and_launches, posterior_interval  # noqa: E402
from hybridperf.graphs.measured_runs import SIGMA_GAP, SIGMA_RUN, SIGMA_SCALE, fit_posterior  # noqa: E402
from hybridperf.predictor import Predictor  # noqa: E402

KS = (1, 2, 3)
DRAWS = 30
MEASURED = {"NVIDIA H100 80GB HBM3": "h100", "NVIDIA H200": "h200"}


def empirical_bayes(resid: np.ndarray, device: np.ndarray) -> tuple[float, float]:
    """(sigma_scale, sigma_run): the spread of the device means of `resid` around 0 beyond what the
    within-device scatter explains, and the pooled within-device sd."""
    devs = np.unique(device)
    means = np.array([resid[device == d].mean() for d in devs])
    ns = np.array([(device == d).sum() for d in devs])
    ss = sum(((resid[device == d] - m) ** 2).sum() for d, m in zip(devs, means))
    s_run2 = ss / max(ns.sum() - len(devs), 1)
    s_scale2 = max(float(np.mean(means ** 2 - s_run2 / ns)), 1e-4)
    return float(np.sqrt(s_scale2)), float(np.sqrt(s_run2))


def score_group(meas, dev_ms, launches, bias, ood, model, scale, gap, s_scale, s_run, zero_lo, zero_hi,
                rng, zero_ms=None) -> list[dict]:
    """Leave-one-run-out within one group of runs: rows of (k, ape, covered, same_model) for every target
    and draw; `same_model`: a calibration run is of the target's model (another batch, length or mode).
    `zero_ms`: the zero-shot predictions (k = 0) where they are not scale x device time + gap x launches
    (`predict_model`'s, whose per-kernel host floor no calibration from runs keeps)."""
    rows = []
    n = len(meas)
    for i in range(n):
        zero = zero_ms[i] if zero_ms is not None else np.exp(bias[i]) * (scale * dev_ms[i] + gap * launches[i])
        rows.append({"k": 0, "ape": abs(zero / meas[i] - 1), "covered": zero_lo[i] <= meas[i] <= zero_hi[i],
                     "same_model": False})
        others = [j for j in range(n) if j != i]
        for k in KS:
            subsets = list(itertools.combinations(others, k))
            if not subsets:
                continue
            if len(subsets) > DRAWS:
                subsets = [subsets[s] for s in rng.choice(len(subsets), DRAWS, replace=False)]
            for sub in subsets:
                s = list(sub)
                th, cov = fit_posterior(dev_ms[s], launches[s], meas[s], bias[s], scale, gap,
                                        sigma_scale=s_scale, sigma_gap=SIGMA_GAP, sigma_run=s_run)
                sc, gp = scale * np.exp(th[0]), gap * np.exp(th[1])
                pred = np.exp(bias[i]) * (sc * dev_ms[i] + gp * launches[i])
                q_lo, q_hi = posterior_interval(dev_ms[i], launches[i], sc, gp, {"cov": cov, "sigma_run": s_run})
                widen = 1.0 + OOD_WIDEN * ood[i]
                ok = pred * np.exp(q_lo * widen) <= meas[i] <= pred * np.exp(q_hi * widen)
                rows.append({"k": k, "ape": abs(pred / meas[i] - 1), "covered": bool(ok),
                             "same_model": bool(np.any(model[s] == model[i]))})
    return rows


def neusight_rows(root: Path, rng) -> tuple[pd.DataFrame, pd.DataFrame]:
    labels, _ = ml.load_tables(root)
    labels = labels[(labels["variant"].fillna("") == "") & ~labels["fusion"].astype(bool)].reset_index(drop=True)
    devices = sorted(labels["device"].unique())
    prior = Predictor.prior_only()
    recs = ml.collect(labels, root / "data" / "DLmodel_configs", {d: prior for d in devices},
                      {d: "prior" for d in devices}, ml.held_out_library_efficiency(root, devices))
    ls = ml.LabelSet(recs)
    zero = ml.lodo(ls, ml.DEFAULT_VARIANT)
    rows, eb = [], []
    for d in np.unique(ls.device):
        p = zero.attrs["consts"][d]
        t = ls.kernel_t(p) * ls.count  # in-model time per kernel: the label's ood score is weighted by it
        w_ood = np.bincount(ls.idx, t * ls.ood, ls.n) / np.maximum(np.bincount(ls.idx, t, ls.n), 1e-300)
        others = ls.eager & (ls.device != d)
        r_other = np.log(ls.meas[others] / ls.total(p)[others])
        s_scale, s_run = empirical_bayes(r_other, ls.device[others])
        eb.append({"held out": d, "sigma_scale": s_scale, "sigma_run": s_run})
        m = np.flatnonzero(ls.eager & (ls.device == d))
        bias = np.where(ls.train[m], p["b_train"], p["b_inf"])
        names = np.array([recs[j]["model"] for j in m])
        for r in score_group(ls.meas[m], ls.D[m], ls.N[m], bias, w_ood[m], names, p["scale"], p["gap_ms"], s_scale,
                             s_run, zero["lo_ms"].to_numpy()[m], zero["hi_ms"].to_numpy()[m], rng):
            rows.append({"source": "NeuSight labels", "device": d, "group": "fp32", **r})
    all_eb = empirical_bayes(np.log(ls.meas[ls.eager] / ls.total(ml.fit_constants(ls, ls.eager, ml.DEFAULT_VARIANT))
                                    [ls.eager]), ls.device[ls.eager])
    eb.append({"held out": "(none: all devices)", "sigma_scale": all_eb[0], "sigma_run": all_eb[1]})
    return pd.DataFrame(rows), pd.DataFrame(eb)


def measured_rows(rng) -> pd.DataFrame:
    from experiments.gpu import gpu_check as gc

    from hybridperf.graphs import predict_model
    from hybridperf.graphs.compose import composition_params
    from hybridperf.priors.constants import fitted_constants

    pred = Predictor.load()
    fam = {c.removesuffix(".json"): f for c, f, *_ in gc.MODELS}
    rows = []
    for target, folder in MEASURED.items():
        runs = pd.read_csv(REPO / "experiments" / "data" / "measured" / folder / "models.csv")
        terms = []
        held_out = pred.with_constants(fitted_constants(target))  # no GPU priced with constants read off it
        for r in runs.to_dict("records"):
            cfg = gc._config(f"{r['model']}.json")
            cfg[gc.LAYER_KEY[fam[r["model"]]]] = int(r["layers"])
            p = predict_model(cfg, int(r["batch"]), int(r["seq"]), r["mode"], target, held_out, dtype=r["dtype"],
                              recompute=bool(r["recompute"]), attn="eager")
            k = p.kernels
            dev_ms, launches = device_time_and_launches(k)
            ood = float(np.sum(k["total_ms"] * k["ood"]) / k["total_ms"].sum())  # weighted as compose() does
            terms.append({"D": dev_ms, "N": launches, "ood": ood, "ms": p.ms, "lo": p.lo_ms, "hi": p.hi_ms,
                          "half": r["dtype"] != "fp32"})
        tt = pd.DataFrame(terms)
        par = {m: composition_params("bundle", m) for m in ("inf", "train")}
        for half, g in tt.groupby("half"):
            idx = g.index.to_numpy()
            bias = np.where(runs["mode"].to_numpy()[idx] == "train", par["train"]["log_bias"], par["inf"]["log_bias"])
            for r in score_group(runs["measured_ms"].to_numpy()[idx], g["D"].to_numpy(), g["N"].to_numpy(), bias,
                                 g["ood"].to_numpy(), runs["model"].to_numpy()[idx], par["inf"]["scale"], par["inf"]["gap_ms"], SIGMA_SCALE, SIGMA_RUN,
                                 g["lo"].to_numpy(), g["hi"].to_numpy(), rng, zero_ms=g["ms"].to_numpy()):
                rows.append({"source": "our runs", "device": target, "group": "fp16/bf16" if half else "fp32", **r})
    return pd.DataFrame(rows)


def plot(summary: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = plt.get_cmap("tab20").colors
    for i, ((src, dev, grp), g) in enumerate(summary.groupby(["source", "device", "group"], sort=False)):
        g = g.sort_values("k")
        lab = dev if grp == "fp32" else f"{dev} ({grp})"
        style = {"marker": "o", "color": colors[(2 * i) % 20 + (i >= 10)], "label": lab,
                 "linestyle": "--" if src == "our runs" else "-"}
        ax[0].plot(g["k"], g["MAPE %"], **style)
        ax[1].plot(g["k"], g["coverage %"], **style)
    ax[0].set(xlabel="measured runs used for calibration (k)", ylabel="MAPE % on the other runs",
              title="Whole-model error after calibration")
    ax[1].axhspan(85, 95, color="0.9")
    ax[1].set(xlabel="k", ylabel="coverage % of the 90% interval", title="Interval coverage", ylim=(0, 105))
    ax[0].legend(fontsize=7)
    for a in ax:
        a.set_xticks([0, *KS])
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_argument(ap)
    add_out_argument(ap, "run_calibration")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    root = Path(args.data)
    root = root / "neusight" if (root / "neusight").is_dir() else root
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    ns, eb = neusight_rows(root, rng)
    rows = pd.concat([ns, measured_rows(rng)], ignore_index=True)
    rows.to_csv(out / "scores.csv", index=False)
    # each target run weighs the same whatever its number of draws
    summary = (rows.groupby(["source", "device", "group", "k"], sort=False)
               .agg(**{"MAPE %": ("ape", "mean"), "max %": ("ape", "max"), "coverage %": ("covered", "mean"),
                       "scored": ("ape", "size")}).reset_index())
    summary[["MAPE %", "max %", "coverage %"]] *= 100
    summary.to_csv(out / "summary.csv", index=False)
    wide = summary.pivot_table(index=["source", "device", "group"], columns="k", values=["MAPE %", "coverage %"],
                               sort=False)
    wide.columns = [f"{m} k={k}" for m, k in wide.columns]
    ns_sum = summary[summary["source"] == "NeuSight labels"]
    full = ns_sum.groupby("device")["k"].nunique() == 1 + len(KS)  # GPUs with enough runs for every k
    mean_ns = (ns_sum[ns_sum["device"].isin(full[full].index)].groupby("k")[["MAPE %", "coverage %"]].mean())
    same = (rows[rows["k"] == 1].groupby(["source", "device", "group", "same_model"], sort=False)
            .agg(**{"MAPE %": ("ape", "mean"), "coverage %": ("covered", "mean"), "scored": ("ape", "size")})
            .reset_index())
    same[["MAPE %", "coverage %"]] *= 100
    same = same.pivot_table(index=["source", "device", "group"], columns="same_model",
                            values=["MAPE %", "coverage %", "scored"], sort=False)
    same.columns = [f"{m}, {'same model' if v else 'other model'}" for m, v in same.columns]
    lines = ["# Whole-model calibration from k measured runs (`predict-model --measured-runs`)", "",
             "Each run predicted from k *other* runs of the same GPU (every subset, at most "
             f"{DRAWS}); k = 0 is zero-shot. NeuSight labels: constants and prior sds from the other GPUs.",
             "", wide.round(1).reset_index().to_markdown(index=False), "",
             f"Mean over the NeuSight GPUs with at least {max(KS) + 1} labels ({int(full.sum())} of "
             f"{len(full)}; device-weighted):", "",
             mean_ns.round(1).reset_index().to_markdown(index=False), "",
             "k = 1, split by whether the calibration run is of the target's model (another batch, length or mode)"
             " or of another model:", "", same.round(1).reset_index().to_markdown(index=False), "",
             f"Empirical-Bayes prior sds (shipped: SIGMA_SCALE {SIGMA_SCALE}, SIGMA_RUN {SIGMA_RUN}, "
             f"SIGMA_GAP {SIGMA_GAP} assumed):", "", eb.round(3).to_markdown(index=False), ""]
    (out / "report.md").write_text("\n".join(lines))
    plot(summary, out / "run_calibration.png")
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
