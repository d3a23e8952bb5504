"""Where a whole model's time goes on the GPU this runs on: per aten op, the kernel time torch.profiler
attributes to it, against the step's end-to-end time; and torch.compile'd inference end to end.

For each model of `gpu_check.MODELS` in one dtype (`--dtype`, fp32 by default: NeuSight's semantics;
bf16 or fp16 profile the half-precision rows, Llama's 4-layer cut included) it writes one row per
(model, aten op) with the op's call count and its kernels' device time in one step, plus the step's
end-to-end time (CUDA events, as `gpu_check.time_model`), so that the share of the step that no kernel
covers (launch gaps, host work) can be read off. `--compile` also times the first two
inference rows under `torch.compile` (default mode) against `predict_model(..., fused=True)`.

    python -m experiments.gpu.model_profile --out experiments/out/model_profile      # on a GPU machine
    python -m experiments.gpu.model_profile --dtype bf16 --out experiments/out/model_profile_bf16

    python -m experiments.gpu.model_profile --report experiments/data/measured/h100/model_profile    # anywhere

`--report` maps a saved profile's aten ops to hybridperf's op groups (`ATEN_GROUP`; unlisted ops are
elementwise) and compares each group's kernel time with the device time of the predicted breakdown for
that GPU (the batched-SGEMM tiles of the other GPUs' traces only), and the time outside the kernels
with the composition's per-kernel gap (`report`).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import add_out_argument

from experiments.gpu.gpu_check import LAYER_KEY, MODELS, _config, _hf_model, model_step, time_model


#: aten op (without `aten::`) -> hybridperf op group, as `graphs.kernels` files the same work: the loss's
#: log-softmax with softmax, bias-gradient sums (`misc:reduce`), copies and masks with memory;
#: everything else that ran a kernel is elementwise
ATEN_GROUP = {
    "mm": "linear", "addmm": "linear", "bmm": "bmm",
    "_softmax": "softmax", "_softmax_backward_data": "softmax",
    "_log_softmax": "softmax", "_log_softmax_backward_data": "softmax",
    "native_layer_norm": "layernorm", "native_layer_norm_backward": "layernorm",
    "copy_": "memory", "cat": "memory", "clone": "memory", "fill_": "memory", "zero_": "memory",
    "sum": "memory", "masked_fill": "memory", "where": "memory",
    "embedding": "embedding", "embedding_dense_backward": "embedding", "index_select": "embedding",
    "gather": "embedding",
}


def report(src: Path) -> pd.DataFrame:
    """Per model and op group: measured kernel time (ms per step) against our predicted device time.

    The profiler's kernel time holds no launch gaps, so each group is compared with the device part of
    our in-model time, scale * max(pred - harness floor, 0) per kernel (`graphs.compose.in_model_ms`),
    without the per-kernel gap. Two more rows: `gaps and host` (the step's end-to-end time no kernel
    covers, against our gap x kernels launched) and `end to end`."""
    from hybridperf.graphs import predict_model
    from hybridperf.graphs.compose import composition_params
    from hybridperf.graphs.compose import resolve_predictor
    from hybridperf.priors.constants import fitted_constants

    ops = pd.read_csv(src / "ops.csv")
    ops = ops[ops["aten_op"].str.startswith("aten::")]
    ops["group"] = [ATEN_GROUP.get(a.removeprefix("aten::"), "elementwise") for a in ops["aten_op"]]
    device = json.loads((src / "env.json").read_text())["device"]
    rows = []
    for s in pd.read_csv(src / "steps.csv").to_dict("records"):
        cfg = _config(f"{s['model']}.json")
        family = cfg.get("model_type", "gpt2")
        if family in LAYER_KEY and "layers" in s:
            cfg[LAYER_KEY[family]] = int(s["layers"])  # a profiled cut of the model (Llama's 4 layers)
        held_out = resolve_predictor(warn=False).with_constants(fitted_constants(device))
        p = predict_model(cfg, int(s["batch"]), int(s["seq"]), s["mode"], device, held_out,
                          dtype=str(s.get("dtype", "fp32")), attn="eager")
        par = composition_params(p.kind, s["mode"])
        k, bias = p.kernels, float(np.exp(p.log_bias))
        body = par["scale"] * np.maximum(k["pred_ms"] - k["floor_ms"], 0.0) * k["count"] * bias
        ours = body.groupby(k["group"]).sum()
        mine = (ops["model"] == s["model"]) & (ops["batch"] == s["batch"]) & (ops["mode"] == s["mode"])
        if "dtype" in ops.columns:
            mine &= ops["dtype"] == s.get("dtype", "fp32")
        meas = ops[mine].groupby("group")["kernel_ms"].sum()
        tag = {"model": s["model"], "batch": s["batch"], "mode": s["mode"]}
        for g in sorted(set(ours.index) | set(meas.index)):
            rows.append({**tag, "group": g, "measured_ms": float(meas.get(g, 0.0)), "ours_ms": float(ours.get(g, 0.0))})
        rows.append({**tag, "group": "gaps and host", "measured_ms": s["e2e_ms"] - float(meas.sum()),
                     "ours_ms": p.ms - float(ours.sum())})
        rows.append({**tag, "group": "end to end", "measured_ms": s["e2e_ms"], "ours_ms": p.ms})
    out = pd.DataFrame(rows)
    out["ratio"] = out["ours_ms"] / out["measured_ms"]
    return out


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
    add_out_argument(ap, "model_profile")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile'd inference")
    ap.add_argument("--report", default=None, help="a saved profile directory: compare it with the predictions")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"),
                    help="profile the gpu_check.MODELS rows of this dtype (default: fp32, NeuSight's)")
    a = ap.parse_args(argv)
    if a.report:
        tab = report(Path(a.report))
        wide = tab[tab["group"] != "gaps and host"].pivot_table(index="group", columns=["model", "batch", "mode"],
                                                                  values="ratio").round(2)
        gaps = tab[tab["group"] == "gaps and host"].set_index(["model", "batch", "mode"])[["measured_ms", "ours_ms"]]
        print(f"predicted / measured per op group, {a.report}\n")
        print(wide.to_markdown())
        print("\ngaps and host, ms per step (end to end minus the kernels' time)\n")
        print(gaps.round(1).to_markdown())
        return 0
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
        if dtype != a.dtype or recompute or key in seen:
            continue
        seen.add(key)
        cfg = _config(cfg_name)
        if layers is not None:
            cfg[LAYER_KEY[family]] = layers
        model = _hf_model(family, cfg, mode, dtype, recompute, torch, "cuda")
        e2e = time_model(torch, model, family, batch, seq, mode, "cuda")
        prof = profile_step(torch, model_step(torch, model, family, batch, seq, mode, "cuda"))
        tag = {"model": cfg_name.removesuffix(".json"), "layers": cfg[LAYER_KEY[family]], "batch": batch,
               "seq": seq, "mode": mode, "dtype": dtype}
        ops.append(prof.assign(**tag))
        steps.append({**tag, "e2e_ms": e2e, "kernel_sum_ms": prof["kernel_ms"].sum()})
        print(steps[-1], flush=True)
        if a.compile and mode == "inf" and len(compiled) < 2:  # compiling takes a minute each
            try:
                ms = time_model(torch, torch.compile(model), family, batch, seq, mode, "cuda")
            except Exception as e:  # noqa: BLE001 - a compiler missing on the machine must not lose the profiles
                print(f"torch.compile failed: {type(e).__name__}: {e}"[:300], file=sys.stderr)
            else:
                p = predict_model(cfg, batch, seq, mode, target, fused=True, dtype=dtype, attn="eager")
                compiled.append({**tag, "measured_ms": ms, "eager_ms": e2e, "pred_fused_ms": p.ms,
                                 "err_pct": (p.ms / ms - 1) * 100})
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
