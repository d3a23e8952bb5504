"""Where a parallel job's ranks sit (Megatron's layout on the node's GPUs) and what its collectives cost: the
collective model on the node's fabric, a step's TP collectives, pipeline transfers and data-parallel sync (DDP's
gradient buckets and how much of their time the backward hides, ZeRO's gathers)."""
from __future__ import annotations

import math

import numpy as np

from hybridperf.devices import DeviceSpec, NodeSpec, get_device
from hybridperf.devices.node_lookup import gpu_node, resolve_node


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
    """(node, gpu spec, note): a catalog/JSON node, or a GPU placed in the node the collective CLI places it in
    (`hybridperf.devices.node_lookup.gpu_node`)."""
    if isinstance(device, NodeSpec):
        return device, get_device(device.device), ""
    if isinstance(device, DeviceSpec):
        node, how = gpu_node(device)
        return node, device, f"note: {device.name!r} is a GPU, not a node; {how}"
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


TP_COLLECTIVES = ("act", "ce", "logits")


def tp_collectives(comm: _Comm, group: tuple, act_bytes: float, tokens: int, vocab_shard: int, eb: float) -> dict:
    """(ms, lo, hi) of one micro-batch's TP collectives in `group` (ranks, ranks per node): a layer's activation
    all-reduce (`act`), the loss's all-reduce (`ce`) and the all-gather of the vocab-parallel logits (`logits`)."""
    p_tp, g_tp = group
    if p_tp < 2:
        return {n: (0.0, 0.0, 0.0) for n in TP_COLLECTIVES}
    ar, ar_lo, ar_hi = comm("all_reduce", [act_bytes, tokens * eb], p_tp, g_tp)
    ag, ag_lo, ag_hi = comm("all_gather", [tokens * vocab_shard * eb * p_tp], p_tp, g_tp)  # the gathered logits
    return {n: (float(a), float(lo), float(hi)) for n, a, lo, hi in
            zip(TP_COLLECTIVES, np.r_[ar, ag], np.r_[ar_lo, ag_lo], np.r_[ar_hi, ag_hi])}


def tp_stage_cost(c: dict, first: bool, last: bool, n_layers: int, train: bool, i: int = 0) -> tuple[float, float]:
    """(fw, bw) TP collective time of a pipeline stage for one micro-batch (`tp_collectives` `c`); i = 0 ms,
    1 lo, 2 hi. Megatron all-reduces twice a layer each way, once more after the embedding; the last stage's
    loss takes three small all-reduces in training, the logits' gather in inference."""
    fw = 2 * n_layers * c["act"][i] + (c["act"][i] if first else 0.0)
    bw = 2 * n_layers * c["act"][i] if train else 0.0
    if last:
        if train:
            fw += 3 * c["ce"][i]
            bw += c["act"][i]
        else:
            fw += c["logits"][i]
    return fw, bw


def pp_transfers(comm: _Comm, layout: dict, act_bytes: float, m: int, train: bool, tied_bytes: float = 0.0):
    """(fw ms, bw ms, lo, hi, per-boundary send/recv ms) of a pipeline's activation transfers over `m`
    micro-batches (1F1B: every boundary once, the slowest m - 1 more times; the backward sends gradients
    back), plus a tied embedding's gradient all-reduce between the first and last stage (`tied_bytes`)."""
    cross = np.array(layout["pp_cross"], dtype=bool)
    if not len(cross):
        return 0.0, 0.0, 0.0, 0.0, np.zeros(0)
    vals = {}
    for crossing in (False, True):
        if (cross == crossing).any():
            vals[crossing] = [float(v[0]) for v in comm("send_recv", [act_bytes], 2, 1 if crossing else 2)]
    p2p = np.array([vals[x][0] for x in cross])
    lo_b = np.array([vals[x][1] for x in cross])
    hi_b = np.array([vals[x][2] for x in cross])
    dirs = 2 if train else 1
    per_dir = lambda v: float(v.sum() + (m - 1) * v.max())  # noqa: E731
    fw = per_dir(p2p)
    bw = per_dir(p2p) if train else 0.0
    lo, hi = dirs * per_dir(lo_b), dirs * per_dir(hi_b)
    if tied_bytes:
        e, elo, ehi = (float(v[0]) for v in comm("all_reduce", [tied_bytes], 2, 1 if layout["emb_cross"] else 2))
        bw, lo, hi = bw + e, lo + elo, hi + ehi
    return fw, bw, lo, hi, p2p


def dp_sync(comm: _Comm, stages: list, group: tuple, m: int, zero: int, overlap: bool, bucket_bytes: float,
            eb: float, p2p: np.ndarray, fw_units: list | None = None) -> tuple[list, list]:
    """Exposed data-parallel communication of a training step, ([ms, lo, hi] of the gradient sync, [ms, lo, hi]
    of ZeRO's parameter all-gathers outside the backward); sets each stage's `dp_allreduce_ms`.

    `stages`: dicts with `_units` ([(bw ms, gradient bytes)] in backward order), `params`, `bw_ms`, `tp_bw_ms`.
    DDP all-reduces buckets as their gradients are ready (`overlap`) or the whole stage after its backward;
    ZeRO-1/2 reduce-scatter instead and all-gather the updated slices after the step; ZeRO-3 (one stage)
    gathers each unit's parameters ahead of its forward and backward (`fw_units`: [(fw ms, bytes)])."""
    p_dp, g_dp = group
    if zero == 3:
        r = stages[0]
        bw_units = r["_units"]
        ag_fw = comm("all_gather", [u[1] for u in fw_units], p_dp, g_dp)  # NCCL sizes: the whole unit
        ag_bw = comm("all_gather", [u[1] for u in bw_units], p_dp, g_dp)
        rs_bw = comm("reduce_scatter", [u[1] for u in bw_units], p_dp, g_dp)
        fw_t, bw_t = [u[0] for u in fw_units], [u[0] for u in bw_units]
        gather = [m * _prefetched(fw_t, ag_fw[i]) for i in range(3)]
        # every micro-batch gathers the parameters again; gradients are reduce-scattered after the last
        sync = [(m - 1) * _prefetched(bw_t, ag_bw[i]) + _prefetched(bw_t, ag_bw[i], rs_bw[i]) for i in range(3)]
        r["dp_allreduce_ms"] = float(rs_bw[0].sum())
        return sync, gather
    collective = "reduce_scatter" if zero else "all_reduce"  # NCCL sizes: the whole bucket either way
    slack = 0.0
    ex = {0: [], 1: [], 2: []}
    post = {0: [], 1: [], 2: []}
    for s, r in enumerate(stages):
        window = sum(u[0] for u in r["_units"])
        if overlap:
            ready, sizes = _buckets(r["_units"], bucket_bytes)
            a = comm(collective, sizes, p_dp, g_dp)
            for i in range(3):
                ex[i].append(_exposed(ready, a[i], window) - slack)
            r["dp_allreduce_ms"] = float(a[0].sum())
        else:
            a = comm(collective, [r["params"] * eb], p_dp, g_dp)
            for i in range(3):
                ex[i].append(float(a[i][0]) - slack)
            r["dp_allreduce_ms"] = float(a[0][0])
        if zero:  # after its step each rank gathers the others' updated slices
            g = comm("all_gather", [r["params"] * eb], p_dp, g_dp)
            for i in range(3):
                post[i].append(float(g[i][0]))
        slack += r["bw_ms"] + r["tp_bw_ms"] + (p2p[s] if s < len(p2p) else 0.0)
    sync = [max(0.0, max(ex[i])) for i in range(3)]
    gather = [max(post[i]) for i in range(3)] if zero else [0.0, 0.0, 0.0]
    return sync, gather
