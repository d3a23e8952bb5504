"""The row-wise kernel model (hybridperf.priors.rowwise): PyTorch's layouts as NeuSight's traces show
them, and re-reads that are cheap while the rows in flight fit in L2 and full DRAM reads after."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from hybridperf.datasets.schema import canonicalize
from hybridperf.devices import get_device
from hybridperf.priors.kernel_prior import kernel_prior_terms
from hybridperf.priors.rowwise import (
    REREAD_FITS_L2, REREAD_SPILLS_L2, reread_hit_fraction, reread_time_ms, row_kernel_layout,
)


def test_softmax_layout_matches_pytorch_2_1_traces():
    # block sizes read off the launch grids of NeuSight's softmax test table (fp32)
    H = np.array([768, 1024, 1280, 2048, 2560, 4096, 10240, 16384])
    threads, rereads = row_kernel_layout("softmax", H, 4)
    assert threads.tolist() == [32, 32, 256, 256, 512, 512, 512, 512]
    assert rereads.tolist() == [0, 0, 2, 2, 2, 2, 2, 2]


def test_layernorm_is_one_block_per_row_with_one_reread():
    threads, rereads = row_kernel_layout("layernorm", np.array([256, 1024, 16384]), 4)
    assert threads.tolist() == [128, 128, 128] and rereads.tolist() == [1, 1, 1]


def test_reread_hit_fraction_falls_from_one_to_zero_as_rows_outgrow_l2():
    dev = get_device("Tesla T4")
    l2 = dev.l2_mb * 1e6
    hit = reread_hit_fraction(np.array([0.1, REREAD_FITS_L2, 0.8, REREAD_SPILLS_L2, 3.0]) * l2, dev)
    assert hit[0] == 1.0 and hit[1] == 1.0 and hit[-2] == 0.0 and hit[-1] == 0.0
    assert np.all(np.diff(hit) <= 0) and 0.0 < hit[2] < 1.0


def _softmax(B: int, H: int) -> pd.DataFrame:
    return canonicalize(pd.DataFrame({"OPName": ["softmax"], "B": [B], "H": [H]}))


def test_long_softmax_rows_cost_more_per_byte_when_l2_is_small():
    big = get_device("NVIDIA A100-PCIE-40GB")
    small = dataclasses.replace(big, l2_mb=1.0)
    rows = _softmax(65536, 8192)
    t_big, t_small = (kernel_prior_terms(rows, d).iloc[0] for d in (big, small))
    assert t_big["reread_hit"] == 1.0 and t_small["reread_hit"] < 1e-6
    # three reads and a write from DRAM against about one read and a write
    assert 1.6 < t_small["memory_ms"] / t_big["memory_ms"] < 2.1


def test_warp_softmax_has_no_reread_cost():
    dev = dataclasses.replace(get_device("NVIDIA A100-PCIE-40GB"), l2_mb=1.0)
    H = np.array([1024.0, 1280.0])
    t, _ = reread_time_ms("softmax", H, 2 * 65536 * H * 4, 2 * 65536 * H * 4, 4, dev, 1.0)
    assert t[0] == 0.0 and t[1] > 0.0
