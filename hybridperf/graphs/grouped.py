"""How a top-k MoE's grouped expert GEMMs launch on a given device: one kernel, or one GEMM per expert.

HF's expert layers (transformers 5.x, `experts_implementation="grouped_mm"`, the default) call
PyTorch's grouped_mm once per projection, and the graph writes each call as one batched GEMM over the
experts that received tokens (`graphs.primitives.grouped_gemm`). What launches depends on the device:

  * NVIDIA sm90 / sm100 (Hopper, Blackwell) with bf16 operands: one CUTLASS grouped-GEMM kernel
    (`_grouped_mm_cuda`'s fast path), priced as the bmm it is written as;
  * everything else (fp32 or fp16 anywhere, Ampere, Ada, sm_120, AMD): PyTorch's fallback
    (`_grouped_mm_fallback`, ATen) copies the offsets to the host and runs one mm per expert with tokens
    from its C++ loop; before sm80 transformers runs the same loop itself, in Python. Each group becomes
    its own `linear` launch of the group's shape.

ATen's loop launches its GEMMs back to back without Python's dispatch in between, so they are marked
`native_loop` and the composition prices them at their device time, without the per-launch gap and host
floor of an eager op (`compose.in_model_ms`): priced as eager launches, Qwen3-30B-A3B's fp32 forward (128
experts, 2,048 GEMMs of 64 rows) was over-predicted by 32% on both our H200 and H100. The host sync of the
fallback (one per call) is not priced: the GPU has the loop's GEMMs queued right after it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from hybridperf.devices import DeviceSpec
from hybridperf.ops import TRANSPOSED_FORM

#: (vendor, arch) pairs whose grouped_mm is one kernel for bf16 operands. Not AMD: ROCm builds keep their
#: Composable Kernel grouped GEMM (gfx90a, gfx942, gfx950) behind `ROCM_ALLOW_GROUP_GEMM_CK=1`, off by default
ONE_KERNEL_ARCHS = {("nvidia", "hopper"), ("nvidia", "blackwell")}
#: (vendor, arch) pairs below sm80, where transformers loops over the experts in Python (`_can_use_grouped_mm`)
PYTHON_LOOP_ARCHS = {("nvidia", "pascal"), ("nvidia", "volta"), ("nvidia", "turing")}


def one_grouped_kernel(device: DeviceSpec, dtype: str) -> bool:
    """Whether grouped_mm runs as one kernel on `device` for operands of `dtype`."""
    return dtype == "bf16" and (device.vendor, device.kernel_arch) in ONE_KERNEL_ARCHS


def launch_grouped_gemms(tab: pd.DataFrame, device: DeviceSpec) -> pd.DataFrame:
    """`tab` (kernel-table columns) with each grouped GEMM the device runs as a loop rewritten as one
    `linear` GEMM (`mm` form, a weight gradient's `mm_t`) of the group's shape, launched once per group
    (count x groups), `native_loop` where ATen's C++ loop launches them; the rest unchanged."""
    if "grouped" not in tab.columns or not tab["grouped"].any():
        return tab
    loop = tab["grouped"].to_numpy(bool) & ~np.array([one_grouped_kernel(device, d) for d in tab["dtype"]])
    if not loop.any():
        return tab
    tab = tab.copy()
    tab["native_loop"] = loop & ((device.vendor, device.arch) not in PYTHON_LOOP_ARCHS)
    tab.loc[loop, "count"] = tab.loc[loop, "count"] * tab.loc[loop, "B"]
    tab.loc[loop, "B"] = 1
    tab.loc[loop, "op"] = "linear"
    tab.loc[loop, "group"] = "linear"
    # one bias-free mm per group; a weight gradient keeps its transposed form
    tab.loc[loop, "form"] = np.where(tab.loc[loop, "form"] == TRANSPOSED_FORM, TRANSPOSED_FORM, "mm")
    return tab


def native_loop(tab: pd.DataFrame) -> np.ndarray:
    """Which rows of a launched table (`launch_grouped_gemms`) ATen's C++ loop launches."""
    return tab["native_loop"].to_numpy(bool) if "native_loop" in tab.columns else np.zeros(len(tab), dtype=bool)
