"""Decode steps as serving engines run them: over a StaticCache (fixed shapes and addresses) and replayed
from one CUDA graph, so no host dispatch sits between kernels. Each (model, batch, cache length) gives three
rows of `models.csv` (`cache = static`): `graph` (the fastest replay of the step captured alone), `eager` (the same step
dispatched by PyTorch, CUDA events) and `kernel_sum` (its profiled GPU busy time). Run through
`python -m experiments.gpu.measure_modern --runs graph`.
"""
from __future__ import annotations

import time

from experiments.gpu.measure_modern import (PROFILE_MODELS, Rows, build_default, busy_time, capture, past_positions,
                                            timed_ms)

#: (batch, tokens in the cache) of the decode steps `--runs graph` replays from a CUDA graph
GRAPH_DECODE = [(1, 1024), (8, 2048), (32, 1024), (64, 512), (128, 256), (16, 4096)]
#: timed replays (and eager calls) of each step; the fastest is kept
REPLAYS = 5


def static_decode_step(torch, model, batch: int, seq: int, device: str = "cuda"):
    """(step, reset): one new token per sequence against a StaticCache holding `seq` tokens, and the call
    that rewinds the cache to `seq` tokens. The cache is written in place at its length, a tensor each layer
    advances, so the step has fixed shapes and addresses and can be captured in a CUDA graph; `reset` runs
    before every step, outside any timing, so each step writes the same slot."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=seq + 1)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device=device)
    model.eval()
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=torch.arange(seq, device=device))
    nxt, pos = ids[:, :1].contiguous(), torch.tensor([seq], device=device)
    saved = [(layer, layer.cumulative_length.clone(), getattr(layer, "cumulative_length_int", None))
             for layer in cache.layers]

    def reset():
        for layer, length, length_int in saved:
            layer.cumulative_length.copy_(length)
            if length_int is not None:  # sliding-window layers keep their length on the host too
                layer.cumulative_length_int = length_int

    def step():
        with torch.no_grad():
            model(input_ids=nxt, past_key_values=cache, use_cache=True, cache_position=pos)
    return step, reset


def graph_replay_ms(torch, step, reset) -> float:
    """The step captured alone in one CUDA graph (after 2 warm-ups on the capture stream), its fastest replay."""
    g = capture(torch, step, reset=reset)
    ms = timed_ms(torch, g.replay, reset, REPLAYS)
    del g
    return ms


def measure_graph_decode(torch, rows: Rows, deadline: float, models=tuple(PROFILE_MODELS)) -> None:
    """A decode step as serving engines run it, replayed from a CUDA graph (`note = graph`: no host between
    kernels), beside the same static-cache step run eagerly (`eager`) and its profiled busy time
    (`kernel_sum`); `cache = static`."""
    for name, layers in models:
        if time.time() > deadline:
            return
        try:
            model, n_layers, attn, _ = build_default(torch, name, layers, "bf16", "sdpa")
        except Exception as e:
            rows.add(model=name, note=f"graph build: {type(e).__name__}")
            continue
        for b, s in GRAPH_DECODE:
            if time.time() > deadline:
                break
            if past_positions(model, "decode", s):
                continue
            row = dict(model=name, layers=n_layers, batch=b, seq=s, mode="decode", dtype="bf16", attn=attn,
                       amp=False, cache="static")
            try:
                step, reset = static_decode_step(torch, model, b, s)
                for _ in range(2):
                    reset()
                    step()
                eager = timed_ms(torch, step, reset, REPLAYS)
                rows.add(**row, measured_ms=round(eager, 4), calls=REPLAYS, note="eager")
                busy = []
                for _ in range(3):
                    reset()
                    torch.cuda.synchronize()
                    busy.append(busy_time(torch, step, steps=1))
                rows.add(**row, measured_ms=round(sum(ms for ms, _ in busy) / 3, 4), calls=busy[0][1],
                         note="kernel_sum")
                ms = graph_replay_ms(torch, step, reset)
                rows.add(**row, measured_ms=round(ms, 4), calls=REPLAYS, note="graph")
            except Exception as e:  # out of memory, or a step that cannot be captured (a host sync)
                rows.add(**row, note=f"graph: {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}")
            torch.cuda.empty_cache()
        del model
        torch.cuda.empty_cache()
