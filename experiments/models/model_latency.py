"""Whole-model latency on NeuSight's labels, every device held out.

For every label `neusight/label/<GPU>/<model>-<inf|train>-<seq>-<batch>.json` (NVIDIA and AMD):
  * predict every kernel of the model with the kernel model of that device held out of training
    (`--bundles DIR` holds one bundle per held-out device, `DIR/<device_with_underscores>/kernels/`;
    a device without kernel training data (the AMD GPUs) uses the shipped bundle `exported_models/kernels`,
    which never saw it; the analytical prior alone is always evaluated too);
  * compose them (`hybridperf.graphs.compose`: t_k = max(scale * max(pred_k - floor_k, 0) + gap, cpu),
    e2e = exp(log_bias[mode]) * sum t_k count_k) with the composition constants fitted on the OTHER
    devices' eager labels only (leave-one-device-out), and the 90% interval from the other devices'
    residuals (nested leave-one-device-out);
  * compare with the measured e2e latency and with NeuSight's own prediction
    (`results/prediction/<GPU>/neusight/<run>.json`);
  * compare per-op-group totals with the per-node measurements of the traced layer CSV.
`-fusion` labels (the model run with fused kernels) are predicted with the fused graph (`build_graph(...,
fused=True)`, `predict-model --fused`) and reported separately; the constants are fitted on eager labels only.
Several composition variants (which constants are free) are evaluated the same way and listed; `--variant`
picks the one reported and shipped.

`--transfer-k K` also predicts each held-out NVIDIA GPU's labels after few-shot transfer with K kernels of
its NeuSight test table picked by `suggest` (`--transfer-design`: for each run's own model, the default, as
`hybridperf suggest --config` does; for all the device's runs; or per op class).

Writes experiments/out/model_latency/{report.md, labels.csv, per_device.csv, op_groups.csv, variants.csv}.
`--write-calibration` also writes the all-device fit to hybridperf/graphs/calibration.py (shipped; used
only for GPUs outside the label set), all but the launch gap and host floor (`HOST_KEYS`), which
`experiments.models.host_floor --write` chooses on today's hosts.

    python -m experiments.models.model_latency --data ../shared/datasets [--bundles DIR] [--transfer-k 16]
        [--write-calibration]
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import REPO, add_data_argument, add_out_argument
from experiments.models.model_latency_report import mape, plot_labels, write_report

from hybridperf.devices import get_device  # noqa: E402
from hybridperf.priors.constants import LIBRARY_EFFICIENCY, fitted_constants  # noqa: E402
from hybridperf.training.collectives import interval_from_residuals  # noqa: E402
from hybridperf.training.library_efficiency import fit_library_efficiency, gemm_ratios, traced_gemms  # noqa: E402
from hybridperf.graphs import build_graph, compose  # noqa: E402
from hybridperf.graphs.compose import OOD_WIDEN, in_model_ms, predict_kernels_of  # noqa: E402
from hybridperf.graphs.trace import traced_group_totals  # noqa: E402
from hybridperf.predictor import Predictor  # noqa: E402

GROUP_MAP = {"linear": "linear", "bmm": "bmm", "elementwise": "elementwise", "softmax": "softmax",
             "layernorm": "layernorm", "embedding": "other", "memory": "other"}


def load_tables(root: Path):
    try:
        from hybridperf.datasets.labels import load_labels, load_neusight_predictions

        labels = load_labels(root)
        ns = load_neusight_predictions(root, "neusight")
    except ImportError:  # minimal fallback parsing
        rows, nrows = [], []
        for f in sorted((root / "label").glob("*/*.json")):
            parts = f.stem.split("-")
            d = json.loads(f.read_text())
            rows.append({"device": f.parent.name.replace("_", " "), "model": parts[0], "mode": parts[1],
                         "seq": int(parts[2]), "batch": int(parts[3]), "fusion": "fusion" in parts[4:],
                         "variant": "", "num_layer": d.get("num_layer") or -1, "e2e_ms": d["e2e_latency"],
                         "fw_ms": d["fw_latency"], "bw_ms": d.get("bwall_latency", 0) or 0,
                         "graph_path": str(f.with_suffix(".csv")) if f.with_suffix(".csv").exists() else None})
        for f in sorted((root / "results" / "prediction").glob("*/neusight/*.json")):
            parts = f.stem.split("-")
            d = json.loads(f.read_text())
            nrows.append({"device": f.parent.parent.name.replace("_", " "), "model": parts[0], "mode": parts[1],
                          "seq": int(parts[2]), "batch": int(parts[3]), "fusion": "fusion" in parts[4:],
                          "variant": "", "e2e_ms": d["e2e_latency"]})
        labels, ns = pd.DataFrame(rows), pd.DataFrame(nrows)
    return labels, ns


TRAIN_GPUS_GLOB = "data/dataset/train/collect/*/p2.1.0/{dev}.csv"

#: composition variants: which of (scale, gap_ms, cpu_ms, log_bias per mode) are fitted; "raw" = the old
#: plain sum of isolated-kernel predictions with a per-mode log bias
VARIANTS = {
    "raw_bias": dict(raw=True, scale=False, gap=False, cpu=False, bias=True),
    "gap": dict(raw=False, scale=False, gap=True, cpu=False, bias=False),
    "gap_scale": dict(raw=False, scale=True, gap=True, cpu=False, bias=False),
    "gap_bias": dict(raw=False, scale=False, gap=True, cpu=False, bias=True),
    "gap_scale_bias": dict(raw=False, scale=True, gap=True, cpu=False, bias=True),
    "gap_cpu": dict(raw=False, scale=False, gap=True, cpu=True, bias=False),
    "gap_scale_cpu": dict(raw=False, scale=True, gap=True, cpu=True, bias=False),
    # per-device offsets profiled out of the fit (kernel-model bias of a device is not composition);
    # the held-out device gets the median offset of the training devices as log_bias (both modes)
    "gap_within": dict(raw=False, scale=False, gap=True, cpu=False, bias=False, within=True),
}
DEFAULT_VARIANT = "gap"


def bundle_for(bundles: Path | None, device: str, root: Path):
    """(predictor, kind label) with `device` held out of the kernel model's training."""
    if bundles is None:
        return Predictor.prior_only(), "prior"
    p = bundles / device.replace(" ", "_") / "kernels"
    if (p / "manifest.json").is_file():
        return Predictor.load(p), "bundle"
    trained_on = any(root.glob(TRAIN_GPUS_GLOB.format(dev=device)))
    shipped = REPO / "exported_models" / "kernels"
    if not trained_on and (shipped / "manifest.json").is_file():
        return Predictor.load(shipped), "bundle (shipped, device not in training data)"
    return Predictor.prior_only(), "prior (bundle missing)"


@functools.lru_cache(maxsize=1)
def _test_tables(root: Path) -> pd.DataFrame:
    from hybridperf.datasets.neusight import load_test

    return load_test(root)


def transferred(base: tuple, device: str, root: Path, k: int, targets: pd.DataFrame | None = None) -> tuple:
    """(predictor, kind label): `base` adapted with `k` kernels of `device`'s NeuSight test table chosen by
    `suggest` (the few-shot workflow: suggest -> collect -> transfer); devices without a test table keep `base`.
    `targets` (model-aware design): the kernel requests of the device's labels with a `count` column."""
    from hybridperf.transfer import adapt_predictor
    from hybridperf.transfer.suggest import suggest_kernels

    pool = _test_tables(root)
    pool = pool[pool["device"] == device].reset_index(drop=True)
    if pool.empty or not base[1].startswith("bundle") or "shipped" in base[1]:
        return base
    held = base[0].with_constants(fitted_constants(device))
    picked = suggest_kernels(held, pool.assign(pool_idx=range(len(pool))), device, k,
                             target=targets)["pool_idx"].to_numpy()
    what = "the models' kernels" if targets is not None else "test-table kernels"
    return adapt_predictor(held, pool.iloc[picked], device), f"transfer (k={k}, designed for {what})"


def label_targets(labels: pd.DataFrame, cfg_dir: Path, device: str, predictor) -> pd.DataFrame | None:
    """The kernel requests of `labels` (runs on `device`; a `-fusion` run's fused graph) as one
    model-aware `suggest` target in which every label weighs the same (`suggest.equal_weight_target`)."""
    from hybridperf.graphs.compose import model_kernel_requests
    from hybridperf.transfer.suggest import equal_weight_target

    out = [model_kernel_requests(build_graph(cfg_dir / f"{lab.model}.json", int(lab.batch), int(lab.seq),
                                             lab.mode, fused=bool(lab.fusion), attn="eager"), device)
           for lab in labels.itertuples() if (cfg_dir / f"{lab.model}.json").is_file()]
    return equal_weight_target(predictor.with_constants(fitted_constants(device)), out, device) if out else None


class LabelSet:
    """Per-kernel arrays of every label, flattened, for fast composition with any constants."""

    def __init__(self, recs: list[dict]):
        self.n = len(recs)
        self.meas = np.array([r["meas"] for r in recs])
        self.train = np.array([r["mode"] == "train" for r in recs])
        self.device = np.array([r["device"] for r in recs])
        self.eager = np.array([not r["fusion"] for r in recs])
        self.idx = np.concatenate([np.full(len(r["pred"]), i) for i, r in enumerate(recs)])
        cat = lambda k: np.concatenate([r[k] for r in recs])  # noqa: E731
        self.pred, self.floor, self.count, self.ood = cat("pred"), cat("floor"), cat("count"), cat("ood")
        self.fw = cat("fw")
        dev = np.maximum(self.pred - self.floor, 0.0)
        self.R = np.bincount(self.idx, self.pred * self.count, self.n)   # isolated-call sum
        self.D = np.bincount(self.idx, dev * self.count, self.n)         # device time
        self.N = np.bincount(self.idx, self.count, self.n)               # launched kernels

    def kernel_t(self, p: dict) -> np.ndarray:
        return in_model_ms(self.pred, self.floor, p["scale"], p["gap_ms"], p["cpu_ms"], p.get("raw", False))

    def total(self, p: dict) -> np.ndarray:
        """Composed e2e (ms) of every label with constants `p`."""
        if p.get("raw"):
            base = self.R
        elif p["cpu_ms"] > 0:
            base = np.bincount(self.idx, self.kernel_t(p) * self.count, self.n)
        else:
            base = p["scale"] * self.D + p["gap_ms"] * self.N
        return base * np.exp(np.where(self.train, p["b_train"], p["b_inf"]))


def _params(x, v) -> dict:
    x = list(x)
    p = {"raw": v["raw"], "scale": 1.0, "gap_ms": 0.0, "cpu_ms": 0.0, "b_inf": 0.0, "b_train": 0.0}
    if v["scale"]:
        p["scale"] = float(np.exp(x.pop(0)))
    if v["gap"]:
        p["gap_ms"] = abs(float(x.pop(0)))
    if v["cpu"]:
        p["cpu_ms"] = abs(float(x.pop(0)))
    if v["bias"]:
        p["b_inf"], p["b_train"] = float(x.pop(0)), float(x.pop(0))
    return p


def fit_constants(ls: LabelSet, sel: np.ndarray, variant: str) -> dict:
    """Composition constants minimising the mean over devices of each device's mean squared log error
    on the labels `sel` (equal weight per device, so no single device dominates)."""
    from scipy.optimize import minimize

    v = VARIANTS[variant]
    devs = np.unique(ls.device[sel])
    masks = [sel & (ls.device == d) for d in devs]
    y = np.log(ls.meas)

    within = v.get("within", False)

    def loss(x):
        r = np.log(ls.total(_params(x, v))) - y
        if within:
            return float(np.mean([np.mean((r[m] - r[m].mean()) ** 2) for m in masks]))
        return float(np.mean([np.mean(r[m] ** 2) for m in masks]))

    x0 = ([0.0] if v["scale"] else []) + ([0.005] if v["gap"] else []) + ([0.03] if v["cpu"] else []) \
        + ([0.0, 0.0] if v["bias"] else [])
    if not x0:
        return _params([], v)
    best = None
    for f in (1.0, 0.3, 3.0):
        st = np.array(x0) * f if f != 1.0 else np.array(x0)
        res = minimize(loss, st, method="Nelder-Mead",
                       options=dict(xatol=1e-7, fatol=1e-12, maxiter=3000, maxfev=6000))
        if best is None or res.fun < best.fun:
            best = res
    p = _params(best.x, v)
    if within:
        r = y - np.log(ls.total(p))
        p["b_inf"] = p["b_train"] = float(np.median([np.mean(r[m]) for m in masks]))
    return p


#: calibration keys of the host, chosen leave-one-host-out on lent machines' runs (`host_floor --write`): a refit
#: on NeuSight's labels (2022 hosts, fp32, transformers 4.x) leaves them as they are
HOST_KEYS = ("gap_ms", "cpu_ms")


def write_calibration(update: dict) -> Path:
    """Write the shipped composition constants updated by {kind: {key: value}} into
    hybridperf/graphs/calibration.py (its docstring kept); returns the path."""
    from hybridperf.atomic import atomic_path
    from hybridperf.graphs import calibration as calmod

    current = json.loads(json.dumps(calmod.CALIBRATION))
    for kind, c in update.items():
        current[kind] = {**current.get(kind, {}), **c}
    path = Path(calmod.__file__)
    text = path.read_text()
    with atomic_path(path) as tmp:
        tmp.write_text(text[: text.index("CALIBRATION: dict")] + "CALIBRATION: dict = " + json.dumps(current, indent=4)
                       + "\n")
    return path


def as_calibration(p: dict, q: dict | None = None) -> dict:
    """Constants `p` (and per-mode interval quantiles `q`) in the layout of hybridperf.graphs.calibration."""
    c = {"scale": round(p["scale"], 4), "gap_ms": round(p["gap_ms"], 5), "cpu_ms": round(p["cpu_ms"], 5)}
    for mode, b in (("inf", p["b_inf"]), ("train", p["b_train"])):
        c[mode] = {"log_bias": round(b, 4)}
        if q:
            c[mode].update(q)
    return c


def device_balanced_interval(resid: np.ndarray, device: np.ndarray) -> tuple[float, float]:
    """Central 90% interval (log space, containing 0) of held-out residuals in which every device weighs
    the same: a new GPU is drawn from the devices, not the labels, and a device's labels share its error
    (a device with 3 labels and a 40% bias must count as much as one with 16)."""
    w = 1.0 / pd.Series(device).map(pd.Series(device).value_counts()).to_numpy(np.float64)
    q = interval_from_residuals(np.asarray(resid, dtype=np.float64), w, coverage=0.9)
    return q["q_lo"], q["q_hi"]


def lodo(ls: LabelSet, variant: str, nested: bool = True) -> pd.DataFrame:
    """Leave-one-device-out: per device, constants fitted on the other devices' eager labels, and
    (nested) the 90% interval from the residuals of the other devices, each under constants fitted
    without it. Returns per-label composed ms, lo/hi and the constants used."""
    out = pd.DataFrame({"ours_ms": np.nan, "lo_ms": np.nan, "hi_ms": np.nan, "q_lo": np.nan, "q_hi": np.nan},
                       index=range(ls.n))
    consts = {}
    for d in np.unique(ls.device):
        tr = ls.eager & (ls.device != d)
        te = ls.device == d
        p = fit_constants(ls, tr, variant)
        consts[d] = p
        tot = ls.total(p)
        out.loc[te, "ours_ms"] = tot[te]
        if not nested:
            continue
        res, dev_of = [], []
        for d2 in np.unique(ls.device[tr]):
            p2 = fit_constants(ls, tr & (ls.device != d2), variant)
            m = tr & (ls.device == d2)
            res.extend(np.log(ls.meas[m] / ls.total(p2)[m]))
            dev_of.extend([d2] * int(m.sum()))
        q_lo, q_hi = device_balanced_interval(np.array(res), np.array(dev_of))
        # the same out-of-range widening as compose(): time-weighted kernel ood score of the label
        t = ls.kernel_t(p) * ls.count
        w_ood = np.bincount(ls.idx, t * ls.ood, ls.n) / np.maximum(np.bincount(ls.idx, t, ls.n), 1e-300)
        widen = 1.0 + OOD_WIDEN * w_ood[te]
        out.loc[te, "q_lo"], out.loc[te, "q_hi"] = q_lo, q_hi
        out.loc[te, "lo_ms"] = tot[te] * np.exp(np.minimum(q_lo * widen, 0))
        out.loc[te, "hi_ms"] = tot[te] * np.exp(np.maximum(q_hi * widen, 0))
    out.attrs["consts"] = consts
    return out


def held_out_library_efficiency(root: Path, devices) -> dict:
    """Per label device, the vendor BLAS efficiency table fitted without that device's traces
    (AMD: from the other AMD GPU); NVIDIA devices keep the shipped table (NVIDIA entries are 1)."""
    ratios = gemm_ratios(traced_gemms(root))
    return {d: {**LIBRARY_EFFICIENCY, **fit_library_efficiency(ratios, "amd", exclude_device=d)} for d in devices}


def collect(labels: pd.DataFrame, cfg_dir: Path, preds: dict, kinds: dict, lib_eff: dict | None = None):
    """Kernel predictions of every label, one record each (for LabelSet). `lib_eff`: per device, the
    vendor BLAS efficiency table to predict it with (fitted without it); the batched-SGEMM tiles
    likewise come from the other GPUs' traces."""
    recs = []
    for lab in labels.itertuples():
        cfg = cfg_dir / f"{lab.model}.json"
        if not cfg.is_file():
            print(f"skip {lab.device} {lab.model}: no config", file=sys.stderr)
            continue
        dev = get_device(lab.device)
        held = fitted_constants(lab.device).with_library_efficiency((lib_eff or {}).get(lab.device, LIBRARY_EFFICIENCY))
        graph = build_graph(cfg, int(lab.batch), int(lab.seq), lab.mode, fused=bool(lab.fusion), attn="eager")
        tab = predict_kernels_of(graph, dev, preds[lab.device].with_constants(held))
        recs.append({"device": lab.device, "model": lab.model, "mode": lab.mode, "seq": int(lab.seq),
                     "batch": int(lab.batch), "fusion": bool(lab.fusion), "kernel_model": kinds[lab.device],
                     "meas": float(lab.e2e_ms), "measured_fw_ms": float(lab.fw_ms), "measured_bw_ms": float(lab.bw_ms),
                     "pred": tab["pred_ms"].to_numpy(), "floor": tab["floor_ms"].to_numpy(),
                     "count": tab["count"].to_numpy(np.float64), "ood": tab["ood"].to_numpy(),
                     "fw": (tab["phase"] == "fw").to_numpy(), "group": traced_group(tab),
                     "graph_path": getattr(lab, "graph_path", None), "num_layer": int(lab.num_layer),
                     "mem_frac": graph.memory().fraction_of(dev)})
    return recs


def traced_group(tab: pd.DataFrame) -> np.ndarray:
    """Each kernel's op group as the traced graphs count it: a traced matmul node also holds the copies
    of its operands (`graphs.layers.attention_core.attention_core`), so those count as bmm here."""
    operand_copy = tab["name"].str.contains(r"\.[qkv]_copy$").to_numpy()
    return np.where(operand_copy, "bmm", tab["group"].to_numpy())


def group_table(recs, consts: dict) -> pd.DataFrame:
    """Per label and op group: traced per-node total vs our isolated-call sum and in-model composed time."""
    rows = []
    for i, r in enumerate(recs):
        gp = r["graph_path"]
        if not (gp and isinstance(gp, str) and Path(gp).is_file()) or r["fusion"] or r["num_layer"] <= 0:
            continue
        tr = traced_group_totals(pd.read_csv(gp), r["num_layer"])
        p = consts[r["device"]]
        t = in_model_ms(r["pred"], r["floor"], p["scale"], p["gap_ms"], p["cpu_ms"], p.get("raw", False))
        t = t * np.exp(p["b_train"] if r["mode"] == "train" else p["b_inf"])
        agg = {}
        for g, v, iso in zip(r["group"], t * r["count"], r["pred"] * r["count"]):
            a = agg.setdefault(GROUP_MAP[g], [0.0, 0.0, 0.0])
            a[0] += v
            a[1] += iso
        for g, v in tr.items():
            agg.setdefault(GROUP_MAP[g], [0.0, 0.0, 0.0])[2] += v
        for g, (ours, iso, trv) in sorted(agg.items()):
            rows.append({"device": r["device"], "model": r["model"], "mode": r["mode"], "seq": r["seq"],
                         "batch": r["batch"], "group": g, "traced_ms": trv, "ours_ms": ours, "isolated_ms": iso})
    g = pd.DataFrame(rows)
    if len(g):
        g["ape"] = (g["ours_ms"] / g["traced_ms"] - 1).abs()
        g["iso_ape"] = (g["isolated_ms"] / g["traced_ms"] - 1).abs()
    return g


def evaluate(recs, variant: str, tag: str):
    """LODO evaluation of one kernel model: (per-label frame, LabelSet, LODO constants, variant table)."""
    ls = LabelSet(recs)
    res = lodo(ls, variant)
    df = pd.DataFrame([{k: r[k] for k in ("device", "model", "mode", "seq", "batch", "fusion", "kernel_model",
                                          "measured_fw_ms", "measured_bw_ms", "mem_frac")} for r in recs])
    df["measured_ms"] = ls.meas
    df["raw_ms"] = ls.R
    df = pd.concat([df, res], axis=1)
    df["covered"] = (df["measured_ms"] >= df["lo_ms"]) & (df["measured_ms"] <= df["hi_ms"])
    df["ours_ape"] = (df["ours_ms"] / df["measured_ms"] - 1).abs()
    df["raw_ape"] = (df["raw_ms"] / df["measured_ms"] - 1).abs()
    vrows = []
    for v in VARIANTS:
        r = res if v == variant else lodo(ls, v, nested=False)
        ape = (r["ours_ms"] / ls.meas - 1).abs()
        row = {"kernels": tag, "variant": v}
        for d in np.unique(ls.device):
            m = (ls.device == d) & ls.eager
            row[f"{d} MAPE"] = float(ape[m].mean() * 100)
            row[f"{d} max"] = float(ape[m].max() * 100)
        per = [row[f"{d} MAPE"] for d in np.unique(ls.device)]
        row["mean device MAPE"] = float(np.mean(per))
        row["worst device max"] = float(max(row[f"{d} max"] for d in np.unique(ls.device)))
        vrows.append(row)
    return df, ls, res.attrs["consts"], pd.DataFrame(vrows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_argument(ap)
    ap.add_argument("--bundles", default=None, help="DIR/<device_with_underscores>/kernels/ per held-out device")
    add_out_argument(ap, "model_latency")
    ap.add_argument("--variant", default=DEFAULT_VARIANT, choices=sorted(VARIANTS))
    ap.add_argument("--transfer-k", type=int, default=0,
                    help="also adapt each held-out NVIDIA device's bundle with K kernels of its test table "
                         "(picked by `suggest`) before predicting its labels: the few-shot workflow")
    ap.add_argument("--transfer-design", default="label", choices=("kernels", "model", "label"),
                    help="how `suggest` picks the K kernels: for the per-class kernel errors (kernels), for the "
                         "time of the device's labelled models (model), or for each run's own model, one transfer "
                         "per run (label: `suggest --config` as a user runs it)")
    ap.add_argument("--write-calibration", action="store_true",
                    help="write the all-device composition fit to hybridperf/graphs/calibration.py")
    args = ap.parse_args(argv)
    root = Path(args.data)
    root = root / "neusight" if (root / "neusight").is_dir() else root
    cfg_dir = root / "data" / "DLmodel_configs"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bundles = Path(args.bundles) if args.bundles else None
    t0 = time.time()

    labels, ns = load_tables(root)
    labels = labels[labels["variant"].fillna("") == ""].reset_index(drop=True)
    ns_key = {(r.device, r.model, r.mode, int(r.seq), int(r.batch), bool(r.fusion)): float(r.e2e_ms)
              for r in ns.itertuples()}
    devices = sorted(labels["device"].unique())

    runs = {}
    lib_eff = held_out_library_efficiency(root, devices)
    prior = Predictor.prior_only()
    runs["prior"] = collect(labels, cfg_dir, {d: prior for d in devices}, {d: "prior" for d in devices}, lib_eff)
    if bundles is not None:
        pk = {d: bundle_for(bundles, d, root) for d in devices}
        runs["bundle"] = collect(labels, cfg_dir, {d: v[0] for d, v in pk.items()}, {d: v[1] for d, v in pk.items()},
                                 lib_eff)
        if args.transfer_k > 0 and args.transfer_design == "label":
            recs = []
            for i in range(len(labels)):  # one transfer per run, designed for its own model
                lab = labels.iloc[[i]]
                d = lab["device"].iat[0]
                v = transferred(pk[d], d, root, args.transfer_k, label_targets(lab, cfg_dir, d, pk[d][0]))
                recs += collect(lab, cfg_dir, {d: v[0]}, {d: v[1]}, lib_eff)
            runs["transfer"] = recs
        elif args.transfer_k > 0:
            eager = labels[~labels["fusion"].astype(bool)]
            tk = {}
            for d, v in pk.items():
                targets = label_targets(eager[eager["device"] == d], cfg_dir, d, v[0]) \
                    if args.transfer_design == "model" else None
                tk[d] = transferred(v, d, root, args.transfer_k, targets)
            runs["transfer"] = collect(labels, cfg_dir, {d: v[0] for d, v in tk.items()},
                                       {d: v[1] for d, v in tk.items()}, lib_eff)

    results, cal, vtabs = {}, {}, []
    for kind, recs in runs.items():
        df, ls, consts, vt = evaluate(recs, args.variant, kind)
        df["neusight_ms"] = [ns_key.get((r.device, r.model, r.mode, r.seq, r.batch, r.fusion), np.nan)
                             for r in df.itertuples()]
        df["neusight_ape"] = (df["neusight_ms"] / df["measured_ms"] - 1).abs()
        grp = group_table(recs, consts)
        _check_against_compose(recs, consts, df, cfg_dir, kind, lib_eff)
        results[kind] = (df, consts, grp)
        vtabs.append(vt)
        # all-device fit for the shipped constants; interval = quantiles of all held-out residuals
        p_all = fit_constants(ls, ls.eager, args.variant)
        r = np.log(df.loc[ls.eager, "measured_ms"] / df.loc[ls.eager, "ours_ms"]).to_numpy()
        q_lo, q_hi = device_balanced_interval(r, ls.device[ls.eager])
        q = {"q_lo": round(q_lo, 4), "q_hi": round(q_hi, 4)}
        kinds = set(df["kernel_model"])
        ok = all(k.startswith(kind) for k in kinds)
        c = as_calibration(p_all, q)
        c["variant"] = args.variant
        c["n_labels"] = int(ls.eager.sum())
        c["devices"] = sorted(np.unique(ls.device[ls.eager]).tolist())
        cal[kind] = c if ok else None
    vtab = pd.concat(vtabs, ignore_index=True)
    vtab.to_csv(out / "variants.csv", index=False)
    main_kind = "bundle" if "bundle" in results else "prior"

    per_dev = []
    for kind, (df, _, _) in results.items():
        for (dev, fusion), g in df.groupby(["device", "fusion"], sort=True):
            both = g[g["neusight_ms"].notna()]
            o_m, o_x = mape(g["ours_ape"])
            r_m, r_x = mape(g["raw_ape"])
            ob_m, ob_x = mape(both["ours_ape"])
            n_m, n_x = mape(both["neusight_ape"])
            per_dev.append({"kind": kind, "device": dev, "fusion": fusion, "kernel_model": g["kernel_model"].iloc[0],
                            "n": len(g), "ours_mape": o_m, "ours_max": o_x, "uncorrected_mape": r_m,
                            "uncorrected_max": r_x, "n_with_neusight": len(both), "ours_mape_on_ns": ob_m,
                            "ours_max_on_ns": ob_x, "neusight_mape": n_m, "neusight_max": n_x,
                            "coverage90": float(g["covered"].mean())})
    per_dev = pd.DataFrame(per_dev)
    per_dev.to_csv(out / "per_device.csv", index=False)
    pd.concat([df.assign(kind=k) for k, (df, _, _) in results.items()]).to_csv(out / "labels.csv", index=False)
    grp = results[main_kind][2]
    if len(grp):
        grp.to_csv(out / "op_groups.csv", index=False)

    if args.write_calibration:
        for kind in (k for k, c in cal.items() if c is None):
            print(f"not writing calibration[{kind!r}]: mixed kernel models across devices", file=sys.stderr)
        path = write_calibration({kind: {k: v for k, v in c.items() if k not in HOST_KEYS}
                                  for kind, c in cal.items() if c is not None})
        print(f"wrote calibration {sorted(k for k, c in cal.items() if c)} to {path}")

    write_report(out, results, per_dev, vtab, cal, main_kind, bundles, args.variant, time.time() - t0)
    plot_labels(results, out / "model_latency.png")
    print((out / "report.md").read_text())
    return 0


def _check_against_compose(recs, consts, df, cfg_dir, kind, lib_eff, n=3):
    """The fast LabelSet composition must equal compose() with the same constants (first few labels)."""
    if kind != "prior":
        return
    pred = Predictor.prior_only()
    for i, r in enumerate(recs[:n]):
        p = consts[r["device"]]
        cal = {"prior": as_calibration(p)}
        for m in ("inf", "train"):
            cal["prior"][m]["log_bias"] = p["b_" + m]
        held = fitted_constants(r["device"]).with_library_efficiency(lib_eff.get(r["device"], LIBRARY_EFFICIENCY))
        mp = compose(build_graph(cfg_dir / f"{r['model']}.json", r["batch"], r["seq"], r["mode"], fused=r["fusion"],
                                 attn="eager"),
                     get_device(r["device"]), pred.with_constants(held), calibration=cal)
        if p.get("raw"):
            continue
        # as_calibration rounds the constants: agree to rounding
        assert abs(mp.ms / df.loc[i, "ours_ms"] - 1) < 2e-3, (r["model"], mp.ms, df.loc[i, "ours_ms"])


if __name__ == "__main__":
    raise SystemExit(main())
