"""Which kernels to measure on a new GPU: the k whose measurement helps the transfer most.

k is split across op classes (every class gets its share, the classes with the widest zero-shot
intervals get the remainder). Within a class the picks cover the kernel-scale space the transfer
correction is fitted on (standardised log prior time, floor share, log FLOPs, log bytes): the first
pick is the class's most typical kernel (the medoid: with one measurement, the class-wide correction
should come from a representative kernel, not an extreme one), later ones by greedy farthest-point
selection with each candidate's distance weighted by its zero-shot interval width, so they go where
the model is least sure and nothing has been measured.
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from hybridperf.devices import DeviceSpec, get_device
from hybridperf.errors import InputError
from hybridperf.ops import OP_CLASSES

_SPACE = ("log_prior_ms", "floor_share", "log_flops", "log_bytes")


def default_candidates() -> pd.DataFrame:
    """Transformer-typical kernels of every op class (NeuSight-style columns)."""
    rows = []
    dims = (256, 1024, 4096, 16384)
    for B, M, N, K in itertools.product((1, 16), (128, 512, 2048, 8192), dims, dims):
        rows.append({"OPName": "linear", "B": B, "M": M, "N": N, "K": K})
    for B, M, N, K in itertools.product((16, 64, 256), (128, 512, 2048), (64, 128), (128, 512, 2048)):
        rows.append({"OPName": "bmm", "B": B, "M": M, "N": N, "K": K})
    for op, B, H in itertools.product(("add", "mul", "gelu", "relu", "softmax", "ln"), (128, 1024, 8192, 65536),
                                      (256, 1024, 4096, 16384)):
        rows.append({"OPName": op, "B": B, "H": H})
    return pd.DataFrame(rows)


def _quotas(k: int, widths: dict, available: dict) -> dict:
    """Split k over classes, evenly, extras to the widest intervals; a class with too few candidates
    passes its leftover share on."""
    classes = sorted(widths, key=lambda c: -widths[c])
    q = {c: 0 for c in classes}
    while sum(q.values()) < k:
        open_ = [c for c in classes if q[c] < available[c]]
        if not open_:
            break
        share = max(1, (k - sum(q.values())) // len(open_))
        for c in open_:
            if sum(q.values()) >= k:
                break
            q[c] = min(available[c], q[c] + share)
    return q


def suggest_kernels(predictor, candidates: pd.DataFrame, device: str | DeviceSpec, k: int,
                    op_classes=OP_CLASSES, max_ms: float = 200.0) -> pd.DataFrame:
    """The `k` rows of `candidates` (canonical or NeuSight-style) most worth measuring on `device`,
    with their zero-shot prediction and interval width. Kernels predicted slower than `max_ms` or
    with tensors over a quarter of device memory are skipped (measuring stays quick). Deterministic."""
    if k < 1:
        raise InputError("k must be at least 1")
    dev = get_device(device)
    pred = predictor.predict(candidates, dev)
    keep = pred["op_class"].isin(op_classes) & (pred["pred_ms"] <= max_ms) & (pred["bytes"] <= dev.mem_gb * 1e9 / 4)
    pred = pred[keep].reset_index(drop=True)
    if pred.empty:
        raise InputError("no candidate kernels of the requested op classes")
    from hybridperf.residual_models.features import FEATURE_NAMES

    X = predictor.features(pred, dev)
    cols = [FEATURE_NAMES.index(f) for f in _SPACE]
    width = np.log(pred["hi_ms"].to_numpy() / pred["lo_ms"].to_numpy())
    pred["interval_width"] = width
    widths = pred.groupby("op_class")["interval_width"].mean().to_dict()
    picks = []
    available = pred["op_class"].value_counts().to_dict()
    for oc, quota in _quotas(min(k, len(pred)), widths, available).items():
        idx = np.flatnonzero(pred["op_class"].to_numpy() == oc)
        if quota == 0 or len(idx) == 0:
            continue
        Z = X[idx][:, cols].astype(np.float64)
        Z = (Z - Z.mean(axis=0)) / np.maximum(Z.std(axis=0), 1e-6)
        w = width[idx] / max(np.median(width[idx]), 1e-9)
        chosen = [int(np.argmin(np.linalg.norm(Z - np.median(Z, axis=0), axis=1)))]
        dist = np.linalg.norm(Z - Z[chosen[0]], axis=1)
        while len(chosen) < min(quota, len(idx)):
            nxt = int(np.argmax(dist * w))
            if dist[nxt] <= 0:
                break
            chosen.append(nxt)
            dist = np.minimum(dist, np.linalg.norm(Z - Z[nxt], axis=1))
        picks.extend(idx[chosen])
    return pred.iloc[sorted(picks)].reset_index(drop=True)


def to_shapes_csv(rows: pd.DataFrame) -> pd.DataFrame:
    """NeuSight-style shapes table (OPName, B, M, N, K, H) the collector accepts."""
    out = rows[["op", "B", "M", "N", "K", "H"]].rename(columns={"op": "OPName"})
    return out
