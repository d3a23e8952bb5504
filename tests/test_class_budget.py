"""experiments/transfer/class_budget.py: the k measured kernels are all of the scored class; only its others
are scored."""
from __future__ import annotations

import numpy as np
import pytest

from experiments.transfer.class_budget import one_class_budget
from conftest import synth_measurements

from hybridperf.datasets.schema import canonicalize
from hybridperf.predictor import Predictor

DEVICE = "Tesla P100-PCIE-16GB"  # not one of the tiny bundle's training GPUs


@pytest.mark.parametrize("strategy", ["suggest", "random"])
def test_only_the_class_is_measured_and_scored(tiny_bundle, strategy):
    base = Predictor.load(tiny_bundle)
    pool = canonicalize(synth_measurements(np.random.default_rng(7), 100, DEVICE, factor=1.6), require_latency=True)
    pool = pool.assign(pool_idx=np.arange(len(pool)))
    n_bmm = int((pool["op_class"] == "bmm").sum())
    res = one_class_budget(base, pool, DEVICE, "bmm", 4, strategy, draw=0, prior=None, class_scale=None)
    # the picks are bmm kernels (otherwise fewer than 4 bmm rows would leave the scored set)
    assert set(res["op_class"]) == {"bmm"} and len(res) == n_bmm - 4
    zero = np.abs(base.predict(pool[pool["op_class"] == "bmm"], DEVICE)["pred_ms"].to_numpy()
                  / pool.loc[pool["op_class"] == "bmm", "latency_ms"].to_numpy() - 1).mean() * 100
    # the GPU runs 1.6x slower than the bundle's GPUs: four of its bmm kernels move the rest toward it
    assert res["ape"].mean() < zero
