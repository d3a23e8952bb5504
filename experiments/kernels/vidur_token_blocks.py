"""Vidur's activation and norm kernels as latency-bound blocks, one per token: fitted on the A100, scored on the A40.

Vidur profiled its models with vLLM-style custom kernels, not PyTorch's: the gated MLP's activation is
`silu_and_mul` (reads gate and up, writes their product) and the Llama-family norm is `rms_norm` (a pass
for the variance, a second to normalise). Both launch one block per token of min(H, 1024) threads that
walks the row with scalar fp16 loads. The loader maps them onto PyTorch's `gelu` and `ln`, and on the
A100 the prior runs them 1.7x too fast at many tokens and far too slow at a few.

This script asks whether a latency-bound model of those kernels transfers. A resident block takes one
load round trip per loop step; the device holds SMs x floor(threads per SM / block) blocks at once:

    time = floor + max(DRAM bytes at achievable bandwidth,
                       max(tokens / resident blocks, 1) x ceil(H / block) x round trip)

`rms_norm`'s second pass re-reads the row from L2, at `l2_share` of a DRAM round trip. The round trip
(and `l2_share`) are fitted on the A100 only; the A40 is held out. Phi-2 (GELU, LayerNorm) is left out.

    python -m experiments.kernels.vidur_token_blocks --data ../shared/datasets --out experiments/out/vidur_token_blocks  (~5 s)
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import add_data_argument, add_out_argument

from hybridperf.datasets.vidur_compute import VIDUR_DEVICES, load_vidur_compute  # noqa: E402
from hybridperf.devices import get_device  # noqa: E402
from hybridperf.errors import InputError  # noqa: E402
from hybridperf.priors.kernel_prior import kernel_prior_terms  # noqa: E402
from hybridperf.priors.memory import memory_time_ms  # noqa: E402
from hybridperf.training.collectives import mape  # noqa: E402

FIT_DEVICE = VIDUR_DEVICES["a100"]
#: the kernel each mapped op stands for in Vidur's gated, RMSNorm models
KERNELS = {"gelu": "silu_and_mul", "ln": "rms_norm"}
#: round trips tried (us) and rms_norm's L2 re-read as a share of one
ROUND_TRIP_US = np.round(np.arange(0.30, 1.60, 0.01), 2)
L2_SHARES = np.round(np.arange(0.0, 1.001, 0.05), 2)


def token_block_terms(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per row: the prior's time and floor (ms), the DRAM time of the custom kernel's bytes (ms) and its
    serial loop steps per block over the run (`steps`: waves of resident blocks x loop steps per row)."""
    out = []
    for dev, g in kernels.groupby("device"):
        d = get_device(dev)
        terms = kernel_prior_terms(g, d)
        tokens, H = g["B"].to_numpy(np.float64), g["H"].to_numpy(np.float64)
        block = np.minimum(H, 1024.0)
        resident = d.num_sms * np.maximum(np.floor(d.max_threads_per_sm / block), 1.0)
        silu = (g["kernel"] == "silu_and_mul").to_numpy()
        tensors = np.where(silu, 3.0, 2.0)  # gate + up + out; in + out (the re-read is the second pass's)
        out.append(g.assign(prior_ms=terms["prior_ms"].to_numpy(), floor_ms=terms["floor_ms"].to_numpy(),
                            dram_ms=memory_time_ms(tensors * tokens * H * 2.0, d),
                            steps=np.maximum(tokens / resident, 1.0) * np.ceil(H / block)))
    return pd.concat(out)


def model_ms(t: pd.DataFrame, round_trip_us: float, l2_share: float) -> np.ndarray:
    """The token-block model's time (ms) for `token_block_terms` rows."""
    per_step = round_trip_us * np.where(t["kernel"] == "rms_norm", 1.0 + l2_share, 1.0)
    return (t["floor_ms"] + np.maximum(t["dram_ms"], t["steps"] * per_step * 1e-3)).to_numpy()


def fit(t: pd.DataFrame) -> tuple[float, float]:
    """(round trip in us, L2 share) with the lowest MAPE on the rows `t` (one kernel)."""
    shares = L2_SHARES if (t["kernel"] == "rms_norm").all() else [0.0]
    grid = [(r, s) for r in ROUND_TRIP_US for s in shares]
    return min(grid, key=lambda p: mape(model_ms(t, *p), t["latency_ms"]))


def report(kernels: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """MAPE and median predicted/measured of the prior and of the model fitted on FIT_DEVICE, per
    device and kernel; and the fitted constants per kernel."""
    t = token_block_terms(kernels)
    fits = {k: fit(g) for k, g in t[t["device"] == FIT_DEVICE].groupby("kernel")}
    rows = []
    for (dev, k), g in t.groupby(["device", "kernel"]):
        pred = model_ms(g, *fits[k])
        meas = g["latency_ms"].to_numpy()
        rows.append({"device": dev, "role": "fitted" if dev == FIT_DEVICE else "held out", "kernel": k,
                     "rows": len(g), "prior MAPE %": mape(g["prior_ms"], meas),
                     "model MAPE %": mape(pred, meas),
                     "prior pred/meas (median)": float(np.median(g["prior_ms"] / meas)),
                     "model pred/meas (median)": float(np.median(pred / meas))})
    return pd.DataFrame(rows), fits


def load_custom_kernels(data: str) -> pd.DataFrame:
    """Vidur's activation and norm rows of its gated RMSNorm models, with the kernel each stands for."""
    df = load_vidur_compute(data)
    df = df[df["op"].isin(list(KERNELS)) & ~df["source"].str.contains("/phi-2/", regex=False)]
    return df.assign(kernel=df["op"].map(KERNELS))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_argument(ap)
    add_out_argument(ap, "vidur_token_blocks")
    args = ap.parse_args(argv)
    try:
        kernels = load_custom_kernels(args.data)
    except InputError as e:
        raise SystemExit(f"error: {e}")
    tab, fits = report(kernels)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    md = ["# Vidur's custom kernels as latency-bound token blocks (fitted on the A100, A40 held out)", "",
          "Fitted: " + ", ".join(f"{k}: round trip {r:.2f} us, L2 share {s:.2f}" for k, (r, s) in fits.items()), "",
          tab.round(2).to_markdown(index=False), ""]
    (out / "report.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
