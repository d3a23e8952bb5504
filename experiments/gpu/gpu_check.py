"""Check the collector and the shipped predictor against the GPU this runs on, in one command.

Written for a session that is lent a GPU for a few minutes (an H100 needs about 3-4 minutes for the full
run). It measures, with the project's own collector (`hybridperf.datasets.collector`: CUDA events,
mean of the fastest 5 of 25 calls, TF32 off), and compares each measurement with the zero-shot
prediction of the shipped bundle for this GPU:

1. `kernels.csv`: a NeuSight-style fp32 grid, and the same grid in fp16, of every op class (bmm as in attention, linear as in
   transformer layers, ten elementwise ops, softmax and LayerNorm rows of 512-16k elements), at sizes
   whose working sets exceed any L2, like NeuSight's test tables.
2. `gemm.csv`: square torch.mm GEMMs in fp32, fp16 and bf16 (the public-GEMM check of
   `public_gemm_check.py`, measured here instead of crowd-sourced).
3. `burst.csv`: one compute-bound fp32 GEMM timed NeuSight's way right after the GPU idled, and again
   after `--sustain` seconds of back-to-back calls. It shows whether this board runs short kernels
   faster than its sustained power cap allows (RESULTS.md section 1: the L4 does, the T4 does not).
4. `models.csv`: GPT-2-Large and BERT-Large (Hugging Face `transformers`, random weights, eager
   attention), inference and training in fp32 at several batches, timed end to end like NeuSight's labels
   (CUDA events around one forward, or forward + cross-entropy + backward; mean of the fastest 5 of 10
   after 3 warm-ups), against `predict_model`; then what no label covers: activation checkpointing,
   bf16/fp16 models, a 4-layer Llama-3-8B, and decode steps against a key/value cache (`--mode decode`:
   the cache prefilled once, untimed). Each row also has the peak allocated memory against
   `ModelGraph.memory()`. Skipped without `transformers`.
5. `optimizer.csv`: one `torch.optim` step (SGD, SGD with momentum, Adam, AdamW, fused Adam) over
   tensors with GPT-2-Large's parameter sizes (fp32, gradients set), mean of the fastest 5 of 10
   steps after 2 warm-ups, against `predict_model(..., optimizer=...).opt_ms`. Needs no `transformers`.
6. `report.md`: per op class MAPE and 90%-interval coverage, this host's per-call floor (as a share of
   NeuSight's: `hybridperf.priors.kernel_prior.host_floor_note`), GEMM TFLOP/s measured vs prior, the burst
   ratio, the optimizer steps and the model errors; `env.json`: device, driver, torch/CUDA versions, clocks.

    python -m experiments.gpu.gpu_check --out experiments/out/gpu_check            # on the GPU machine
    python -m experiments.gpu.gpu_check --quick --device cpu --as-device "NVIDIA H100 80GB HBM3" --no-models
    python -m experiments.gpu.gpu_check --from experiments/data/measured/h100 --out experiments/out/gpu_check_h100

`--as-device` predicts for a named catalog GPU instead of the one measured (only to smoke-test the script
on a CPU: the comparison is then meaningless). Save what a real GPU measured under
`experiments/data/measured/<gpu>/` with the method above; it is data for checks and for `transfer`,
never for tuning a prior on the GPU it is scored on.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import REPO, add_out_argument
from experiments.gpu.measure_modern import model_step as shared_model_step

from hybridperf.datasets.collector import collect_kernels, fastest_mean, time_calls  # noqa: E402
from hybridperf.datasets.schema import canonicalize  # noqa: E402
from hybridperf.devices import get_device  # noqa: E402
from hybridperf.ops import OP_CLASS  # noqa: E402
from hybridperf.predictor import Predictor  # noqa: E402
from hybridperf.priors.constants import fitted_constants  # noqa: E402
from hybridperf.priors.kernel_prior import host_floor_note  # noqa: E402

ELEMENTWISE = tuple(op for op, cls in OP_CLASS.items() if cls == "elementwise")
MODELS = [  # (config, family, batch, seq, mode, dtype, recompute, layers: None = the config's)
    ("gpt2_large.json", "gpt2", 4, 1024, "inf", "fp32", False, None),
    ("gpt2_large.json", "gpt2", 1, 1024, "train", "fp32", False, None),
    ("bert_large.json", "bert", 8, 512, "inf", "fp32", False, None),
    ("bert_large.json", "bert", 2, 512, "train", "fp32", False, None),
    # a batch sweep on one model: is the error flat in batch, as the labels' is?
    ("gpt2_large.json", "gpt2", 1, 1024, "inf", "fp32", False, None),
    ("gpt2_large.json", "gpt2", 16, 1024, "inf", "fp32", False, None),
    ("bert_large.json", "bert", 32, 512, "inf", "fp32", False, None),
    ("bert_large.json", "bert", 8, 512, "train", "fp32", False, None),
    # not in NeuSight's labels, so never checked before: activation checkpointing, half precision, Llama
    ("gpt2_large.json", "gpt2", 4, 1024, "train", "fp32", True, None),
    ("bert_large.json", "bert", 8, 512, "train", "fp32", True, None),
    ("gpt2_large.json", "gpt2", 4, 1024, "inf", "bf16", False, None),
    ("gpt2_large.json", "gpt2", 4, 1024, "train", "bf16", False, None),
    ("bert_large.json", "bert", 8, 512, "inf", "fp16", False, None),
    ("llama3_8b.json", "llama", 4, 2048, "inf", "bf16", False, 4),
    ("llama3_8b.json", "llama", 1, 2048, "train", "bf16", False, 4),
    # decode steps (--mode decode): seq = tokens already in the key/value cache
    ("gpt2_large.json", "gpt2", 1, 1023, "decode", "fp32", False, None),
    ("gpt2_large.json", "gpt2", 16, 1023, "decode", "fp32", False, None),
    ("llama3_8b.json", "llama", 1, 2048, "decode", "bf16", False, 4),
    ("llama3_8b.json", "llama", 16, 2048, "decode", "bf16", False, 4),
]


def _config(name: str) -> dict:
    """A Hugging Face config of `examples/configs`, parsed."""
    return json.loads((REPO / "examples" / "configs" / name).read_text())


def kernel_grid(quick: bool) -> pd.DataFrame:
    """fp32 shapes of every op class, NeuSight's columns (OPName, B, M, N, K, H)."""
    rows = []
    seqs = (128,) if quick else (512, 1024, 2048)
    heads = (4,) if quick else (32, 128)
    for s in seqs:  # attention: QK^T (M=S, N=64, K=S) and AV (M=S, N=S, K=64)
        for b in heads:
            rows += [("bmm", b, s, 64, s, 0), ("bmm", b, s, s, 64, 0)]
    tokens = (64,) if quick else (512, 2048, 8192)
    widths = ((64, 256),) if quick else ((1024, 4096), (1280, 5120), (2560, 10240))
    for t in tokens:
        for h, f in widths:
            rows += [("linear", 1, t, h, h, 0), ("linear", 1, t, h, f, 0), ("linear", 1, t, f, h, 0)]
    sizes = ((256, 1024),) if quick else ((8192, 4096), (65536, 1024), (16384, 8192))
    for b, h in sizes:
        rows += [(op, b, 0, 0, 0, h) for op in ELEMENTWISE]
    row_lens = (512, 2048) if quick else (512, 1024, 2048, 4096, 8192, 16384)
    for h in row_lens:
        b = max(1, (64 if quick else 2 ** 28) // h)  # 1 GiB of fp32 per row-wise kernel
        rows += [("softmax", b, 0, 0, 0, h), ("ln", b, 0, 0, 0, h)]
    df = pd.DataFrame(rows, columns=["OPName", "B", "M", "N", "K", "H"])
    gemm = df["OPName"].isin(["bmm", "linear"])
    df.loc[gemm, "H"] = np.nan
    df.loc[~gemm, ["M", "N", "K"]] = np.nan
    return df


def _shapes(df: pd.DataFrame) -> pd.DataFrame:
    return canonicalize(df, source="gpu_check grid", on_bad="raise")[["op", "B", "M", "N", "K", "H"]]


def _measured_vs_predicted(pred: Predictor, target: str, shapes: pd.DataFrame, device: str, **collect_kw) -> pd.DataFrame:
    """Collect `shapes` on `device` and predict them for `target`: measured rows plus prior_ms, pred_ms,
    lo_ms, hi_ms and predicted_for."""
    meas = collect_kernels(shapes, device=device, source="gpu_check", **collect_kw).reset_index(drop=True)
    return _predict_into(pred, target, meas)


def _predict_into(pred: Predictor, target: str, meas: pd.DataFrame) -> pd.DataFrame:
    """`meas` with prior_ms, pred_ms, lo_ms, hi_ms and predicted_for of `pred` on `target` (replaced if
    present); square-GEMM tables also get predicted_tflops."""
    out = pred.predict(meas[["OPName", "B", "M", "N", "K", "H", "dtype"]], target)
    meas = meas.copy()
    for c in ("prior_ms", "pred_ms", "lo_ms", "hi_ms"):
        meas[c] = out[c].to_numpy()
    meas["predicted_for"] = target
    if "measured_tflops" in meas.columns:
        meas["predicted_tflops"] = meas["flops"] / meas["pred_ms"] / 1e9
    return meas


def check_kernels(pred: Predictor, target: str, device: str, quick: bool) -> pd.DataFrame:
    """Collect the grid in fp32 (NeuSight's tables) and fp16 (Vidur's dtype; on a GPU only), predict it for
    `target`; one row per kernel with measured and predicted ms."""
    dtypes = ("float32", "float16") if device.startswith("cuda") else ("float32",)
    return pd.concat([_measured_vs_predicted(pred, target, _shapes(kernel_grid(quick)), device, dtype=d)
                      for d in dtypes], ignore_index=True)


def check_square_gemms(pred: Predictor, target: str, device: str, quick: bool) -> pd.DataFrame:
    """torch.mm-sized GEMMs (one linear of n x n x n, no bias term) in fp32, fp16 and bf16."""
    frames = []
    for dtype in ("float32", "float16", "bfloat16"):
        if device == "cpu" and dtype == "float16":
            continue  # CPU half-precision GEMMs are slow and not what this checks
        ns = (128, 256) if quick else (2048, 4096, 8192)
        shapes = _shapes(pd.DataFrame({"OPName": "linear", "B": 1, "M": list(ns), "N": list(ns), "K": list(ns)}))
        meas = _measured_vs_predicted(pred, target, shapes, device, dtype=dtype, progress=False)
        meas["measured_tflops"] = meas["flops"] / meas["latency_ms"] / 1e9
        meas["predicted_tflops"] = meas["flops"] / meas["pred_ms"] / 1e9
        frames.append(meas)
    return pd.concat(frames, ignore_index=True)


def _nvidia_smi(fields: str) -> list[str]:
    """Values of `fields` (nvidia-smi --query-gpu names) for the first GPU, or [] without nvidia-smi."""
    try:
        res = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    lines = res.stdout.strip().splitlines()
    return [v.strip() for v in lines[0].split(",")] if lines else []


def _gpu_state() -> dict:
    """SM clock (MHz), power (W) and temperature (C) from nvidia-smi, or {} where it is absent."""
    try:
        sm, pw, tc = (float(v) for v in _nvidia_smi("clocks.sm,power.draw,temperature.gpu"))
    except ValueError:
        return {}
    return {"sm_mhz": sm, "power_w": pw, "temp_c": tc}


def check_burst(torch, device: str, quick: bool, sustain_s: float) -> pd.DataFrame:
    """One fp32 GEMM timed NeuSight's way (25 calls, fastest 5) after idling and after sustained load."""
    n = 256 if quick else 8192
    cuda = device.startswith("cuda")
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    fn = torch.mm
    rows = []
    time.sleep(0.5 if quick else 5.0)  # let the board cool down and its clocks settle
    for phase in ("after_idle", "after_sustained_load"):
        if phase == "after_sustained_load":
            t_end = time.perf_counter() + sustain_s
            while time.perf_counter() < t_end:
                for _ in range(10):
                    fn(a, b)
                if cuda:
                    torch.cuda.synchronize()
        state = _gpu_state()
        calls = time_calls(torch, fn, (a, b), cuda=cuda, warmup=5, repeats=25)
        ms = fastest_mean(calls, 5)
        rows.append({"phase": phase, "n": n, "latency_ms": ms, "tflops": 2.0 * n ** 3 / ms / 1e9,
                     "median_call_ms": float(np.median(calls)), **state})
    return pd.DataFrame(rows)


TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _hf_model(family: str, cfg: dict, mode: str, dtype: str, recompute: bool, torch, device: str):
    import transformers as tf

    if family == "gpt2":
        conf, cls = tf.GPT2Config(**cfg), tf.GPT2LMHeadModel
    elif family == "llama":
        conf, cls = tf.LlamaConfig(**cfg), tf.LlamaForCausalLM
    else:
        conf = tf.BertConfig(**cfg)
        # NeuSight's BERT inference is a sequence classifier; its training runs pre-training heads
        cls = tf.BertForSequenceClassification if mode == "inf" else tf.BertForPreTraining
    conf._attn_implementation = "eager"
    with torch.device(device):
        model = cls(conf).to(getattr(torch, TORCH_DTYPES[dtype]))
    if recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def model_step(torch, model, family: str, batch: int, seq: int, mode: str, device: str):
    """One pass as NeuSight timed it (`measure_modern.model_step`); BERT's pre-training heads also take the
    next-sentence label."""
    extra = {"next_sentence_label": torch.zeros(batch, dtype=torch.long, device=device)} \
        if family == "bert" and mode == "train" else None
    return shared_model_step(torch, model, mode, batch, seq, device=device, extra_labels=extra)


def time_model(torch, model, family: str, batch: int, seq: int, mode: str, device: str) -> float:
    """Mean of the fastest 5 of 10 end-to-end passes (ms) after 3 warm-ups, CUDA events around each."""
    step = model_step(torch, model, family, batch, seq, mode, device)
    return fastest_mean(time_calls(torch, step, (), cuda=device.startswith("cuda"), warmup=3, repeats=10), 5)


TINY = {"gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 1000, "bos_token_id": 0, "eos_token_id": 0},
        "bert": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 256,
                 "vocab_size": 1000},
        "llama": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "intermediate_size": 128, "vocab_size": 1000}}
LAYER_KEY = {"gpt2": "n_layer", "bert": "num_hidden_layers", "llama": "num_hidden_layers"}


def _model_prediction(row: dict, cfg: dict, target: str, pred: Predictor) -> dict:
    """`row` (a models.csv row) with predict_model's e2e and interval on `target`, and the memory estimate."""
    from hybridperf.graphs import predict_model

    p = predict_model(cfg, int(row["batch"]), int(row["seq"]), row["mode"], target, pred, dtype=row["dtype"],
                      recompute=bool(row["recompute"]), attn="eager")
    ms = row["measured_ms"]
    return {**row, "pred_ms": p.ms, "lo_ms": p.lo_ms, "hi_ms": p.hi_ms, "err_pct": (p.ms / ms - 1) * 100,
            "pred_gb": p.graph.memory().total}


def check_models(torch, target: str, device: str, quick: bool, pred: Predictor,
                 partial: Path | None = None) -> pd.DataFrame:
    """Time each of MODELS end to end and predict it for `target` (`quick`: two-layer toy widths, fp32
    only on a CPU). Also the peak memory the run allocated against `ModelGraph.memory()`. `partial`: a
    CSV rewritten after every model, so that a run cut short keeps what it measured."""

    cuda = device.startswith("cuda")
    rows = []
    for cfg_name, family, batch, seq, mode, dtype, recompute, layers in MODELS:
        cfg = _config(cfg_name)
        if layers is not None:
            cfg[LAYER_KEY[family]] = layers
        if quick:
            cfg, batch, seq = {**cfg, **TINY[family]}, 1, 64
            if not cuda and dtype != "fp32":
                continue
        model = _hf_model(family, cfg, mode, dtype, recompute, torch, device)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        ms = time_model(torch, model, family, batch, seq, mode, device)
        peak_gb = torch.cuda.max_memory_allocated() / 1e9 if cuda else float("nan")
        row = {"model": cfg_name.removesuffix(".json"), "layers": cfg[LAYER_KEY[family]], "batch": batch,
               "seq": seq, "mode": mode, "dtype": dtype, "recompute": recompute, "measured_ms": ms,
               "peak_gb": peak_gb}
        rows.append(_model_prediction(row, cfg, target, pred))
        if partial is not None:
            pd.DataFrame(rows).to_csv(partial, index=False)
        del model
        if cuda:
            torch.cuda.empty_cache()
    return pd.DataFrame(rows)


OPTIMIZERS = {  # our name -> torch.optim constructor keywords (foreach is torch's CUDA default)
    "sgd": ("SGD", {"lr": 0.01, "foreach": True}),
    "sgd-momentum": ("SGD", {"lr": 0.01, "momentum": 0.9, "foreach": True}),
    "adam": ("Adam", {"foreach": True}),
    "adamw": ("AdamW", {"foreach": True}),
    "adam-fused": ("Adam", {"fused": True}),
}


def check_optimizer(torch, target: str, device: str, quick: bool, pred: Predictor) -> pd.DataFrame:
    """Time one optimizer step over GPT-2-Large's parameter tensors and predict it for `target`."""
    from hybridperf.graphs import build_graph, predict_model
    from hybridperf.graphs.optimizer import optimizer_spec, param_numels

    def streams(name):  # parameter-sized tensors one step reads and writes
        return sum(op.streams for op in optimizer_spec(name).ops if not op.steps)

    cfg = _config("gpt2_large.json")
    if quick:
        cfg = {**cfg, **TINY["gpt2"]}
    numels = param_numels(build_graph(cfg, 1, 64, "train"))
    rows = []
    for name, (cls, kw) in OPTIMIZERS.items():
        if kw.get("fused") and not device.startswith("cuda"):
            continue  # fused Adam runs on accelerators only
        params = [torch.zeros(n, device=device, requires_grad=True) for n in numels]
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        opt = getattr(torch.optim, cls)(params, **kw)
        ms = fastest_mean(time_calls(torch, opt.step, (), cuda=device.startswith("cuda"), warmup=2, repeats=10), 5)
        p = predict_model(cfg, 1, 64, "train", target, pred, optimizer=name, attn="eager")
        rows.append({"optimizer": name, "params": int(sum(numels)), "tensors": len(numels), "measured_ms": ms,
                     "pred_ms": p.opt_ms, "err_pct": (p.opt_ms / ms - 1) * 100,
                     "measured_gbs": 4.0 * streams(name) * sum(numels) / ms / 1e6})
        del opt, params
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def write_report(out: Path, env: dict, kernels: pd.DataFrame, gemm: pd.DataFrame, burst: pd.DataFrame,
                 models: pd.DataFrame | None, optimizer: pd.DataFrame | None = None) -> None:
    k = kernels.assign(ratio=kernels["pred_ms"] / kernels["latency_ms"],
                       prior_ape=(kernels["prior_ms"] / kernels["latency_ms"] - 1).abs() * 100,
                       covered=(kernels["lo_ms"] <= kernels["latency_ms"]) & (kernels["latency_ms"] <= kernels["hi_ms"]))
    k["ape"] = (k["ratio"] - 1).abs() * 100
    per = (k.groupby(["op_class", "dtype"]).agg(n=("ape", "size"), prior_mape=("prior_ape", "mean"), mape=("ape", "mean"),
                                     coverage_pct=("covered", "mean"), median_ratio=("ratio", "median"))
           .reset_index())
    per["coverage_pct"] *= 100
    L = [f"# GPU check: {env['measured_on']} (predicted as {env['predicted_for']})", "",
         (f"torch {env['torch']}, CUDA {env['cuda']}, driver {env.get('driver', '-')}, "
          f"{time.strftime('%Y-%m-%d')}. Zero-shot shipped bundle; method in `experiments/gpu/gpu_check.py`."
          + (f" Predictions re-run on the measurements of `{env['repredicted_from']}`." if "repredicted_from" in env else "")),
         "",
         "## Kernels (NeuSight methodology): MAPE %, 90% coverage %, median predicted/measured", ""]
    note = host_floor_note(kernels, get_device(env["predicted_for"]), constants=fitted_constants(env["predicted_for"]))
    L += [per.to_markdown(index=False, floatfmt=".3g"), "",
          f"{note}." if note else "No floor-bound kernel to read this host's per-call floor on.", "",
          "## Square GEMMs: TFLOP/s measured vs predicted", ""]
    L += [gemm[["dtype", "M", "latency_ms", "measured_tflops", "predicted_tflops"]].to_markdown(index=False, floatfmt=".3g")]
    L += ["", "## Burst: the same fp32 GEMM after idling and after sustained load", "",
          burst.to_markdown(index=False, floatfmt=".3g")]
    if optimizer is not None and len(optimizer):
        L += ["", "## Optimizer step (GPT-2-Large's parameter tensors, fp32)", "",
              optimizer.to_markdown(index=False, floatfmt=".3g")]
    if models is not None and len(models):
        L += ["", "## Whole models (eager attention)", "", models.to_markdown(index=False, floatfmt=".3g")]
    (out / "report.md").write_text("\n".join(L) + "\n")


def repredict(src: Path, out: Path, target: str | None = None) -> dict:
    """Re-run the predictions of a saved gpu_check directory `src` with the current code and bundle
    (for `target`, default: the GPU it was measured on) and write the tables and report to `out`. The
    measurements are kept as they are; only predicted columns change."""
    from hybridperf.graphs import predict_model

    env = json.loads((src / "env.json").read_text())
    target = target or env["measured_on"]
    env = {**env, "predicted_for": target, "repredicted_from": str(src)}
    pred = Predictor.load().with_constants(fitted_constants(target))  # never the constants of its own data
    tables = {n: pd.read_csv(src / f"{n}.csv") for n in ("kernels", "gemm", "burst", "optimizer", "models")
              if (src / f"{n}.csv").is_file()}
    family = {c.removesuffix(".json"): f for c, f, *_ in MODELS}
    for n in ("kernels", "gemm"):
        tables[n] = _predict_into(pred, target, tables[n])
    if "models" in tables:
        rows = []
        for r in tables["models"].to_dict("records"):
            cfg = _config(f"{r['model']}.json")
            cfg[LAYER_KEY[family[r["model"]]]] = int(r["layers"])
            rows.append(_model_prediction(r, cfg, target, pred))
        tables["models"] = pd.DataFrame(rows)
    if "optimizer" in tables:  # GPT-2-Large's full parameter set, as measured
        cfg, opt = _config("gpt2_large.json"), tables["optimizer"]
        opt["pred_ms"] = [predict_model(cfg, 1, 64, "train", target, pred, optimizer=n, attn="eager").opt_ms
                          for n in opt["optimizer"]]
        opt["err_pct"] = (opt["pred_ms"] / opt["measured_ms"] - 1) * 100
    out.mkdir(parents=True, exist_ok=True)
    for n, t in tables.items():
        t.to_csv(out / f"{n}.csv", index=False)
    (out / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    write_report(out, env, tables["kernels"], tables["gemm"], tables["burst"], tables.get("models"),
                 tables.get("optimizer"))
    return tables


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_out_argument(ap, "gpu_check")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--as-device", default=None, help="catalog GPU to predict for (default: the measured one)")
    ap.add_argument("--quick", action="store_true", help="tiny shapes (a smoke test of the script)")
    ap.add_argument("--no-models", action="store_true", help="skip the whole-model timing")
    ap.add_argument("--sustain", type=float, default=15.0, help="seconds of load before the second burst timing")
    ap.add_argument("--from", dest="src", default=None,
                    help="a saved gpu_check directory: measure nothing, re-predict its tables with the current code")
    a = ap.parse_args(argv)
    if a.src:
        repredict(Path(a.src), Path(a.out), a.as_device)
        print((Path(a.out) / "report.md").read_text())
        return 0

    import torch

    device = (a.device or ("cuda" if torch.cuda.is_available() else "cpu")).lower()
    measured_on = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    target = a.as_device or measured_on
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    pred = Predictor.load().with_constants(fitted_constants(target))  # as in repredict: never its own data's
    env = {"measured_on": measured_on, "predicted_for": target, "torch": torch.__version__,
           "cuda": torch.version.cuda or "-", "gpu_state_at_start": _gpu_state()}
    env["driver"] = (_nvidia_smi("driver_version") or ["-"])[0]

    t0 = time.perf_counter()
    kernels = check_kernels(pred, target, device, a.quick)
    kernels.to_csv(out / "kernels.csv", index=False)
    gemm = check_square_gemms(pred, target, device, a.quick)
    gemm.to_csv(out / "gemm.csv", index=False)
    burst = check_burst(torch, device, a.quick, 0.5 if a.quick else a.sustain)
    burst.to_csv(out / "burst.csv", index=False)
    optimizer = check_optimizer(torch, target, device, a.quick, pred)
    optimizer.to_csv(out / "optimizer.csv", index=False)
    models = None
    if not a.no_models:
        try:
            import transformers
        except ImportError:
            print("transformers is not installed: whole-model timing skipped", file=sys.stderr)
        else:
            env["transformers"] = transformers.__version__
            models = check_models(torch, target, device, a.quick, pred, partial=out / "models.csv")
    env["seconds"] = round(time.perf_counter() - t0, 1)
    (out / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    write_report(out, env, kernels, gemm, burst, models, optimizer)
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
