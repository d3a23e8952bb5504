"""Draw the kernel shapes a lent GPU measures in one short lease: NeuSight's own shape lists, subsampled.

A lease is about 30 minutes for every GPU of a session, so NeuSight's full lists (45k training kernels,
8k test kernels per GPU, a third of them multi-millisecond GEMMs) cannot be measured. This draws a
uniform random sample of each, seeded, under a budget of estimated GPU time:

* `train_shapes.csv`: from NeuSight's training tables (`data/dataset/train/collect/<op>/p2.1.0`), per op
  a fixed number of rows (`TRAIN_ROWS`), drawn uniformly. A GPU measured on these is a training GPU of
  the same design as NeuSight's five.
* `test_shapes.csv`: from NeuSight's test tables (`data/dataset/test/{bmm,linear,vec}.csv`), the distinct
  shapes; every element-wise, softmax and LayerNorm shape, and the GEMMs in a random order until their
  estimated time reaches `--test-budget-s`. A GPU measured on these is scored like NeuSight's held-out
  GPUs in `leave_one_gpu_out.py`.

The time of a shape is estimated from the A100's own latency for it (the fastest GPU of the tables),
divided by `--speedup` and multiplied by the 30 calls the collector makes (5 warm-up, 25 timed); a shape
the A100 never ran is costed at the median of its op. Only the sample size depends on the estimate, not
which shapes are drawn: the order is a seeded permutation.

    python -m experiments.gpu.grid_shapes --data ../shared/datasets --out experiments/data/measured/grid
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import DATA

A100 = "NVIDIA A100-PCIE-40GB"
CALLS = 30  # the collector's default warm-up (5) + repeats (25)
TRAIN_ROWS = {"bmm": 4000, "linear": 1600, "softmax": 600, "ln": 600}
TRAIN_ELEMENTWISE_ROWS = 250  # per element-wise op (11 ops)
ELEMENTWISE = ("add", "addu", "mul", "mulu", "div", "divu", "pow", "powu", "relu", "gelu", "tanh")
GEMM_COLS = ["B", "M", "N", "K"]


def train_shapes(root: Path, rng: np.random.Generator) -> pd.DataFrame:
    """A uniform sample of NeuSight's training shapes, `TRAIN_ROWS` per op (the A100's table lists them)."""
    frames = []
    for op in (*TRAIN_ROWS, *ELEMENTWISE):
        table = pd.read_csv(root / "train" / "collect" / op / "p2.1.0" / f"{A100}.csv")
        cols = GEMM_COLS if op in ("bmm", "linear") else ["B", "H"]
        n = TRAIN_ROWS.get(op, TRAIN_ELEMENTWISE_ROWS)
        pick = table.loc[rng.permutation(len(table))[:n], cols + ["Latency"]]
        frames.append(pick.assign(OPName=op))
    return pd.concat(frames, ignore_index=True)


def test_shapes(root: Path, rng: np.random.Generator, budget_s: float, speedup: float) -> pd.DataFrame:
    """NeuSight's distinct test shapes: all row-wise ones, and GEMMs in random order within `budget_s`."""
    vec = pd.read_csv(root / "test" / "vec.csv")
    vec = vec.groupby(["OPName", "B", "H"], as_index=False)["Latency"].min()
    gemms = []
    for op in ("bmm", "linear"):
        t = pd.read_csv(root / "test" / f"{op}.csv")
        a100 = t[t["Device"] == A100].groupby(GEMM_COLS)["Latency"].min()
        shapes = t.drop_duplicates(GEMM_COLS)[GEMM_COLS].reset_index(drop=True)
        lat = shapes.set_index(GEMM_COLS).index.map(a100.to_dict().get).to_numpy(dtype=float)
        shapes["Latency"] = np.where(np.isnan(lat), np.nanmedian(lat), lat)
        gemms.append(shapes.assign(OPName=op))
    gemm = pd.concat(gemms, ignore_index=True).loc[lambda d: rng.permutation(len(d))].reset_index(drop=True)
    cost = gemm["Latency"] / 1000 * CALLS / speedup
    left = budget_s - float((vec["Latency"] / 1000 * CALLS / speedup).sum())
    gemm = gemm[cost.cumsum() <= left]
    return pd.concat([vec, gemm], ignore_index=True)


def estimated_seconds(shapes: pd.DataFrame, speedup: float) -> float:
    """Estimated GPU time to collect `shapes` (A100 latency / speedup x the collector's calls)."""
    return float(shapes["Latency"].sum() / 1000 * CALLS / speedup)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--test-budget-s", type=float, default=270.0, help="estimated GPU seconds for the test shapes")
    ap.add_argument("--speedup", type=float, default=2.5, help="the measuring GPU's speed over the A100's")
    args = ap.parse_args(argv)
    root = args.data / "neusight" / "data" / "dataset"
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    for name, shapes in (("train", train_shapes(root, rng)),
                         ("test", test_shapes(root, rng, args.test_budget_s, args.speedup))):
        cols = ["OPName", *GEMM_COLS, "H"]
        shapes.reindex(columns=cols).to_csv(args.out / f"{name}_shapes.csv", index=False)
        counts = shapes["OPName"].value_counts().to_dict()
        print(f"{name}: {len(shapes)} shapes, ~{estimated_seconds(shapes, args.speedup):.0f} s of kernels; {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
