"""`hybridperf data summary PATH`: what a measurement data set holds, as device x op-class counts.

PATH may be a NeuSight artifact root, a Vidur root, aiconfigurator's systems folder, the shared `datasets`
folder holding them, a Vidur `mlp.csv`, or a single canonical / NeuSight-style kernel CSV. Bad rows are
dropped, counted and the first few are shown as file:line reasons.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from hybridperf.csvio import read_csv
from hybridperf.errors import InputError
from hybridperf.ops import OP_CLASS, OP_CLASSES

SHOW_REPORTS = 3

data_app = typer.Typer(help="Inspect measurement data sets.", no_args_is_help=True, add_completion=False)


@dataclass
class Part:
    """One kernel table of a data set, with the bad rows dropped while loading it."""
    title: str
    table: pd.DataFrame
    reports: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _canon(raw: pd.DataFrame, reports: list[str], **kw) -> pd.DataFrame:
    from hybridperf.datasets.schema import canonicalize

    df = canonicalize(raw, on_bad="drop", **kw)
    reports.extend(canonicalize.last_report)
    return df


def _neusight_parts(root: Path) -> list[Part]:
    """NeuSight training kernels (train/collect) and test kernels, with per-file bad-row reports."""
    from hybridperf.datasets.neusight import TEST_TABLES

    parts = []
    base = root / "data" / "dataset"
    reports: list[str] = []
    frames = []
    collect = base / "train" / "collect"
    if collect.is_dir():
        for op_dir in sorted(p for p in collect.iterdir() if p.is_dir()):
            if op_dir.name not in OP_CLASS:
                continue  # conv is not modelled
            for f in sorted(op_dir.glob("*/*.csv")):
                frames.append(_canon(read_csv(f), reports, device=f.stem, source=str(f), require_latency=True))
    if frames:
        parts.append(Part("NeuSight training kernels (data/dataset/train/collect)",
                          pd.concat(frames, ignore_index=True), reports))
    reports, frames = [], []
    for name in TEST_TABLES:
        f = base / "test" / f"{name}.csv"
        if f.is_file():
            frames.append(_canon(read_csv(f), reports, source=str(f), require_latency=True))
    if frames:
        parts.append(Part("NeuSight test kernels (data/dataset/test)", pd.concat(frames, ignore_index=True), reports))
    if (root / "label").is_dir():
        from hybridperf.datasets.labels import load_labels

        labels = load_labels(root)
        if len(labels) and parts:
            modes = labels["mode"].value_counts().to_dict()
            parts[-1].notes.append(
                f"NeuSight whole-model labels: {len(labels)} runs ({', '.join(f'{k} {v}' for k, v in sorted(modes.items()))}"
                f"; {int(labels['fusion'].sum())} fused) on {labels['device'].nunique()} devices")
    return parts


def _vidur_part(root: Path) -> Part:
    from hybridperf.datasets.vidur_compute import load_vidur_compute

    df = load_vidur_compute(root)
    skipped = load_vidur_compute.last_skipped
    notes = []
    if skipped:
        notes.append("Vidur ops outside the op vocabulary, skipped: "
                     + ", ".join(f"{k} {v} rows" for k, v in sorted(skipped.items())))
    return Part("Vidur compute profiles, fp16 (profiling/compute)", df, list(load_vidur_compute.last_report), notes)


def _aiconfigurator_part(path: Path) -> Part:
    """aiconfigurator's kernel tables (gemm, attention, MoE) of the shared systems, with their NCCL tables and
    serving runs as notes. Only the systems of `SYSTEM_DEVICES` are read."""
    from hybridperf.aic_kernels import dtype_of
    from hybridperf.datasets.aiconfigurator import SYSTEM_DEVICES, aiconfigurator_root, load_kernels
    from hybridperf.datasets.aiconfigurator_comm import load_aiconfigurator_comm

    root = aiconfigurator_root(path)
    df = load_kernels(root)
    table = pd.DataFrame({"device": df["system"].astype(str), "op_class": df["op_name"].astype(str),
                          "dtype": dtype_of(df)})
    notes = []
    comm = [s for s in sorted(SYSTEM_DEVICES) if (root / s / "comm").is_dir()]
    if comm:
        n = load_aiconfigurator_comm(root, comm).groupby("system").size()
        notes.append("aiconfigurator NCCL tables (newest version): " + ", ".join(f"{k} {v} rows" for k, v in n.items()))
    runs = root.parent / "silicon_sample.csv"
    if runs.is_file():
        r = read_csv(runs)
        n = r.groupby(["system", "mode"]).size()
        notes.append(f"aiconfigurator serving runs ({runs.name}): "
                     + ", ".join(f"{s} {m} {v}" for (s, m), v in n.items()))
    return Part("aiconfigurator kernel tables (systems/data)", table, [], notes)


def _file_part(path: Path) -> Part:
    raw = read_csv(path)
    cols = [str(c) for c in raw.columns]
    if any(c.startswith("time_stats.") for c in cols) and "num_tokens" in cols:
        from hybridperf.datasets.vidur_compute import VIDUR_DEVICES, load_vidur_file

        folder = path.parts[-4] if len(path.parts) >= 4 else ""
        df, skipped, reports = load_vidur_file(path, VIDUR_DEVICES.get(folder.lower(), folder or "unknown"))
        notes = ["skipped: " + ", ".join(f"{k} {v} rows" for k, v in skipped.items())] if skipped else []
        return Part(f"Vidur profile {path.name}", df, reports, notes)
    reports: list[str] = []
    df = _canon(raw, reports, source=str(path))
    return Part(f"kernel table {path.name}", df, reports)


def summarize(path: str | Path) -> list[Part]:
    """Load every kernel table under `path` (see module docstring). InputError if there is none."""
    from hybridperf.datasets.neusight import neusight_root
    from hybridperf.datasets.vidur_compute import vidur_compute_root

    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file or folder")
    if p.is_file():
        return [_file_part(p)]
    parts: list[Part] = []
    try:
        parts.extend(_neusight_parts(neusight_root(p)))
    except InputError:
        pass
    try:
        vroot = vidur_compute_root(p)
    except InputError:
        vroot = None
    if vroot is not None:
        parts.append(_vidur_part(vroot))
    try:
        parts.append(_aiconfigurator_part(p))
    except InputError:
        pass
    if not parts:
        raise InputError(f"{path}: neither a NeuSight artifact, a Vidur profile folder, aiconfigurator's systems "
                         "folder, nor a kernel CSV")
    return parts


def count_table(df: pd.DataFrame) -> pd.DataFrame:
    """device x op_class counts with a 'total' column and a 'total' row."""
    present = set(df["op_class"])
    classes = [c for c in OP_CLASSES if c in present] + sorted(present - set(OP_CLASSES)) or list(OP_CLASSES)
    dev = df["device"].fillna("").astype(str).replace("", "(no device)")
    counts = pd.crosstab(dev, df["op_class"]).reindex(columns=classes, fill_value=0)
    counts["total"] = counts.sum(axis=1)
    counts.loc["total"] = counts.sum(axis=0)
    counts.index.name = "device"
    return counts.astype(int)


def _render(console: Console, part: Part) -> None:
    counts = count_table(part.table)
    dtypes = ", ".join(sorted(part.table["dtype"].dropna().astype(str).unique()))
    t = Table(title=f"{part.title} ({dtypes})" if dtypes else part.title)
    t.add_column("device", no_wrap=True)
    for c in counts.columns:
        t.add_column(c, justify="right")
    for i, (dev, row) in enumerate(counts.iterrows()):
        t.add_row(str(dev), *(f"{v:,}" for v in row), end_section=(i == len(counts) - 2))
    console.print(t)
    n = len(part.reports)
    if n:
        shown = "; ".join(part.reports[:SHOW_REPORTS])
        more = f"; ... ({n - SHOW_REPORTS} more)" if n > SHOW_REPORTS else ""
        console.print(f"bad rows dropped: {n} ({shown}{more})", soft_wrap=True, highlight=False, markup=False)
    else:
        console.print("bad rows dropped: 0", highlight=False)
    for note in part.notes:
        console.print(note, soft_wrap=True, highlight=False, markup=False)


@data_app.command("summary")
def summary(path: Path = typer.Argument(..., help="NeuSight, Vidur or aiconfigurator root, the shared datasets "
                                                  "folder, or a kernel CSV")) -> None:
    """Count kernels per device and op class; report the bad rows dropped."""
    parts = summarize(path)
    console = Console()
    if not console.is_terminal:  # piped or captured: do not squeeze device names into 80 columns
        console = Console(width=max(console.width, 120))
    for part in parts:
        _render(console, part)


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
