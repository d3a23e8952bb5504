"""Where a bf16 MoE decoder's time goes under transformers 5.x (SDPA, eager dispatch), beside a dense one:
per profiler key (an aten op or a kernel), its calls, host (self CPU) time and device time per step.

`predict-model` under-predicts bf16 MoE runs by 15-25% (`experiments/RESULTS.md`, section 8); this profile
places the missing time among the router, the expert dispatch and the grouped GEMMs. Models are built
as `measure_modern.build_model` does (random weights on the GPU, few layers), steps as
`measure_modern.model_step`; `e2e_ms` is the CUDA-event time of one step (`measure_modern.call_ms`). An aten
op's self device time is its kernels' time, so sum `device_ms` over kernel rows (`is_kernel`) or over aten
rows, not both. `--models` and `--runs` profile any config of examples/configs at any shape (a family
without SDPA runs eager, as transformers' default does).

    python -m experiments.gpu.moe_profile --out experiments/data/measured/h100/moe_profile   # on a GPU
    python -m experiments.gpu.moe_profile --out DIR --models gpt_oss_20b:4,phi3_mini:4 --runs inf:4:2048,decode:64:1024
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from experiments.gpu.measure_modern import MODES, build_default, call_ms, model_step, parse_models, past_positions

#: (config, decoder layers built): two MoE families and a dense control
MODELS = [("qwen3_30b_a3b", 4), ("mixtral_8x7b", 2), ("llama3_8b", 4)]
#: (mode, batch, seq)
RUNS = [("inf", 4, 2048), ("inf", 1, 256), ("decode", 8, 1024), ("decode", 64, 1024)]
COLUMNS = ["model", "layers", "attn", "mode", "batch", "seq", "e2e_ms", "key", "is_kernel", "calls", "cpu_ms",
           "device_ms"]


def profile_rows(torch, step, steps: int = 3) -> list[dict]:
    """Per profiler key: calls, self CPU ms and self device ms per step, averaged over `steps` steps."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    rows = []
    for e in prof.key_averages():
        dev_us = getattr(e, "self_device_time_total", None) or 0.0
        if dev_us <= 0 and e.self_cpu_time_total <= 0:
            continue
        rows.append({"key": e.key[:160], "is_kernel": e.device_type == cuda, "calls": e.count / steps,
                     "cpu_ms": round(e.self_cpu_time_total / 1e3 / steps, 5),
                     "device_ms": round(dev_us / 1e3 / steps, 5)})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="", help="comma-separated config[:layers] (default: MODELS)")
    ap.add_argument("--runs", default="", help="comma-separated mode:batch:seq (default: RUNS)")
    args = ap.parse_args(argv)
    models = parse_models(args.models, MODELS)
    try:
        runs = [(m, int(b), int(s)) for m, b, s in (r.split(":") for r in args.runs.split(",") if r)] or RUNS
    except ValueError:
        raise SystemExit(f"error: --runs takes mode:batch:seq items, got {args.runs!r}") from None
    if any(m not in MODES or b < 1 or s < 1 for m, b, s in runs):
        raise SystemExit(f"error: --runs: modes are {', '.join(MODES)}, batch and seq positive; got {args.runs!r}")
    import torch
    import transformers

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "env.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                              "transformers": transformers.__version__}))
    with (out / "profile.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        for name, layers in models:
            model, n_layers, attn, _ = build_default(torch, name, layers, "bf16", "sdpa")
            for mode, b, s in runs:
                if past_positions(model, mode, s + 4):  # profile_rows runs the step 4 more times
                    print(f"skipped {name} {mode} {b}x{s}: past the model's position table", flush=True)
                    continue
                step = model_step(torch, model, mode, b, s)
                e2e = call_ms(torch, step)[0]
                tag = {"model": name, "layers": n_layers, "attn": attn, "mode": mode, "batch": b, "seq": s,
                       "e2e_ms": round(e2e, 4)}
                for r in profile_rows(torch, step):
                    w.writerow({**tag, **r})
                f.flush()
                print(tag, flush=True)
                del step  # its closure holds the cache
                torch.cuda.empty_cache()
            del model
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
