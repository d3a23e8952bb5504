"""`hybridperf collect`: measure kernel latencies on this machine (hybridperf.datasets.collector for
NeuSight's ops, hybridperf.datasets.aic_collector for aiconfigurator's gemm and attention rows).

    hybridperf collect --shapes SHAPES.csv --out X.csv [--ops bmm,linear,...] [--device cuda|cpu]
                       [--warmup 5] [--repeats 25] [--fastest 5] [--dtype fp32]
    hybridperf collect --schema aiconfigurator --shapes ROWS.csv --out X.csv [--device cuda|cpu]

The output is valid both as `predict-kernels --calibration` input and as training data.
torch is imported only when the command runs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console


def collect(
    shapes: Path = typer.Option(..., "--shapes", help="CSV of shapes: OPName (optional with --ops), B,M,N,K for bmm/linear, B,H for the others"),
    out: Path = typer.Option(..., "--out", help="output CSV (canonical columns + OPName, Latency, Device)"),
    ops: Optional[str] = typer.Option(None, "--ops", help="comma-separated ops, e.g. bmm,linear,add,softmax,ln"),
    device: Optional[str] = typer.Option(None, "--device", help="cuda or cpu (default: cuda when available)"),
    warmup: int = typer.Option(5, "--warmup", help="untimed calls before timing"),
    repeats: int = typer.Option(25, "--repeats", help="timed calls per kernel"),
    fastest: int = typer.Option(5, "--fastest", help="Latency = mean of this many fastest calls"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="fp32 (default), fp16, bf16 or fp64; NeuSight schema"),
    schema: str = typer.Option("neusight", "--schema", help="neusight (OPName rows) or aiconfigurator (op_name "
                               "rows: gemm, context_attention, generation_attention, with their dtypes)"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress bar"),
) -> None:
    """Measure kernels on this machine: NeuSight's ops the way NeuSight measured its data set (mean of the
    fastest calls), or aiconfigurator's gemm and attention rows (`--schema aiconfigurator`)."""
    from hybridperf.errors import InputError

    if schema not in SCHEMAS:
        raise InputError(f"--schema must be one of {', '.join(SCHEMAS)}, got {schema!r}")
    if schema != "neusight" and (ops or dtype):
        raise InputError("--ops and --dtype go with --schema neusight; aiconfigurator rows carry their op_name "
                         "and dtypes (gemm_dtype, attn_dtype)")
    df, skipped, device_name, line = SCHEMAS[schema](shapes, out, ops=ops, device=device, warmup=warmup,
                                                     repeats=repeats, fastest=fastest, dtype=dtype or "fp32",
                                                     progress=not quiet)
    console = Console(stderr=True)
    if skipped:
        console.print(f"skipped {len(skipped)} shapes: {'; '.join(skipped[:3])}", soft_wrap=True,
                      highlight=False, markup=False)
    console.print(f"wrote {len(df)} kernels measured on {device_name} to {out}", highlight=False, markup=False)
    if device is None and _defaulted_to_cpu():
        console.print("note: no CUDA GPU here, so these kernels were timed on the CPU; `transfer` adapts to GPUs "
                      "only (--device cpu silences this)", soft_wrap=True, highlight=False, markup=False)
    if line:
        console.print(line, highlight=False, markup=False)


def _defaulted_to_cpu() -> bool:
    """Whether the collector's default device (`resolve_device`) is the CPU here."""
    import torch

    from hybridperf.datasets.collector import resolve_device

    return resolve_device(torch, None) == "cpu"


def _neusight(shapes, out, *, ops, **kw):
    """NeuSight-schema rows: (table, skipped shapes, device name, the host-floor line or None)."""
    from hybridperf.datasets.collector import collect_kernels, collect_to_csv

    op_list = [o.strip() for o in ops.split(",") if o.strip()] if ops else None
    df = collect_to_csv(shapes, out, ops=op_list, **kw)
    return df, collect_kernels.last_report, df["Device"].iloc[0], host_floor_line(df)


def _aiconfigurator(shapes, out, *, ops, dtype, **kw):
    """aiconfigurator-schema rows: (table, skipped rows, device name, None)."""
    from hybridperf.datasets.aic_collector import collect_aic, collect_aic_to_csv

    df = collect_aic_to_csv(shapes, out, **kw)
    return df, collect_aic.last_report, df["device"].iloc[0], None


#: --schema -> the collector that measures its rows
SCHEMAS = {"neusight": _neusight, "aiconfigurator": _aiconfigurator}


def host_floor_line(measured) -> str | None:
    """One line on the measuring host's per-call floor against the one predictions assume, when the
    kernels were measured on a catalog GPU and at least 3 of them are floor-bound."""
    from hybridperf.devices import get_device
    from hybridperf.errors import HybridperfError
    from hybridperf.priors.kernel_prior import host_floor_note

    try:
        dev = get_device(str(measured["device"].iloc[0]))
    except HybridperfError:  # the CPU, or a GPU the catalog lacks
        return None
    note = host_floor_note(measured, dev, min_kernels=3)
    return f"{note}, and `--calibration` with these rows learns the rest" if note else None


def register(app: typer.Typer) -> None:
    app.command("collect")(collect)
