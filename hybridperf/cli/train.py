"""`hybridperf train`: fit residual models on measured kernels and export an ONNX bundle."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from hybridperf.atomic import atomic_dir
from hybridperf.errors import InputError


def train(
    data: Path = typer.Option(..., "--data", help="NeuSight artifact folder, shared datasets folder, or a kernel CSV."),
    out: Path = typer.Option(..., "--out", help="Output directory for the bundle(s)."),
    devices: Optional[str] = typer.Option(None, "--devices", help="Comma-separated devices to train on (default: all)."),
    per_device: bool = typer.Option(False, "--per-device", help="One bundle per device instead of one across devices."),
    seed: int = typer.Option(0, "--seed"),
    max_rows: int = typer.Option(6000, "--max-rows", help="Rows per (device, op class) used for fitting."),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", help="mlflow tracking URI (default: sqlite:///mlflow.db in the current directory)."),
    no_track: bool = typer.Option(False, "--no-track", help="Do not log to mlflow."),
) -> None:
    """Train kernel residual models (MLP ensemble + XGBoost per op class), calibrate, export ONNX."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from hybridperf.training.kernel_data import load_kernel_table
    from hybridperf.training.kernels import TrainConfig, train_kernel_bundle
    from hybridperf.training.tracking import tracked_run

    path = data / "neusight" if (data / "neusight").is_dir() else data
    if not path.exists():
        raise InputError(f"training data not found: {data}")
    table = load_kernel_table(path)
    if devices:
        wanted = [d.strip() for d in devices.split(",")]
        unknown = sorted(set(wanted) - set(table["device"]))
        if unknown:
            raise InputError(f"devices not in the data: {unknown}; have {sorted(table['device'].unique())}")
        table = table[table["device"].isin(wanted)]
    if not per_device and table["device"].nunique() < 2:
        raise InputError("cross-device training needs kernels of at least two devices (or use --per-device)")
    try:
        import torch  # noqa: F401
        import xgboost  # noqa: F401
    except ImportError:
        raise InputError("training needs the train extra: pip install torch==2.13.0 && pip install 'hybridperf[train]'") from None
    cfg = TrainConfig(seed=seed, max_rows=max_rows)
    console = Console(stderr=True)
    groups = [(d, table[table["device"] == d]) for d in sorted(table["device"].unique())] if per_device else [("all", table)]
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as prog:
        task = prog.add_task("training", total=None)
        for name, rows in groups:
            dest = out / name.replace(" ", "_") if per_device else out
            with tracked_run(f"kernels-{name}", dest, {"devices": sorted(rows["device"].unique()), "rows": len(rows),
                                                       "seed": seed, "max_rows": max_rows},
                             tracking_uri, enabled=not no_track) as log_metrics, atomic_dir(dest) as tmp:
                if per_device:
                    from hybridperf.training.per_device import train_single_device_bundle

                    manifest = train_single_device_bundle(rows, tmp, cfg, progress=lambda s: prog.update(task, description=f"{name}: {s}"))
                else:
                    manifest = train_kernel_bundle(rows, tmp, cfg, progress=lambda s: prog.update(task, description=s))
                held = manifest.get("calibration", {}).get("heldout_metrics", {})
                log_metrics({f"{oc}_{k}": v for oc, m in held.items() for k, v in m.items()})
                log_metrics({f"{oc}_interval_{q}": spec["interval"][q] for oc, spec in manifest["op_classes"].items()
                             for q in ("q_lo", "q_hi")})
            console.print(f"bundle written to {dest}")


def register(app: typer.Typer) -> None:
    app.command("train")(train)
