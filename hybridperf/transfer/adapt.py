"""Few-shot transfer: correct the zero-shot predictor with k kernels measured on the target GPU.

The zero-shot model's log-errors e = log(measured / predicted) on the measured kernels are explained by

    correction_c(x) = g + b_c + w_c . z(x)

g: one offset for the device, shrunk toward 0 (strength TAU_GLOBAL); b_c: an offset per op class,
shrunk toward g (TAU_CLASS); w_c: slopes on the kernel's scale (z = standardised log prior time and
floor share), heavily shrunk (TAU_SLOPE) so that they only speak once a class has many samples.
With k = 0 the predictor is unchanged; as k grows the corrections move from the zero-shot model
toward what the device shows. Intervals are re-calibrated from leave-one-out residuals of the
measured kernels, mixed with the zero-shot interval in proportion to the evidence.
All numpy; no refit of the residual models.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hybridperf.devices import DeviceSpec, get_device
from hybridperf.errors import InputError
from hybridperf.residual_models.features import FEATURE_NAMES

TAU_GLOBAL = 2.0
TAU_CLASS = 3.0
TAU_SLOPE = 30.0
INTERVAL_PRIOR_WEIGHT = 12.0  # pseudo-samples the zero-shot interval is worth
CORRECTION_FEATURES = ("log_prior_ms", "floor_share")


@dataclass
class LinearCorrection:
    """r += X @ coef + intercept over the full feature vector (unused features have coef 0)."""

    coef: np.ndarray
    intercept: float

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(X, dtype=np.float64) @ self.coef + self.intercept

    def to_dict(self) -> dict:
        return {"coef": self.coef.tolist(), "intercept": float(self.intercept)}


def _ridge(Z: np.ndarray, e: np.ndarray, penalties: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ridge solution (toward 0) and leave-one-out residuals."""
    A = Z.T @ Z + np.diag(penalties)
    Ainv = np.linalg.inv(A)
    beta = Ainv @ Z.T @ e
    resid = e - Z @ beta
    hat = np.einsum("ij,jk,ik->i", Z, Ainv, Z)
    return beta, resid / np.clip(1.0 - hat, 1e-3, None)


def fit_corrections(X: np.ndarray, e: np.ndarray, op_class: np.ndarray) -> tuple[dict, dict, float]:
    """Corrections per op class from zero-shot log-errors `e`; returns ({oc: LinearCorrection},
    {oc: leave-one-out residuals}, global offset)."""
    n = len(e)
    g = float(e.sum() / (n + TAU_GLOBAL)) if n else 0.0
    cols = [FEATURE_NAMES.index(f) for f in CORRECTION_FEATURES]
    corrections, loo = {}, {}
    for oc in np.unique(op_class):
        m = op_class == oc
        F = X[m][:, cols].astype(np.float64)
        mu, sd = F.mean(axis=0), np.maximum(F.std(axis=0), 0.25)
        Z = np.column_stack([np.ones(m.sum()), (F - mu) / sd])
        beta, r_loo = _ridge(Z, e[m] - g, np.array([TAU_CLASS, *([TAU_SLOPE] * len(cols))]))
        coef = np.zeros(len(FEATURE_NAMES))
        coef[cols] = beta[1:] / sd
        corrections[oc] = LinearCorrection(coef=coef, intercept=g + beta[0] - float(np.sum(beta[1:] * mu / sd)))
        loo[oc] = r_loo
    return corrections, loo, g


def recalibrate(interval: dict, loo_resid: np.ndarray, coverage: float = 0.9) -> dict:
    """Mix the zero-shot interval with the empirical quantiles of leave-one-out residuals."""
    k = len(loo_resid)
    if k < 3:
        return dict(interval)
    a = (1.0 - coverage) / 2.0
    lo, hi = np.quantile(loo_resid, [a, 1.0 - a])
    w = k / (k + INTERVAL_PRIOR_WEIGHT)
    # after transfer the device is no longer unseen: the OOD widening gives way with the evidence
    return {**interval, "q_lo": float(w * lo + (1 - w) * interval["q_lo"]),
            "q_hi": float(w * hi + (1 - w) * interval["q_hi"]),
            "ood_beta": float((1 - w) * interval.get("ood_beta", 0.0)), "calibration_rows": k}


def adapt_predictor(predictor, measured: pd.DataFrame, device: str | DeviceSpec):
    """A copy of `predictor` adapted to `device` with the canonical `measured` kernels (latency_ms > 0)."""
    from hybridperf.predictor import Predictor

    dev = get_device(device)
    if predictor.bundle is None:
        raise InputError("few-shot transfer needs a model bundle (not --prior-only)")
    if predictor.corrections:
        raise InputError("this bundle is already adapted to a device; adapt the zero-shot bundle instead")
    if len(measured) == 0:
        return predictor
    if not (measured["latency_ms"] > 0).all():
        raise InputError("calibration rows need positive Latency (ms)")
    base = predictor.predict(measured, dev)
    X = predictor.features(base, dev)
    e = np.log(measured["latency_ms"].to_numpy(np.float64) / base["pred_ms"].to_numpy())
    corrections, loo, g = fit_corrections(X, e, base["op_class"].to_numpy())
    intervals = {}
    for oc, spec in predictor.manifest.get("op_classes", {}).items():
        iv = spec["interval"]
        intervals[oc] = recalibrate(iv, loo[oc]) if oc in loo else dict(iv)
    # classes without measurements still get the device-wide offset
    for oc in predictor.manifest.get("op_classes", {}):
        if oc not in corrections and g != 0.0:
            corrections[oc] = LinearCorrection(coef=np.zeros(len(FEATURE_NAMES)), intercept=g)
    adapted = Predictor(predictor.bundle, corrections=corrections, intervals=intervals)
    adapted.adaptation = {"device": dev.name, "k": int(len(measured)), "global_offset": g,
                          "per_class_rows": {oc: int(len(r)) for oc, r in loo.items()}}
    return adapted
