"""Analytic latency of the kernels outside hybridperf's op vocabulary (`misc:<kind>` rows).

Every such kernel is memory-bound: device time = bytes at achievable bandwidth (with L2 residency of
small working sets, `hybridperf.priors.memory.memory_time_ms`). Unlike the vocabulary kernels (predicted
as NeuSight measured them, one timed call each) these carry no harness floor: the composition
(`hybridperf.graphs.compose`) adds the same per-launch gap to both. Per-kind efficiency factors account
for access patterns worse than streaming:

    gather        1.0   row gather (contiguous rows of the table)
    embedding_bw  1.5   sort + segment-reduce of token gradients, plus the zero-fill of (V, h)
    copy          1.25  strided read of a permuted tensor
    reduce        1.0
    mask          1.0   tiny mask/position kernels: effectively the floor
    route         1.0
    index         2.0   boolean-mask indexing (nonzero + gather/scatter)
    cast          1.0   .to() between a half dtype and fp32 (streams both widths)
    where         3.0   SDPA's boolean mask made additive: an unvectorised `where` over a broadcast mask
                        (H100: 40-43 us for 16.8M elements of Phi-3's and Gemma 3's masks, 1.2 TB/s)

`strided` kernels run PyTorch's unvectorised CUDA paths: the generic `CatArrayBatchedCopy` of a
concatenation with a non-contiguous input (a slice, an expanded tensor), the scalar-load softmax
(`layers.attention_core.row_softmax`). Their per-element work, not DRAM, bounds them: elements read and
written at `STRIDED_ACCESSES_PER_SM_CYCLE` x SMs x clock, or the streaming time when that is longer.

The interval of a misc kernel is a fixed +-50% band in log space (no learned model).
"""
from __future__ import annotations

import numpy as np

from hybridperf.devices import DeviceSpec
from hybridperf.priors.memory import memory_time_ms

KIND_FACTOR = {"gather": 1.0, "embedding_bw": 1.5, "copy": 1.25, "reduce": 1.0, "mask": 1.0, "route": 1.0,
               "index": 2.0, "cast": 1.0, "where": 3.0}
MISC_LOG_HALF_WIDTH = np.log(1.5)
#: elements read or written per SM and clock cycle by an unvectorised kernel: the H100's strided bf16 cache
#: concatenations, 0.67-0.69 TB/s at every decode shape of Phi-3, Mistral and Qwen1.5-MoE (132 SMs at 1,980 MHz;
#: `experiments/data/measured/h100/families/op_profile.csv`); its bf16 softmax over 2,049-wide rows ran 0.72.
#: Measured in bf16 only: a wider element is assumed to cost the same per element
STRIDED_ACCESSES_PER_SM_CYCLE = 1.29


def misc_latency_ms(kinds, nbytes, device: DeviceSpec, elem_bytes=2.0) -> np.ndarray:
    """Device time (ms, no launch floor) of misc kernels of `kinds` (without the 'misc:' prefix) moving
    `nbytes` bytes of `elem_bytes`-byte elements (a number or one per kernel)."""
    nbytes = np.asarray(nbytes, dtype=np.float64)
    factor = np.array([KIND_FACTOR.get(k, 1.0) for k in kinds], dtype=np.float64)
    t = factor * memory_time_ms(nbytes, device)
    strided = np.array([k == "strided" for k in kinds], dtype=bool)
    if strided.any() and device.num_sms > 0 and device.boost_clock_mhz > 0:
        rate = STRIDED_ACCESSES_PER_SM_CYCLE * device.num_sms * device.boost_clock_mhz * 1e6  # elements per second
        elems = nbytes / np.broadcast_to(np.asarray(elem_bytes, dtype=np.float64), nbytes.shape)
        t[strided] = np.maximum(t[strided], elems[strided] / rate * 1e3)
    return t
