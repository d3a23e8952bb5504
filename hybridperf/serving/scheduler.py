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

import math
from dataclasses import dataclass

import numpy as np

from hybridperf.errors import InputError
from hybridperf.serving.cost import StepCost
from hybridperf.serving.engines import EngineDefaults


#: share of the KV cache an engine that preempts keeps free when it admits a request
WATERMARK = 0.05


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
    __slots__ = ("arrival", "prefill_left", "ctx", "dec_left", "first")

    def __init__(self, isl: int, osl: int, arrival: tuple):
        self.arrival, self.prefill_left, self.ctx, self.dec_left = arrival, isl, 0, osl - 1
        self.first = None


def simulate(cost: StepCost, eng: EngineDefaults, w: Workload, measured: int | None = None) -> list:
    """Per finished request: (ttft components, decode components, e2e components), each a
    (gpu_ms, eager, graph) triple. Closed loop: the first `inflight` completions are warm-up and the next
    `measured` (default 2 x inflight) are returned; offline: all, with the last finish as e2e."""
    clock = _Clock()
    waiting = [_Req(w.isl, w.osl, clock.now()) for _ in range(w.inflight)]
    running: list = []  # admitted requests (prefilling or decoding), admission order
    used = 0  # KV tokens held (non-preempting engines: reserved in full at admission)
    state = cost.state_tokens  # a linear-attention model's per-sequence state, held while it runs
    # admitting by the blocks in use keeps a watermark free for the running decodes to grow into
    # (vLLM's `watermark`, SGLang's new-token reservation); without it a preempted request would come
    # straight back and be preempted again at the next step
    free_floor = int(WATERMARK * w.kv_capacity) if eng.preempts else 0
    if w.closed_loop and eng.staggered_clients:
        running, waiting, used = _staggered(w, eng.preempts, free_floor, state, clock.now())
    done: list = []
    warm = w.inflight if w.closed_loop else 0
    target = warm + (measured or 2 * w.inflight) if w.closed_loop else w.inflight
    finished = 0
    full = w.isl + w.osl
    while finished < target:
        # admit waiting requests FCFS while KV and the running limit allow
        while waiting and len(running) < w.max_running:
            need = (waiting[0].prefill_left + waiting[0].ctx if eng.preempts else full) + state
            if used + need + free_floor > w.kv_capacity and running:
                break
            r = waiting.pop(0)
            used += need
            running.append(r)
        decoders = [r for r in running if r.prefill_left == 0 and r.dec_left > 0]
        prefilling = [r for r in running if r.prefill_left > 0]
        if not prefilling:
            if not decoders:  # nothing admitted: the cache cannot hold even one request
                raise InputError(f"the KV cache ({w.kv_capacity} tokens) cannot hold one request")
            adv = cost.spec.tokens_per_step  # tokens each decode step emits per sequence
            k = math.ceil(min(r.dec_left for r in decoders) / adv)  # steps
            if eng.preempts:
                room = (w.kv_capacity - used) // len(decoders)
                if room < 1:
                    _preempt(running, waiting)
                    used = sum(r.ctx + r.prefill_left + state for r in running)
                    continue
                k = max(1, min(k, int(room // adv)))  # a last speculative step may overfill by under `adv`
            n = len(decoders)
            keys0 = sum(r.ctx for r in decoders)
            per_step = cost.decode_step_ms(n, keys0)
            slope = cost.decode_step_ms(n, keys0 + n * adv) - per_step
            clock.gpu += k * per_step + slope * k * (k - 1) / 2.0
            if n <= w.graph_batch:
                clock.graph += k
            else:
                clock.eager += k
            for r in decoders:
                r.ctx += k * adv
                r.dec_left -= k * adv
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
                keys = sum(r.ctx for r in decoders)
                gpu += cost.decode_attn_ms(keys, n_dec, q) + cost.spec.tokens * cost.draft_ms(n_dec, keys)
                for r in decoders:
                    r.ctx += adv
                    r.dec_left -= adv
                if eng.preempts:
                    used += n_dec * adv
            gpu += cost.tokens_ms(sum(lengths) + n_dec * q) + cost.sample_ms(max(sampled + n_dec * (q - 1), 1))
            clock.gpu += gpu
            clock.eager += 1
            now = clock.now()
            for r in prefilling:
                if r.prefill_left == 0 and r.first is None:
                    r.first = now
        now = clock.now()
        still = []
        for r in running:
            if r.prefill_left == 0 and r.first is None:
                r.first = now
            if r.prefill_left == 0 and r.dec_left <= 0:
                finished += 1
                used -= (r.ctx if eng.preempts else full) + state
                if finished > warm:
                    done.append((_diff(r.first, r.arrival), _diff(now, r.first), _diff(now, r.arrival)))
                if w.closed_loop:
                    waiting.append(_Req(w.isl, w.osl, now))
            else:
                still.append(r)
        running = still
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


def _preempt(running: list, waiting: list) -> None:
    """vLLM's recompute preemption: the newest running request gives back its blocks and waits at the
    head of the queue to prefill its whole context again (its first token is already out)."""
    r = running.pop()
    r.prefill_left, r.ctx = r.ctx + r.prefill_left, 0
    waiting.insert(0, r)
