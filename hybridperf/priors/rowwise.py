"""Row-wise kernels (softmax, LayerNorm): how PyTorch lays them out, and what their re-reads cost.

The layouts are those NeuSight's traces show (PyTorch 2.1, kernel names and launch grids in its
test tables):
- softmax with rows of up to 1024 elements: `softmax_warp_forward`, a warp per row, the row in
  registers: one read, one write.
- longer softmax rows: `cunn_SoftMaxForward`, a block per row (threads: the power of two at or above
  min(H / ILP, 1024) / 2, ILP = 16 bytes / element size). It streams the row three times (max, sum of
  exponentials, normalise) and writes once: two re-reads.
- LayerNorm, any row length: `vectorized_layer_norm_kernel`, a 128-thread block per row; Welford
  statistics, then a second read to normalise: one re-read.

A re-read hits L2 when the rows in flight (SMs x resident blocks x row bytes) fit comfortably in it,
and then overlaps the DRAM stream almost for free. Once they outgrow L2, the re-reads go to DRAM.
The three constants below are global, chosen leave-one-GPU-out on NeuSight's five GPUs (each fold
chose fits 0.3-0.4, spills 1.15-1.45, cost 0.1; `experiments/priors_report.py`). Without this, one
DRAM pass was assumed up to 16 KiB rows (a shared-memory softmax PyTorch 2.1 does not run) and two
beyond: held-out softmax MAPE was 10-25% per GPU, with rows of 1-4k elements 1.3-1.7x slower and
rows of 5-10k up to 1.8x faster than that.
"""
from __future__ import annotations

import numpy as np

from hybridperf.devices import DeviceSpec
from hybridperf.priors.memory import dram_efficiency, l2_hit_fraction

#: re-reads all hit L2 while the rows in flight take at most this share of it ...
REREAD_FITS_L2 = 0.4
#: ... and none once they take this multiple of it (linear in between)
REREAD_SPILLS_L2 = 1.3
#: cost of an L2-hit re-read relative to a DRAM read (it overlaps the DRAM stream)
REREAD_L2_COST = 0.1
#: resident blocks per SM are capped by the hardware's block limit (16 on Pascal..Turing)
MAX_BLOCKS_PER_SM = 16
#: PyTorch's warp-per-row softmax covers rows of up to this many elements
WARP_SOFTMAX_MAX_ELEMS = 1024


def row_kernel_layout(op_class: str, H: np.ndarray, dtype_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """(threads per row, re-reads of each row) of PyTorch's softmax or LayerNorm kernel."""
    H = np.asarray(H, dtype=np.float64)
    if op_class == "layernorm":
        return np.full_like(H, 128.0), np.ones_like(H)
    ilp = 16 // dtype_bytes
    half = np.maximum(np.minimum(H / ilp, 1024.0) / 2.0, 1.0)
    block = np.maximum(32.0, 2.0 ** np.ceil(np.log2(half)))
    warp = H <= WARP_SOFTMAX_MAX_ELEMS
    return np.where(warp, 32.0, block), np.where(warp, 0.0, 2.0)


def reread_hit_fraction(inflight_bytes, device: DeviceSpec) -> np.ndarray:
    """Share of re-reads served by L2, from the bytes of the rows resident on the whole GPU."""
    x = np.asarray(inflight_bytes, dtype=np.float64) / (device.l2_mb * 1e6)
    return np.clip((REREAD_SPILLS_L2 - x) / (REREAD_SPILLS_L2 - REREAD_FITS_L2), 0.0, 1.0)


def row_parallel_fraction(rows, row_bytes, device: DeviceSpec) -> np.ndarray:
    """Share of the GPU busy in a row-wise kernel: rows in flight versus rows needed to saturate
    memory. Small rows are packed several per warp, large rows get a block each."""
    rows = np.asarray(rows, dtype=np.float64)
    row_bytes = np.asarray(row_bytes, dtype=np.float64)
    # bytes in flight needed to saturate DRAM ~ 32 KiB per SM (Little's law at ~1 us latency)
    needed_rows = device.num_sms * np.maximum(32768.0 / np.maximum(row_bytes, 1.0), 1.0)
    return np.clip(rows / needed_rows, 1.0 / device.num_sms, 1.0)


def reread_time_ms(op_class: str, H, rows_bytes, working_set_bytes, dtype_bytes: int,
                   device: DeviceSpec, parallel_fraction) -> tuple[np.ndarray, np.ndarray]:
    """(time of the re-reads in ms, their L2 hit fraction) for rows totalling `rows_bytes` (input
    plus output); `working_set_bytes` is the whole call's, which repeated timed calls keep in L2
    when it fits."""
    H = np.asarray(H, dtype=np.float64)
    threads, rereads = row_kernel_layout(op_class, H, dtype_bytes)
    blocks_per_sm = np.minimum(np.floor(device.max_threads_per_sm / threads), MAX_BLOCKS_PER_SM)
    inflight = device.num_sms * np.maximum(blocks_per_sm, 1.0) * H * dtype_bytes
    hit = np.maximum(reread_hit_fraction(inflight, device), l2_hit_fraction(working_set_bytes, device))
    bw = device.mem_bw_gbs * 1e9 * dram_efficiency(device)
    read_bytes = np.asarray(rows_bytes, dtype=np.float64) / 2.0
    t = rereads * read_bytes * (hit * REREAD_L2_COST + (1.0 - hit)) / bw
    return t / np.clip(parallel_fraction, 1e-3, 1.0) * 1e3, hit
