"""The same whole-model runs on two GPUs: how much faster the second measured against how much faster
`predict-model` says it is, per (mode, dtype, attn, amp). A predictor can be right on average on each GPU and
still credit the second GPU's spec sheet with a gain its runs do not show; this puts that gap apart from
the per-GPU error.

    python -m experiments.models.gpu_pair experiments/data/measured/h100/modern/models.csv "NVIDIA H100 80GB HBM3" \
        experiments/data/measured/h200/modern/models.csv "NVIDIA H200" --out experiments/results/gpu_pair.md
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import REPO
from experiments.models.modern_models import score
from hybridperf.graphs.compose import resolve_predictor

KEYS = ["model", "layers", "batch", "seq", "mode", "dtype", "attn", "amp"]


def pair(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Runs scored on both GPUs (same KEYS), with measured and predicted second / first time ratios."""
    m = a.merge(b, on=KEYS, suffixes=("_a", "_b"))
    return m.assign(measured_ratio=m["measured_ms_b"] / m["measured_ms_a"], predicted_ratio=m["pred_ms_b"] / m["pred_ms_a"])


def table(m: pd.DataFrame) -> pd.DataFrame:
    g = m.groupby(["mode", "dtype", "attn", "amp"])
    out = pd.DataFrame({"runs": g.size(), "measured ratio (median)": g["measured_ratio"].median(),
                        "predicted ratio (median)": g["predicted_ratio"].median()})
    out["gap %"] = (out["predicted ratio (median)"] / out["measured ratio (median)"] - 1.0) * 100.0
    return out.reset_index()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs_a", type=Path)
    ap.add_argument("device_a")
    ap.add_argument("runs_b", type=Path)
    ap.add_argument("device_b")
    ap.add_argument("--configs", type=Path, default=REPO / "examples" / "configs")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    predictor = resolve_predictor(warn=False)
    scored = [score(pd.read_csv(p), p.parent, a.configs, dev, predictor) for p, dev in
              ((a.runs_a, a.device_a), (a.runs_b, a.device_b))]
    for s in scored:
        s["amp"] = s["amp"].astype(bool)
        s["layers"] = s["layers"].astype(int)
    m = pair(*scored)
    gap = float(np.median(m["predicted_ratio"] / m["measured_ratio"]) - 1.0) * 100.0
    ra, rb = (p.resolve().relative_to(REPO) if p.resolve().is_relative_to(REPO) else p for p in (a.runs_a, a.runs_b))
    text = "\n".join([
        f"# The same runs on {a.device_a} and {a.device_b}", "",
        f"Reproduce: `python -m experiments.models.gpu_pair {ra} \"{a.device_a}\" {rb} \"{a.device_b}\"`.",
        f"Ratio = time on {a.device_b} / time on {a.device_a}; gap = predicted ratio / measured ratio - 1 "
        f"(positive: the prediction credits {a.device_b} with less gain than measured).", "",
        f"{len(m)} runs measured on both; median gap over all runs {gap:+.1f}%.", "",
        table(m).to_markdown(index=False, floatfmt=".3f"), ""])
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
