"""Few-shot transfer curves (issue: calibrated uncertainty and few-shot transfer).

Leave-one-GPU-out over the NeuSight training GPUs, using the per-fold bundles written by
`leave_one_gpu_out.py --save-bundles` (each trained without the held-out GPU, its interval calibrated
on the other folds). For k = 0, 4, 8, 16, 32, 64 kernels of the held-out GPU's test table, chosen by
`suggest` (from a random half of the table, per draw) or at random, the predictor is adapted and
scored on the rest of the table: MAPE per op class and empirical coverage of the 90% interval,
averaged over 10 draws. Also a reliability diagram at k = 0 (nominal vs. empirical coverage).

The strength of the transfer prior (a factor on TransferPrior's scales) is chosen for each held-out
GPU by the same few-shot protocol on the *other* GPUs (random picks), never on the scored one; then,
on the same GPUs, a factor per op class on top of it (`choose_class_scale`, 1-16 kernels of the class).
With a single GPU (Vidur) the defaults, chosen that way on the NeuSight GPUs, are used.

    python -m experiments.transfer.fewshot_curve --bundles experiments/out/logo_bundles --out experiments/out/fewshot
    python -m experiments.transfer.fewshot_curve --vidur --bundles experiments/out/vidur_bundles   # a100 -> a40
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd


from experiments.common import DATA, OUT
from hybridperf.predictor import Predictor  # noqa: E402
from hybridperf.priors.constants import DEFAULT_CONSTANTS, PriorConstants, fitted_constants  # noqa: E402
from hybridperf.transfer import adapt_predictor, fit_corrections  # noqa: E402
from hybridperf.transfer.adapt import TransferPrior  # noqa: E402
from hybridperf.transfer.suggest import suggest_kernels  # noqa: E402

KS = (0, 4, 8, 16, 32, 64)
PRIOR_FACTORS = (0.5, 0.7, 1.0, 1.4, 2.0)  # candidate strengths of the transfer prior
CLASS_FACTORS = (0.1, 0.2, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0)  # candidate per-class factors on it


def fold_arguments(description: str, out_default: str) -> argparse.ArgumentParser:
    """The command line of a leave-one-GPU-out transfer experiment over `load_folds`' folds."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--bundles", default=str(OUT / "logo_bundles"))
    ap.add_argument("--out", default=out_default)
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--vidur", action="store_true")
    return ap


def load_folds(data: Path, bundles: Path, vidur: bool) -> tuple[str, dict]:
    """The table's name ("neusight" or "vidur") and, per held-out GPU with a bundle under `bundles`,
    (its bundle, its kernels of the test table)."""
    if vidur:
        from hybridperf.datasets.vidur_compute import load_vidur_compute

        table, name = load_vidur_compute(data / "vidur" if (data / "vidur").exists() else data), "vidur"
    else:
        from hybridperf.datasets.neusight import load_test

        table, name = load_test(data / "neusight" if (data / "neusight").exists() else data), "neusight"
    folds = {}
    for bdir in sorted(bundles.iterdir()):
        device = bdir.name.replace("_", " ")
        pool = table[table["device"] == device].reset_index(drop=True)
        if not pool.empty and (bdir / "kernels").exists():
            folds[device] = (bdir / "kernels", pool)
    return name, folds


def fold_transfer_prior(folds: dict, device: str) -> tuple[float, TransferPrior, dict | None]:
    """The transfer prior for held-out `device`, chosen on the other folds' GPUs only: its factor, the
    prior, and the per-class factors (None, the defaults, with no other GPU). Every GPU is priced with
    the prior constants fitted without `device`."""
    constants = fitted_constants(device)
    others = [zero_shot_errors(d, b, p, constants) for d, (b, p) in folds.items() if d != device]
    if not others:
        return 1.0, TransferPrior(), None
    factor, prior = choose_prior(others)
    return factor, prior, choose_class_scale(others, prior)


def zero_shot_errors(device: str, bundle: Path, pool: pd.DataFrame,
                     constants: PriorConstants = DEFAULT_CONSTANTS) -> dict:
    """Features, log-errors and op classes of the zero-shot model on `pool` (for choosing the prior)."""
    base = Predictor.load(bundle).with_constants(constants)
    out, X = base.predict_with_features(pool, device)
    return {"X": X, "e": np.log(pool["latency_ms"].to_numpy() / out["pred_ms"].to_numpy()),
            "oc": out["op_class"].to_numpy()}


def choose_prior(others: list, ks=(4, 16, 64), draws=3) -> tuple[float, TransferPrior]:
    """The prior factor with the lowest per-class MAPE after transfer on the `others` GPUs (random picks)."""
    scores = {}
    for factor in PRIOR_FACTORS:
        prior, mapes = TransferPrior().scaled(factor), []
        for d in others:
            n = len(d["e"])
            for k in ks:
                for draw in range(draws):
                    picked = np.random.default_rng(1000 * draw + k).choice(n, size=min(k, n), replace=False)
                    rest = np.setdiff1d(np.arange(n), picked)
                    corr, _ = fit_corrections(d["X"][picked], d["e"][picked], d["oc"][picked], prior, {})
                    c = np.zeros(len(rest))
                    for oc, f in corr.items():
                        m = d["oc"][rest] == oc
                        c[m] = f(d["X"][rest][m])
                    ape = pd.Series(np.abs(np.exp(c - d["e"][rest]) - 1)).groupby(d["oc"][rest]).mean()
                    mapes.append(ape.mean())
        scores[factor] = float(np.mean(mapes))
    factor = min(scores, key=scores.get)
    return factor, TransferPrior().scaled(factor)


def choose_class_scale(others: list, prior: TransferPrior, class_ks=(1, 2, 4, 8, 16), draws=8) -> dict:
    """Per op class, the factor on `prior` (CLASS_FACTORS) with the lowest MAPE of the class after
    transfer from 1-16 of its own kernels (random), averaged over the `others` GPUs; a class departs
    from 1.0 only where its factor is no worse than 1.0 on every one of them."""
    scores = {}  # (class, factor) -> per-GPU MAPE
    for d in others:
        for oc in np.unique(d["oc"]):
            idx = np.flatnonzero(d["oc"] == oc)
            X, e = d["X"][idx], d["e"][idx]
            for f in CLASS_FACTORS:
                mapes = []
                for kc in class_ks:
                    for draw in range(draws):
                        rng = np.random.default_rng(100 * draw + kc)
                        picked = rng.choice(len(idx), min(kc, len(idx)), replace=False)
                        rest = np.setdiff1d(np.arange(len(idx)), picked)
                        corr, _ = fit_corrections(X[picked], e[picked], np.full(len(picked), oc), prior, {oc: f})
                        mapes.append(np.mean(np.abs(np.exp(corr[oc](X[rest]) - e[rest]) - 1)))
                scores.setdefault((oc, f), []).append(float(np.mean(mapes)))
    chosen = {}
    for oc in sorted({oc for oc, _ in scores}):
        ok = [f for f in CLASS_FACTORS if len(scores[(oc, f)]) == len(scores[(oc, 1.0)])
              and all(a <= b for a, b in zip(scores[(oc, f)], scores[(oc, 1.0)]))]
        best = min(ok, key=lambda f: np.mean(scores[(oc, f)]))
        if best != 1.0:
            chosen[oc] = best
    return chosen


def evaluate(pred: pd.DataFrame) -> pd.DataFrame:
    y = pred["latency_ms"]
    return pred.assign(ape=np.abs(pred["pred_ms"] / y - 1) * 100,
                       covered=((y >= pred["lo_ms"]) & (y <= pred["hi_ms"])) * 100.0)


def run_device(device: str, bundle: Path, pool: pd.DataFrame, draws: int, log, prior: TransferPrior,
               class_scale: dict, constants: PriorConstants = DEFAULT_CONSTANTS) -> pd.DataFrame:
    base = Predictor.load(bundle).with_constants(constants)
    pool = pool.reset_index(drop=True).assign(pool_idx=np.arange(len(pool)))
    zero = evaluate(base.predict(pool, device))
    rows = []
    for k in KS:
        for strategy in ("suggest", "random"):
            for draw in range(draws):
                rng = np.random.default_rng(1000 * draw + k)
                if k == 0:
                    res = zero
                else:
                    if strategy == "random":
                        picked = rng.choice(len(pool), size=min(k, len(pool)), replace=False)
                    else:
                        half = pool.iloc[rng.choice(len(pool), size=len(pool) // 2, replace=False)]
                        picks = suggest_kernels(base, half, device, k, class_scale=class_scale)
                        picked = picks["pool_idx"].to_numpy()
                    rest = np.setdiff1d(np.arange(len(pool)), picked)
                    adapted = adapt_predictor(base, pool.iloc[picked], device, prior, class_scale)
                    res = evaluate(adapted.predict(pool.iloc[rest], device))
                per = res.groupby("op_class").agg(mape=("ape", "mean"), coverage=("covered", "mean"))
                per.loc["all"] = [res["ape"].mean(), res["covered"].mean()]
                for oc, r in per.iterrows():
                    rows.append({"heldout": device, "k": k, "strategy": strategy, "draw": draw, "op_class": oc,
                                 "mape": r["mape"], "coverage": r["coverage"]})
                if k == 0:
                    break  # k = 0 has nothing to draw
        log(f"{device}: k={k} done")
    return pd.DataFrame(rows)


def reliability(heldout_csv: Path, levels=(0.5, 0.6, 0.7, 0.8, 0.9, 0.95)) -> pd.DataFrame:
    """Empirical vs nominal coverage at k = 0, each GPU's interval calibrated on the other folds; the
    test table's kernels and the collect-file sample (`calibration_only`, small kernels too) apart."""
    from hybridperf.residual_models.intervals import rows_quantiles
    from hybridperf.stats import widen_about
    from hybridperf.training.kernels import TrainConfig, blended, choose_blend, conformal_interval, stratum

    logo = pd.read_csv(heldout_csv)
    if "calibration_only" not in logo.columns:
        logo["calibration_only"] = False
    rows = []
    for level in levels:
        cfg = TrainConfig(coverage=level)
        for d, g in logo.groupby("heldout"):
            choice = choose_blend(logo, exclude_device=d)
            iv = conformal_interval(logo, choice, cfg, exclude_device=d)
            e = (g["y"] - blended(g, choice)).to_numpy()
            q_lo, q_hi, q_c = rows_quantiles(iv, stratum(g), g["op_class"], g["floor_share"])
            lo, hi = widen_about(q_lo, q_hi, q_c, 1.0 + cfg.ood_beta * g["ood"].to_numpy())
            for table, m in (("test", ~g["calibration_only"].to_numpy(bool)), ("collect", g["calibration_only"].to_numpy(bool))):
                if m.any():
                    rows.append({"nominal": level * 100, "heldout": d, "table": table,
                                 "empirical": ((e[m] >= lo[m]) & (e[m] <= hi[m])).mean() * 100})
    return pd.DataFrame(rows)


def plot(curves: pd.DataFrame, rel: pd.DataFrame | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    classes = [c for c in curves["op_class"].unique() if c != "all"] + ["all"]
    n = len(classes) + 2
    fig, axes = plt.subplots(1, n, figsize=(3.3 * n, 3.3))
    mean = curves.groupby(["k", "strategy", "op_class"])[["mape", "coverage"]].mean().reset_index()
    for ax, oc in zip(axes, classes):
        for strat, style in (("suggest", "-o"), ("random", "--s")):
            m = mean[(mean["op_class"] == oc) & (mean["strategy"] == strat)]
            ax.plot(m["k"], m["mape"], style, label=strat, ms=3)
        ax.axhline(6, color="red", lw=0.7, ls=":")
        ax.set_title(oc)
        ax.set_xscale("symlog", linthresh=4)
        ax.set_xlabel("k measured kernels")
    axes[0].set_ylabel("MAPE % (mean over held-out GPUs)")
    axes[0].legend(fontsize=7)
    ax = axes[len(classes)]
    for strat, style in (("suggest", "-o"), ("random", "--s")):
        m = mean[(mean["op_class"] == "all") & (mean["strategy"] == strat)]
        ax.plot(m["k"], m["coverage"], style, label=strat, ms=3)
    ax.axhspan(85, 95, color="green", alpha=0.1)
    ax.set_ylim(50, 100)
    ax.set_title("90% interval coverage")
    ax.set_xscale("symlog", linthresh=4)
    ax = axes[-1]
    if rel is not None:
        colors = {d: f"C{i}" for i, d in enumerate(sorted(rel["heldout"].unique()))}
        for (d, table), g in rel.groupby(["heldout", "table"]):  # one colour per GPU; dotted: collect sample
            ax.plot(g["nominal"], g["empirical"], "-o" if table == "test" else ":x", ms=3, color=colors[d],
                    label=d.replace("NVIDIA ", "").replace("Tesla ", "") if table == "test" else None)
        ax.plot([50, 100], [50, 100], "k:", lw=0.8)
        ax.set_title("reliability, k = 0 (dotted: collect)", fontsize=9)
        ax.set_xlabel("nominal %")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = fold_arguments(__doc__, str(OUT / "fewshot"))
    ap.add_argument("--heldout-csv", default=str(OUT / "logo" / "neusight_heldout_predictions.csv"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = lambda s: print(s, flush=True)  # noqa: E731
    name, folds = load_folds(Path(args.data), Path(args.bundles), args.vidur)
    parts, chosen, class_chosen = [], {}, {}
    for device, (bundle, pool) in folds.items():
        # the prior's batched-SGEMM tiles come from the other GPUs' traces only, here as in training
        factor, prior, class_scale = fold_transfer_prior(folds, device)
        chosen[device], class_chosen[device] = factor, class_scale
        log(f"{device}: transfer prior factor {factor}, per class {class_scale} "
            f"(chosen on {len(folds) - 1} other GPUs)")
        parts.append(run_device(device, bundle, pool, args.draws, log, prior, class_scale, fitted_constants(device)))
    curves = pd.concat(parts, ignore_index=True)
    curves.to_csv(out / f"{name}_fewshot_draws.csv", index=False)
    rel = reliability(Path(args.heldout_csv)) if (not args.vidur and Path(args.heldout_csv).exists()) else None
    if rel is not None:
        rel.to_csv(out / f"{name}_reliability.csv", index=False)
    summary = curves.groupby(["heldout", "strategy", "k", "op_class"])[["mape", "coverage"]].mean().round(1)
    summary.to_csv(out / f"{name}_fewshot_summary.csv")
    wide = curves.groupby(["strategy", "k", "op_class"])["mape"].mean().unstack().round(1)
    cov = curves[curves["op_class"] == "all"].groupby(["strategy", "k"])["coverage"].mean().round(1)
    worst = curves.groupby(["heldout", "strategy", "k", "op_class"])["mape"].mean().unstack()
    md = ["# Few-shot transfer: MAPE (%) per op class, mean over held-out GPUs and draws", "",
          "Transfer prior factor per held-out GPU (chosen on the other GPUs; 1.0 = default): "
          + ", ".join(f"{d}: {f}" for d, f in chosen.items()), "",
          "Per-class factors on it (chosen on the other GPUs, the default CLASS_PRIOR_SCALE with one GPU): "
          + ", ".join(f"{d}: {s}" for d, s in class_chosen.items()), "",
          wide.to_markdown(), "", "## Coverage of the 90% interval (all op classes)", "", cov.to_frame().to_markdown(), "",
          "## Worst held-out GPU per op class (suggest)", "",
          worst.xs("suggest", level="strategy").groupby(level="k").max().round(1).to_markdown(), ""]
    if rel is not None:
        md += ["## Reliability at k = 0", "", rel.pivot(index=["table", "heldout"], columns="nominal", values="empirical").round(1).to_markdown()]
    (out / f"{name}_fewshot.md").write_text("\n".join(md) + "\n")
    plot(curves, rel, out / f"{name}_fewshot.png")
    print("\n".join(md))


if __name__ == "__main__":
    main()
