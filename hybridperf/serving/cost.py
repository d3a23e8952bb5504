"""GPU time of one engine iteration on one GPU, from the project's kernel priors and collective model.

An iteration runs `n` tokens (prefill chunks plus one token per decoding sequence) through one pipeline
stage. Its time splits into parts that depend on `n` alone (GEMMs, fused MoE, norms/activations/RoPE/
quantize, the TP all-reduces, the experts' all-to-all under attention data-parallel and a pipeline stage's hand-off
to the next: `serving/comm.py`), tabulated
once on a grid of `n` and interpolated; decode attention, linear in the keys read (sparse MLA: per query token,
`priors.mla.sparse_mla_ms`, and the indexer's top-k selection); prefill attention per chunk; and the LM head plus
sampler per sampled token. The GEMMs, norms, activations, fused MoE, decode attention, DSA's index scan and the
sampler kernels each take at least a launch-and-drain floor (`KERNEL_FLOOR_KCYCLES`), much of a small decode batch's
iteration (prefill attention carries none; DeepSeek-V4's are in `compressed.module_ms`, linear attention's in
`priors.linear_attention`, whose prefill runs an iteration's chunks in one launch).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from hybridperf.devices import DeviceSpec, NodeSpec
from hybridperf.errors import InputError
from hybridperf.priors import linear_attention
from hybridperf.priors.attention import CONSTANTS as ATTENTION_CONSTANTS
from hybridperf.priors.attention import AttentionConstants, context_attention_ms, generation_attention_ms
from hybridperf.priors.llm_gemm import GEMM_DTYPES, ROOFLINE, device_dtype, gemm_ms
from hybridperf.priors.memory import memory_time_ms
from hybridperf.priors.mla import CONSTANTS as MLA_CONSTANTS
from hybridperf.priors.mla import (SPARSE_CONSTANTS, MlaConstants, SparseMlaConstants, index_topk_ms, mla_decode_ms,
                                   sparse_mla_ms, topk_work)
from hybridperf.priors.moe import ROUTING_KERNELS, moe_ms
from hybridperf.serving.arch import Arch
from hybridperf.serving.comm import StageComm
from hybridperf.serving.compressed import HC_KERNELS, indexer_ms
from hybridperf.serving.engines import EngineDefaults

#: CLI precision -> (GEMM dtype of `llm_gemm.GEMM_DTYPES`, bytes per weight element)
PRECISIONS = {"bf16": ("bfloat16", 2.0), "fp16": ("float16", 2.0), "fp8": ("fp8", 1.0), "fp4": ("nvfp4", 0.5625),
              "int8": ("sq", 1.0), "int4": ("int4_wo", 0.5625)}
#: aiconfigurator's `gemm_quant_mode` / `moe_quant_mode` -> CLI precision
QUANT_MODES = {"float16": "fp16", "bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4",
               "int4_wo": "int4", "w4afp8": "int4", "mxfp4": "fp4",
               # modes no run in ../shared uses (aiconfigurator's sdk/common.py): fp8 variants as fp8, int8
               # (SmoothQuant W8A8; weight-only int8 by its weight bytes) as int8, 4-bit weights over bf16
               # activations (NVFP4 dequantized on Hopper, MXFP4) as int4, MXFP4 x MXFP8 as fp4
               "fp8_static": "fp8", "fp8_ootb": "fp8", "sq": "int8", "int8_wo": "int8", "nvfp4_wo": "int4",
               "w4a16_nvfp4": "int4", "w4a16_mxfp4": "int4", "w4a16_mxfp4_cutlass": "int4",
               "w4a8_mxfp4_mxfp8": "fp4", "w4a8_mxfp4_mxfp8_trtllm": "fp4"}


#: bytes per cached element of each KV-cache dtype
KV_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}


def default_kv_dtype(precision: str) -> str:
    """The KV-cache dtype an engine runs a checkpoint of `precision` with when not told: FP8 for FP8/FP4
    checkpoints (quantised checkpoints carry KV scales, as aiconfigurator infers from them), else BF16. With
    a BF16 cache for them, silicon runs that measured no queueing were priced as waiting for KV space."""
    return "fp8" if precision in ("fp8", "fp4") else "bf16"


#: elementwise passes over the hidden state per layer (2 RMSNorms read+write, 2 residual adds, activation
#: in/out over the MLP width counted separately, RoPE on q/k, per-token activation quantisation)
ELEMENTWISE_PASSES = 12
#: GEMM and MoE at the spec-sheet roofline, as the engine calibration was fitted: with the constants
#: fitted on aiconfigurator's kernel tables the held-out TPOT error rises from 23.6% to 43.9%
#: (`experiments/serving/serving_silicon.py`).
#: The MoE prior's combine term (`priors.moe.MATERIALIZED_COMBINE`) is left out here for the same reason.
KERNEL_CONSTANTS = ROOFLINE
#: the largest share of its matrix peak a GEMM reached in aiconfigurator's tables (bf16 on A100, H100, B200: 0.93-0.97)
GEMM_PEAK_SHARE = 0.97
#: the highest share of its spec-sheet matrix peak a GEMM or MoE of the iteration runs at before calibration:
#: GEMM_PEAK_SHARE x the calibration's prefill scale (0.883, `calibration.json`), so that no calibrated prefill GEMM
#: beats GEMM_PEAK_SHARE. The priors of the GPUs the scale was fitted on (H100, B200) stay about below it (a bf16
#: 8192^3 GEMM at 0.85 and 0.73; H100's largest tiles reach 0.875); on a GPU whose power budget does not bind (MI325X,
#: MI355X, RTX PRO 6000, H20, GB300, A100 SXM) they reach 0.91-1.0, which the scale took past 0.97.
MATRIX_SHARE_CAP = 0.857
#: a kernel's floor inside a CUDA graph, in thousands of GPU cycles at the boost clock (launch and drain are
#: clocked work, `llm_gemm.KernelConstants`): aiconfigurator's A100 and L40S GEMM tables, systems serving is
#: not scored on, fit 3.8 and 4.1. The iteration's kernels (module docstring) take at least this long.
KERNEL_FLOOR_KCYCLES = 4.0
#: elementwise kernels per layer over which its ELEMENTWISE_PASSES spread (two fused residual-add norms, RoPE)
ELEMENTWISE_KERNELS = 3
#: kernels of the sampler (logits softmax, top-k/top-p, the draw)
SAMPLER_KERNELS = 3
GRID_POINTS = 64
GRID_MAX_TOKENS = 1 << 20


def kernel_floor_ms(device: DeviceSpec) -> float:
    """KERNEL_FLOOR_KCYCLES at `device`'s boost clock (0 where the catalog gives no clock)."""
    return KERNEL_FLOOR_KCYCLES / device.boost_clock_mhz if device.boost_clock_mhz > 0 else 0.0


def _floored(t, kernels, device: DeviceSpec):
    """`kernels` kernels sharing `t` ms of work evenly, each at least the kernel floor."""
    return np.maximum(t, kernels * kernel_floor_ms(device))


def _gemm(m, n, k, dtype: str, device: DeviceSpec):
    """A GEMM of the iteration: KERNEL_CONSTANTS up to MATRIX_SHARE_CAP, its weight read from DRAM (each layer's
    weights once per iteration; the kernel tables' replay keeps small ones in L2), at least the kernel floor."""
    return _floored(gemm_ms(m, n, k, dtype, device, constants=KERNEL_CONSTANTS, replayed=False,
                            max_share=MATRIX_SHARE_CAP), 1, device)


def _bmm(batch, m, n, k, dtype: str, device: DeviceSpec):
    """`batch` independent (m x k) @ (k x n) products in one batched launch (the engines' torch.bmm over heads): their
    tiles share the SMs as one GEMM `batch` times as wide, plus the other products' own inputs."""
    batch = np.maximum(batch, 1.0)
    a_bytes = GEMM_DTYPES.get(dtype, GEMM_DTYPES["bfloat16"])[0]
    return _gemm(m, batch * n, k, dtype, device) + memory_time_ms((batch - 1.0) * m * k * a_bytes, device)


def half_dtype(device: DeviceSpec) -> str:
    """The 16-bit dtype the engines run bf16 weights and activations in: float16 where `device` has no bf16 matrix
    units (T4, V100), else bfloat16."""
    return "bfloat16" if device.has_matrix_units("bf16") else "float16"


def gemm_dtype(precision: str, device: DeviceSpec) -> str:
    """GEMM dtype of a weight precision on `device`: bf16 as `half_dtype`; FP4 or FP8 weights on a GPU without
    those tensor cores run weight-only kernels (`llm_gemm.device_dtype`)."""
    dtype = PRECISIONS[precision][0]
    return device_dtype(half_dtype(device) if dtype == "bfloat16" else dtype, device)


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding (MTP or an EAGLE-style draft head): `tokens` drafted per step, each accepted with
    probability `acceptance` given the ones before it; a step then emits (1 - a^(k+1)) / (1 - a) tokens."""

    tokens: int = 0
    acceptance: float = 0.7

    def check(self) -> None:
        if not isinstance(self.tokens, int) or isinstance(self.tokens, bool) or not 0 <= self.tokens <= 16:
            raise InputError(f"speculative tokens must be an integer in [0, 16], got {self.tokens!r}")
        if not isinstance(self.acceptance, (int, float)) or not 0.0 < self.acceptance < 1.0:
            raise InputError(f"acceptance must be in (0, 1), got {self.acceptance!r}")

    @property
    def tokens_per_step(self) -> float | int:
        a, k = self.acceptance, self.tokens
        return (1.0 - a ** (k + 1)) / (1.0 - a) if k else 1


@dataclass(frozen=True)
class Parallel:
    """How one model instance is split: `tp` attention tensor-parallel, `adp` attention data-parallel
    ranks, `pp` pipeline stages, the experts over `moe_tp` x `moe_ep` GPUs (tp * adp == moe_tp * moe_ep)."""

    tp: int = 1
    pp: int = 1
    adp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.adp * self.pp

    def check(self, arch: Arch) -> None:
        for k in ("tp", "pp", "adp", "moe_tp", "moe_ep"):
            if getattr(self, k) < 1:
                raise InputError(f"{k} must be >= 1, got {getattr(self, k)}")
        if arch.experts and self.moe_tp * self.moe_ep != self.tp * self.adp:
            raise InputError(f"the experts' GPUs (expert-TP {self.moe_tp} x --ep {self.moe_ep}) must be the "
                             f"attention's (--tp x --attention-dp = {self.tp * self.adp}): --ep must divide "
                             f"--tp x --attention-dp")
        for n, what in ((arch.heads, "attention heads"), (arch.sharded_linear_heads, "linear-attention key heads")):
            if n % self.tp:
                raise InputError(f"{n} {what} do not split {self.tp} ways")
        if self.pp > arch.layers:
            raise InputError(f"pp = {self.pp} exceeds the {arch.layers} layers")
        if arch.experts and arch.experts % self.moe_ep:
            raise InputError(f"{arch.experts} experts do not split {self.moe_ep} ways")


@dataclass(frozen=True)
class KernelModels:
    """The fitted models an iteration is priced with besides the roofline GEMMs: the collective model and the
    attention prior's, MLA decode's, sparse MLA's and linear attention's constants; the shipped ones, or in a
    held-out evaluation ones fitted without the scored system's tables (`experiments/serving/fold_models.py`)."""

    collectives: object
    attention: AttentionConstants = ATTENTION_CONSTANTS
    mla: MlaConstants = MLA_CONSTANTS
    sparse_mla: SparseMlaConstants = SPARSE_CONSTANTS
    linear: dict = field(default_factory=lambda: dict(linear_attention.SHIPPED))  # chunked-rule family -> constants


class StepCost:
    """Per-iteration GPU time (ms) of one GPU of one pipeline stage; see the module docstring."""

    def __init__(self, arch: Arch, device: DeviceSpec, node: NodeSpec, engine: EngineDefaults, par: Parallel,
                 precision: str, moe_precision: str, kv_bytes: float, models: KernelModels, max_tokens: int,
                 spec: "Speculation | None" = None):
        self.arch, self.device, self.node, self.engine, self.par = arch, device, node, engine, par
        self.gemm = gemm_dtype(precision, self.device)
        self.half = half_dtype(self.device)  # the router's, MLA's absorbed products' and the LM head's
        self.moe = gemm_dtype(moe_precision, self.device)
        self.kv_bytes = kv_bytes
        self.kv_dtype = "fp8" if kv_bytes <= 1 else "bf16"
        self.models = models
        self.comm = StageComm(arch, node, engine.name, par, models.collectives)
        self.stage_layers = arch.layers / par.pp
        self.spec = spec or Speculation()
        self.prefill_source, self.decode_source = (src or None for src in engine.attention_sources(device.kernel_arch))
        # one grid for every run (not scaled to max_tokens), so that two schedules of the same iterations
        # (offline --batch and a lock-step --concurrency) interpolate the same values
        grid = np.unique(np.round(np.geomspace(1, max(max_tokens, GRID_MAX_TOKENS), GRID_POINTS)))
        self._grid = grid.tolist()
        layers = self._token_ms(grid)
        self._layers = layers.tolist()  # the stage's layers alone, as a draft pass runs one
        self._dense = (layers + self.comm.stage_send(grid)).tolist()  # and the hand-off to the next stage
        self._kv_ms = self._decode_attn_per_key()
        # a decode step's attention kernels on this stage, each at least the floor
        self._attn_floor_ms = arch.kv_layers * kernel_floor_ms(device) / par.pp
        self.linear = models.linear[linear_attention.family(engine.name, device)]
        # DSA's indexer scores every cached key (one query per sequence in decode), whatever `max_keys` attends
        self._index_ms = indexer_ms(1e6, 1e6, arch.index_heads, arch.index_dim, device) / 1e6 \
            * arch.kv_layers / par.pp if arch.index_heads else 0.0
        # a linear-attention model holds each sequence's recurrent state in the cache's memory while it runs:
        # KV-cache tokens' worth per sequence
        per_token = kv_bytes_per_token(arch, par, kv_bytes)
        held = arch.linear_state_bytes(par.tp) + arch.window_elems(par.tp) * kv_bytes \
            + (arch.compressed.window_bytes(kv_bytes) if arch.compressed else 0.0)
        self.state_tokens = int(np.ceil(held / par.pp / per_token)) if per_token else 0
        self._prefill_cache: dict = {}

    # -- parts that depend on the token count only -------------------------------------------------
    def _token_ms(self, n: np.ndarray) -> np.ndarray:
        a, p, dev = self.arch, self.par, self.device
        h, tp, g = a.hidden, p.tp, self.gemm
        if a.mla:
            heads = a.heads / tp
            q = (_gemm(n, a.q_lora_rank, h, g, dev) + _gemm(n, heads * a.head_dim, a.q_lora_rank, g, dev)) \
                if a.q_lora_rank else _gemm(n, heads * a.head_dim, h, g, dev)
            kv = _gemm(n, a.kv_lora_rank + a.rope_dim, h, g, dev)
            # absorbed decode: q_nope -> latent and latent -> v per head (batched GEMMs over the heads)
            absorb = _bmm(heads, n, a.kv_lora_rank, a.head_dim - a.rope_dim, self.half, dev) \
                + _bmm(heads, n, a.v_head_dim, a.kv_lora_rank, self.half, dev)
            attn = q + kv + absorb + _gemm(n, h, heads * a.v_head_dim, g, dev)
            if a.index_heads:  # DSA's indexer projections, on every TP rank
                attn = attn + _gemm(n, a.index_heads * a.index_dim, a.q_lora_rank or h, g, dev) \
                    + _gemm(n, a.index_dim + a.index_heads, h, g, dev)
            mix = attn * a.kv_layers
        elif a.compressed:
            mix = a.compressed.projections_ms(n, h, a.heads, tp, g, dev, _gemm, _bmm) \
                + a.compressed.module_ms(n, h, a.heads / tp, dev, kernel_floor_ms(dev))
        else:
            mix = 0.0
            for _, layers, (kvh, hd, vd, tensors) in a.attention_kinds():
                if layers:
                    qkv = (a.heads * (2 if a.q_gate else 1) + tensors * kvh) * hd / tp
                    mix = mix + (_gemm(n, qkv, h, g, dev) + _gemm(n, h, a.heads * vd / tp, g, dev)) * layers
        if a.linear_layers:  # gated delta-net or Mamba-2 projections in place of attention's on the linear layers
            mix += (_gemm(n, a.linear_in_width() / tp, h, g, dev)
                    + _gemm(n, h, a.lin_v_heads * a.lin_v_dim / tp, g, dev)) * a.linear_layers
        up = (2 if a.gated_mlp else 1) * a.ffn / tp  # gate and up projections fused
        dense_mlp = _gemm(n, up, h, g, dev) + _gemm(n, h, a.ffn / tp, g, dev)
        act_bytes = 2.0
        streams, kernels = (a.compressed.hc_mult, HC_KERNELS) if a.compressed else (1, ELEMENTWISE_KERNELS)  # mHC
        elem = _floored(memory_time_ms(n * h * act_bytes * ELEMENTWISE_PASSES * streams, dev), kernels, dev)
        mlp_act = _floored(memory_time_ms(n * (a.mlp_mats * a.ffn / tp) * act_bytes, dev), 1, dev)
        per_layer = mix / a.layers + (elem + self.comm.tp_allreduce(n) * 2) * a.sublayer_share
        total = self.stage_layers * per_layer
        total += (a.dense_layers / p.pp) * (dense_mlp + mlp_act)
        if a.experts:
            tokens = n * p.adp  # attention-DP ranks gather their tokens for the experts
            eh = a.moe_latent or h
            experts = moe_ms(tokens, eh, a.expert_ffn, a.topk, a.experts, dev, self.moe, tp=p.moe_tp, ep=p.moe_ep,
                             constants=KERNEL_CONSTANTS, replayed=False, gated=a.gated_mlp,
                             max_share=MATRIX_SHARE_CAP)
            shared = 0.0
            if a.shared_ffn:
                shared = _gemm(n, (2 if a.gated_mlp else 1) * a.shared_ffn / tp, h, g, dev) \
                    + _gemm(n, h, a.shared_ffn / tp, g, dev) \
                    + _floored(memory_time_ms(n * a.mlp_mats * a.shared_ffn / tp * act_bytes, dev), 1, dev)
            if a.moe_latent:  # into and out of the experts' latent space
                shared += _gemm(n, eh, h, g, dev) + _gemm(n, h, eh, g, dev)
            router = _gemm(n, a.experts, h, self.half, dev)
            # the grouped GEMMs and the routing kernels (top-k, permute, finalize), each at least the floor
            experts = _floored(experts, 2, dev) + ROUTING_KERNELS * kernel_floor_ms(dev)
            moe_act = memory_time_ms(tokens * a.topk / p.moe_ep * a.mlp_mats * a.expert_ffn / p.moe_tp * act_bytes, dev)
            total += (a.moe_layers / p.pp) * (experts + shared + router + moe_act + self.comm.moe(n))
        return total

    def _decode_attn_per_key(self) -> tuple:
        """ms per cached key read by one decode step over this stage's (full-attention, sliding) KV layers
        (roofline: linear in the keys)."""
        a, tp = self.arch, self.par.tp
        if self.uses_dsa() or a.compressed:  # `decode_attn_ms` prices them (not linear in the keys)
            return 0.0, 0.0
        if a.mla:  # absorbed MLA: every head reads the one latent (kv_lora + rope wide)
            t = mla_decode_ms(1, 1e6, a.heads / tp, a.kv_lora_rank, a.rope_dim, self.device, self.kv_dtype,
                              self.decode_source, constants=self.models.mla, attention=self.models.attention)
            return float(t) / 1e6 * a.kv_layers / self.par.pp, 0.0
        out = []
        # probed at a batch that fills the SMs: a kernel of one CTA per sequence and head (TensorRT-LLM's
        # masked-MHA fallback) is slower per key with few sequences than with the many a step decodes
        seqs = self.device.num_sms
        for _, layers, (kvh, hd, _, tensors) in a.attention_kinds():
            t = generation_attention_ms(seqs, 1e6 / seqs, a.heads / tp, max(kvh / tp, 1), hd, self.device,
                                        kv_dtype=self.kv_dtype, kernel_source=self.decode_source,
                                        constants=self.models.attention) if layers else 0.0
            # per key, bytes of the cached widths over a key-and-value pair of key width (keys that are the values:
            # half); a fractional KV head would also cut the probe's parallelism, not only its bytes
            out.append(float(t) / 1e6 * tensors / 2 * layers / self.par.pp)
        return tuple(out)

    # -- public ----------------------------------------------------------------------------------
    def tokens_ms(self, n: float) -> float:
        """Token-count-dependent part for `n` tokens (linear interpolation on the grid)."""
        return self._interpolated(self._dense, n)

    def _interpolated(self, v: list, n: float) -> float:
        g = self._grid
        if n <= g[0]:
            return v[0]
        if n >= g[-1]:
            return v[-1] * n / g[-1]
        i = bisect.bisect_right(g, n)
        f = (n - g[i - 1]) / (g[i] - g[i - 1])
        return v[i - 1] + f * (v[i] - v[i - 1])

    def uses_dsa(self) -> bool:  # DSA's sparse MLA (DeepSeek-V3.2, GLM-5), priced per query token
        return bool(self.arch.mla and self.arch.index_heads and self.arch.max_keys)

    def _sparse_attn_ms(self, tokens: float) -> float:
        """Sparse MLA over `tokens` query tokens on every attention layer of the model (all stages): with an FP8
        cache in 64-head tiles of the heads there are (FlashMLA's FP8 decode kernel, SGLang's `flashmla_kv` on
        Hopper; on Blackwell SGLang decodes in TensorRT-LLM's kernel, taken as alike), with a 16-bit one in FlashMLA's
        sparse kernel, heads padded."""
        a = self.arch
        t = sparse_mla_ms(tokens, a.heads / self.par.tp, a.kv_lora_rank, a.rope_dim, a.max_keys, self.device,
                          self.kv_dtype, self.decode_source, constants=self.models.sparse_mla,
                          attention=self.models.attention, padded=self.kv_dtype != "fp8")
        return float(t) * a.kv_layers

    def _topk_ms(self, seqs: float, new: float, cached: float) -> float:
        """The indexer's top-k selection for `seqs` sequences of `new` query tokens after `cached` keys, on every
        indexed layer of the model (all stages)."""
        a = self.arch
        work = topk_work(seqs, new, cached, a.max_keys)
        return float(index_topk_ms(*work, self.device, self.models.sparse_mla)) * a.kv_layers

    def decode_attn_ms(self, keys: float, seqs: int, queries: int = 1) -> float:
        """Decode attention over `keys` cached keys in total (sliding and sparse layers capped), `queries` query
        tokens per sequence (a speculative step's verified drafts)."""
        a = self.arch
        if self.uses_dsa():
            attn = max(self._sparse_attn_ms(seqs * queries) / self.par.pp, self._attn_floor_ms)
            topk = self._topk_ms(seqs, queries, max(keys / max(seqs, 1) - queries, 0.0)) / self.par.pp
            return attn + topk + max(self._index_ms * keys, self._attn_floor_ms)  # the index scan: a kernel a layer
        if a.compressed:
            t = a.compressed.decode_ms(keys, seqs, a.heads / self.par.tp, self.device, self.kv_dtype,
                                       self.decode_source, queries, self.models.sparse_mla, self.models.attention)
            return t / self.par.pp + self._linear_decode_ms(seqs, queries)
        full_keys = min(keys, seqs * a.max_keys) if a.max_keys else keys
        window_keys = min(keys, seqs * a.window) if a.window else keys
        attn = max(self._kv_ms[0] * full_keys + self._kv_ms[1] * window_keys, self._attn_floor_ms)
        if a.block_sparse:  # MSA: its dense layers read the rest of the context, its sparse ones every index key
            per_key = self._kv_ms[0] * self.par.pp / max(a.full_layers, 1)
            attn += a.block_sparse.decode_ms(keys, full_keys, per_key, kernel_floor_ms(self.device), self.device,
                                             queries) / self.par.pp
        return attn + self._linear_decode_ms(seqs, queries)

    def _linear_decode_ms(self, seqs: int, queries: int) -> float:
        """This stage's linear-attention layers in a decode step of `seqs` sequences of `queries` tokens each."""
        a, tp, floor = self.arch, self.par.tp, kernel_floor_ms(self.device)
        if not a.linear_layers:
            return 0.0
        t = linear_attention.decode_layer_ms(seqs, queries, a.linear_conv_channels() / tp, a.lin_v_heads / tp,
                                             a.lin_k_dim, a.lin_v_dim, self.device, self.linear, floor)
        return t * a.linear_layers / self.par.pp

    def prefill_linear_ms(self, lengths) -> float:
        """This stage's linear-attention layers over an iteration's prefill chunks (`lengths`), one launch a kernel."""
        a, tp = self.arch, self.par.tp
        if not a.linear_layers or not len(lengths):
            return 0.0
        t = linear_attention.prefill_layer_ms(lengths, a.linear_conv_channels() / tp, a.lin_v_heads / tp,
                                              self.device, self.linear, kernel_floor_ms(self.device))
        return t * a.linear_layers / self.par.pp

    def prefill_attn_ms(self, chunk: int, prefix: int) -> float:
        key = (int(chunk), int(prefix))
        hit = self._prefill_cache.get(key)
        if hit is None:
            a, tp = self.arch, self.par.tp
            if a.compressed:
                t = a.compressed.prefill_ms(chunk, prefix, a.heads / tp, self.device, self.kv_dtype,
                                            self.prefill_source, self.models.sparse_mla, self.models.attention)
            else:
                t = 0.0
                dense = a.block_sparse.dense_layers if a.block_sparse else 0  # MSA's layers of the whole context
                for full, layers, (kvh, hd, vd, _) in a.attention_kinds():
                    for n, window in ((layers - dense, a.max_keys), (dense, 0)) if full else ((layers, a.window),):
                        t += n * float(context_attention_ms(1, chunk, a.heads / tp, max(kvh / tp, 1), hd, self.device,
                                                            kv_dtype=self.kv_dtype, window=window or 0, prefix=prefix,
                                                            kernel_source=self.prefill_source, v_dim=vd,
                                                            constants=self.models.attention)) if n else 0.0
            if a.index_heads:  # each query of the chunk scores every key before it, and picks its top-k
                t += a.kv_layers * indexer_ms(chunk * (prefix + chunk / 2.0), prefix + chunk, a.index_heads,
                                              a.index_dim, self.device) + self._topk_ms(1, chunk, prefix)
            if a.block_sparse:
                t += a.block_sparse.prefill_index_ms(chunk, prefix, self.device)
            hit = self._prefill_cache[key] = t / self.par.pp
        return hit

    def decode_step_ms(self, n: int, keys: float) -> float:
        """One decode step of `n` sequences holding `keys` cached keys in all: the target model over each
        sequence's token (and, speculating, its draft tokens to verify; the keys are read once for all of
        them), the sampler, and the draft module's passes (one layer of the model and the LM head each)."""
        q = self.spec.tokens + 1
        t = self.tokens_ms(n * q) + self.sample_ms(n * q) + self.decode_attn_ms(keys, n, q)
        return t + self.spec.tokens * self.draft_ms(n, keys) if self.spec.tokens else t

    def draft_ms(self, n: int, keys: float) -> float:
        """One draft pass for `n` sequences holding `keys` cached keys: an MTP/EAGLE head of one decoder layer
        (its attention over its own cache of the context) plus the LM head. It runs on the last pipeline
        stage only, so it is divided by the stages the iteration's time is later multiplied by."""
        layer = (self._interpolated(self._layers, n) + self.decode_attn_ms(keys, n)) / self.stage_layers
        return layer / self.par.pp + self.sample_ms(n)

    @lru_cache(maxsize=4096)
    def sample_ms(self, n: int) -> float:
        """LM head (vocab split over TP) and sampler for `n` sampled tokens, on the last stage only (so / pp)."""
        a = self.arch
        head = float(_gemm(n, a.vocab / self.par.tp, a.hidden, self.half, self.device))
        sampler = float(_floored(memory_time_ms(n * a.vocab * 4.0 * 3, self.device), SAMPLER_KERNELS, self.device))
        return (head + sampler) / self.par.pp


def weight_bytes_per_gpu(arch: Arch, par: Parallel, precision: str, moe_precision: str) -> float:
    """Weight bytes one GPU holds: attention/dense/shared split over TP (replicated over attention-DP
    ranks), experts over moe_tp x moe_ep, a DSA indexer whole on every rank, the embedding and LM head over
    TP, layers over PP."""
    p = arch.params()
    wb, mb = PRECISIONS[precision][1], PRECISIONS[moe_precision][1]
    layers = (p["attn"] + p["dense_mlp"] + p["shared"]) / par.tp * wb + p["experts"] / (par.moe_tp * par.moe_ep) * mb \
        + p["index"] * wb
    return layers / par.pp + p["embed"] / par.tp * 2.0


def kv_bytes_per_token(arch: Arch, par: Parallel, kv_bytes: float) -> float:
    """KV-cache bytes one more token of a sequence adds on one GPU (past any sliding window)."""
    if arch.compressed:  # its indexer keys are FP8 whatever the cache dtype
        return arch.compressed.kv_bytes_per_token(kv_bytes) / par.pp
    return (arch.kv_elems_per_token(par.tp) * kv_bytes + arch.index_bytes_per_token()) / par.pp


def check_weights_fit(arch, par, precision, moe_precision, device, engine) -> float:
    """KV-cache bytes left per GPU after the weights, in the larger of the engine's memory fraction less its
    activation reserve and 97% of memory less 1 GB; InputError when none is."""
    w = weight_bytes_per_gpu(arch, par, precision, moe_precision)
    budget = device.mem_bytes * engine.mem_utilization - engine.activation_reserve_gb * 1e9
    # engines started with a higher memory fraction than their default still serve what fits in 97%
    most = max(budget, device.mem_bytes * 0.97 - 1e9)
    free = most - w
    if free <= 0:
        raise InputError(f"weights need {w / 1e9:.1f} GB per GPU, more than the {most / 1e9:.1f} GB {engine.name} "
                         f"can use on {device.name} at most (97% of its memory, less 1 GB); add GPUs (tp/ep/pp) or "
                         "lower the precision")
    return free


__all__ = ["GEMM_DTYPES", "KV_DTYPE_BYTES", "PRECISIONS", "QUANT_MODES", "KernelModels", "Parallel", "Speculation",
           "StepCost", "check_weights_fit", "default_kv_dtype", "kv_bytes_per_token",
           "weight_bytes_per_gpu"]
