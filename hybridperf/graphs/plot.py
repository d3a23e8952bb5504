"""Plot helpers (matplotlib is imported lazily: it is not a runtime dependency)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd


def plot_latency_vs_batch(df: pd.DataFrame, path: str | Path | None = None, title: str = ""):
    """Line plot of e2e latency (with the 90% band) against batch size, one line per (device, seq).

    `df` is a `sweep()` result (several sweeps may be concatenated). Saves to `path` when given;
    returns the matplotlib Figure.
    """
    try:
        import matplotlib

        if path is not None:
            matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib: pip install matplotlib") from e
    fig, ax = plt.subplots(figsize=(6, 4))
    for (dev, seq), g in df.groupby(["device", "seq"], sort=False):
        g = g.sort_values("batch")
        ax.plot(g["batch"], g["e2e_ms"], marker="o", label=f"{dev}, seq {seq}")
        ax.fill_between(g["batch"], g["lo_ms"], g["hi_ms"], alpha=0.2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("latency (ms)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
