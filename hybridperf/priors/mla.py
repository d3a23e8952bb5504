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
