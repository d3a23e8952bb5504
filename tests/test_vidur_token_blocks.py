"""experiments/kernels/vidur_token_blocks.py: loop steps count waves of resident blocks, and the fit recovers
its constant."""
from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.kernels.vidur_token_blocks import fit, model_ms, token_block_terms

from hybridperf.datasets.schema import canonicalize
from hybridperf.devices import get_device

DEVICE = "NVIDIA A100-SXM4-80GB"


def _table(tokens, H, kernel) -> pd.DataFrame:
    n = len(tokens)
    t = canonicalize(pd.DataFrame({"OPName": ["gelu"] * n, "B": tokens, "H": H, "dtype": ["fp16"] * n,
                                   "Latency": [0.01] * n, "Device": [DEVICE] * n}), require_latency=True)
    return t.assign(kernel=kernel)


def test_steps_are_loop_steps_times_waves_of_resident_blocks():
    d = get_device(DEVICE)
    resident = d.num_sms * (d.max_threads_per_sm // 1024)
    t = token_block_terms(_table([1.0, 2.0 * resident, 1.0], [4096.0, 4096.0, 512.0], "silu_and_mul"))
    # one token: its block's 4 steps; twice the resident blocks: two waves of 4; a short row: one step
    assert np.allclose(t["steps"], [4.0, 8.0, 1.0])


def test_the_fit_recovers_the_round_trip_that_made_the_times():
    t = token_block_terms(_table([1.0, 8.0, 64.0, 4096.0, 65536.0], [14336.0, 28672.0, 4096.0, 8192.0, 14336.0],
                                 "silu_and_mul"))
    t = t.assign(latency_ms=model_ms(t, 0.9, 0.0))
    assert fit(t) == (0.9, 0.0)
