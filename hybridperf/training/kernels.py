"""Train the kernel residual models: per op class an MLP seed-ensemble and XGBoost, blended and
calibrated on GPUs held out from training, exported as an ONNX bundle. A class trained on both
call-timed and profiler-timed rows gets a second model set for the profiler-timed ones (`fit_all`).

Pipeline (`train_kernel_bundle`):
  0. targets are demeaned per (device, op class, timing): the models learn how the prior's error
     varies with the kernel on a GPU, not each training GPU's overall bias, which no spec-sheet
     feature predicts from a handful of GPUs (measured: it made held-out linear errors 2-3x worse);
     a new GPU's overall bias is what few-shot transfer measures;
  1. leave-one-GPU-out over the training devices: fit on all but one, predict the one left out;
  2. per stratum (op class, timing), the MLP/XGBoost blend and shrinkage minimising the held-out error;
  3. split-conformal 90% interval on the held-out log-residuals, normalised by 1 + beta * ood
     (so rows outside the training range get wider intervals);
  4. refit on every device and export ONNX + manifest.
"""
from __future__ import annotations


import json
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from hybridperf import __version__
from hybridperf.errors import InputError
from hybridperf.ops import OP_CLASSES
from hybridperf.predictor import ood_score
from hybridperf.priors.constants import DEFAULT_CONSTANTS, PriorConstants
from hybridperf.priors.launch import row_timing
from hybridperf.residual_models.bundle import bias_key, stratum_key, write_manifest
from hybridperf.residual_models.features import FEATURE_NAMES
from hybridperf.residual_models.intervals import FLOOR_SHARE_EDGES, MIN_REGIME_ROWS, floor_share_bin, rows_quantiles
from hybridperf.residual_models.mlp import MLPResidual
from hybridperf.residual_models.xgb import XGB_OPSET, XGBResidual
from hybridperf.stats import weighted_quantile, widen_about
from hybridperf.training.kernel_data import MODEL_SHAPES_TABLE, bias_groups, data_digest, featurize, subsample

BLEND_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)  # weight of the MLP; the rest goes to XGBoost
SHRINK_GRID = (0.0, 0.5, 1.0)  # how much of the blended residual to apply (0 = prior alone)
MLP_OPSET = 17


@dataclass
class TrainConfig:
    """Hyper-parameters of kernel residual training."""

    seed: int = 0
    max_rows: int = 6000  # per (device, op class)
    coverage: float = 0.9
    ood_beta: float = 0.5
    mlp: dict = field(default_factory=lambda: {"hidden": (128, 64), "n_seeds": 3, "epochs": 40})
    xgb: dict = field(default_factory=lambda: {"n_estimators": 400, "max_depth": 6})


def feature_range(X: np.ndarray) -> dict:
    """Training range of each feature (min, max, spread) for the OOD score."""
    return {"lo": X.min(axis=0).tolist(), "hi": X.max(axis=0).tolist(),
            "scale": np.maximum(X.std(axis=0), 1e-3).tolist()}


def fit_class(X: np.ndarray, y: np.ndarray, cfg: TrainConfig) -> dict:
    """Fit both learners for one op class."""
    return {
        "mlp": MLPResidual(seed=cfg.seed, **cfg.mlp).fit(X, y),
        "xgb": XGBResidual(seed=cfg.seed, **cfg.xgb).fit(X, y),
    }


def fit_all(train: pd.DataFrame, cfg: TrainConfig, progress: Callable[[str], None] | None = None,
            constants: PriorConstants = DEFAULT_CONSTANTS) -> dict:
    """Fit models for every op class present in `train` (features priced with `constants`); returns
    {stratum: {"models", "range"}}.

    A class with rows of both timings gets two model sets: `op_class` fitted on its call-timed rows
    only and `op_class@kernel` on its profiler-timed rows and its fp32 call-timed ones. Measured
    leave-one-GPU-out (experiments/RESULTS.md): Vidur's profiler-timed fp16 rows cut the held-out A40's
    RMSNorm error from 44% to 10% when trained together with NeuSight's, but the same joint model made
    NeuSight's call-timed LayerNorm worse (T4 5.8% -> 10.1%), so call-timed rows keep models that never
    saw kernel durations. Half-precision call-timed rows (our H200's) stay out of the profiler-timed
    models: there every half-precision row had been profiler-timed, and with them the held-out
    A100-SXM4's RMSNorm MLP went 29% -> 60-73%.
    """
    fz = featurize(subsample(train, cfg.max_rows, cfg.seed), constants)
    y = fz.y - device_bias(fz.rows, fz.y)
    timing = row_timing(fz.rows).to_numpy()
    fp32_call = (timing == "call") & (fz.rows["dtype"] == "fp32").to_numpy()
    fitted = {}
    for oc in OP_CLASSES:
        cls = (fz.rows["op_class"] == oc).to_numpy()
        both = (timing[cls] == "call").any() and (timing[cls] == "kernel").any()
        sets = [(oc, cls & (timing == "call")), (stratum_key(oc, "kernel"), cls & ((timing == "kernel") | fp32_call))] \
            if both else [(oc, cls)]
        for key, m in sets:
            if m.sum() < 20:
                continue
            if progress:
                progress(f"fit {key} ({m.sum()} rows)")
            fitted[key] = {"models": fit_class(fz.X[m], y[m], cfg), "range": feature_range(fz.X[m])}
    return fitted


def device_bias(rows: pd.DataFrame, y: np.ndarray) -> np.ndarray:
    """Each row's training-device bias, removed from its target: the median of y per
    (device, op class, timing). Keeping the part the training devices share (demeaning by each
    device's deviation from their mean) was measured and rejected: held-out A40 RMSNorm 9.9% -> 35.3%,
    V100 linear 8.4% -> 28.3%."""
    groups = bias_groups(rows)
    return rows[groups].assign(y=y).groupby(groups)["y"].transform("median").to_numpy()


def models_for(fitted: dict, op_class: str, timing: str) -> dict | None:
    """The fitted models that serve rows of (op class, timing): the stratum's own, else the class's."""
    return fitted.get(stratum_key(op_class, timing)) or fitted.get(op_class)


def predict_heldout(fitted: dict, rows: pd.DataFrame, constants: PriorConstants = DEFAULT_CONSTANTS) -> pd.DataFrame:
    """Per-member residual predictions and OOD scores for `rows` (canonical, with latency)."""
    fz = featurize(rows, constants)
    out = fz.rows[["device", "op", "op_class", "dtype", "B", "M", "N", "K", "H", "latency_ms"]].copy()
    out["timing"] = row_timing(fz.rows).to_numpy()
    out["prior_ms"] = fz.prior_ms
    out["floor_share"] = fz.floor_ms / fz.prior_ms
    if "calibration_only" in fz.rows.columns:  # held-out rows that calibrate intervals only (choose_blend)
        out["calibration_only"] = fz.rows["calibration_only"].to_numpy(bool)
    out["roofline_ms"] = fz.roofline_ms
    out["y"] = fz.y
    for col in ("r_mlp", "r_xgb", "ood"):
        out[col] = np.nan
    for (oc, t), idx in out.groupby(["op_class", "timing"]).indices.items():
        f = models_for(fitted, oc, t)
        if f is None:
            continue
        out.iloc[idx, out.columns.get_loc("r_mlp")] = f["models"]["mlp"].predict(fz.X[idx])
        out.iloc[idx, out.columns.get_loc("r_xgb")] = f["models"]["xgb"].predict(fz.X[idx])
        out.iloc[idx, out.columns.get_loc("ood")] = ood_score(fz.X[idx], f["range"])
    return out


def leave_one_gpu_out(train: pd.DataFrame, evaluate: pd.DataFrame, cfg: TrainConfig, devices=None,
                      progress: Callable[[str], None] | None = None, keep_models: bool = False,
                      fold_constants: Callable[[str], PriorConstants] | None = None):
    """For each device d: fit on `train` without d, predict `evaluate` rows of d.

    `fold_constants(d)`, when given, gives the prior constants of d's fold (e.g. `fitted_constants`
    without d's own fits). Returns the held-out table (one row per evaluated kernel, with `heldout` =
    d), and with `keep_models=True` also {d: fitted models of that fold}.
    """
    devices = devices or sorted(train["device"].unique())
    parts, models = [], {}
    for d in devices:
        if progress:
            progress(f"hold out {d}")
        constants = fold_constants(d) if fold_constants else DEFAULT_CONSTANTS
        fitted = fit_all(train[train["device"] != d], cfg, progress, constants)
        ev = evaluate[evaluate["device"] == d]
        if len(ev):
            parts.append(predict_heldout(fitted, ev, constants).assign(heldout=d))
        if keep_models:
            models[d] = fitted
    logo = pd.concat(parts, ignore_index=True)
    return (logo, models) if keep_models else logo


def _ape(pred_log_ratio: np.ndarray) -> np.ndarray:
    """|pred/measured - 1| from log(pred/measured)."""
    return np.abs(np.exp(pred_log_ratio) - 1.0)


def choose_blend(logo: pd.DataFrame, exclude_device: str | None = None) -> dict:
    """Per stratum (op class, and `op_class@kernel` for profiler-timed rows: see `stratum`), the
    (MLP weight, shrinkage) with the lowest mean held-out APE, each held-out device weighing the same,
    among those that are no worse than the prior alone on any held-out device.

    Do no harm: shrinkage 0 (the prior alone) is always eligible. Choosing on the mean alone picked
    residuals whose gain on some GPUs was selection noise: nested leave-one-GPU-out on NeuSight, the
    chosen bmm residual averaged 16.9% on the GPU it had not seen against 15.6% for the prior alone
    (A100 12.9 -> 18.8), LayerNorm 5.0% against 4.7%.

    Rows marked `calibration_only` (held-out kernels that calibrate intervals, see
    `conformal_interval`) take no part in the choice."""
    df = logo if exclude_device is None else logo[logo["heldout"] != exclude_device]
    if "calibration_only" in df.columns:
        df = df[~df["calibration_only"].to_numpy(bool)]
    choice = {}
    for key, g in df.groupby(stratum(df)):
        dev = g["heldout"].to_numpy()
        dev_w = 1.0 / g.groupby("heldout")["y"].transform("size").to_numpy()
        per_device = lambda ape: pd.Series(ape).groupby(dev).mean()  # noqa: E731
        prior_ape = _ape(-g["y"].to_numpy())
        prior_per_dev = per_device(prior_ape)
        errs = {}
        for w in BLEND_GRID:
            r = w * g["r_mlp"].to_numpy() + (1 - w) * g["r_xgb"].to_numpy()
            for lam in SHRINK_GRID:
                ape = prior_ape if lam == 0 else _ape(lam * r - g["y"].to_numpy())
                if (per_device(ape) > prior_per_dev + 1e-12).any():
                    continue
                errs[(w, lam)] = float(np.sum(dev_w * ape))
        w, lam = min(errs, key=errs.get)
        choice[key] = {"mlp_weight": w, "shrink": lam}
    return choice


def stratum(rows: pd.DataFrame) -> pd.Series:
    """Calibration stratum of each row: its op class, suffixed `@kernel` when it is profiler-timed
    (`timing` = kernel). Blend, shrinkage and interval are chosen per stratum: how well the residual
    transfers differs between a timed call and a kernel's duration."""
    return pd.Series([stratum_key(o, t) for o, t in zip(rows["op_class"], row_timing(rows))], index=rows.index, dtype=object)


def per_stratum(logo: pd.DataFrame, table: dict, field: str, default: float) -> np.ndarray:
    """`table[stratum][field]` for every row, falling back to the op class's entry, then `default`."""
    keys, oc = stratum(logo).to_numpy(), logo["op_class"].to_numpy()
    return np.array([table.get(k, table.get(c, {})).get(field, default) for k, c in zip(keys, oc)], dtype=np.float64)


def blended(logo: pd.DataFrame, choice: dict) -> np.ndarray:
    """Blended, shrunk residual for every row of a held-out table."""
    w = per_stratum(logo, choice, "mlp_weight", 0.5)
    lam = per_stratum(logo, choice, "shrink", 1.0)
    return lam * (w * logo["r_mlp"].to_numpy() + (1 - w) * logo["r_xgb"].to_numpy())


def conformal_interval(logo: pd.DataFrame, choice: dict, cfg: TrainConfig, exclude_device: str | None = None) -> dict:
    """Split-conformal quantiles of the normalised held-out log error, per stratum (see `stratum`) and
    per floor-share bin (`hybridperf.residual_models.intervals`).

    With e = log measured - log predicted and c the centre of the central interval of e (the midpoint
    of its alpha/2 and 1 - alpha/2 quantiles), score = (e - c) / (1 + beta * ood); q_lo, q_hi = c + the
    score's quantiles. The interval of a new row is pred * exp(q), q widened by 1 + beta * ood about c
    (`stats.widen_about`), so out of range it grows on both sides instead of multiplying a skewed
    interval's long side. Each held-out device counts equally (`_device_weights`).

    The stratum's overall quantiles (what `suggest` and `transfer` read, and what an uncalibrated bin
    falls back to) come from the scored rows. A floor-share bin is calibrated on its scored rows where
    they are enough (at least MIN_REGIME_ROWS rows from as many devices as the stratum has, at most 3),
    else on all its held-out rows, `calibration_only` ones included, else keeps the overall quantiles.
    The `calibration_only` rows (NeuSight's collect files) supply the small-kernel regimes the scored
    tables lack; where the scored tables do reach, they decide, because the collect files' long GEMMs
    were timed in another regime (back-to-back on passively cooled cards: section 1 of RESULTS.md).
    """
    df = logo if exclude_device is None else logo[logo["heldout"] != exclude_device]
    df = df.assign(r=blended(df, choice))
    out = {}
    for oc, g in df.groupby(stratum(df)):
        scored = g[~g["calibration_only"].to_numpy(bool)] if "calibration_only" in g.columns else g
        overall = _conformal_quantiles(scored if len(scored) else g, cfg)
        iv = {**overall, "ood_beta": cfg.ood_beta, "coverage": cfg.coverage}
        if "floor_share" in g.columns:
            bins = floor_share_bin(g["floor_share"].to_numpy())
            need_devices = min(3, g["heldout"].nunique())
            enough = lambda rows: len(rows) >= MIN_REGIME_ROWS and rows["heldout"].nunique() >= need_devices  # noqa: E731
            regimes = {k: [] for k in overall} | {"rows": []}
            for b in range(len(FLOOR_SHARE_EDGES) + 1):
                gb = g[bins == b]
                own = next((rows for rows in (gb[gb.index.isin(scored.index)], gb) if enough(rows)), None)
                q = overall if own is None else _conformal_quantiles(own, cfg)
                for k in overall:
                    regimes[k].append(q[k])
                regimes["rows"].append(0 if own is None else int(len(own)))
            iv["by_floor_share"] = {"edges": list(FLOOR_SHARE_EDGES), **regimes}
        out[oc] = iv
    return out


def _device_weights(g: pd.DataFrame) -> np.ndarray:
    """Row weights under which each held-out device weighs the same and, within a device, its scored
    kernels and its `calibration_only` sample weigh the same (neither shape mix outvotes the other)."""
    source = g["calibration_only"].to_numpy(bool) if "calibration_only" in g.columns else np.zeros(len(g), bool)
    keys = pd.DataFrame({"d": g["heldout"].to_numpy(), "s": source})
    per_source = keys.groupby(["d", "s"])["s"].transform("size").to_numpy()
    sources = keys.groupby("d")["s"].transform("nunique").to_numpy()
    return 1.0 / (per_source * sources)


def _conformal_quantiles(g: pd.DataFrame, cfg: TrainConfig) -> dict:
    """{q_lo, q_hi, q_center} of held-out rows `g` (columns y, r, ood, heldout); see conformal_interval."""
    alpha = 1.0 - cfg.coverage
    e = (g["y"] - g["r"]).to_numpy()
    w = _device_weights(g)
    c = (weighted_quantile(e, w, alpha / 2) + weighted_quantile(e, w, 1 - alpha / 2)) / 2
    s = (e - c) / (1.0 + cfg.ood_beta * g["ood"].to_numpy())
    return {"q_lo": c + weighted_quantile(s, w, alpha / 2), "q_hi": c + weighted_quantile(s, w, 1 - alpha / 2),
            "q_center": c}


def manifest_strata(classes, intervals: dict) -> list[tuple[str, str]]:
    """(manifest key, calibrated stratum it takes its blend and interval from) for every op class in
    `classes` and every calibrated stratum of one. A class calibrated only on profiler-timed rows (a
    single training GPU from Vidur) lends that stratum to its plain entry, which every bundle needs."""
    out = []
    for oc in sorted(classes):
        own = sorted(k for k in intervals if k.split("@")[0] == oc)
        if not own:
            raise InputError(f"no held-out calibration rows for op class {oc!r}")
        out += [(oc, oc if oc in own else own[0])] + [(k, k) for k in own if k != oc]
    return out


def export_bundle(fitted: dict, choice: dict, intervals: dict, out_dir: Path, train: pd.DataFrame,
                  cfg: TrainConfig, extra: dict | None = None, constants: PriorConstants = DEFAULT_CONSTANTS) -> dict:
    """Write one ONNX file per (fitted stratum, learner) plus manifest.json; returns the manifest.
    `constants` price the training rows' device biases (a fold's own, for a fold bundle)."""
    import onnx
    import onnxruntime
    import torch
    import xgboost

    out_dir.mkdir(parents=True, exist_ok=True)
    files, classes = {}, {}
    # one manifest entry per stratum (op class, `op_class@kernel`); a stratum without models of its
    # own (see `fit_all`) shares its class's ONNX files
    for key, src in manifest_strata({k.split("@")[0] for k in fitted}, intervals):
        oc = key.split("@")[0]
        own = key if key in fitted else oc if oc in fitted else next(k for k in sorted(fitted) if k.startswith(oc + "@"))
        f = fitted[own]
        w = choice.get(src, {}).get("mlp_weight", 0.5)
        lam = choice.get(src, {}).get("shrink", 1.0)
        members = []
        for kind, weight in (("mlp", lam * w), ("xgb", lam * (1.0 - w))):
            if weight <= 0:
                continue
            name = f"{own.replace('@', '_')}_{kind}.onnx"
            if name not in files:
                f["models"][kind].export_onnx(out_dir / name)
                files[name] = ""
            members.append({"file": name, "kind": kind, "weight": weight})
        classes[key] = {"members": members, "interval": intervals[src], "feature_range": f["range"],
                        "blend": choice.get(src, {})}
    manifest = {
        "kind": "kernels",
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hybridperf_version": __version__,
        "feature_names": list(FEATURE_NAMES),
        "opset": {"mlp": MLP_OPSET, "xgb": XGB_OPSET},
        "library_versions": {"torch": torch.__version__, "xgboost": xgboost.__version__, "onnx": onnx.__version__,
                             "onnxruntime": onnxruntime.__version__, "python": platform.python_version()},
        "training_data": {"sha256": data_digest(train), "rows": int(len(train)),
                          "devices": sorted(train["device"].unique().tolist())},
        "train_config": json.loads(json.dumps(asdict(cfg))),
        "target": "log(measured_ms / prior_ms), demeaned per training device, op class and timing",
        "files": files,
        "op_classes": classes,
        "device_bias": training_device_bias(train, cfg, constants),
        **(extra or {}),
    }
    write_manifest(out_dir, manifest)
    # a bundle directory holds exactly its manifest's models: drop those an earlier export left behind
    for stale in set(p.name for p in out_dir.glob("*.onnx")) - set(files):
        (out_dir / stale).unlink()
    return manifest


#: a (device, stratum) takes its bias from its model-shaped rows when it has at least this many
MIN_BIAS_ROWS = 20


def training_device_bias(train: pd.DataFrame, cfg: TrainConfig, constants: PriorConstants = DEFAULT_CONSTANTS) -> dict:
    """{training device: {stratum:dtype (`residual_models.bundle.bias_key`): median log(measured/prior)}}:
    the overall bias that demeaning kept out of the models. The predictor adds it back on these
    devices only (they were measured); an unseen GPU gets none.

    It is read off the kernels of real models' layers (`table` == MODEL_SHAPES_TABLE) where a device
    has them. NeuSight's randomly shaped collect tables disagree with its test tables on the same GPU
    (P4 linear: +0.62 against 0.0 in log; P100 softmax +0.44 against +0.03), and a bias read mostly off
    them made the training GPUs' own test kernels worse than the prior alone: 14.8% MAPE against 8.8%,
    coverage 75.6% (cross-validated by shape, experiments/RESULTS.md section 2). From the test tables:
    7.8%, coverage 91.1%."""
    train = train.assign(table=train["table"] if "table" in train.columns else "")
    model_rows = train["table"] == MODEL_SHAPES_TABLE
    # a subsample of the rest and every model-shaped row
    fz = featurize(pd.concat([subsample(train[~model_rows], cfg.max_rows, cfg.seed), train[model_rows]]), constants)
    rows = fz.rows.assign(y=fz.y, timing=row_timing(fz.rows))
    out = {}
    for (dev, oc, tm, dt), g in rows.groupby(["device", "op_class", "timing", "dtype"]):
        ref = g[g["table"] == MODEL_SHAPES_TABLE]
        median = float((ref if len(ref) >= MIN_BIAS_ROWS else g)["y"].median())
        out.setdefault(dev, {})[bias_key(oc, tm, dt)] = round(median, 5)
    return out


def train_kernel_bundle(train: pd.DataFrame, out_dir: Path, cfg: TrainConfig | None = None,
                        logo: pd.DataFrame | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """Calibrate on leave-one-GPU-out (unless `logo` is given), refit on all devices, export."""
    cfg = cfg or TrainConfig()
    if train["device"].nunique() < 2:
        raise InputError("cross-device training needs kernels of at least two devices (or use --per-device)")
    if logo is None:
        logo = leave_one_gpu_out(train, train, cfg, progress=progress)
    choice = choose_blend(logo)
    intervals = conformal_interval(logo, choice, cfg)
    fitted = fit_all(train, cfg, progress)
    return export_bundle(fitted, choice, intervals, Path(out_dir), train, cfg,
                         extra={"calibration": {"method": "split-conformal on leave-one-GPU-out residuals",
                                                "heldout_devices": sorted(logo["heldout"].unique().tolist()),
                                                "heldout_metrics": heldout_metrics(logo, choice, intervals, cfg)}})


def heldout_metrics(logo: pd.DataFrame, choice: dict, intervals: dict, cfg: TrainConfig) -> dict:
    """Per stratum: MAPE (%) of the prior and of the blended model on the held-out rows, and the
    coverage (%) of the interval. Blend and interval are fitted on all folds here, so these describe
    the shipped bundle's calibration data (the experiments report the strictly nested numbers)."""
    r = blended(logo, choice)
    err = logo["y"].to_numpy() - r
    keys = stratum(logo)
    q_lo, q_hi, q_c = rows_quantiles(intervals, keys, logo["op_class"], logo.get("floor_share", pd.Series(0.0, index=logo.index)))
    lo_all, hi_all = widen_about(q_lo, q_hi, q_c, 1.0 + cfg.ood_beta * logo["ood"].to_numpy())
    out = {}
    for oc, idx in logo.groupby(keys).indices.items():
        lo, hi = lo_all[idx], hi_all[idx]
        out[oc] = {"prior_mape": round(float(np.mean(np.abs(np.exp(-logo["y"].to_numpy()[idx]) - 1)) * 100), 2),
                   "model_mape": round(float(np.mean(np.abs(np.exp(-err[idx]) - 1)) * 100), 2),
                   "coverage": round(float(np.mean((err[idx] >= lo) & (err[idx] <= hi)) * 100), 1)}
    return out
