"""Memory-bound ops at achievable (not peak) bandwidth, with L2 residency of small working sets.

Streaming kernels reach a memory-technology-dependent fraction of spec DRAM bandwidth (published
STREAM/BabelStream results): ~75% for GDDR5/6 and the first HBM2 controllers (P100), ~90% for HBM2
on Volta and later and for HBM2e/HBM3. NeuSight-style timing calls the same kernel 25
times on the same tensors, so a working set that fits in L2 is served from L2 on the timed calls; L2
bandwidth is taken as a fixed multiple of DRAM bandwidth (2-3x on V100/A100/H100-class parts).
Row-wise kernels (softmax, LayerNorm) have their own model in `hybridperf.priors.rowwise`.
"""
from __future__ import annotations

import numpy as np

from hybridperf.devices import DeviceSpec

GDDR_EFFICIENCY = 0.75
EARLY_HBM_EFFICIENCY = 0.75  # Pascal's HBM2
HBM_EFFICIENCY = 0.9
L2_SPEEDUP = 2.5
L2_USABLE = 0.5  # fraction of L2 a working set may occupy and still be fully resident


def dram_efficiency(device: DeviceSpec) -> float:
    """Fraction of spec DRAM bandwidth a streaming kernel reaches on `device`."""
    if device.mem_type.upper().startswith("GDDR"):
        return GDDR_EFFICIENCY
    if device.arch == "pascal":
        return EARLY_HBM_EFFICIENCY
    return HBM_EFFICIENCY


def achievable_bandwidth(device: DeviceSpec) -> float:
    """Bytes per second a streaming kernel moves to or from DRAM on `device`."""
    return device.mem_bw_gbs * 1e9 * dram_efficiency(device)


def l2_hit_fraction(working_set_bytes, device: DeviceSpec) -> np.ndarray:
    """Fraction of traffic served from L2 on repeated calls: 1 when the working set fits in the usable
    part of L2, then (usable / size)^2."""
    usable = device.l2_mb * 1e6 * L2_USABLE
    ws = np.maximum(np.asarray(working_set_bytes, dtype=np.float64), 1.0)
    return np.clip(usable / ws, 0.0, 1.0) ** 2


def memory_time_ms(nbytes, device: DeviceSpec, working_set_bytes=None, parallel_fraction=1.0) -> np.ndarray:
    """Time (ms) to move `nbytes` at achievable bandwidth, accounting for L2 residency and for the
    fraction of the GPU that has work (`parallel_fraction` in (0, 1])."""
    nbytes = np.asarray(nbytes, dtype=np.float64)
    ws = nbytes if working_set_bytes is None else working_set_bytes
    h = l2_hit_fraction(ws, device)
    bw = achievable_bandwidth(device)
    t = nbytes * (h / (bw * L2_SPEEDUP) + (1.0 - h) / bw)
    return t / np.clip(parallel_fraction, 1e-3, 1.0) * 1e3

