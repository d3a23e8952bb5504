"""`hybridperf compare`: one model step predicted on several GPUs, ranked (hybridperf.graphs.compare)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from hybridperf.atomic import write_csv
from hybridperf.cli.outputs import check_outputs
from hybridperf.guard import check_predictions


def compare_cmd(
    config: Path = typer.Option(..., "--config", help="Hugging Face config.json of the model"),
    batch: int = typer.Option(..., "--batch", help="batch size (sequences)"),
    seq: int = typer.Option(..., "--seq", help="sequence length (tokens); with --mode decode, the cached tokens"),
    mode: str = typer.Option("inf", "--mode", help="inf, train or decode, as in predict-model"),
    devices: str = typer.Option(
        "all", "--devices", help="comma-separated catalog names, aliases or JSON spec paths, or 'all' (every "
        "catalog GPU)"),
    dtype: Optional[str] = typer.Option(
        None, "--dtype", help="fp32, fp16 or bf16; default: the config's dtype, else fp32, as in predict-model"),
    fused: bool = typer.Option(False, "--fused", help="inference as torch.compile runs it, as in predict-model"),
    attn: str = typer.Option("sdpa", "--attn", help="sdpa (transformers' default) or eager, as in predict-model"),
    amp: bool = typer.Option(False, "--amp", help="fp32 weights under bf16 autocast, as in predict-model"),
    cudnn_plans: str = typer.Option("build", "--cudnn-plans", help="decode: build or cached, as in predict-model"),
    launch: str = typer.Option("eager", "--launch", help="eager or graph (one CUDA graph), as in predict-model"),
    optimizer: Optional[str] = typer.Option(None, "--optimizer", help="train: add one optimizer step"),
    recompute: bool = typer.Option(False, "--recompute", help="train: activation checkpointing of every layer"),
    model_bundle: Optional[Path] = typer.Option(None, "--model-bundle", help="kernel bundle directory to use"),
    prior_only: bool = typer.Option(False, "--prior-only", help="use the analytical prior alone"),
    allow_other_device: bool = typer.Option(
        False, "--allow-other-device", help="use a bundle adapted to one GPU (`hybridperf transfer`) for the others"),
    as_json: bool = typer.Option(False, "--json", help="print the ranking as one JSON list (last line)"),
    output: Optional[Path] = typer.Option(None, "--output", help="also write the ranking as CSV"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="also draw the ranking (PNG; needs matplotlib)"),
) -> None:
    """Rank GPUs for one model step: latency with its 90% interval, tokens/s and whether it fits in memory,
    fastest first. Single-GPU runs; use predict-model --dp/--tp/--pp for several GPUs."""
    from hybridperf.cli.model import check_model_args
    from hybridperf.graphs.compare import compare_devices, fit_note, resolve_devices
    from hybridperf.graphs.compose import resolve_predictor
    from hybridperf.graphs.config import model_dtype

    check_model_args(config, batch, seq, mode, model_bundle, prior_only)
    dtype, dtype_why = model_dtype(config, dtype, amp)
    from hybridperf.graphs.attention import check_cudnn_plans

    cudnn_plans = check_cudnn_plans(cudnn_plans)
    check_outputs(output, plot)
    specs = resolve_devices(devices)  # fail on an unknown device before loading a bundle
    predictor = resolve_predictor(model_bundle, prior_only)
    for spec in specs:
        predictor.check_device(spec, allow_other_device)
    if dtype_why:
        typer.echo(f"note: a {dtype} model ({dtype_why})", err=True)
    df = compare_devices(str(config), batch, seq, specs, mode, predictor, dtype=dtype, fused=fused,
                         optimizer=optimizer, recompute=recompute, attn=attn, amp=amp, cudnn_plans=cudnn_plans,
                         launch=launch)
    check_predictions(df["e2e_ms"], df["lo_ms"], df["hi_ms"], f"{config.name} per device")
    check_predictions(df["tokens_per_s"], what=f"{config.name} tokens/s", max_value=float("inf"))
    title = f"{config.stem} {mode} B={batch} S={seq} {dtype}"
    if plot is not None:
        from hybridperf.graphs.plot import plot_device_comparison

        plot_device_comparison(df, plot, title=title)
    if output is not None:
        write_csv(df, output)
    planning = df.loc[df["plan_ms"] > 0, "device"].tolist()
    if planning:  # a software effect on some GPUs only: say so beside any ranking
        typer.echo(f"note: {len(planning)} device(s) run cuDNN attention first ({', '.join(planning)}); each of their "
                   f"decode steps includes {df['plan_ms'].max():.1f} ms of host-side cuDNN plan building (new key "
                   "lengths, as in a first generate()); pass --cudnn-plans cached for a process that ran them before",
                   err=True)
    if as_json:
        print(json.dumps([{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                          for r in df.to_dict("records")]))
        return
    from rich.console import Console
    from rich.table import Table

    unit = "tokens/s" if mode != "decode" else "new tokens/s"
    gib = 1e9 / 2**30  # the table speaks GiB, as spec sheets' "80 GB" (an H100's 80 GiB of HBM) do
    t = Table(title=f"{title}: {df['mem_gb'].iloc[0] * gib:.1f} GiB needed")
    for col in ("device", "e2e ms", "90% interval", unit, "vs fastest", "memory", "fits"):
        t.add_column(col, justify="left" if col == "device" else "right", no_wrap=True)
    for r in df.to_dict("records"):
        t.add_row(r["device"] + ("" if r["validated"] else " *"), f"{r['e2e_ms']:.2f}",
                  f"{r['lo_ms']:.2f} .. {r['hi_ms']:.2f}", f"{r['tokens_per_s']:,.0f}", f"{r['vs_fastest']:.2f}x",
                  f"{r['mem_fraction']:.0%} of {r['device_mem_gb'] * gib:.1f} GiB", fit_note(r))
    console = Console()
    console.width = max(console.width, 120)  # rich falls back to 80 columns when stdout is not a terminal
    console.print(t)
    if not df["validated"].all():
        typer.echo("* an architecture whose whole-model predictions were never scored on a held-out GPU of its own "
                   "(Ada and Blackwell: kernel tables only; CDNA 3-4 and others: none)", err=True)
    if dtype == "bf16":
        from hybridperf.priors.power import EMULATED_BF16_GEMM_RATE, emulates_bf16

        slow = [d.name for d in specs if emulates_bf16(d)]
        if slow:
            typer.echo(f"note: {len(slow)} device(s) have no bf16 units ({', '.join(slow)}); their bf16 GEMMs "
                       f"run through fp32 at ~{EMULATED_BF16_GEMM_RATE:g}x the fp32 rate", err=True)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
