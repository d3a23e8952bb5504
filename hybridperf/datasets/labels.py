"""Loaders for NeuSight's whole-model labels, its traced layer graphs, and its own predictions.

Layout (inside the NeuSight artifact root, `scripts/asplos/` of its repository):

    label/<GPU>/<model>-<inf|train>-<seq>-<batch>[-fusion].json    measured whole-model latency (ms)
    label/<GPU>/<model>-<inf|train>-<seq>-<batch>[-fusion].csv     traced FX graph of one layer, per node
    results/opgraph/<run>.csv                                       device-independent op graph of one layer
    results/prediction/<GPU>/<predictor>/<run>.json                 the artifact's predictions (neusight,
                                                                    roofline, habitat, micro)

`<GPU>` is the name `torch.cuda.get_device_name()` printed, with spaces replaced by underscores
("Tesla_T4" is "Tesla T4"). A label JSON holds `num_layer`, `e2e_latency`, `fw_latency` and
`bwall_latency` (backward including gradient accumulation); `e2e = fw + bwall`. Prediction JSONs add
`bw_latency` and `acc_latency` (bwall = bw + acc).

Run names carry optional suffixes: `-fusion` (the model run with fused kernels) and, in
`results/opgraph/`, parallelism variants such as `-dp4`, `-tp4`, `-pp4_1`.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.datasets.neusight import neusight_root
from hybridperf.errors import InputError
from hybridperf.jsonio import read_json_object

#: <model>-<inf|train>-<seq>-<batch>[-suffix...]; the model name may itself contain '_' and digits.
_RUN_RE = re.compile(r"^(?P<model>.+?)-(?P<mode>inf|train)-(?P<seq>\d+)-(?P<batch>\d+)(?P<suffix>(?:-[A-Za-z0-9_]+)*)$")

LABEL_COLUMNS = ("device", "model", "mode", "seq", "batch", "fusion", "num_layer", "e2e_ms", "fw_ms", "bw_ms", "path")
PREDICTION_COLUMNS = ("device", "predictor", "model", "mode", "seq", "batch", "fusion", "num_layer",
                      "e2e_ms", "fw_ms", "bw_ms", "path")


def device_from_folder(name: str) -> str:
    """The torch device name for a NeuSight folder name: 'NVIDIA_A100-PCIE-40GB' -> 'NVIDIA A100-PCIE-40GB'."""
    return str(name).replace("_", " ").strip()


def parse_run_name(stem: str) -> dict | None:
    """Parse 'gpt2_large-inf-1024-4-fusion' into model, mode, seq, batch, fusion, variant.

    `variant` holds the suffixes other than 'fusion' joined by '-' ('' when none), e.g. 'tp4' or 'pp4_1'.
    Returns None when `stem` is not a run name.
    """
    m = _RUN_RE.match(stem)
    if m is None:
        return None
    suffixes = [s for s in m.group("suffix").split("-") if s]
    return {
        "model": m.group("model"),
        "mode": m.group("mode"),
        "seq": int(m.group("seq")),
        "batch": int(m.group("batch")),
        "fusion": "fusion" in suffixes,
        "variant": "-".join(s for s in suffixes if s != "fusion"),
    }


def _read_json(path: Path) -> dict:
    return read_json_object(path)


def _latencies(data: dict, path: Path) -> dict:
    """e2e/fw/bw (ms) and num_layer from a label or prediction JSON."""
    missing = [k for k in ("e2e_latency", "fw_latency") if k not in data]
    if missing:
        raise InputError(f"{path}: missing key(s) {missing}")
    try:
        e2e = float(data["e2e_latency"])
        fw = float(data["fw_latency"])
        bw = float(data.get("bwall_latency", data.get("bw_latency", 0.0)) or 0.0)
        num_layer = int(data["num_layer"]) if data.get("num_layer") is not None else -1
    except (TypeError, ValueError) as e:
        raise InputError(f"{path}: non-numeric latency ({e})") from None
    return {"num_layer": num_layer, "e2e_ms": e2e, "fw_ms": fw, "bw_ms": bw}


def _run_rows(files, device: str, extra: dict | None = None) -> list[dict]:
    rows = []
    for f in files:
        run = parse_run_name(f.stem)
        if run is None:
            continue  # not a run file (README, notes...)
        row = {"device": device, **(extra or {}), **run, **_latencies(_read_json(f), f), "path": str(f)}
        rows.append(row)
    return rows


def load_labels(root: str | Path, devices=None) -> pd.DataFrame:
    """Measured whole-model latencies from `label/<GPU>/*.json`.

    Columns: device, model, mode ('inf'/'train'), seq, batch, fusion (bool), num_layer, e2e_ms, fw_ms,
    bw_ms, path, plus variant (parallelism suffix, usually '') and graph_path (the per-node layer CSV
    beside the JSON, or None). `inf` is one forward pass under no_grad (bw_ms = 0); `train` is forward
    plus backward of a cross-entropy loss. `devices` filters by torch device name.
    """
    base = neusight_root(root) / "label"
    if not base.is_dir():
        raise InputError(f"{base}: no label folder in the NeuSight artifact")
    rows = []
    for gpu_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        dev = device_from_folder(gpu_dir.name)
        if devices and dev not in devices:
            continue
        rows.extend(_run_rows(sorted(gpu_dir.glob("*.json")), dev))
    cols = [*LABEL_COLUMNS, "variant", "graph_path"]
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(rows)
    df["graph_path"] = [str(Path(p).with_suffix(".csv")) if Path(p).with_suffix(".csv").exists() else None
                        for p in df["path"]]
    return df.loc[:, cols].sort_values(["device", "model", "mode", "seq", "batch", "fusion"]).reset_index(drop=True)


def load_neusight_predictions(root: str | Path, predictor: str = "neusight", devices=None) -> pd.DataFrame:
    """The artifact's own whole-model predictions from `results/prediction/<GPU>/<predictor>/*.json`.

    Same columns as `load_labels` (bw_ms is `bwall_latency`, backward plus accumulation) plus
    `predictor`. Devices without that predictor are absent; an unknown predictor raises InputError.
    """
    base = neusight_root(root) / "results" / "prediction"
    if not base.is_dir():
        raise InputError(f"{base}: no results/prediction folder in the NeuSight artifact")
    rows = []
    seen: set[str] = set()
    for gpu_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        seen.update(p.name for p in gpu_dir.iterdir() if p.is_dir())
        pdir = gpu_dir / predictor
        dev = device_from_folder(gpu_dir.name)
        if not pdir.is_dir() or (devices and dev not in devices):
            continue
        rows.extend(_run_rows(sorted(pdir.glob("*.json")), dev, {"predictor": predictor}))
    if predictor not in seen:
        raise InputError(f"{base}: no predictor {predictor!r}; available: {', '.join(sorted(seen)) or 'none'}")
    cols = [*PREDICTION_COLUMNS, "variant"]
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(rows)
    return df.loc[:, cols].sort_values(["device", "model", "mode", "seq", "batch", "fusion"]).reset_index(drop=True)


# ----------------------------------------------------------------------------------------------------
# layer graphs
# ----------------------------------------------------------------------------------------------------

_TORCH_SIZE = re.compile(r"torch\.Size\(\s*(\[[^\]]*\])\s*\)")


def _literal(value):
    """ast.literal_eval of a cell, tolerant of the quoting the traces use: doubled or stray outer
    quotes, `torch.Size([...])`, empty cells. Returns None when the cell is not a Python literal."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if not isinstance(value, str):
        return value
    s = value.strip()
    if not s:
        return None
    try:
        out = ast.literal_eval(s)
        if isinstance(out, str) and out.strip() != s:  # a quoted literal: "'[[1, 2]]'"
            inner = _literal(out)
            return out if inner is None else inner
        return out
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    while len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        s = s[1:-1].strip()
    s = _TORCH_SIZE.sub(r"\1", s.replace('""', '"'))
    try:
        return ast.literal_eval(s) if s else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _as_list(v):
    """Shapes as nested lists of ints: (8, 512) -> [8, 512]; [(1,), (2, 3)] -> [[1], [2, 3]]."""
    if isinstance(v, (tuple, list)):
        return [_as_list(x) for x in v]
    return v


def _read_graph_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except pd.errors.ParserError:
        pass
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read CSV ({str(e).splitlines()[0]})") from None
    try:  # the python engine copes with some quoting the C parser rejects
        return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""], engine="python",
                           on_bad_lines="error")
    except (pd.errors.ParserError, ValueError) as e:
        raise InputError(f"{path}: cannot parse CSV ({str(e).splitlines()[0]})") from None


def load_layer_graph(csv_path: str | Path) -> pd.DataFrame:
    """One traced layer graph, either format the artifact uses, with shapes parsed to Python lists.

    * FX-node dumps (`label/<GPU>/<run>.csv`): op (placeholder/call_module/call_function/call_method/
      get_attr/output), target, Name, input_shapes, output_shape, latency (= fw + bw + acc, ms),
      fw_latency, bw_latency, acc_latency, dtype, plus the raw FX columns.
    * Op graphs (`results/opgraph/<run>.csv`, `results/prediction/<GPU>/<predictor>/<run>.csv`):
      Name, OpName, FwOps, BwOps, AccOps, Prev, Next, InputShapes, OutputShape[, *_latency]. These get
      the same names: op (= OpName), input_shapes, output_shape, fw_ops/bw_ops/acc_ops, prev/next (sets),
      and latency (= e2e_latency when predicted, else NaN).

    `input_shapes` is a list of shapes (each a list of ints), `output_shape` a list of ints (or a list of
    shapes for multi-output nodes); cells that are not literals become None. Latency columns are
    floats. `df.attrs["format"]` is 'fx' or 'opgraph'.
    """
    path = Path(csv_path)
    if not path.is_file():
        raise InputError(f"{path}: no such layer-graph CSV")
    raw = _read_graph_csv(path)
    raw.columns = [str(c).strip() for c in raw.columns]
    if "input_shapes" in raw.columns and "op" in raw.columns:
        df, fmt = raw.copy(), "fx"
    elif "InputShapes" in raw.columns and "OpName" in raw.columns:
        fmt = "opgraph"
        df = raw.copy()
        df["op"] = df["OpName"]
        df["input_shapes"] = df["InputShapes"]
        df["output_shape"] = df.get("OutputShape")
        for src, dst in (("FwOps", "fw_ops"), ("BwOps", "bw_ops"), ("AccOps", "acc_ops"),
                         ("Prev", "prev"), ("Next", "next")):
            if src in df.columns:
                df[dst] = [_literal(v) for v in df[src]]
        if "e2e_latency" in df.columns and "latency" not in df.columns:
            df["latency"] = df["e2e_latency"]
    else:
        raise InputError(f"{path}: not a layer-graph CSV (needs op/input_shapes or OpName/InputShapes columns)")

    df["input_shapes"] = [_as_list(_literal(v)) for v in df["input_shapes"]]
    if "output_shape" in df.columns:
        df["output_shape"] = [_as_list(_literal(v)) for v in df["output_shape"]]
    else:
        df["output_shape"] = None
    for c in ("latency", "fw_latency", "bw_latency", "acc_latency", "bwall_latency", "e2e_latency"):
        if c in df.columns:
            df[c] = pd.to_numeric(df[c], errors="coerce")
    if "latency" not in df.columns:
        df["latency"] = np.nan
    if "dtype" not in df.columns:
        df["dtype"] = None
    df.attrs["format"] = fmt
    df.attrs["source"] = str(path)
    return df.reset_index(drop=True)

