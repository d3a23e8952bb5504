"""The output paths a command writes (`--output`, `--plot`), checked before it does any work, so that a bad one
is one `error:` line with nothing written, not a failure after the first output file."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from hybridperf.atomic import check_writable


def check_outputs(output: Optional[Path] = None, plot: Optional[Path] = None) -> None:
    """OSError (a folder at the path, a file where a folder should be, no permission) or InputError (a plot
    format matplotlib cannot write, no matplotlib) for the paths given; None is not written."""
    if output is not None:
        check_writable(output)
    if plot is not None:
        from hybridperf.graphs.plot import check_plot_path

        check_plot_path(plot)
