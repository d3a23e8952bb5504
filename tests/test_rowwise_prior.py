"""The row-wise kernel model (hybridperf.priors.rowwise): PyTorch's layouts as NeuSight's traces show
them and as current PyTorch runs them, re-reads that are cheap while the rows in flight fit in L2 and
full DRAM reads after, and the SM-side cost that binds where memory is fast."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from hybridperf.datasets.schema import canonicalize
from hybridperf.devices import get_device
from hybridperf.priors.constants import (DEFAULT_CONSTANTS, REREAD_L2_SHARE_FITS, fitted_constants,
                                        reread_capacity_table, split_l2_share)
from hybridperf.priors.kernel_prior import kernel_prior_terms
from hybridperf.priors.rowwise import (
    REREAD_FITS_L2, REREAD_SPILLS_L2, reread_hit_fraction, reread_time_ms, row_issue_ms, row_kernel_layout,
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


def _softmax(B: int, H: int, host: str = "neusight") -> pd.DataFrame:
    return canonicalize(pd.DataFrame({"OPName": ["softmax"], "B": [B], "H": [H]}), host=host)


def test_long_softmax_rows_cost_more_per_byte_when_l2_is_small():
    big = dataclasses.replace(get_device("NVIDIA A100-PCIE-40GB"), l2_partitions=1)
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


def test_current_pytorch_softmax_stages_rows_it_can_hold():
    # a warp per row up to 2048 elements; longer rows get a 1024-thread block; up to 9 x 1024 elements
    # sit in registers, longer ones in 48 KiB of shared memory if they fit; only the rest stream three times
    H = np.array([1024, 2048, 2049, 9216, 16384])
    threads, rereads = row_kernel_layout("softmax", H, 4, current=True)
    assert threads.tolist() == [32, 32, 1024, 1024, 1024] and rereads.tolist() == [0, 0, 0, 0, 2]
    _, rereads_half = row_kernel_layout("softmax", H, 2, current=True)
    assert rereads_half.tolist() == [0, 0, 0, 0, 0]


def test_current_register_softmax_costs_cycles_per_slot():
    """Current PyTorch's register kernel pays for ceil(H / 1024) slots per thread, used or not, and more
    per slot where one 1024-thread block fills an SM (7 slots and up, or an SM of 1536 threads)."""
    h200 = get_device("NVIDIA H200")
    per_row = row_issue_ms("softmax", 1.0, np.array([2560.0, 3072.0, 5120.0, 7168.0]), 2, h200, current=True)
    assert per_row[0] == per_row[1]
    per_slot = per_row / np.array([3, 3, 5, 7])
    assert per_slot[2] == pytest.approx(per_slot[0]) and per_slot[3] == pytest.approx(1.3 * per_slot[0])
    narrow = dataclasses.replace(h200, max_threads_per_sm=1536)
    assert row_issue_ms("softmax", 1.0, 5120.0, 2, narrow, current=True) == pytest.approx(1.3 * per_row[2])
    # PyTorch 2.1 has no register kernel: its cost stays per element
    assert row_issue_ms("softmax", 1.0, 2560.0, 2, h200) < row_issue_ms("softmax", 1.0, 3072.0, 2, h200)


def test_sm_side_cost_binds_where_memory_is_fast_for_the_sms():
    # LayerNorm over short rows: SM-bound on the H200 (its grid ran 2.2x the memory time), memory-bound on a T4
    rows = canonicalize(pd.DataFrame({"OPName": ["ln"], "B": [524288], "H": [512]}))
    for name, binds in (("NVIDIA H200", True), ("Tesla T4", False)):
        dev = get_device(name)
        sm = row_issue_ms("layernorm", 524288, 512, 4, dev)[()]
        assert (kernel_prior_terms(rows, dev).iloc[0]["memory_ms"] == sm) == binds
    # softmax in current PyTorch's long-row kernels costs more SM cycles per element the longer the row
    dev = get_device("NVIDIA H200")
    H = np.array([512.0, 2048.0, 8192.0])
    per_elem = row_issue_ms("softmax", 1.0, H, 2, dev, current=True) / H
    assert per_elem[0] < per_elem[1] < per_elem[2]
    assert np.allclose(row_issue_ms("softmax", 1.0, H, 2, dev, current=False) / H, per_elem[0])


def test_a_split_l2_holds_fewer_rows_for_their_reread():
    split = get_device("NVIDIA H100 80GB HBM3")
    whole = dataclasses.replace(split, l2_partitions=1)
    inflight = np.array([0.3, 0.5, 0.7, 0.9]) * split.l2_mb * 1e6
    hit_split, hit_whole = reread_hit_fraction(inflight, split, 0.6), reread_hit_fraction(inflight, whole, 0.6)
    assert np.all(hit_split <= hit_whole) and hit_split[2] < hit_whole[2]
    # rows taking 0.3 of a split L2 seen at share 0.6 hit as rows taking 0.5 of a whole one
    assert reread_hit_fraction(inflight[:1], split, 0.6)[0] == reread_hit_fraction(inflight[1:2], whole, 0.6)[0]
    assert np.array_equal(reread_hit_fraction(inflight, split, 1.0), hit_whole)


def test_a_gpu_held_out_takes_the_other_gpus_reread_capacity():
    assert set(REREAD_L2_SHARE_FITS) == {"NVIDIA A100-PCIE-40GB", "NVIDIA H200"}
    a100, h200 = get_device("NVIDIA A100-PCIE-40GB"), get_device("NVIDIA H200")
    h200_mb = REREAD_L2_SHARE_FITS["NVIDIA H200"] * h200.l2_mb
    assert reread_capacity_table("NVIDIA A100-PCIE-40GB") == pytest.approx(h200_mb)
    assert reread_capacity_table("NVIDIA H200") == pytest.approx(REREAD_L2_SHARE_FITS["NVIDIA A100-PCIE-40GB"] * a100.l2_mb)
    assert reread_capacity_table() == pytest.approx((h200_mb + REREAD_L2_SHARE_FITS["NVIDIA A100-PCIE-40GB"] * 40) / 2)
    assert split_l2_share(h200_mb, a100.l2_mb) == pytest.approx(h200_mb / a100.l2_mb)  # the A100 held out
    assert split_l2_share(None, a100.l2_mb) == 1.0 and split_l2_share(1e6, a100.l2_mb) == 1.0
    rows = _softmax(65536, 12288, host="neusight")
    held = kernel_prior_terms(rows, a100, constants=fitted_constants("NVIDIA A100-PCIE-40GB")).iloc[0]
    at_h200 = dataclasses.replace(DEFAULT_CONSTANTS, reread_l2_mb=h200_mb)
    assert kernel_prior_terms(rows, a100, constants=at_h200).iloc[0]["prior_ms"] == held["prior_ms"]
    whole = dataclasses.replace(DEFAULT_CONSTANTS, reread_l2_mb=None)
    assert held["reread_hit"] <= kernel_prior_terms(rows, a100, constants=whole).iloc[0]["reread_hit"]
