"""Where a whole model's time goes on the GPU this runs on: per aten op, the kernel time torch.profiler
attributes to it, against the step's end-to-end time; and torch.compile'd inference end to end.

For each model of `gpu_check.MODELS` (fp32 rows only, NeuSight's semantics) it writes one row per
(model, aten op) with the op's call count and its kernels' device time in one step, plus the step's
end-to-end time (CUDA events, as `gpu_check.time_model`), so that the share of the step that no kernel
covers (launch gaps, host work) can be read off. `--compile` also times the first two
inference rows under `torch.compile` (default mode) against `predict_model(..., fused=True)`.

    python experiments/model_profile.py --out experiments/out/model_profile      # on a GPU machine

`experiments/model_profile_report.py` maps the aten ops to hybridperf's op groups and compares them with
the predicted breakdown.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))
sys.path.insert(0, str(REPO))

from gpu_check import LAYER_KEY, MODELS, _hf_model, time_model  # noqa: E402


def _step(torch, model, family: str, batch: int, seq: int, mode: str):
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device="cuda")
    if mode == "inf":
        model.eval()

        def step():
            with torch.no_grad():
                model(input_ids=ids)
        return step
    model.train()
    kw = {"labels": ids}
    if family == "bert":
        kw["next_sentence_label"] = torch.zeros(batch, dtype=torch.long, device="cuda")

    def step():
        model(input_ids=ids, **kw).loss.backward()
    return step


def profile_step(torch, step, steps: int = 3) -> pd.DataFrame:
    """aten op -> calls and kernel time (ms) per step, averaged over `steps` profiled steps."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        dev_us = getattr(e, "self_device_time_total", None)
        if dev_us is None:
            dev_us = e.self_cuda_time_total
        if dev_us > 0:
            rows.append({"aten_op": e.key, "calls": e.count / steps, "kernel_ms": dev_us / 1e3 / steps})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "experiments" / "out" / "model_profile"))
    ap.add_argument("--compile", action="store_true", help="also time torch.compile'd inference")
    a = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("model_profile needs a CUDA GPU", file=sys.stderr)
        return 1
    from hybridperf.graphs import predict_model

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    target = torch.cuda.get_device_name()
    ops, steps, compiled = [], [], []
    seen = set()
    for cfg_name, family, batch, seq, mode, dtype, recompute, layers in MODELS:
        key = (cfg_name, batch, seq, mode)
        if dtype != "fp32" or recompute or layers is not None or key in seen:
            continue
        seen.add(key)
        cfg = json.loads((REPO / "examples" / "configs" / cfg_name).read_text())
        model = _hf_model(family, cfg, mode, dtype, recompute, torch, "cuda")
        e2e = time_model(torch, model, family, batch, seq, mode, "cuda")
        prof = profile_step(torch, _step(torch, model, family, batch, seq, mode))
        tag = {"model": cfg_name.removesuffix(".json"), "layers": cfg[LAYER_KEY[family]], "batch": batch,
               "seq": seq, "mode": mode}
        ops.append(prof.assign(**tag))
        steps.append({**tag, "e2e_ms": e2e, "kernel_sum_ms": prof["kernel_ms"].sum()})
        print(steps[-1], flush=True)
        if a.compile and mode == "inf" and len(compiled) < 2:  # compiling takes a minute each
            try:
                ms = time_model(torch, torch.compile(model), family, batch, seq, mode, "cuda")
            except Exception as e:  # noqa: BLE001 - a compiler missing on the machine must not lose the profiles
                print(f"torch.compile failed: {type(e).__name__}: {e}"[:300], file=sys.stderr)
            else:
                p = predict_model(cfg, batch, seq, mode, target, fused=True)
                compiled.append({**tag, "measured_ms": ms, "eager_ms": e2e, "pred_fused_ms": p["e2e_ms"],
                                 "err_pct": (p["e2e_ms"] / ms - 1) * 100})
                print(compiled[-1], flush=True)
        del model
        torch.cuda.empty_cache()
    pd.concat(ops, ignore_index=True).to_csv(out / "ops.csv", index=False)
    pd.DataFrame(steps).to_csv(out / "steps.csv", index=False)
    if compiled:
        pd.DataFrame(compiled).to_csv(out / "compiled.csv", index=False)
    (out / "env.json").write_text(json.dumps({"device": target, "torch": torch.__version__}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
