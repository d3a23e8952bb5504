"""90% intervals by launch-floor regime: how wide a kernel's interval is depends on how much of its
predicted time is the per-call floor.

A kernel whose time is mostly its body (a large GEMM, a long elementwise pass) is predicted from
spec-sheet rates and errs by a few percent. A kernel whose time is mostly the launch floor (a small
elementwise op, a short LayerNorm) errs by whatever the host and software stack add per call, which
the spec sheet does not say: leave-one-GPU-out on NeuSight's collect files, the held-out elementwise
error spans -0.05..+0.02 (log, 5%..95%) below a floor share of 0.1, and -0.05..+0.69 above 0.9. One
interval per op class, calibrated on the test tables (large kernels, floor share < 0.1), covered
36-66% of the small ones.

So a stratum's interval carries one (q_lo, q_hi, q_center) per floor-share bin (`by_floor_share`),
each calibrated on the held-out rows of that bin; a bin with too few calibration rows keeps the
stratum's overall quantiles. Intervals without bins (older bundles, the fallback) apply to every row.
"""
from __future__ import annotations

import numpy as np

#: upper edges of the floor-share bins (floor_ms / prior_ms); the last bin runs to 1
FLOOR_SHARE_EDGES = (0.1, 0.3, 0.5, 0.7, 0.9)
#: a bin is calibrated on its own with at least this many held-out rows (else the stratum's quantiles)
MIN_REGIME_ROWS = 200
QUANTILE_KEYS = ("q_lo", "q_hi", "q_center")


def floor_share_bin(floor_share, edges=FLOOR_SHARE_EDGES) -> np.ndarray:
    """Index of each row's floor-share bin: 0 below edges[0], ..., len(edges) at or above edges[-1]."""
    return np.searchsorted(np.asarray(edges, dtype=np.float64), np.asarray(floor_share, dtype=np.float64), side="right")


def interval_quantiles(iv: dict, floor_share) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q_lo, q_hi, q_center) of each row (log space) under interval spec `iv`: its floor-share bin's
    quantiles when `iv` has `by_floor_share`, else the spec's own for every row."""
    fs = np.asarray(floor_share, dtype=np.float64)
    regimes = iv.get("by_floor_share")
    if not regimes:
        centre = iv.get("q_center", 0.0)  # bundles from before it was stored widen about 0
        return tuple(np.full(fs.shape, float(v)) for v in (iv["q_lo"], iv["q_hi"], centre))
    b = floor_share_bin(fs, regimes["edges"])
    return tuple(np.asarray(regimes[k], dtype=np.float64)[b] for k in QUANTILE_KEYS)


def rows_quantiles(intervals: dict, keys, op_classes, floor_share) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`interval_quantiles` for rows of several strata: row i uses intervals[keys[i]], else the entry of
    its op class; rows of neither get (0, 0, 0)."""
    keys, op_classes = np.asarray(keys, dtype=object), np.asarray(op_classes, dtype=object)
    fs = np.asarray(floor_share, dtype=np.float64)
    out = tuple(np.zeros(len(keys)) for _ in QUANTILE_KEYS)
    for key, oc in set(zip(keys.tolist(), op_classes.tolist())):
        iv = intervals.get(key) or intervals.get(oc)
        if iv is None:
            continue
        m = (keys == key) & (op_classes == oc)
        for arr, q in zip(out, interval_quantiles(iv, fs[m])):
            arr[m] = q
    return out


def map_regimes(old: dict, new: dict) -> dict:
    """The floor-share bins of zero-shot interval `old` carried onto a re-calibrated overall interval
    `new` (transfer): every bound x becomes new centre + (x - old centre) * (new width / old width), so
    the overall interval maps onto the new one and each bin keeps its offset and width relative to it."""
    regimes = old.get("by_floor_share")
    if not regimes:
        return new
    c_old = old.get("q_center", (old["q_lo"] + old["q_hi"]) / 2)
    c_new = new.get("q_center", (new["q_lo"] + new["q_hi"]) / 2)
    scale = (new["q_hi"] - new["q_lo"]) / max(old["q_hi"] - old["q_lo"], 1e-9)
    moved = {k: [c_new + (x - c_old) * scale for x in regimes[k]] for k in QUANTILE_KEYS}
    return {**new, "by_floor_share": {**regimes, **moved}}
