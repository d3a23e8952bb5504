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
GA100 and GH100 split their L2 in two halves, each caching for its own SMs (`DeviceSpec.l2_partitions`;
B200-class parts one per die); there the re-reads see only part of the nominal capacity
(`PriorConstants.reread_l2_mb`, fitted on A100 and H200 only: unchecked on Blackwell).
The three constants below are global, chosen leave-one-GPU-out on NeuSight's five GPUs (each fold
chose fits 0.3-0.4, spills 1.15-1.45, cost 0.1; `experiments/kernels/priors_report.py`). Without this, one
DRAM pass was assumed up to 16 KiB rows (a shared-memory softmax PyTorch 2.1 does not run) and two
beyond: held-out softmax MAPE was 10-25% per GPU, with rows of 1-4k elements 1.3-1.7x slower and
rows of 5-10k up to 1.8x faster than that.

Both kernels also cost SM cycles (`row_issue_ms`): LayerNorm a fixed part per row (the block's start
and its Welford/block reductions) and a part per byte of the row, softmax a part per element. Where
memory is fast for the SMs feeding it (Hopper) or rows are short, that cost, not DRAM, sets the time.

Current PyTorch (the `current` host) runs other softmax kernels than 2.1 for rows over 1024 elements:
the warp-per-row kernel up to 2048 elements, then a 1024-thread block that holds the row in registers
or shared memory when it can, and reads it once (`row_kernel_layout(..., current=True)`; constants below).
"""
from __future__ import annotations

import numpy as np

from hybridperf.devices import DeviceSpec
from hybridperf.priors.memory import achievable_bandwidth, l2_hit_fraction

#: re-reads all hit L2 while the rows in flight take at most this share of it ...
REREAD_FITS_L2 = 0.4
#: ... and none once they take this multiple of it (linear in between)
REREAD_SPILLS_L2 = 1.3
#: cost of an L2-hit re-read relative to a DRAM read (it overlaps the DRAM stream)
REREAD_L2_COST = 0.1
#: resident blocks per SM are capped by the hardware's block limit (16 on Pascal..Turing)
MAX_BLOCKS_PER_SM = 16
#: PyTorch 2.1's warp-per-row softmax covers rows of up to this many elements ...
WARP_SOFTMAX_MAX_ELEMS = 1024
#: ... current PyTorch's (2.3 on; our hosts ran 2.11) up to 2048 elements of at most 8 KiB (its
#: `host_softmax`: dim_size <= 2048 && dim_size * sizeof(scalar_t) <= 8192)
CURRENT_WARP_SOFTMAX_MAX_ELEMS = 2048
CURRENT_WARP_SOFTMAX_MAX_BYTES = 8192
#: LayerNorm's SM-side cost per row: SM cycles for each row ...
LAYERNORM_ROW_CYCLES = 359.0
#: ... plus SM cycles per byte of the row. Both read off our H200's fp32 and fp16 grid, rows of
#: 512-2048 elements (`experiments/data/measured/h200/kernels.csv`), and checked on the H100 and on
#: NeuSight's five GPUs (experiments/RESULTS.md section 1; the full check is in its git history)
LAYERNORM_ROW_CYCLES_PER_BYTE = 0.113
#: softmax's SM-side cost, SM cycles per element (the H200's fp16 rows of 512-1024 elements, which
#: take 0.74x their fp32 time, not half of it). Current PyTorch's warp kernel over rows of 1-2k
#: elements costs more per element, 0.38 x sqrt(H / 1024) (the H200's rows: 0.53 at 2048).
SOFTMAX_CYCLES_PER_ELEM = 0.38
#: Longer rows in current PyTorch get a 1024-thread block (`cunn_SoftMaxForwardReg<..., slots>`): while
#: slots = ceil(H / 1024) < 10, each thread keeps `slots` elements in registers and the row is read once.
#: The block costs SM cycles per register slot, used or not (an H200 row of 2560 elements costs
#: what one of 3072 does) ...
REGISTER_SOFTMAX_MAX_ELEMS = 9 * 1024
REGISTER_SOFTMAX_CYCLES_PER_SLOT = 0.75 * 1024
#: ... and more where only one such block fits on an SM: an SM of 2048 threads holds two while a
#: thread needs at most 32 registers, which the H200's rows show hold up to 5 slots and not at 7
#: (0.75-0.80 cycles per slot-element at 3-5 slots, 0.96-1.05 at 7-8; 6 was not measured). SMs of
#: fewer than 2048 threads (GA10x, Ada: 1536) hold one whatever the slots.
REGISTER_SOFTMAX_TWO_BLOCK_SLOTS = 6
REGISTER_SOFTMAX_ONE_BLOCK_FACTOR = 1.3
#: Rows past the registers that fit in 48 KiB of shared memory are staged there (one read), at this
#: many SM cycles per element; the others stream three times, as in PyTorch 2.1.
#: The three constants above and this one: minimum mean MAPE of the fp32 and fp16 softmax rows of the
#: H200's grid (0.05 steps; 1.3 from 1.0-1.5). The H100 is held out of them (experiments/RESULTS.md).
SOFTMAX_SMEM_CYCLES_PER_ELEM = 0.5
SOFTMAX_SMEM_BYTES = 48 * 1024


def softmax_kernel(H, dtype_bytes: int, current=False) -> np.ndarray:
    """Which of PyTorch's softmax kernels runs rows of H elements: "warp" (a warp per row), and on
    current PyTorch (`current`, a bool per row or one for all) "register" or "smem" (a 1024-thread
    block holding the row), else "block" (a block streaming the row three times)."""
    H = np.asarray(H, dtype=np.float64)
    current = np.broadcast_to(np.asarray(current, dtype=bool), H.shape)
    current_warp = (H <= CURRENT_WARP_SOFTMAX_MAX_ELEMS) & (H * dtype_bytes <= CURRENT_WARP_SOFTMAX_MAX_BYTES)
    warp = np.where(current, current_warp, H <= WARP_SOFTMAX_MAX_ELEMS)
    register = current & ~warp & (H <= REGISTER_SOFTMAX_MAX_ELEMS)
    smem = current & ~warp & ~register & (H * dtype_bytes < SOFTMAX_SMEM_BYTES)
    return np.select([warp, register, smem], ["warp", "register", "smem"], "block")


def row_kernel_layout(op_class: str, H: np.ndarray, dtype_bytes: int,
                      current=False) -> tuple[np.ndarray, np.ndarray]:
    """(threads per row, re-reads of each row) of PyTorch's softmax or LayerNorm kernel: PyTorch
    2.1's (NeuSight's hosts), or current PyTorch's where `current` (a bool per row, or one for all)."""
    H = np.asarray(H, dtype=np.float64)
    if op_class == "layernorm":
        return np.full_like(H, 128.0), np.ones_like(H)
    ilp = 16 // dtype_bytes
    half = np.maximum(np.minimum(H / ilp, 1024.0) / 2.0, 1.0)
    block = np.maximum(32.0, 2.0 ** np.ceil(np.log2(half)))
    kernel = softmax_kernel(H, dtype_bytes, current)
    current = np.broadcast_to(np.asarray(current, dtype=bool), H.shape)
    threads = np.where(kernel == "warp", 32.0, np.where(current, 1024.0, block))
    rereads = np.where(kernel == "block", 2.0, 0.0)
    return threads, rereads


def row_issue_ms(op_class: str, rows, H, dtype_bytes: int, device: DeviceSpec, current=False) -> np.ndarray:
    """SM-side time (ms) of a row-wise kernel, its cycles spread over every SM at boost clock:
    LayerNorm's per row and per byte, softmax's per element, or per register slot for the rows
    current PyTorch keeps in registers."""
    rows = np.asarray(rows, dtype=np.float64)
    H = np.asarray(H, dtype=np.float64)
    if op_class == "layernorm":
        cycles = LAYERNORM_ROW_CYCLES + LAYERNORM_ROW_CYCLES_PER_BYTE * H * dtype_bytes
    else:
        kernel = softmax_kernel(H, dtype_bytes, current)
        slots = np.ceil(H / 1024.0)
        two_blocks = (device.max_threads_per_sm >= 2048) & (slots <= REGISTER_SOFTMAX_TWO_BLOCK_SLOTS)
        per_row = REGISTER_SOFTMAX_CYCLES_PER_SLOT * slots * np.where(two_blocks, 1.0,
                                                                      REGISTER_SOFTMAX_ONE_BLOCK_FACTOR)
        # the warp kernel costs more per element over rows past 1024 elements (current PyTorch's only)
        warp_elem = SOFTMAX_CYCLES_PER_ELEM * np.sqrt(np.maximum(H / WARP_SOFTMAX_MAX_ELEMS, 1.0))
        per_elem = np.select([kernel == "smem", kernel == "warp"], [SOFTMAX_SMEM_CYCLES_PER_ELEM, warp_elem],
                             SOFTMAX_CYCLES_PER_ELEM)
        cycles = np.where(kernel == "register", per_row, per_elem * H)
    return rows * cycles / (device.num_sms * device.boost_clock_mhz * 1e6) * 1e3


def reread_hit_fraction(inflight_bytes, device: DeviceSpec, split_l2_share: float = 1.0) -> np.ndarray:
    """Share of re-reads served by L2, from the bytes of the rows resident on the whole GPU (against
    `split_l2_share` of a split L2: `PriorConstants.reread_l2_mb` over its size)."""
    share = split_l2_share if device.l2_partitions > 1 else 1.0
    x = np.asarray(inflight_bytes, dtype=np.float64) / (device.l2_mb * 1e6 * share)
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
                   device: DeviceSpec, parallel_fraction, current=False,
                   split_l2_share: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(time of the re-reads in ms, their L2 hit fraction) for rows totalling `rows_bytes` (input
    plus output); `working_set_bytes` is the whole call's, which repeated timed calls keep in L2
    when it fits. `current` picks current PyTorch's layouts (`row_kernel_layout`); `split_l2_share`
    as in `reread_hit_fraction`."""
    H = np.asarray(H, dtype=np.float64)
    threads, rereads = row_kernel_layout(op_class, H, dtype_bytes, current)
    blocks_per_sm = np.minimum(np.floor(device.max_threads_per_sm / threads), MAX_BLOCKS_PER_SM)
    inflight = device.num_sms * np.maximum(blocks_per_sm, 1.0) * H * dtype_bytes
    hit = np.maximum(reread_hit_fraction(inflight, device, split_l2_share), l2_hit_fraction(working_set_bytes, device))
    bw = achievable_bandwidth(device)
    read_bytes = np.asarray(rows_bytes, dtype=np.float64) / 2.0
    t = rereads * read_bytes * (hit * REREAD_L2_COST + (1.0 - hit)) / bw
    return t / np.clip(parallel_fraction, 1e-3, 1.0) * 1e3, hit
