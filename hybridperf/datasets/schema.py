"""The canonical kernel-record table every loader produces and every trainer consumes.

One row is one kernel measured (or to be predicted) on one device:
    op, op_class, dtype, B, M, N, K, H, flops, bytes, device, latency_ms, timing, host, form, source
Shape fields a given op does not use are NaN. `form` is a GEMM row's form (hybridperf.ops.LINEAR_FORMS,
`linear` where absent; BMM_FORMS) and empty on the other ops. `latency_ms` may be NaN only for rows to predict.
`timing` says how the latency was (or is to be) measured: `call` (CUDA events around one eager call,
NeuSight's harness) or `kernel` (a profiler's kernel duration); `host` whose call overhead a timed
call carries: `neusight` (the artifact's hosts) or `current`; see hybridperf.timing.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from hybridperf.devices import DTYPE_BYTES, DeviceSpec, dtype_key, get_device
from hybridperf.errors import HybridperfError, InputError
from hybridperf.ops import BMM_FORMS, FUSED_OPS, GEMM_OPS, LINEAR_FORMS, OP_CLASS, canonical_op, op_work
from hybridperf.timing import DEFAULT_HOST, HOSTS, TIMINGS, check_host, check_timing

SHAPE_COLUMNS = ("B", "M", "N", "K", "H")
#: the largest tensor dimension accepted: 2^40 elements of one byte already exceed any GPU's memory
MAX_DIM = float(2 ** 40)
COLUMNS = ("op", "op_class", "dtype", *SHAPE_COLUMNS, "flops", "bytes", "device", "latency_ms", "timing", "host",
           "form", "source")


def shown(v) -> str:
    """A bad value as the user wrote it (no numpy reprs)."""
    if v is None or (isinstance(v, float) and np.isnan(v)) or (hasattr(v, "dtype") and pd.isna(v)):
        return "empty/NaN"
    return repr(v.item() if hasattr(v, "item") else v)


def _where(source: str, idx) -> str:
    # +2: header line, and 1-based line numbers
    return f"{source}:{int(idx) + 2}" if source else f"row {int(idx)}"


def canonicalize(
    raw: pd.DataFrame,
    *,
    device: str | None = None,
    source: str = "",
    require_latency: bool = False,
    on_bad: str = "raise",
    timing: str = "call",
    host: str = DEFAULT_HOST,
) -> pd.DataFrame:
    """Turn a NeuSight-style kernel table (OPName, B, M, N, K, H, [Latency], [Device], [dtype]) or an
    already canonical one into the canonical table. Rows without a `timing` (`host`) column get
    `timing` (`host`).

    Bad rows (unknown op; missing, NaN, non-positive, infinite or fractional shape; NaN, infinite or
    non-positive latency) raise InputError naming file and line when `on_bad="raise"`; with
    `on_bad="drop"` they are dropped and reported through `canonicalize.last_report` (a list of
    "file:line: reason" strings).
    """
    df = raw.copy()
    df.columns = [str(c).strip() for c in df.columns]
    ren = {"OPName": "op", "Latency": "latency_ms", "Device": "device"}
    df = df.rename(columns={k: v for k, v in ren.items() if k in df.columns and v not in df.columns})
    if "op" not in df.columns:
        raise InputError(f"{source or 'input'}: missing column 'OPName' (or 'op')")
    if require_latency and "latency_ms" not in df.columns:
        raise InputError(f"{source or 'input'}: missing column 'Latency' (ms)")
    if device is not None:
        df["device"] = device
    elif "device" not in df.columns:
        df["device"] = ""
    for c in (*SHAPE_COLUMNS, "latency_ms"):
        if c not in df.columns:
            df[c] = np.nan
        # a column of True/False is not a number of elements or of ms (pandas would read True as 1)
        df[c] = np.nan if pd.api.types.is_bool_dtype(df[c]) else pd.to_numeric(df[c], errors="coerce")
    if "timing" not in df.columns:
        df["timing"] = check_timing(timing)
    df["timing"] = df["timing"].fillna(timing).astype(str)
    if "host" not in df.columns:
        df["host"] = check_host(host)
    df["host"] = df["host"].fillna(host).astype(str)
    if "dtype" not in df.columns:
        df["dtype"] = "fp32"
    df["dtype"] = df["dtype"].fillna("fp32")

    problems: list[tuple[int, str]] = []
    ops = []
    for i, name in zip(df.index, df["op"]):
        try:
            ops.append(canonical_op(name))
        except HybridperfError as e:  # its message names the supported ops
            ops.append(None)
            problems.append((i, str(e)))
    df["op"] = ops
    dtypes = []
    for i, d in zip(df.index, df["dtype"]):
        try:
            dtypes.append(dtype_key(d))
        except HybridperfError:
            dtypes.append(None)
            problems.append((i, f"unknown dtype {d!r}"))
    df["dtype"] = dtypes
    for i in df.index[~df["timing"].isin(TIMINGS)]:
        problems.append((i, f"unknown timing {df.at[i, 'timing']!r} (expected one of {', '.join(TIMINGS)})"))
    for i in df.index[~df["host"].isin(HOSTS)]:
        problems.append((i, f"unknown host {df.at[i, 'host']!r} (expected one of {', '.join(HOSTS)})"))

    form = df["form"].astype(object) if "form" in df.columns else pd.Series(None, index=df.index, dtype=object)
    df["form"] = ""
    for op, forms in (("linear", LINEAR_FORMS), ("bmm", BMM_FORMS)):
        rows = df["op"] == op
        df.loc[rows, "form"] = form[rows].where(form[rows].notna(), forms[0]).astype(str).str.strip().str.lower()
        for i in df.index[rows & ~df["form"].isin(forms)]:
            expected = ", ".join(f or "empty" for f in forms)
            problems.append((i, f"unknown {op} form {shown(form.loc[i])} (expected one of {expected})"))

    gemm = df["op"].isin(GEMM_OPS)
    fused = df["op"].isin(FUSED_OPS)
    vec = df["op"].notna() & ~gemm & ~fused
    for cols, mask in ((("B", "M", "N", "K"), gemm), (("B", "H"), vec), (("B", "M", "N", "K", "H"), fused)):
        for c in cols:
            x = df[c]
            bad = mask & ~(x > 0)
            for i in df.index[bad]:
                why = (f"shape {c} must be a positive number, got {shown(raw.loc[i][c])}" if c in raw.columns
                       else f"the CSV has no {c} column, which {df.at[i, 'op']} rows need")
                problems.append((i, why))
            # a tensor dimension is a whole, finite number of elements
            for i in df.index[mask & (x > 0) & ~(np.isfinite(x) & (x == np.floor(x)))]:
                problems.append((i, f"shape {c} must be a whole number of elements, got {shown(raw.loc[i].get(c))}"))
            for i in df.index[mask & np.isfinite(x) & (x > MAX_DIM)]:
                problems.append((i, f"shape {c} must be at most 2^40 elements, got {shown(raw.loc[i].get(c))}"))
    lat = df["latency_ms"]
    finite = lat.notna() & np.isfinite(lat)
    if require_latency:
        for i in df.index[~((lat > 0) & finite)]:
            problems.append((i, f"latency must be a positive, finite number of ms, got {shown(lat.loc[i])}"))
    else:
        for i in df.index[lat.notna() & ~((lat > 0) & finite)]:
            problems.append((i, f"latency must be positive and finite, got {shown(lat.loc[i])}"))

    report = [f"{_where(source, i)}: {why}" for i, why in sorted(problems)]
    canonicalize.last_report = report
    if problems:
        if on_bad == "raise":
            extra = f" (and {len(report) - 1} more bad rows)" if len(report) > 1 else ""
            raise InputError(report[0] + extra)
        df = df.drop(index=sorted({i for i, _ in problems}))

    # nn.Linear flattens the leading dims: (B, M, N) through Linear(N, K) is one GEMM of B*M rows
    lin = df["op"] == "linear"
    df.loc[lin, "M"] = df.loc[lin, "M"] * df.loc[lin, "B"]
    df.loc[lin, "B"] = 1
    df["op_class"] = df["op"].map(OP_CLASS)
    flops = np.zeros(len(df))
    nbytes = np.zeros(len(df))
    for (op, dt), idx in df.groupby(["op", "dtype"]).indices.items():
        sub = df.iloc[idx]
        f, b = op_work(op, sub["B"], sub["M"], sub["N"], sub["K"], sub["H"], DTYPE_BYTES[dt])
        flops[idx] = f
        nbytes[idx] = b
    df["flops"] = flops
    df["bytes"] = nbytes
    df["source"] = source
    out = df.loc[:, list(COLUMNS)].reset_index(drop=True)
    return out


canonicalize.last_report = []


def validate(df: pd.DataFrame, *, require_latency: bool = True) -> pd.DataFrame:
    """Check that `df` is a canonical table (columns present, positive finite shapes/latency)."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"kernel table lacks columns {missing}")
    unknown = set(df["op"]) - set(OP_CLASS)
    if unknown:
        raise InputError(f"kernel table has unknown ops {sorted(unknown)}")
    if require_latency and not (df["latency_ms"] > 0).all():
        raise InputError("kernel table has NaN or non-positive latency_ms")
    return df


def measured_elsewhere(measured: pd.DataFrame, dev: DeviceSpec) -> list[str]:
    """The `device` names of calibration rows (as `collect` writes them) that are not `dev`: a calibration
    from another GPU, or a CPU check, would shift this device's predictions by another's errors."""
    names = measured["device"].dropna().astype(str).str.strip() if "device" in measured.columns \
        else pd.Series([], dtype=str)
    out = []
    for name in sorted(set(names) - {""}):
        same = name.lower() == dev.name.strip().lower()  # also a GPU given by a spec file the catalog lacks
        if not same:
            try:
                same = get_device(name).name == dev.name
            except HybridperfError:  # a CPU, or a GPU the catalog lacks
                same = False
        if not same:
            out.append(name)
    return out
