"""GEMM tile selection and wave quantization.

A GEMM C[M,K] = A[M,N] @ B[N,K] (NeuSight's naming: N is the reduction) is cut into output tiles
(tm x tn); each thread block computes one tile, `occ` blocks fit on an SM at once, so the GPU runs
ceil(tiles / (SMs * occ)) waves. The last wave may be partial: its SMs hold fewer blocks and finish
early only down to one block's time. Each tile streams N with a fixed prologue/epilogue cost of
`K_OVERHEAD` reduction steps. Larger tiles reuse operands more and reach a higher fraction of the
SM's peak. When the output has too few tiles to fill one wave and the reduction is long, libraries
split the reduction over `s` blocks (split-K) and add the partial results: `s` times more tiles, each
1/s as long, plus a pass over s partial outputs. The library picks the tiling that minimises time;
so do we, except for torch.bmm in fp32, whose tiles cuBLAS's batched heuristic fixes per architecture
(`constants.BATCHED_SGEMM_TRACES`, read off NeuSight's kernel traces): Pascal runs `maxwell_sgemm_128x64_nn`
or `_128x128_nn` (64 or 128 rows x 128 output columns; P100 and P4 agree) and Ampere
`ampere_sgemm_128x128_nn` for every one of the A100's 2,281 traced shapes, so attention's 64-wide AV
output pads half of each tile. Hopper (an H200 traced with cuBLAS 13.0) picks per shape among 32x32 to
256x128 tiles of both orientations, attention's AV output in 64-wide ones: every tile of ours it ran is
allowed there, so its bmm chooses freely like a linear. Other architectures keep the orientation the
other traces show (tiles at least as wide along the output columns as along the rows).
A lone block on an SM cannot hide latency on its own: it runs at no more than half of a full SM
unless its tile is big enough to fill the SM (occ = 1).

Pascal GEMMs with long reductions run at a fraction of their tile rate (`translation_limited_ms`):
NeuSight's P100 ran Linear layers of 32-64k input features at 2.1-2.5 TFLOP/s where shorter ones
reached 7, and the P4 at 2.0-2.9 where it reached 4.5. Both fall to about the same rate whatever their
SM count and bandwidth, and the fall follows how many 2 MiB pages a tile's operand rows span (a row is
N elements long), not the data size. We read it as an address-translation limit (no TLB was measured):
once a tile's rows span more pages than the SM's translation cache holds, its loads miss it and are
served at a GPU-wide rate. The V100 and A100 slow by 0.1-0.2 in log at 64k features, but no second GPU
of either architecture can check a fit, so only Pascal has the rule.

Ampere's and Hopper's cuBLAS rarely splits `F.linear` with a bias over the grid; it runs a partial wave
of small tiles instead, slower than the split the tile model prices (`constants.SPLIT_RATE_FITS`). Their other
GEMMs, and every GEMM of the older architectures, split as priced.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybridperf.devices import DTYPE_BYTES, DeviceSpec
from hybridperf.priors.constants import DEFAULT_CONSTANTS, PriorConstants
from hybridperf.priors.memory import achievable_bandwidth
from hybridperf.priors.power import sustained_flops, uses_matrix_units

#: (tile_m, tile_n, blocks per SM, fraction of SM peak reached when the SM is full)
TILES = (
    (128, 128, 1, 0.95),
    (128, 64, 2, 0.85),
    (64, 128, 2, 0.85),
    (64, 64, 4, 0.75),
    (32, 128, 4, 0.70),
    (128, 32, 4, 0.70),
    (32, 32, 8, 0.55),
)
K_OVERHEAD = 16.0
#: the per-tile fixed cost of NVIDIA matrix-unit GEMMs, in reduction steps: the prologue and epilogue
#: (filling the pipeline, writing the output tile) do not speed up with the matrix units, so they cost
#: more steps of a faster main loop. Read off our H200's fp16 GEMMs: with 16 steps their
#: log(measured / prior) falls from +0.43 at a 256-long reduction to +0.08 past 4k; 32 / 48 / 64 / 96
#: steps give NeuSight's training shapes 15.5 / 14.4 / 15.1 / 19.7% MAPE (bmm; 17.6% with 16) and its
#: test shapes 12.5 / 11.8 / 11.1 / 10.6%. Checked where it was not read: Vidur's A40 linears
#: 14.3 -> 13.5%, its A100-SXM4 11.2 -> 10.8%, our H100's fp16 bmm 9.0 -> 7.4% and bf16 15.6 -> 13.5%.
#: AMD's matrix cores keep K_OVERHEAD: their fitted library efficiency absorbs their own
#: (`constants.LIBRARY_EFFICIENCY`).
K_OVERHEAD_MATRIX = 64.0

SPLITS = (1, 2, 4, 8, 16, 32)

#: bytes of the large pages cudaMalloc maps on Pascal and later
PAGE_BYTES = 2 * 2**20


def translation_limited_ms(compute_ms, batch, m, k_out, n_red, tile_m, tile_n, device: DeviceSpec,
                           dtype: str = "fp32", constants: PriorConstants = DEFAULT_CONSTANTS) -> np.ndarray:
    """`compute_ms` slowed by address translation on architectures with a translation limit: the
    share 1 - budget / pages of a tile's loads miss, where pages is what its tile_m + tile_n operand
    rows of n_red elements span, and those run at the limit's FLOP per clock."""
    compute_ms = np.asarray(compute_ms, dtype=np.float64)
    limit = constants.translation_limit.get(device.arch)
    if limit is None:
        return compute_ms
    budget, flop_per_clock = limit
    row = np.asarray(n_red, dtype=np.float64) * DTYPE_BYTES[dtype]
    pages = sum(np.minimum(t, np.ceil(t * row / PAGE_BYTES)) for t in (np.asarray(tile_m), np.asarray(tile_n)))
    missed = np.clip(1.0 - budget / pages, 0.0, 1.0)
    flops = 2.0 * np.asarray(batch, dtype=np.float64) * m * k_out * n_red
    limited = flops / (flop_per_clock * device.boost_clock_mhz * 1e6) * 1e3
    return compute_ms + missed * np.maximum(limited - compute_ms, 0.0)


def library_efficiency(vendor: str, op: str, constants: PriorConstants = DEFAULT_CONSTANTS) -> float:
    """Fraction of the tile model's compute rate that `vendor`'s BLAS reaches for `op`."""
    return constants.library_efficiency.get((vendor, op), 1.0)


def batched_tile_hypotheses(device: DeviceSpec, constants: PriorConstants = DEFAULT_CONSTANTS) -> list:
    """The batched-SGEMM tile families a GPU's torch.bmm (vector math) may run, the one the prior
    assumes first: every family `constants` holds, the orientation rule (None), and the largest tile
    alone (a library with one batched kernel, as the A100's trace shows). A GPU's own few measured bmm
    kernels choose among them (hybridperf.transfer.adapt)."""
    assumed = constants.batched_sgemm_tiles.get(device.arch)
    largest = (max(TILES, key=lambda t: t[0] * t[1])[:2],)
    out = [assumed]
    for family in [*sorted(set(constants.batched_sgemm_tiles.values())), None, largest]:
        if family not in out:
            out.append(family)
    return out


@dataclass
class GemmTerms:
    """Per-row terms of the chosen tiling (arrays)."""

    compute_ms: np.ndarray
    tiles: np.ndarray
    waves: np.ndarray
    wave_efficiency: np.ndarray  # useful tile-slots / occupied tile-slots
    tile_m: np.ndarray
    tile_n: np.ndarray
    tile_efficiency: np.ndarray
    split_k: np.ndarray


#: matrix-unit GEMMs whose output columns or reduction length (the leading dimensions of a row-major
#: torch GEMM) are not a whole number of 16-byte vectors run slower, by the widest vector load both
#: dimensions allow (bytes -> factor). Read off our H200 (cuBLAS 13):
#: - 4 and 8 bytes: its 100 unaligned fp16 GEMMs of NeuSight's test shapes (an LM head of 30,522 columns
#:   ran at 26% of the fp16 peak) are 0.96 in log over the aligned-rate prior, the aligned ones 0.08; a
#:   factor of 2 / 3 / 4 / 6 leaves 40 / 26 / 22 / 37% MAPE on them. Checked on the H100: 44 -> 22%.
#: - 2 bytes (an odd number of 16-bit elements, scalar loads): its fp16 GEMMs of NeuSight's training
#:   shapes, where the compute term decides, need a median factor of 6.8 (1,318 GEMMs) against 3.9-4.8
#:   for 4- and 8-byte alignment (402). GPT-2's 50,257-token head is such a GEMM.
#: Vidur's and NeuSight's tables hold no unaligned matrix-unit GEMM. Applied to NVIDIA's 16- and 8-bit
#: matrix-unit GEMMs only: TF32 and AMD's matrix cores were never measured unaligned.
UNALIGNED_MATRIX_SLOWDOWN = {2: 6.8, 4: 4.0, 8: 4.0}
ALIGN_BYTES = 16


def vector_bytes(dim, elem_bytes: float) -> np.ndarray:
    """Widest power-of-two load (bytes, at most ALIGN_BYTES) that a row of `dim` elements divides into."""
    nbytes = np.asarray(dim, dtype=np.float64) * elem_bytes
    out = np.full(nbytes.shape, float(ALIGN_BYTES))
    for b in (8.0, 4.0, 2.0, 1.0):
        out = np.where(np.mod(nbytes, 2 * b) != 0, b, out)
    return out


def unaligned_slowdown(k_out, inner, dtype: str) -> np.ndarray:
    """Per row (a column vector like `k_out`): the UNALIGNED_MATRIX_SLOWDOWN of the narrowest vector
    load the output columns and `inner` (the other contiguous dimension: the reduction length, or a
    transposed GEMM's rows) allow, 1 where both are 16-byte multiples."""
    size = DTYPE_BYTES.get(dtype, 4)
    vec = np.minimum(vector_bytes(k_out, size), vector_bytes(inner, size))
    narrowest = min(UNALIGNED_MATRIX_SLOWDOWN)
    out = np.ones(vec.shape)
    for b, factor in UNALIGNED_MATRIX_SLOWDOWN.items():
        out = np.where(vec == b, factor, out)
    return np.where(vec < narrowest, UNALIGNED_MATRIX_SLOWDOWN[narrowest], out)


def gemm_compute(batch, m, k_out, n_red, device: DeviceSpec, dtype: str = "fp32", matrix: bool = False,
                 batched: bool = False, linear_form=False, transposed=False,
                 constants: PriorConstants = DEFAULT_CONSTANTS) -> GemmTerms:
    """Compute time of a (batched) GEMM under the best tile, with wave quantization. `batched`
    (torch.bmm) restricts vector-math (non-tensor-core) tiles to those the architecture's batched
    SGEMM runs (`constants.batched_sgemm_tiles`), else to those at least as wide along the output
    columns as along the rows. `linear_form` (per row, or one bool): the GEMM is `F.linear` with a
    bias, whose vector-math splits run at split ** -exponent of the rate on the architectures that
    have one (`constants.split_rate_exponent`). `transposed` (per row, or one bool): the GEMM reduces
    along its operands' rows (`hybridperf.ops.TRANSPOSED_FORM`), so its loads run along M and K."""
    B = np.asarray(batch, dtype=np.float64)[:, None]
    M = np.asarray(m, dtype=np.float64)[:, None]
    K = np.asarray(k_out, dtype=np.float64)[:, None]
    N = np.asarray(n_red, dtype=np.float64)[:, None]
    grid = [(t, s) for t in TILES for s in SPLITS]
    tm = np.array([g[0][0] for g in grid], dtype=np.float64)[None, :]
    tn = np.array([g[0][1] for g in grid], dtype=np.float64)[None, :]
    occ = np.array([g[0][2] for g in grid], dtype=np.float64)[None, :]
    eff = np.array([g[0][3] for g in grid], dtype=np.float64)[None, :]
    split = np.array([g[1] for g in grid], dtype=np.float64)[None, :]

    sms = float(device.num_sms)
    sm_rate = sustained_flops(device, dtype, matrix) / sms  # FLOP/s of one SM
    nvidia_matrix = uses_matrix_units(device, dtype, matrix) and device.vendor == "nvidia"
    overhead = K_OVERHEAD_MATRIX if nvidia_matrix else K_OVERHEAD
    if nvidia_matrix and DTYPE_BYTES.get(dtype, 4) <= 2:
        rows_t = np.broadcast_to(np.asarray(transposed, dtype=bool), B[:, 0].shape)[:, None]
        sm_rate = sm_rate / unaligned_slowdown(K, np.where(rows_t, M, N), dtype)
    out_tiles = B * np.ceil(M / tm) * np.ceil(K / tn)
    tiles = out_tiles * split
    n_chunk = np.ceil(N / split)
    slots = sms * occ
    full_waves = np.floor(tiles / slots)
    rem = tiles - full_waves * slots
    # the partial wave: ceil(rem / SMs) blocks on the busiest SM out of occ, and a lone block
    # runs no faster than half a full SM unless it fills the SM by itself
    busiest = np.ceil(rem / sms)
    last = np.where(rem > 0, np.maximum(busiest, occ / 2.0) / occ, 0.0)
    waves = full_waves + last
    # one full wave: every SM runs occ tiles at `eff` of its peak
    wave_ms = occ * 2.0 * tm * tn * (n_chunk + overhead) / (sm_rate * eff) * 1e3
    # split-K epilogue: write and re-read the partial outputs at achievable bandwidth
    reduce_ms = np.where(split > 1, 2.0 * split * B * M * K * 4.0 / achievable_bandwidth(device) * 1e3, 0.0)
    # split-K is only used when the output tiles cannot fill one wave and the reduction is long
    allowed = (split == 1) | ((out_tiles < slots) & (n_chunk >= 256))
    if batched:
        fixed = None if uses_matrix_units(device, dtype, matrix) else constants.batched_sgemm_tiles.get(device.arch)
        if fixed:
            allowed = allowed & np.any([(tm == r) & (tn == c) for r, c in fixed], axis=0)
        else:
            allowed = allowed & (tn >= tm)
    slowed = 1.0
    exponent = constants.split_rate_exponent.get(device.arch, 0.0)
    if exponent and not uses_matrix_units(device, dtype, matrix):
        rows_slowed = np.broadcast_to(np.asarray(linear_form, dtype=bool), B[:, 0].shape)[:, None]
        slowed = np.where(rows_slowed, split ** exponent, 1.0)
    t = np.where(allowed, waves * wave_ms * slowed + reduce_ms, np.inf)
    best = np.argmin(t, axis=1)
    rows = np.arange(len(best))
    pick = lambda a: np.broadcast_to(a, t.shape)[rows, best]  # noqa: E731
    used = tiles / np.maximum(np.ceil(tiles / slots), 1.0) / slots
    compute_ms = translation_limited_ms(t[rows, best], B[:, 0], M[:, 0], K[:, 0], N[:, 0], pick(tm), pick(tn),
                                        device, dtype, constants)
    return GemmTerms(
        compute_ms=compute_ms,
        tiles=pick(tiles),
        waves=pick(waves),
        wave_efficiency=pick(used),
        tile_m=pick(tm),
        tile_n=pick(tn),
        tile_efficiency=pick(eff),
        split_k=pick(split),
    )
