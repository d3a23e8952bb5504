"""`hybridperf constants`: the prior constants read off GPUs, where each came from, and which of them,
read off a single GPU, price every GPU (the ones to re-check first on a new architecture)."""
from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _jsonable(value):
    """A constant's value as JSON can hold it: mappings with string keys (LIBRARY_EFFICIENCY's are tuples)."""
    if hasattr(value, "items"):
        return {(k if isinstance(k, str) else "/".join(map(str, k)) if isinstance(k, tuple) else str(k)): _jsonable(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _short(value) -> str:
    text = json.dumps(_jsonable(value)) if isinstance(value, (dict, list, tuple)) or hasattr(value, "items") \
        else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def constants(
    as_json: bool = typer.Option(False, "--json", help="print the table as JSON (values in full)"),
    one_gpu: bool = typer.Option(False, "--one-gpu", help="only the constants read off one GPU and used for all"),
) -> None:
    """List the analytical priors' fitted and hand-set constants with their provenance."""
    from hybridperf.priors.constants import provenance_rows

    rows = [r for r in provenance_rows() if r["one_gpu_default"] or not one_gpu]
    if as_json:
        print(json.dumps([{**r, "value": _jsonable(r["value"])} for r in rows], indent=2))
        return
    t = Table(title="prior constants (! = read off one GPU, used for every GPU)")
    for col in ("", "constant", "value", "unit", "read off", "applies to", "checked on", "refit by"):
        t.add_column(col, overflow="fold")
    for r in rows:
        cells = (r["name"], _short(r["value"]), r["unit"], r["read_off"], r["applies_to"], r["checked_on"], r["refit"])
        t.add_row("!" if r["one_gpu_default"] else "", *(escape(str(c)) for c in cells))  # `decode_bw[fa3]` is no tag
    Console().print(t)
    flagged = sum(r["one_gpu_default"] for r in rows)
    typer.echo(f"{len(rows)} constants, {flagged} read off one GPU and used for every GPU", err=True)


def register(app: typer.Typer) -> None:
    app.command("constants")(constants)
