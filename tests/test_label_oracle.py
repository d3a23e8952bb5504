"""experiments/models/label_oracle.py: the oracle answers with the device's own measurement where it has one."""
from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.models.label_oracle import OwnTableOracle

from hybridperf.datasets.schema import canonicalize
from hybridperf.predictor import Predictor

DEVICE = "Tesla V100-PCIE-32GB"


def _requests() -> pd.DataFrame:
    return pd.DataFrame({"OPName": ["linear", "linear", "softmax"], "B": [1.0, 1.0, 64.0],
                         "M": [4096.0, 2048.0, np.nan], "N": [1024.0, 1024.0, np.nan],
                         "K": [4096.0, 4096.0, np.nan], "H": [np.nan, np.nan, 512.0],
                         "dtype": ["fp32", "fp32", "fp32"]})


def test_a_measured_shape_is_answered_with_its_measurement_and_the_rest_by_the_prior():
    table = canonicalize(pd.DataFrame({"OPName": ["linear"], "B": [1], "M": [4096], "N": [1024], "K": [4096],
                                       "Latency": [7.5], "Device": [DEVICE]}), require_latency=True)
    oracle = OwnTableOracle(table)
    got = oracle.predict(_requests(), DEVICE)
    prior = Predictor.prior_only().predict(_requests(), DEVICE)
    assert got["pred_ms"].iloc[0] == 7.5
    # the interval moves with the answer, by the same factor
    assert np.isclose(got["hi_ms"].iloc[0] / 7.5, prior["hi_ms"].iloc[0] / prior["pred_ms"].iloc[0])
    assert np.allclose(got["pred_ms"].iloc[1:], prior["pred_ms"].iloc[1:])
    assert oracle.matched_ms == 7.5 and oracle.total_ms > 7.5


def test_with_constants_prices_the_unmeasured_kernels_and_keeps_one_tally():
    """model_latency.collect prices each label with its held-out constants (`with_constants`); the oracle's
    copy answers measured shapes the same and adds to the original's measured share."""
    from hybridperf.priors.constants import fitted_constants

    table = canonicalize(pd.DataFrame({"OPName": ["linear"], "B": [1], "M": [4096], "N": [1024], "K": [4096],
                                       "Latency": [7.5], "Device": [DEVICE]}), require_latency=True)
    oracle = OwnTableOracle(table)
    held = fitted_constants(DEVICE)
    got = oracle.with_constants(held).predict(_requests(), DEVICE)
    prior = Predictor.prior_only().with_constants(held).predict(_requests(), DEVICE)
    assert got["pred_ms"].iloc[0] == 7.5
    assert np.allclose(got["pred_ms"].iloc[1:], prior["pred_ms"].iloc[1:])
    assert oracle.matched_ms == 7.5 and oracle.total_ms == 7.5 + float(prior["pred_ms"].iloc[1:].sum())
