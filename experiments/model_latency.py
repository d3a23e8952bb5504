"""Whole-model latency on NeuSight's labels, every device held out.

For every label `neusight/label/<GPU>/<model>-<inf|train>-<seq>-<batch>.json` (NVIDIA and AMD):
  * compose the model from predicted kernels, with the kernel model of that device held out of training
    (`--bundles DIR` holds one bundle per held-out device, `DIR/<device_with_underscores>/kernels/`;
    without it, or when a device's bundle is missing, the analytical prior alone is used and reported);
  * apply the per-mode composition correction fitted on the OTHER devices' labels (leave-one-device-out)
    and the 90% interval from the other devices' residuals;
  * compare with the measured e2e latency and with NeuSight's own prediction
    (`results/prediction/<GPU>/neusight/<run>.json`);
  * compare per-op-group totals with the per-node measurements of the traced layer CSV.
`-fusion` labels are reported separately (eager enumeration does not model fused kernels).

Writes experiments/out/model_latency/{report.md, labels.csv, per_device.csv, op_groups.csv}.
`--write-calibration` also writes the all-device fit to hybridperf/graphs/calibration.py (shipped).

    python experiments/model_latency.py --data ../shared/datasets [--bundles DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hybridperf.devices import get_device  # noqa: E402
from hybridperf.graphs import build_graph, compose  # noqa: E402
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


def bundle_for(bundles: Path | None, device: str):
    if bundles is None:
        return Predictor.prior_only(), "prior"
    p = bundles / device.replace(" ", "_") / "kernels"
    if (p / "manifest.json").is_file():
        return Predictor.load(p), "bundle"
    return Predictor.prior_only(), "prior (bundle missing)"


def robust_bias(sub: pd.DataFrame) -> float:
    """Composition log-bias: the median over devices of each device's median log(measured/composed),
    so that one device with many labels (or a kernel model biased on one vendor) does not dominate."""
    return float(np.median(sub.groupby("device")["log_ratio"].median()))


def mape(a):
    a = np.abs(np.asarray(a, dtype=float))
    a = a[np.isfinite(a)]
    return (float(np.mean(a)) * 100, float(np.max(a)) * 100) if len(a) else (np.nan, np.nan)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "datasets"))
    ap.add_argument("--bundles", default=None, help="DIR/<device_with_underscores>/kernels/ per held-out device")
    ap.add_argument("--out", default=str(REPO / "experiments" / "out" / "model_latency"))
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

    rows, group_rows = [], []
    pred_cache: dict = {}
    for lab in labels.itertuples():
        cfg = cfg_dir / f"{lab.model}.json"
        if not cfg.is_file():
            print(f"skip {lab.device} {lab.model}: no config", file=sys.stderr)
            continue
        if lab.device not in pred_cache:
            pred_cache[lab.device] = bundle_for(bundles, lab.device)
        predictor, kind = pred_cache[lab.device]
        dev = get_device(lab.device)
        mp = compose(build_graph(cfg, int(lab.batch), int(lab.seq), lab.mode), dev, predictor, correction=False)
        rows.append({"device": lab.device, "model": lab.model, "mode": lab.mode, "seq": int(lab.seq),
                     "batch": int(lab.batch), "fusion": bool(lab.fusion), "kernel_model": kind,
                     "measured_ms": float(lab.e2e_ms), "measured_fw_ms": float(lab.fw_ms),
                     "measured_bw_ms": float(lab.bw_ms), "raw_ms": mp.e2e_ms, "raw_fw_ms": mp.fw_ms,
                     "raw_bw_ms": mp.bw_ms, "kernel_lo": mp.lo_ms / mp.e2e_ms, "kernel_hi": mp.hi_ms / mp.e2e_ms,
                     "neusight_ms": ns_key.get((lab.device, lab.model, lab.mode, int(lab.seq), int(lab.batch),
                                                bool(lab.fusion)), np.nan)})
        gp = getattr(lab, "graph_path", None)
        if gp and isinstance(gp, str) and Path(gp).is_file() and not lab.fusion and int(lab.num_layer) > 0:
            tr = traced_group_totals(pd.read_csv(gp), int(lab.num_layer))
            ours = mp.kernels.groupby("group")["total_ms"].sum().to_dict()
            agg_t, agg_o = {}, {}
            for g, v in tr.items():
                agg_t[GROUP_MAP[g]] = agg_t.get(GROUP_MAP[g], 0.0) + v
            for g, v in ours.items():
                agg_o[GROUP_MAP[g]] = agg_o.get(GROUP_MAP[g], 0.0) + v
            for g in sorted(set(agg_t) | set(agg_o)):
                group_rows.append({"device": lab.device, "model": lab.model, "mode": lab.mode, "seq": int(lab.seq),
                                   "batch": int(lab.batch), "group": g, "traced_ms": agg_t.get(g, 0.0),
                                   "ours_ms": agg_o.get(g, 0.0)})
    df = pd.DataFrame(rows)
    df["log_ratio"] = np.log(df["measured_ms"] / df["raw_ms"])

    # leave-one-device-out composition correction (per mode) and interval, fitted on eager labels only
    eager = ~df["fusion"]
    df["log_bias"] = 0.0
    df["q_lo"] = np.nan
    df["q_hi"] = np.nan
    for dev in df["device"].unique():
        for mode in ("inf", "train"):
            tr = eager & (df["device"] != dev) & (df["mode"] == mode)
            te = (df["device"] == dev) & (df["mode"] == mode)
            if not te.any():
                continue
            if tr.sum() < 3:  # too few other-device labels of this mode: fall back to all modes
                tr = eager & (df["device"] != dev)
            b = robust_bias(df[tr])
            # residuals of the other devices, each corrected with its own leave-one-out bias
            res = []
            for d2 in df.loc[tr, "device"].unique():
                tr2 = tr & (df["device"] != d2)
                b2 = robust_bias(df[tr2]) if tr2.sum() >= 3 else b
                res.extend(df.loc[tr & (df["device"] == d2), "log_ratio"] - b2)
            res = np.asarray(res)
            df.loc[te, "log_bias"] = b
            df.loc[te, "q_lo"] = min(float(np.quantile(res, 0.05)), 0.0)
            df.loc[te, "q_hi"] = max(float(np.quantile(res, 0.95)), 0.0)
    df["ours_ms"] = df["raw_ms"] * np.exp(df["log_bias"])
    df["lo_ms"] = df["ours_ms"] * np.exp(df["q_lo"])
    df["hi_ms"] = df["ours_ms"] * np.exp(df["q_hi"])
    df["covered"] = (df["measured_ms"] >= df["lo_ms"]) & (df["measured_ms"] <= df["hi_ms"])
    df["ours_ape"] = (df["ours_ms"] / df["measured_ms"] - 1).abs()
    df["raw_ape"] = (df["raw_ms"] / df["measured_ms"] - 1).abs()
    df["neusight_ape"] = (df["neusight_ms"] / df["measured_ms"] - 1).abs()
    df = df.sort_values(["fusion", "device", "model", "mode", "seq", "batch"]).reset_index(drop=True)
    df.to_csv(out / "labels.csv", index=False)

    per_dev = []
    for (dev, fusion), g in df.groupby(["device", "fusion"], sort=True):
        both = g[g["neusight_ms"].notna()]
        o_m, o_x = mape(g["ours_ape"])
        r_m, r_x = mape(g["raw_ape"])
        ob_m, ob_x = mape(both["ours_ape"])
        n_m, n_x = mape(both["neusight_ape"])
        per_dev.append({"device": dev, "fusion": fusion, "kernel_model": g["kernel_model"].iloc[0], "n": len(g),
                        "ours_mape": o_m, "ours_max": o_x, "uncorrected_mape": r_m, "uncorrected_max": r_x,
                        "n_with_neusight": len(both), "ours_mape_on_ns": ob_m, "ours_max_on_ns": ob_x,
                        "neusight_mape": n_m, "neusight_max": n_x, "coverage90": float(g["covered"].mean())})
    per_dev = pd.DataFrame(per_dev)
    per_dev.to_csv(out / "per_device.csv", index=False)
    grp = pd.DataFrame(group_rows)
    if len(grp):
        grp["ape"] = (grp["ours_ms"] / grp["traced_ms"] - 1).abs()
        grp.to_csv(out / "op_groups.csv", index=False)

    # all-device fit for the shipped calibration (no held-out claim attached to it)
    cal = {}
    for mode in ("inf", "train"):
        sel = eager & (df["mode"] == mode)
        if sel.sum():
            b = robust_bias(df[sel])
            cal[mode] = {"log_bias": round(b, 4),
                         "q_lo": round(float(df.loc[df["mode"] == mode, "q_lo"].median()), 4),
                         "q_hi": round(float(df.loc[df["mode"] == mode, "q_hi"].median()), 4),
                         "n_labels": int(sel.sum())}
    kinds = set(df["kernel_model"])
    kind = "bundle" if kinds == {"bundle"} else ("prior" if all(k.startswith("prior") for k in kinds) else None)
    if args.write_calibration:
        if kind is None:
            print("not writing calibration: mixed kernel models across devices", file=sys.stderr)
        else:
            from hybridperf.graphs import calibration as calmod

            current = dict(calmod.CALIBRATION)
            current[kind] = cal
            path = Path(calmod.__file__)
            text = path.read_text()
            head = text[: text.index("CALIBRATION: dict")]
            path.write_text(head + "CALIBRATION: dict = " + json.dumps(current, indent=4) + "\n")
            print(f"wrote calibration[{kind!r}] to {path}")

    write_report(out, df, per_dev, grp, cal, kind, bundles, time.time() - t0)
    print((out / "report.md").read_text())
    return 0


def _fmt(x, nd=1):
    return "-" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}f}"


def write_report(out, df, per_dev, grp, cal, kind, bundles, secs):
    L = ["# Whole-model latency on NeuSight's labels (every device held out)", ""]
    L.append(f"Kernel model: **{', '.join(sorted(set(df['kernel_model'])))}**"
             + ("" if bundles else " (no `--bundles` given: the analytical prior alone, no learned residual)") + ".")
    L.append("Composition correction: per-mode scalar in log space, fitted on the other devices' eager labels "
             "(leave-one-device-out); 90% interval from the other devices' residual quantiles. "
             f"{len(df)} labels, {secs:.1f} s.")
    L += ["", "## Per device (eager labels)", "",
          "| device | kernel model | n | ours MAPE % | ours max % | uncorrected MAPE % | n with NeuSight | "
          "ours MAPE % (same labels) | ours max % (same) | NeuSight MAPE % | NeuSight max % | 90% coverage |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in per_dev[~per_dev["fusion"]].itertuples():
        L.append(f"| {r.device} | {r.kernel_model} | {r.n} | {_fmt(r.ours_mape)} | {_fmt(r.ours_max)} | "
                 f"{_fmt(r.uncorrected_mape)} | {r.n_with_neusight} | {_fmt(r.ours_mape_on_ns)} | {_fmt(r.ours_max_on_ns)} | "
                 f"{_fmt(r.neusight_mape)} | {_fmt(r.neusight_max)} | {_fmt(r.coverage90 * 100, 0)}% |")
    e = df[~df["fusion"]]
    both = e[e["neusight_ms"].notna()]
    om, ox = mape(e["ours_ape"])
    bm, bx = mape(both["ours_ape"])
    nm, nx = mape(both["neusight_ape"])
    L += ["", f"All eager labels: ours MAPE {_fmt(om)}% (max {_fmt(ox)}%); on the {len(both)} labels NeuSight "
          f"predicted: ours {_fmt(bm)}% (max {_fmt(bx)}%) vs NeuSight {_fmt(nm)}% (max {_fmt(nx)}%). "
          f"Interval coverage {_fmt(e['covered'].mean() * 100, 0)}% (target 90%).", ""]
    for mode in ("inf", "train"):
        s = e[e["mode"] == mode]
        if len(s):
            a, b = mape(s["ours_ape"])
            L.append(f"- {mode}: {len(s)} labels, MAPE {_fmt(a)}%, max {_fmt(b)}%")
    f = df[df["fusion"]]
    if len(f):
        a, b = mape(f["ours_ape"])
        c, d = mape(f["neusight_ape"])
        L += ["", f"`-fusion` labels (reported separately; eager enumeration does not model fused kernels): "
              f"{len(f)} labels, ours MAPE {_fmt(a)}% (max {_fmt(b)}%), NeuSight {_fmt(c)}% (max {_fmt(d)}%)."]
    if len(grp):
        L += ["", "## Per-op-group error vs the per-node measurements of the traced layer (uncorrected kernels)", "",
              "Traced totals = outside-layer nodes + layer-0 nodes x num_layer, from the label CSVs.", "",
              "| group | n | MAPE % | median ours/traced |", "|---|---|---|---|"]
        for g, s in grp.groupby("group"):
            s = s[s["traced_ms"] > 0]
            L.append(f"| {g} | {len(s)} | {_fmt(s['ape'].mean() * 100)} | "
                     f"{_fmt(float(np.median(s['ours_ms'] / s['traced_ms'])), 2)} |")
    L += ["", "## Per label", "", "| device | run | measured ms | ours ms | ours err % | NeuSight ms | NeuSight err % | "
          "in 90% interval |", "|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        run = f"{r.model}-{r.mode}-{r.seq}-{r.batch}" + ("-fusion" if r.fusion else "")
        ns_err = (r.neusight_ms / r.measured_ms - 1) * 100 if np.isfinite(r.neusight_ms) else np.nan
        L.append(f"| {r.device} | {run} | {r.measured_ms:.1f} | {r.ours_ms:.1f} | {(r.ours_ms / r.measured_ms - 1) * 100:+.1f} | "
                 f"{_fmt(r.neusight_ms)} | {'-' if not np.isfinite(ns_err) else f'{ns_err:+.1f}'} | {'yes' if r.covered else 'no'} |")
    if cal:
        L += ["", f"All-device fit (shipped as calibration[{kind!r}] with --write-calibration): `{json.dumps(cal)}`"]
    (out / "report.md").write_text("\n".join(L) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
