"""The LLM-stack kernel priors on the bf16 and fp8 GEMMs and PyTorch SDPA kernels we timed on a lent H200 or
H100 (`experiments/data/measured/<gpu>/modern/kernels.csv`, CUDA-graph replay, method in its README), against
`hybridperf.priors.llm_gemm` and `hybridperf.priors.attention` and a spec-sheet roofline.

What each GPU's rows were fitted on (`GPUS`): the H200 is in no fit but SDPA decode's per-wave latency,
read off its decode rows; the H100's GEMM constants and SDPA forward constants come from H100 tables
(aiconfigurator's and `h100_sdpa_fp8`), so only its SDPA decode rows are held out.

    python -m experiments.kernels.modern_kernels [--gpu h200|h100] [--out DIR]

Writes <gpu>_modern_kernels.md to --out (default experiments/results).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import MEASURED, RESULTS, ape, inside
from hybridperf.devices import get_device
from hybridperf.priors.attention import sdpa_ms
from hybridperf.priors.llm_gemm import gemm_ms

#: --gpu -> (device, which of its rows a constant was read off)
GPUS = {"h200": ("NVIDIA H200", "SDPA decode's per-wave latency was read off these `sdpa_decode` rows; nothing "
                 "else here was fitted on the H200."),
        "h100": ("NVIDIA H100 80GB HBM3", "The GEMM constants were fitted on aiconfigurator's tables of four "
                 "GPUs, the H100's among them, and the SDPA forward/backward constants on `h100_sdpa_fp8` (an "
                 "H100): only the `sdpa_decode` rows are held out (their latency was read off the H200).")}
#: the rows' dtype -> (aiconfigurator's gemm dtype, kernel source): bf16 as the plain torch GEMM (cuBLAS through
#: torch); fp8 as `torch._scaled_mm` on inputs quantized before the graph (`fp8_static`: no quantization timed)
GEMM_PATH = {"bf16": ("bfloat16", "torch"), "fp8": ("fp8_static", "torch._scaled_mm")}


def _roofline(flops, nbytes, device, key: str) -> float:
    return float(max(flops / device.peak(key, matrix=True), nbytes / (device.mem_bw_gbs * 1e9)) * 1e3)


def predict(k: pd.DataFrame, device) -> pd.DataFrame:
    """Per measured kernel: the prior's and the roofline's time (ms)."""
    out = []
    for r in k.itertuples():
        if r.op == "gemm":
            m, n, kk = np.array([r.m]), np.array([r.n]), np.array([r.k])
            dtype, source = GEMM_PATH[r.dtype]
            p = float(gemm_ms(m, n, kk, dtype, device, kernel_source=source, framework="torch")[0])  # graph replay
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
            # an explicit mask runs the memory-efficient kernel over every tile, as the model graphs price it
            masked = r.op == "sdpa_fwd_masked"
            p = float(np.ravel(sdpa_ms(b, q, h, kvh, d, device, "bf16", causal=not masked,
                                       backend="efficient" if masked else "flash"))[0])
            if r.op == "sdpa_fwd_bwd":
                p += float(np.ravel(sdpa_ms(b, q, h, kvh, d, device, "bf16", causal=True, backward=True))[0])
            flops = 4.0 * b * h * q * (kv + 1) / 2.0 * d * (3.5 if r.op == "sdpa_fwd_bwd" else 1.0)
            nbytes = 2.0 * b * d * (2 * q * h + 2 * kv * kvh)
        roof = _roofline(flops, nbytes, device, "bf16")
        out.append({"family": r.op, "pred_ms": p, "roofline_ms": roof})
    return pd.concat([k.reset_index(drop=True), pd.DataFrame(out)], axis=1)


#: our ops as aiconfigurator rows: (op_name, kernel_source) per op and GEMM dtype; PyTorch's own kernels
AIC_OPS = {"bf16": ("gemm", "torch.nn.functional.linear"), "fp8": ("gemm", "torch._scaled_mm"),
           "sdpa_fwd": ("context_attention", "torch_sdpa"), "sdpa_decode": ("generation_attention", "torch_sdpa")}


def as_aic_rows(k: pd.DataFrame) -> pd.DataFrame:
    """The CUDA-graph-timed GEMM, SDPA forward and decode rows as aiconfigurator rows (framework torch)."""
    rows = []
    for r in k[k["timing"] == "graph"].itertuples():
        key = r.dtype if r.op == "gemm" else r.op
        if key not in AIC_OPS:
            continue
        op, src = AIC_OPS[key]
        row = {"op_name": op, "kernel_source": src, "framework": "torch", "latency": r.latency_ms}
        if op == "gemm":
            row |= {"m": r.m, "n": r.n, "k": r.k, "gemm_dtype": "bfloat16" if r.dtype == "bf16" else "fp8_static"}
        else:
            isl = r.q_len if op == "context_attention" else 1
            row |= {"batch_size": r.batch, "isl": isl, "step": r.kv_len - isl, "num_heads": r.heads,
                    "num_key_value_heads": r.kv_heads, "head_dim": r.head_dim, "attn_dtype": "bfloat16",
                    "kv_cache_dtype": "bfloat16", "window_size": 0}
        rows.append(row)
    return pd.DataFrame(rows)


def bundle_table(rows: pd.DataFrame, device) -> pd.DataFrame:
    """MAPE and 90% coverage per (op, dtype) of `predict-kernels`' shipped bundle, prior alone and hybrid, on
    aiconfigurator `rows` (`as_aic_rows`)."""
    from hybridperf.aic_kernels import AicPredictor, dtype_of
    from hybridperf.aic_rows import validate

    rows = validate(rows)
    p = AicPredictor.load()
    hyb, prior = p.predict(rows, device), p.predict(rows, device, prior_only=True)
    meas = rows["latency"].to_numpy(dtype=float)
    d = pd.DataFrame({"op": rows["op_name"].to_numpy(), "dtype": dtype_of(rows), "prior": ape(prior["pred_ms"], meas),
                      "hybrid": ape(hyb["pred_ms"], meas), "cov": 100.0 * inside(meas, hyb["lo_ms"], hyb["hi_ms"])})
    return d.groupby(["op", "dtype"]).agg(rows=("prior", "size"), prior_mape=("prior", "mean"),
                                          hybrid_mape=("hybrid", "mean"), hybrid_cov=("cov", "mean"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", choices=sorted(GPUS), default="h200")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    device, fitted = GPUS[a.gpu]
    path = MEASURED / a.gpu / "modern" / "kernels.csv"
    k = pd.read_csv(path)
    k = k[k["latency_ms"].notna() & (k["latency_ms"] > 0)]
    res = predict(k, get_device(device))
    res["prior_ape"] = ape(res["pred_ms"], res["latency_ms"])
    res["roofline_ape"] = ape(res["roofline_ms"], res["latency_ms"])
    res["ratio"] = res["pred_ms"] / res["latency_ms"]
    tab = res.groupby("family").agg(rows=("prior_ape", "size"), prior_mape=("prior_ape", "mean"),
                                    roofline_mape=("roofline_ape", "mean"), median_ratio=("ratio", "median"))
    small = res[res["family"].str.startswith("gemm")].assign(regime=lambda d: np.where(d["m"] <= 128, "m <= 128",
                                                                                      "m > 128"))
    by_m = small.groupby(["family", "regime"]).agg(rows=("prior_ape", "size"), prior_mape=("prior_ape", "mean"),
                                                  median_ratio=("ratio", "median"))
    md = [f"# LLM-stack kernel priors on our {a.gpu.upper()} kernels", "",
          f"Reproduce: `python -m experiments.kernels.modern_kernels --gpu {a.gpu}`. Kernels: "
          f"`experiments/data/measured/{a.gpu}/modern/kernels.csv` (CUDA-graph replay; `sdpa_fwd_bwd` per call). "
          f"MAPE = mean |pred / measured - 1| (%); `median_ratio` = median pred / measured. {fitted}", "",
          tab.round(2).reset_index().to_markdown(index=False), "",
          "## GEMMs by rows (decode-like m <= 128 against prefill-like)", "",
          by_m.round(2).reset_index().to_markdown(index=False), ""]
    aic = as_aic_rows(k)
    if len(aic):
        md += ["## Through `predict-kernels` (aiconfigurator rows, framework torch, the shipped bundle)", "",
               "The CUDA-graph rows as `predict-kernels` prices them: the prior alone and with the shipped residuals "
               "(`exported_models/aic_kernels`, trained on A100, H100, L40S and B200 tables).", "",
               bundle_table(aic, get_device(device)).round(2).reset_index().to_markdown(index=False), ""]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{a.gpu}_modern_kernels.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
