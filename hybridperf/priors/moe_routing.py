"""Which experts EP rank 0 computes, and for how many tokens, under the routings MoE benchmarks use.

aiconfigurator's collectors (`power_law_logits_v3`) draw each expert's load from a power law x^-alpha
on [1, 0.8 * tokens] (on [0.01, 2] when tokens x topk <= experts), scale the loads to tokens x topk
pairs, round, cap each expert at `tokens` (one pair per token), hand the overflow and a positive
rounding remainder back one pair at a time round-robin over the EP ranks to each rank's least loaded
expert (a negative remainder is taken from each rank's most loaded one), and swap the most loaded rank
into rank 0. A MoE kernel's time depends on that rank's pairs (`routed`), on how many of its experts
get any (`active`: each is a weight read in decode) and on the rows its grouped GEMM pads them to
(`padded`). The expectation is taken over `SAMPLES` draws from a fixed seed, so a prediction is
deterministic. Balanced routing gives every rank an even share.
"""
from __future__ import annotations

import math

import numpy as np

#: draws the expectation averages over (the collector times five and reports their mean)
SAMPLES = 16
#: most experts drawn (a draw costs SAMPLES x experts per shape); beyond, `moe.rank0_share`'s analytic share
MAX_EXPERTS = 4096
_SEED = 20240601
#: expectations already drawn in this process, per tile bounds (fits price the same rows many times)
_MEMO: dict[tuple, dict[tuple, np.ndarray]] = {}
_MEMO_LIMIT = 500_000


def _power_law(u: np.ndarray, alpha: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws of x^-alpha on [lo, hi] from uniforms `u` (the collector's `sample_power_law`,
    rearranged so that a steep alpha does not overflow)."""
    a = 1.0 - alpha
    return lo * (((hi / lo) ** a - 1.0) * u + 1.0) ** (1.0 / a)


def _level(c: np.ndarray, q: np.ndarray, cap: np.ndarray, up: bool) -> np.ndarray:
    """Add (`up`) or remove `q` units per row of `c` (..., n), one at a time to the least (most) loaded
    entry that stays within [0, cap]: water-filling. Returns the new counts (remainders spread over the
    entries at the final level, first entries first, as argmin/argmax pick them)."""
    if up:  # the level lies within q of the lowest entry, below the cap
        lo_l = c.min(-1).astype(np.float64)
        hi_l = np.minimum(cap, lo_l + q)
    else:  # and within q + 1 of the highest
        hi_l = c.max(-1).astype(np.float64)
        lo_l = np.maximum(hi_l - q - 1, 0.0)
    capb = cap[..., None]
    for _ in range(int(np.ceil(np.log2(float((hi_l - lo_l).max()) + 1.0))) + 1):
        mid = np.floor((lo_l + hi_l + 1) / 2)
        m = mid[..., None]
        moved = (np.clip(m - c, 0, None) if up else np.clip(c - m, 0, None)).sum(-1)
        ok = moved <= q if up else moved > q
        lo_l, hi_l = np.where(ok, mid, lo_l), np.where(ok, hi_l, mid - 1)
        if np.all(lo_l >= hi_l):
            break
    level = lo_l[..., None]
    if up:
        new = np.maximum(c, np.minimum(level, capb))
        extra = (q - (new - c).sum(-1))[..., None]
        at = (new == level) & (new < capb)
    else:
        level = level + 1  # the lowest ceiling that removes no more than q
        new = np.minimum(c, level)
        extra = (q - (c - new).sum(-1))[..., None]
        at = (new == level) & (new > 0)
    rank = np.cumsum(at, axis=-1)
    bump = at & (rank <= extra)
    return new + bump if up else new - bump


def _round_robin(c: np.ndarray, total: np.ndarray, cap: np.ndarray, up: bool) -> np.ndarray:
    """Hand `total` units (per combination and draw) to the EP ranks of `c` (..., ep, local) in turn, one
    per rank with room per round from rank 0 on, each rank's units water-filled into its own experts
    (capped at `cap`); whole rounds go at once, until a rank fills."""
    left = total.astype(np.float64)
    capr = np.broadcast_to(cap[..., None], c.shape[:-1])
    c = c.copy()  # the caller's counts stay as they were
    for _ in range(c.shape[-2] + 1):
        if not np.any(left > 0):
            break
        room = ((cap[..., None, None] - c) if up else c).sum(-1)
        open_ = room > 0
        n_open = open_.sum(-1)
        rounds = np.floor(left / np.maximum(n_open, 1))
        least = np.where(open_, room, np.inf).min(-1)
        whole = np.minimum(rounds, least)  # rounds every open rank can still take
        rest = np.where(rounds < least, left - rounds * n_open, 0.0)  # a last, partial round
        share = np.where(open_, whole[..., None] + (np.cumsum(open_, -1) <= rest[..., None]), 0.0)
        busy = share.sum(-1) > 0
        if not busy.any():
            break
        c[busy] = _level(c[busy], share[busy], capr[busy], up)
        left = left - share.sum(-1)
    return c


def _drawn_counts(tokens: np.ndarray, topk: np.ndarray, experts: int, ep: int, alpha: np.ndarray) -> np.ndarray:
    """Per-expert pair counts, the most loaded EP rank swapped into rank 0, for combinations sharing
    `experts` and `ep` (tokens, topk, alpha of shape (C,)): (C, SAMPLES, ep, experts // ep)."""
    u = np.random.default_rng(_SEED).random((SAMPLES, experts))
    t, k = tokens[:, None, None], topk[:, None, None]
    many = t * k > experts
    lo = np.where(many, 1.0, 0.01)
    hi = np.maximum(np.where(many, 0.8 * t, 2.0), 1.5 * lo)
    a = np.where(np.abs(alpha - 1.0) < 1e-3, 1.001, alpha)[:, None, None]
    x = _power_law(u[None], a, lo, hi)
    target = (tokens * topk)[:, None]
    c = np.round(x / x.sum(-1, keepdims=True) * target[..., None])
    cap = np.broadcast_to(tokens[:, None], target.shape)
    overflow = np.clip(c - cap[..., None], 0, None).sum(-1)
    c = np.minimum(c, cap[..., None]).reshape(len(tokens), SAMPLES, ep, experts // ep)
    c = _round_robin(c, overflow, cap, up=True)
    delta = target - c.sum((-2, -1))
    c = _round_robin(c, np.clip(delta, 0, None), cap, up=True)
    c = _round_robin(c, np.clip(-delta, 0, None), cap, up=False)
    heaviest = c.sum(-1).argmax(-1)[..., None, None]
    first = np.take_along_axis(c, heaviest, axis=-2)
    zero = c[..., :1, :].copy()
    np.put_along_axis(c, heaviest, zero, axis=-2)
    c[..., :1, :] = first
    return c


def tie_break(experts: int) -> np.ndarray:
    """(SAMPLES, experts) seeded offsets in [0, 0.5) per draw that order experts of equal load at random,
    as the collector's unstable sort of the loads does (a fixed order would bias how many tokens rank 0's
    experts reach)."""
    return np.random.default_rng(_SEED + 1).random((SAMPLES, experts)) * 0.5


def _tokens_touching_rank0(counts: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Tokens with at least one pair on rank 0 (C, S), under the collector's assignment: experts sorted by
    load (ties at random, `tie_break`), each expert's pairs a run of the flat list that is read as [topk,
    tokens], so token i takes positions i, i + tokens, ...: a run [a, a + n) covers the tokens a mod
    tokens onwards, n of them."""
    C, S, ep, local = counts.shape
    flat = counts.reshape(C, S, ep * local)
    order = np.argsort(-flat - tie_break(ep * local), axis=-1)
    before = np.cumsum(np.take_along_axis(flat, order, axis=-1), axis=-1)
    place = np.empty_like(order)
    np.put_along_axis(place, order, np.arange(ep * local), axis=-1)
    n = counts[..., 0, :]  # rank 0's experts are the first `local` ids
    a = np.take_along_axis(before, place[..., :local], axis=-1) - n
    t = tokens[:, None, None]
    full = (n >= t).any(-1)
    a = np.mod(a, t)
    end = a + n
    starts = np.concatenate([a, np.zeros_like(a)], -1)
    ends = np.concatenate([np.minimum(end, t), np.clip(end - t, 0, None)], -1)
    ends = np.maximum(ends, starts)
    by = np.argsort(starts, axis=-1, kind="stable")
    starts, ends = np.take_along_axis(starts, by, -1), np.take_along_axis(ends, by, -1)
    reach = np.concatenate([np.zeros(starts.shape[:-1] + (1,)), np.maximum.accumulate(ends, -1)[..., :-1]], -1)
    covered = np.clip(ends - np.maximum(starts, reach), 0, None).sum(-1)
    return np.where(full, np.broadcast_to(t[..., 0], full.shape), covered)


def balanced_rank0_tokens(tokens, topk, experts, ep) -> np.ndarray:
    """Tokens with at least one pair on EP rank 0 under the collector's balanced routing (`balanced_logits`:
    token i's j-th expert is (i + j * stride) mod experts, stride = ceil(experts / topk), a pattern that
    repeats every `experts` tokens; fewer tokens than the stride spread over it, i * stride / tokens)."""
    t, k, e, p = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (tokens, topk, experts, ep)))
    keys, inverse = np.unique(np.stack([t.ravel(), k.ravel(), e.ravel(), np.maximum(p.ravel(), 1.0)], 1), axis=0,
                              return_inverse=True)
    values = np.empty(len(keys))
    for n, (ti, ki, ei, pi) in enumerate(keys.astype(np.int64).tolist()):
        stride = -(-ei // ki)
        i = np.arange(min(ti, ei), dtype=np.float64)[:, None]
        first = i if ti >= stride else i * stride / ti
        hit = (np.mod(first + np.arange(ki) * stride, ei).astype(np.int64) < ei // pi).any(1)
        values[n] = hit.sum() * (ti // ei) + hit[: ti % ei].sum() if ti >= ei else hit.sum()
    return values[inverse.ravel()].reshape(t.shape)


def expert_tile(rows_per_expert, bounds: tuple[float, float]) -> np.ndarray:
    """Rows of the grouped GEMM's tile for experts of `rows_per_expert` rows: the smallest power of two
    covering them, within `bounds` (`moe.EXPERT_TILE_M`)."""
    return np.clip(2.0 ** np.ceil(np.log2(np.maximum(rows_per_expert, 1.0))), *bounds)


def _expected(counts: np.ndarray, tokens: np.ndarray, tile_bounds: tuple[float, float], touching: bool) -> np.ndarray:
    """(C, 4): mean routed pairs, active experts, padded rows and (when `touching`, else NaN) tokens
    touching rank 0 over the draws of `counts` (C, S, ep, local, rank 0 first)."""
    mine = counts[..., 0, :]
    routed = mine.sum(-1)
    active = np.maximum((mine > 0).sum(-1), 1)
    tile = expert_tile(routed / active, tile_bounds)[..., None]
    padded = (np.ceil(mine / tile) * tile).sum(-1)
    near = _tokens_touching_rank0(counts, tokens).mean(-1) if touching else np.full(len(counts), np.nan)
    return np.stack([routed.mean(-1), active.mean(-1), padded.mean(-1), near], -1)


KEYS = ("routed", "active", "padded", "tokens")


def skewed_rank0(tokens, topk, experts, ep, alpha, tile_bounds: tuple[float, float], touching: bool = False) -> dict:
    """Expected `routed` pairs, `active` experts, `padded` rows and (with `touching`, else NaN) `tokens`
    with a pair on EP rank 0 under the collector's power-law routing, per row (arrays of equal shape; rows
    with alpha 0 come back NaN)."""
    t, k, e, p, a = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (tokens, topk, experts, ep, alpha)))
    out = np.full(t.shape + (len(KEYS),), np.nan)
    flat = np.stack([t.ravel(), k.ravel(), e.ravel(), np.maximum(p.ravel(), 1.0), a.ravel()], 1)
    skew = flat[:, 4] > 0
    if skew.any():
        keys, inverse = np.unique(flat[skew], axis=0, return_inverse=True)
        memo = _MEMO.setdefault(tuple(tile_bounds), {})
        todo = np.array([tuple(key) not in memo or (touching and np.isnan(memo[tuple(key)][3]))
                         for key in keys.tolist()], dtype=bool)
        for ei, pi in np.unique(keys[todo, 2:4], axis=0):
            g = np.flatnonzero(todo & (keys[:, 2] == ei) & (keys[:, 3] == pi))
            for chunk in np.array_split(g, len(g) * int(ei) // 200_000 + 1):
                kk = keys[chunk]
                counts = _drawn_counts(kk[:, 0], kk[:, 1], int(ei), int(pi), kk[:, 4])
                memo.update(zip(map(tuple, kk.tolist()), _expected(counts, kk[:, 0], tile_bounds, touching)))
        values = np.array([memo[tuple(key)] for key in keys.tolist()])
        out.reshape(-1, len(KEYS))[np.flatnonzero(skew)] = values[inverse.ravel()]
        if len(memo) > _MEMO_LIMIT:
            memo.clear()
    return {key: out[..., j] for j, key in enumerate(KEYS)}


def expert_ranks(ranks: int, topk: int, groups: int = 1, topk_groups: int = 1, experts: int = 0) -> float:
    """Expected distinct ranks, of `ranks` holding equal shares of the experts, that a token's `topk` experts
    (drawn at random) live on: R (1 - C(E - E/R, k) / C(E, k)) of `experts` E (2 for Mixtral's top-2 of 8 over
    8 ranks), R (1 - (1 - 1/R)^k) when E is not given or not split evenly (5.25 for top-8 over 8). Under
    group-limited routing its experts come from `topk_groups` of `groups` groups: over at least one rank per
    group, k / topk_groups experts in each chosen group's R / groups ranks (DeepSeek-V3, top-8 in 4 of 8 groups
    over 8 ranks: 4); with fewer ranks than groups, the chosen groups' ranks."""
    r = float(ranks)
    if groups <= 1 or topk_groups >= groups:
        if experts and experts % ranks == 0 and topk <= experts:
            return r * (1.0 - math.comb(experts - experts // ranks, topk) / math.comb(experts, topk))
        return r * (1.0 - (1.0 - 1.0 / r) ** topk)
    if r >= groups:
        per = r / groups
        return topk_groups * per * (1.0 - (1.0 - 1.0 / per) ** (topk / topk_groups))
    return r * (1.0 - (1.0 - 1.0 / r) ** topk_groups)
