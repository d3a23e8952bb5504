"""How long this host takes to issue a transformers step: per kernel, per ATen op and per module call.

A small-batch eager step is host-bound: its time is how fast Python, the nn.Module calls and ATen's
dispatcher issue the kernels, and hosts differ by 2x (`experiments/RESULTS.md`, section 11). For each config of
examples/configs, models of 2 and 4 decoder layers (full width, random bf16 weights, built as
`measure_modern.build_model`) run each of `RUNS` as `measure_modern.model_step` does:

- `cpu_ms`: median time until the call returns. CUDA launches are asynchronous, so this is the host's work
  while the GPU keeps up; a step that waits on the GPU (a `.item()` or `nonzero` in MoE routing) has
  `cpu_ms` close to `wall_ms`.
- `wall_ms`: median time until the GPU is done (`torch.cuda.synchronize()`).
- counted in one more step each: `kernels` (torch.profiler's device events), `aten_ops` (every op a
  TorchDispatchMode sees, views included) and `modules` (nn.Module calls, a global forward pre-hook).

The 4-layer minus the 2-layer row gives a layer's host time and counts; the rest is outside the layers.

    python -m experiments.gpu.host_probe --out DIR --budget-s 150              # on a GPU
    python -m experiments.gpu.host_probe --out DIR --device cpu --models qwen3_0_6b --budget-s 60   # a dry run
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

from experiments.gpu.measure_modern import Rows, build_default, busy_time, loop_us, model_step, past_positions

#: configs in priority order (examples/configs; BERT is no causal LM, DeepSeek-V3's layers do not fit 4 at a time)
MODELS = ["llama3_8b", "qwen3_8b", "qwen3_0_6b", "mistral_7b", "qwen2_5_7b", "phi3_mini", "gemma_7b", "gpt2_large",
          "opt_2_7b", "pythia_2_8b", "gemma2_9b", "gemma3_4b", "mixtral_8x7b", "qwen3_30b_a3b", "qwen1_5_moe_a2_7b",
          "gpt_oss_20b", "moonlight_16b_a3b", "llama3_2_1b", "qwen3_4b", "mistral_nemo_12b", "llama3_2_3b",
          "qwen2_5_1_5b", "qwen3_1_7b"]
LAYERS = (2, 4)
#: (mode, attn, batch, seq)
RUNS = [("decode", "sdpa", 1, 256), ("inf", "sdpa", 1, 64), ("train", "sdpa", 1, 64), ("decode", "eager", 1, 256)]
#: timed calls per run, after 3 warm-ups
CALLS = 8
COLUMNS = ["model", "layers", "mode", "attn", "batch", "seq", "cpu_ms", "wall_ms", "calls", "kernels", "aten_ops",
           "modules", "note"]


def host_ms(torch, step, sync, calls: int = CALLS) -> tuple[float, float]:
    """(median ms until `step()` returns, median ms until the device is done) over `calls` calls after 3 warm-ups."""
    for _ in range(3):
        step()
    sync()
    cpu, wall = [], []
    for _ in range(calls):
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        sync()
        cpu.append(t1 - t0)
        wall.append(time.perf_counter() - t0)
    return statistics.median(cpu) * 1e3, statistics.median(wall) * 1e3


def op_and_module_calls(torch, step) -> tuple[int, int]:
    """(ATen ops a TorchDispatchMode sees, nn.Module calls) in one `step()`."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    modules = [0]

    def hook(module, args):
        modules[0] += 1
    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        step()
    finally:
        handle.remove()
    with Count():
        step()
    return Count.n, modules[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=150.0, help="stop starting new models after this")
    ap.add_argument("--models", default="", help="comma-separated configs of examples/configs (default: MODELS)")
    ap.add_argument("--device", default="cuda", help="cuda; cpu for a dry run of the script")
    args = ap.parse_args(argv)
    import torch
    import transformers

    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renamed arguments, once per call
    models = [m.strip() for m in args.models.split(",") if m.strip()] or MODELS
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    env = {"gpu": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
           "transformers": transformers.__version__}
    if cuda:
        a, b, c = (torch.randn(16, device="cuda") for _ in range(3))
        env["host_op_us"] = round(loop_us(torch, lambda: torch.add(a, b, out=c), 2000)[0], 2)
    rows = Rows(out / "host_probe.csv", COLUMNS)
    for name in models:
        if time.time() - t0 > args.budget_s:
            break
        for layers in LAYERS:
            built = {}
            for mode, attn, batch, seq in RUNS:
                base = dict(model=name, layers=layers, mode=mode, attn=attn, batch=batch, seq=seq)
                try:
                    if attn not in built:
                        built.clear()
                        if cuda:
                            torch.cuda.empty_cache()
                        built[attn] = build_default(torch, name, layers, "bf16", attn, args.device)
                    model, _, ran, note = built[attn]
                    if past_positions(model, mode, seq):
                        continue
                    step = model_step(torch, model, mode, batch, seq, device=args.device)
                    cpu_ms, wall_ms = host_ms(torch, step, sync)
                    kernels = busy_time(torch, step, steps=1)[1] if cuda else ""
                    ops, modules = op_and_module_calls(torch, step)
                    rows.add(**{**base, "attn": ran}, cpu_ms=round(cpu_ms, 4), wall_ms=round(wall_ms, 4), calls=CALLS,
                             kernels=kernels, aten_ops=ops, modules=modules, note=note)
                    model.zero_grad(set_to_none=True)
                except Exception as e:  # a family or mode transformers refuses, or out of memory: keep the others
                    rows.add(**base, note=f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}")
            built.clear()
    env["seconds"] = round(time.time() - t0, 1)
    (out / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
