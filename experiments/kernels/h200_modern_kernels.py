"""The LLM-stack kernel priors on a GPU none of them was fitted on: the bf16 and fp8 GEMMs and PyTorch SDPA
kernels we timed on a lent H200 (`experiments/data/measured/h200/modern/kernels.csv`, CUDA-graph replay,
method in its README), against `hybridperf.priors.llm_gemm` and `hybridperf.priors.attention` (fitted on
aiconfigurator's A100, H100, L40S and B200 tables and, for SDPA, on H100 measurements) and a spec-sheet
roofline. No constant here is read off the H200.

    python -m experiments.kernels.h200_modern_kernels [--out DIR]

Writes h200_modern_kernels.md to --out (default experiments/results).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import MEASURED, RESULTS, ape
from hybridperf.devices import get_device
from hybridperf.priors.attention import sdpa_ms
from hybridperf.priors.llm_gemm import gemm_ms

DEVICE = "NVIDIA H200"
GEMM_DTYPE = {"bf16": "bfloat16", "fp8": "fp8"}
#: the kernel source aiconfigurator's tables name for a plain torch GEMM (cuBLAS through torch)
TORCH_SOURCE = "torch"


def _roofline(flops, nbytes, device, key: str) -> float:
    return float(max(flops / device.peak(key, matrix=True), nbytes / (device.mem_bw_gbs * 1e9)) * 1e3)


def predict(k: pd.DataFrame, device) -> pd.DataFrame:
    """Per measured kernel: the prior's and the roofline's time (ms)."""
    out = []
    for r in k.itertuples():
        if r.op == "gemm":
            m, n, kk = np.array([r.m]), np.array([r.n]), np.array([r.k])
            try:
                p = float(gemm_ms(m, n, kk, GEMM_DTYPE[r.dtype], device, kernel_source=TORCH_SOURCE)[0])
            except (KeyError, ValueError):  # a source the fitted constants do not know: the default one
                p = float(gemm_ms(m, n, kk, GEMM_DTYPE[r.dtype], device)[0])
            eb = 2.0 if r.dtype == "bf16" else 1.0
            roof = _roofline(2.0 * r.m * r.n * r.k, eb * (r.m * r.k + r.k * r.n) + 2.0 * r.m * r.n, device,
                             "bf16" if r.dtype == "bf16" else "fp8")
            out.append({"family": f"gemm {r.dtype}", "pred_ms": p, "roofline_ms": roof})
            continue
        b, q, kv, h, kvh, d = (int(getattr(r, c)) for c in ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim"))
        if r.op == "sdpa_decode":
            p = float(np.ravel(sdpa_ms(b, q, h, kvh, d, device, "bf16", causal=False, kv_seq=kv, backend="decode"))[0])
            flops, nbytes = 4.0 * b * h * kv * d, 2.0 * b * kvh * kv * d * 2.0
        else:
            backend = "efficient" if r.op == "sdpa_fwd_masked" else "flash"
            p = float(np.ravel(sdpa_ms(b, q, h, kvh, d, device, "bf16", causal=True, backend=backend))[0])
            if r.op == "sdpa_fwd_bwd":
                p += float(np.ravel(sdpa_ms(b, q, h, kvh, d, device, "bf16", causal=True, backward=True))[0])
            flops = 4.0 * b * h * q * (kv + 1) / 2.0 * d * (3.5 if r.op == "sdpa_fwd_bwd" else 1.0)
            nbytes = 2.0 * b * d * (2 * q * h + 2 * kv * kvh)
        roof = _roofline(flops, nbytes, device, "bf16")
        out.append({"family": r.op, "pred_ms": p, "roofline_ms": roof})
    return pd.concat([k.reset_index(drop=True), pd.DataFrame(out)], axis=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", default=str(MEASURED / "h200" / "modern" / "kernels.csv"))
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    k = pd.read_csv(a.kernels)
    k = k[k["latency_ms"].notna() & (k["latency_ms"] > 0)]
    res = predict(k, get_device(DEVICE))
    res["prior_ape"] = ape(res["pred_ms"], res["latency_ms"])
    res["roofline_ape"] = ape(res["roofline_ms"], res["latency_ms"])
    res["ratio"] = res["pred_ms"] / res["latency_ms"]
    tab = res.groupby("family").agg(rows=("prior_ape", "size"), prior_mape=("prior_ape", "mean"),
                                    roofline_mape=("roofline_ape", "mean"), median_ratio=("ratio", "median"))
    small = res[res["family"].str.startswith("gemm")].assign(regime=lambda d: np.where(d["m"] <= 128, "m <= 128",
                                                                                      "m > 128"))
    by_m = small.groupby(["family", "regime"]).agg(rows=("prior_ape", "size"), prior_mape=("prior_ape", "mean"),
                                                  median_ratio=("ratio", "median"))
    md = ["# LLM-stack kernel priors on our H200 (never fitted on it)", "",
          "Reproduce: `python -m experiments.kernels.h200_modern_kernels`. Kernels: "
          "`experiments/data/measured/h200/modern/kernels.csv` (CUDA-graph replay; `sdpa_fwd_bwd` per call). "
          "MAPE = mean |pred / measured - 1| (%); `median_ratio` = median pred / measured.", "",
          tab.round(2).reset_index().to_markdown(index=False), "",
          "## GEMMs by rows (decode-like m <= 128 against prefill-like)", "",
          by_m.round(2).reset_index().to_markdown(index=False), ""]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "h200_modern_kernels.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
