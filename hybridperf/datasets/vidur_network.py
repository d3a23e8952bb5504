"""Loader for Vidur's NCCL collective profiles (`data/profiling/network/<system>/<collective>.csv`).

Vidur times `torch.distributed` collectives on fp16 buffers with kineto (device time of the NCCL
kernel on rank 0). Columns: `time_stats.<coll>.{min,max,mean,median,std}` (ms), `rank`,
`num_workers`, `size` (bytes of the per-rank buffer), `collective`, `devices_per_node` (GPUs used per
node; `num_workers / devices_per_node` nodes) and `max_devices_per_node`.

`load_vidur_network` returns one tidy table:
    system, collective, nbytes, gpus, gpus_per_node, nodes, latency_ms (= median), min_ms, mean_ms,
    max_ms, std_ms, source ("file:line")
Rows with a NaN or non-positive size/worker count/latency are dropped and listed, with file and line,
in `df.attrs["dropped"]`; a file lacking a required column raises InputError.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.errors import InputError

COLUMNS = ("system", "collective", "nbytes", "gpus", "gpus_per_node", "nodes", "latency_ms", "min_ms",
           "mean_ms", "max_ms", "std_ms", "source")
REQUIRED = ("size", "num_workers", "devices_per_node")
NETWORK_SUBDIRS = ("vidur/data/profiling/network", "data/profiling/network", "profiling/network", "network")


def find_network_root(root: str | Path) -> Path:
    """The `network/` folder under `root` (the shared datasets folder, a Vidur clone, or the folder)."""
    root = Path(root)
    for sub in NETWORK_SUBDIRS:
        cand = root / sub
        if cand.is_dir():
            return cand
    if root.is_dir() and any(p.is_dir() and any(p.glob("*.csv")) for p in root.iterdir()):
        return root
    raise InputError(f"no Vidur network profiles under {root} (expected {NETWORK_SUBDIRS[0]}/<system>/*.csv)")


def read_profile_csv(path: str | Path, system: str | None = None) -> pd.DataFrame:
    """Read one `<system>/<collective>.csv` into the tidy table (see module doc)."""
    path = Path(path)
    system = system or path.parent.name
    coll = path.stem
    try:
        raw = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read CSV ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    raw.columns = [str(c).strip() for c in raw.columns]
    median = f"time_stats.{coll}.median"
    missing = [c for c in (*REQUIRED, median) if c not in raw.columns]
    if missing:
        raise InputError(f"{path}: missing required column(s) {missing}")

    def num(col: str) -> pd.Series:
        if col not in raw.columns:
            return pd.Series(np.nan, index=raw.index, dtype=float)
        return pd.to_numeric(raw[col], errors="coerce").astype(float)

    df = pd.DataFrame({
        "system": system,
        "collective": coll,
        "nbytes": num("size"),
        "gpus": num("num_workers"),
        "gpus_per_node": num("devices_per_node"),
        "latency_ms": num(median),
        "min_ms": num(f"time_stats.{coll}.min"),
        "mean_ms": num(f"time_stats.{coll}.mean"),
        "max_ms": num(f"time_stats.{coll}.max"),
        "std_ms": num(f"time_stats.{coll}.std"),
        "source": [f"{path}:{i + 2}" for i in range(len(raw))],  # +2: header line, 1-based lines
    })
    checks = {
        "size": df["nbytes"], "num_workers": df["gpus"], "devices_per_node": df["gpus_per_node"],
        median: df["latency_ms"],
    }
    bad = pd.Series(False, index=df.index)
    reasons: dict[int, str] = {}
    for col, s in checks.items():
        b = ~np.isfinite(s) | (s <= 0)
        for i in np.flatnonzero(b.to_numpy() & ~bad.to_numpy()):
            v = s.iloc[i]
            reasons[i] = f"{df['source'].iloc[i]}: {col} is {'NaN' if not np.isfinite(v) else v} (need > 0)"
        bad |= b
    # multi-node semantics of Vidur: num_workers is a multiple of devices_per_node, or smaller
    g, p = df["gpus"], df["gpus_per_node"]
    shape_bad = ~bad & (p < g) & ((g % p) != 0)
    for i in np.flatnonzero(shape_bad.to_numpy()):
        reasons[i] = f"{df['source'].iloc[i]}: num_workers {g.iloc[i]:g} not a multiple of devices_per_node {p.iloc[i]:g}"
    bad |= shape_bad
    out = df.loc[~bad].copy()
    out["gpus"] = out["gpus"].astype(int)
    out["gpus_per_node"] = np.minimum(out["gpus_per_node"], out["gpus"]).astype(int)
    out["nbytes"] = out["nbytes"].astype(np.int64)
    out["nodes"] = (out["gpus"] // out["gpus_per_node"]).astype(int)
    out = out[list(COLUMNS)].reset_index(drop=True)
    out.attrs["dropped"] = [reasons[i] for i in sorted(reasons)]
    return out


def load_vidur_network(
    root: str | Path,
    systems: list[str] | tuple[str, ...] | None = None,
    collectives: list[str] | tuple[str, ...] | None = None,
) -> pd.DataFrame:
    """Load every (or the named) system's collective profiles under `root` into one tidy table.

    `root` may be the shared datasets folder (`../shared/datasets`), a Vidur clone, or the `network/`
    folder itself. Dropped rows are listed in `df.attrs["dropped"]` ("file:line: reason").
    """
    net = find_network_root(root)
    frames, dropped = [], []
    found = sorted(p for p in net.iterdir() if p.is_dir())
    if systems is not None:
        names = {p.name for p in found}
        unknown = [s for s in systems if s not in names]
        if unknown:
            raise InputError(f"no Vidur network profiles for {unknown} under {net} (have {sorted(names)})")
        found = [p for p in found if p.name in set(systems)]
    for sysdir in found:
        for csv in sorted(sysdir.glob("*.csv")):
            if collectives is not None and csv.stem not in collectives:
                continue
            df = read_profile_csv(csv, sysdir.name)
            dropped.extend(df.attrs.get("dropped", []))
            frames.append(df)
    if not frames:
        raise InputError(f"no collective profiles found under {net}")
    out = pd.concat(frames, ignore_index=True)
    out.attrs["dropped"] = dropped
    return out


def data_digest(df: pd.DataFrame) -> str:
    """sha256 over the identifying columns and latencies (order-independent), for manifests."""
    import hashlib

    cols = ["system", "collective", "nbytes", "gpus", "gpus_per_node", "latency_ms"]
    s = df[cols].sort_values(cols[:5]).to_csv(index=False, float_format="%.9g")
    return hashlib.sha256(s.encode()).hexdigest()
