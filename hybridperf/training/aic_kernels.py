"""Fitting the aiconfigurator-kernel predictor: prior constants (efficiencies and floors per dtype),
residual models and split-conformal intervals, always from named training systems, so that
`experiments/kernels/aiconfigurator_kernels.py` can hold each system out and `--ship` can fit on all of them.

Constants are robust statistics: per training system the median over its compute-bound rows of
ideal-compute / measured time (memory-bound rows likewise, tiny rows for the floor), then the geometric
mean over systems, so each GPU counts once whatever its table's size.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from hybridperf.aic_kernels import FEATURES, features, monotone_constraints, prior_terms, run_dtype_of
from hybridperf.devices import get_device
from hybridperf.datasets.aiconfigurator import SYSTEM_DEVICES
from hybridperf.priors.llm_gemm import ROOFLINE, KernelConstants, eager_timed

#: a row is compute-bound (memory-bound) when its ideal compute time is this many times its memory time
#: (or the reverse) and its measured time this many times the floor
BOUND_RATIO = 3.0
#: a GEMM is memory-bound for its memory efficiency at this smaller ratio: a decode GEMM's compute term pays its
#: m padded to a tile (8-32 rows swapped, `llm_gemm.SMALL_M_TILES`; 64 and more beyond), so GEMMs of a few dozen
#: rows sit between 2x and 3x; at 3x tiny-k shapes, bound by writing their output, weighed more in the efficiency
#: (B200 sgl-kernel fp8 read 0.36 at 3x before the small tiles, against 0.7 of bandwidth in decode)
GEMM_MEMORY_BOUND_RATIO = 2.0
#: the floor: the lower quartile of measured minus ideal time over the rows whose ideal time is among
#: this percentile's smallest (a median over "tiny" rows let a few pathological shapes set it)
SMALLEST_PCT = 10
#: a dtype's floor for a kernel source never fitted: this percentile over the fitted sources' floors
FALLBACK_FLOOR_PCT = 25
#: an eager-timed path (`eager_timed`) is bound by the GPU, for its efficiencies, where its measured time
#: is this many times its host dispatch
EAGER_GPU_RATIO = 3.0
#: per-kernel floor (ms) assumed where a group's rows cannot set one (eager paths, too few tiny rows)
DEFAULT_FLOOR_MS = 0.004
#: a dtype gets constants of its own (for kernel sources never fitted) only from this many fitted
#: (dtype, kernel source) entries; from fewer, its kin's or bfloat16's stand in (one framework's path,
#: e.g. SGLang's int8 weight-only linear on H100, is no guide to another's)
MIN_SOURCES = 2
#: a dtype's efficiencies for a kernel source never fitted: this percentile over the fitted sources'
FALLBACK_EFF_PCT = 50
#: bfloat16's constants where no training row prices them (a table without bf16 rows)
DEFAULT_BF16 = {"compute_eff": 0.7, "memory_eff": 0.75, "floor_kcycles": 6.0}
#: candidate split-K reduction steps (thousands of cycles per doubling of the split); 0 prices no reduction
REDUCE_KCYCLES_GRID = (0.0, 0.4, 0.8, 1.2, 1.6, 2.0)
#: rows per (system, op family) the residual models train on (a deterministic sample)
TRAIN_ROWS = 15_000
SEED = 0


def sample(df: pd.DataFrame, rows: int = TRAIN_ROWS, seed: int = SEED) -> pd.DataFrame:
    """At most `rows` rows per (system, op_name), drawn deterministically."""
    parts = []
    for _, g in df.groupby(["system", "op_name"], observed=True, sort=True):
        parts.append(g if len(g) <= rows else g.sample(rows, random_state=seed))
    return pd.concat(parts).sort_index() if parts else df


def _gmean(x) -> float:
    x = np.asarray([v for v in x if np.isfinite(v) and v > 0])
    return float(np.exp(np.mean(np.log(x)))) if len(x) else np.nan


def _fit_group(c, mem, q, y, n_k, clock_mhz, eager=False, fixed=0.0,
               mem_ratio: float = BOUND_RATIO) -> tuple[float, float, float, float]:
    """(compute eff, memory eff, floor in thousands of cycles, host dispatch in us) of one (system, dtype,
    kernel source)'s rows, whose measured times `y` less their priced fixed latency `fixed` the GPU terms
    are read from; NaN where too few rows are bound by that term (memory: by `mem_ratio`). An `eager` path's
    tiny rows set its host dispatch (their whole time is the host's, which hides the kernels' floor and
    reduction), its GPU-bound rows the rest."""
    body = np.maximum(c, mem) + q
    tiny = body <= np.percentile(body, SMALLEST_PCT)
    host = np.nan
    if eager:
        host = np.percentile((y + fixed)[tiny], 25) if tiny.sum() >= 10 else np.nan
        floor, f_ms = np.nan, DEFAULT_FLOOR_MS * n_k
        gpu = y > EAGER_GPU_RATIO * host if np.isfinite(host) else np.ones(len(y), dtype=bool)
    else:
        floor = np.percentile(y[tiny] - body[tiny], 25) / n_k if tiny.sum() >= 10 else np.nan
        floor = max(floor, 0.0005) if np.isfinite(floor) else floor
        f_ms = (floor if np.isfinite(floor) else DEFAULT_FLOOR_MS) * n_k
        gpu = np.ones(len(y), dtype=bool)
    cb = (c > BOUND_RATIO * mem) & (y > 10 * f_ms) & gpu
    mb = (mem > mem_ratio * c) & (y > 5 * f_ms) & gpu
    eff_m = np.median(mem[mb] / np.maximum(y[mb] - f_ms, 1e-6)) if mb.sum() >= 10 else np.nan
    qe = q / (eff_m if np.isfinite(eff_m) else 0.7)
    eff_c = np.median(c[cb] / np.maximum(y[cb] - f_ms - qe[cb], 1e-6)) if cb.sum() >= 10 else np.nan
    return eff_c, eff_m, floor * clock_mhz, host * 1e3


def fit_constants(df: pd.DataFrame, op: str, systems, source: str) -> KernelConstants:
    """Efficiencies and per-kernel floor of `op` (gemm or moe) from the rows of `systems` in `df`
    (canonical aiconfigurator rows), keyed `dtype|kernel_source` (geometric mean over the systems that
    ran it) and `dtype` (the median over its kernel sources and systems, the floor's lower quartile,
    so one slow framework path does not set a dtype's value; the host dispatch of eager paths, the
    median over the eager paths), each also per kernel architecture (`key@arch`). A GEMM's split-K reduction
    step (`reduce_kcycles`) is the one of `REDUCE_KCYCLES_GRID` whose pooled constants price these rows best
    (MAPE, each system counting once): what a GPU of an architecture outside the fit is priced with."""
    rows = df[(df["op_name"] == op) & df["system"].isin(list(systems))]
    priced = _roofline_terms(rows)
    if op != "gemm":
        return _fit_constants(priced, op, systems, source, 0.0)
    best = None
    for step in REDUCE_KCYCLES_GRID:
        c = _fit_constants(priced, op, systems, source, step)
        pooled = c.pooled()
        ape = np.abs(predict_terms(rows, pooled, pooled)["prior_ms"].to_numpy() / rows["latency_ms"].to_numpy() - 1.0)
        err = float(np.nanmean(pd.Series(ape, index=rows.index).groupby(rows["system"], observed=True).mean()))
        if best is None or (np.isfinite(err) and not err >= best[0]):
            best = (err, c)
    return best[1]


def _roofline_terms(rows: pd.DataFrame) -> list:
    """Per system of `rows`: (rows, device, their roofline terms), the split-K reduction priced at one
    thousand cycles per doubling (`fixed_ms`, which scales with the step)."""
    unit = replace(ROOFLINE, reduce_kcycles=1.0)
    out = []
    for system, g in rows.groupby("system", observed=True):
        g = g.reset_index(drop=True)
        device = get_device(SYSTEM_DEVICES[system])
        out.append((g, device, prior_terms(g, device, unit, unit)))
    return out


def _fit_constants(priced: list, op: str, systems, source: str, reduce_kcycles: float) -> KernelConstants:
    per: dict[str, list] = {}
    for g, device, t in priced:
        n_k = t["kernels"].to_numpy() if op == "gemm" else np.full(len(g), 5.0)
        keys = run_dtype_of(g) + "|" + g["kernel_source"].astype(str).to_numpy().astype(object)
        arr = {k: t[k].to_numpy() for k in ("compute_ms", "memory_ms", "aux")}
        fixed = reduce_kcycles * np.nan_to_num(t["fixed_ms"].to_numpy())  # the priced split-K reduction
        y = g["latency_ms"].to_numpy() - fixed
        for key in sorted(set(keys)):
            m = keys == key
            dt, src = key.split("|", 1)
            fitted = _fit_group(arr["compute_ms"][m], arr["memory_ms"][m], arr["aux"][m], y[m], float(n_k[m][0]),
                                device.boost_clock_mhz, op == "gemm" and eager_timed(dt, src), fixed[m],
                                GEMM_MEMORY_BOUND_RATIO if op == "gemm" else BOUND_RATIO)
            per.setdefault(key, []).append(fitted)  # over every system that ran it
            per.setdefault(f"{key}@{device.kernel_arch}", []).append(fitted)  # over its architecture's systems
    tables: list[dict] = [{}, {}, {}, {}]
    for key, vals in per.items():
        for i, table in enumerate(tables):
            v = _gmean([x[i] for x in vals])
            if np.isfinite(v):
                table[key] = v
    for table, pct, least in zip(tables, (FALLBACK_EFF_PCT, FALLBACK_EFF_PCT, FALLBACK_FLOOR_PCT, 50),
                                 (MIN_SOURCES, MIN_SOURCES, MIN_SOURCES, 1)):
        by_dtype: dict[str, list] = {}
        for key, v in table.items():  # a dtype's value over its sources, and over its sources on one architecture
            dt, arch = key.split("|")[0], key.partition("@")[2]
            by_dtype.setdefault(f"{dt}@{arch}" if arch else dt, []).append(v)
        table.update({dt: float(np.percentile(v, pct)) for dt, v in by_dtype.items() if len(v) >= least})
    out = []
    for table, name in zip(tables[:3], ("compute_eff", "memory_eff", "floor_kcycles")):
        table.setdefault("bfloat16", DEFAULT_BF16[name])
        cap = 1.0 if name != "floor_kcycles" else np.inf
        out.append(tuple(sorted((k, round(min(v, cap), 4)) for k, v in table.items())))
    host = tuple(sorted((k, round(v, 2)) for k, v in tables[3].items()))
    return KernelConstants(*out, tuple(sorted(systems)), source, host, reduce_kcycles)


def predict_terms(df: pd.DataFrame, gemm_c: KernelConstants, moe_c: KernelConstants, attn_c=None) -> pd.DataFrame:
    """`prior_terms` of canonical rows of any systems, each priced on its own system's device (attention with
    `attn_c`, the shipped constants when None)."""
    parts = []
    for system, g in df.groupby("system", observed=True, sort=True):
        parts.append(prior_terms(g, get_device(SYSTEM_DEVICES[system]), gemm_c, moe_c, attn_c))
    return pd.concat(parts).loc[df.index]


def feature_matrix(df: pd.DataFrame, terms: pd.DataFrame) -> np.ndarray:
    """FEATURES of canonical rows of one op family, each on its own system's device."""
    X = np.zeros((len(df), len(FEATURES)), dtype=np.float32)
    pos = pd.Series(np.arange(len(df)), index=df.index)
    for system, g in df.groupby("system", observed=True, sort=True):
        X[pos.loc[g.index].to_numpy()] = features(g, terms.loc[g.index], get_device(SYSTEM_DEVICES[system]))
    return X


def fit_residual(X: np.ndarray, y: np.ndarray, op: str, seed: int = SEED):
    """A small XGBoost model of log(measured / prior) of `op`'s rows on balanced samples (the same rows per
    system), monotone where more bandwidth or L2 moves a feature (`monotone_constraints`).
    One thread: on a shared 2-core machine two OpenMP threads ran 20x slower than one."""
    from hybridperf.residual_models.xgb import XGBResidual

    return XGBResidual(n_estimators=200, max_depth=6, learning_rate=0.08, min_child_weight=20.0, seed=seed,
                       n_jobs=1, monotone_constraints=monotone_constraints(op)).fit(X, y)


def conformal(log_err: np.ndarray, groups: np.ndarray | None = None, min_rows: int = 200) -> dict:
    """Split-conformal 90% interval of log(measured / predicted) from held-out residuals: the 5% and
    95% quantiles, with the finite-sample correction; `groups` (the held-out system of each row) are
    weighted equally so a large table does not set the interval alone."""
    e = np.asarray(log_err, dtype=np.float64)
    if len(e) < min_rows:
        return {}
    w = np.ones(len(e))
    if groups is not None:
        g = np.asarray(groups, dtype=object)
        for v in set(g.tolist()):
            w[g == v] = 1.0 / (g == v).sum()
    order = np.argsort(e)
    cw = np.cumsum(w[order]) / w.sum()
    n = len(e)
    lo_q, hi_q = max(0.05 - 0.5 / n, 0.0), min(0.95 + 0.5 / n, 1.0)
    q_lo = float(e[order][np.searchsorted(cw, lo_q)])
    q_hi = float(e[order][min(np.searchsorted(cw, hi_q), n - 1)])
    return {"q_lo": round(q_lo, 5), "q_hi": round(q_hi, 5), "rows": int(n)}
