"""Measure today's single-GPU LLM execution on a lent GPU: whole bf16 models under transformers'
SDPA and eager attention (inference, decode against a KV cache, training, AMP training), and the
kernels under them (bf16 and fp8 GEMMs, SDPA forward/backward, SDPA decode).

Needs only torch and transformers (>= 5) on the GPU machine; writes CSVs and env.json to --out, row by
row, so a run cut short keeps what it measured. Method (written into README.md beside the CSVs):

- models: `AutoModelForCausalLM.from_config` with random weights built on the GPU, cast to `--dtype`
  (bf16; `amp` rows keep fp32 weights and run the step under `torch.autocast(bfloat16)`),
  `attn_implementation` sdpa or eager. CUDA events around one call: `inf` = forward under no_grad,
  `train` = forward + cross-entropy (labels = inputs) + backward (gradients accumulate in .grad),
  `decode` = one new token per sequence against a cache of `seq` tokens (it grows a token a call, at most
  `DECODE_GROWTH` over the run, as in generate(); every run saved so far cropped it back wherever
  transformers could, see `../data/measured/h100/families/README.md`). 2 warm-ups, then up to 8 calls within
  ~1.5 s; `measured_ms` is the mean of the fastest half, `median_ms` the median.
- env.json: the GPU and software, and `host_op_us`, this host's time to dispatch one tiny eager op (2,000
  `torch.add` calls on 16 elements, no sync between them): host-bound runs move with it (`../data/measured/h100/`).
- kernels: each call captured `GRAPH_CALLS` times in one CUDA graph, the graph replayed 3 times after a
  warm-up; `latency_ms` = fastest replay / GRAPH_CALLS (kernel time back to back, no host launch cost,
  as aiconfigurator's collectors time kernels inside graphs).
- `--runs graph` (`graph_decode.py`): decode steps over a StaticCache replayed from a CUDA graph, as serving
  engines run decode, beside the same step run eagerly and its profiled busy time.

    python -m experiments.gpu.measure_modern --out experiments/data/measured/h200/modern --budget-s 400
"""
from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

from experiments.common import REPO
CONFIGS = REPO / "examples" / "configs"
GRAPH_CALLS = 20

#: (config, layers or None for all) in priority order; big MoE models run with fewer layers
MODELS = [("gpt2_large", None), ("llama3_8b", None), ("qwen3_1_7b", None), ("qwen3_8b", None), ("qwen3_0_6b", None),
          ("qwen3_30b_a3b", 8), ("mixtral_8x7b", 4)]
#: (mode, dtype, attn, amp, batch, seq)
RUNS = [("inf", "bf16", "sdpa", False, 1, 512), ("inf", "bf16", "sdpa", False, 4, 1024),
        ("inf", "bf16", "sdpa", False, 16, 512), ("inf", "bf16", "eager", False, 4, 1024),
        ("decode", "bf16", "sdpa", False, 1, 1024), ("decode", "bf16", "sdpa", False, 8, 2048),
        ("decode", "bf16", "sdpa", False, 32, 1024), ("decode", "bf16", "eager", False, 8, 2048),
        ("train", "bf16", "sdpa", False, 1, 1024), ("train", "bf16", "sdpa", False, 4, 512),
        ("train", "fp32", "sdpa", True, 1, 1024), ("inf", "fp32", "sdpa", False, 1, 1024)]
#: a second set of shapes (`--runs extra`), for more points per model on the same GPU
RUNS_EXTRA = [("inf", "bf16", "sdpa", False, 2, 2048), ("inf", "bf16", "sdpa", False, 8, 1024),
              ("inf", "bf16", "sdpa", False, 1, 128), ("decode", "bf16", "sdpa", False, 1, 4096),
              ("decode", "bf16", "sdpa", False, 64, 512), ("decode", "bf16", "sdpa", False, 128, 256),
              ("train", "bf16", "sdpa", False, 2, 1024), ("train", "bf16", "sdpa", False, 1, 256),
              ("train", "fp32", "sdpa", True, 4, 512), ("inf", "bf16", "eager", False, 1, 512),
              ("train", "bf16", "eager", False, 1, 1024)]
GEMM_NK = [(4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (28672, 4096), (128256, 4096)]
GEMM_M = [1, 8, 32, 128, 512, 2048, 8192]
GEMM_NK_EXTRA = [(2048, 2048), (3072, 1024), (1024, 3072), (6144, 2048), (2048, 6144), (151936, 2048),
                 (8192, 8192), (57344, 8192), (8192, 28672), (5120, 5120), (27648, 5120)]
GEMM_M_EXTRA = [4, 16, 64, 256, 1024, 4096, 16384]
#: SDPA prefill (batch, seq, heads, kv_heads, head_dim)
SDPA_PREFILL = [(1, 1024, 32, 8, 128), (1, 4096, 32, 8, 128), (4, 2048, 32, 8, 128), (16, 512, 32, 8, 128),
                (2, 8192, 32, 8, 128), (8, 1024, 16, 8, 128), (4, 2048, 32, 32, 128), (4, 2048, 16, 16, 64)]
#: SDPA decode (batch, kv_len, heads, kv_heads, head_dim)
SDPA_PREFILL_EXTRA = [(1, 2048, 64, 8, 128), (1, 16384, 32, 8, 128), (32, 256, 32, 8, 128), (2, 4096, 40, 8, 128),
                      (4, 1024, 28, 4, 128), (1, 8192, 16, 2, 128), (8, 512, 12, 12, 64), (1, 32768, 32, 8, 128)]
SDPA_DECODE_EXTRA = [(1, 65536, 32, 8, 128), (256, 1024, 32, 8, 128), (4, 32768, 64, 8, 128), (2, 512, 16, 8, 128),
                     (512, 512, 32, 4, 128), (48, 3000, 40, 8, 128), (96, 6000, 28, 4, 128), (8, 100000, 32, 8, 128)]
SDPA_DECODE = [(1, 1024, 32, 8, 128), (1, 16384, 32, 8, 128), (16, 2048, 32, 8, 128), (64, 1024, 32, 8, 128),
               (64, 4096, 32, 8, 128), (128, 2048, 32, 8, 128), (32, 8192, 32, 8, 128), (8, 4096, 16, 8, 128)]


class Rows:
    """Append rows to a CSV as they are measured."""

    def __init__(self, path: Path, columns: list[str]):
        self.path, self.columns = path, columns
        with path.open("w", newline="") as f:
            csv.writer(f).writerow(columns)

    def add(self, **row) -> None:
        with self.path.open("a", newline="") as f:
            csv.writer(f).writerow([row.get(c, "") for c in self.columns])


def _no_reset() -> None:
    pass


def capture(torch, fn, calls: int = 1, reset=_no_reset):
    """A CUDA graph of `calls` calls of `fn()`, captured after 2 warm-ups on the capture stream (`reset()` before
    each warm-up and before the capture)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            reset()
            fn()
    torch.cuda.current_stream().wait_stream(s)
    reset()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return g


def timed_ms(torch, run, reset=_no_reset, replays: int = 3) -> float:
    """Fastest of `replays` CUDA-event timings of `run()`, each after `reset()` outside the events."""
    best = float("inf")
    for _ in range(replays):
        reset()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b))
    return best


def graph_ms(torch, fn) -> float:
    """Kernel time of `fn()` (ms): GRAPH_CALLS calls in one CUDA graph, fastest of 3 replays after a warm one."""
    g = capture(torch, fn, GRAPH_CALLS)
    g.replay()
    torch.cuda.synchronize()
    best = timed_ms(torch, g.replay)
    del g
    return best / GRAPH_CALLS


def call_ms(torch, step, budget_s: float = 1.5, max_calls: int = 8) -> tuple[float, float, int]:
    """(mean of the fastest half, median, calls) of CUDA-event timings of `step()` after 2 warm-ups."""
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    times, t0 = [], time.time()
    while len(times) < max_calls and (len(times) < 3 or time.time() - t0 < budget_s):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    half = times[: max(1, len(times) // 2)]
    return sum(half) / len(half), times[len(times) // 2], len(times)


def loop_us(torch, fn, calls: int = 200) -> tuple[float, float]:
    """(host us per call, device us per call) of `calls` back-to-back calls of `fn`."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    a.record()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls * 1e6
    b.record()
    torch.cuda.synchronize()
    return host, a.elapsed_time(b) / calls * 1e3


def measure_gemms(torch, rows: Rows, deadline: float, shapes=(GEMM_NK, GEMM_M)) -> None:
    dev = "cuda"
    nks, rows_m = shapes
    for n, k in nks:
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        w8 = w.to(torch.float8_e4m3fn)  # (n, k) row-major = (k, n) column-major after .t()
        one = torch.ones((), device=dev, dtype=torch.float32)
        for m in rows_m:
            if time.time() > deadline:
                return
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            rows.add(op="gemm", dtype="bf16", m=m, n=n, k=k, latency_ms=graph_ms(torch, lambda: x @ w.t()))
            x8 = x.to(torch.float8_e4m3fn)
            try:
                ms = graph_ms(torch, lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                                              out_dtype=torch.bfloat16))
                rows.add(op="gemm", dtype="fp8", m=m, n=n, k=k, latency_ms=ms)
            except RuntimeError as e:  # shapes _scaled_mm refuses (dims not multiples of 16)
                rows.add(op="gemm", dtype="fp8", m=m, n=n, k=k, note=str(e).splitlines()[0][:80])
        torch.cuda.empty_cache()


def measure_sdpa(torch, rows: Rows, deadline: float, shapes=(SDPA_PREFILL, SDPA_DECODE)) -> None:
    F = torch.nn.functional
    dev, dt = "cuda", torch.bfloat16
    for b, s, h, kvh, d in shapes[0]:
        if time.time() > deadline:
            return
        q = torch.randn(b, h, s, d, device=dev, dtype=dt, requires_grad=True)
        k = torch.randn(b, kvh, s, d, device=dev, dtype=dt, requires_grad=True)
        v = torch.randn(b, kvh, s, d, device=dev, dtype=dt, requires_grad=True)
        gqa = h != kvh
        with torch.no_grad():
            fwd = graph_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa))
        rows.add(op="sdpa_fwd", batch=b, q_len=s, kv_len=s, heads=h, kv_heads=kvh, head_dim=d, causal=True,
                 latency_ms=fwd)
        go = torch.randn(b, h, s, d, device=dev, dtype=dt)

        def fwd_bwd():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
            torch.autograd.grad(o, (q, k, v), go)
        mean, med, _ = call_ms(torch, fwd_bwd, budget_s=0.5)
        rows.add(op="sdpa_fwd_bwd", batch=b, q_len=s, kv_len=s, heads=h, kv_heads=kvh, head_dim=d, causal=True,
                 latency_ms=mean, timing="call")
        # transformers' masked path (an explicit mask, not is_causal) picks another backend
        mask = torch.ones(s, s, device=dev, dtype=torch.bool).tril()
        with torch.no_grad():
            ms = graph_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa))
        rows.add(op="sdpa_fwd_masked", batch=b, q_len=s, kv_len=s, heads=h, kv_heads=kvh, head_dim=d, causal=True,
                 latency_ms=ms)
    for b, kv, h, kvh, d in shapes[1]:
        if time.time() > deadline:
            return
        q = torch.randn(b, h, 1, d, device=dev, dtype=dt)
        k = torch.randn(b, kvh, kv, d, device=dev, dtype=dt)
        v = torch.randn(b, kvh, kv, d, device=dev, dtype=dt)
        with torch.no_grad():
            ms = graph_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
        rows.add(op="sdpa_decode", batch=b, q_len=1, kv_len=kv, heads=h, kv_heads=kvh, head_dim=d, causal=False,
                 latency_ms=ms)
    torch.cuda.empty_cache()


def build_model(torch, name: str, layers, dtype: str, attn: str, device: str = "cuda"):
    import transformers as tf

    raw = json.loads((CONFIGS / f"{name}.json").read_text())
    raw = raw.get("text_config", raw)  # a multimodal config (Gemma 3): its language model, as predict-model prices
    if layers:
        raw["num_hidden_layers" if "num_hidden_layers" in raw else "n_layer"] = layers
    raw.pop("architectures", None)
    conf = tf.AutoConfig.for_model(raw.pop("model_type"), **raw)
    conf._attn_implementation = attn
    torch_dtype = torch.float32 if dtype == "fp32" else torch.bfloat16
    with torch.device(device):
        model = tf.AutoModelForCausalLM.from_config(conf, dtype=torch_dtype)
    return model, conf.num_hidden_layers


#: tokens a decode run's cache grows by at most (2 warm-ups and up to 8 timed calls)
DECODE_GROWTH = 10
MODES = ("inf", "train", "decode")


def past_positions(model, mode: str, seq: int) -> bool:
    """Whether a run would index past the model's position table (a device-side assert that ends the process)."""
    limit = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", 0)
    return bool(limit) and seq + (DECODE_GROWTH if mode == "decode" else 0) > limit


def model_step(torch, model, mode: str, batch: int, seq: int, amp: bool = False, device: str = "cuda",
               extra_labels: dict | None = None):
    """One call as the contract times it: a forward under no_grad (`inf`); forward + cross-entropy (labels =
    inputs, plus `extra_labels`) + backward (`train`, under bf16 autocast with `amp`); or one new token per
    sequence against a cache of `seq` tokens (`decode`: prefilled once, not timed)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device=device)
    if mode == "decode":
        model.eval()
        with torch.no_grad():
            cache = model(input_ids=ids, use_cache=True).past_key_values
        nxt = ids[:, :1].contiguous()

        def step():  # the cache grows a token a call, as in generate(): cropped back, it would be a strided view,
            with torch.no_grad():  # and the next step's torch.cat of the cache would run PyTorch's slow strided kernel
                model(input_ids=nxt, past_key_values=cache, use_cache=True)
        return step
    if mode == "inf":
        model.eval()

        def step():
            with torch.no_grad():
                model(input_ids=ids)
        return step
    model.train()
    kw = {"labels": ids, **(extra_labels or {})}

    def step():
        if amp:
            with torch.autocast(device.split(":")[0], dtype=torch.bfloat16):
                loss = model(input_ids=ids, **kw).loss
        else:
            loss = model(input_ids=ids, **kw).loss
        loss.backward()
    return step


def build_default(torch, name: str, layers, dtype: str, attn: str, device: str = "cuda"):
    """`build_model`, falling back to eager as transformers' default does for a family without SDPA
    (Gemma 2, gpt-oss): (model, layers, the attn it runs, a note saying so)."""
    try:
        return (*build_model(torch, name, layers, dtype, attn, device), attn, "")
    except ValueError as e:
        if attn != "sdpa" or "scaled_dot_product_attention" not in str(e):
            raise
    return (*build_model(torch, name, layers, dtype, "eager", device), "eager",
            "sdpa unsupported: transformers' default")


#: (model, layers) x (mode, batch, seq) whose summed kernel time (`--runs profile`) is recorded
PROFILE_MODELS = [("llama3_8b", None), ("qwen3_8b", None), ("qwen3_30b_a3b", 8), ("mixtral_8x7b", 4)]
PROFILE_RUNS = [("decode", 1, 1024), ("decode", 8, 1024), ("decode", 32, 2048), ("decode", 64, 1024),
                ("decode", 128, 512), ("decode", 256, 512), ("inf", 1, 2048), ("inf", 4, 2048), ("inf", 1, 256)]


def busy_time(torch, step, steps: int = 3) -> tuple[float, int]:
    """(GPU busy ms of one `step()`, device events a step): torch.profiler's device intervals over `steps`
    steps, their union (annotations overlap kernels) over `steps`."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    total_us, end = 0.0, float("-inf")
    for start, stop in spans:
        if stop > end:
            total_us += stop - max(start, end)
            end = stop
    return round(total_us / (steps * 1e3), 4), len(spans) // steps


def measure_kernel_sums(torch, rows: Rows, deadline: float, models=tuple(PROFILE_MODELS)) -> None:
    """GPU busy time of one step (torch.profiler: the union of the device intervals, mean of 3 steps):
    the device time a CUDA-graph engine pays, without the eager host overhead in `measured_ms`."""
    for name, layers in models:
        if time.time() > deadline:
            return
        try:
            model, n_layers, attn, _ = build_default(torch, name, layers, "bf16", "sdpa")
        except Exception as e:  # a config transformers refuses: profile the other models
            rows.add(model=name, note=f"kernel_sum build: {type(e).__name__}")
            continue
        for mode, b, s in PROFILE_RUNS:
            if time.time() > deadline:
                break
            if past_positions(model, mode, s):
                continue
            try:
                step = model_step(torch, model, mode, b, s, False)
                step()
                torch.cuda.synchronize()
                busy_ms, calls = busy_time(torch, step)
            except Exception as e:  # out of memory, or a mode the family refuses: keep the other runs
                rows.add(model=name, layers=n_layers, batch=b, seq=s, mode=mode, dtype="bf16", attn=attn,
                         note=f"kernel_sum: {type(e).__name__}")
                torch.cuda.empty_cache()
                continue
            rows.add(model=name, layers=n_layers, batch=b, seq=s, mode=mode, dtype="bf16", attn=attn, amp=False,
                     measured_ms=busy_ms, calls=calls, note="kernel_sum", cache="grown" if mode == "decode" else "")
        del model
        torch.cuda.empty_cache()


def parse_models(spec: str, default=tuple(MODELS)) -> list[tuple[str, int | None]]:
    """`--models`: comma-separated `config[:layers]` (any config in examples/configs); empty = `default`."""
    known = dict(MODELS)
    picked = []
    for item in filter(None, (x.strip() for x in spec.split(","))):
        name, _, layers = item.partition(":")
        if not (CONFIGS / f"{name}.json").is_file():
            raise SystemExit(f"error: no config {name}.json in {CONFIGS}")
        if layers and not (layers.isdigit() and int(layers) > 0):
            raise SystemExit(f"error: {item!r}: the layers after ':' are a positive whole number")
        picked.append((name, int(layers) if layers else known.get(name)))
    return picked or list(default)


def measure_models(torch, rows: Rows, deadline: float, runs_set=RUNS, models=tuple(MODELS)) -> None:
    for name, layers in models:
        done = set()  # (mode, dtype, attn, amp, batch, seq) measured: an eager fallback repeats no eager run
        groups = {}
        for run in runs_set:  # one model build per (dtype, attn)
            groups.setdefault((run[1], run[2]), []).append(run)
        for (dtype, attn), runs in groups.items():
            if time.time() > deadline:
                return
            try:
                model, n_layers, attn, note = build_default(torch, name, layers, dtype, attn)
            except Exception as e:  # an unsupported family or a config transformers refuses
                rows.add(model=name, dtype=dtype, attn=attn, note=f"build: {type(e).__name__}: {str(e)[:80]}")
                continue
            for mode, _, _, amp, b, s in runs:
                if time.time() > deadline:
                    break
                if past_positions(model, mode, s) or (mode, dtype, attn, amp, b, s) in done:
                    continue
                done.add((mode, dtype, attn, amp, b, s))
                try:
                    step = model_step(torch, model, mode, b, s, amp)
                    mean, med, n = call_ms(torch, step)
                    peak = torch.cuda.max_memory_allocated() / 1e9
                    rows.add(model=name, layers=n_layers, batch=b, seq=s, mode=mode, dtype=dtype, attn=attn,
                             amp=amp, measured_ms=round(mean, 4), median_ms=round(med, 4), calls=n,
                             peak_gb=round(peak, 2), note=note, cache="grown" if mode == "decode" else "")
                except torch.cuda.OutOfMemoryError:
                    rows.add(model=name, layers=n_layers, batch=b, seq=s, mode=mode, dtype=dtype, attn=attn,
                             amp=amp, note="out of memory")
                except Exception as e:  # a mode this family's transformers code refuses: keep the others
                    rows.add(model=name, layers=n_layers, batch=b, seq=s, mode=mode, dtype=dtype, attn=attn,
                             amp=amp, note=f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}")
                model.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            del model
            torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=400.0, help="stop starting new measurements after this")
    ap.add_argument("--kernel-share", type=float, default=0.25, help="share of the budget for kernels")
    ap.add_argument("--runs", choices=("main", "extra", "decode", "profile", "graph"), default="main",
                    help="which set of shapes and model runs (decode: the decode runs of main and extra; "
                    "profile: GPU busy time of steps; graph: decode steps replayed from a CUDA graph)")
    ap.add_argument("--models", default="", help="comma-separated config[:layers] of examples/configs "
                    "(default: MODELS, big MoE models cut to a few layers)")
    args = ap.parse_args(argv)
    models = parse_models(args.models, PROFILE_MODELS if args.runs in ("profile", "graph") else MODELS)
    import torch
    import transformers

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "transformers": transformers.__version__,
           "sms": torch.cuda.get_device_properties(0).multi_processor_count}
    a, b, c = (torch.randn(16, device="cuda") for _ in range(3))
    env["host_op_us"] = round(loop_us(torch, lambda: torch.add(a, b, out=c), 2000)[0], 2)  # this host's dispatch
    (out / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    torch.backends.cuda.matmul.allow_tf32 = False
    krows = Rows(out / "kernels.csv", ["op", "dtype", "m", "n", "k", "batch", "q_len", "kv_len", "heads", "kv_heads",
                                       "head_dim", "causal", "latency_ms", "timing", "note"])
    kdead = t0 + args.budget_s * args.kernel_share
    extra = args.runs == "extra"
    measure_sdpa(torch, krows, kdead, (SDPA_PREFILL_EXTRA, SDPA_DECODE_EXTRA) if extra else (SDPA_PREFILL, SDPA_DECODE))
    measure_gemms(torch, krows, kdead, (GEMM_NK_EXTRA, GEMM_M_EXTRA) if extra else (GEMM_NK, GEMM_M))
    mrows = Rows(out / "models.csv", ["model", "layers", "batch", "seq", "mode", "dtype", "attn", "amp",
                                      "measured_ms", "median_ms", "calls", "peak_gb", "cache", "note"])
    if args.runs in ("profile", "graph"):
        from experiments.gpu.graph_decode import measure_graph_decode

        measure = measure_kernel_sums if args.runs == "profile" else measure_graph_decode
        measure(torch, mrows, t0 + args.budget_s, models)
    else:
        runs = {"main": RUNS, "extra": RUNS_EXTRA, "decode": [r for r in RUNS + RUNS_EXTRA if r[0] == "decode"]}
        measure_models(torch, mrows, t0 + args.budget_s, runs[args.runs], models)
    env["seconds"] = round(time.time() - t0, 1)
    (out / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    print(f"done in {env['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
