"""Few-shot transfer: correct the zero-shot predictor with k kernels measured on the target GPU.

The zero-shot model's log-errors e = log(measured / predicted) on the measured kernels are modelled,
per op class, by a Gaussian process over the kernel's scale (log prior time, floor share, log FLOPs,
log bytes, compute/memory balance):

    e(x) ~ GP(0, c^2 + s^2 exp(-|z(x) - z(x')|^2 / 2 l^2)),  measurement noise n^2

The prior mean 0 *is* the zero-shot model: with no measurements nothing changes, far from the
measured kernels the correction fades back to it, and near them it follows what the device shows
(c: a class-wide offset, s and l: a smooth scale-dependent correction). The posterior mean is a
kernel expansion over the k measured points, stored as ONNX. Intervals are re-calibrated from the
GP's leave-one-out residuals, mixed with the zero-shot interval in proportion to the evidence.

Why not per-class offsets: measured leave-one-GPU-out on the NeuSight GPUs, an offset estimated from
a few kernels made MAPE worse (11.5% -> 13% at k = 4..16); the device's error depends on the kernel's
scale, and a few kernels of one scale mislead a constant shift. The GP never did worse than zero-shot
on average (k = 16: 10.5%, k = 64: 9.7%). All numpy; no refit of the residual models.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hybridperf.devices import DeviceSpec, get_device
from hybridperf.errors import InputError
from hybridperf.residual_models.features import FEATURE_NAMES

#: features of the GP and their fixed scales (natural-log units), so standardisation needs no data
GP_FEATURES = {"log_prior_ms": 1.5, "floor_share": 0.3, "log_flops": 2.0, "log_bytes": 1.5, "compute_over_memory": 1.5}
LENGTH = 1.5  # l
SIGNAL = 0.2  # s: scale-dependent correction, log units
OFFSET = 0.1  # c: class-wide offset, log units
NOISE = 0.15  # n: run-to-run and unexplained kernel-to-kernel error
INTERVAL_PRIOR_WEIGHT = 12.0  # pseudo-samples the zero-shot interval is worth


@dataclass
class GPCorrection:
    """Posterior mean of the GP: correction(X) = sum_i alpha_i k(z(X), z_i)."""

    points: np.ndarray  # (k, d) standardised measured kernels
    alpha: np.ndarray  # (k,)

    @staticmethod
    def columns() -> list[int]:
        return [FEATURE_NAMES.index(f) for f in GP_FEATURES]

    @staticmethod
    def standardise(X: np.ndarray) -> np.ndarray:
        return np.asarray(X, np.float64)[:, GPCorrection.columns()] / np.array(list(GP_FEATURES.values()))

    @staticmethod
    def kernel(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=-1)
        return OFFSET ** 2 + SIGNAL ** 2 * np.exp(-0.5 * d2 / LENGTH ** 2)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        return self.kernel(self.standardise(X), self.points) @ self.alpha

    def to_dict(self) -> dict:
        return {"points": self.points.tolist(), "alpha": self.alpha.tolist(),
                "hyper": {"length": LENGTH, "signal": SIGNAL, "offset": OFFSET, "noise": NOISE,
                          "features": GP_FEATURES}}


def fit_corrections(X: np.ndarray, e: np.ndarray, op_class: np.ndarray) -> tuple[dict, dict]:
    """Per op class, the GP correction and the leave-one-out residuals of the measured kernels."""
    corrections, loo = {}, {}
    for oc in np.unique(op_class):
        m = op_class == oc
        Z = GPCorrection.standardise(X[m])
        Kinv = np.linalg.inv(GPCorrection.kernel(Z, Z) + NOISE ** 2 * np.eye(len(Z)))
        alpha = Kinv @ e[m]
        corrections[oc] = GPCorrection(points=Z, alpha=alpha)
        loo[oc] = alpha / np.diag(Kinv)  # closed-form leave-one-out residuals of a GP
    return corrections, loo


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
    corrections, loo = fit_corrections(X, e, base["op_class"].to_numpy())
    intervals = {}
    for oc in set(predictor.manifest.get("op_classes", {})) | set(loo):
        spec = predictor.manifest.get("op_classes", {}).get(oc)
        iv = spec["interval"] if spec else {"q_lo": -0.7, "q_hi": 0.7, "ood_beta": 0.0}
        intervals[oc] = recalibrate(iv, loo[oc]) if oc in loo else dict(iv)
    adapted = Predictor(predictor.bundle, corrections=corrections, intervals=intervals)
    adapted.adaptation = {"device": dev.name, "k": int(len(measured)), "method": "per-class Gaussian process",
                          "per_class_rows": {oc: int(len(r)) for oc, r in loo.items()}}
    return adapted
