"""experiments/kernels/noise_floor.py: the neighbour oracle reads a table's measurement noise and nothing else."""
from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.kernels.noise_floor import noise_table

from hybridperf.datasets.schema import canonicalize
from hybridperf.devices import get_device
from hybridperf.priors.kernel_prior import prior_ms


def _bmm_table(noise_sd: float, bias: float, seed: int = 0) -> pd.DataFrame:
    """bmm kernels on a B x (M, N, K) grid, measured as prior * exp(bias + noise)."""
    rng = np.random.default_rng(seed)
    raw = pd.DataFrame([{"OPName": "bmm", "B": b, "M": m, "N": n, "K": k}
                        for m, n, k in [(256, 256, 256), (512, 128, 512), (1024, 64, 1024), (384, 384, 96)]
                        for b in (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)])
    raw["Device"] = "Tesla V100-PCIE-32GB"
    raw["Latency"] = prior_ms(canonicalize(raw), get_device("Tesla V100-PCIE-32GB")) \
        * np.exp(bias + rng.normal(0.0, noise_sd, len(raw)))
    return canonicalize(raw, require_latency=True)


def test_a_biased_prior_on_a_noiseless_table_has_no_noise_floor():
    # the prior is 30% off everywhere, but the table repeats itself: every error is the prior's
    row = noise_table(_bmm_table(noise_sd=0.0, bias=0.3)).iloc[0]
    assert row["op_class"] == "bmm" and row["pairs"] == 4 * 12
    assert row["prior MAPE %"] > 20 and row["noise floor %"] < 0.5


def test_the_noise_floor_follows_the_measurements_noise():
    floors = [noise_table(_bmm_table(noise_sd=sd, bias=0.0)).iloc[0]["noise floor %"] for sd in (0.05, 0.2)]
    # MAPE of lognormal noise with sd 0.05 is ~4%, with sd 0.2 ~16%
    assert 2.5 < floors[0] < 6.0 and 10.0 < floors[1] < 22.0
