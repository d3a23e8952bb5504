"""`hybridperf predict-collective`: NCCL collective latency with a 90% interval (docs/predict-collective.md)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import typer

from hybridperf.devices.node_lookup import resolve_node
from hybridperf.errors import InputError
from hybridperf.guard import check_predictions

_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
          "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3, "ti": 1024**4,
          "tib": 1024**4, "p": 1e15, "pb": 1e15, "pi": 1024**5, "pib": 1024**5}


def parse_bytes(text: str) -> float:
    """`65536`, `6.4e7`, `64MiB`, `2 KB` -> bytes (> 0); InputError otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise InputError(f"--bytes must be a positive number of bytes with an optional unit (B, KB, KiB, MB, MiB, GB, "
                         f"GiB, TB, TiB, PB, PiB; e.g. 65536, 6.4e7, 64MiB), got {text!r}")
    value = float(m.group(1)) * _UNITS[unit]
    if value != value or value == float("inf"):
        raise InputError(f"--bytes must be a finite number of bytes, got {text!r}")
    if not value >= 1:
        raise InputError(f"--bytes must be at least one byte, got {text!r}")
    if abs(value - round(value)) > 1e-9 * value:  # 0.1MB is 100000 bytes give or take float rounding
        raise InputError(f"--bytes must be a whole number of bytes, got {text!r} ({value:g} bytes)")
    return float(round(value))


def predict_collective(
    collective: str = typer.Option(..., "--collective", help="all_reduce | all_gather | reduce_scatter | all_to_all | send_recv"),
    nbytes: str = typer.Option(..., "--bytes", help="Size as NCCL's tests report it (all_gather: the gathered output; "
                               "reduce_scatter: the input; all_to_all: one rank's send buffer), e.g. 65536 or 64MiB."),
    gpus: int = typer.Option(..., "--gpus", help="Number of ranks."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="Ranks per node (default: fill nodes)."),
    device: str = typer.Option(..., "--device", help="Node name (DGX-A100, DGX-H100, a100_pairwise_nvlink, ...) or a GPU."),
    as_json: bool = typer.Option(False, "--json", help='Print {"ms", "lo_ms", "hi_ms"} as the last line.'),
    timing: str = typer.Option("auto", "--timing", help="graph: the kernel in back-to-back launches or a CUDA graph "
                               "(aiconfigurator, nccl-tests); call: one timed call with its launch floor (Vidur); "
                               "auto: call on Vidur's profiled systems (a100_dgx, a100_pairwise_nvlink, "
                               "a40_pairwise_nvlink; a node's `collective_timing`), graph elsewhere."),
    impl: str = typer.Option("nccl", "--impl", help="nccl | vllm | sglang | trtllm: the engine's own all-reduce "
                             "(one node, graph timing)."),
    model_bundle: Optional[Path] = typer.Option(None, "--model-bundle", help="Collectives bundle dir (default: shipped)."),
    prior_only: bool = typer.Option(False, "--prior-only", help="Analytical prior with default constants only."),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="CSV of this system's NCCL runs, timed "
                                               "as --timing says (collective, bytes, gpus, optional gpus_per_node, "
                                               "latency_ms): the error at their sizes, interpolated in log size, "
                                               "corrects the prediction."),
) -> None:
    """Predict the latency of one NCCL collective (or an engine's all-reduce) on a node or several."""
    from hybridperf.priors.collectives import (ENGINES, canonical_collective, check_shape, check_timing,
                                               per_host_to_domain)
    from hybridperf.residual_models.collectives import CollectiveModel, predict_collective

    if prior_only and model_bundle is not None:
        raise InputError("--model-bundle and --prior-only are mutually exclusive")
    coll = canonical_collective(collective)
    n = parse_bytes(nbytes)
    if gpus < 2:
        raise InputError(f"--gpus must be >= 2: a collective on one rank moves nothing, got {gpus}")
    node, note = resolve_node(device)
    per_host = gpus_per_node
    if gpus_per_node is not None and gpus_per_node > 0:  # ranks per host -> per NVLink domain (an NVL72's trays)
        gpus_per_node = per_host_to_domain(gpus, gpus_per_node, node)
    _, placed = check_shape(coll, gpus, gpus_per_node, node)
    gpus_per_node = placed if gpus_per_node else None
    asked_per_node = min(per_host, placed) if gpus_per_node else min(gpus, node.gpus_per_node)  # as a CSV writes it
    notes = [note] if note else []  # said once the collective is predicted: bad input stays a one-line error
    if gpus_per_node and gpus_per_node != min(per_host, gpus):
        notes.append(f"note: {node.name} is an NVLink domain of {node.gpus_per_node} GPUs over hosts of "
                     f"{node.gpus_per_host}; {gpus} ranks at {per_host} per host talk over NVLink "
                     f"{gpus_per_node} at a time")
    per_node = gpus_per_node or min(gpus, node.gpus_per_node)  # the ranks one NVLink domain or node holds
    impl = impl.strip().lower()
    auto = str(timing).strip().lower() == "auto"
    if auto:
        timing = node.collective_timing if impl == "nccl" else "graph"
    timing = check_timing(timing)
    if impl not in ENGINES:
        raise InputError(f"--impl must be one of {', '.join(ENGINES)}; got {impl!r}")
    if impl != "nccl" and (coll != "all_reduce" or per_node != gpus):
        raise InputError(f"--impl {impl} is an all-reduce inside one node: use --collective all_reduce and --gpus <= "
                         f"{node.gpus_per_node} on one node")
    if calibration is not None and impl != "nccl":
        raise InputError("--calibration takes NCCL measurements (nccl-tests); it does not calibrate --impl "
                         f"{impl}'s all-reduce")
    if impl != "nccl" and timing != "graph":
        raise InputError(f"--impl {impl} is modelled as the engines run it, inside a CUDA graph: use --timing graph")
    model = CollectiveModel.prior_only() if prior_only else CollectiveModel.load(model_bundle)
    measured = None
    if calibration is not None:
        from hybridperf.csvio import read_csv, with_rows

        measured = with_rows(read_csv(calibration, "measured collectives CSV"), calibration, "calibration CSV")
    out = predict_collective(coll, n, gpus, gpus_per_node, node, model, timing, impl)
    if measured is not None:
        out = _calibrated(out, n, measured, coll, gpus, asked_per_node, per_node, node, model, timing)
    check_predictions(out["ms"], out["lo_ms"], out["hi_ms"], f"{coll} on {device} ({node.name})")
    for line in notes:
        typer.echo(line, err=True)
    out = {k: (round(v, 6) if v >= 1e-3 else float(f"{v:.6g}")) for k, v in out.items()}
    if as_json:
        if auto and timing == "call":  # the human line says it; a --json caller reads stderr for it
            typer.echo("note: call timing, each call timed alone with its host's floor (Vidur's profiles); "
                       "--timing graph for back-to-back calls (nccl-tests, aiconfigurator's system ids)", err=True)
        typer.echo(json.dumps(out))
    else:
        what = coll if impl == "nccl" else f"{impl} custom all_reduce"
        typer.echo(f"{what} of {n:,.0f} B on {gpus} GPU(s), {per_node}/node, {node.name}, {timing} timing: "
                   f"{out['ms']:.4g} ms (90% interval {out['lo_ms']:.4g} - {out['hi_ms']:.4g} ms)")


def _calibrated(out: dict, n: float, measured, coll: str, gpus: int, asked_per_node: int, per_node: int, node,
                model, timing: str) -> dict:
    """`out` corrected by the measured runs of the same collective and shape (`transfer.collectives`): rows of
    `asked_per_node` GPUs a node as written, predicted at `per_node` (an NVL72 tray's ranks share one domain)."""
    import numpy as np

    from hybridperf.transfer.collectives import correction, log_ratios, measured_rows

    rows = measured_rows(measured, coll, gpus, asked_per_node)
    if rows.empty:
        typer.echo(f"note: no measured {coll} on {gpus} GPU(s), {asked_per_node}/node in the calibration CSV: "
                   "uncalibrated", err=True)
        return out
    try:
        sizes = np.array([parse_bytes(v) for v in rows["bytes"]])
    except InputError as e:
        raise InputError(f"measured collectives CSV, column bytes: {str(e).removeprefix('--bytes ')}") from None
    pred = model.predict(coll, sizes, gpus, per_node, node, timing)
    k = float(correction(n, *log_ratios(sizes, _numbers(rows["latency_ms"]), pred["ms"])))
    typer.echo(f"calibrated by {len(set(sizes))} measured size(s): x{k:.3g}", err=True)
    return {key: v * k for key, v in out.items()}


def _numbers(col) -> list:
    """A CSV column as floats (InputError naming the first cell that is not a number)."""
    out = []
    for v in col:
        try:
            out.append(float(v))
        except (TypeError, ValueError):
            raise InputError(f"measured collectives CSV: latency_ms must be a number, got {v!r}") from None
    return out


def register(app: typer.Typer) -> None:
    app.command("predict-collective")(predict_collective)
