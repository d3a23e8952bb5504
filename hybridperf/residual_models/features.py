"""Device-agnostic features for the residual models (numpy only; used at training and prediction).

Every feature is a function of the kernel's shape, its FLOPs and bytes, the prior's own terms, and
the device's spec-sheet numbers. Never the device's name: the models must apply to unseen GPUs.

Raw spec-sheet numbers (SM count, clock, L2 size...) are deliberately *not* features on their own: with
a handful of training GPUs each such number identifies its GPU, and the models learn the device rather
than the physics (measured: leave-one-GPU-out error on A100 doubled with them). Spec numbers enter
only as they meet the kernel: waves, tiles and bytes per SM, working set over L2, compute over memory
time, and whether the board's power cap binds.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from hybridperf.devices import DTYPE_BYTES, DeviceSpec
from hybridperf.priors.power import sustained_flops

ELEMENTWISE_OPS = ("add", "addu", "mul", "mulu", "div", "divu", "pow", "powu", "relu", "gelu", "tanh")

FEATURE_NAMES: tuple[str, ...] = (
    # shape and work
    "log_B", "log_M", "log_N", "log_K", "log_H", "log_flops", "log_bytes", "log_intensity",
    "align4_M", "align4_N", "align4_K", "align4_H", "dtype_bytes",
    # prior terms
    "log_prior_ms", "log_compute_ms", "log_memory_ms", "compute_over_memory", "floor_share",
    "log_waves", "wave_efficiency", "tile_m", "tile_n", "tile_efficiency", "log_split_k",
    "l2_hit", "parallel_fraction", "log_bytes_over_l2", "log_tiles_per_sm",
    # device spec sheet, only as it meets the kernel (see module docstring)
    "log_tiles_per_sm_x_occupancy", "log_bytes_per_sm", "log_flops_per_sm", "power_capped",
    # op identity within the class (elementwise)
    *(f"op_{o}" for o in ELEMENTWISE_OPS),
)


def _log(x) -> np.ndarray:
    return np.log(np.maximum(np.nan_to_num(np.asarray(x, dtype=np.float64), nan=1.0), 1e-12))


def _align(x) -> np.ndarray:
    x = np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0)
    return ((x > 0) & (np.mod(x, 4) == 0)).astype(np.float64)


def kernel_features(kernels: pd.DataFrame, terms: pd.DataFrame, device: DeviceSpec) -> np.ndarray:
    """Feature matrix (rows x len(FEATURE_NAMES), float32) for a canonical table on one device."""
    n = len(kernels)
    col = lambda c: kernels[c].to_numpy(np.float64)  # noqa: E731
    t = lambda c: terms[c].to_numpy(np.float64)  # noqa: E731
    capped = float(sustained_flops(device, "fp32") < device.peak("fp32") * 0.999)
    flops, nbytes = col("flops"), col("bytes")
    prior, compute, memory = t("prior_ms"), t("compute_ms"), t("memory_ms")
    ops = kernels["op"].to_numpy()
    feats = [
        _log(col("B")), _log(col("M")), _log(col("N")), _log(col("K")), _log(col("H")),
        _log(flops), _log(nbytes), _log(flops / np.maximum(nbytes, 1.0)),
        _align(col("M")), _align(col("N")), _align(col("K")), _align(col("H")),
        kernels["dtype"].map(DTYPE_BYTES).to_numpy(np.float64),
        _log(prior), _log(compute), _log(memory), _log(compute) - _log(memory), t("floor_ms") / prior,
        np.log1p(t("waves")), t("wave_efficiency"), t("tile_m") / 128.0, t("tile_n") / 128.0,
        t("tile_efficiency"), np.log2(np.maximum(t("split_k"), 1.0)) if "split_k" in terms else np.zeros(n),
        t("l2_hit"), t("parallel_fraction"), _log(nbytes / (device.l2_mb * 1e6)),
        _log(np.maximum(t("tiles"), 1.0) / device.num_sms),
        _log(np.maximum(t("tiles"), 1.0) / device.num_sms * np.maximum(t("tile_m") * t("tile_n"), 1.0) / 16384.0),
        _log(nbytes / device.num_sms), _log(flops / device.num_sms), np.full(n, capped),
        *((ops == o).astype(np.float64) for o in ELEMENTWISE_OPS),
    ]
    return np.column_stack(feats).astype(np.float32)
