"""Bundles fitted on one GPU, scored on the others: does their 90% interval hold on a GPU they never saw?

For each of NeuSight's five GPUs, a small bundle is fitted on that GPU's kernels alone (`hybridperf train
--per-device`'s method: blend and interval from 3-fold cross-validation within the GPU) and predicts
the other four GPUs' test tables, zero-shot. Coverage and the median log-width (hi/lo) of the interval
are reported per op class with and without `predictor.ood_score`'s rule that skips device features
which never varied in training (`DEVICE_FEATURES`): with one training GPU, every other GPU's
`power_capped` or tiles per SM lies outside a zero-width range, and the interval was widened up to
3.5x on top of the device-level term a one-GPU bundle already adds (`SINGLE_GPU_DEVICE_SD`).

Vidur's A100 -> A40 (`fewshot_curve.py --vidur`, k = 0) is the same situation, held out from this.

    python -m experiments.kernels.single_gpu_bundles --data ../shared/datasets   # about 6 min (2 cores)
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd


import hybridperf.predictor as predictor_module  # noqa: E402
from experiments.common import DATA, OUT, inside
from hybridperf.datasets.neusight import load_test  # noqa: E402
from hybridperf.predictor import Predictor  # noqa: E402
from hybridperf.training.kernel_data import load_neusight_training  # noqa: E402
from hybridperf.training.kernels import TrainConfig  # noqa: E402
from hybridperf.training.per_device import train_single_device_bundle  # noqa: E402

# smaller than the shipped config: five bundles in minutes; the interval, not the fit, is under test
CONFIG = TrainConfig(seed=0, max_rows=3000, mlp={"hidden": (64,), "n_seeds": 1, "epochs": 20},
                     xgb={"n_estimators": 200, "max_depth": 6})


def score(bundle: Path, trained_on: str, test: pd.DataFrame, skip: bool) -> list[dict]:
    """Coverage and median log-width per (other GPU, op class), with the OOD rule on or off."""
    real = predictor_module.ood_score
    predictor_module.ood_score = lambda X, rng: real(X, rng, skip_device_constants=skip)
    try:
        pred, rows = Predictor.load(bundle), []
        for dev, t in test[test["device"] != trained_on].groupby("device"):
            res = pred.predict(t, dev)
            y = t["latency_ms"].to_numpy()
            covered = inside(y, res["lo_ms"], res["hi_ms"])
            width = np.log(res["hi_ms"] / res["lo_ms"]).to_numpy()
            for cls, idx in t.reset_index(drop=True).groupby("op_class").indices.items():
                rows.append({"trained on": trained_on, "scored on": dev, "op_class": cls,
                             "rule": "skip device constants" if skip else "all features",
                             "coverage": covered[idx].mean() * 100, "log_width": float(np.median(width[idx]))})
        return rows
    finally:
        predictor_module.ood_score = real


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=OUT / "single_gpu_bundles")
    args = ap.parse_args(argv)
    root = args.data / "neusight" if (args.data / "neusight").exists() else args.data
    train, test = load_neusight_training(root, splits=("train", "test")), load_test(root)
    rows = []
    for gpu in sorted(train["device"].unique()):
        bundle = args.out / gpu.replace(" ", "_")
        if not (bundle / "manifest.json").exists():
            print(f"fitting a bundle on {gpu} alone", flush=True)
            train_single_device_bundle(train[train["device"] == gpu], bundle, CONFIG)
        rows += score(bundle, gpu, test, skip=False) + score(bundle, gpu, test, skip=True)
    df = pd.DataFrame(rows)
    by_class = df.pivot_table(index="op_class", columns="rule", values=["coverage", "log_width"]).round(2)
    by_gpu = df.pivot_table(index="trained on", columns="rule", values="coverage").round(1)
    overall = df.groupby("rule")[["coverage", "log_width"]].mean().round(2)
    md = ("# One-GPU bundles on the other four NeuSight GPUs (test tables): 90% coverage %, median log(hi/lo)\n\n"
          + overall.reset_index().to_markdown(index=False) + "\n\n"
          + by_class.set_axis([f"{a}, {b}" for a, b in by_class.columns], axis=1).reset_index().to_markdown(index=False)
          + "\n\nCoverage by the GPU the bundle was fitted on:\n\n" + by_gpu.reset_index().to_markdown(index=False) + "\n")
    (args.out / "report.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
