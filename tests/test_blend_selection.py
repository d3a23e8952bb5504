"""How much of the learned residual a bundle keeps (hybridperf.training.kernels.choose_blend)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from hybridperf.training.kernels import choose_blend


def _logo(y_by_device: dict, r_by_device: dict) -> pd.DataFrame:
    """Held-out rows: y = log(measured / prior), the same residual from both learners."""
    parts = []
    for dev, y in y_by_device.items():
        y = np.asarray(y, dtype=np.float64)
        parts.append(pd.DataFrame({"op_class": "bmm", "heldout": dev, "y": y, "r_mlp": r_by_device[dev],
                                   "r_xgb": r_by_device[dev]}))
    return pd.concat(parts, ignore_index=True)


def test_residual_that_helps_every_held_out_gpu_is_kept():
    y = {"a": [0.3, 0.2, 0.4], "b": [0.2, 0.3, 0.2]}
    choice = choose_blend(_logo(y, {d: np.asarray(v) for d, v in y.items()}))
    assert choice["bmm"]["shrink"] == 1.0


def test_residual_that_hurts_one_held_out_gpu_is_dropped_even_if_it_helps_on_average():
    # a large gain on GPU a, a small loss on GPU b: the prior alone ships
    y = {"a": [0.5, 0.6, 0.5], "b": [0.0, 0.0, 0.0]}
    r = {"a": np.array([0.5, 0.6, 0.5]), "b": np.array([0.05, 0.05, 0.05])}
    assert choose_blend(_logo(y, r))["bmm"]["shrink"] == 0.0
