"""Few-shot calibration of serving predictions from runs measured on the user's own deployment.

A measured run says how far the prediction is off for its configuration: the same system, engine (and
version), model and precision. Each predicted aggregated run of a configuration with measured runs is scaled,
interval included, by the geometric mean of their measured / predicted ratios, shrunk towards 1 by
n / (n + SHRINK_RUNS) for n runs: one run's ratio carries its own noise as well as the configuration's offset.
Disaggregated runs are left as predicted: their error turns on the worker counts, not on the configuration
(one run's ratio moved the other runs of a configuration further off: `experiments/serving/serving_silicon.py`).
One run predicted on its own is scaled by every measured run of its engine, GPU and precision, pooled
(`same_deployment`, `pooled_offset`: `predict_serving`'s `scale`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from hybridperf.errors import InputError
from hybridperf.guard import MAX_MS

#: the columns naming a configuration: its measured runs calibrate its other runs
KEYS = ("system", "backend", "backend_version", "model_path", "precision")
#: measured columns a calibration run must carry (silicon_sample.csv's)
MEASURED = {"ttft": "silicon_ttft_ms", "tpot": "silicon_tpot_ms"}
#: pseudo-runs of "no offset" the measured runs are pooled with (the shrinkage n / (n + SHRINK_RUNS))
SHRINK_RUNS = 1.0


def config_key(df: pd.DataFrame) -> pd.Series:
    """Each run's configuration (KEYS joined), as strings; an empty Series for no runs."""
    cells = df.reindex(columns=list(KEYS)).fillna("").astype(str)
    return pd.Series(["|".join(t) for t in cells.itertuples(index=False)], index=df.index, dtype=object)


def aggregated(pred: pd.DataFrame) -> pd.Series:
    """Which runs of `pred` (from `rows.predict_rows`) were predicted and are aggregated, their mode read as
    `rows.run_mode` reads it (an empty cell is agg)."""
    from hybridperf.serving.rows import run_mode

    ok = pred["reason"].fillna("").eq("")
    return pd.Series([bool(k) and run_mode(r) == "agg" for k, r in zip(ok, pred.to_dict("records"))],
                     index=pred.index, dtype=bool)


def check_measured(measured: pd.DataFrame) -> None:
    """InputError unless `measured` has a run's columns (`rows.REQUIRED`) and the MEASURED ones."""
    from hybridperf.serving.rows import REQUIRED

    lacking = [c for c in (*REQUIRED, *MEASURED.values()) if c not in measured.columns]
    if lacking:
        raise InputError(f"calibration runs lack column(s) {', '.join(lacking)}")


def _log_ratios(measured: pd.DataFrame) -> pd.DataFrame:
    """log(measured / predicted) per metric of each aggregated run of `measured` (predicted by
    `rows.predict_rows`, with MEASURED columns); InputError when a column is missing or a time is not one."""
    check_measured(measured)
    ok = measured[aggregated(measured)]
    logs = {}
    for m, col in MEASURED.items():
        meas = pd.to_numeric(ok[col], errors="coerce")
        if (~(meas > 0) | ~(meas <= MAX_MS)).any():  # bounded as predictions are (`guard.check_predictions`)
            raise InputError(f"calibration runs: {col} must be a number of ms in (0, {MAX_MS:g}] in every "
                             "aggregated run")
        logs[m] = np.log(meas / ok[f"pred_{m}_ms"])
    return pd.DataFrame(logs, index=ok.index)


def offsets(measured: pd.DataFrame) -> pd.DataFrame:
    """Per configuration of `measured` (runs predicted by `rows.predict_rows`, with MEASURED columns): the runs
    used and the shrunk log offset of each metric. InputError when a column is missing."""
    logs = _log_ratios(measured)
    g = logs.groupby(config_key(measured.loc[logs.index]).to_numpy())
    n = g.size()
    out = g.mean().mul(n / (n + SHRINK_RUNS), axis=0)
    out["runs"] = n
    return out


def same_deployment(measured: pd.DataFrame, engine: str, device, precision: str) -> pd.Series:
    """Which measured runs ran `engine` on `device`'s GPU (a DeviceSpec) with `precision` weights: those
    calibrate one run of that deployment (`pooled_offset`). InputError for an unknown `engine`."""
    from hybridperf.devices import get_device
    from hybridperf.errors import HybridperfError
    from hybridperf.serving.engines import get_engine
    from hybridperf.serving.rows import row_precision

    name = get_engine(engine).name  # the run's own engine: unknown is its error, not "no run matched"

    def same(row) -> bool:
        try:
            return (get_engine(str(row.get("backend", ""))).name == name
                    and get_device(str(row.get("system", ""))).name == device.name
                    and row_precision(row, "gemm_quant_mode") == precision)
        except HybridperfError:
            return False

    return pd.Series([same(r) for r in measured.to_dict("records")], index=measured.index, dtype=bool)


def pooled_offset(measured: pd.DataFrame) -> dict:
    """One shrunk log offset per metric over every aggregated run of `measured` (predicted, with MEASURED
    columns), and `runs`, how many: the calibration of a single run by runs of its own deployment."""
    logs = _log_ratios(measured)
    n = len(logs)
    return {**{m: float(logs[m].mean()) * n / (n + SHRINK_RUNS) if n else 0.0 for m in MEASURED}, "runs": n}


def calibrate(pred: pd.DataFrame, offs: pd.DataFrame) -> pd.DataFrame:
    """`pred` (from `rows.predict_rows`) with each aggregated run of a configuration in `offs` scaled by its
    offsets, interval included; `calibration_runs` says how many measured runs moved each row (0: none)."""
    out = pred.copy()
    keys = config_key(out)
    runs = keys.map(offs["runs"]).where(aggregated(out), 0).fillna(0).astype(int)
    for m in MEASURED:
        factor = np.exp(keys.map(offs[m]).where(runs > 0, 0.0).astype(float))
        for col in (f"pred_{m}_ms", f"pred_{m}_lo_ms", f"pred_{m}_hi_ms"):
            out[col] = out[col] * factor
    out["calibration_runs"] = runs
    return out
