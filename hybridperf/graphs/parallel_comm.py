"""Where a parallel job's ranks sit (Megatron's layout on the node's GPUs) and what its collectives cost: the
collective model on the node's fabric, DDP's gradient buckets and how much of their time the backward hides."""
from __future__ import annotations

import math

import numpy as np

from hybridperf.devices import DeviceSpec, NodeSpec, get_device
from hybridperf.devices.node_lookup import default_node_for_device, resolve_node


def _packing(groups: list, gpn: int) -> tuple[int, int]:
    """(ranks, ranks per node) of the worst-packed group: fewest ranks on one node, a divisor of ranks."""
    p = len(groups[0])
    g = p
    for ranks in groups:
        counts = {}
        for r in ranks:
            counts[r // gpn] = counts.get(r // gpn, 0) + 1
        c = min(counts.values())
        if len(set(counts.values())) > 1 or p % c:
            c = math.gcd(p, c)
        g = min(g, c)
    return p, max(g, 1)


def rank_layout(dp: int, tp: int, pp: int, gpn: int) -> dict:
    """(ranks, ranks per node) of the TP and DP groups and, per pipeline boundary, whether it crosses nodes."""
    w = dp * tp
    rank = lambda s, d, t: s * w + d * tp + t  # noqa: E731
    tp_groups = [[rank(s, d, t) for t in range(tp)] for s in range(pp) for d in range(dp)]
    dp_groups = [[rank(s, d, t) for d in range(dp)] for s in range(pp) for t in range(tp)]
    cross = [any(r // gpn != (r + w) // gpn for r in range((s - 1) * w, s * w)) for s in range(1, pp)]
    emb_cross = pp > 1 and any(r // gpn != (r + (pp - 1) * w) // gpn for r in range(w))
    gpus = dp * tp * pp
    return {"tp": _packing(tp_groups, gpn), "dp": _packing(dp_groups, gpn), "pp_cross": cross,
            "emb_cross": emb_cross, "gpus": gpus, "nodes": -(-gpus // gpn)}


class _Comm:
    """Vectorised collective predictions on one node type: (ms, lo_ms, hi_ms) arrays."""

    def __init__(self, node: NodeSpec, model):
        self.node = node
        self.model = model

    def __call__(self, collective: str, nbytes, gpus: int, gpn: int):
        n = np.atleast_1d(np.asarray(nbytes, dtype=np.float64))
        ms, lo, hi = np.zeros(len(n)), np.zeros(len(n)), np.zeros(len(n))
        some = n > 0  # nothing to send (a block without parameters) costs nothing
        if gpus < 2 or not some.any():
            return ms, lo, hi
        out = self.model.predict(collective, n[some], gpus, gpn, self.node)
        ms[some], lo[some], hi[some] = out["ms"], out["lo_ms"], out["hi_ms"]
        return ms, lo, hi


def resolve_parallel_device(device):
    """(node, gpu spec, note): a catalog/JSON node, or a GPU placed in the default node the collective
    CLI builds for it (`hybridperf.devices.node_lookup.resolve_node`)."""
    if isinstance(device, NodeSpec):
        return device, get_device(device.device), ""
    if isinstance(device, DeviceSpec):
        node, kind = default_node_for_device(device)
        return node, device, f"note: assuming {node.gpus_per_node} x {device.name} with {kind}"
    node, note = resolve_node(str(device))
    dev = get_device(node.device) if not note else get_device(str(device))
    return node, dev, note


def _buckets(units: list, bucket_bytes: float) -> tuple[np.ndarray, np.ndarray]:
    """Ready times and sizes of the gradient buckets. `units` = [(bw_ms, grad_bytes)] in backward order;
    a unit's gradients appear at a uniform rate over its backward time."""
    t = np.concatenate([[0.0], np.cumsum([u[0] for u in units])])
    c = np.concatenate([[0.0], np.cumsum([u[1] for u in units])])
    total = float(c[-1])
    if total <= 0:
        return np.zeros(0), np.zeros(0)
    n = max(1, int(math.ceil(total / bucket_bytes - 1e-9)))
    edges = np.minimum(np.arange(1, n + 1) * bucket_bytes, total)
    edges[-1] = total
    sizes = np.diff(np.concatenate([[0.0], edges]))
    j = np.clip(np.searchsorted(c, edges, side="left"), 1, len(c) - 1)  # first point with c >= edge
    frac = (edges - c[j - 1]) / np.maximum(c[j] - c[j - 1], 1e-300)
    ready = t[j - 1] + np.clip(frac, 0.0, 1.0) * (t[j] - t[j - 1])
    return ready, sizes


def _exposed(ready: np.ndarray, ar_ms: np.ndarray, window_ms: float) -> float:
    finish = 0.0
    for r, a in zip(ready, ar_ms):
        finish = max(finish, r) + a
    return max(0.0, finish - window_ms)


def _prefetched(compute_ms, gather_ms, scatter_ms=None) -> float:
    """Exposed communication of ZeRO-3 over units run in order: unit i needs its parameters gathered
    (`gather_ms[i]`), prefetched one unit ahead on a single communication stream, and (backward)
    reduce-scatters its gradients after it ran (`scatter_ms[i]`) on that stream. Returns the time
    beyond the compute."""
    n = len(compute_ms)
    if not n:
        return 0.0
    ready = np.zeros(n)  # when unit i's parameters are in
    comm_free = ready[0] = gather_ms[0]
    done = 0.0
    for i in range(n):
        start = max(done, ready[i])
        if i + 1 < n:  # the next unit's gather is issued as this one starts
            comm_free = ready[i + 1] = max(comm_free, start) + gather_ms[i + 1]
        done = start + compute_ms[i]
        if scatter_ms is not None:
            comm_free = max(comm_free, done) + scatter_ms[i]
    return max(0.0, max(done, comm_free) - float(np.sum(compute_ms)))
