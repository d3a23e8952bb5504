"""`hybridperf predict-model`: whole-model latency of a Hugging Face transformer on one GPU, or the step
time on dp x tp x pp GPUs of a node with `--dp/--tp/--pp` (hybridperf.graphs.parallel)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from hybridperf.datasets.schema import MAX_DIM as MAX_TOKENS
from hybridperf.errors import InputError
from hybridperf.guard import check_parts, check_predictions
from hybridperf.graphs.model_graph import MODES


def predict_model_cmd(
    config: Path = typer.Option(..., "--config", help="Hugging Face config.json of the model"),
    batch: int = typer.Option(..., "--batch", help="batch size (sequences)"),
    seq: int = typer.Option(..., "--seq", help="sequence length (tokens); with --mode decode, the tokens already "
                            "in the key/value cache"),
    mode: str = typer.Option("inf", "--mode", help="inf (one forward, no_grad), train (forward + backward) or "
                             "decode (one generated token per sequence against a key/value cache of --seq tokens: "
                             "a step of HF generate(), or of a CUDA graph with --launch graph; held-out accuracy in "
                             "experiments/RESULTS.md section 11)"),
    device: str = typer.Option(..., "--device", help="catalog device name/alias or a JSON spec path"),
    as_json: bool = typer.Option(False, "--json", help="print the result as one JSON object (last line)"),
    breakdown: bool = typer.Option(False, "--breakdown", help="print a table of time per op class"),
    model_bundle: Optional[Path] = typer.Option(None, "--model-bundle", help="kernel bundle directory to use"),
    prior_only: bool = typer.Option(False, "--prior-only", help="use the analytical prior alone"),
    allow_other_device: bool = typer.Option(
        False, "--allow-other-device", help="use a bundle adapted to another GPU (`hybridperf transfer`) anyway"),
    dp: Optional[int] = typer.Option(None, "--dp", help="data-parallel ranks (--batch is the global batch)"),
    tp: Optional[int] = typer.Option(None, "--tp", help="tensor-parallel ranks (Megatron column/row/vocab split)"),
    pp: Optional[int] = typer.Option(None, "--pp", help="pipeline stages (must divide the layers)"),
    microbatches: Optional[int] = typer.Option(
        None, "--microbatches", help="micro-batches per step (default: largest divisor of batch/dp <= pp)"),
    overlap: Optional[bool] = typer.Option(
        None, "--overlap/--no-overlap", help="overlap the DP gradient all-reduce with the backward (default on)"),
    bucket_mb: Optional[float] = typer.Option(None, "--bucket-mb", help="DP gradient bucket size in MiB (default 25)"),
    dtype: Optional[str] = typer.Option(
        None, "--dtype", help="the model cast to fp32, fp16 or bf16 (GEMMs on tensor cores); default: the dtype "
        "transformers 5 builds the config in, its dtype/torch_dtype (bf16 for most Hub LLMs), else fp32. "
        "--dtype fp32 --attn eager is NeuSight's setup, validated on its labels"),
    attn: str = typer.Option("sdpa", "--attn", help="transformers' attn_implementation: sdpa (its default: one fused "
                             "scaled_dot_product_attention kernel) or eager (materialized scores; NeuSight's labels)"),
    amp: bool = typer.Option(False, "--amp", help="fp32 weights under torch.autocast(bfloat16): GEMMs and attention in "
                             "bf16 with the weight casts of every forward, norms/softmax/loss in fp32, fp32 gradients"),
    cudnn_plans: str = typer.Option(
        "build", "--cudnn-plans", help="decode with SDPA on GPUs where PyTorch (2.11+) runs cuDNN attention first "
        "(H100, H200, B200): build (each step's key length is new to the process, as in a first generate(): cuDNN "
        "builds a plan per attention shape on the host, ~39 ms each) or cached (an earlier pass ran these lengths)"),
    launch: str = typer.Option(
        "eager", "--launch", help="eager (PyTorch dispatches every kernel from Python, transformers' default) or "
        "graph (the step replayed from one CUDA graph, as serving engines run decode and torch.compile's "
        "reduce-overhead mode a step: no host between kernels; a decode step over a static cache)"),
    fused: bool = typer.Option(False, "--fused", help="inference as torch.compile runs it: chains of element-wise "
                               "ops fused into one kernel, also into a following softmax/LayerNorm (NeuSight's "
                               "-fusion runs)"),
    optimizer: Optional[str] = typer.Option(
        None, "--optimizer", help="train: add one optimizer step to e2e_ms, reported as opt_ms: sgd, sgd-momentum, "
        "adam, adamw (torch.optim's CUDA default, foreach) or adam-fused; its state counts in the memory check"),
    recompute: bool = typer.Option(
        False, "--recompute", help="train: activation checkpointing of every layer (HF gradient checkpointing): "
        "each layer keeps only its input, and its forward runs again inside the backward"),
    zero: Optional[int] = typer.Option(
        None, "--zero", help="with --dp and --optimizer: ZeRO stage 1 (optimizer state sharded over dp), 2 (and "
        "gradients: reduce-scatter), 3 (and parameters: gathered layer by layer, FSDP full shard); default 0"),
    measured_runs: Optional[Path] = typer.Option(
        None, "--measured-runs", help="CSV of whole-model runs measured on DEVICE and this host (config, batch, seq, "
        "mode, latency_ms [, dtype, fused, recompute, optimizer, layers]): refit the device-time scale and the "
        "per-launch gap to them before predicting (with --dp/--tp/--pp: single-GPU runs on the node's GPU)"),
) -> None:
    """Predict the latency (ms) of one forward (inf) or forward+backward (train) pass of a transformer as
    transformers runs it (default SDPA attention; --dtype fp32 --attn eager is NeuSight's setup), or of one
    decode step (decode), with a 90% interval.
    With --dp/--tp/--pp (any of them), the step time on dp*tp*pp GPUs of DEVICE (a node such as
    DGX-H100, or a GPU in a default node), reported as compute, communication and pipeline bubble."""
    from hybridperf.graphs.compose import predict_model, resolve_predictor

    check_model_args(config, batch, seq, mode, model_bundle, prior_only)
    from hybridperf.graphs.attention import check_cudnn_plans
    from hybridperf.graphs.config import model_dtype

    cudnn_plans = check_cudnn_plans(cudnn_plans)
    dtype, dtype_why = model_dtype(config, dtype, amp)
    if any(v is not None for v in (dp, tp, pp, microbatches, overlap, bucket_mb, zero)):
        if fused:
            raise InputError("--fused is not modelled with --dp/--tp/--pp (training runs eager)")
        if launch != "eager":
            raise InputError("--launch graph is not modelled with --dp/--tp/--pp (a parallel step runs eager)")
        _predict_parallel_cmd(config, batch, seq, mode, device, as_json, breakdown, model_bundle, prior_only,
                              dp, tp, pp, microbatches, overlap, bucket_mb, dtype, optimizer, recompute, zero or 0,
                              measured_runs, allow_other_device, attn, amp, dtype_why)
        return
    from hybridperf.cli.devices import note_generic_spec
    from hybridperf.devices import get_device

    dev = get_device(device)  # fail on an unknown device before loading a bundle
    note_generic_spec(dev)
    predictor = resolve_predictor(model_bundle, prior_only)
    predictor.check_device(dev, allow_other_device)
    calibration = _calibrate(measured_runs, dev, predictor)
    res = predict_model(str(config), batch, seq, mode, dev, predictor, dtype=dtype, fused=fused, optimizer=optimizer,
                        recompute=recompute, calibration=calibration, attn=attn, amp=amp, cudnn_plans=cudnn_plans,
                        launch=launch)
    raw = res.to_dict()
    check_predictions(raw["e2e_ms"], raw["lo_ms"], raw["hi_ms"], f"{config.name} on {dev.name}")
    check_parts(raw, f"{config.name} on {dev.name}")
    typer.echo(f"assumes: {_assumptions(res.graph, res.plan_ms, dtype_why)}", err=True)
    if res.graph.launch == "graph" and mode != "decode":
        typer.echo("note: --launch graph was checked against CUDA-graph decode steps only (RESULTS.md section 11)",
                   err=True)
    need = res.graph.memory()
    _warn_memory(need, dev)
    out = {k: _round(v) for k, v in raw.items()}
    if breakdown:
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"{Path(config).stem} {mode} B={batch} S={seq} on {dev.name} ({res.kind} kernels)")
        _fill_breakdown(t, res.breakdown())
        Console(stderr=as_json).print(t)
    if as_json:
        print(json.dumps(out))
    else:
        opt = f"  opt {out['opt_ms']:.3f} ms" if "opt_ms" in out else ""
        rate = f"  ({batch * 1000.0 / out['e2e_ms']:.1f} tokens/s)" if mode == "decode" else ""
        typer.echo(f"e2e {out['e2e_ms']:.3f} ms  [90%: {out['lo_ms']:.3f} .. {out['hi_ms']:.3f}]  "
                   f"fw {out['fw_ms']:.3f} ms  bw {out['bw_ms']:.3f} ms{opt}{rate}  memory ~{need.total:.1f} GB")


def _round(v: float) -> float:
    """4 decimals, but never down to 0 (a 3e-5 ms kernel-sized step still prints a positive number)."""
    return round(v, 4) if abs(v) >= 1e-3 else float(f"{v:.4g}")


def _assumptions(graph, plan_ms: float = 0.0, dtype_why: str = "") -> str:
    """The execution a prediction assumed, in one line (dtype policy, attention implementation, cuDNN plans)."""
    from hybridperf.graphs.attention import NO_SDPA

    prec = "fp32 weights under bf16 autocast" if graph.amp else f"{graph.dtype} model"
    prec += f" ({dtype_why})" if dtype_why else ""
    attn = graph.attn
    if attn == "sdpa" and graph.config.family in NO_SDPA:
        attn = f"eager ({graph.config.family} has no SDPA path in transformers)"
    plans = (f", {plan_ms:.1f} ms of host-side cuDNN plan building for new key lengths (--cudnn-plans cached "
             "drops it)") if plan_ms else ""
    launch = "one CUDA graph (no host)" + (", static cache" if graph.mode == "decode" else "") \
        if graph.launch == "graph" else "eager PyTorch (transformers)"
    return f"{prec}, {attn} attention, {launch}{plans}"


def check_model_args(config: Path, batch: int, seq: int, mode: str, model_bundle, prior_only: bool) -> None:
    """One-line errors for the options every model command shares."""
    if batch < 1:
        raise InputError(f"--batch must be >= 1, got {batch}")
    if seq < 1:
        raise InputError(f"--seq must be >= 1, got {seq}")
    if batch * seq > MAX_TOKENS:  # the kernels' shapes count tokens: past 2^40 every one of them would be refused
        raise InputError(f"--batch x --seq must be at most 2^40 tokens, got {batch} x {seq} = {batch * seq:.3g}")
    if mode not in MODES:
        raise InputError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    if model_bundle is not None and prior_only:
        raise InputError("--model-bundle and --prior-only are mutually exclusive")
    if not config.is_file():
        raise InputError(f"config file not found: {config}")


def _calibrate(measured_runs, dev, predictor) -> dict | None:
    """Composition constants fitted to `--measured-runs` on GPU `dev` (None without the option)."""
    if measured_runs is None:
        return None
    from hybridperf.graphs.measured_runs import calibrate_from_runs

    calibration = calibrate_from_runs(measured_runs, dev, predictor)
    c = calibration[next(iter(calibration))]
    typer.echo(f"calibrated to {c['n_runs']} measured run(s) on {dev.name}: device-time scale {c['scale']:.3f}, "
               f"gap {c['gap_ms'] * 1000:.1f} us per launch", err=True)
    return calibration


def _fill_breakdown(table, bd) -> None:
    """Columns and rows of a per-op-class breakdown (`ModelPrediction.breakdown`) in a rich table."""
    phases = [c for c in bd.columns if c not in ("group", "total", "share")]  # in the breakdown's order
    for col in ("op class", *(f"{p} ms" for p in phases), "total ms", "share"):
        table.add_column(col, justify="right" if col != "op class" else "left")
    for r in bd.itertuples():
        table.add_row(r.group, *(f"{getattr(r, p):.3f}" for p in phases), f"{r.total:.3f}", f"{r.share * 100:.1f}%")


def _warn_memory(need, dev, per_gpu: bool = False) -> None:
    """Warn (stderr) when the run would not fit on `dev`, or fills it enough for allocator thrashing
    (`per_gpu`: `need` is the fullest GPU's share of a multi-GPU run)."""
    from hybridperf.graphs.memory import OVERFLOW_FRACTION, PRESSURE_FRACTION

    frac = need.fraction_of(dev)
    parts = f"weights {need.weights:.1f}, gradients {need.grads:.1f}, activations {need.activations:.1f}"
    if need.optimizer:
        parts += f", optimizer state {need.optimizer:.1f}"
    who = "the fullest GPU of this run" if per_gpu else "this run"
    if frac > OVERFLOW_FRACTION:
        typer.echo(f"warning: {who} needs roughly {need.total:.0f} GB ({parts}) and {dev.name} has "
                   f"{dev.mem_bytes / 1e9:.1f} GB: it would not fit; the prediction assumes it does",
                   err=True)
    elif frac >= PRESSURE_FRACTION:
        typer.echo(f"warning: {who} needs roughly {need.total:.0f} GB ({parts}), {frac:.0%} of {dev.name}'s "
                   f"{dev.mem_bytes / 1e9:.1f} GB: near capacity the caching allocator frees and "
                   f"re-allocates memory, which kernels alone do not show (such runs measured 1.4-1.7x their prediction); read e2e_ms as a "
                   f"lower bound", err=True)


def _predict_parallel_cmd(config, batch, seq, mode, device, as_json, breakdown, model_bundle, prior_only,
                          dp, tp, pp, microbatches, overlap, bucket_mb, dtype, optimizer=None,
                          recompute=False, zero=0, measured_runs=None, allow_other_device=False, attn="sdpa",
                          amp=False, dtype_why="") -> None:
    from hybridperf.graphs.compose import resolve_predictor
    from hybridperf.graphs.parallel import DEFAULT_BUCKET_MB, predict_parallel, resolve_parallel_device
    from hybridperf.residual_models.collectives import CollectiveModel

    for v, flag in ((dp, "--dp"), (tp, "--tp"), (pp, "--pp"), (microbatches, "--microbatches")):
        if v is not None and v < 1:
            raise InputError(f"{flag} must be >= 1, got {v}")
    if bucket_mb is not None and not bucket_mb > 0:
        raise InputError(f"--bucket-mb must be > 0, got {bucket_mb}")
    from hybridperf.cli.devices import note_generic_spec
    from hybridperf.graphs.tensor_parallel import refuse_decode, validate_zero

    refuse_decode(mode)  # a refusal is one line, before any note
    validate_zero(zero, mode, dp or 1, pp or 1, optimizer)
    node, dev, note = resolve_parallel_device(device)  # fail on an unknown device before loading bundles
    note_generic_spec(dev)
    predictor = resolve_predictor(model_bundle, prior_only)
    predictor.check_device(dev, allow_other_device)
    cmodel = CollectiveModel.prior_only() if prior_only else CollectiveModel.load()
    calibration = _calibrate(measured_runs, dev, predictor)
    res = predict_parallel(str(config), batch, seq, mode, node if not note else dev, dp or 1, tp or 1, pp or 1,
                           microbatches, True if overlap is None else overlap, predictor, collective_model=cmodel,
                           bucket_mb=DEFAULT_BUCKET_MB if bucket_mb is None else bucket_mb, dtype=dtype,
                           optimizer=optimizer, recompute=recompute, zero=zero, calibration=calibration, attn=attn,
                           amp=amp)
    if note:  # after the split is checked: a refusal stays one line
        typer.echo(note, err=True)
    r = res.result
    check_predictions(r["e2e_ms"], r["lo_ms"], r["hi_ms"], f"{config.name} on {r['gpus']} x {dev.name}")
    check_parts(r, f"{config.name} on {r['gpus']} x {dev.name}")
    typer.echo(f"assumes: {_assumptions(res.prediction.graph, dtype_why=dtype_why)}", err=True)
    _warn_memory(res.memory, dev, per_gpu=True)
    out = {k: (_round(v) if isinstance(v, float) else v) for k, v in r.items()}
    out["mem_gb_per_gpu"] = round(res.memory.total, 2)
    if breakdown:
        from rich.console import Console
        from rich.table import Table

        con = Console(stderr=as_json)
        title = (f"{Path(config).stem} {mode} B={batch} S={seq} on {r['gpus']} x {dev.name} ({res.node.name}): "
                 f"dp={dp or 1} tp={tp or 1} pp={pp or 1}, {r['microbatches']} micro-batch(es)")
        t = Table(title=title)
        for col in ("component", "ms", "share"):
            t.add_column(col, justify="right" if col != "component" else "left")
        for row in res.components().itertuples():
            t.add_row(row.component, f"{row.ms:.3f}", f"{row.share * 100:.1f}%")
        t.add_row("total", f"{r['e2e_ms']:.3f}", "100.0%")
        con.print(t)
        st = Table(title="pipeline stages (one micro-batch, per GPU)")
        for col in ("stage", "layers", "fw ms", "bw ms", "tp fw ms", "tp bw ms", "params", "dp all-reduce ms",
                    "memory GB"):
            st.add_column(col, justify="right")
        for row in res.stages.itertuples():
            st.add_row(str(row.stage), str(row.layers), f"{row.fw_ms:.3f}", f"{row.bw_ms:.3f}", f"{row.tp_fw_ms:.3f}",
                       f"{row.tp_bw_ms:.3f}", f"{row.params:,.0f}", f"{row.dp_allreduce_ms:.3f}", f"{row.mem_gb:.1f}")
        con.print(st)
        kt = Table(title=f"kernels per GPU, one micro-batch, all stages ({res.prediction.kind} kernels)")
        _fill_breakdown(kt, res.prediction.breakdown())
        con.print(kt)
    if as_json:
        print(json.dumps(out))
    else:
        typer.echo(f"e2e {out['e2e_ms']:.3f} ms  [90%: {out['lo_ms']:.3f} .. {out['hi_ms']:.3f}]  "
                   f"fw {out['fw_ms']:.3f} ms  bw {out['bw_ms']:.3f} ms  on {r['gpus']} GPU(s), {r['nodes']} node(s)\n"
                   f"compute {out['compute_ms']:.3f} ms  comm {out['comm_ms']:.3f} ms (tp {out['tp_comm_ms']:.3f}, "
                   f"dp exposed {out['dp_comm_ms']:.3f}, pp {out['pp_comm_ms']:.3f})  "
                   f"bubble {out['bubble_ms']:.3f} ms  "
                   + (f"opt {out['opt_ms']:.3f} ms  " if "opt_ms" in out else "")
                   + (f"(zero-{zero} gathers {out['zero_gather_ms']:.3f} ms)  " if "zero_gather_ms" in out else "")
                   + f"({r['microbatches']} micro-batch(es))")


def register(app: typer.Typer) -> None:
    app.command("predict-model")(predict_model_cmd)
