"""Collective latency on systems never fitted: leave-one-system-out over every system with NCCL
measurements in ../shared (Vidur: a100_dgx, a100_pairwise_nvlink, a40_pairwise_nvlink, timed per call;
aiconfigurator: a100_sxm, l40s, b200_sxm, nccl-tests' back-to-back loop = graph timing).

For each held-out system: fit the prior's constants on the other five, learn the residual
log(measured / prior) there, predict the held-out system. Reports MAPE per (system, collective, GPUs,
GPUs per node) from 4 KiB up for the fitted prior alone and for prior x residual, and the coverage of
the 90% interval: its quantiles come from the held-out log-residuals of the *other* systems' folds
(cross-conformal; the held-out system's own errors never set its interval). Also the engines' custom
all-reduce (vLLM/SGLang/TensorRT-LLM graph rows): its two constants fit on the other aiconfigurator
systems. With --export, refits on every system and writes exported_models/collectives/.

    python -m experiments.collectives.collectives_nvswitch [--data ../shared/datasets] [--export]

Also scores the prior fitted in-sample (on all six systems, and on each system alone): how far its
form reaches. Writes experiments/results/collectives_nvswitch.{md,png}.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import DATA, REPO, RESULTS
from hybridperf.datasets.aiconfigurator_comm import load_aiconfigurator_comm
from hybridperf.datasets.vidur_network import data_digest, load_vidur_network
from hybridperf.priors.collectives import DEFAULT_CONSTANTS, custom_all_reduce_ms
from hybridperf.residual_models.collectives import interval_stratum
from hybridperf.transfer.collectives import correction, log_ratios
from hybridperf.training.collectives import (
    GROUP_KEYS,
    fit_constants,
    fit_custom_all_reduce,
    fit_residual,
    interval_from_residuals,
    node_for,
    residual_xy,
    row_weights,
    write_bundle,
)

AIC_SYSTEMS = ["a100_sxm", "l40s", "b200_sxm"]
MIN_BYTES = 4096
MIN_STRATUM_SYSTEMS = 2  # a fabric stratum needs errors from two systems; else the coarser stratum
CAVEATS = """## Reading these numbers

- Six systems, each unlike the others: a system held out is predicted from five that differ in GPU
  generation, fabric, NCCL version and timing method. The fitted prior generalises better than any
  residual tried (gradient boosting, ridge): a learned correction fitted on five such systems moves the
  sixth the wrong way, so the shipped bundle carries fitted constants and intervals, no residual.
- l40s: aiconfigurator's 8x L40S box reaches 20 GB/s bus bandwidth with 2 GPUs but 5 with 4 and 1.5
  with 8 (no GPU peer-to-peer; NCCL stages through host memory). Nothing on a spec sheet predicts
  that; its 4- and 8-GPU cells fail and its interval stratum (non-NVSwitch) under-covers.
- a40_pairwise_nvlink 2 GPUs in one node: Vidur's pair ran send/recv at ~4 GB/s, 14x below the
  NVLink bridge, evidently without it.
- a100_dgx across nodes: Vidur's cluster network is undocumented (the catalog's numbers were read off
  its 2-node send/recv profile); no other system has multi-node all-reduce rows, so these cells are a
  spec-and-defaults test only.
- b200_sxm all-reduce: NCCL's tuner picks NVLS (NVLink SHARP) for large messages on a Blackwell
  NVSwitch. An NVLS all-reduce is charged the switch's traffic, n (1 + 1/g) per direction, at the links'
  fitted rate x NCCL's nvlsEfficiency x nvls_gain after its own latency (nvls_lat_gain x 25 us), the
  ring's time where that is faster (few ranks); held out, with no NVLS rows in the fit, both gains are 1.
  B200's 8-rank all-reduce takes about 97 us + n / 434 GB/s from 32 to 512 MB, slower than its ring
  below ~100 MB. No Hopper NVLS rows are in ../shared; the form agrees with public H100 reports (ring
  speed on 2-4 ranks, 420-480 GB/s bus bandwidth on 5-8: NCCL issue 1455), which no fit here saw.
- Intervals: per held-out system, the 90% band is the other systems' held-out log-errors of the same
  stratum (send/recv or the rest, NVSwitch or other fabric; the coarser one where fewer than two other
  systems fall in it), never its own.
"""
CELL = ["system", "collective", "gpus", "gpus_per_node"]


def load(data: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    v = load_vidur_network(data)
    v["timing"], v["impl"] = "call", "nccl"
    a = load_aiconfigurator_comm(data, AIC_SYSTEMS)
    df = pd.concat([v, a], ignore_index=True)
    custom = load_aiconfigurator_comm(data, AIC_SYSTEMS, custom=True)
    return df[df["nbytes"] >= MIN_BYTES].reset_index(drop=True), custom[custom["nbytes"] >= MIN_BYTES].reset_index(drop=True)


def fit(train: pd.DataFrame, maxiter: int, kind: str):
    c = fit_constants(train, DEFAULT_CONSTANTS, maxiter=maxiter, polish=True).constants
    X, y, _ = residual_xy(train, c)
    return c, fit_residual(X, y, row_weights(train), kind=kind)


def loso(df: pd.DataFrame, maxiter: int, kind: str) -> pd.DataFrame:
    out = []
    for held in sorted(df["system"].unique()):
        train, test = df[df["system"] != held], df[df["system"] == held].copy()
        c, est = fit(train, maxiter, kind)
        X, _, prior = residual_xy(test, c)
        test["prior_ms"] = prior
        test["hybrid_ms"] = prior * np.exp(est.predict(X))
        out.append(test)
        print(f"held out {held}: done", flush=True)
    return pd.concat(out, ignore_index=True)


def in_sample(df: pd.DataFrame, maxiter: int) -> pd.DataFrame:
    """How far the prior's form reaches: each row predicted with constants fitted on every system (`all_ms`)
    and on its own system alone (`own_ms`), both in-sample and by the fit's own loss (robust log error, not
    per-cell MAPE). A cell these miss by far more than 10% is the form's, not the transfer between systems'."""
    out = df.copy()
    out["all_ms"] = residual_xy(df, fit_constants(df, DEFAULT_CONSTANTS, maxiter=maxiter).constants)[2]
    for s in sorted(df["system"].unique()):
        mine = df["system"] == s
        c = fit_constants(df[mine], DEFAULT_CONSTANTS, maxiter=maxiter).constants
        out.loc[mine, "own_ms"] = residual_xy(df[mine], c)[2]
    return out


def cell_mape(df: pd.DataFrame, col: str) -> pd.Series:
    """MAPE % of the predictions in `col` per cell (CELL) of `df`."""
    return df.groupby(CELL).apply(lambda g: np.mean(np.abs(g[col] / g["latency_ms"] - 1)) * 100)


def ceiling_table(pred: pd.DataFrame, fits: pd.DataFrame) -> pd.DataFrame:
    """Cell MAPE held out (`prior_ms`) beside the in-sample fits of `in_sample`."""
    both = pred[CELL + ["latency_ms", "prior_ms"]].join(fits[["all_ms", "own_ms"]], how="inner")
    return pd.DataFrame({"held_out": cell_mape(both, "prior_ms"), "fit_on_all_six": cell_mape(both, "all_ms"),
                         "fit_on_own_system": cell_mape(both, "own_ms")}).reset_index()


#: measured sizes per cell the few-shot transfer is scored with
FEW_SHOT_SIZES = (3, 4, 5)


def few_shot(pred: pd.DataFrame, final: str) -> pd.DataFrame:
    """`predict-collective --calibration` on the held-out systems: in each cell, k sizes spread evenly over its
    sorted sizes, its smallest and largest included, are taken as measured (`transfer.collectives`), and the
    cell's other rows, all between measured sizes, are scored corrected (interval included) by the log ratio
    interpolated between them: cell mean MAPE, cells within 10%, the mean of the cells' coverages; beside it, one
    offset per cell (the mean log ratio of the same sizes) for comparison."""
    rows = []
    for k in FEW_SHOT_SIZES:
        cells, cover, flat = [], [], []
        for _, g in pred.groupby(CELL):
            sizes = np.sort(g["nbytes"].unique())
            chosen = sizes[np.unique(np.round(np.linspace(0, len(sizes) - 1, k)).astype(int))]
            cal, rest = g[g["nbytes"].isin(chosen)], g[~g["nbytes"].isin(chosen)]
            if rest.empty:
                continue
            sizes_k, ratios = log_ratios(cal["nbytes"], cal["latency_ms"], cal[final])
            f = correction(rest["nbytes"], sizes_k, ratios)
            m = rest["latency_ms"].to_numpy()
            cells.append(np.mean(np.abs(rest[final].to_numpy() * f / m - 1)) * 100)
            flat.append(np.mean(np.abs(rest[final].to_numpy() * np.exp(ratios.mean()) / m - 1)) * 100)
            cover.append(np.mean((rest["lo_ms"].to_numpy() * f <= m) & (m <= rest["hi_ms"].to_numpy() * f)))
        rows.append({"measured sizes per cell": k, "cells": len(cells), "cell mean MAPE %": np.mean(cells),
                     "cells within 10%": int(np.sum(np.array(cells) <= 10)), "coverage %": np.mean(cover) * 100,
                     "one offset per cell: cell mean MAPE %": np.mean(flat)})
    return pd.DataFrame(rows)


def strata(df: pd.DataFrame) -> pd.Series:
    topo = df["system"].map(lambda s: node_for(s).intra_topology)
    return pd.Series([interval_stratum(c, t) for c, t in zip(df["collective"], topo)], index=df.index)


def add_intervals(pred: pd.DataFrame, final: str) -> pd.DataFrame:
    """Cross-conformal 90% band around `final` (prior_ms or hybrid_ms) per system from the other
    systems' held-out log-residuals."""
    pred = pred.copy()
    r = np.log(pred["latency_ms"] / pred[final])
    w = row_weights(pred)
    key = strata(pred)
    for held in pred["system"].unique():
        for stratum in key.unique():
            coarse = key.str.split(":").str[0] == stratum.split(":")[0]
            other = (pred["system"] != held) & (key == stratum)
            if pred.loc[other, "system"].nunique() < MIN_STRATUM_SYSTEMS:
                other = (pred["system"] != held) & coarse
            mine = (pred["system"] == held) & (key == stratum)
            if not mine.any() or not other.any():
                continue
            iv = interval_from_residuals(r[other].to_numpy(), w[other.to_numpy()])
            pred.loc[mine, "lo_ms"] = pred.loc[mine, final] * np.exp(iv["q_lo"])
            pred.loc[mine, "hi_ms"] = pred.loc[mine, final] * np.exp(iv["q_hi"])
    return pred


def cell_table(pred: pd.DataFrame) -> pd.DataFrame:
    def agg(g):
        m = g["latency_ms"]
        return pd.Series({
            "rows": len(g),
            "prior_mape": float(np.mean(np.abs(g["prior_ms"] / m - 1)) * 100),
            "hybrid_mape": float(np.mean(np.abs(g["hybrid_ms"] / m - 1)) * 100),
            "coverage": float(np.mean((g["lo_ms"] <= m) & (m <= g["hi_ms"])) * 100),
        })
    return pred.groupby(CELL).apply(agg).reset_index()


def custom_loso(custom: pd.DataFrame, constants) -> pd.DataFrame:
    rows = []
    graph = custom[custom["timing"] == "graph"]
    for held in AIC_SYSTEMS:
        k = fit_custom_all_reduce(graph[graph["system"] != held], constants)
        for (eng, p), g in graph[graph["system"] == held].groupby(["impl", "gpus"]):
            node = node_for(held)
            pred = custom_all_reduce_ms(g["nbytes"].to_numpy(), int(p), node, eng, constants, k)
            rows.append({"system": held, "engine": eng, "gpus": int(p), "rows": len(g),
                         "mape": float(np.mean(np.abs(pred / g["latency_ms"].to_numpy() - 1)) * 100)})
    return pd.DataFrame(rows)


def _bus(coll: str, n, p: int, ms) -> np.ndarray:
    """nccl-tests' bus bandwidth (GB/s): algorithm bandwidth x 2(p-1)/p (all_reduce), (p-1)/p
    (all_gather, reduce_scatter, all_to_all), 1 (send_recv)."""
    f = {"all_reduce": 2 * (p - 1) / p, "send_recv": 1.0}.get(coll, (p - 1) / p)
    return f * np.asarray(n) / (np.asarray(ms) * 1e-3) / 1e9


def plot(pred: pd.DataFrame, path: Path, final: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = sorted(pred["system"].unique())
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for ax, s in zip(axes.ravel(), systems):
        d = pred[pred["system"] == s]
        for i, ((coll, p, g), grp) in enumerate(d.groupby(["collective", "gpus", "gpus_per_node"])):
            if coll not in ("all_reduce", "send_recv", "all_gather") or i > 9:
                continue
            grp = grp.groupby("nbytes", as_index=False)[["latency_ms", "hybrid_ms", "prior_ms"]].median()
            n = grp["nbytes"].to_numpy()
            line = ax.plot(n, _bus(coll, n, p, grp["latency_ms"]), "o", ms=3, label=f"{coll} {p}x{g} measured")[0]
            ax.plot(n, _bus(coll, n, p, grp[final]), "-", color=line.get_color(), lw=1.2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{s} (held out)")
        ax.set_xlabel("bytes (NCCL tests' size)")
        ax.set_ylabel("bus bandwidth, GB/s")
        ax.legend(fontsize=6)
    fig.suptitle(f"Held-out collectives: measured (dots), predicted ({final[:-3]}, line)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--maxiter", type=int, default=800)
    ap.add_argument("--residual", default="ridge", choices=["ridge", "gbr"], help="residual learner")
    ap.add_argument("--export", action="store_true", help="refit on every system and write exported_models/collectives")
    a = ap.parse_args()
    df, custom = load(Path(a.data))
    pred = loso(df, a.maxiter, a.residual)
    final = "hybrid_ms" if cell_mape(pred, "hybrid_ms").mean() < cell_mape(pred, "prior_ms").mean() else "prior_ms"
    pred = add_intervals(pred, final)
    cells = cell_table(pred)
    cust = custom_loso(custom, DEFAULT_CONSTANTS)
    ceil = ceiling_table(pred, in_sample(pred[df.columns], a.maxiter))
    shots = few_shot(pred, final)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    plot(pred, out / "collectives_nvswitch.png", final)
    within = lambda col: int((cells[col] <= 10).sum())  # noqa: E731
    cov = pred.groupby("system").apply(lambda g: np.mean((g["lo_ms"] <= g["latency_ms"]) & (g["latency_ms"] <= g["hi_ms"])) * 100)
    md = ["# Collectives on held-out systems (leave-one-system-out)", "",
          "Reproduce: `python -m experiments.collectives.collectives_nvswitch` (" + ("--export, " if a.export else "") +
          f"maxiter {a.maxiter}). Sizes from {MIN_BYTES} B up, in NCCL tests' semantics. Every number is for a "
          "system excluded from fitting (constants, residual and interval).", "",
          f"Cells within 10% MAPE: prior {within('prior_mape')}/{len(cells)}, hybrid {within('hybrid_mape')}/{len(cells)}. "
          f"Overall MAPE (cell mean): prior {cells['prior_mape'].mean():.1f}%, hybrid {cells['hybrid_mape'].mean():.1f}%.", "",
          f"Residual learner: {a.residual}; the shipped predictor and the intervals use "
          f"{'prior x residual' if final == 'hybrid_ms' else 'the fitted prior alone (the residual did not help held out)'}.", "",
          "90% interval coverage per held-out system: " + ", ".join(f"{s} {v:.0f}%" for s, v in cov.items()) + ".", "",
          "![bandwidth vs size](collectives_nvswitch.png)", "", CAVEATS,
          "## Per cell (system, collective, GPUs, GPUs per node)", "", cells.round(1).to_markdown(index=False), "",
          "## The prior fitted in-sample", "",
          "Cell MAPE of the prior with its constants fitted on all six systems, and on the cell's own system "
          "alone (the fit's robust log loss, not per-cell MAPE: an own-system fit can score a cell worse than "
          "the six-system one), both scored on the rows they were fitted on, beside the held-out number above. "
          "Cells within "
          f"10%: held out {int((ceil['held_out'] <= 10).sum())}, fitted on all six "
          f"{int((ceil['fit_on_all_six'] <= 10).sum())}, fitted on its own system "
          f"{int((ceil['fit_on_own_system'] <= 10).sum())} of {len(ceil)}; cell mean "
          f"{ceil['held_out'].mean():.1f} / {ceil['fit_on_all_six'].mean():.1f} / "
          f"{ceil['fit_on_own_system'].mean():.1f}%. A cell far above 10% fitted on its own system points at the "
          "prior's form (NCCL's protocol and channel steps between 1 and 16 MB, a box without GPU "
          "peer-to-peer, per-call timing noise) rather than the transfer between systems.", "",
          ceil.round(1).to_markdown(index=False), "",
          "## A few measured sizes of the held-out system (`predict-collective --calibration`)", "",
          "Each held-out cell with k of its sizes taken as measured, spread over its range with its smallest and "
          "largest included: the log of measured / predicted at those sizes, interpolated in log size, corrects "
          "the prediction and its interval at the cell's other sizes, all of them between measured ones "
          "(`transfer.collectives`; beyond the measured range, where it is held flat, it is not scored here). "
          "Coverage: the mean of the cells' coverages of the corrected intervals.", "",
          shots.round(1).to_markdown(index=False), "",
          "## Engines' custom all-reduce (graph rows; lat/eff fitted on the other aiconfigurator systems)", "",
          cust.round(1).to_markdown(index=False) if len(cust) else "(no tables)", ""]
    if a.export:
        c, est = fit(df, a.maxiter, a.residual)
        est = est if final == "hybrid_ms" else None
        k = fit_custom_all_reduce(custom, c)
        r = np.log(pred["latency_ms"] / pred[final])
        w = row_weights(pred)
        key = strata(pred)
        interval = interval_from_residuals(r.to_numpy(), w)
        interval["strata"] = {s: interval_from_residuals(r[(key == s).to_numpy()].to_numpy(), w[(key == s).to_numpy()])
                              for s in sorted(key.unique())
                              if pred.loc[(key == s).to_numpy(), "system"].nunique() >= MIN_STRATUM_SYSTEMS}
        for coarse in ("send_recv", "collective"):
            m = (key.str.split(":").str[0] == coarse).to_numpy()
            interval["strata"][coarse] = interval_from_residuals(r[m].to_numpy(), w[m])
        interval["source"] = "leave-one-system-out log(measured / hybrid), group-balanced"
        interval["training_range"] = {"topologies": sorted({node_for(s).intra_topology for s in df["system"].unique()}),
                                      "max_gpus": int(df["gpus"].max()), "min_bytes": MIN_BYTES,
                                      "max_bytes": float(df["nbytes"].max()),
                                      "max_arch": 3}
        interval["ood_widen"] = 1.5
        write_bundle(REPO / "exported_models" / "collectives", c, interval, est, custom=k,
                     data_digest=data_digest(df[GROUP_KEYS[:4] + ["nbytes", "latency_ms"]]),
                     trained_on=sorted(df["system"].unique()),
                     metrics={"loso_cells_within_10pct": within("hybrid_mape"), "cells": len(cells)},
                     notes="fitted by python -m experiments.collectives.collectives_nvswitch --export")
        md += ["Shipped bundle: refit on all six systems (`--export`)."]
    (out / "collectives_nvswitch.md").write_text("\n".join(md) + "\n")
    print("\n".join(md[:8]))


if __name__ == "__main__":
    main()
