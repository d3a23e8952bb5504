"""Per-device training: residual models for one GPU, calibrated by K-fold within that GPU's data.

Intervals from within-device folds only hold for kernels like the training ones on that same GPU;
use cross-device bundles (`train_kernel_bundle`) to predict other GPUs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from hybridperf.errors import InputError
from hybridperf.training.kernels import (
    TrainConfig, choose_blend, conformal_interval, export_bundle, fit_all, predict_heldout,
)


def cross_validate(rows: pd.DataFrame, cfg: TrainConfig, folds: int = 3,
                   progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Held-out predictions of `folds`-fold cross-validation (column `heldout` = fold name)."""
    fold = np.random.default_rng(cfg.seed).integers(0, folds, len(rows))
    parts = []
    for k in range(folds):
        if progress:
            progress(f"fold {k + 1}/{folds}")
        fitted = fit_all(rows[fold != k], cfg, progress)
        parts.append(predict_heldout(fitted, rows[fold == k]).assign(heldout=f"fold{k}"))
    return pd.concat(parts, ignore_index=True)


def train_single_device_bundle(rows: pd.DataFrame, out_dir: Path, cfg: TrainConfig | None = None, folds: int = 3,
                               progress: Callable[[str], None] | None = None) -> dict:
    """Fit on one device's kernels; blend and interval from `folds`-fold cross-validation."""
    cfg = cfg or TrainConfig()
    if rows["device"].nunique() != 1:
        raise InputError("per-device training takes the rows of exactly one device")
    cv = cross_validate(rows, cfg, folds, progress)
    choice = choose_blend(cv)
    intervals = conformal_interval(cv, choice, cfg)
    fitted = fit_all(rows, cfg, progress)
    return export_bundle(fitted, choice, intervals, Path(out_dir), rows, cfg,
                         extra={"calibration": {"method": f"split-conformal on {folds}-fold CV within the device"}})
