"""`hybridperf predict-collective`: NCCL collective latency with a 90% interval (CONTRACT.md section 3)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import typer

from hybridperf.devices.node_lookup import resolve_node
from hybridperf.errors import InputError
from hybridperf.guard import check_predictions

_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
          "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3}


def parse_bytes(text: str) -> float:
    """`65536`, `6.4e7`, `64MiB`, `2 KB` -> bytes (> 0); InputError otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise InputError(f"--bytes must be a positive number of bytes (e.g. 65536, 6.4e7, 64MiB), got {text!r}")
    value = float(m.group(1)) * _UNITS[unit]
    if not value > 0 or value != value or value == float("inf"):
        raise InputError(f"--bytes must be > 0, got {text!r}")
    return value


def predict_collective(
    collective: str = typer.Option(..., "--collective", help="all_reduce | all_gather | reduce_scatter | all_to_all | send_recv"),
    nbytes: str = typer.Option(..., "--bytes", help="Bytes of each rank's buffer (Vidur's `size`), e.g. 65536 or 64MiB."),
    gpus: int = typer.Option(..., "--gpus", help="Number of ranks."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="Ranks per node (default: fill nodes)."),
    device: str = typer.Option(..., "--device", help="Node name (DGX-A100, DGX-H100, a100_pairwise_nvlink, ...) or a GPU."),
    as_json: bool = typer.Option(False, "--json", help='Print {"ms", "lo_ms", "hi_ms"} as the last line.'),
    model_bundle: Optional[Path] = typer.Option(None, "--model-bundle", help="Collectives bundle dir (default: shipped)."),
    prior_only: bool = typer.Option(False, "--prior-only", help="Analytical prior with default constants only."),
) -> None:
    """Predict the latency of one NCCL collective on a node (or several nodes of that kind)."""
    from hybridperf.priors.collectives import CollectiveModel, canonical_collective, check_shape, predict_collective

    if prior_only and model_bundle is not None:
        raise InputError("--model-bundle and --prior-only are mutually exclusive")
    coll = canonical_collective(collective)
    n = parse_bytes(nbytes)
    if gpus < 1:
        raise InputError(f"--gpus must be >= 1, got {gpus}")
    node, note = resolve_node(device)
    check_shape(coll, gpus, gpus_per_node, node)
    if note:
        typer.echo(note, err=True)
    model = CollectiveModel.prior_only() if prior_only else CollectiveModel.load(model_bundle)
    out = predict_collective(coll, n, gpus, gpus_per_node, node, model)
    check_predictions(out["ms"], out["lo_ms"], out["hi_ms"], f"{coll} on {node.name}")
    out = {k: (round(v, 6) if v >= 1e-3 else float(f"{v:.6g}")) for k, v in out.items()}
    if as_json:
        typer.echo(json.dumps(out))
    else:
        g = gpus_per_node or min(gpus, node.gpus_per_node)
        typer.echo(f"{coll} of {n:,.0f} B on {gpus} GPU(s), {g}/node, {node.name}: {out['ms']:.4g} ms "
                   f"(90% interval {out['lo_ms']:.4g} - {out['hi_ms']:.4g} ms)")


def register(app: typer.Typer) -> None:
    app.command("predict-collective")(predict_collective)
