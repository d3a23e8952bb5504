"""What a cuDNN plan cost on each host we measured: per SDPA decode step that built its plans (a grown cache over key
lengths new to the process, `modern_models.cudnn_plans`), the measured step less `predict-model`'s step with the
plans cached, over the plans it builds (`graphs.attention.cudnn_plan_builds`). `CUDNN_PLAN_MS` (38.6 ms) is one
host's microbenchmark; this shows how far other hosts stray from it.

    python -m experiments.models.cudnn_plan_hosts [--out experiments/results/cudnn_plan_hosts.md]
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import MEASURED, REPO, RESULTS, md, write_report
from experiments.models.host_floor import HOSTS, MORE_RUNS
from experiments.models.modern_models import cudnn_plans, run_request, timed_runs
from hybridperf.graphs.attention import CUDNN_PLAN_MS
from hybridperf.graphs.compose import predict_request, resolve_predictor


def plan_ms(csv: Path, gpu: str, predictor) -> np.ndarray:
    """Per building decode step of `csv`: (measured - predicted with cached plans) / plans built, ms."""
    out = []
    for r in timed_runs(pd.read_csv(csv)).to_dict("records"):
        if r.get("mode") != "decode" or str(r.get("attn")) != "sdpa" or cudnn_plans(r) != "build":
            continue
        req, dev = run_request(r, csv.parent, REPO / "examples" / "configs", gpu)
        built = predict_request(req, dev, predictor).ms
        cached = predict_request(dataclasses.replace(req, cudnn_plans="cached"), dev, predictor).ms
        plans = round((built - cached) / CUDNN_PLAN_MS)
        if plans >= 1:
            out.append((float(r["measured_ms"]) - cached) / plans)
    return np.array(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS / "cudnn_plan_hosts.md")
    a = ap.parse_args(argv)
    predictor = resolve_predictor(warn=False)
    rows = []
    for host, (csv, gpu) in {**HOSTS, **MORE_RUNS}.items():  # the lent machines' run sets; those with such steps
        v = plan_ms(MEASURED / csv, gpu, predictor)
        if not len(v):
            continue
        rows.append({"host": host, "runs": f"`{csv}`", "steps": len(v), "median ms": round(float(np.median(v)), 1),
                     "25-75%": f"{np.percentile(v, 25):.1f}-{np.percentile(v, 75):.1f}"})
    text = "\n".join([
        "# cuDNN plan time per host",
        "",
        "Reproduce: `python -m experiments.models.cudnn_plan_hosts`. Per SDPA decode step that built its cuDNN plans: "
        "the measured step less `predict-model`'s step with its plans cached, over the plans the step builds; "
        f"`CUDNN_PLAN_MS` = {CUDNN_PLAN_MS} ms (lease 6's microbenchmark). The residual holds the step's own "
        "prediction error too, so read the medians, not single steps.",
        "", md(pd.DataFrame(rows)), ""])
    write_report(a.out, text)


if __name__ == "__main__":
    main()
