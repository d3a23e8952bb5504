"""Small numpy statistics shared by training and transfer (no training libraries)."""
from __future__ import annotations

import numpy as np

#: standard normal 95% quantile: a central 90% interval spans +-Z90 standard deviations
Z90 = 1.6448536269514722


def weighted_quantile(x, w, q: float) -> float:
    """Quantile `q` of samples `x` with weights `w` (midpoint interpolation of the weighted CDF)."""
    x, w = np.asarray(x, dtype=np.float64), np.asarray(w, dtype=np.float64)
    o = np.argsort(x)
    x, w = x[o], w[o]
    c = np.cumsum(w)
    return float(np.interp(q, (c - w / 2) / c[-1], x))


def widen_about(q_lo, q_hi, center, factor):
    """Log-space interval bounds scaled by `factor` (>= 1) about `center`, not about zero: the spread
    grows on both sides while the offset of a skewed interval stays an offset (out of the training
    range the error's size is unknown, and so is its sign)."""
    return center + (np.asarray(q_lo, np.float64) - center) * factor, center + (np.asarray(q_hi, np.float64) - center) * factor


def widen_in_quadrature(q_lo, q_hi, extra: float):
    """Log-space interval bounds (q_lo <= 0 <= q_hi) widened by an independent error of half-width
    `extra`: -sqrt(q_lo^2 + extra^2), +sqrt(q_hi^2 + extra^2)."""
    q_lo, q_hi = np.asarray(q_lo, dtype=np.float64), np.asarray(q_hi, dtype=np.float64)
    return -np.sqrt(q_lo ** 2 + extra ** 2), np.sqrt(q_hi ** 2 + extra ** 2)
