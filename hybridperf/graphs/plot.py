"""Plot helpers (matplotlib is imported lazily: it is not a runtime dependency)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from hybridperf.atomic import atomic_path, check_writable
from hybridperf.errors import InputError


def pyplot(headless: bool):
    """matplotlib.pyplot, on the Agg backend when the figure only goes to a file."""
    try:
        import matplotlib

        if headless:
            matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("plotting needs matplotlib: pip install matplotlib") from None
    return plt


def plot_format(path: str | Path) -> str:
    """The image format a plot path names: its suffix, PNG without one."""
    return Path(path).suffix[1:].lower() or "png"


def check_plot_path(path: str | Path) -> None:
    """Refuse, before any work or output, a plot matplotlib cannot write: matplotlib missing, a format (the
    suffix; none is PNG) it has no writer for, or a path that cannot be written (`atomic.check_writable`)."""
    pyplot(headless=True)
    from matplotlib.backend_bases import FigureCanvasBase

    fmt = plot_format(path)
    formats = FigureCanvasBase.get_supported_filetypes()
    if fmt not in formats:
        raise InputError(f"--plot {path}: matplotlib cannot write .{fmt} files; use one of "
                         f"{', '.join(sorted(formats))}")
    check_writable(path)


def save_figure(fig, path: str | Path, dpi: int = 120) -> None:
    """Write `fig` to `path` atomically, in the format its suffix names (PNG without one): given a temporary
    name without a suffix, matplotlib would write NAME.png beside it and leave `path` empty."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format=plot_format(path))


def plot_latency_vs_batch(df: pd.DataFrame, path: str | Path | None = None, title: str = ""):
    """Line plot of e2e latency (with the 90% band) against batch size, one line per (device, seq).

    `df` is a `sweep()` result (several sweeps may be concatenated). Saves to `path` when given;
    returns the matplotlib Figure.
    """
    plt = pyplot(path is not None)
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
        save_figure(fig, path)
    return fig


def plot_device_comparison(df: pd.DataFrame, path: str | Path | None = None, title: str = ""):
    """Dot plot of e2e latency per device with the 90% interval as error bars (log scale), fastest on
    top; devices the step does not fit on are drawn hollow. `df` is a `compare_devices()` result. Saves
    to `path` when given; returns the matplotlib Figure."""
    plt = pyplot(path is not None)
    fig, ax = plt.subplots(figsize=(7, 0.8 + 0.32 * len(df)))
    y = list(range(len(df)))[::-1]
    for yi, r in zip(y, df.to_dict("records")):
        ax.errorbar(r["e2e_ms"], yi, xerr=[[r["e2e_ms"] - r["lo_ms"]], [r["hi_ms"] - r["e2e_ms"]]], fmt="o",
                    color="tab:blue", mfc="tab:blue" if r["fits"] else "white", capsize=3)
    ax.set_yticks(y, df["device"], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("predicted latency (ms), 90% interval; hollow: does not fit in memory")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig
