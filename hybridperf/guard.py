"""The output guard every command passes its numbers through before printing or writing them.

The contract: no command prints or writes a non-finite, zero or negative latency, or an inverted
interval. A model, spec or input that would produce one is refused with one `error:` line instead:

    from hybridperf.guard import check_predictions
    check_predictions(res["pred_ms"], res["lo_ms"], res["hi_ms"], "kernel predictions")
    check_predictions(out["ms"], out["lo_ms"], out["hi_ms"], "collective latency")
    check_predictions(tokens_per_s, what="tokens/s")  # a positive number without an interval
    check_parts({"fw_ms": 1.2, "bw_ms": 0.0}, "model step")  # parts of a total: finite, >= 0

A new command calls them once on its final numbers (scalars, lists, numpy arrays or pandas Series)
before printing or writing anything.
"""
from __future__ import annotations

import numpy as np

from hybridperf.errors import HybridperfError


class OutputGuardError(HybridperfError):
    """A computed number that may not be shown: non-finite, <= 0, or outside its interval."""


#: the largest latency (ms) any command reports: ~3 years; anything beyond is an overflow or a
#: nonsensical input, not a prediction
MAX_MS = 1e11


def check_predictions(pred, lo=None, hi=None, what: str = "prediction", max_value: float = MAX_MS) -> None:
    """Raise OutputGuardError unless every `pred` (and `lo`, `hi` when given) is finite, > 0 and at
    most `max_value`, and lo <= pred <= hi row by row. The message names `what` and the first bad row."""
    arrays = {"prediction": _array(pred)}
    if lo is not None:
        arrays["lower bound"] = _array(lo)
    if hi is not None:
        arrays["upper bound"] = _array(hi)
    n = len(arrays["prediction"])
    for name, a in arrays.items():
        if len(a) != n:
            raise OutputGuardError(f"{what}: {len(a)} {name}s for {n} predictions")
        bad = ~np.isfinite(a) | (a <= 0) | (a > max_value)
        if bad.any():
            i = int(np.argmax(bad))
            raise OutputGuardError(f"{what}: the {name}{_row(i, n)} is {a[i]:.6g}, not a finite number in "
                                   f"(0, {max_value:g}]; the input or a spec/model file is out of range")
    p = arrays["prediction"]
    for name, ok in (("lower bound", lambda b: b <= p * (1 + 1e-9)), ("upper bound", lambda b: b >= p * (1 - 1e-9))):
        if name in arrays:
            bad = ~ok(arrays[name])
            if bad.any():
                i = int(np.argmax(bad))
                raise OutputGuardError(f"{what}: the {name}{_row(i, n)} ({arrays[name][i]:.6g}) is on the wrong side "
                                       f"of its prediction ({p[i]:.6g}): an inverted interval")


def _row(i: int, n: int) -> str:
    """' of row i+1' where there are several predictions, nothing for one."""
    return f" of row {i + 1}" if n > 1 else ""


def _array(x) -> np.ndarray:
    """`x` as a 1-D float64 array; non-numeric entries become NaN (and are then refused)."""
    try:
        return np.atleast_1d(np.asarray(x, dtype=np.float64)).ravel()
    except (TypeError, ValueError):
        return np.full(np.size(np.asarray(x, dtype=object)), np.nan)


def check_parts(parts: dict, what: str = "prediction", max_value: float = MAX_MS) -> None:
    """Raise OutputGuardError unless every numeric value of `parts` (a breakdown: fw_ms, bw_ms, comm_ms...,
    which may be 0, e.g. no backward in inference) is finite and in [0, `max_value`]."""
    for key, v in parts.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            continue
        if not np.isfinite(v) or v < 0 or v > max_value:
            raise OutputGuardError(f"{what}: {key} is {float(v):.6g}, not a finite number in [0, {max_value:g}]; the "
                                   "input or a spec/model file is out of range")
