"""The optimizer step of a training iteration: PyTorch's multi-tensor (foreach) optimizers as kernels.

`torch.optim` on CUDA defaults to its foreach implementation: each update line is one `torch._foreach_*`
op over the list of every parameter (or state) tensor, and `multi_tensor_apply` launches it as a few
kernels, each covering up to `max_blocks` chunks of 65,536 elements from up to `max_tensors` tensors
(both depend on the number of tensor lists the op touches, its "depth"; CUDA >= 12.1 on Volta and
newer passes 32 KB of kernel arguments and so 7x as many, ROCm and Pascal keep the 4 KB limits;
ATen's `MultiTensorApply.cuh`). The ops of one step, as `TorchDispatchMode` records them for
torch 2.13 (step >= 2, default hyper-parameters, no weight decay for Adam; `tests/test_optimizer.py`
re-records them when torch is installed):

    sgd            add_(p, g)                                      p -= lr g
    sgd-momentum   mul_(buf), add_(buf, g), add_(p, buf)
    adam           lerp_(m, g), mul_(v), addcmul_(v, g, g), t = sqrt(v), div_(t, .), add_(t, eps),
                   addcdiv_(p, m, t)
    adamw          adam, after mul_(p) (decoupled weight decay)
    adam-fused     add_(step), then one fused kernel over (p, g, m, v)   (`Adam(..., fused=True)`)

Every kernel is memory-bound and streams its tensors once: it is mapped onto the element-wise op with
the same number of full-size streams (2: `mulu`, 3: `add`, more: `add` plus `extra_nbytes` for each
further stream, as fused kernels are), so the kernel predictor and the composition price it like any
other element-wise kernel, at `MTA_STREAM_EFFICIENCY` of its rate (charged as more `extra_nbytes`).
Measured on a lent H100 and H200, these kernels draw 0.58-0.69 of the spec DRAM bandwidth where the
plain element-wise kernel draws 0.88 (one 65,536-element chunk per block, then the block exits).
The step counters live on the host (capturable=False; fused Adam keeps them on the device and adds to
them in a kernel of its own) and `zero_grad` sets gradients to None: neither launches a kernel.

Memory: Adam keeps two states per parameter (m, v), SGD with momentum one; Adam's step also allocates
one parameter-sized temporary (sqrt(v)), live while the activations are already freed.
"""
from __future__ import annotations

import pandas as pd

from hybridperf.devices import DTYPE_BYTES, DeviceSpec, dtype_key
# param_numels, tensor_numels, OPTIMIZERS and optimizer_state_bytes live below this module (the graph uses
# them) and are re-exported: callers read the optimizer step here
from hybridperf.graphs.backward import tensor_numels  # noqa: F401
from hybridperf.graphs.model_graph import KERNEL_COLUMNS, kernel_group, param_numels  # noqa: F401
from hybridperf.graphs.primitives import F32, vec  # noqa: F401
from hybridperf.graphs.optimizer_specs import OPTIMIZERS, optimizer_spec, optimizer_state_bytes  # noqa: F401

CHUNK = 65536  # elements per block (kChunkSize)
#: (max tensors, max blocks) per launch by depth 1-5, and max tensors of ops with a scalar list
SMALL_ARGS = {"tensors": (110, 64, 48, 36, 30), "scalarlist": (96, 64, 48, 36, 30), "blocks": 320}
LARGE_ARGS = {"tensors": (770, 448, 336, 252, 210), "scalarlist": (672, 448, 336, 252, 210), "blocks": 2240}
#: rate of a multi_tensor_apply kernel relative to PyTorch's vectorised element-wise kernel on the same
#: bytes; read off the H200's five optimizer steps (the value in 0.67-0.80 with the least squared log
#: error), held-out check on the H100 (experiments/RESULTS.md section 7)
MTA_STREAM_EFFICIENCY = 0.70
#: architectures (or vendors) that keep the 4 KB kernel-argument limit
SMALL_ARG_ARCHS = ("maxwell", "pascal")


def uses_large_kernel_args(vendor: str, arch: str) -> bool:
    """Whether multi_tensor_apply runs with the 32 KB argument limits (CUDA on Volta or newer)."""
    return vendor == "nvidia" and arch not in SMALL_ARG_ARCHS


def launch_sizes(numels, depth: int, scalarlist: bool = False, large_args: bool = True) -> list[int]:
    """Elements each kernel launch of one foreach op covers, as `multi_tensor_apply` cuts the tensor
    list `numels`: a launch closes when its blocks (chunks) or its tensors are full."""
    limits = LARGE_ARGS if large_args else SMALL_ARGS
    max_tensors = limits["scalarlist" if scalarlist else "tensors"][depth - 1]
    max_blocks = limits["blocks"]
    out, blocks, tensors, elems = [], 0, 0, 0
    for n in numels:
        n = int(n)
        if n <= 0:
            continue
        tensors += 1
        chunks = -(-n // CHUNK)
        for c in range(chunks):
            blocks += 1
            elems += min(CHUNK, n - c * CHUNK)
            if (tensors == max_tensors and c == chunks - 1) or blocks == max_blocks:
                out.append(elems)
                blocks, elems = 0, 0
                tensors = 0 if c == chunks - 1 else 1
    if blocks:
        out.append(elems)
    return out


def _as_kernel(name: str, streams: int, n: int) -> dict:
    """An element-wise kernel streaming `streams` tensors of n elements at `MTA_STREAM_EFFICIENCY` of a
    plain element-wise kernel's rate (see the module docstring)."""
    h = min(n, 4096)
    rows = -(-n // h)
    op, own = ("mulu", 2) if streams <= 2 else ("add", 3)  # the op and the streams it prices itself
    k = vec(name, op, rows, h, tag="optimizer")
    # the further streams, and the slower multi-tensor kernel charged as more bytes
    k["extra_nbytes"] = float(max(streams / MTA_STREAM_EFFICIENCY - own, 0.0) * rows * h * F32)
    return k


def optimizer_kernels(numels, optimizer: str, vendor: str = "nvidia", arch: str = "hopper") -> list[dict]:
    """The kernels of one optimizer step over parameter tensors `numels`, each with a repeat `count`."""
    spec = optimizer_spec(optimizer)
    large = uses_large_kernel_args(vendor, arch)
    out = []
    for op in spec.ops:
        counts: dict[int, int] = {}
        for n in launch_sizes([1] * len(numels) if op.steps else numels, op.depth, op.scalarlist, large):
            counts[n] = counts.get(n, 0) + 1
        for n, c in sorted(counts.items()):
            out.append({**_as_kernel(f"opt.{op.name}", op.streams, n), "count": c})
    return out


def optimizer_table(numels, optimizer: str, device: DeviceSpec, dtype: str = "fp32") -> pd.DataFrame:
    """`ModelGraph.kernel_table` rows (block 'optimizer', phase 'opt') of one optimizer step over the
    parameter tensors `numels` on `device`."""
    rows = [{**k, "block": "optimizer", "phase": "opt"} for k in optimizer_kernels(numels, optimizer, device.vendor,
                                                                                    device.arch)]
    if not rows:
        return pd.DataFrame(columns=list(KERNEL_COLUMNS))
    df = pd.DataFrame(rows)
    df["group"] = [kernel_group(op) for op in df["op"]]
    df["dtype"] = dtype
    df["grouped"] = False
    df["extra_nbytes"] = df["extra_nbytes"] * DTYPE_BYTES[dtype_key(dtype)] / F32
    return df.loc[:, list(KERNEL_COLUMNS)]
