"""Fused attention: FlashAttention-style prefill (PyTorch SDPA, FlashAttention 2/3, FlashInfer,
TensorRT-LLM's kernels) and decode against a key/value cache (paged, split-KV).

Kernel time only (no host floor). Vectorised over numpy arrays. Shapes: `batch` sequences,
`heads` query heads, `kv_heads` key/value heads (GQA), `head_dim`; prefill of `isl` new tokens
over `prefix` cached ones; decode of one token per sequence against `kv_len` cached ones.
"""
from __future__ import annotations

import numpy as np

from hybridperf.devices import DTYPE_BYTES, DeviceSpec


def _causal_pairs(q_len, kv_len, causal: bool, window):
    """(query, key) pairs a fused kernel computes: the causal triangle (plus the prefix), or a window."""
    q_len, kv_len = np.asarray(q_len, dtype=np.float64), np.asarray(kv_len, dtype=np.float64)
    full = q_len * kv_len
    if not causal:
        return full
    prefix = kv_len - q_len
    pairs = q_len * prefix + q_len * (q_len + 1) / 2.0
    w = np.asarray(window, dtype=np.float64)
    return np.where(w > 0, np.minimum(pairs, q_len * w), pairs)


def context_attention_ms(batch, isl, heads, kv_heads, head_dim, device: DeviceSpec, dtype: str = "bf16",
                         kv_dtype: str = "bf16", causal: bool = True, window=0, prefix=0,
                         kernel_source: str | None = None) -> np.ndarray:
    """Kernel time (ms) of one fused attention forward over a prefill."""
    batch, isl, heads, kv_heads, head_dim, prefix = (np.asarray(x, dtype=np.float64)
                                                     for x in (batch, isl, heads, kv_heads, head_dim, prefix))
    pairs = _causal_pairs(isl, isl + prefix, causal, window)
    flops = 4.0 * batch * heads * pairs * head_dim
    eb, kb = DTYPE_BYTES.get(dtype, 2), DTYPE_BYTES.get(kv_dtype, 2)
    nbytes = batch * head_dim * (2.0 * isl * heads * eb + 2.0 * (isl + prefix) * kv_heads * kb)
    t = np.maximum(flops / device.peak(dtype, matrix=True), nbytes / (device.mem_bw_gbs * 1e9))
    return t * 1e3


def generation_attention_ms(batch, kv_len, heads, kv_heads, head_dim, device: DeviceSpec, dtype: str = "bf16",
                            kv_dtype: str = "bf16", window=0, kernel_source: str | None = None) -> np.ndarray:
    """Kernel time (ms) of one decode step's attention: one query token per sequence."""
    batch, kv_len, heads, kv_heads, head_dim, window = (
        np.asarray(x, dtype=np.float64) for x in (batch, kv_len, heads, kv_heads, head_dim, window))
    keys = np.where(window > 0, np.minimum(kv_len, window), kv_len)
    nbytes = batch * 2.0 * keys * kv_heads * head_dim * DTYPE_BYTES.get(kv_dtype, 2)
    flops = 4.0 * batch * heads * keys * head_dim
    t = np.maximum(flops / device.peak(dtype, matrix=True), nbytes / (device.mem_bw_gbs * 1e9))
    return t * 1e3


def sdpa_ms(batch, seq, heads, kv_heads, head_dim, device: DeviceSpec, dtype: str = "bf16", causal: bool = True,
            backward: bool = False, kv_seq=None) -> np.ndarray:
    """Kernel time (ms) of PyTorch's `scaled_dot_product_attention` (flash backend) forward, or of its
    backward alone (`backward=True`): `seq` queries against `kv_seq` keys (default `seq`)."""
    kv_seq = seq if kv_seq is None else kv_seq
    prefix = np.asarray(kv_seq, dtype=np.float64) - np.asarray(seq, dtype=np.float64)
    fwd = context_attention_ms(batch, seq, heads, kv_heads, head_dim, device, dtype, dtype, causal, 0, prefix)
    return 2.5 * fwd if backward else fwd
