"""Plain roofline: time = max(FLOPs / peak FLOP/s, bytes / peak bandwidth). The baseline to beat."""
from __future__ import annotations

import numpy as np

from hybridperf.devices import DeviceSpec


def roofline_ms(flops, nbytes, device: DeviceSpec, dtype: str = "fp32", matrix: bool = False) -> np.ndarray:
    """Roofline latency in ms at the device's spec-sheet peaks (per-dtype; `matrix` allows tensor cores)."""
    compute = np.asarray(flops, dtype=np.float64) / device.peak(dtype, matrix=matrix)
    memory = np.asarray(nbytes, dtype=np.float64) / (device.mem_bw_gbs * 1e9)
    return np.maximum(compute, memory) * 1e3
