"""Fused mixture-of-experts layers (routing, grouped GEMMs of the experts, the weighted combine), as
aiconfigurator's `moe` tables time them: `num_tokens` tokens of width `hidden` routed to `topk` of
`num_experts` experts of intermediate width `inter`, sharded `tp` ways inside each expert and `ep`
ways across experts, weights in `moe_dtype`; the time is EP rank 0's.

The physics: the token-expert pairs rank 0 computes (balanced: an even share; `power_law_<alpha>`: the
collector's draw of expert loads, whose heaviest rank it swaps into rank 0, `moe_routing`), each local
expert's rows padded to the grouped GEMM's tile, the experts' weights read once per active expert (decode is bound
by them; the collector replays the same layer, so experts that fit in L2 are served from it), the gated MLP (up and
gate, then down; `nongated` kernels have no gate; each tile's pipeline fill and drain weighs on short-k experts,
`TILE_FILL_K`), a routing/permute pass over the activations, and, where the kernels permute and finalize in kernels
of their own (`PERMUTED`), those passes' bytes at the rate a streaming kernel draws (`SM_INFLIGHT_BW`), before and
after the math. Efficiencies and floors are measured data (`KernelConstants`), passed explicitly.

Kernel time only (no host floor, no all-to-all). Vectorised over numpy arrays.
"""
from __future__ import annotations

import re

import numpy as np

from hybridperf.devices import DeviceSpec
from hybridperf.priors.llm_gemm import (GEMM_DTYPES, L2_BANDWIDTH_RATIO, QUANTIZED_ACTIVATION, SCALE_BYTES,
                                        KernelConstants, combine_ms, device_dtype, fitted_constants, matrix_peak,
                                        rate_capped, replay_capacity, spec_matrix_peak, version_tuple, warp_mma_peak)
from hybridperf.priors.moe_routing import MAX_EXPERTS, balanced_rank0_tokens, expert_tile, skewed_rank0

#: rows of the grouped GEMM's tile each local expert's tokens are padded to: the kernels pick the
#: smallest power of two covering an expert's tokens within these bounds (Triton's fused MoE picks
#: BLOCK_SIZE_M 16-128 by tokens per expert; CUTLASS grouped GEMMs likewise)
EXPERT_TILE_M = (16.0, 128.0)
#: kernels a fused MoE layer launches besides its two grouped GEMMs (top-k, permute, finalize)
ROUTING_KERNELS = 3.0
#: kernel families whose combine sums a [tokens, topk, hidden] buffer (Triton's fused_moe then moe_sum,
#: PyTorch's reference path, Marlin's); the others fuse the weighted sum into their last GEMM or finalize
#: permuted rows. Held out, the prior's error grew with the bytes of that buffer over the prior's time.
MATERIALIZED_COMBINE = ("triton", "torch", "marlin")
#: kernel families whose grouped GEMMs write zero rows for the pairs of other EP ranks' experts (Triton's
#: fused_moe: `write_zeros_to_output`), so their intermediate buffers cost every pair
ZERO_FILLED = ("triton",)
#: kernel families built on warp-level MMA (`llm_gemm.warp_mma_peak`): Marlin's, and Triton's fused MoE,
#: whose 16-64-row expert tiles are below the 64 rows of a Hopper warpgroup MMA
WARP_MMA = ("triton", "marlin")
#: SGLang's MoE collector before 0.5.14 timed EP rank 0 on the tokens with a pair on it and kept all their
#: top-k pairs (the other ranks' experts' ids clamped to local expert 0), so rank 0 computes tokens x topk
#: pairs: its 0.5.10 tables run 8192 tokens in the same time from EP 1 to EP 8 (balanced routing gives every
#: token a pair on each rank of 32 experts or more) where 0.5.14's halve with each doubling
WHOLE_TOKENS_BEFORE = {"sglang": (0, 5, 14)}


#: kernel families that run an expand (permute) kernel before the grouped GEMMs and a finalize (unpermute and
#: weighted top-k sum) after them: TensorRT-LLM's CUTLASS MoE (and FlashInfer's CUTLASS experts), its nongated
#: kernels (`aic_kernels.kernel_family` "trtllm": no other MoE source falls in it, trtllm-gen's name FlashInfer first)
#: and DeepGEMM's. Triton's and Marlin's gather rows inside the GEMM, trtllm-gen fuses the gather.
PERMUTED = ("cutlass", "deepgemm", "trtllm")
#: DRAM bandwidth one SM's simple streaming passes (permute, finalize, activation quantization) draw: the bytes they
#: keep in flight per SM (~16-20 KB) over DRAM latency (~0.7-0.8 us), an estimate. By Little's law such a pass takes
#: 1 + bandwidth / (SMs x this) times its bytes' DRAM time: 1.2x on L40S, 2.0x on H100, 3.1x on B200, whose
#: CUTLASS MoE held out was priced up to 2.6x fast at large token counts and narrow experts without it
SM_INFLIGHT_BW = 25e9


def computes_remote_pairs(framework: str | None, version: str | None) -> bool:
    """Whether `framework`'s MoE tables of `version` price rank 0 with every pair of its tokens
    (`WHOLE_TOKENS_BEFORE`); a row without a version is taken as a current collector's."""
    v, cut = version_tuple(version), WHOLE_TOKENS_BEFORE.get(str(framework or "").strip().lower())
    return bool(cut and v and v < cut)


#: k-elements of main-loop time a grouped-GEMM tile spends filling and draining its pipeline (the few stages
#: of 64-128 that CUTLASS's and Triton's MoE kernels prefetch); a design figure, not fitted
TILE_FILL_K = 256.0


def _power_law_moments(alpha, lo, hi, order: int) -> np.ndarray:
    """E[X^order] of a power law x^-alpha truncated to [lo, hi]."""
    a = 1.0 - alpha
    c = a / (hi ** a - lo ** a)
    p = order + a
    safe = np.where(np.abs(p) < 1e-6, 1.0, p)
    return np.where(np.abs(p) < 1e-6, c * np.log(hi / lo), c * (hi ** p - lo ** p) / safe)


def rank0_share(tokens, topk, experts, ep, alpha) -> np.ndarray:
    """Expected share of all token-expert pairs that EP rank 0 gets: 1/ep when balanced (alpha 0), else
    the expected largest of `ep` sums of experts/ep power-law loads over the expected total (normal
    approximation of each sum, sqrt(2 ln ep) for the largest of ep). Used where `moe_routing` does not
    draw: fewer than one token, sizes that are not whole numbers, experts not divisible by ep or more
    than `moe_routing.MAX_EXPERTS`."""
    t, k, e, ep, alpha = (np.asarray(x, dtype=np.float64) for x in (tokens, topk, experts, ep, alpha))
    skew = alpha > 0
    a = np.where(skew, np.where(np.abs(alpha - 1.0) < 1e-3, 1.001, alpha), 1.5)
    many = t * k > e
    lo = np.where(many, 1.0, 0.01)
    hi = np.where(many, np.maximum(0.8 * t, 1.5), 2.0)
    mu = _power_law_moments(a, lo, hi, 1)
    var = np.maximum(_power_law_moments(a, lo, hi, 2) - mu ** 2, 0.0)
    per_rank = e / ep
    z = np.sqrt(2.0 * np.log(np.maximum(ep, 1.0)))
    share = (per_rank * mu + z * np.sqrt(var * per_rank)) / (e * mu)
    return np.where(skew & (ep > 1), np.clip(share, 1.0 / ep, 1.0), 1.0 / ep)


#: alpha of the steepest power-law routing priced (the collector's tables use 1.01 and 1.2)
MAX_ALPHA = 20.0
#: alpha of a power law named without one (`power_law`, `power_law_eplb`), as aiconfigurator reads that name
DEFAULT_ALPHA = 1.2


def distribution_alpha(distribution) -> np.ndarray:
    """`balanced` -> 0, `power_law_<alpha>` -> alpha (`power_law` -> DEFAULT_ALPHA), per row; an EPLB-balanced
    power law (`power_law_<alpha>_eplb`: TensorRT-LLM's large-EP tables) spreads its load over the ranks -> 0.
    ValueError on any other name, or a power law whose alpha is not a number in (0, MAX_ALPHA]: a routing the
    prior does not know would be priced as balanced without a word."""
    shape = np.shape(np.asarray(distribution, dtype=object))
    d = np.atleast_1d(np.asarray(distribution, dtype=object)).ravel()
    out = np.zeros(d.shape)
    for name in set(d.tolist()):
        s = str(name).strip()
        if s == "balanced":
            continue
        law = re.fullmatch(r"power_law(?:_(\d+(?:\.\d*)?|\.\d+))?(_eplb)?", s)
        alpha = float(law.group(1) or DEFAULT_ALPHA) if law else float("nan")
        if not 0.0 < alpha <= MAX_ALPHA:
            raise ValueError(f"distribution {s!r}: expected balanced, power_law_<alpha> or power_law_<alpha>_eplb "
                             f"with alpha in (0, {MAX_ALPHA:g}]")
        out[d == name] = 0.0 if s.endswith("_eplb") else alpha
    return out.reshape(shape)


def _l2_resident(footprint, device: DeviceSpec) -> np.ndarray:
    """Share of a footprint read back from L2 while it is still there: all of it while it fits one partition
    (`llm_gemm.replay_capacity`), falling as (capacity / footprint)^4 beyond."""
    return np.minimum(replay_capacity(device) / np.maximum(footprint, 1.0), 1.0) ** 4


def _l2_discount(hit) -> np.ndarray:
    """DRAM-time share of bytes whose `hit` share L2 serves at `L2_BANDWIDTH_RATIO` times DRAM's rate."""
    return 1.0 - hit * (1.0 - 1.0 / L2_BANDWIDTH_RATIO)


def moe_parts(num_tokens, hidden, inter, topk, num_experts, device: DeviceSpec, moe_dtype: str = "bfloat16",
              tp=1, ep=1, distribution="balanced", gated=True, replayed=True, combine=False,
              zero_fill=False, whole_tokens=False, warp_mma=False, permuted=False) -> dict:
    """Ideal times (s) at spec rates of one MoE layer on rank 0 (`compute`, `memory`, `quant`, `kernels`)
    and the quantities the residual model reads (`routed`, `padded`, `active`, `flops`, `bytes`).
    `combine`: the kernels materialise every token's top-k outputs and sum them (`MATERIALIZED_COMBINE`),
    so the combine reads tokens x topk rows even of pairs whose experts live on other EP ranks;
    `zero_fill`: they also fill those pairs' rows of their intermediate buffers (`ZERO_FILLED`).
    `whole_tokens`: rank 0 computes all top-k pairs of every token with a pair on it, the other ranks' pairs on one
    local expert (`computes_remote_pairs`). `permuted`: the kernels permute every pair's row into expert order and
    finalize the outputs in kernels of their own (`PERMUTED`), one before the grouped GEMMs and one after: their
    bytes, at the streaming rate of `SM_INFLIGHT_BW`, join `quant`, the time added to the math's rather than
    overlapping it. The activations' quantization runs at that rate whatever `permuted` says. `dtype`: the one the
    kernels run on this device (`llm_gemm.device_dtype`: NVFP4 experts run weight-only on a GPU without FP4
    units)."""
    moe_dtype = device_dtype(moe_dtype, device)
    t, h, f, k, e, tp, ep = (np.asarray(x, dtype=np.float64)
                             for x in (num_tokens, hidden, inter, topk, num_experts, tp, ep))
    a_bytes, w_bytes, peak_key = GEMM_DTYPES.get(moe_dtype, GEMM_DTYPES["bfloat16"])
    w_bytes = w_bytes + SCALE_BYTES.get(moe_dtype, 0.0)
    gated = np.asarray(gated, dtype=bool)
    mats = np.where(gated, 3.0, 2.0)
    f_local = f / tp
    local = np.maximum(e / ep, 1.0)
    alpha = distribution_alpha(distribution)
    routed = np.minimum(rank0_share(t, k, e, ep, alpha) * t * k, local * t)
    active = np.minimum(local, np.maximum(routed, 1.0))
    per_expert = routed / active
    tile = expert_tile(per_expert, EXPERT_TILE_M)
    padded = active * np.ceil(per_expert / tile) * tile
    # skewed routing: rank 0's experts as the collector draws them (moe_routing), where it can draw
    whole_number = (e == np.floor(e)) & (ep == np.floor(ep)) & (k == np.floor(k))
    drawable = whole_number & (np.mod(e, np.maximum(ep, 1.0)) == 0) & (t >= 1) & (k >= 1) & (e <= MAX_EXPERTS)
    drawn = (alpha > 0) & drawable
    whole = np.asarray(whole_tokens, dtype=bool) & (ep > 1) & drawable
    sk = {}
    if np.any(drawn):
        sk = skewed_rank0(np.where(drawn, t, 1.0), k, e, ep, np.where(drawn, alpha, 0.0), EXPERT_TILE_M,
                          touching=bool(np.any(whole & drawn)))
        routed, active, padded = (np.where(drawn, sk[key], v) for key, v in
                                  (("routed", routed), ("active", active), ("padded", padded)))
    if np.any(whole):
        bt, bk, be, bep, whole, drawn = np.broadcast_arrays(t, k, e, ep, whole, drawn)
        touching = bt.copy()
        need = whole & ~drawn
        if need.any():
            touching[need] = balanced_rank0_tokens(bt[need], bk[need], be[need], bep[need])
        if sk:
            touching = np.where(drawn, sk["tokens"], touching)
        remote = np.clip(touching * k - routed, 0.0, None)
        tile = expert_tile(routed / active, EXPERT_TILE_M)
        padded = np.where(whole, padded + np.ceil(remote / tile) * tile, padded)
        routed = np.where(whole, routed + remote, routed)
        t = np.where(whole, touching, t)
    flops = 2.0 * padded * h * mats * f_local
    bw = device.mem_bw_gbs * 1e9
    peak = warp_mma_peak(device, peak_key) if warp_mma else matrix_peak(device, peak_key)
    weights = active * mats * h * f_local * w_bytes
    # Triton's fused MoE writes zeros for the pairs whose experts live on other EP ranks into its
    # [tokens x topk, width] buffers, and runs its activation over every row of them
    pairs = np.where(zero_fill, np.maximum(t * k, routed), routed)
    acts = pairs * (h + (mats - 1.0) * f_local) * a_bytes * 2.0 + t * h * 2.0 * 2.0
    acts = acts + np.where(combine, t * k * h * 2.0, 0.0)
    # streaming passes keep few bytes in flight per SM: they draw DRAM at 1 / `stream` of its rate (Little's law)
    stream = 1.0 + bw / (device.num_sms * SM_INFLIGHT_BW)
    quant = (t * h * (2.0 + a_bytes) / bw * stream) if moe_dtype in QUANTIZED_ACTIVATION else np.zeros_like(t)
    # permute reads each pair's source row (bf16) and writes it in expert order, finalize reads each pair's output
    # row back; L2 holds the permuted buffer between them while it fits
    permuted_bytes = np.where(permuted, routed * h * (2.0 + a_bytes + 2.0), 0.0)
    # replayed back to back on the same weights (no copies cycled), experts that fit in one L2 partition stay there
    hit = _l2_resident(weights, device) if replayed else 0.0
    dram = weights * _l2_discount(hit) + acts
    quant = quant + permuted_bytes * _l2_discount(_l2_resident(routed * h * 2.0, device)) * stream / bw
    # each tile pays its pipeline's fill and drain on top of k: short-k experts (the down projection of a
    # narrow or TP-split expert) run their tensor cores a smaller share of the time
    fill = ((mats - 1.0) * (1.0 + TILE_FILL_K / h) + (1.0 + TILE_FILL_K / f_local)) / mats
    return {"compute": flops * fill / peak, "memory": dram / bw, "quant": quant, "clock_mhz": device.boost_clock_mhz,
            "arch": device.kernel_arch, "kernels": 2.0 + ROUTING_KERNELS, "routed": routed, "padded": padded,
            "active": active, "flops": flops, "bytes": weights + acts + permuted_bytes, "weight_bytes": weights,
            "peak": peak, "spec_peak": spec_matrix_peak(device, peak_key), "dtype": moe_dtype}


def moe_ms(num_tokens, hidden, inter, topk, num_experts, device: DeviceSpec, moe_dtype: str = "bfloat16",
           tp=1, ep=1, distribution: str = "balanced", kernel_source: str | None = None,
           constants: KernelConstants | None = None, replayed: bool = True, gated: bool = True,
           max_share: float | None = None) -> np.ndarray:
    """Kernel time (ms) of one MoE layer's experts on EP rank 0 (gated MLP: up+gate, then down; `gated`
    False or a `kernel_source` naming a non-gated kernel drops the gate). `distribution` may be one name or one
    per row; `constants` default to those fitted on aiconfigurator's four shared systems; `replayed` as in
    `llm_gemm.gemm_parts` (False: a model's forward pass, experts' weights from DRAM); `max_share`:
    `llm_gemm.rate_capped`."""
    gated = gated and "nongated" not in str(kernel_source or "")
    parts = moe_parts(num_tokens, hidden, inter, topk, num_experts, device, moe_dtype, tp, ep,
                      np.broadcast_to(np.asarray(distribution, dtype=object), np.shape(np.asarray(num_tokens))),
                      gated, replayed)
    constants = fitted_constants()["moe"] if constants is None else constants
    return combine_ms(rate_capped(parts, max_share), parts["dtype"], constants, kernel_source)
