"""The best analytical prior for every op class, and the terms it is built from.

    GEMMs (bmm, linear):   floor + max(tile/wave-quantized compute at the power-capped rate, divided
                                       by the vendor BLAS efficiency, compulsory bytes at achievable bandwidth)
    elementwise:           floor + max(bytes at achievable bandwidth with L2 residency, each element's
                           arithmetic at the fp32 vector rate: `ELEMENTWISE_OPMATH_COST`)
    softmax, LayerNorm:    floor + max(one read and write + re-reads, from L2 while the rows in flight
                           fit in it, at the bandwidth the rows in flight can draw; the SM cycles the
                           rows take)  (`hybridperf.priors.rowwise`: PyTorch's kernel layouts)
    attention:             floor + PyTorch SDPA's fused kernel (`hybridperf.priors.attention.sdpa_ms`)

The terms (compute, memory, tiles, waves, wave efficiency, L2 hit rate, ...) are also the
device-agnostic features the residual models learn from.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from hybridperf.devices import DTYPE_BYTES, DeviceSpec
from hybridperf.ops import FUSED_OPS, GEMM_OPS, LINEAR_FORMS, TRANSPOSED_FORM
from hybridperf.priors.attention import sdpa_ms
from hybridperf.priors.constants import DEFAULT_CONSTANTS, PriorConstants, split_l2_share
from hybridperf.priors.gemm import gemm_compute, library_efficiency
from hybridperf.priors.launch import HOST_FLOOR_SCALE, describe_floor_shares, floors_ms, row_host, row_timing
from hybridperf.priors.memory import l2_hit_fraction, memory_time_ms
from hybridperf.priors.power import sustained_flops
from hybridperf.priors.roofline import roofline_ms
from hybridperf.priors.rowwise import reread_time_ms, row_issue_ms, row_parallel_fraction

#: FLOP-equivalents per element of PyTorch's element-wise kernels at the sustained fp32 vector rate,
#: for every dtype: ATen computes fp16 and bf16 in fp32 (`at::opmath_type`), so half precision halves
#: the bytes but not the arithmetic, and ops with a costly fp32 routine turn compute-bound. Read off
#: our H200's fp16 kernels with a floor share under 0.3 (median of (measured - floor) x rate /
#: elements; experiments/RESULTS.md section 1): tensor ** tensor 120, IEEE division 85, erf-GELU 64,
#: where the prior had 8, 1 and 14 and the H200 ran them 1.59x, 1.13x and 1.28x slower than it.
#: Other ops stayed memory-bound there (their cost is under ~50), so they keep their nominal FLOP
#: counts (`hybridperf.ops.op_work`). SiLU, aliased to `gelu`, takes GELU's cost (not measured alone).
ELEMENTWISE_OPMATH_COST = {"pow": 120.0, "div": 85.0, "gelu": 64.0}

TERM_COLUMNS = (
    "roofline_ms", "prior_ms", "compute_ms", "memory_ms", "floor_ms", "tiles", "waves",
    "wave_efficiency", "tile_m", "tile_n", "tile_efficiency", "split_k", "l2_hit", "parallel_fraction",
    "reread_hit",
)


def linear_form(rows: pd.DataFrame) -> np.ndarray:
    """Per row: a `linear` op in the `linear` form (`hybridperf.ops.LINEAR_FORMS`; the default where
    the table has no `form` column)."""
    lin = rows["op"].to_numpy() == "linear"
    if "form" not in rows.columns:
        return lin
    return lin & (rows["form"].to_numpy() == LINEAR_FORMS[0])


def transposed_form(rows: pd.DataFrame) -> np.ndarray:
    """Per row: a GEMM in the transposed form (`hybridperf.ops.TRANSPOSED_FORM`, a weight gradient)."""
    if "form" not in rows.columns:
        return np.zeros(len(rows), dtype=bool)
    return rows["form"].to_numpy() == TRANSPOSED_FORM


def kernel_prior_terms(kernels: pd.DataFrame, device: DeviceSpec, timing: str | None = None,
                       constants: PriorConstants = DEFAULT_CONSTANTS) -> pd.DataFrame:
    """Prior latency (ms) and its terms for every row of a canonical kernel table on `device`.

    Rows keep their order and index. `device` applies to all rows. The floor follows each row's
    `timing` column (`call` where absent), or `timing` for every row when given, and its `host`
    column (hybridperf.priors.launch.DEFAULT_HOST where absent). `constants`: the GPU-fitted
    constants to price with (`hybridperf.priors.constants.fitted_constants` to hold a GPU out).
    """
    n = len(kernels)
    if timing is None:
        timing = row_timing(kernels).to_numpy()
    hosts = row_host(kernels).to_numpy()
    floors = floors_ms(kernels["op_class"].to_numpy(), np.broadcast_to(np.asarray(timing, dtype=object), (n,)), hosts)
    out = {c: np.zeros(n) for c in TERM_COLUMNS}
    out["wave_efficiency"][:] = 1.0
    out["tile_efficiency"][:] = 1.0
    out["split_k"][:] = 1.0
    out["parallel_fraction"][:] = 1.0
    for (op, dt), idx in kernels.groupby(["op", "dtype"], sort=False).indices.items():
        g = kernels.iloc[idx]
        # GEMMs may use matrix units: tensor cores for fp16/bf16/fp8, AMD's fp32 MFMA for fp32.
        # NVIDIA fp32 stays on CUDA cores (TF32 off, as NeuSight measured): its catalog entries
        # carry no `fp32_tc` peak.
        matrix = op in GEMM_OPS
        flops = g["flops"].to_numpy(np.float64)
        nbytes = g["bytes"].to_numpy(np.float64)
        op_class = g["op_class"].iloc[0]
        floor = floors[idx]
        out["roofline_ms"][idx] = roofline_ms(flops, nbytes, device, dt, matrix)
        out["floor_ms"][idx] = floor
        out["l2_hit"][idx] = l2_hit_fraction(nbytes, device)
        if op in GEMM_OPS:
            terms = gemm_compute(g["B"].to_numpy(), g["M"].to_numpy(), g["K"].to_numpy(), g["N"].to_numpy(),
                                 device, dt, matrix, batched=op == "bmm", linear_form=linear_form(g),
                                 transposed=transposed_form(g), constants=constants)
            mem = memory_time_ms(nbytes, device)
            compute = terms.compute_ms / library_efficiency(device.vendor, op, constants)
            out["tiles"][idx] = terms.tiles
            out["waves"][idx] = terms.waves
            out["wave_efficiency"][idx] = terms.wave_efficiency
            out["tile_m"][idx] = terms.tile_m
            out["tile_n"][idx] = terms.tile_n
            out["tile_efficiency"][idx] = terms.tile_efficiency
            out["split_k"][idx] = terms.split_k
        elif op in FUSED_OPS:  # PyTorch SDPA (`hybridperf.priors.attention`): flash in half precision
            compute = sdpa_ms(g["B"].to_numpy(np.float64), g["M"].to_numpy(np.float64), g["H"].to_numpy(np.float64),
                              g["H"].to_numpy(np.float64), g["K"].to_numpy(np.float64), device, dt, causal=False,
                              backward=op == "attention_bw", kv_seq=g["N"].to_numpy(np.float64),
                              backend="flash" if dt in ("fp16", "bf16") else "efficient")
            mem = np.zeros(len(idx))
        else:
            frac = 1.0
            if op_class not in ("softmax", "layernorm"):
                mem = memory_time_ms(nbytes, device)
                opmath = flops if op not in ELEMENTWISE_OPMATH_COST else \
                    g["B"].to_numpy(np.float64) * g["H"].to_numpy(np.float64) * ELEMENTWISE_OPMATH_COST[op]
                compute = opmath / sustained_flops(device, "fp32") * 1e3
            else:
                H = g["H"].to_numpy(np.float64)
                row_bytes = H * DTYPE_BYTES[dt]
                frac = row_parallel_fraction(g["B"].to_numpy(np.float64), row_bytes, device)
                # parameters (LayerNorm's gamma and beta) are read once, whatever the row parallelism
                params = 2.0 * row_bytes if op_class == "layernorm" else 0.0
                current = hosts[idx] == "current"
                rereads, out["reread_hit"][idx] = reread_time_ms(
                    op_class, H, nbytes - params, nbytes, DTYPE_BYTES[dt], device, frac, current,
                    split_l2_share(constants.reread_l2_mb, device.l2_mb))
                mem = memory_time_ms(nbytes - params, device, working_set_bytes=nbytes, parallel_fraction=frac) \
                    + memory_time_ms(params, device) + rereads
                # the rows stream no faster than the SMs can take them (a term of the memory time, so that
                # compute_ms stays the FLOP term the residual models read on every GPU alike)
                mem = np.maximum(mem, row_issue_ms(op_class, g["B"].to_numpy(np.float64), H, DTYPE_BYTES[dt],
                                                   device, current))
                compute = flops / sustained_flops(device, dt) * 1e3
            out["parallel_fraction"][idx] = frac
        out["compute_ms"][idx] = compute
        out["memory_ms"][idx] = mem
        out["prior_ms"][idx] = floor + np.maximum(compute, mem)
    return pd.DataFrame(out, index=kernels.index)


def prior_ms(kernels: pd.DataFrame, device: DeviceSpec, timing: str | None = None,
             constants: PriorConstants = DEFAULT_CONSTANTS) -> np.ndarray:
    """Best-prior latency (ms) for each row of a canonical kernel table."""
    return kernel_prior_terms(kernels, device, timing, constants)["prior_ms"].to_numpy()


def host_floor_scale(measured: pd.DataFrame, device: DeviceSpec, min_floor_share: float = 0.25,
                     min_class_rows: int = 5, constants: PriorConstants = DEFAULT_CONSTANTS) -> tuple[dict, int]:
    """The measuring host's per-call floor as a share of NeuSight's, in `launch.HOST_FLOOR_SCALE`'s
    form ({"all": share, op class: share...}), and the number of kernels it was read on: the median, over
    the call-timed rows of a canonical table of measured kernels whose NeuSight floor is at least
    `min_floor_share` of their prior, of (measured - the prior's body) / NeuSight's floor; per op class
    where `min_class_rows` of them are. {} when no row is floor-bound."""
    rows = measured.assign(host="neusight")
    terms = kernel_prior_terms(rows, device, constants=constants)
    floor, prior = terms["floor_ms"].to_numpy(), terms["prior_ms"].to_numpy()
    m = (row_timing(rows).to_numpy() == "call") & (floor >= min_floor_share * prior)
    implied = pd.Series((rows["latency_ms"].to_numpy(np.float64)[m] - (prior - floor)[m]) / floor[m])
    if implied.empty:
        return {}, 0
    by_class = implied.groupby(rows["op_class"].to_numpy()[m])
    shares = {oc: float(v) for oc, v in by_class.median().items() if by_class.size()[oc] >= min_class_rows}
    return {"all": float(implied.median()), **shares}, int(m.sum())


def host_floor_note(measured: pd.DataFrame, device: DeviceSpec, min_kernels: int = 1,
                    constants: PriorConstants = DEFAULT_CONSTANTS) -> str | None:
    """The measuring host's floor shares (`host_floor_scale`) against the ones predictions assume, in one
    line; None when fewer than `min_kernels` of the measured kernels are floor-bound."""
    shares, n = host_floor_scale(measured, device, constants=constants)
    if n < max(min_kernels, 1):
        return None
    return (f"per-call floor of this host: {describe_floor_shares(shares)} of NeuSight's ({n} floor-bound kernels); "
            f"predictions assume {describe_floor_shares(HOST_FLOOR_SCALE['current'])} (`--host current`)")
