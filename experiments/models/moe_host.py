"""How much more host time a MoE's routing and dispatch kernels take than the per-kernel floor, set by leaving
each run set out.

Every MoE run we timed with transformers (`experiments/data/measured/`: Mixtral, Qwen3-30B-A3B, Qwen1.5-MoE,
Moonlight, gpt-oss; H100 leases and our H200, transformers 5.17 and 5.24) is predicted once with
`compose.MOE_HOST_EXTRA` = 0, then re-composed for each candidate extra: a forward MoE kernel's host time is
(1 + extra) x the floor, its time the larger of that and its device time. Each run set left out, the extra with
the lowest MAPE on the other sets is scored on it.

    python -m experiments.models.moe_host [--out experiments/results/moe_host.md]
"""
from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import REPO, RESULTS
from experiments.models.modern_models import run_request, timed_runs
from hybridperf.graphs.config import MOE_LLAMA
from hybridperf.graphs.grouped import native_loop

#: the module, not `hybridperf.graphs.compose` the function the package exports under that name
compose = importlib.import_module("hybridperf.graphs.compose")
MEASURED = REPO / "experiments" / "data" / "measured"
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
#: the run sets with MoE runs, and their GPU
SETS = {"h100/modern/models.csv": H100, "h100/moe_transformers/models_tf524.csv": H100,
        "h100/families/models.csv": H100, "h100/generate_decode/models.csv": H100, "h200/modern/models.csv": H200}
EXTRAS = np.round(np.arange(0.0, 1.51, 0.1), 2)


def moe_runs(predictor) -> list[dict]:
    """Each timed MoE run with its prediction at extra 0 and what re-composing it needs."""
    out = []
    saved = compose.MOE_HOST_EXTRA
    compose.MOE_HOST_EXTRA = 0.0
    try:
        for csv, gpu in SETS.items():
            path = MEASURED / csv
            if not path.is_file():
                continue
            for r in timed_runs(pd.read_csv(path)).to_dict("records"):
                req, dev = run_request(r, path.parent, REPO / "examples" / "configs", gpu)
                if req.config.family not in MOE_LLAMA:
                    continue
                mode = req.mode
                p = compose.predict_request(req, dev, predictor)
                par = compose.composition_params(compose.predictor_kind(predictor),
                                                 compose.COMPOSITION_MODE.get(mode, mode))
                out.append({"set": csv, "model": r["model"], "mode": mode, "batch": int(r["batch"]),
                            "seq": int(r["seq"]), "measured_ms": float(r["measured_ms"]), "ms": p.ms,
                            "table": p.kernels, "par": par})
    finally:
        compose.MOE_HOST_EXTRA = saved
    return out


def with_extra(run: dict, extra: float) -> float:
    """The run's prediction with forward MoE kernels at (1 + extra) x the host floor: its kernels re-priced as
    `compose` prices them (`in_model_ms`, `host_ms`), the difference added."""
    t, par = run["table"], run["par"]

    def launches(e):
        return compose.in_model_ms(t["pred_ms"].to_numpy(), t["floor_ms"].to_numpy(), par["scale"], par["gap_ms"],
                                   compose.host_ms(t, par["cpu_ms"], e), par["raw"], native_loop(t))

    extra_ms = float(np.sum((launches(extra) - launches(0.0)) * t["count"].to_numpy()))
    return run["ms"] + extra_ms * float(np.exp(par["log_bias"]))


def mape(runs: list[dict], extra: float) -> float:
    return float(np.mean([abs(with_extra(r, extra) / r["measured_ms"] - 1) for r in runs]) * 100)


def report(runs: list[dict]) -> str:
    sets = sorted({r["set"] for r in runs})
    rows = []
    for s in sets:
        held = [r for r in runs if r["set"] == s]
        rest = [r for r in runs if r["set"] != s]
        best = min(EXTRAS, key=lambda e: mape(rest, e))
        def med(e, held=held):
            return float(np.median([with_extra(r, e) / r["measured_ms"] - 1 for r in held]) * 100)

        rows.append({"held-out run set": s, "MoE runs": len(held), "extra chosen on the others": best,
                     "MAPE % at 0": round(mape(held, 0.0), 1), "held out": round(mape(held, best), 1),
                     f"at {compose.MOE_HOST_EXTRA} (shipped)": round(mape(held, compose.MOE_HOST_EXTRA), 1),
                     "median error % at 0": round(med(0.0), 1), "held out median": round(med(best), 1)})
    table = pd.DataFrame(rows)
    curve = pd.DataFrame({"extra": EXTRAS, "MAPE % over all MoE runs": [round(mape(runs, e), 1) for e in EXTRAS]})
    return (f"# Host time of MoE routing and dispatch kernels\n\n`python -m experiments.models.moe_host`: {len(runs)} "
            f"timed MoE runs (inference, decode, training) of {len(sets)} run sets; a forward MoE kernel's host "
            "time is (1 + extra) x the floor. Each set left out, the extra is chosen on the others.\n\n"
            + table.to_markdown(index=False) + "\n\n" + curve.to_markdown(index=False) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS / "moe_host.md")
    args = ap.parse_args(argv)
    runs = moe_runs(compose.resolve_predictor())
    text = report(runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
