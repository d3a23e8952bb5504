"""Per-call latency floor: what the smallest kernel of each op class costs end to end.

With NeuSight's methodology (CUDA events around one eager PyTorch call, mean of the 5 fastest of 25),
even an empty-sized kernel costs tens of microseconds: kernel launch, the event pair, and for some
ops a second kernel or host-side work (e.g. LayerNorm's stats, linear's bias). Across the five training
GPUs of the artifact (P4 ... A100) the 1st percentile of each op class sits within ~20% of these values,
so the floor is modelled as a per-op-class constant (device-agnostic); the residual model refines it.

How a kernel was timed decides its floor, so every prediction names a timing:
  * `call`:   CUDA events around one eager PyTorch call (NeuSight's harness, `hybridperf collect`);
  * `kernel`: the kernel's own duration as a profiler reports it (CUPTI: torch.profiler, Nsight
              Systems, Vidur's profiles), with no launch or framework time: a few microseconds.

A timed call's floor is what the host spends between the two events: PyTorch's dispatch of the op on
the CPU, the launch, the event pair. That belongs to the host and its software, not the GPU, so a
call-timed row also names its `host`:
  * `neusight`: the hosts of NeuSight's artifact (PyTorch 2.1), where FLOOR_MS was read;
  * `current`:  a current server and PyTorch (the default: what a user measuring today runs). Read
                off the host of our lent H200 (PyTorch 2.11, CUDA 13.0), it dispatches a call in
                0.38-0.59 of NeuSight's time by op class (HOST_FLOOR_SCALE; RESULTS.md section 8).
The host's PyTorch also decides which softmax kernel runs (`hybridperf.priors.rowwise`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from hybridperf.timing import DEFAULT_HOST, HOSTS, TIMINGS, check_host, check_timing  # noqa: F401 (re-exported)

#: floor in ms per op class for the NeuSight measurement harness (PyTorch 2.1, CUDA events)
FLOOR_MS = {
    "elementwise": 0.026,
    "bmm": 0.032,
    "softmax": 0.033,
    "layernorm": 0.047,
    "linear": 0.056,
}
DEFAULT_FLOOR_MS = 0.03

#: floor in ms per op class of a profiler-timed kernel. Fitted on Vidur's A100 fp16 profiles alone
#: (the constant minimising the prior's MAPE; held out: its A40); bmm and softmax, absent there, take
#: linear's and the row-wise norm's values.
KERNEL_FLOOR_MS = {
    "elementwise": 0.003,
    "bmm": 0.009,
    "softmax": 0.009,
    "layernorm": 0.009,
    "linear": 0.009,
}
DEFAULT_KERNEL_FLOOR_MS = 0.005

#: each host's call floor as a share of FLOOR_MS: per op class where it was measured, else the host's
#: share over all classes (`all`). `current` is the H200 grid's (`kernel_prior.host_floor_scale`: the
#: median, over kernels whose NeuSight floor is at least 0.25 of their prior, of (measured - the prior's
#: body) / FLOOR_MS): all 0.42 (66 kernels), bmm 0.59, elementwise 0.40, linear 0.38. Our H100's host,
#: a check: all 0.54, bmm 0.73, elementwise 0.50, linear 0.49. Neither grid has a floor-bound softmax
#: or LayerNorm.
HOST_FLOOR_SCALE = {
    "neusight": {"all": 1.0},
    "current": {"all": 0.42, "bmm": 0.59, "elementwise": 0.40, "linear": 0.38},
}


def host_floor_share(op_class: str, host: str) -> float:
    """`host`'s call floor for `op_class` as a share of NeuSight's (HOST_FLOOR_SCALE)."""
    shares = HOST_FLOOR_SCALE[check_host(host)]
    return shares.get(op_class, shares["all"])


def describe_floor_shares(shares: dict) -> str:
    """'0.42 (bmm 0.59, linear 0.38)': a host's shares as HOST_FLOOR_SCALE holds them."""
    classes = ", ".join(f"{oc} {v:.2f}" for oc, v in sorted(shares.items()) if oc != "all")
    return f"{shares['all']:.2f}" + (f" ({classes})" if classes else "")


def row_timing(rows: pd.DataFrame) -> pd.Series:
    """Each row's timing: its `timing` column, `call` (NeuSight's semantics) where the table has none."""
    return rows["timing"] if "timing" in rows.columns else pd.Series("call", index=rows.index, dtype=object)


def row_host(rows: pd.DataFrame) -> pd.Series:
    """Each row's host: its `host` column, DEFAULT_HOST where the table has none."""
    return rows["host"] if "host" in rows.columns else pd.Series(DEFAULT_HOST, index=rows.index, dtype=object)


def launch_floor_ms(op_class: str, timing: str = "call", host: str = DEFAULT_HOST) -> float:
    """Latency floor (ms) of one op of `op_class` as `timing` measures it on `host` (module docstring)."""
    if check_timing(timing) == "kernel":
        return KERNEL_FLOOR_MS.get(op_class, DEFAULT_KERNEL_FLOOR_MS)
    return FLOOR_MS.get(op_class, DEFAULT_FLOOR_MS) * host_floor_share(op_class, host)


def floors_ms(op_class, timing, host=DEFAULT_HOST) -> np.ndarray:
    """`launch_floor_ms` for arrays of op classes, timings and hosts (one value per row; a single
    host applies to every row)."""
    n = len(np.asarray(op_class, dtype=object))
    hosts = np.broadcast_to(np.asarray(host, dtype=object), (n,))
    rows = list(zip(np.asarray(op_class, dtype=object).tolist(), np.asarray(timing, dtype=object).tolist(), hosts.tolist()))
    table = {row: launch_floor_ms(*row) for row in set(rows)}
    return np.array([table[row] for row in rows], dtype=np.float64)
