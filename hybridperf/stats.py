"""Small numpy statistics shared by training and transfer (no training libraries)."""
from __future__ import annotations

import numpy as np


def weighted_quantile(x, w, q: float) -> float:
    """Quantile `q` of samples `x` with weights `w` (midpoint interpolation of the weighted CDF)."""
    x, w = np.asarray(x, dtype=np.float64), np.asarray(w, dtype=np.float64)
    o = np.argsort(x)
    x, w = x[o], w[o]
    c = np.cumsum(w)
    return float(np.interp(q, (c - w / 2) / c[-1], x))
