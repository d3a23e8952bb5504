"""Reading user-supplied CSV tables (kernels, measurements, runs, data files) with one-line errors."""
from __future__ import annotations

import csv
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.errors import InputError


def _existing_file(path: str | Path, what: str) -> Path:
    """`path` as a Path; InputError naming `what` when it is a directory or does not exist."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{what} {p} is a directory, not a file")
    if not p.is_file():
        raise InputError(f"{what} not found: {p}")
    return p


def read_csv(path: str | Path, what: str = "input file", **kwargs) -> pd.DataFrame:
    """`pd.read_csv(path, **kwargs)`; a missing, unreadable or malformed file raises InputError naming it
    (`what` says what the file is, for the not-found message). Malformed includes rows with more fields
    than the header (pandas would quietly turn the first column into an index) and a header that names
    a column twice (pandas would rename the second `X.1`, and one of them would be silently ignored)."""
    p = _existing_file(path, what)
    kwargs.setdefault("index_col", False)
    kwargs.setdefault("low_memory", False)  # one dtype per column, not per chunk (a DtypeWarning on large files)
    try:
        _check_header(p)
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(p, **kwargs)
    except (OSError, pd.errors.ParserError, pd.errors.ParserWarning, pd.errors.EmptyDataError, UnicodeDecodeError,
            csv.Error) as e:
        msg = str(e).splitlines()[0] if str(e).strip() else type(e).__name__
        if isinstance(e, pd.errors.ParserWarning):
            msg = "some rows have more fields than the header"
        raise InputError(f"{p}: malformed CSV ({msg})") from None


def _check_header(p: Path) -> None:
    """Refuse a header that names a column twice."""
    with open(p, newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh), [])
    seen, dup = set(), []
    for name in (h.strip() for h in header):
        if name and name in seen and name not in dup:
            dup.append(name)
        seen.add(name)
    if dup:
        raise InputError(f"{p}: column{'s' if len(dup) > 1 else ''} {', '.join(map(repr, dup))} "
                         f"{'appear' if len(dup) > 1 else 'appears'} more than once in the header; keep one of each")


def integers_restored(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of `df` in which each float column holding only whole numbers and blanks is an integer column
    again (pandas reads an integer column with an empty cell as float), so that a table written back out
    keeps `512` where its input said `512`, not `512.0`."""
    out = df.copy()
    for col in out.columns:
        s = out[col]
        if s.dtype.kind != "f" or not s.isna().any():
            continue
        v = s.dropna().to_numpy()
        if len(v) and np.isfinite(v).all() and (v == np.round(v)).all() and np.abs(v).max() < 2**53:
            out[col] = s.astype("Int64")
    return out


def with_rows(df: pd.DataFrame, path: str | Path, what: str) -> pd.DataFrame:
    """`df`, or InputError when it has no rows (a header alone): a calibration by no measurement is a mistake
    to say (a table to predict may be empty: its output is the header)."""
    if df.empty:
        raise InputError(f"{path}: {what} has a header but no rows")
    return df


def read_table(path: str | Path, what: str = "input file") -> pd.DataFrame:
    """A CSV or, by its `.parquet`/`.pq` suffix, a parquet table; one-line InputError on failure."""
    if Path(path).suffix.lower() not in (".parquet", ".pq"):
        return read_csv(path, what)
    p = _existing_file(path, what)
    try:
        return pd.read_parquet(p)
    except Exception as e:  # pyarrow raises its own error types for a malformed file
        raise InputError(f"{p}: malformed parquet ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None


def fast_to_csv(df: pd.DataFrame, path: str | Path) -> None:
    """`df.to_csv(path, index=False)`, through pyarrow's writer where the columns allow (10x faster on
    100,000 rows; the file reads back identical), else pandas'."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        table = pa.Table.from_pandas(df, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        df.to_csv(path, index=False)
        return
    pacsv.write_csv(table, str(path), pacsv.WriteOptions(quoting_style="needed"))
