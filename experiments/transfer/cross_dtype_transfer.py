"""Does a few-shot correction learned from one dtype's kernels help another dtype's? A one-off check
on our H100 and H200 grids (NeuSight's test shapes measured in fp32 and fp16).

Per GPU and draw (5 draws): the distinct test shapes are split in two halves; k kernels (8 or 32) are
drawn from one half in fp32, fp16 or both, the zero-shot predictor is adapted with them
(`adapt_predictor`), and the other half is scored in fp32 and in fp16. The H100 uses the shipped
bundle (it never trained on the H100); the H200 uses a NeuSight-only fold bundle (it never saw the
H200), by default the one `leave_one_gpu_out.py --save-bundles experiments/out/logo_bundles` writes.

    python -m experiments.transfer.cross_dtype_transfer [--h200-bundle DIR]     # about 3 min; prints two tables
"""
from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from experiments.common import REPO

from hybridperf.predictor import Predictor  # noqa: E402
from hybridperf.priors.constants import fitted_constants  # noqa: E402
from hybridperf.training.kernel_data import load_measured_grid  # noqa: E402
from hybridperf.transfer import adapt_predictor  # noqa: E402
from experiments.transfer.measured_transfer import MEASURED, _device, class_scores


def score(gpu: str, bundle: str | None, draws: int = 5, ks=(8, 32)) -> list[dict]:
    """Rows of class_scores for every (draw, test dtype, calibration dtype, k), and k = 0."""
    d = MEASURED / gpu
    dev = _device(d)
    grid = load_measured_grid(d, splits=("test",), dtypes=("fp32", "fp16"))
    key = grid[["op", "B", "M", "N", "K", "H"]].fillna(-1).astype(str).apply("-".join, axis=1)
    shapes = key.unique()
    rows = []
    zero = (Predictor.load(bundle) if bundle else Predictor.load()).with_constants(fitted_constants(dev.name))
    for draw in range(draws):
        half = set(np.random.default_rng(draw).choice(shapes, len(shapes) // 2, replace=False))
        calib_half = key.isin(half).to_numpy()
        for test_dtype in ("fp32", "fp16"):
            test = grid[~calib_half & (grid["dtype"] == test_dtype).to_numpy()].reset_index(drop=True)
            rows += [dict(r, gpu=gpu, calib="none", test=test_dtype, k=0) for r in class_scores(zero, dev, test)]
            for calib_dtype in ("fp32", "fp16", "both"):
                pool = grid[calib_half & ((grid["dtype"] == calib_dtype).to_numpy() | (calib_dtype == "both"))]
                for k in ks:
                    calib = pool.sample(n=k, random_state=draw).reset_index(drop=True)
                    adapted = adapt_predictor(zero, calib, dev)
                    rows += [dict(r, gpu=gpu, calib=calib_dtype, test=test_dtype, k=k)
                             for r in class_scores(adapted, dev, test)]
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--h200-bundle", default=str(REPO / "experiments/out/logo_bundles/Tesla_P4/kernels"))
    a = ap.parse_args(argv)
    df = pd.DataFrame(score("h100", None) + score("h200", a.h200_bundle))
    summary = df[df["op_class"] == "all"].groupby(["gpu", "test", "calib", "k"])[["mape", "coverage_pct"]].mean()
    print(summary.round(1).to_markdown())
    per_class = df.groupby(["gpu", "test", "calib", "k", "op_class"])["mape"].mean().round(1)
    print(per_class.unstack("op_class").to_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
