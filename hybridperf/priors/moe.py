"""Fused mixture-of-experts layers (routing, grouped GEMMs of the experts, the weighted combine), as
aiconfigurator's `moe` tables time them: `num_tokens` tokens of width `hidden` routed to `topk` of
`num_experts` experts of intermediate width `inter`, sharded `tp` ways inside each expert and `ep`
ways across experts (this GPU's share), weights in `moe_dtype`.

Kernel time only (no host floor, no all-to-all). Vectorised over numpy arrays.
"""
from __future__ import annotations

import numpy as np

from hybridperf.devices import DeviceSpec
from hybridperf.priors.llm_gemm import GEMM_DTYPES


def moe_ms(num_tokens, hidden, inter, topk, num_experts, device: DeviceSpec, moe_dtype: str = "bfloat16",
           tp=1, ep=1, distribution: str = "balanced", kernel_source: str | None = None) -> np.ndarray:
    """Kernel time (ms) of one MoE layer's experts on one GPU (gated MLP: up+gate, then down)."""
    t, h, f, k, e, tp, ep = (np.asarray(x, dtype=np.float64)
                             for x in (num_tokens, hidden, inter, topk, num_experts, tp, ep))
    a_bytes, w_bytes, peak_key = GEMM_DTYPES[moe_dtype]
    f_local = f / tp
    local_experts = e / ep
    routed = t * k / ep  # token-expert pairs this GPU computes
    active = np.minimum(local_experts, np.maximum(routed, 1.0))  # experts with at least one token
    flops = 2.0 * routed * h * 3.0 * f_local
    nbytes = active * 3.0 * h * f_local * w_bytes + routed * (h + f_local) * 2.0 * a_bytes
    tt = np.maximum(flops / device.peak(peak_key, matrix=True), nbytes / (device.mem_bw_gbs * 1e9))
    return tt * 1e3
