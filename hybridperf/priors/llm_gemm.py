"""GEMMs of today's LLM stacks (bf16/fp16, fp8 per-tensor and block-scaled, nvfp4, int4/int8
weight-only), as aiconfigurator's `gemm` tables time them: C[m, n] = A[m, k] @ B[k, n], k the
reduction, n the weight's output features, m the tokens.

Kernel time only (inside a CUDA graph or a profiler: no host floor). Vectorised over numpy arrays.
"""
from __future__ import annotations

import numpy as np

from hybridperf.devices import DeviceSpec

#: gemm dtype -> (bytes per A element, bytes per B (weight) element, peak key of the math)
GEMM_DTYPES = {
    "bfloat16": (2.0, 2.0, "bf16"),
    "float16": (2.0, 2.0, "fp16"),
    "fp8": (1.0, 1.0, "fp8"),
    "fp8_block": (1.0, 1.0, "fp8"),
    "nvfp4": (0.5, 0.5, "fp4"),
    "int4_wo": (2.0, 0.5, "bf16"),
    "int8_wo": (2.0, 1.0, "bf16"),
}


def gemm_ms(m, n, k, gemm_dtype: str, device: DeviceSpec, kernel_source: str | None = None) -> np.ndarray:
    """Kernel time (ms) of an (m x k) @ (k x n) GEMM in `gemm_dtype` (a key of `GEMM_DTYPES`)."""
    m, n, k = (np.asarray(x, dtype=np.float64) for x in (m, n, k))
    a_bytes, b_bytes, peak_key = GEMM_DTYPES[gemm_dtype]
    flops = 2.0 * m * n * k
    nbytes = m * k * a_bytes + k * n * b_bytes + m * n * 2.0
    compute = flops / device.peak(peak_key, matrix=True)
    memory = nbytes / (device.mem_bw_gbs * 1e9)
    return np.maximum(compute, memory) * 1e3
