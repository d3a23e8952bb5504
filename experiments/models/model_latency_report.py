"""The report and plot of `model_latency`: its per-device, per-mode and per-op-group tables as markdown."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.graphs.memory import PRESSURE_FRACTION


def mape(a):
    a = np.abs(np.asarray(a, dtype=float))
    a = a[np.isfinite(a)]
    return (float(np.mean(a)) * 100, float(np.max(a)) * 100) if len(a) else (np.nan, np.nan)


def _fmt(x, nd=1):
    return "-" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}f}"


def plot_labels(results, path: Path) -> None:
    """Predicted vs measured e2e latency of every eager label (log-log), one panel per kernel model,
    with NeuSight's own predictions where it made one, and the 90% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.2 * len(results), 4.8), sharey=True)
    for ax, (kind, (df, _, _)) in zip(np.atleast_1d(axes), results.items()):
        e = df[~df["fusion"]]
        for dev, g in e.groupby("device"):
            ax.errorbar(g["measured_ms"], g["ours_ms"], yerr=[g["ours_ms"] - g["lo_ms"], g["hi_ms"] - g["ours_ms"]],
                        fmt="o", ms=4, lw=0.6, capsize=0, label=dev)
        ns = e[e["neusight_ms"].notna()]
        ax.scatter(ns["measured_ms"], ns["neusight_ms"], marker="x", c="0.4", s=14, lw=0.8, label="NeuSight")
        lim = [e["measured_ms"].min() * 0.7, e["measured_ms"].max() * 1.4]
        ax.plot(lim, lim, "k-", lw=0.6)
        for f in (0.8, 1.25):
            ax.plot(lim, [v * f for v in lim], "k:", lw=0.5)
        ax.set(xscale="log", yscale="log", xlim=lim, ylim=lim, xlabel="measured e2e ms",
               title=f"{kind}: MAPE {e['ours_ape'].mean() * 100:.1f}% (held-out devices)")
    np.atleast_1d(axes)[0].set_ylabel("predicted e2e ms (bars: 90% interval; dotted: +-25%)")
    np.atleast_1d(axes)[0].legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def write_report(out, results, per_dev, vtab, cal, main_kind, bundles, variant, secs):
    df, consts, grp = results[main_kind]
    L = ["# Whole-model latency on NeuSight's labels (every device held out)", ""]
    km = "; ".join("**%s** (%s)" % (k, ", ".join(sorted(set(results[k][0]["kernel_model"])))) for k in results)
    L.append(f"Kernel models: {km}"
             + ("" if bundles else " (no `--bundles` given: the analytical prior alone, no learned residual)") + ".")
    L.append(f"Composition (`hybridperf.graphs.compose`, variant `{variant}`): t_k = max(scale * max(pred_k - floor_k, 0)"
             " + gap, cpu), e2e = exp(log_bias[mode]) * sum t_k count_k, with the constants fitted on the OTHER "
             "devices' eager labels (leave-one-device-out); 90% interval from the other devices' residual quantiles "
             f"(nested leave-one-device-out). {len(df)} labels, {secs:.1f} s.")
    L += ["", f"## Per device (eager labels, held out) — main kernel model: {main_kind}", "",
          "| device | kernel model | n | ours MAPE % | ours max % | prior-only MAPE % | prior-only max % | "
          "plain sum MAPE % | NeuSight MAPE % | NeuSight max % | ours MAPE % (NeuSight's labels) | 90% coverage |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    pd_main = per_dev[(per_dev["kind"] == main_kind) & ~per_dev["fusion"]]
    pd_prior = per_dev[(per_dev["kind"] == "prior") & ~per_dev["fusion"]].set_index("device")
    for r in pd_main.itertuples():
        pr = pd_prior.loc[r.device]
        L.append(f"| {r.device} | {r.kernel_model} | {r.n} | {_fmt(r.ours_mape)} | {_fmt(r.ours_max)} | "
                 f"{_fmt(pr.ours_mape)} | {_fmt(pr.ours_max)} | {_fmt(r.uncorrected_mape)} | {_fmt(r.neusight_mape)} | "
                 f"{_fmt(r.neusight_max)} | {_fmt(r.ours_mape_on_ns)} ({r.n_with_neusight}) | {_fmt(r.coverage90 * 100, 0)}% |")
    eager = per_dev[~per_dev["fusion"]]
    kinds = list(results)
    L += ["", "Per device and kernel model, held-out MAPE % (max %), 90% coverage:", "",
          "| device | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for dev, g in eager.groupby("device"):
        g = g.set_index("kind")
        L.append(f"| {dev} | " + " | ".join(f"{_fmt(g.loc[k, 'ours_mape'])} ({_fmt(g.loc[k, 'ours_max'])}), "
                                             f"{_fmt(g.loc[k, 'coverage90'] * 100, 0)}%" for k in kinds) + " |")
    for kind, (d, _, _) in results.items():
        e = d[~d["fusion"]]
        both = e[e["neusight_ms"].notna()]
        om, ox = mape(e["ours_ape"])
        bm, bx = mape(both["ours_ape"])
        nm, nx = mape(both["neusight_ape"])
        L += ["", f"**{kind}**: all eager labels MAPE {_fmt(om)}% (max {_fmt(ox)}%); on the {len(both)} labels NeuSight "
              f"predicted: ours {_fmt(bm)}% (max {_fmt(bx)}%) vs NeuSight {_fmt(nm)}% (max {_fmt(nx)}%). "
              f"Interval coverage {_fmt(e['covered'].mean() * 100, 0)}% (target 90%)."]
        for mode in ("inf", "train"):
            s_ = e[e["mode"] == mode]
            if len(s_):
                a_, b_ = mape(s_["ours_ape"])
                L.append(f"- {mode}: {len(s_)} labels, MAPE {_fmt(a_)}%, max {_fmt(b_)}%")
        f = d[d["fusion"]]
        if len(f):
            a_, b_ = mape(f["ours_ape"])
            c_, d_ = mape(f["neusight_ape"])
            L.append(f"- `-fusion` labels (fused graph, constants from eager labels): {len(f)} labels, "
                     f"ours MAPE {_fmt(a_)}% (max {_fmt(b_)}%), NeuSight {_fmt(c_)}% (max {_fmt(d_)}%).")
    L += ["", "## Composition constants", "", "Leave-one-device-out (fitted without the device):", "",
          "| kernels | held-out device | scale | gap ms | cpu ms | log_bias inf | log_bias train | q_lo | q_hi |",
          "|---|---|---|---|---|---|---|---|---|"]
    for kind, (d, cs, _) in results.items():
        for dev, p in cs.items():
            q = d[d["device"] == dev].iloc[0]
            L.append(f"| {kind} | {dev} | {p['scale']:.3f} | {p['gap_ms']:.4f} | {p['cpu_ms']:.4f} | {p['b_inf']:+.3f} | "
                     f"{p['b_train']:+.3f} | {q.q_lo:+.3f} | {q.q_hi:+.3f} |")
    L += ["", "All-device fit (shipped with --write-calibration but its gap and host floor, which `host_floor` "
          "chooses on today's hosts; only used for GPUs outside the label set):", ""]
    for kind, c in cal.items():
        L.append(f"- {kind}: `{json.dumps(c)}`")
    L += ["", "## Composition variants (held-out MAPE / max % per device)", "",
          "Which constants are fitted: scale, gap, cpu (per-kernel lower bound), per-mode log bias; `raw_bias` = "
          "the old plain sum of isolated-kernel predictions with a per-mode log bias.", ""]
    devs = sorted({c[:-5] for c in vtab.columns if c.endswith(" MAPE") and c != "mean device MAPE"})
    L.append("| kernels | variant | " + " | ".join(devs) + " | mean device MAPE | worst max |")
    L.append("|---|---|" + "---|" * (len(devs) + 2))
    for r in vtab.to_dict("records"):
        L.append(f"| {r['kernels']} | {r['variant']} | " + " | ".join(f"{r[d + ' MAPE']:.1f}/{r[d + ' max']:.0f}" for d in devs)
                 + f" | {r['mean device MAPE']:.1f} | {r['worst device max']:.0f} |")
    if len(grp):
        L += ["", f"## Per-op-group error vs the per-node measurements of the traced layer ({main_kind})", "",
              "Traced totals = outside-layer nodes + layer-0 nodes x num_layer, from the label CSVs (each node timed "
              "alone, so small nodes carry a per-call overhead there too). `in-model` = our composed time "
              "(held-out constants), `isolated` = the plain sum of kernel predictions.", "",
              "| group | n | in-model MAPE % | median in-model/traced | isolated MAPE % | median isolated/traced |",
              "|---|---|---|---|---|---|"]
        for g, s_ in grp.groupby("group"):
            s_ = s_[s_["traced_ms"] > 0]
            L.append(f"| {g} | {len(s_)} | {_fmt(s_['ape'].mean() * 100)} | "
                     f"{_fmt(float(np.median(s_['ours_ms'] / s_['traced_ms'])), 2)} | {_fmt(s_['iso_ape'].mean() * 100)} | "
                     f"{_fmt(float(np.median(s_['isolated_ms'] / s_['traced_ms'])), 2)} |")
    traced = (grp.groupby(["device", "model", "mode", "seq", "batch"])["traced_ms"].sum()
              if len(grp) else pd.Series(dtype=float))
    ratio = [traced.get((r.device, r.model, r.mode, r.seq, r.batch), np.nan) / r.measured_ms for r in df.itertuples()]
    df = df.assign(traced_ratio=ratio)
    hot = df[df["mem_frac"] >= PRESSURE_FRACTION]
    L += ["", "## Memory pressure", "",
          f"Estimated device memory of each run (`hybridperf.graphs.memory`: weights, gradients and the tensors eager "
          f"autograd saves, counted on the CPU). {len(hot)} of {len(df)} labels need {PRESSURE_FRACTION:.0%} or more "
          f"of their device; the other labels need at most {df.loc[df['mem_frac'] < PRESSURE_FRACTION, 'mem_frac'].max():.0%}."]
    cool = df[(df["mem_frac"] < PRESSURE_FRACTION) & df["traced_ratio"].notna()]
    if len(cool):
        L.append(f"The label CSV's per-node times (each node timed alone) sum to {cool['traced_ratio'].min():.2f}-"
                 f"{cool['traced_ratio'].max():.2f} of the measured end-to-end time on the other labels with a "
                 f"traced graph: below 1 only where time passes outside the kernels.")
    for r in hot.itertuples():
        L.append(f"- {r.device} {r.model}-{r.mode}-{r.seq}-{r.batch}: {r.mem_frac:.0%} of memory, "
                 f"ours {(r.ours_ms / r.measured_ms - 1) * 100:+.1f}%, plain kernel sum "
                 f"{(r.raw_ms / r.measured_ms - 1) * 100:+.1f}%, per-node sum / measured {_fmt(r.traced_ratio, 2)}")
    L += ["", f"## Per label ({main_kind})", "", "| device | run | measured ms | ours ms | ours err % | 90% interval | "
          "NeuSight ms | NeuSight err % | plain sum err % | memory % |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in df.sort_values(["fusion", "device", "model", "mode", "seq", "batch"]).itertuples():
        run = f"{r.model}-{r.mode}-{r.seq}-{r.batch}" + ("-fusion" if r.fusion else "")
        ns_err = (r.neusight_ms / r.measured_ms - 1) * 100 if np.isfinite(r.neusight_ms) else np.nan
        L.append(f"| {r.device} | {run} | {r.measured_ms:.1f} | {r.ours_ms:.1f} | {(r.ours_ms / r.measured_ms - 1) * 100:+.1f} | "
                 f"{r.lo_ms:.0f}..{r.hi_ms:.0f}{'' if r.covered else ' (miss)'} | {_fmt(r.neusight_ms)} | "
                 f"{'-' if not np.isfinite(ns_err) else f'{ns_err:+.1f}'} | {(r.raw_ms / r.measured_ms - 1) * 100:+.1f} | "
                 f"{r.mem_frac * 100:.0f} |")
    (out / "report.md").write_text("\n".join(L) + "\n")

