"""Few-shot transfer of the collective model to a system measured at a few sizes.

A collective's error on a system it was not fitted on changes with the message size (latency-bound small
messages, NCCL's protocol and channel steps in between, the links' rate at the top), so one offset does not
carry: measured at a few sizes (nccl-tests, seconds of a run), the log of measured / predicted is interpolated
in log size between them and held flat beyond, per (collective, GPUs, GPUs per node). Held out over six systems,
four sizes spread over each cell's range (its smallest and largest included) took the cell mean from 25.1% to
10.5% MAPE at the others (`experiments/collectives/collectives_nvswitch.py`); beyond the measured range it is
untested. The measurements must be timed as the prediction is (`--timing`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from hybridperf.errors import InputError
from hybridperf.guard import MAX_MS  # measured times are bounded as predictions are

#: a measured time this many times off the model is a unit or column mistake, not a system (aiconfigurator's L40S
#: box without GPU peer-to-peer, the farthest system measured, is ~10x slower than its fabric's spec)
MAX_RATIO = 100.0
#: columns of a measured-collectives CSV (`gpus_per_node` optional: nodes filled)
COLUMNS = ("collective", "bytes", "gpus", "latency_ms")


def log_ratios(nbytes, measured_ms, predicted_ms) -> tuple[np.ndarray, np.ndarray]:
    """(log2 size, log(measured / predicted)) at each measured size, ascending; repeated sizes give their median."""
    n, meas, pred = (np.asarray(v, dtype=np.float64).ravel() for v in (nbytes, measured_ms, predicted_ms))
    if not (len(n) == len(meas) == len(pred)) or not len(n):
        raise InputError("measured collectives: sizes, measured and predicted times must be as many, at least one")
    if not (np.all(meas > 0) and np.all(meas <= MAX_MS) and np.all(n > 0)):
        raise InputError(f"measured collectives: every size must be positive and every latency_ms in (0, {MAX_MS:g}]")
    far = np.abs(np.log(meas / pred)) > np.log(MAX_RATIO)
    if far.any():
        i = int(np.flatnonzero(far)[0])
        raise InputError(f"measured collectives: {meas[i]:.4g} ms at {n[i]:.0f} B is over {MAX_RATIO:g}x from the "
                         f"model's {pred[i]:.4g} ms; are the times in ms (latency_ms), the sizes in bytes?")
    r = pd.Series(np.log(meas / pred)).groupby(np.log2(n)).median()
    return r.index.to_numpy(dtype=np.float64), r.to_numpy(dtype=np.float64)


def correction(nbytes, sizes: np.ndarray, ratios: np.ndarray) -> np.ndarray:
    """Factor on the prediction at `nbytes`: exp of the log ratio interpolated in log2 size between the measured
    sizes (`log_ratios`), the nearest one's beyond them; 1 with no measured size."""
    n = np.asarray(nbytes, dtype=np.float64)
    if not len(sizes):
        return np.ones_like(n)
    return np.exp(np.interp(np.log2(n), sizes, ratios))


def measured_rows(df: pd.DataFrame, collective: str, gpus: int, gpus_per_node: int) -> pd.DataFrame:
    """The rows of a measured-collectives table for one collective on `gpus` ranks, `gpus_per_node` to a node
    (rows without `gpus_per_node` fill nodes of the same width; a node's size above their ranks places them in one
    node). InputError on missing columns."""
    from hybridperf.priors.collectives import canonical_collective

    lacking = [c for c in COLUMNS if c not in df.columns]
    if lacking:
        raise InputError(f"measured collectives CSV lacks column(s) {', '.join(lacking)}")
    try:
        names = df["collective"].astype(str).map(canonical_collective)
    except InputError as e:
        raise InputError(f"measured collectives CSV, column collective: {e}") from None
    per_node = _counts(df["gpus_per_node"], "gpus_per_node", blank_ok=True) if "gpus_per_node" in df.columns \
        else pd.Series(np.nan, index=df.index)
    ranks = _counts(df["gpus"], "gpus")
    # a node's size written for fewer ranks places them all in one node, as `--gpus-per-node` reads it
    mine = (names == collective) & (ranks == gpus) & (per_node.isna() | (per_node.clip(upper=ranks) == gpus_per_node))
    return df[mine]


def _counts(col: pd.Series, name: str, blank_ok: bool = False) -> pd.Series:
    """A column of GPU counts as floats (NaN where blank and `blank_ok`); InputError naming the first bad cell."""
    v = pd.to_numeric(col, errors="coerce")
    bad = (v.isna() & ~(col.isna() & blank_ok)) | (v.notna() & ((v < 1) | (v % 1 != 0)))
    if bad.any():
        raise InputError(f"measured collectives CSV, column {name}: expected a positive whole number, got "
                         f"{col[bad].iloc[0]!r}")
    return v
