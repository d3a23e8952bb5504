"""Multi-head latent attention (DeepSeek-V2/V3, Kimi K2, GLM-5) decode, absorbed form: every query head
attends over one shared latent per cached token (`kv_lora` wide, plus the decoupled `rope` part), which is
both the keys and, without its rope part, the values.

Hopper and data-center Blackwell run MLA decode in its own kernels (FlashMLA, TensorRT-LLM's and FlashInfer's
MLA kernels), which need Hopper's or data-center Blackwell's shared memory (`NATIVE_MIN_SMEM_KB`):
    memory    each sequence's latents read once for all its heads (kv dtype), plus its queries and outputs
              (bf16), at achievable bandwidth x a fitted share
    compute   2 x heads x (latent + kv_lora) FLOPs per key at the matrix rate of the cache's dtype on Blackwell
              (fp8 MMA), of bf16 on Hopper (fp8 latents are dequantized in the kernel), x a fitted efficiency
    time      max(memory, compute) + a fixed overhead (the rope kernel and the attention launch) at the
              reference SM clock
Other GPUs (Ampere, Ada, consumer Blackwell, AMD) run MLA through generic attention paths: they are priced
as a generic decode over one `latent + rope` wide key/value head (`attention.generation_attention_ms`).

`experiments/kernels/mla_decode.py` fits the constants on aiconfigurator's `generation_mla` tables and
reports them leave-one-GPU-out.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybridperf.devices import DTYPE_BYTES, DeviceSpec
from hybridperf.priors.attention import CONSTANTS as ATTENTION_CONSTANTS
from hybridperf.priors.attention import (AttentionConstants, Fitted, clock_scale, generation_attention_ms, kv_read_ms,
                                        matrix_rate)

#: shared memory per SM the native MLA kernels are built for (their query and latent tiles); Hopper and
#: B200/B300/GB200 have 228 KB, consumer Blackwell (sm_120) 100 KB
NATIVE_MIN_SMEM_KB = 200.0


@dataclass(frozen=True)
class MlaConstants:
    """Fitted constants of the native MLA decode kernels."""

    bw_share: Fitted = Fitted(0.8, "share", "default")  # of achievable DRAM bandwidth
    efficiency: Fitted = Fitted(0.5, "share", "default")  # of the matrix rate
    overhead_ms: Fitted = Fitted(0.012, "ms", "default")  # at the reference SM clock


_TABLES = "h100_sxm, b200_sxm aiconfigurator generation_mla tables (TensorRT-LLM 1.3, SGLang 0.5.14)"
_SCRIPT = "experiments/kernels/mla_decode.py"
#: shipped constants, `python -m experiments.kernels.mla_decode --write-constants` (fitted on both GPUs;
#: the held-out errors are in experiments/results/mla_decode.md)
CONSTANTS = MlaConstants(bw_share=Fitted(0.807, "share", _TABLES, _SCRIPT),
                         efficiency=Fitted(0.531, "share", _TABLES, _SCRIPT),
                         overhead_ms=Fitted(0.0133, "ms", _TABLES, _SCRIPT))


def native_mla(device: DeviceSpec) -> bool:
    """Whether `device` runs the dedicated MLA decode kernels (Hopper, data-center Blackwell)."""
    return (device.vendor == "nvidia" and device.smem_per_sm_kb >= NATIVE_MIN_SMEM_KB
            and device.kernel_arch in ("hopper", "blackwell"))


def mla_decode_ms(batch, kv_len, heads, kv_lora: int, rope: int, device: DeviceSpec, kv_dtype: str = "bf16",
                  kernel_source: str | None = None, constants: MlaConstants = CONSTANTS,
                  attention: AttentionConstants = ATTENTION_CONSTANTS) -> np.ndarray:
    """Kernel time (ms) of one MLA decode step: `batch` sequences of one query token, `heads` query heads on
    this GPU, `kv_len` cached latents each. `kernel_source` picks the generic path's kernel family, priced with
    `attention`'s constants."""
    batch, kv_len, heads = (np.asarray(x, dtype=np.float64) for x in (batch, kv_len, heads))
    width = float(kv_lora + rope)
    if not native_mla(device):
        return generation_attention_ms(batch, kv_len, heads, 1, width, device, kv_dtype=kv_dtype,
                                       kernel_source=kernel_source, xqa_fallback=False, constants=attention)
    nbytes = batch * kv_len * width * DTYPE_BYTES.get(kv_dtype, 2) + batch * heads * (width + kv_lora) * 2.0
    mem = kv_read_ms(nbytes, device) / constants.bw_share.value
    mma = kv_dtype if device.kernel_arch == "blackwell" else "bf16"
    flops = 2.0 * batch * kv_len * heads * (width + kv_lora)
    compute = flops / (matrix_rate(device, mma) * constants.efficiency.value) * 1e3
    return np.maximum(mem, compute) + constants.overhead_ms.value * clock_scale(device)


#: query heads per CTA of the sparse MLA kernels (FlashMLA's sparse kernels, and vLLM's and SGLang's wrappers of
#: them): one 64-row tile of heads per query token
SPARSE_HEADS_PER_CTA = 64
#: a query token's heads are padded to a multiple of this per architecture in FlashMLA's sparse (prefill) kernel,
#: which requires 64 heads on Hopper, 128 on Blackwell (SGLang's `_forward_flashmla_sparse`, vLLM's FlashMLA-sparse
#: backend pad with zeros), so a TP rank holding 8 of GLM-5's 64 heads runs 128 on a B200. FlashMLA's decode kernel
#: over an FP8 cache (SGLang's `flashmla_kv`, its default with one) fills a 64-row tile with the heads it has
SPARSE_HEAD_MULTIPLE = {"hopper": 64, "blackwell": 128}


@dataclass(frozen=True)
class SparseMlaConstants:
    """Fitted constants of the sparse (DSA) MLA kernels: the share of one SM's bf16 matrix rate a CTA reaches and a
    fixed overhead at the reference SM clock; and of the indexer's top-k selection, in SM cycles: a row's latency
    and its cost per key (a row per CTA), and the selection's throughput, per score and per row, over all SMs."""

    efficiency: Fitted = Fitted(0.55, "share", "default")
    overhead_ms: Fitted = Fitted(0.002, "ms", "default")
    topk_row_kcycles: Fitted = Fitted(19.0, "kcycles", "default")
    topk_key_cycles: Fitted = Fitted(0.8, "cycles", "default")
    topk_score_cycles: Fitted = Fitted(2.0, "cycles", "default")
    topk_row_throughput_kcycles: Fitted = Fitted(3.5, "kcycles", "default")


_SPARSE_SCRIPT = "experiments/kernels/dsa_attention.py"
_SPARSE_TABLES = ("h100_sxm, b200_sxm aiconfigurator glm5_dsa_attn_module and glm5_topk_module tables (SGLang 0.5.14, "
                  "flash_mla_sparse_fwd, fast_topk_transform_fused)")
#: shipped constants, `python -m experiments.kernels.dsa_attention --write-constants` (fitted on both GPUs; the
#: held-out errors are in experiments/results/dsa_attention.md)
SPARSE_CONSTANTS = SparseMlaConstants(
    *(Fitted(v, unit, _SPARSE_TABLES, _SPARSE_SCRIPT) for v, unit in (
        (0.584, "share"), (0.0065, "ms"), (18.6, "kcycles"), (0.576, "cycles"), (0.622, "cycles"), (8.0, "kcycles"))))


def sparse_mla_ms(tokens, heads, kv_lora: int, rope: int, topk: int, device: DeviceSpec, kv_dtype: str = "bf16",
                  kernel_source: str | None = None, constants: SparseMlaConstants = SPARSE_CONSTANTS,
                  attention: AttentionConstants = ATTENTION_CONSTANTS, padded: bool = True) -> np.ndarray:
    """Kernel time (ms) of sparse MLA (DeepSeek-V3.2's and GLM-5's DSA) over `tokens` query tokens, prefill or decode
    alike, `heads` query heads on this GPU: every token attends exactly `topk` latents (the indexer's pick; a
    shorter context pads the indices, which the kernel still walks), whatever the context. One CTA per token and 64
    of its heads, padded (`SPARSE_HEAD_MULTIPLE`) unless `padded` is False (the FP8-cache decode kernel); CTAs run
    in waves over the SMs, each doing 64 x topk x (latent + kv_lora) multiply-adds at a fitted share of one SM's
    bf16 matrix rate. Off Hopper and data-center Blackwell: the generic decode path over `topk` latents per token."""
    tokens, heads = np.asarray(tokens, dtype=np.float64), np.asarray(heads, dtype=np.float64)
    width = float(kv_lora + rope)
    if not native_mla(device):
        return generation_attention_ms(tokens, topk, heads, 1, width, device, kv_dtype=kv_dtype,
                                       kernel_source=kernel_source, xqa_fallback=False, constants=attention)
    multiple = SPARSE_HEAD_MULTIPLE.get(device.kernel_arch, SPARSE_HEADS_PER_CTA) if padded else SPARSE_HEADS_PER_CTA
    ctas = np.maximum(tokens, 1.0) * np.ceil(np.maximum(heads, 1.0) / multiple) * multiple / SPARSE_HEADS_PER_CTA
    waves = np.ceil(ctas / device.num_sms)
    per_sm = matrix_rate(device, "bf16") / device.num_sms
    cta_ms = 2.0 * SPARSE_HEADS_PER_CTA * topk * (width + kv_lora) / (per_sm * constants.efficiency.value) * 1e3
    return waves * cta_ms + constants.overhead_ms.value * clock_scale(device)


def topk_work(batch, new, cached, topk: int) -> tuple:
    """(rows, scores, longest) a top-k selection does for `batch` sequences of `new` query tokens after `cached`
    keys, causal: the rows holding more than `topk` keys, their keys in all, and the longest row's."""
    batch, new, cached = (np.asarray(x, dtype=np.float64) for x in (batch, new, cached))
    first = np.clip(topk - cached, 0.0, None)  # the first new token whose row holds more than topk keys
    n = np.clip(new - first, 0.0, None)
    return batch * n, batch * (n * cached + (first + 1.0 + new) * n / 2.0), cached + new


def index_topk_ms(rows, scores, longest, device: DeviceSpec, constants: SparseMlaConstants = SPARSE_CONSTANTS):
    """Kernel time (ms) of the indexer's top-k selection (SGLang's `fast_topk_transform_fused`) over `rows` query
    rows holding more keys than top-k (a row with fewer takes every key and selects nothing), `scores` keys in all,
    the longest row `longest`: a row per CTA, so a few rows cost one row's latency, many the SMs' throughput."""
    rows, scores, longest = (np.asarray(x, dtype=np.float64) for x in (rows, scores, longest))
    c = constants
    latency = c.topk_row_kcycles.value * 1e3 + c.topk_key_cycles.value * longest
    throughput = (c.topk_score_cycles.value * scores + c.topk_row_throughput_kcycles.value * 1e3 * rows) \
        / device.num_sms
    return np.where(rows > 0, np.maximum(latency, throughput) / (device.boost_clock_mhz * 1e3), 0.0)
