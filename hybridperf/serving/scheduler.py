"""One scheduler core for every engine: iteration-level continuous batching on one attention-DP rank.

Each iteration runs every decoding sequence one token plus prefill chunks under the token budget
(`EngineDefaults.mixed_batches`: with the decodes, else instead of them). Requests wait while the KV
cache or the running-sequence limit is full; an engine that admits by the blocks in use (vLLM) preempts
the newest request when a decode step would overflow, and recomputes its context later. Stretches with
no prefill to schedule advance in closed form to the next completion (decode attention is taken as linear
in the keys, at its slope where the stretch starts: exact for dense attention, a tangent for sparse and
compressed attention), so a long output costs one step, not thousands.

Speculative decoding (`cost.spec`) makes a decode step verify the drafted tokens and emit the expected
accepted count, fractional on average, so a sequence's context and remaining output advance by that.

Time is kept as a clock of components (GPU ms, eager iterations, CUDA-graph iterations) so that the
engine's host overheads and a GPU-time scale (`calibration.EngineCalibration`) apply afterwards: the
schedule depends on token counts only, never on how long an iteration takes.
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from hybridperf.errors import InputError
from hybridperf.serving.cost import StepCost
from hybridperf.serving.engines import EngineDefaults


#: share of the KV cache an engine that preempts keeps free when it admits a request
WATERMARK = 0.05
#: tokens within which two counts are equal, relative to the larger: a speculative step's fractional tokens, summed
#: over stretches and offsets, leave rounding residue (+1e-15 left of an output would cost one more step, +3e-14 held
#: in a drained cache refuse an exact fit)
_EPS = 1e-9


@dataclass(frozen=True)
class Workload:
    """`inflight` requests of `isl` prompt and `osl` output tokens on one rank; `closed_loop`: each finished
    request is replaced at once (a benchmark at fixed concurrency; started together, or spread over their
    output on an engine whose clients drift apart), else all start together (offline)."""

    isl: int
    osl: int
    inflight: int
    closed_loop: bool
    budget: int  # max batched tokens per iteration
    kv_capacity: int  # KV-cache tokens that fit on this rank
    max_running: int
    graph_batch: int  # decode batches up to this size replay a CUDA graph


class _Clock:
    """Cumulative (gpu_ms, eager iterations, graph iterations)."""

    __slots__ = ("gpu", "eager", "graph")

    def __init__(self):
        self.gpu = self.eager = self.graph = 0.0

    def now(self) -> tuple:
        return (self.gpu, self.eager, self.graph)


def _diff(a: tuple, b: tuple) -> tuple:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


class _Req:
    __slots__ = ("arrival", "prefill_left", "ctx", "dec_left", "first", "adm", "version")

    def __init__(self, isl: int, osl: int, arrival: tuple):
        self.arrival, self.prefill_left, self.ctx, self.dec_left = arrival, isl, 0, osl - 1
        self.first, self.adm, self.version = None, -1, 0


class _Decoders:
    """The running requests that decode (prefilled, output left), kept so that a step costs O(log n), not O(n):
    every member advances by the same tokens, so each keeps its context and output left relative to a common
    offset `shift` (true ctx = ctx + shift, true dec_left = dec_left - shift) while it is a member, with the
    sum of the contexts and a heap of the outputs left (stale entries skipped by version)."""

    __slots__ = ("shift", "ctx_sum", "members", "heap")

    def __init__(self):
        self.shift, self.ctx_sum, self.members, self.heap = 0.0, 0.0, set(), []

    def __len__(self) -> int:
        return len(self.members)

    def add(self, r: _Req) -> None:
        r.ctx -= self.shift
        r.dec_left += self.shift
        r.version += 1
        self.ctx_sum += r.ctx
        self.members.add(r)
        heapq.heappush(self.heap, (r.dec_left, r.adm, r.version, r))

    def remove(self, r: _Req) -> None:
        self.members.discard(r)
        self.ctx_sum -= r.ctx
        r.ctx += self.shift
        r.dec_left -= self.shift

    def advance(self, tokens: float) -> None:
        self.shift += tokens

    def keys(self) -> float:
        """The members' context tokens, summed."""
        return self.ctx_sum + len(self.members) * self.shift

    def tolerance(self) -> float:
        return _EPS * max(1.0, self.shift)

    def _top(self):
        while self.heap and (self.heap[0][3] not in self.members or self.heap[0][2] != self.heap[0][3].version):
            heapq.heappop(self.heap)
        return self.heap[0] if self.heap else None

    def min_left(self) -> float:
        return self._top()[0] - self.shift

    def pop_done(self) -> list:
        """Members with no output left, removed (true values restored)."""
        out = []
        while (top := self._top()) is not None and top[0] - self.shift <= self.tolerance():
            heapq.heappop(self.heap)
            self.remove(top[3])
            out.append(top[3])
        return out


def simulate(cost: StepCost, eng: EngineDefaults, w: Workload, measured: int | None = None) -> list:
    """Per finished request: (ttft components, decode components, e2e components), each a
    (gpu_ms, eager, graph) triple. Closed loop: the first `inflight` completions are warm-up and the next
    `measured` (default 2 x inflight) are returned; offline: all, with the last finish as e2e."""
    clock = _Clock()
    waiting = deque(_Req(w.isl, w.osl, clock.now()) for _ in range(w.inflight))
    running: dict = {}  # admitted requests (prefilling or decoding) by admission number: admission order
    prefilling: list = []  # admitted requests with prompt left, admission order
    decoders = _Decoders()
    admitted = itertools.count()
    used = 0  # KV tokens held (non-preempting engines: reserved in full at admission)
    state = cost.state_tokens  # a linear-attention model's per-sequence state, held while it runs
    # admitting by the blocks in use keeps a watermark free for the running decodes to grow into
    # (vLLM's `watermark`, SGLang's new-token reservation); without it a preempted request would come
    # straight back and be preempted again at the next step
    free_floor = int(WATERMARK * w.kv_capacity) if eng.preempts else 0
    if w.closed_loop and eng.staggered_clients and w.osl > 1:  # one output token: nothing to stagger over
        started, rest, used = _staggered(w, eng.preempts, free_floor, state, clock.now())
        waiting = deque(rest)
        for r in started:
            r.adm = next(admitted)
            running[r.adm] = r
            decoders.add(r)
    done: list = []
    warm = w.inflight if w.closed_loop else 0
    target = warm + (measured or 2 * w.inflight) if w.closed_loop else w.inflight
    finished = 0
    full = w.isl + w.osl
    while finished < target:
        # admit waiting requests FCFS while KV and the running limit allow
        while waiting and len(running) < w.max_running:
            need = (waiting[0].prefill_left + waiting[0].ctx if eng.preempts else full) + state
            if used + need + free_floor > w.kv_capacity * (1 + _EPS) and running:
                break
            r = waiting.popleft()
            used += need
            r.adm = next(admitted)
            running[r.adm] = r
            prefilling.append(r)
        if not prefilling:
            if not decoders:  # nothing admitted: the cache cannot hold even one request
                raise InputError(f"the KV cache ({w.kv_capacity} tokens) cannot hold one request")
            adv = cost.spec.tokens_per_step  # tokens each decode step emits per sequence
            k = max(1, math.ceil((decoders.min_left() - decoders.tolerance()) / adv))  # steps
            n = len(decoders)
            if eng.preempts:
                room = (w.kv_capacity - used) // n
                if room < 1:
                    _preempt(running, decoders, waiting)  # no prompt is left here: the newest one decodes
                    used = decoders.keys() + len(decoders) * state
                    continue
                k = max(1, min(k, int(room // adv)))  # a last speculative step may overfill by under `adv`
            keys0 = decoders.keys()
            per_step = cost.decode_step_ms(n, keys0)
            slope = cost.decode_step_ms(n, keys0 + n * adv) - per_step
            clock.gpu += k * per_step + slope * k * (k - 1) / 2.0
            if n <= w.graph_batch:
                clock.graph += k
            else:
                clock.eager += k
            decoders.advance(k * adv)
            if eng.preempts:
                used += k * adv * n
        else:
            n_dec = len(decoders) if eng.mixed_batches else 0
            budget = w.budget - (n_dec if eng.budget_counts_decodes else 0)
            budget = max(budget, 1)
            gpu, sampled = 0.0, n_dec
            lengths = []  # this iteration's prefill chunks
            for r in prefilling:
                if budget <= 0:
                    break
                c = min(r.prefill_left, budget)
                gpu += cost.prefill_attn_ms(c, r.ctx)
                lengths.append(c)
                r.ctx += c
                r.prefill_left -= c
                budget -= c
                if r.prefill_left == 0 and r.first is None:
                    sampled += 1
            gpu += cost.prefill_linear_ms(lengths)
            q, adv = cost.spec.tokens + 1, cost.spec.tokens_per_step
            if n_dec:
                gpu += cost.decode_attn_ms(decoders.keys(), n_dec, q) \
                    + cost.spec.tokens * cost.draft_ms(n_dec, decoders.keys())
                decoders.advance(adv)
                if eng.preempts:
                    used += n_dec * adv
            gpu += cost.tokens_ms(sum(lengths) + n_dec * q) + cost.sample_ms(max(sampled + n_dec * (q - 1), 1))
            clock.gpu += gpu
            clock.eager += 1
        now = clock.now()
        ended = decoders.pop_done()
        still = []
        for r in prefilling:  # a prompt done this iteration: its first token is out; decode, or end at once
            if r.prefill_left > 0:
                still.append(r)
                continue
            if r.first is None:
                r.first = now
            if r.dec_left > 0:
                decoders.add(r)
            else:
                ended.append(r)
        prefilling = still
        for r in sorted(ended, key=lambda r: r.adm):  # in admission order: which count as warm-up
            del running[r.adm]
            finished += 1
            used -= (r.ctx if eng.preempts else full) + state
            if finished > warm:
                done.append((_diff(r.first, r.arrival), _diff(now, r.first), _diff(now, r.arrival)))
            if w.closed_loop:
                waiting.append(_Req(w.isl, w.osl, now))
        if not running:  # a drained cache holds nothing, whatever rounding the fractional tokens left
            used = 0
    return done


def _staggered(w: Workload, preempts: bool, floor: int, state: int, now: tuple) -> tuple[list, list, int]:
    """The steady state of a closed loop whose requests have drifted out of the lock-step of their common
    start (`EngineDefaults.staggered_clients`): as many requests as the running limit and the KV cache (less
    the preempting engines' watermark) hold, spread evenly over their output and admitted most advanced
    first, so each one that finishes is replaced by a prefill of its own; the rest wait as fresh requests.
    `floor`: the KV tokens admission keeps free. Returns (running, waiting, KV tokens used)."""

    def needs(m: int) -> tuple[np.ndarray, np.ndarray]:
        out = np.arange(m) * (w.osl - 1) // m  # tokens already decoded
        return out, (w.isl + out if preempts else np.full(m, w.isl + w.osl)) + state

    lo, hi = 0, min(w.inflight, w.max_running)  # the most requests that fit, by bisection
    while lo < hi:
        m = (lo + hi + 1) // 2
        if needs(m)[1].sum() + floor <= w.kv_capacity:
            lo = m
        else:
            hi = m - 1
    running = []
    if lo:
        outs, need = needs(lo)
        for out in outs[::-1].tolist():
            r = _Req(w.isl, w.osl, now)
            r.prefill_left, r.ctx, r.dec_left, r.first = 0, w.isl + out, w.osl - 1 - out, now
            running.append(r)
    return running, [_Req(w.isl, w.osl, now) for _ in range(w.inflight - lo)], int(need.sum()) if lo else 0


def _preempt(running: dict, decoders: _Decoders, waiting: deque) -> None:
    """vLLM's recompute preemption: the newest running request (a decoding one: preemption happens only in a stretch
    with no prompt left) gives back its blocks and waits at the head of the queue to prefill its whole context again
    (its first token is already out)."""
    _, r = running.popitem()
    decoders.remove(r)
    r.prefill_left, r.ctx = r.ctx + r.prefill_left, 0
    waiting.appendleft(r)
