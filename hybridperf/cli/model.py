"""`hybridperf predict-model`: whole-model latency of a Hugging Face transformer on one GPU."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from hybridperf.errors import InputError


def predict_model_cmd(
    config: Path = typer.Option(..., "--config", help="Hugging Face config.json of the model"),
    batch: int = typer.Option(..., "--batch", help="batch size (sequences)"),
    seq: int = typer.Option(..., "--seq", help="sequence length (tokens)"),
    mode: str = typer.Option("inf", "--mode", help="inf (one forward, no_grad) or train (forward + backward)"),
    device: str = typer.Option(..., "--device", help="catalog device name/alias or a JSON spec path"),
    as_json: bool = typer.Option(False, "--json", help="print the result as one JSON object (last line)"),
    breakdown: bool = typer.Option(False, "--breakdown", help="print a table of time per op class"),
    model_bundle: Optional[Path] = typer.Option(None, "--model-bundle", help="kernel bundle directory to use"),
    prior_only: bool = typer.Option(False, "--prior-only", help="use the analytical prior alone"),
) -> None:
    """Predict the latency (ms) of one forward (inf) or forward+backward (train) pass of a transformer,
    fp32 eager PyTorch as NeuSight measured it, with a 90% interval."""
    from hybridperf.graphs.compose import predict_model_detail, resolve_predictor

    if batch < 1:
        raise InputError(f"--batch must be >= 1, got {batch}")
    if seq < 1:
        raise InputError(f"--seq must be >= 1, got {seq}")
    if mode not in ("inf", "train"):
        raise InputError(f"--mode must be inf or train, got {mode!r}")
    if model_bundle is not None and prior_only:
        raise InputError("--model-bundle and --prior-only are mutually exclusive")
    if not config.is_file():
        raise InputError(f"config file not found: {config}")
    from hybridperf.devices import get_device

    dev = get_device(device)  # fail on an unknown device before loading a bundle
    predictor = resolve_predictor(model_bundle, prior_only)
    res = predict_model_detail(str(config), batch, seq, mode, dev, predictor)
    out = {k: round(v, 4) for k, v in res.to_dict().items()}
    if breakdown:
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"{Path(config).stem} {mode} B={batch} S={seq} on {dev.name} ({res.kind} kernels)")
        for col in ("op class", "fw ms", "bw ms", "acc ms", "total ms", "share"):
            t.add_column(col, justify="right" if col != "op class" else "left")
        for r in res.breakdown().itertuples():
            t.add_row(r.group, f"{r.fw:.3f}", f"{r.bw:.3f}", f"{r.acc:.3f}", f"{r.total:.3f}", f"{r.share * 100:.1f}%")
        Console(stderr=as_json).print(t)
    if as_json:
        print(json.dumps(out))
    else:
        typer.echo(f"e2e {out['e2e_ms']:.3f} ms  [90%: {out['lo_ms']:.3f} .. {out['hi_ms']:.3f}]  "
                   f"fw {out['fw_ms']:.3f} ms  bw {out['bw_ms']:.3f} ms")


def register(app: typer.Typer) -> None:
    app.command("predict-model")(predict_model_cmd)
