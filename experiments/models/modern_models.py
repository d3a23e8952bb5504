"""Score `predict-model` on whole models measured as transformers runs them today: bf16/fp16 or AMP, SDPA or
eager attention, inference, training steps and decode steps (issue 58, item 2).

Input: a CSV of measured runs, one per row, with columns
    config       HF config.json (relative to the CSV's folder, or absolute); or `model`, a name resolved as
                 CONFIGS/<model>.json (`--configs`, default examples/configs)
    layers       optional: the layer count the run used (overrides the config's)
    batch, seq   sequences and tokens (decode: tokens already in the cache)
    mode         inf | train | decode
    cache        optional (decode): grown (a token a call, as generate() does) | cropped (back to `seq` each call)
    cudnn_plans  optional (decode): cached where an earlier run of the process met the same key lengths
    dtype        fp32 | fp16 | bf16 (the model's dtype; fp32 with amp)
    attn         sdpa | eager (transformers' attn_implementation)
    amp          true | false (fp32 weights under bf16 autocast)
    recompute    optional: true | false (activation checkpointing)
    measured_ms  the measured latency (CUDA events around one call, as the contract's predict-model section says)
    device       optional: the GPU (else `--device`)

Output: every run with its prediction, 90% interval and error, then MAPE and interval coverage per
(mode, dtype, attn, amp) and overall, as markdown.

    python -m experiments.models.modern_models experiments/data/measured/h200/modern/models.csv --device "NVIDIA H200" \
        --out experiments/results/modern_models.md
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import REPO
from hybridperf.graphs.compose import predict_request, resolve_predictor
from hybridperf.graphs.config import load_config
from hybridperf.graphs.request import ModelRequest
from hybridperf.predictor import Predictor

_TRUE = {"true", "1", "yes"}


def _config_path(row: dict, csv_dir: Path, configs: Path) -> Path:
    if isinstance(row.get("config"), str) and row["config"].strip():
        p = Path(row["config"].strip())
        return p if p.is_absolute() else csv_dir / p
    return configs / f"{str(row['model']).strip()}.json"


#: what makes two rows the same run (those present in a CSV); a repeated measurement of one is averaged
RUN_KEYS = ("config", "model", "layers", "batch", "seq", "mode", "dtype", "attn", "amp", "recompute", "device", "cache",
            "cudnn_plans")
#: optional columns a summary groups by: how a decode row's cache was kept, whether its cuDNN plans were built
GROUPS = ("cache", "cudnn_plans")


def timed_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows with a measured time (an out-of-memory or refused run has none), each run once: the mean of its
    repeated measurements."""
    if "measured_ms" not in runs.columns:
        raise SystemExit("error: the runs CSV has no measured_ms column")
    timed = runs.assign(measured_ms=pd.to_numeric(runs["measured_ms"], errors="coerce"))
    timed = timed[timed["measured_ms"] > 0]
    if timed.empty:
        raise SystemExit("error: no run in the CSV has a positive measured_ms")
    keys = [c for c in RUN_KEYS if c in timed.columns]
    return timed.groupby(keys, dropna=False, sort=False, as_index=False)["measured_ms"].mean()


def cudnn_plans(run: dict) -> str:
    """Whether a decode run's steps built cuDNN plans: only a cache that grew (`cache = grown`; a cropped one
    repeats one key length, whose plan the first call built) whose key lengths no earlier run of the process
    met (`cudnn_plans` is not `cached`). Runs saved before the `cache` column all cropped theirs."""
    grown = str(run.get("cache", "")).strip() == "grown"
    return "build" if grown and str(run.get("cudnn_plans", "")).strip() != "cached" else "cached"


def run_request(r: dict, csv_dir: Path, configs: Path, device: str | None, default_attn: str = "sdpa",
                launch: str = "eager") -> tuple[ModelRequest, str | None]:
    """The `ModelRequest` of one timed run (a `timed_runs` record) and the device it ran on (its `device` column,
    else `device`)."""
    cfg = load_config(_config_path(r, csv_dir, configs))
    if pd.notna(r.get("layers")) and str(r.get("layers")).strip():
        cfg = dataclasses.replace(cfg, layers=int(r["layers"]))
    amp = str(r.get("amp", "false")).strip().lower() in _TRUE
    attn = str(r["attn"]).strip().lower() if pd.notna(r.get("attn")) else default_attn
    dtype = "fp32" if amp else str(r.get("dtype", "fp32")).strip()
    recompute = str(r.get("recompute", "false")).strip().lower() in _TRUE
    req = ModelRequest(cfg, int(r["batch"]), int(r["seq"]), str(r.get("mode", "inf")).strip(), dtype, attn, amp,
                       recompute=recompute, cudnn_plans=cudnn_plans(r), launch=launch)
    return req, r.get("device") if isinstance(r.get("device"), str) and r.get("device").strip() else device


def score(runs: pd.DataFrame, csv_dir: Path, configs: Path, device: str | None, predictor: Predictor,
          default_attn: str = "sdpa", launch: str = "eager") -> pd.DataFrame:
    """Each timed run (`timed_runs`) with pred_ms, lo_ms, hi_ms, err_pct and covered (`default_attn` where a run
    names none; `launch`: how every run issued its kernels)."""
    out = []
    for r in timed_runs(runs).to_dict("records"):
        req, dev = run_request(r, csv_dir, configs, device, default_attn, launch)
        p = predict_request(req, dev, predictor)
        m = float(r["measured_ms"])
        out.append({**r, "attn": req.attn, "amp": req.amp, "dtype": req.dtype, "pred_ms": p.ms, "lo_ms": p.lo_ms,
                    "hi_ms": p.hi_ms, "err_pct": (p.ms / m - 1.0) * 100.0, "covered": p.lo_ms <= m <= p.hi_ms})
    return pd.DataFrame(out)


def summary(scored: pd.DataFrame) -> pd.DataFrame:
    """MAPE and 90% interval coverage per (mode, dtype, attn, amp), and over all runs."""
    def one(g: pd.DataFrame) -> pd.Series:
        return pd.Series({"runs": len(g), "mape_pct": float(np.mean(np.abs(g["err_pct"]))),
                          "median_err_pct": float(np.median(g["err_pct"])),
                          "coverage_pct": float(np.mean(g["covered"]) * 100.0)})

    keys = ["mode", "dtype", "attn", "amp", *(c for c in GROUPS if c in scored.columns)]
    filled = scored.fillna(dict.fromkeys(GROUPS, "-"))
    rows = [{**dict(zip(keys, k)), **one(g)} for k, g in filled.groupby(keys, sort=True)]
    rows.append({**{k: "all" for k in keys}, **one(scored)})
    return pd.DataFrame(rows)


def report(scored: pd.DataFrame, summ: pd.DataFrame, source: str, command: str) -> str:
    cols = [c for c in ("model", "config", "layers", "batch", "seq", "mode", "dtype", "attn", "amp", *GROUPS,
                        "measured_ms", "pred_ms", "lo_ms", "hi_ms", "err_pct", "covered") if c in scored.columns]
    return "\n".join(["# predict-model on modern whole-model runs", "",
                      f"Runs: `{source}`. Reproduce: `{command}`.", "",
                      "## Summary", "", summ.to_markdown(index=False, floatfmt=".1f"), "", "## Runs", "",
                      scored[cols].fillna(dict.fromkeys(GROUPS, "")).to_markdown(index=False, floatfmt=".3g"), ""])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("--device", default=None, help="GPU of the runs (when the CSV has no device column)")
    ap.add_argument("--configs", type=Path, default=REPO / "examples" / "configs")
    ap.add_argument("--prior-only", action="store_true")
    ap.add_argument("--default-attn", default="sdpa", help="attention of runs without an attn column (older files "
                    "such as experiments/data/measured/*/models.csv were measured eager)")
    ap.add_argument("--launch", default="eager", choices=("eager", "graph"),
                    help="how the runs issued their kernels (graph: replayed from a CUDA graph)")
    ap.add_argument("--note", default=None, help="score only the rows whose note column is this (graph_decode.csv: "
                    "graph)")
    ap.add_argument("--out", type=Path, default=None, help="markdown report (default: print it)")
    a = ap.parse_args(argv)
    runs = pd.read_csv(a.runs)
    if a.note is not None:
        if "note" not in runs.columns:
            raise SystemExit("error: --note given, but the runs CSV has no note column")
        runs = runs[runs["note"] == a.note]
    if "device" not in runs.columns and a.device is None:
        raise SystemExit("error: give --device or a device column")
    predictor = Predictor.prior_only() if a.prior_only else resolve_predictor(warn=False)
    scored = score(runs, a.runs.parent, a.configs, a.device, predictor, a.default_attn, a.launch)
    local = str(REPO) + "/"  # the report names paths inside the repository relative to it
    args = [f'"{x}"' if " " in x else x.replace(local, "") for x in (sys.argv[1:] if argv is None else argv)]
    text = report(scored, summary(scored), str(a.runs).replace(local, ""),
                  " ".join(["python -m experiments.models.modern_models", *args]))
    if len(scored) < len(runs):
        text += (f"\n{len(runs)} rows, {len(scored)} runs: rows without a time (out of memory, or a step transformers "
                 "refused; their `note`) are left out, and a run measured more than once counts once (the mean).\n")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
