"""`hybridperf devices`: list the device and node catalog."""
from __future__ import annotations

import json
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from hybridperf.devices import DeviceSpec, generic_spec_note, get_device, list_devices, list_nodes


def note_generic_spec(dev: DeviceSpec) -> None:
    """Say on stderr what the priors assume for a device spec without architecture, TDP or memory type."""
    if note := generic_spec_note(dev):
        typer.echo(f"note: {note}", err=True)


def devices(
    spec: Optional[str] = typer.Option(
        None, "--spec", metavar="DEVICE",
        help="print DEVICE's full spec as JSON instead: the project's format, which --device accepts as a file "
             "(a template for a GPU the catalog lacks)"),
) -> None:
    """List the built-in accelerators and nodes with their key spec-sheet numbers."""
    if spec is not None:
        print(json.dumps(get_device(spec).to_dict(), indent=2))
        return
    t = Table(title="hybridperf device catalog")
    for col in ("name", "aliases", "SMs/CUs", "fp32 TF", "fp16 TC TF", "mem GB", "BW GB/s", "L2 MB"):
        t.add_column(col)
    for d in list_devices():
        t.add_row(d.name, ", ".join(d.aliases), str(d.num_sms), f"{d.peak_tflops.get('fp32', 0):g}",
                  f"{d.peak_tflops.get('fp16_tc', 0):g}", f"{d.mem_gb:g}", f"{d.mem_bw_gbs:g}", f"{d.l2_mb:g}")
    Console().print(t)
    n = Table(title="nodes")
    for col in ("name", "aliases", "GPU", "GPUs/node", "intra", "intra GB/s", "inter GB/s"):
        n.add_column(col)
    for x in list_nodes():
        n.add_row(x.name, ", ".join(x.aliases), x.device, str(x.gpus_per_node), x.intra_topology,
                  f"{x.intra_bw_gbs:g}", f"{x.inter_bw_gbs:g}")
    Console().print(n)


def register(app: typer.Typer) -> None:
    app.command("devices")(devices)
