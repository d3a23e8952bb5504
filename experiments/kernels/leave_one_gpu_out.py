"""Leave-one-GPU-out evaluation of the hybrid kernel predictor (issue: residual models).

For each NVIDIA training GPU d of the NeuSight artifact: fit the residual models on every kernel of
the other four GPUs (training and test tables), choose the MLP/XGBoost blend and shrinkage and calibrate the 90%
interval on the other folds' held-out errors (never on d), and score d's *test* table. Reports per
op class MAPE of plain roofline, the best prior, and the hybrid, plus interval coverage.

The intervals are calibrated per launch-floor regime (`hybridperf.residual_models.intervals`) on the
held-out GPUs' test tables *and* a sample of their collect files (up to --max-rows kernels per GPU and
op class), whose small kernels the test tables lack. Those collect rows calibrate intervals only: the
blend is chosen, and MAPE reported, on the test tables as before. Coverage is reported on both.

    python -m experiments.kernels.leave_one_gpu_out --data ../shared/datasets --out experiments/out/logo \
        --save-bundles experiments/out/logo_bundles     # NeuSight's five GPUs
    python -m experiments.kernels.leave_one_gpu_out --vidur --data ../shared/datasets   # a100 -> a40, fp16
    python -m experiments.kernels.leave_one_gpu_out --with-vidur --measured experiments/data/measured/h200 \
        --measured-dtypes fp32,fp16 --out experiments/out/logo_shipped \
        --ship exported_models/kernels                  # + Vidur and our H200 (fp32, fp16): the shipped bundle

`--save-bundles DIR` writes one ONNX bundle per held-out GPU (DIR/<GPU>/kernels) for
experiments/models/model_latency.py.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd


from experiments.common import DATA, OUT
from hybridperf.datasets.neusight import load_test  # noqa: E402
from hybridperf.predictor import device_shift_sd  # noqa: E402
from hybridperf.priors.constants import fitted_constants  # noqa: E402
from hybridperf.stats import Z90, widen_about, widen_in_quadrature  # noqa: E402
from hybridperf.residual_models.intervals import FLOOR_SHARE_EDGES, rows_quantiles  # noqa: E402
from hybridperf.training.kernel_data import KEY, load_measured_grid, load_neusight_training, subsample  # noqa: E402
from hybridperf.training.kernels import (  # noqa: E402
    TrainConfig, blended, choose_blend, conformal_interval, export_bundle, leave_one_gpu_out, per_stratum, stratum,
)


def selection(logo: pd.DataFrame, d: str, cfg: TrainConfig, calibration: pd.DataFrame | None) -> tuple[dict, dict]:
    """Blend/shrinkage and interval for held-out device d, from the other folds only, or from
    `calibration` (held-out predictions that never involve d) when there is a single fold."""
    if calibration is not None:
        choice = choose_blend(calibration)
        return choice, conformal_interval(calibration, choice, cfg)
    choice = choose_blend(logo, exclude_device=d)
    return choice, conformal_interval(logo, choice, cfg, exclude_device=d)


def score(logo: pd.DataFrame, cfg: TrainConfig, calibration: pd.DataFrame | None = None) -> pd.DataFrame:
    """Held-out predictions and intervals with nested selection (see `selection`)."""
    parts = []
    for d, g in logo.groupby("heldout"):
        choice, iv = selection(logo, d, cfg, calibration)
        r = blended(g, choice)
        pred = g["prior_ms"].to_numpy() * np.exp(r)
        # d is unseen, as in Predictor: the device-level term for a bundle trained on the other folds'
        # GPUs (a `calibration` table means a single training GPU, cross-validated within itself)
        n_train = logo.loc[logo["heldout"] != d, "heldout"].nunique() if calibration is None else 1
        bounds, keys = {}, stratum(g)
        # the interval by floor share, and for comparison one interval per stratum (the flat rule)
        for name, ivs in (("", iv), ("_flat", {k: {**v, "by_floor_share": None} for k, v in iv.items()})):
            q_lo, q_hi, q_c = rows_quantiles(ivs, keys, g["op_class"], g["floor_share"])
            q_lo, q_hi = widen_about(q_lo, q_hi, q_c, 1.0 + cfg.ood_beta * g["ood"].to_numpy())
            q_lo, q_hi = widen_in_quadrature(q_lo, q_hi, Z90 * device_shift_sd(n_train))
            bounds |= {f"lo{name}_ms": pred * np.exp(q_lo), f"hi{name}_ms": pred * np.exp(q_hi)}
        w, lam = per_stratum(g, choice, "mlp_weight", 0.5), per_stratum(g, choice, "shrink", 1.0)
        parts.append(g.assign(pred_ms=pred, **bounds, choice=[f"w{float(a)}/s{float(b)}" for a, b in zip(w, lam)]))
    return pd.concat(parts, ignore_index=True)


def calibration_rows(root: Path, test: pd.DataFrame, cfg: TrainConfig) -> pd.DataFrame:
    """`test` plus a sample of the collect files' kernels (at most cfg.max_rows per GPU and op class,
    none already in `test`), marked `calibration_only`: held out, they calibrate intervals only."""
    collect = subsample(load_neusight_training(root, splits=("train",)), cfg.max_rows, cfg.seed)
    seen = pd.MultiIndex.from_frame(test[KEY].fillna(-1))
    collect = collect[~pd.MultiIndex.from_frame(collect[KEY].fillna(-1)).isin(seen)]
    return pd.concat([test.assign(calibration_only=False), collect.assign(calibration_only=True)], ignore_index=True)


def add_measured_gpu(train: pd.DataFrame, evaluate: pd.DataFrame, gpu_dir: Path, dtypes) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One of our measured GPUs as a fold, like NeuSight's: every kernel of its grids (`dtypes`) trains the
    other folds; held out, its test grid (`dtypes`) is scored and its training grid calibrates intervals only."""
    grid = load_measured_grid(gpu_dir, dtypes=tuple(dtypes))
    test = load_measured_grid(gpu_dir, splits=("test",), dtypes=tuple(dtypes))
    seen = pd.MultiIndex.from_frame(test[KEY].fillna(-1))
    rest = load_measured_grid(gpu_dir, splits=("train",), dtypes=tuple(dtypes))
    rest = rest[~pd.MultiIndex.from_frame(rest[KEY].fillna(-1)).isin(seen)]
    return (pd.concat([train, grid], ignore_index=True),
            pd.concat([evaluate, test.assign(calibration_only=False), rest.assign(calibration_only=True)], ignore_index=True))


def coverage_by_regime(scored: pd.DataFrame) -> pd.DataFrame:
    """Coverage (%) of the held-out GPUs' kernels per op class and floor-share bin, test tables and
    collect samples apart: the interval by floor share, and one interval per op class (`flat`)."""
    inside = lambda lo, hi: ((scored["latency_ms"] >= scored[lo]) & (scored["latency_ms"] <= scored[hi])) * 100  # noqa: E731
    s = scored.assign(by_floor_share=inside("lo_ms", "hi_ms"), flat=inside("lo_flat_ms", "hi_flat_ms"),
                      table=np.where(scored.get("calibration_only", False), "collect", "test"),
                      floor_share=pd.cut(scored["floor_share"], [0.0, *FLOOR_SHARE_EDGES, 1.0]))
    tab = s.pivot_table(index=["op_class", "floor_share"], columns="table", values=["flat", "by_floor_share"],
                        aggfunc="mean", observed=True).round(1)
    n = s.pivot_table(index=["op_class", "floor_share"], columns="table", values="flat", aggfunc="size", observed=True)
    return tab.join(n.set_axis(pd.MultiIndex.from_product([["n"], n.columns]), axis=1))


def summarize(scored: pd.DataFrame) -> pd.DataFrame:
    if "calibration_only" in scored.columns:
        scored = scored[~scored["calibration_only"].to_numpy(bool)]
    ape = lambda p: (np.abs(p / scored["latency_ms"] - 1) * 100)  # noqa: E731
    s = scored.assign(roofline=ape(scored["roofline_ms"]), prior=ape(scored["prior_ms"]), hybrid=ape(scored["pred_ms"]),
                      covered=((scored["latency_ms"] >= scored["lo_ms"]) & (scored["latency_ms"] <= scored["hi_ms"])) * 100)
    by = ["heldout", "op_class"] + (["dtype"] if scored["dtype"].nunique() > 1 else [])  # half precision apart
    tab = s.groupby(by).agg(n=("hybrid", "size"), roofline=("roofline", "mean"), prior=("prior", "mean"),
                            hybrid=("hybrid", "mean"), coverage=("covered", "mean"), choice=("choice", "first"))
    return tab.round(1)


def plot(tab: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    devs = tab.index.get_level_values(0).unique()
    fig, axes = plt.subplots(1, len(devs), figsize=(4 * len(devs), 3.6), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, d in zip(axes, devs):
        t = tab.loc[d]
        x = np.arange(len(t))
        for i, (col, c) in enumerate((("roofline", "#bbbbbb"), ("prior", "#6baed6"), ("hybrid", "#08519c"))):
            ax.bar(x + (i - 1) * 0.27, t[col], 0.27, label=col, color=c)
        ax.axhline(12, color="red", lw=0.8, ls="--")
        ax.set_xticks(x, [" ".join(i) if isinstance(i, tuple) else i for i in t.index], rotation=30)
        ax.set_title(f"held out: {d}", fontsize=9)
        ax.set_yscale("log")
    axes[0].set_ylabel("MAPE % (log scale)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--out", default=str(OUT / "logo"))
    ap.add_argument("--max-rows", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--devices", default=None, help="comma-separated held-out devices (default: all)")
    ap.add_argument("--vidur", action="store_true", help="train on Vidur a100 fp16 tables, predict a40")
    ap.add_argument("--with-vidur", action="store_true",
                    help="add Vidur's fp16 A100 and A40 tables (kernel timing) to the NeuSight GPUs: 7 folds")
    ap.add_argument("--measured", nargs="*", default=[], metavar="DIR",
                    help="GPUs we measured on NeuSight's shape lists (experiments/data/measured/<gpu>, its grid/ "
                    "folder): one more fold each; their train and test grids train the other folds, the test grid "
                    "is scored when held out")
    ap.add_argument("--measured-dtypes", default="fp32", help="dtypes of the --measured grids that train, comma-separated")
    ap.add_argument("--save-bundles", default=None, help="write one bundle per held-out GPU here")
    ap.add_argument("--ship", default=None, help="also fit on every GPU and write the shipped bundle here "
                    "(blend and interval from all folds' held-out errors)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = TrainConfig(seed=args.seed, max_rows=args.max_rows)
    t0 = time.time()
    log = lambda s: print(f"[{time.time() - t0:6.0f}s] {s}", flush=True)  # noqa: E731
    data = Path(args.data)
    calibration = None
    if args.vidur:
        from hybridperf.datasets.vidur_compute import load_vidur_compute
        from hybridperf.training.per_device import cross_validate

        vid = load_vidur_compute(data / "vidur" if (data / "vidur").exists() else data)
        train, evaluate = vid, vid
        devices = ["NVIDIA A40"]  # fit on A100 only, predict A40
        name = "vidur"
        # one training GPU: blend and interval from cross-validation within it, never from the A40
        log("3-fold cross-validation within the A100 for blend and interval")
        calibration = cross_validate(train[train["device"] != devices[0]], cfg, progress=log)
    else:
        root = data / "neusight" if (data / "neusight").exists() else data
        # the other GPUs' test-table kernels train too; the held-out GPU's rows are never seen
        train = load_neusight_training(root, splits=("train", "test"))
        evaluate = calibration_rows(root, load_test(root), cfg)
        name = "neusight"
        if args.with_vidur:  # Vidur's fp16, profiler-timed A100 and A40 rows: two more folds
            from hybridperf.datasets.vidur_compute import load_vidur_compute

            vid = load_vidur_compute(data / "vidur" if (data / "vidur").exists() else data)
            train = pd.concat([train, vid], ignore_index=True)
            evaluate = pd.concat([evaluate, vid.assign(calibration_only=False)], ignore_index=True)
            name = "neusight_vidur"
        for gpu_dir in args.measured:
            train, evaluate = add_measured_gpu(train, evaluate, Path(gpu_dir), args.measured_dtypes.split(","))
            name += "_" + Path(gpu_dir).name
        devices = args.devices.split(",") if args.devices else sorted(train["device"].unique())
    log(f"{len(train)} training rows, holding out {devices}")
    logo, models = leave_one_gpu_out(train, evaluate, cfg, devices=devices, progress=log, keep_models=True,
                                     fold_constants=fitted_constants)
    scored = score(logo, cfg, calibration)
    scored.to_csv(out / f"{name}_heldout_predictions.csv", index=False)
    tab = summarize(scored)
    tab.to_csv(out / f"{name}_mape.csv")
    md = ["# Leave-one-GPU-out kernel MAPE (%)", "",
          f"Train: every kernel of the other GPUs; score: the held-out GPU's {'profiled rows' if args.vidur else 'test table'}.",
          "Blend (w = MLP weight) and shrinkage (s) chosen on the other folds' held-out errors.", "",
          tab.reset_index().to_markdown(index=False)]
    print(tab.to_string())
    if "calibration_only" in scored.columns:
        cov = coverage_by_regime(scored)
        cov.to_csv(out / f"{name}_coverage_by_floor_share.csv")
        md += ["", "## 90% interval coverage (%) by floor share, held-out GPUs (nested)", "",
               cov.reset_index().to_markdown(index=False)]
        print(cov.to_string())
    (out / f"{name}_mape.md").write_text("\n".join(md) + "\n")
    plot(tab, out / f"{name}_mape.png")
    if args.save_bundles:
        for d, fitted in models.items():
            choice, iv = selection(logo, d, cfg, calibration)
            dest = Path(args.save_bundles) / d.replace(" ", "_") / "kernels"
            export_bundle(fitted, choice, iv, dest, train[train["device"] != d], cfg,
                          extra={"calibration": {"method": "split-conformal on the other folds", "heldout_device": d}},
                          constants=fitted_constants(d))
            log(f"saved bundle without {d} -> {dest}")
    if args.ship and not args.vidur:  # blend, shrinkage and interval per stratum from all folds
        from hybridperf.training.kernels import train_kernel_bundle

        train_kernel_bundle(train, Path(args.ship), cfg, logo=logo, progress=log)
        log(f"shipped bundle -> {args.ship}")
    log("done")


if __name__ == "__main__":
    main()
