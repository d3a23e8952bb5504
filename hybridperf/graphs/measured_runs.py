"""Calibrate whole-model predictions to one GPU and host from a few measured runs.

A zero-shot model prediction (`hybridperf.graphs.compose`) is

    e2e = exp(b_mode) * (scale * D + gap * N)

with D the graph's kernel device time and N its launched kernels. On a GPU nobody trained on, two
things are unknown: how fast its kernels really run relative to the kernel model (one device-level
factor, 0.18 in log between NeuSight's seven label GPUs), and the host's time per launch (about 9 us
on NeuSight's hosts, 1-2 us on the hosts of our lent H100 and H200). Given k runs measured on the
target (any model, batch, sequence or mode), this fits both as log-offsets from the shipped constants:

    log y_i = b_mode + log(scale e^u D_i + gap e^v N_i) + eps_i,   eps ~ N(0, SIGMA_RUN^2)
    u ~ N(0, SIGMA_SCALE^2),  v ~ N(0, SIGMA_GAP^2)

by maximum a posteriori (Gauss-Newton; the problem has two unknowns), with the Laplace covariance C of
(u, v). A prediction's 90% interval is then log(y / pred) ~ N(0, SIGMA_RUN^2 + j' C j), j its
(device-time share, launch-gap share). With one run, the device factor moves most of the way to that
run's error (SIGMA_RUN < SIGMA_SCALE); the gap moves only when the runs disagree on it.

SIGMA_SCALE and SIGMA_RUN are empirical-Bayes estimates from NeuSight's eager labels under the shipped
composition (between-device spread of the mean log error, and the pooled within-device spread);
SIGMA_GAP is an assumption (hosts differ by up to ~5x per launch). `experiments/models/run_calibration.py`
re-estimates them and scores the method with each device's own labels held out.

Runs CSV (`read_runs`): `config` (a HF config.json, relative to the CSV's folder or absolute), `batch`, `seq`,
`latency_ms` (measured end-to-end ms); optional `mode` (inf|train|decode, default inf), `dtype` (fp32|fp16|bf16;
default: the config's, as `predict-model`, fp32 under `amp`), `fused`, `recompute`, `optimizer`, `layers` (override
the config's layer count), `attn` (eager|sdpa; default eager, how the runs measured so far were made), `amp` (fp32
weights under bf16 autocast), `cudnn_plans` (a decode run: build, the default as in `predict-model`, or cached; the
host time of the cuDNN plans a run built is taken off its latency before the fit, which composes kernels and
launches only).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.csvio import read_csv
from hybridperf.devices import get_device
from hybridperf.errors import InputError
from hybridperf.graphs.compose import (
    composition_params,
    device_time_and_launches,
    predict_kernels_of,
    predictor_kind,
)
from hybridperf.graphs.config import load_config, model_dtype
from hybridperf.graphs.attention import ATTN_IMPLEMENTATIONS, check_cudnn_plans, cudnn_plan_ms
from hybridperf.graphs.kernels import build_graph
from hybridperf.graphs.model_graph import MODES

#: prior sd of the log device-time factor: between-device spread of NeuSight's labels (7 GPUs)
SIGMA_SCALE = 0.18
#: prior sd of the log launch-gap factor (an assumption: 1-2 us per launch on our hosts, ~9 us on NeuSight's)
SIGMA_GAP = 0.7
#: sd of one run's log error once the device factor is known: pooled within-device spread of NeuSight's labels
SIGMA_RUN = 0.093

REQUIRED = ("config", "batch", "seq", "latency_ms")
_BOOL = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False, "": False, "nan": False}


def read_runs(path: str | Path) -> pd.DataFrame:
    """The validated runs table of a CSV (columns in the module docstring); `config` paths are resolved
    against the CSV's folder. Any bad row raises InputError naming the file and line."""
    path = Path(path)
    df = read_csv(path, "measured-runs file", dtype={"config": str, "mode": str, "dtype": str, "optimizer": str})
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)} (need {', '.join(REQUIRED)})")
    if df.empty:
        raise InputError(f"{path}: no runs")
    rows = []
    for i, r in enumerate(df.to_dict("records")):
        where = f"{path}:{i + 2}"  # header is line 1
        cfg = Path(str(r["config"]).strip())
        cfg = cfg if cfg.is_absolute() else path.parent / cfg
        if not cfg.is_file():
            raise InputError(f"{where}: config file not found: {cfg}")
        ints = {}
        for c in ("batch", "seq", *(("layers",) if "layers" in df.columns and pd.notna(r.get("layers")) else ())):
            v = pd.to_numeric(r[c], errors="coerce")
            if not np.isfinite(v) or v < 1 or v != int(v):
                raise InputError(f"{where}: {c} must be a positive integer, got {r[c]!r}")
            ints[c] = int(v)
        lat = pd.to_numeric(r["latency_ms"], errors="coerce")
        if not np.isfinite(lat) or lat <= 0:
            raise InputError(f"{where}: latency_ms must be a positive number, got {r['latency_ms']!r}")
        mode = str(r.get("mode", "inf") if pd.notna(r.get("mode", "inf")) else "inf").strip()
        if mode not in MODES:
            raise InputError(f"{where}: mode must be one of {', '.join(MODES)}, got {mode!r}")
        flags = {}
        for c in ("fused", "recompute", "amp"):
            s = str(r.get(c, "")).strip().lower()
            if s not in _BOOL:
                raise InputError(f"{where}: {c} must be true or false, got {r.get(c)!r}")
            flags[c] = _BOOL[s]
        dtype = r.get("dtype")
        opt = r.get("optimizer")
        attn = str(r.get("attn", "eager")).strip().lower() if pd.notna(r.get("attn", "eager")) else "eager"
        if attn not in ATTN_IMPLEMENTATIONS:
            raise InputError(f"{where}: attn must be one of {', '.join(ATTN_IMPLEMENTATIONS)}, got {r.get('attn')!r}")
        plans = r.get("cudnn_plans", "build")
        try:
            plans = check_cudnn_plans(plans if pd.notna(plans) and str(plans).strip() else "build")
        except InputError as e:
            raise InputError(f"{where}: {e}") from None
        rows.append({"config": str(cfg), "batch": ints["batch"], "seq": ints["seq"], "layers": ints.get("layers"),
                     "mode": mode, "dtype": str(dtype).strip() if pd.notna(dtype) else _built_dtype(cfg, flags, where),
                     "optimizer": str(opt).strip() if pd.notna(opt) and str(opt).strip() else None,
                     "attn": attn, **flags, "cudnn_plans": plans, "latency_ms": float(lat), "line": i + 2})
    return pd.DataFrame(rows)


def _built_dtype(cfg, flags: dict, where: str) -> str:
    """A run's model dtype where its row names none, as `predict-model` defaults it (`graphs.config.model_dtype`)."""
    try:
        return model_dtype(cfg, amp=flags["amp"])[0]
    except InputError as e:
        raise InputError(f"{where}: {e}") from None


def run_terms(runs: pd.DataFrame, device, predictor) -> pd.DataFrame:
    """Per run: its kernels' device time `device_ms` (sum of max(pred - harness floor, 0) x count), launched
    kernels `launches` and the host time of the cuDNN plans it built `plan_ms`, predicted on `device` with
    `predictor` (runs as `read_runs` returns)."""
    device = get_device(device)
    out = []
    for r in runs.to_dict("records"):
        cfg = load_config(r["config"])
        if pd.notna(r.get("layers")):
            cfg = dataclasses.replace(cfg, layers=int(r["layers"]))
        try:
            graph = build_graph(cfg, r["batch"], r["seq"], r["mode"], r.get("dtype", "fp32"), fused=r.get("fused", False),
                                optimizer=r.get("optimizer"), recompute=r.get("recompute", False),
                                attn=r.get("attn", "eager"), amp=bool(r.get("amp", False)))
        except InputError as e:
            raise InputError(f"run on line {r.get('line', '?')}: {e}") from None
        tab = predict_kernels_of(graph, device, predictor)
        dev_ms, launches = device_time_and_launches(tab)
        plan_ms = cudnn_plan_ms(tab, device, r["mode"], r.get("cudnn_plans", "build"))
        if plan_ms >= r["latency_ms"]:
            raise InputError(f"run on line {r.get('line', '?')}: it took {r['latency_ms']:g} ms, less than the "
                             f"{plan_ms:g} ms of cuDNN plans its decode step builds on {device.name} with new key "
                             "lengths; give it cudnn_plans = cached if its process ran them before")
        out.append({"device_ms": dev_ms, "launches": launches, "plan_ms": plan_ms})
    return pd.DataFrame(out, index=runs.index)


def fit_posterior(device_ms, launches, measured_ms, log_bias, scale: float, gap_ms: float,
                  sigma_scale: float = SIGMA_SCALE, sigma_gap: float = SIGMA_GAP, sigma_run: float = SIGMA_RUN,
                  iters: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """MAP (u, v) and its Laplace covariance for runs with device time `device_ms`, `launches`, measured
    `measured_ms` and per-run mode bias `log_bias`, around the constants `scale` and `gap_ms`."""
    d = np.asarray(device_ms, dtype=np.float64) * scale
    n = np.asarray(launches, dtype=np.float64) * gap_ms
    y = np.log(np.asarray(measured_ms, dtype=np.float64)) - np.asarray(log_bias, dtype=np.float64)
    prec = np.diag([1.0 / sigma_scale ** 2, 1.0 / sigma_gap ** 2])
    th = np.zeros(2)
    for _ in range(iters):
        a, b = np.exp(th[0]) * d, np.exp(th[1]) * n
        tot = np.maximum(a + b, 1e-300)
        jac = np.stack([a / tot, b / tot], axis=1)
        hess = jac.T @ jac / sigma_run ** 2 + prec
        step = np.linalg.solve(hess, jac.T @ (y - np.log(tot)) / sigma_run ** 2 - prec @ th)
        th = th + step
        if np.max(np.abs(step)) < 1e-10:
            break
    a, b = np.exp(th[0]) * d, np.exp(th[1]) * n
    jac = np.stack([a / (a + b), b / (a + b)], axis=1)
    return th, np.linalg.inv(jac.T @ jac / sigma_run ** 2 + prec)


def calibrate_from_runs(runs, device, predictor, calibration: dict | None = None) -> dict:
    """Composition constants for `predictor`'s kind refitted to runs measured on `device` (a runs table,
    or a path to a runs CSV), in the layout `compose(..., calibration=...)` takes. `calibration`: the
    constants to start from (default: the shipped ones)."""
    if not isinstance(runs, pd.DataFrame):
        runs = read_runs(runs)
    dev = get_device(device)
    kind = predictor_kind(predictor)
    # the refit composes device time + gap per launch with no per-kernel CPU bound: runs measured on the
    # target host carry its dispatch cost, which the refitted gap absorbs
    base = {m: composition_params(kind, m, calibration) for m in ("inf", "train")}
    terms = run_terms(runs, dev, predictor)
    bias = np.where(runs["mode"].to_numpy() == "train", base["train"]["log_bias"], base["inf"]["log_bias"])
    th, cov = fit_posterior(terms["device_ms"], terms["launches"], runs["latency_ms"] - terms["plan_ms"], bias,
                            base["inf"]["scale"], base["inf"]["gap_ms"])
    out = {"scale": base["inf"]["scale"] * float(np.exp(th[0])), "gap_ms": base["inf"]["gap_ms"] * float(np.exp(th[1])),
           "cpu_ms": 0.0, "variant": "measured-runs", "n_runs": int(len(runs)), "device": dev.name,
           "posterior": {"cov": cov.tolist(), "sigma_run": SIGMA_RUN}}
    for m in ("inf", "train"):
        out[m] = {"log_bias": base[m]["log_bias"]}
    return {kind: out}

