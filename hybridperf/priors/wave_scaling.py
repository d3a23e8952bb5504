"""Habitat-style wave scaling (Yu et al., ATC'21): carry a kernel *measured* on one GPU to another.

A kernel of `blocks` thread blocks runs in waves of (SMs x resident blocks per SM). Its time on the
target is the measured time scaled by the ratio of wave counts and by the ratio of the resource that
bounds it, mixed by its memory-boundness gamma in [0, 1]:

    T_target = T_origin * (waves_target / waves_origin)
                        * (BW_origin/SM / BW_target/SM) ** gamma
                        * (clock_origin * cores_origin / (clock_target * cores_target)) ** (1 - gamma)

gamma comes from the roofline: a kernel at arithmetic intensity I on a GPU with ridge point R has
gamma = R / (R + I) (1 when far below the ridge, 0 when far above). Both resource terms are per SM
(bandwidth per SM; clock x FP32 lanes per SM), as the wave count already accounts for the number of
SMs: a purely memory-bound kernel with many waves then scales exactly as total bandwidth. Like Habitat it
needs a measurement on the origin GPU, and like Habitat it assumes the same kernel (tile shape,
blocks) runs on both GPUs, which fails across generations whose libraries pick other kernels.
"""
from __future__ import annotations

import numpy as np

from hybridperf.devices import DeviceSpec


def memory_boundness(flops, nbytes, device: DeviceSpec, dtype: str = "fp32") -> np.ndarray:
    """gamma = R / (R + I): 1 for purely memory-bound kernels, 0 for purely compute-bound ones."""
    intensity = np.asarray(flops, np.float64) / np.maximum(np.asarray(nbytes, np.float64), 1.0)
    ridge = device.peak(dtype) / (device.mem_bw_gbs * 1e9)
    return ridge / (ridge + intensity)


def wave_scale_ms(measured_ms, blocks, blocks_per_sm, flops, nbytes, origin: DeviceSpec, target: DeviceSpec,
                  dtype: str = "fp32") -> np.ndarray:
    """Latency on `target` of kernels measured on `origin` (arrays broadcast; `blocks_per_sm` is
    the resident-block occupancy, assumed equal on both GPUs)."""
    blocks = np.maximum(np.asarray(blocks, np.float64), 1.0)
    occ = np.maximum(np.asarray(blocks_per_sm, np.float64), 1.0)
    waves_o = np.ceil(blocks / (origin.num_sms * occ))
    waves_t = np.ceil(blocks / (target.num_sms * occ))
    gamma = memory_boundness(flops, nbytes, origin, dtype)
    bw = (origin.mem_bw_gbs / origin.num_sms) / (target.mem_bw_gbs / target.num_sms)
    sm_rate = (origin.boost_clock_mhz * origin.cores_per_sm) / (target.boost_clock_mhz * target.cores_per_sm)
    return np.asarray(measured_ms, np.float64) * (waves_t / waves_o) * bw ** gamma * sm_rate ** (1.0 - gamma)
