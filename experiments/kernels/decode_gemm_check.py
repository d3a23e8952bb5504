"""How well are decode-step GEMMs predicted? Vidur's fp16 linear tables by token count.

A decode step multiplies a few tokens (one per sequence) by every weight matrix: skinny GEMMs that
stream the weights. Vidur profiled its projections and MLP GEMMs from 1 token up, on an A100-SXM4-80GB
and an A40 (kernel durations from the profiler, `timing = kernel`). This script bins those rows by
tokens and reports, per device and bin, the MAPE and median predicted/measured of the analytical prior
and of a kernel bundle, and the bundle's 90% interval coverage.

    python -m experiments.kernels.decode_gemm_check                                   # shipped bundle
    python -m experiments.kernels.decode_gemm_check --bundles experiments/out/logo_bundles_vr   # held out

With `--bundles DIR`, each device is predicted with `DIR/<device>/kernels`, the bundle trained without
it (`leave_one_gpu_out.py --with-vidur --save-bundles DIR`). The shipped bundle saw both GPUs, so its
numbers are in-sample. The prior's kernel floors were fitted on Vidur's A100 only: the A40 is held out
of everything in the prior.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import REPO

from hybridperf.datasets.vidur_compute import load_vidur_compute  # noqa: E402
from hybridperf.predictor import Predictor  # noqa: E402

BINS = [0, 1, 8, 64, 512, 4096, np.inf]
LABELS = ["1", "2-8", "9-64", "65-512", "513-4096", ">4096"]


def check(root: Path, bundles: Path | None) -> pd.DataFrame:
    """One row per (device, token bin)."""
    data = load_vidur_compute(root)
    lin = data[data["op_class"] == "linear"]
    prior = Predictor.prior_only()
    shipped = None if bundles else Predictor.load()
    rows = []
    for dev, g in lin.groupby("device"):
        bundle = shipped or Predictor.load(bundles / dev.replace(" ", "_") / "kernels")
        b, p = bundle.predict(g, dev), prior.predict(g, dev)
        g = g.assign(bundle=b["pred_ms"].to_numpy(), lo=b["lo_ms"].to_numpy(), hi=b["hi_ms"].to_numpy(),
                     prior=p["pred_ms"].to_numpy(), tokens=pd.cut(g["M"], BINS, labels=LABELS))
        for tok, h in g.groupby("tokens", observed=True):
            meas = h["latency_ms"]
            rows.append({"device": dev, "tokens": tok, "n": len(h), "measured_ms_median": meas.median(),
                         "prior_mape": 100 * (h["prior"] / meas - 1).abs().mean(),
                         "prior_ratio": (h["prior"] / meas).median(),
                         "bundle_mape": 100 * (h["bundle"] / meas - 1).abs().mean(),
                         "bundle_ratio": (h["bundle"] / meas).median(),
                         "coverage_pct": 100 * ((h["lo"] <= meas) & (meas <= h["hi"])).mean()})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets" / "vidur")
    ap.add_argument("--bundles", type=Path, default=None, help="leave-one-GPU-out bundles (default: shipped)")
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "out" / "decode_gemm_check")
    a = ap.parse_args()
    if not a.data.exists():
        sys.exit(f"error: Vidur data not found at {a.data}")
    df = check(a.data, a.bundles)
    a.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(a.out / "decode_gemm_check.csv", index=False)
    which = f"held-out bundles from {a.bundles}" if a.bundles else "shipped bundle (in-sample on both GPUs)"
    text = f"# Vidur fp16 linear by tokens: prior and {which}\n\n" + df.round(2).to_markdown(index=False) + "\n"
    (a.out / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
