"""Assemble kernel training tables with features and residual targets, one device at a time."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.csvio import read_csv
from hybridperf.datasets.neusight import load_collect, load_test, neusight_root
from hybridperf.datasets.schema import canonicalize
from hybridperf.devices import get_device
from hybridperf.errors import InputError
from hybridperf.priors.constants import DEFAULT_CONSTANTS, PriorConstants
from hybridperf.priors.kernel_prior import kernel_prior_terms
from hybridperf.residual_models.features import kernel_features

KEY = ["device", "op", "dtype", "B", "M", "N", "K", "H"]
#: `table` of the rows that are kernels of real models' layers (NeuSight's test tables, our grids'
#: test shapes); the rest are the randomly shaped collect tables. A training GPU's own bias is read
#: off these rows (`training.kernels.training_device_bias`).
MODEL_SHAPES_TABLE = "test"


def load_neusight_training(root: str | Path, splits=("train",)) -> pd.DataFrame:
    """Canonical kernels of the NeuSight artifact: `train` = raw collect files plus the processed
    (large-shape) elem/ln/softmax tables; `test` = the test tables. Duplicates are dropped."""
    base = neusight_root(root)
    frames = []
    if "train" in splits:
        frames.append(load_collect(base))
        for name in ("elem", "ln", "softmax"):
            f = base / "data" / "dataset" / "train" / f"{name}.csv"
            if f.exists():
                frames.append(canonicalize(read_csv(f), source=str(f), require_latency=True, on_bad="drop",
                                           host="neusight"))
    test = load_test(base) if "test" in splits else None
    df = pd.concat([*frames, test], ignore_index=True).drop_duplicates(subset=KEY).reset_index(drop=True)
    # tagged after dropping duplicates, so the row order (and any subsample) is unchanged
    in_test = (pd.MultiIndex.from_frame(df[KEY].fillna(-1)).isin(pd.MultiIndex.from_frame(test[KEY].fillna(-1)))
               if test is not None else np.zeros(len(df), bool))
    return df.assign(table=np.where(in_test, MODEL_SHAPES_TABLE, "collect"))


def load_kernel_table(path: str | Path) -> pd.DataFrame:
    """Training kernels from a NeuSight artifact folder, the shared `datasets` folder, or a CSV
    (canonical or NeuSight-style with Device and Latency columns)."""
    p = Path(path)
    if p.is_file():
        return canonicalize(read_csv(p), source=str(p), require_latency=True)
    return load_neusight_training(p, splits=("train", "test"))


def load_measured_grid(gpu_dir: str | Path, splits=("train", "test"), dtypes=("fp32",)) -> pd.DataFrame:
    """Kernels one GPU measured with `hybridperf collect` on NeuSight's shape lists
    (`experiments/gpu/grid_shapes.py`): `<gpu_dir>/grid/<split>_*.csv`, only rows of `dtypes`.
    Duplicates (by device, op, dtype and shape) are dropped."""
    files = sorted(f for s in splits for f in (Path(gpu_dir) / "grid").glob(f"{s}_*.csv"))
    if not files:
        raise InputError(f"{gpu_dir}: no grid/{{{','.join(splits)}}}_*.csv files")
    df = pd.concat([canonicalize(read_csv(f), source=str(f), require_latency=True)
                    .assign(table=MODEL_SHAPES_TABLE if f.name.startswith("test_") else "collect") for f in files],
                   ignore_index=True)
    return df[df["dtype"].isin(dtypes)].drop_duplicates(subset=KEY).reset_index(drop=True)


def bias_groups(df: pd.DataFrame) -> list[str]:
    """Columns whose combination shares one overall prior bias: device, op class and, where rows say
    them, timing (a profiler's kernel duration and a timed call differ by the call overhead) and dtype
    (fp32 and half precision run different kernels; our H200's bmm reads +0.031 in fp32 and +0.067 in
    fp16, where one group for both gave +0.046)."""
    return ["device", "op_class"] + [c for c in ("timing", "dtype") if c in df.columns]


def subsample(df: pd.DataFrame, max_rows: int, seed: int) -> pd.DataFrame:
    """At most `max_rows` rows per `bias_groups` group, deterministic given `seed`."""
    parts = []
    for _, g in df.groupby(bias_groups(df), sort=True):
        parts.append(g.sample(n=min(len(g), max_rows), random_state=seed) if len(g) > max_rows else g)
    return pd.concat(parts).sort_index()


@dataclass
class Featurized:
    """Rows of a canonical table with their prior, features and residual target `y = log(measured/prior)`."""

    rows: pd.DataFrame
    X: np.ndarray
    prior_ms: np.ndarray
    floor_ms: np.ndarray
    roofline_ms: np.ndarray
    y: np.ndarray


def featurize(df: pd.DataFrame, constants: PriorConstants = DEFAULT_CONSTANTS) -> Featurized:
    """Prior terms and features for every row (grouped by device internally; order kept), priced with
    the GPU-fitted `constants`."""
    df = df.reset_index(drop=True)
    X = None
    prior = np.zeros(len(df))
    floor = np.zeros(len(df))
    roofline = np.zeros(len(df))
    for dev, idx in df.groupby("device", sort=False).indices.items():
        spec = get_device(dev)
        sub = df.iloc[idx]
        terms = kernel_prior_terms(sub, spec, constants=constants)
        feats = kernel_features(sub, terms, spec)
        if X is None:
            X = np.zeros((len(df), feats.shape[1]), dtype=np.float32)
        X[idx] = feats
        prior[idx] = terms["prior_ms"].to_numpy()
        floor[idx] = terms["floor_ms"].to_numpy()
        roofline[idx] = terms["roofline_ms"].to_numpy()
    y = np.log(df["latency_ms"].to_numpy(np.float64) / prior) if df["latency_ms"].notna().all() else np.full(len(df), np.nan)
    return Featurized(rows=df, X=X, prior_ms=prior, floor_ms=floor, roofline_ms=roofline, y=y)


def data_digest(df: pd.DataFrame) -> str:
    """sha256 of the training table's identifying columns and latencies (order-independent)."""
    cols = [*KEY, "latency_ms"]
    s = df[cols].sort_values(cols).to_csv(index=False).encode()
    return hashlib.sha256(s).hexdigest()
