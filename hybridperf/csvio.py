"""Reading user-supplied CSV tables (kernels, measurements, runs, data files) with one-line errors."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.errors import InputError


def read_csv(path: str | Path, what: str = "input file", **kwargs) -> pd.DataFrame:
    """`pd.read_csv(path, **kwargs)`; a missing, unreadable or malformed file raises InputError naming it
    (`what` says what the file is, for the not-found message)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{what} not found: {p}")
    try:
        return pd.read_csv(p, **kwargs)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: malformed CSV ({str(e).splitlines()[0]})") from None


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
