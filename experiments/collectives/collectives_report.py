"""Collective latency on a held-out Vidur system: fit on one system, predict another.

Splits (every accuracy number below comes from a system excluded from fitting):
    a100_dgx                         -> a100_pairwise_nvlink
    a100_pairwise_nvlink             -> a100_dgx
    a100_dgx + a100_pairwise_nvlink  -> a40_pairwise_nvlink
For each split: fit the prior's constants on the training system(s), learn the residual
log(measured / prior) there, and report MAPE per (system, collective, gpus, gpus_per_node) on the
held-out system for the default prior, the fitted prior, and prior + residual. The residual ships only
if it beats the fitted prior on the held-out systems. The 90% interval comes from the held-out
log-residuals (split-conformal style), separately for send/recv and for the other collectives.

Writes to --out: mape.csv, mape.md, heldout_predictions.csv, pred_vs_measured.png; with --export
(default) also exported_models/collectives/{manifest.json[, residual.onnx]}.

    python -m experiments.collectives.collectives_report [--data ../shared/datasets] [--out experiments/out/collectives]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import REPO as ROOT

from hybridperf.datasets.vidur_network import data_digest, load_vidur_network  # noqa: E402
from hybridperf.priors.collectives import DEFAULT_CONSTANTS  # noqa: E402
from hybridperf.training.collectives import (  # noqa: E402
    GROUP_KEYS,
    fit_constants,
    fit_residual,
    interval_from_residuals,
    node_for,
    residual_xy,
    row_weights,
    write_bundle,
)

SPLITS = [
    (["a100_dgx"], ["a100_pairwise_nvlink"]),
    (["a100_pairwise_nvlink"], ["a100_dgx"]),
    (["a100_dgx", "a100_pairwise_nvlink"], ["a40_pairwise_nvlink"]),
]
MIN_BYTES, MAX_BYTES = 2 * 1024, 512 * 1024 * 1024
CAVEATS = """
## Caveats (read before quoting these numbers)

- Inter-node rows are not a clean spec-only test: Vidur does not document its clusters' networks, so
  the catalog's inter-node numbers for the three Vidur systems were read off their 2-node send/recv
  profiles (a100_dgx: ~8 GB/s per GPU flow, ~25 GB/s per node, far below a DGX's 8x HDR;
  pairwise systems: ~25 Gb/s Ethernet class). Intra-node rows use spec-sheet numbers only.
- a40_pairwise_nvlink 2 GPUs/node send/recv runs at ~4 GB/s, 14x below the NVLink bridge (56 GB/s)
  and below PCIe P2P: the profiled pair evidently did not use the bridge (nor P2P). No spec-based
  prior can see that; it dominates the a40 error and the send/recv interval.
- Whether the A40 pair used its bridge: the public Vidur sources describe the node only as 8 A40s,
  "pairwise NVLink"; the profiling runner gives each process one GPU (CUDA_VISIBLE_DEVICES) and sets
  NCCL_IGNORE_DISABLED_P2P=1, which fits hosts where P2P may be unavailable but does not say the A40
  pair lacked it. The catalog therefore keeps the bridge; the group stays the largest error.
- Small messages measure a host floor, not NCCL: medians are bimodal (~25-35 or ~60 us for
  all-reduce) and the send/recv floor differs per host (~17, ~10, ~4 us), so no transferable
  constant can fit all three hosts.
- NCCL's pick: the prior chooses (algorithm, protocol) with NCCL's own tuner model (tuning.cc
  latency tables and protocol factors, on line rates) and charges the achieved cost. This mechanism,
  and the a100_dgx NIC line rate the tuner sees (HDR 25 GB/s, the DGX-A100 spec), were added after
  looking at the held-out multi-node curves (the mid-size bump, the dip near 500 KB); no constant was
  fitted to held-out rows. It moves the aggregate by less than 0.1 point: better on multi-node
  all-reduce, worse on a100_dgx 8 GPUs (NCCL runs LL128 there up to ~30 MB, and a training system
  without an LL128 regime cannot tell LL128's real rate, which the a100_dgx curve suggests is lower).
- Steps the prior cannot see: a100_dgx 4 GPUs / 2 per node runs at the bus bandwidth of one GPU per
  node (~5.9 GB/s) except for an 8-16 MB block at ~10.5, while 8 / 4 reaches ~21; 16 / 8 runs at
  ~7.5 GB/s up to 12 MB, then ~15-17.5 in size blocks. The jumps are aligned to size blocks (likely
  separate profiling runs or channel setups); the catalog describes no NIC sharing, and none was
  added from the held-out numbers.
- send_recv inter-node on a100_pairwise_nvlink has an S-shaped curve (fast up to ~2 MB, then
  ~2.3 GB/s), consistent with the sender kernel finishing once data is staged; the prior is a line.
- Design choices (tying the collective network efficiency to the point-to-point one when the training
  system has no multi-node collective; per-stratum intervals; NCCL's tuner as the chooser) were made
  while looking at these held-out numbers; treat them as a development estimate, not a final blind
  test.
"""


def stratum(collective: str) -> str:
    return "send_recv" if collective == "send_recv" else "collective"


def ape(pred, meas) -> np.ndarray:
    return np.abs(np.asarray(pred) / np.asarray(meas) - 1.0) * 100


def run_split(df: pd.DataFrame, train: list, test: list, residual_kind: str, log) -> pd.DataFrame:
    tr = df[df.system.isin(train)].reset_index(drop=True)
    te = df[df.system.isin(test)].reset_index(drop=True)
    t0 = time.time()
    fit = fit_constants(tr)
    log(f"  fitted {fit.params} on {train}: loss {fit.loss_before:.3f} -> {fit.loss_after:.3f} "
        f"({time.time() - t0:.1f}s)")
    log("  constants: " + ", ".join(f"{k}={getattr(fit.constants, k):.3g}" for k in fit.params))
    X, y, _ = residual_xy(tr, fit.constants)
    est = fit_residual(X, y, row_weights(tr), residual_kind)
    _, _, p_default = residual_xy(te, DEFAULT_CONSTANTS)
    Xt, _, p_fit = residual_xy(te, fit.constants)
    p_res = p_fit * np.exp(est.predict(Xt))
    out = te.copy()
    out["split"] = " + ".join(train) + " -> " + " + ".join(test)
    out["pred_default_ms"] = p_default
    out["pred_prior_ms"] = p_fit
    out["pred_residual_ms"] = p_res
    return out


def mape_table(pred: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (split, system, coll, p, g), grp in pred.groupby(["split", *GROUP_KEYS], sort=False):
        big = grp.nbytes >= 1 << 20
        rows.append({
            "split": split, "system": system, "collective": coll, "gpus": p, "gpus_per_node": g,
            "rows": len(grp),
            "mape_default_prior": ape(grp.pred_default_ms, grp.latency_ms).mean(),
            "mape_prior": ape(grp.pred_prior_ms, grp.latency_ms).mean(),
            "mape_prior_residual": ape(grp.pred_residual_ms, grp.latency_ms).mean(),
            "mape_prior_ge_1MiB": ape(grp.pred_prior_ms[big], grp.latency_ms[big]).mean(),
            "median_ape_prior": float(np.median(ape(grp.pred_prior_ms, grp.latency_ms))),
        })
    return pd.DataFrame(rows)


def conformal(pred: pd.DataFrame, col: str) -> tuple[dict, pd.DataFrame]:
    """Per-stratum 90% quantiles of held-out log(measured / predicted), every test group weighted
    equally; plus leave-one-split-out coverage (quantiles from the other splits, tested on this one)."""
    r = np.log(pred.latency_ms / pred[col]).to_numpy()
    keys = ["split", *GROUP_KEYS]
    w = 1.0 / pred.groupby(keys, sort=False)["nbytes"].transform("size").to_numpy()
    strata = pred.collective.map(stratum).to_numpy()
    out = {}
    for s in ("collective", "send_recv"):
        m = strata == s
        out[s] = interval_from_residuals(r[m], w[m])
    out["default"] = interval_from_residuals(r, w)
    cov = []
    for split in pred.split.unique():
        hold = (pred.split == split).to_numpy()
        for s in ("collective", "send_recv"):
            cal, tst = ~hold & (strata == s), hold & (strata == s)
            if not cal.any() or not tst.any():
                continue
            q = interval_from_residuals(r[cal], w[cal])
            inside = (r[tst] >= q["q_lo"]) & (r[tst] <= q["q_hi"])
            cov.append({"split": split, "stratum": s, "q_lo": q["q_lo"], "q_hi": q["q_hi"],
                        "coverage": float(np.average(inside, weights=w[tst]))})
    return out, pd.DataFrame(cov)


def plot(pred: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(pred.groupby(["split", *GROUP_KEYS], sort=False))
    ncol = 4
    nrow = int(np.ceil(len(groups) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.6 * nrow), squeeze=False)
    for ax, ((split, system, coll, p, g), grp) in zip(axes.ravel(), groups):
        grp = grp.sort_values("nbytes")
        ax.loglog(grp.nbytes, grp.latency_ms, ".", ms=2, color="0.35", label="measured (median)")
        ax.loglog(grp.nbytes, grp.pred_prior_ms, "-", color="tab:red", lw=1.4, label="prior (fitted elsewhere)")
        ax.loglog(grp.nbytes, grp.pred_residual_ms, "--", color="tab:blue", lw=1.0, label="prior + residual")
        ax.loglog(grp.nbytes, grp.pred_default_ms, ":", color="tab:green", lw=1.0, label="default prior")
        m = ape(grp.pred_prior_ms, grp.latency_ms).mean()
        ax.set_title(f"{system}\n{coll} {p} GPUs, {g}/node  MAPE {m:.0f}%", fontsize=8)
        ax.grid(True, which="both", alpha=0.25)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("bytes per rank", fontsize=7)
        ax.set_ylabel("ms", fontsize=7)
    for ax in axes.ravel()[len(groups):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=6)
    fig.suptitle("Collective latency on held-out Vidur systems: predicted vs measured", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fmt_md(t: pd.DataFrame) -> str:
    cols = ["system", "collective", "gpus", "gpus_per_node", "rows", "mape_default_prior", "mape_prior",
            "mape_prior_residual", "mape_prior_ge_1MiB", "median_ape_prior"]
    return t[cols].to_markdown(index=False, floatfmt=".1f") + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets"), help="shared datasets folder")
    ap.add_argument("--out", default=str(ROOT / "experiments" / "out" / "collectives"))
    ap.add_argument("--residual", choices=("gbr", "ridge"), default="gbr", help="residual model family")
    ap.add_argument("--export", dest="export", action="store_true", default=True,
                    help="write exported_models/collectives (default)")
    ap.add_argument("--no-export", dest="export", action="store_false")
    ap.add_argument("--bundle-dir", default=str(ROOT / "exported_models" / "collectives"))
    args = ap.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log_lines: list[str] = []

    def log(s: str) -> None:
        print(s, flush=True)
        log_lines.append(s)

    df = load_vidur_network(args.data)
    df = df[(df.nbytes >= MIN_BYTES) & (df.nbytes <= MAX_BYTES)].reset_index(drop=True)
    log(f"loaded {len(df)} rows from {sorted(df.system.unique())}; dropped {len(df.attrs.get('dropped', []))} bad rows")

    preds = []
    for train, test in SPLITS:
        log(f"split {train} -> {test}")
        preds.append(run_split(df, train, test, args.residual, log))
    pred = pd.concat(preds, ignore_index=True)
    pred.to_csv(out / "heldout_predictions.csv", index=False)
    table = mape_table(pred)
    table.to_csv(out / "mape.csv", index=False)

    # aggregate: each held-out group weighs the same
    agg = table[["mape_default_prior", "mape_prior", "mape_prior_residual", "mape_prior_ge_1MiB"]].mean()
    by_split = table.groupby("split", sort=False)[["mape_prior", "mape_prior_residual"]].mean()
    residual_wins = bool(agg["mape_prior_residual"] < agg["mape_prior"]) and bool(
        (by_split["mape_prior_residual"] <= by_split["mape_prior"]).all())
    chosen = "pred_residual_ms" if residual_wins else "pred_prior_ms"
    strata, coverage = conformal(pred, chosen)
    coverage.to_csv(out / "interval_coverage.csv", index=False)
    plot(pred, out / "pred_vs_measured.png")

    # the shipped constants: refit on every system (the procedure above measured how well it transfers)
    fit_all = fit_constants(df)
    ship_est = None
    if residual_wins:
        X, y, _ = residual_xy(df, fit_all.constants)
        ship_est = fit_residual(X, y, row_weights(df), args.residual)
    trained_range = {
        "topologies": sorted({node_for(s).intra_topology for s in df.system.unique()}),
        "max_gpus": int(df.gpus.max()), "min_bytes": int(df.nbytes.min()), "max_bytes": int(df.nbytes.max()),
    }
    interval = dict(strata["default"])
    interval.update({"source": "held-out (leave-one-system-out) log(measured/predicted), group-balanced",
                     "strata": strata, "training_range": trained_range, "ood_widen": 1.5})
    metrics = {
        "heldout_group_mean_mape": {k: round(float(v), 2) for k, v in agg.items()},
        "heldout_by_split": {s: {k: round(float(v), 2) for k, v in r.items()} for s, r in by_split.iterrows()},
        "residual_shipped": residual_wins,
    }
    notes = ("Residual shipped: it beat the fitted prior on every held-out split." if residual_wins else
             "No residual shipped: on held-out systems prior+residual did not beat the fitted prior "
             f"({agg['mape_prior_residual']:.1f}% vs {agg['mape_prior']:.1f}% group-mean MAPE).")
    if args.export:
        write_bundle(args.bundle_dir, fit_all.constants, interval, ship_est, data_digest=data_digest(df),
                     trained_on=sorted(df.system.unique()), metrics=metrics, notes=notes)
        log(f"wrote bundle to {args.bundle_dir}")

    md = ["# Collectives on held-out Vidur systems\n",
          "Each block: constants (and the residual) fitted on the training system(s) only; MAPE (%) on the",
          "held-out system's profile rows (2 KiB - 512 MiB, median latency as truth).\n"]
    for split, t in table.groupby("split", sort=False):
        md.append(f"## {split}\n")
        md.append(fmt_md(t))
    md.append("\n## Aggregate (mean over held-out groups)\n")
    md.append("\n".join(f"- {k}: {v:.1f}%" for k, v in agg.items()) + "\n")
    md.append(f"\n**{notes}**\n")
    md.append(CAVEATS)
    md.append("\n## 90% interval (held-out log-residual quantiles)\n")
    for s, q in strata.items():
        md.append(f"- {s}: x[{np.exp(q['q_lo']):.2f}, {np.exp(q['q_hi']):.2f}] of the point prediction")
    md.append("\nLeave-one-split-out coverage of that recipe:\n")
    md.append(coverage.to_markdown(index=False))
    md.append("\n\n## Shipped constants (fitted on all three systems)\n")
    md.append("```\n" + json.dumps({k: round(v, 4) for k, v in fit_all.constants.to_dict().items()}, indent=1) + "\n```\n")
    md.append("\n## Log\n```\n" + "\n".join(log_lines) + "\n```\n")
    (out / "mape.md").write_text("\n".join(md))
    print(fmt_md(table))
    print(f"aggregate: {agg.round(1).to_dict()}")
    print(notes)
    print(f"report: {out / 'mape.md'}  plot: {out / 'pred_vs_measured.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
