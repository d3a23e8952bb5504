"""Loader for aiconfigurator's collective tables (`systems/data/<system>/comm/...`).

- `comm/nccl/<ver>/nccl_perf.parquet`: nccl-tests binaries (`all_reduce_perf` ...), out-of-place time
  of a loop of back-to-back launches, one node (`num_gpus`). `message_size` counts elements of
  `nccl_dtype` (half: 2 bytes, int8: 1), so bytes = message_size x dtype size, which is nccl-tests'
  size: the all-gather's gathered output, the reduce-scatter's input, one rank's all-to-all buffer.
- `comm/<vllm|sglang|trtllm>/<ver>/custom_allreduce_perf.parquet`: the engine's own all-reduce on a
  bf16 tensor of `message_size` elements, replayed inside a captured CUDA graph (`*_graph`) or
  launched eagerly (`*_eager`, vLLM/SGLang); TensorRT-LLM's AUTO strategy (one-shot / two-shot / NCCL).
Both are "graph" timing in `hybridperf.priors.collectives` terms (eager rows are kept, marked).

Rows come out in the tidy schema of `hybridperf.datasets.vidur_network` (system, collective, nbytes,
gpus, gpus_per_node, nodes, latency_ms, source) plus `timing`, `dtype`, `version`, `impl`.
`SYSTEM_NODES` maps aiconfigurator's system ids to catalog nodes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.errors import InputError

#: aiconfigurator system id -> catalog node
SYSTEM_NODES = {"a100_sxm": "DGX-A100", "b200_sxm": "DGX-B200", "l40s": "8xL40S-PCIe", "h100_sxm": "DGX-H100",
                "h200_sxm": "HGX-H200", "gb200": "GB200-NVL72", "gb200_sxm": "GB200-NVL72", "gb300": "GB300-NVL72",
                "gb300_sxm": "GB300-NVL72"}
_DTYPE_BYTES = {"half": 2, "float16": 2, "bfloat16": 2, "int8": 1, "float": 4, "float32": 4, "fp8": 1}
_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
        "alltoall": "all_to_all", "all_to_all": "all_to_all"}
_SUBDIRS = ("aiconfigurator/systems/data", "systems/data", "data")


def find_systems_root(root: str | Path) -> Path:
    root = Path(root)
    for sub in _SUBDIRS:
        if (root / sub).is_dir():
            return root / sub
    if root.is_dir() and any((p / "comm").is_dir() for p in root.iterdir() if p.is_dir()):
        return root
    raise InputError(f"no aiconfigurator system data under {root} (expected {_SUBDIRS[0]}/<system>/comm)")


def _version_key(v: str):
    return tuple(int(x) if x.isdigit() else -1 for x in v.replace("rc", ".").split("."))


def _newest(folder: Path, table: str) -> Path | None:
    found = sorted((p for p in folder.glob(f"*/{table}")), key=lambda p: _version_key(p.parent.name))
    return found[-1] if found else None


def _tidy(df: pd.DataFrame, system: str, path: Path, coll, nbytes, timing, dtype, impl) -> pd.DataFrame:
    lat = pd.to_numeric(df["latency"], errors="coerce").astype(float)
    gpus = pd.to_numeric(df["num_gpus"], errors="coerce")
    out = pd.DataFrame({
        "system": system, "collective": coll, "nbytes": nbytes, "gpus": gpus, "gpus_per_node": gpus, "nodes": 1,
        "latency_ms": lat, "source": [f"{path}:row {i}" for i in range(len(df))],
        "timing": timing, "dtype": dtype, "version": path.parent.name, "impl": impl,
    })
    ok = np.isfinite(out["latency_ms"]) & (out["latency_ms"] > 0) & np.isfinite(out["nbytes"]) & (out["nbytes"] > 0) \
        & np.isfinite(out["gpus"]) & (out["gpus"] >= 1)
    out = out[ok].copy()
    out["gpus"] = out["gpus"].astype(int)
    out["gpus_per_node"] = out["gpus"]
    out["nbytes"] = out["nbytes"].astype(np.int64)
    return out.reset_index(drop=True)


def read_nccl_table(path: str | Path, system: str, dtypes=("half",)) -> pd.DataFrame:
    """One nccl_perf.parquet as tidy rows (only `dtypes`; every dtype with None)."""
    path = Path(path)
    df = pd.read_parquet(path)
    missing = [c for c in ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency") if c not in df.columns]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}")
    if dtypes is not None:
        df = df[df["nccl_dtype"].isin(dtypes)].reset_index(drop=True)
    size = df["nccl_dtype"].map(_DTYPE_BYTES)
    if size.isna().any():
        raise InputError(f"{path}: unknown nccl_dtype {sorted(set(df['nccl_dtype'][size.isna()]))}")
    coll = df["op_name"].map(_OPS)
    if coll.isna().any():
        raise InputError(f"{path}: unknown op_name {sorted(set(df['op_name'][coll.isna()]))}")
    nbytes = pd.to_numeric(df["message_size"], errors="coerce") * size
    return _tidy(df, system, path, coll.to_numpy(), nbytes.to_numpy(), "graph", df["nccl_dtype"].to_numpy(), "nccl")


def read_custom_table(path: str | Path, system: str, engine: str) -> pd.DataFrame:
    """One custom_allreduce_perf.parquet (bf16 elements) as tidy all_reduce rows; `impl` = engine,
    `timing` = graph, or eager for vLLM/SGLang's eager rows."""
    path = Path(path)
    df = pd.read_parquet(path)
    backend = df["backend"].astype(str) if "backend" in df.columns else pd.Series("graph", index=df.index)
    timing = np.where(backend.str.contains("eager"), "eager", "graph")
    size = df.get("allreduce_dtype", pd.Series("bfloat16", index=df.index)).map(_DTYPE_BYTES).fillna(2)
    nbytes = pd.to_numeric(df["message_size"], errors="coerce") * size
    return _tidy(df, system, path, "all_reduce", nbytes.to_numpy(), timing, "bfloat16", engine)


def load_aiconfigurator_comm(root: str | Path, systems: list[str] | tuple[str, ...], custom: bool = False) -> pd.DataFrame:
    """The newest NCCL table (custom=False) or the newest custom all-reduce table of every engine
    (custom=True) of each named system. Name systems explicitly: the evaluation's systems must never
    be read, so there is no 'all'."""
    base = find_systems_root(root)
    frames = []
    for system in systems:
        comm = base / system / "comm"
        if not comm.is_dir():
            raise InputError(f"no comm tables for {system!r} under {base}")
        if not custom:
            p = _newest(comm / "nccl", "nccl_perf.parquet")
            if p is None:
                raise InputError(f"no nccl_perf.parquet for {system!r} under {comm}")
            frames.append(read_nccl_table(p, system))
            continue
        for engine in ("vllm", "sglang", "trtllm"):
            p = _newest(comm / engine, "custom_allreduce_perf.parquet")
            if p is not None:
                frames.append(read_custom_table(p, system, engine))
    if not frames:
        raise InputError(f"no collective tables for {list(systems)} under {base}")
    return pd.concat(frames, ignore_index=True)
