"""Gradient-boosted trees for the log-residual (training side; needs xgboost and onnxmltools)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

#: onnxmltools' XGBoost converter supports opsets up to 15
XGB_OPSET = 15


class XGBResidual:
    """An XGBoost regressor on the log-residual; deterministic (hist method, fixed seed)."""

    def __init__(self, n_estimators: int = 400, max_depth: int = 6, learning_rate: float = 0.05,
                 subsample: float = 0.8, colsample_bytree: float = 0.8, min_child_weight: float = 5.0,
                 seed: int = 0, n_jobs: int = 2, monotone_constraints: tuple[int, ...] | None = None):
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.min_child_weight = min_child_weight
        self.seed = seed
        self.n_jobs = n_jobs
        self.monotone_constraints = monotone_constraints  # per feature: +1 non-decreasing, -1 non-increasing, 0 free

    def fit(self, X: np.ndarray, y: np.ndarray, sample_weight=None) -> "XGBResidual":
        import xgboost as xgb

        self.model_ = xgb.XGBRegressor(
            n_estimators=self.n_estimators, max_depth=self.max_depth, learning_rate=self.learning_rate,
            subsample=self.subsample, colsample_bytree=self.colsample_bytree,
            min_child_weight=self.min_child_weight, random_state=self.seed, n_jobs=self.n_jobs,
            tree_method="hist", base_score=0.0, objective="reg:pseudohubererror", huber_slope=0.1,
            monotone_constraints=self.monotone_constraints,
        )
        self.model_.fit(np.asarray(X, np.float32), np.asarray(y, np.float32), sample_weight=sample_weight)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.model_.predict(np.asarray(X, np.float32)).astype(np.float64)

    def export_onnx(self, path: Path) -> None:
        """Write the trees as an ONNX graph: input `x` (rows, features) -> (rows, 1)."""
        import onnxmltools
        from onnxmltools.convert.common.data_types import FloatTensorType

        n = self.model_.n_features_in_
        onx = onnxmltools.convert_xgboost(self.model_, initial_types=[("x", FloatTensorType([None, n]))],
                                          target_opset=XGB_OPSET)
        Path(path).write_bytes(onx.SerializeToString())
