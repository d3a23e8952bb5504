"""Linear-attention kernels: the gated delta rule of Qwen3.5's and Qwen3-Next's GatedDeltaNet layers: a short causal
conv, then a recurrence over a fixed-size state per sequence and value head. Kimi's delta attention and Mamba-2's SSD
are priced alike, untested: no table times their recurrence, and on TensorRT-LLM's Mamba-2 conv tables (H100, B200,
L40S) these conv constants give 0.26-0.56x of the measured time (its conv carries a cost per channel at few tokens).

Decode runs `causal_conv1d_update` over the conv's channels (q, k and v) and a fused recurrent kernel that reads each
sequence's state (key width x value width, fp32) and writes it (once per query token). Prefill runs `causal_conv1d_fn`
and the chunked rule over an iteration's chunks in one variable-length launch: each sequence is cut into 64-token
chunks; a chunk's products within itself run in parallel, but the state passes from chunk to chunk one after another
for each (sequence, value head), so a long sequence on few heads leaves most SMs idle. The chunked rule costs a fixed
chain of kernels, a step per chunk of the longest sequence (one more partial step while its first chunk fills) in
waves of (sequence, head) chains over the SMs, and matrix work on every padded chunk at the board's bf16 rate.

Collectors replay one state, which L2 holds while it fits (`resident=True`); serving steps every layer's state and
reads it from DRAM. Constants: `python -m experiments.kernels.gdn_kernels --write-constants` (aiconfigurator's
`gdn_perf` tables); held out per GPU in `experiments/results/gdn_kernels.md`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybridperf.devices import DeviceSpec
from hybridperf.priors.attention import Fitted
from hybridperf.priors.llm_gemm import matrix_peak
from hybridperf.priors.memory import memory_time_ms

CHUNK = 64  # tokens per chunk of the chunked rule (fla's and FlashInfer's)
STATE_BYTES = 4.0  # the recurrent state is fp32
GATED_NORM_KERNELS = 1  # the layer's gated RMSNorm on the recurrence's output, besides the tables' kernels
_SCRIPT = "experiments/kernels/gdn_kernels.py"


@dataclass(frozen=True)
class LinearAttentionConstants:
    """Fitted costs of one linear-attention layer's kernels: each kernel's fixed cycles, the prefill conv's and the
    decode conv update's DRAM bytes per token and channel, the recurrence's passes over the state, and the chunked
    rule's fixed chain, step per chunk, first-chunk fill and its work per padded token and value head (`chunk_flops`:
    FLOPs at the board's bf16 matrix peak, an effective count that folds in the kernels' efficiency)."""

    # defaults: round guesses (a kernel floor each, bf16 in and out, one pass over the state), where fits start
    conv_kcycles: Fitted = Fitted(4.0, "kcycles", "default", _SCRIPT)
    conv_bytes: Fitted = Fitted(4.0, "bytes", "default", _SCRIPT)
    update_kcycles: Fitted = Fitted(4.0, "kcycles", "default", _SCRIPT)
    update_bytes: Fitted = Fitted(16.0, "bytes", "default", _SCRIPT)
    recurrent_kcycles: Fitted = Fitted(4.0, "kcycles", "default", _SCRIPT)
    recurrent_passes: Fitted = Fitted(1.0, "passes", "default", _SCRIPT)
    chunk_kcycles: Fitted = Fitted(24.0, "kcycles", "default", _SCRIPT)
    step_kcycles: Fitted = Fitted(8.0, "kcycles", "default", _SCRIPT)
    fill_kcycles: Fitted = Fitted(8.0, "kcycles", "default", _SCRIPT)
    chunk_flops: Fitted = Fitted(1e6, "FLOPs", "default", _SCRIPT)


PARAMS = tuple(LinearAttentionConstants.__dataclass_fields__)


def _shipped(values: dict, chunk_source: str) -> LinearAttentionConstants:
    units = {n: getattr(LinearAttentionConstants(), n).unit for n in PARAMS}
    src = {n: chunk_source if n in _CHUNK_PARAMS else "a100_sxm, h100_sxm, b200_sxm, l40s gdn_perf (all frameworks)"
           for n in PARAMS}
    return LinearAttentionConstants(**{n: Fitted(v, units[n], src[n], _SCRIPT) for n, v in values.items()})


_CHUNK_PARAMS = ("chunk_kcycles", "step_kcycles", "fill_kcycles", "chunk_flops")
_SHARED = {"conv_kcycles": 7.215, "conv_bytes": 5.17, "update_kcycles": 4.167, "update_bytes": 11.02,
           "recurrent_kcycles": 8.622, "recurrent_passes": 0.9855}
#: shipped constants (`python -m experiments.kernels.gdn_kernels --write-constants`, fitted on every GPU's tables):
#: fla's Triton chunked rule (SGLang, TensorRT-LLM, vLLM before Hopper) and FlashInfer's (vLLM on Hopper, Blackwell)
TRITON = _shipped({**_SHARED, "chunk_kcycles": 33.54, "step_kcycles": 4.316, "fill_kcycles": 25.54,
                   "chunk_flops": 1.487e6}, "h100_sxm, b200_sxm, l40s gdn_perf (SGLang, TensorRT-LLM, vLLM Triton)")
FLASHINFER = _shipped({**_SHARED, "chunk_kcycles": 26.12, "step_kcycles": 4.619, "fill_kcycles": 12.76,
                       "chunk_flops": 1.012e5}, "h100_sxm, b200_sxm gdn_perf (vLLM 0.24 FlashInfer)")
DEFAULT = TRITON
SHIPPED = {"triton": TRITON, "flashinfer": FLASHINFER}


def family(engine: str, device: DeviceSpec) -> str:
    """The chunked rule `engine` runs on `device`: vLLM's FlashInfer kernel on Hopper's and data-center Blackwell's
    kernel architecture, else fla's."""
    return "flashinfer" if engine == "vllm" and device.kernel_arch in ("hopper", "blackwell") else "triton"


def _cycles_ms(kcycles: float, device: DeviceSpec) -> float:
    return kcycles / device.boost_clock_mhz if device.boost_clock_mhz > 0 else 0.0


def _mem_ms(nbytes, device: DeviceSpec, resident: bool, held=None) -> np.ndarray:
    """`nbytes` moved; while `resident`, L2 serves them as far as it holds `held` bytes (default: `nbytes`)."""
    return memory_time_ms(nbytes, device, working_set_bytes=(nbytes if held is None else held) if resident else np.inf)


def conv_ms(tokens, channels, device: DeviceSpec, c: LinearAttentionConstants = DEFAULT,
            resident: bool = False, update: bool = False) -> np.ndarray:
    """The short causal conv over `tokens` tokens of `channels` channels (q, k and v on this rank): prefill's
    `causal_conv1d_fn`, or with `update` decode's `causal_conv1d_update` (a token per sequence, its conv state
    read and written)."""
    kcycles, per = (c.update_kcycles, c.update_bytes) if update else (c.conv_kcycles, c.conv_bytes)
    nbytes = np.asarray(tokens, dtype=float) * channels * per.value
    return _cycles_ms(kcycles.value, device) + _mem_ms(nbytes, device, resident)


def recurrent_ms(seqs, v_heads: float, k_dim: int, v_dim: int, device: DeviceSpec,
                 c: LinearAttentionConstants = DEFAULT, resident: bool = False, queries: int = 1) -> np.ndarray:
    """One decode step of the recurrence for `seqs` sequences: each state read, and written once per query token
    (verifying drafts, the engines keep the state after each draft for the accepted one)."""
    state = np.asarray(seqs, dtype=float) * v_heads * k_dim * v_dim * STATE_BYTES  # updated in place
    return _cycles_ms(c.recurrent_kcycles.value, device) \
        + _mem_ms((1.0 + queries) * state * c.recurrent_passes.value, device, resident, state)


def chunk_ms(seqs, tokens, v_heads, device: DeviceSpec, c: LinearAttentionConstants = DEFAULT,
             all_chunks=None) -> np.ndarray:
    """The chunked rule over `seqs` sequences of `tokens` tokens each, in one launch; sequences of other lengths
    pass `tokens` the longest (it sets the chain) and `all_chunks` their chunks together."""
    seqs, tokens = np.asarray(seqs, dtype=float), np.asarray(tokens, dtype=float)
    heads = np.maximum(np.asarray(v_heads, dtype=float), 1.0)
    chunks = np.ceil(np.maximum(tokens, 1.0) / CHUNK)
    total = seqs * chunks if all_chunks is None else all_chunks
    # a (sequence, head) pair steps through its chunks on one SM: waves of the longest chain's length
    waves = np.ceil(total * heads / (chunks * max(device.num_sms, 1)))
    fill = np.minimum(tokens, CHUNK) / CHUNK
    chain = (chunks * c.step_kcycles.value + fill * c.fill_kcycles.value) * waves
    flops = total * CHUNK * heads * c.chunk_flops.value
    return _cycles_ms(c.chunk_kcycles.value + chain, device) + flops / matrix_peak(device, "bfloat16") * 1e3


def decode_layer_ms(seqs: int, queries: int, channels: float, v_heads: float, k_dim: int, v_dim: int,
                    device: DeviceSpec, c: LinearAttentionConstants = DEFAULT, floor_ms: float = 0.0) -> float:
    """One layer's decode step as serving runs it, states in DRAM: the conv update over `seqs` x `queries` tokens,
    the recurrence, and the gated RMSNorm at `floor_ms`."""
    heads = max(v_heads, 1.0)
    t = conv_ms(seqs * queries, channels, device, c, update=True) \
        + recurrent_ms(seqs, heads, k_dim, v_dim, device, c, queries=queries)
    return float(t) + GATED_NORM_KERNELS * floor_ms


def prefill_layer_ms(lengths, channels: float, v_heads: float, device: DeviceSpec,
                     c: LinearAttentionConstants = DEFAULT, floor_ms: float = 0.0) -> float:
    """One layer's prefill of an iteration's chunks (`lengths`, tokens each) in one variable-length launch per
    kernel, as the engines run them: the conv over all their tokens, the chunked rule (the longest chunk's
    chain), and the gated RMSNorm at `floor_ms`."""
    lengths = np.asarray(lengths, dtype=float)
    if not lengths.size:
        return 0.0
    chunks = float(np.ceil(np.maximum(lengths, 1.0) / CHUNK).sum())
    t = conv_ms(lengths.sum(), channels, device, c) \
        + chunk_ms(lengths.size, lengths.max(), max(v_heads, 1.0), device, c, all_chunks=chunks)
    return float(t) + GATED_NORM_KERNELS * floor_ms
