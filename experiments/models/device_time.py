"""Score the GPU side of `predict-model` alone: each step's measured GPU busy time (torch.profiler, the union of
the kernels' device intervals) against its kernels composed as a CUDA graph replays them (`predict-model --launch
graph`, `compose.graph_launch_ms`: each kernel's device time, at least its op class's profiler-timed floor, plus
the replay's gap), over the step's own cache as it was kept.

A whole-model run's error mixes the kernels' and the host's; on an eager host-bound step the host dominates
(`experiments/RESULTS.md`, section 11). This separates them. Input: a CSV with `model` (a config name in
`--configs`), `layers`, `batch`, `seq`, `mode`, `dtype`, `attn` and the busy time as `measured_ms` (with
`note = kernel_sum`, as `measure_modern --runs profile` writes it) or `device_busy_ms`; optional `cache`. A
step measured more than once counts once, at its mean.

    python -m experiments.models.device_time experiments/data/measured/h100/families/kernel_sums.csv \
        --device "NVIDIA H100 80GB HBM3" --out experiments/results/device_time_h100_families.md
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import REPO
from experiments.models.modern_models import timed_runs
from hybridperf.devices import get_device
from hybridperf.graphs.compose import graph_launch_ms, predict_kernels_of, resolve_predictor
from hybridperf.graphs.config import load_config
from hybridperf.graphs.request import ModelRequest


def busy_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows with a positive busy time, in `measured_ms`, each step once (`modern_models.timed_runs`)."""
    if "device_busy_ms" in runs.columns:
        runs = runs.rename(columns={"device_busy_ms": "measured_ms"})
    if "measured_ms" not in runs.columns:
        raise SystemExit("error: the CSV has neither measured_ms nor device_busy_ms")
    timed = timed_runs(runs)
    return timed.assign(cache=timed["cache"].fillna("") if "cache" in timed.columns else "")


def predicted_device_ms(runs: pd.DataFrame, configs: Path, device: str, predictor) -> np.ndarray:
    """Each run's GPU busy time as a CUDA graph would replay its kernels (`compose.graph_launch_ms`: device time,
    at least each kernel's profiler-timed floor, plus the replay's gap), over the run's own (dynamic) cache."""
    dev = get_device(device)
    out = []
    for r in runs.to_dict("records"):
        cfg = dataclasses.replace(load_config(configs / f"{r['model']}.json"), layers=int(r["layers"]))
        strided = r["mode"] == "decode" and r.get("cache") == "cropped"  # a cropped DynamicCache is a strided view
        req = ModelRequest(cfg, int(r["batch"]), int(r["seq"]), r["mode"], r["dtype"], r["attn"], False,
                           cache="strided" if strided else "contiguous")
        tab = predict_kernels_of(req.graph(), dev, predictor)
        out.append(float(np.sum(graph_launch_ms(tab) * tab["count"].to_numpy())))
    return np.array(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("--device", required=True, help="the GPU the busy times were measured on")
    ap.add_argument("--configs", type=Path, default=REPO / "examples" / "configs")
    ap.add_argument("--out", type=Path, default=None, help="markdown report (default: print it)")
    a = ap.parse_args(argv)
    runs = busy_runs(pd.read_csv(a.runs))
    runs["pred_ms"] = predicted_device_ms(runs, a.configs, a.device, resolve_predictor(warn=False))
    runs["err_pct"] = (runs["pred_ms"] / runs["measured_ms"] - 1.0) * 100.0
    def stats(by):
        return runs.groupby(by).agg(runs=("err_pct", "size"), mape_pct=("err_pct", lambda e: e.abs().mean()),
                                    median_err_pct=("err_pct", "median")).reset_index()
    src = str(a.runs).replace(str(REPO) + "/", "")
    text = "\n".join([
        "# predict-model's kernels against measured GPU busy time (no host)", "",
        f"Runs: `{src}` on {a.device}. Reproduce: `python -m experiments.models.device_time {src} --device "
        f"\"{a.device}\"`. Predicted: the kernels as a CUDA graph replays them (device time, at least "
        "a profiler-timed kernel's floor, plus the replay's gap). `cache`: how a decode row's cache was kept "
        "(cropped: a strided view, as no `generate()` keeps it).", "",
        f"All {len(runs)} runs: MAPE {runs['err_pct'].abs().mean():.1f}%, "
        f"median error {runs['err_pct'].median():+.1f}%.",
        "", stats(["mode", "cache"]).to_markdown(index=False, floatfmt=".1f"), "",
        stats("model").to_markdown(index=False, floatfmt=".1f"), "",
        runs[["model", "layers", "batch", "seq", "mode", "attn", "cache", "measured_ms", "pred_ms", "err_pct"]]
        .to_markdown(index=False, floatfmt=".3g"), ""])
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
