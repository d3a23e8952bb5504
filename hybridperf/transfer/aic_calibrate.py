"""Few-shot calibration of the aiconfigurator kernel predictor to a GPU it never saw: `predict-kernels
--calibration` shifts it by rows measured there (per op and per (op, dtype)) and widens its intervals where
those rows spread wider than they say."""
from __future__ import annotations

import numpy as np
import pandas as pd

from hybridperf.aic_kernels import AicPredictor, dtype_of, harness_of
from hybridperf.devices import DeviceSpec
from hybridperf.errors import InputError

#: a few-shot shift or widening of n measured rows is shrunk by n / (n + SHRINK_ROWS): a cell's rows on a
#: GPU the bundle never saw spread about 0.3-0.4 in log error, its median bias mostly 0.05-0.2, so a
#: handful of rows says little (experiments/results/aic_fewshot.md: 10 beats 5)
SHRINK_ROWS = 10.0
#: median |log error| over the interval's half-width on its side, where a 90% interval is right and
#: errors are normal (0.6745 / 1.645); calibration rows spread wider than this widen the interval
MEDIAN_Z = 0.41
#: the most an op's intervals are widened (log half-widths times this), whatever the calibration rows
MAX_WIDEN = 4.0


def mape_shift(err) -> float:
    """The log shift minimising the rows' mean |pred/measured - 1|: the median of the log errors
    weighted by measured/predicted. A plain median overshoots upward, since an over-prediction's
    percentage error is unbounded and an under-prediction's is at most 100%."""
    e = np.asarray(err, dtype=np.float64)
    order = np.argsort(e, kind="stable")
    w = np.exp(-(e[order] - e.min()))
    return float(e[order][np.searchsorted(np.cumsum(w) / w.sum(), 0.5)])


def calibrate_to(predictor: AicPredictor, measured: pd.DataFrame, device: DeviceSpec, widen: bool = True,
                 shrink_rows: float = SHRINK_ROWS) -> AicPredictor:
    """The predictor shifted by rows measured on `device` (`latency`, ms): few-shot transfer to a GPU
    the bundle never saw. Per op a shift (`mape_shift` of its rows' log errors), per (op, dtype) one
    more from that dtype's rows, each shrunk toward the level above by n / (n + shrink_rows); with `widen`, each
    op's intervals are widened where its rows, once shifted, spread wider than the intervals say (never narrowed).
    Shifts and widening apply to the rows of the harness that timed the calibration rows (`harness_of`)."""
    if "latency" not in measured:
        raise InputError("calibration rows need a latency column (ms)")
    y = pd.to_numeric(measured["latency"], errors="coerce").to_numpy(dtype=np.float64)
    ok = np.isfinite(y) & (y > 0)
    if not ok.any():
        raise InputError("calibration rows have no positive finite latency")
    rows = measured[ok]
    zero = predictor.predict(rows, device)
    pred = zero["pred_ms"].to_numpy()
    err = np.log(y[ok]) - np.log(pred)
    ops, dts, harness = rows["op_name"].to_numpy(), dtype_of(rows), harness_of(rows)
    offsets, scales, applied = {}, {}, np.zeros(len(err))
    for h, op in sorted(set(zip(harness.tolist(), ops.tolist()))):
        m, key = (ops == op) & (harness == h), f"{h}{op}"
        offsets[key] = mape_shift(err[m]) * m.sum() / (m.sum() + shrink_rows)
        for dt in sorted(set(dts[m].tolist())):
            mm = m & (dts == dt)
            shift = mape_shift(err[mm] - offsets[key]) * mm.sum() / (mm.sum() + shrink_rows)
            offsets[f"{key}:{dt}"] = offsets[key] + shift
            applied[mm] = offsets[f"{key}:{dt}"]
        if widen:
            r = err[m] - applied[m]
            half = np.where(r >= 0, np.log(zero["hi_ms"].to_numpy()[m] / pred[m]),
                            np.log(pred[m] / zero["lo_ms"].to_numpy()[m]))
            f = float(np.median(np.abs(r) / np.maximum(half, 0.05))) / MEDIAN_Z
            scales[key] = 1.0 + min(max(f - 1.0, 0.0), MAX_WIDEN - 1.0) * m.sum() / (m.sum() + shrink_rows)
    return AicPredictor(predictor.gemm_c, predictor.moe_c, predictor.bundle, predictor.manifest, offsets, scales)
