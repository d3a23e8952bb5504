"""Loaders for the NeuSight (ASPLOS'25) artifact layout (`scripts/asplos/` of its repository).

    data/dataset/train/collect/<op>/p2.1.0/<GPU>.csv   raw training kernels, one file per op and GPU
    data/dataset/train/{elem,ln,softmax}.csv           the artifact's processed training tables
    data/dataset/test/{bmm,linear,elem,softmax,ln}.csv test kernels (other shapes), all GPUs
    data/device_configs/*.json                         device descriptions
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from hybridperf.datasets.schema import canonicalize
from hybridperf.csvio import read_csv
from hybridperf.errors import InputError
from hybridperf.ops import OP_CLASS

TEST_TABLES = ("bmm", "linear", "elem", "softmax", "ln")


def neusight_root(path: str | Path) -> Path:
    """Accept the artifact root, its parent (`datasets/`), or `data/dataset`; return the artifact root."""
    p = Path(path)
    for cand in (p, p / "neusight", p.parent.parent):
        if (cand / "data" / "dataset").is_dir():
            return cand
    raise InputError(f"{path}: not a NeuSight artifact folder (no data/dataset inside)")


def load_collect(root: str | Path, ops=None, devices=None, on_bad: str = "drop") -> pd.DataFrame:
    """Training kernels from `data/dataset/train/collect/<op>/*/<GPU>.csv` as one canonical table."""
    base = neusight_root(root) / "data" / "dataset" / "train" / "collect"
    frames = []
    for op_dir in sorted(base.iterdir()):
        if op_dir.name not in OP_CLASS or (ops and op_dir.name not in ops):
            continue  # conv is not modelled yet
        for f in sorted(op_dir.glob("*/*.csv")):
            if devices and f.stem not in devices:
                continue
            frames.append(canonicalize(read_csv(f), device=f.stem, source=str(f), require_latency=True, on_bad=on_bad,
                                       host="neusight"))
    if not frames:
        raise InputError(f"{base}: no kernel CSVs found")
    return pd.concat(frames, ignore_index=True)


def load_test(root: str | Path, devices=None, on_bad: str = "drop") -> pd.DataFrame:
    """Test kernels from `data/dataset/test/*.csv` (bmm, linear, elem, softmax, ln)."""
    base = neusight_root(root) / "data" / "dataset" / "test"
    frames = []
    for name in TEST_TABLES:
        f = base / f"{name}.csv"
        if not f.exists():
            continue
        raw = read_csv(f)
        df = canonicalize(raw, source=str(f), require_latency=True, on_bad=on_bad, host="neusight")
        frames.append(df)
    if not frames:
        raise InputError(f"{base}: no test tables found")
    out = pd.concat(frames, ignore_index=True)
    if devices:
        out = out[out["device"].isin(devices)].reset_index(drop=True)
    return out


def training_devices(root: str | Path) -> list[str]:
    """GPU names that have training kernels in the artifact."""
    base = neusight_root(root) / "data" / "dataset" / "train" / "collect" / "bmm"
    return sorted({f.stem for f in base.glob("*/*.csv")})
