"""Is a GPU with more of one spec, the rest the same, ever priced slower by the shipped aiconfigurator kernel
predictor? Each of the four systems' table rows (a sample) is predicted on its GPU and on that GPU with a quarter
more DRAM bandwidth and L2, or a quarter more matrix FLOP/s of every dtype. The residuals are constrained monotone in
what more bandwidth or L2 moves, all but context attention's in FLOP/s too (`aic_kernels.MONOTONE`, `REFERENCE_RATES`;
RESULTS.md section 10).

    python -m experiments.kernels.spec_monotone [--rows 5000]
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import RESULTS
from hybridperf.aic_kernels import AicPredictor
from hybridperf.datasets.aiconfigurator import SYSTEM_DEVICES, load_kernels
from hybridperf.devices import get_device
from hybridperf.training import aic_kernels as T

from experiments.kernels.aiconfigurator_kernels import DATA

#: how much more of a spec the changed GPU has
MORE = 1.25
#: a prediction this much above the unchanged GPU's counts as slower
SLOWER = 1.02


def variants(dev) -> dict:
    """The GPU with a quarter more bandwidth and L2, or a quarter more matrix FLOP/s of every dtype."""
    return {"bandwidth and L2": dataclasses.replace(dev, mem_bw_gbs=dev.mem_bw_gbs * MORE, l2_mb=dev.l2_mb * MORE),
            "matrix FLOP/s": dataclasses.replace(dev, peak_tflops={k: v * MORE if k.endswith("_tc") else v
                                                                   for k, v in dev.peak_tflops.items()})}


def check(data: pd.DataFrame, predictor: AicPredictor) -> pd.DataFrame:
    out = []
    for system, rows in data.groupby("system", sort=False):
        dev = get_device(SYSTEM_DEVICES[system])
        rows = rows.drop(columns=["latency_ms"], errors="ignore")
        def priced(device, kind):
            return predictor.predict(rows, device, prior_only=kind == "prior")["pred_ms"].to_numpy()

        base = {kind: priced(dev, kind) for kind in ("prior", "hybrid")}
        for what, more in variants(dev).items():
            for kind in ("prior", "hybrid"):
                r = priced(more, kind) / base[kind]
                for op in sorted(set(rows["op_name"])):
                    m = (rows["op_name"] == op).to_numpy()
                    out.append({"system": system, "more": what, "op": op, "kind": kind, "rows": int(m.sum()),
                                "slower %": 100.0 * float(np.mean(r[m] > SLOWER)), "max ratio": float(r[m].max())})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--rows", type=int, default=5000, help="rows per (system, op family)")
    ap.add_argument("--out", default=str(RESULTS / "spec_monotone.md"))
    args = ap.parse_args()
    data = T.sample(load_kernels(args.data, systems=tuple(SYSTEM_DEVICES)), args.rows)
    res = check(data, AicPredictor.load())
    wide = res.pivot_table(index=["more", "op"], columns="kind", values=["slower %", "max ratio"], aggfunc="max")
    wide.columns = [f"{k} {v}" for v, k in wide.columns]
    wide = wide[["prior slower %", "prior max ratio", "hybrid slower %", "hybrid max ratio"]].round(3).reset_index()
    text = "\n".join([
        "# Spec monotonicity of the shipped aiconfigurator kernel predictor", "",
        f"Reproduce: `python -m experiments.kernels.spec_monotone --rows {args.rows}`", "",
        f"Each system's sampled table rows (at most {args.rows} per op family) on its GPU and on that GPU with "
        f"{MORE}x the DRAM bandwidth and L2, or {MORE}x every matrix peak. `slower %`: the share of rows priced more "
        f"than {SLOWER}x the unchanged GPU's time, the worst system's; `max ratio`: the largest, over all four.", "",
        wide.to_markdown(index=False), "",
        "The prior never prices a faster GPU slower but where more L2 meets a collector's timing: TensorRT-LLM 1.3's "
        "GEMM collector cycles min(5, ceil(L2 / weight)) weight copies (`llm_gemm.replay_copies`), so on a larger L2 a "
        "decode GEMM whose weight the L2 held is timed reading it from DRAM. The rest is the residuals': monotone in "
        "bandwidth and L2 (context attention's but for its prior's term) and, but for context attention's, in matrix "
        "FLOP/s, save a GEMM's or MoE's launch-floor share and waves, left free; context attention's compute-over-"
        "memory features fall with more FLOP/s (`aic_kernels.REFERENCE_RATES`, RESULTS.md section 10).", ""])
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
