"""The `hybridperf` command line. Each command group lives in its own module under hybridperf/cli/
and registers itself on `app`; `main()` turns every HybridperfError into one line on stderr, exit 2."""
from __future__ import annotations

import importlib
import sys

import typer

from hybridperf.errors import HybridperfError

app = typer.Typer(
    name="hybridperf",
    help="Predict the latency of ML kernels, models and collectives on GPUs, including unseen ones.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each module defines `register(app)`; keep the list short and explicit.
from hybridperf.cli import collect as _collect  # noqa: E402
from hybridperf.cli import collective as _collective  # noqa: E402
from hybridperf.cli import compare as _compare  # noqa: E402
from hybridperf.cli import data as _data  # noqa: E402
from hybridperf.cli import devices as _devices  # noqa: E402
from hybridperf.cli import kernels as _kernels  # noqa: E402
from hybridperf.cli import model as _model  # noqa: E402
from hybridperf.cli import serving as _serving  # noqa: E402
from hybridperf.cli import train as _train  # noqa: E402
from hybridperf.cli import transfer as _transfer  # noqa: E402

for _mod in (_kernels, _model, _compare, _collective, _devices, _data, _collect, _train, _transfer, _serving):
    _mod.register(app)


def _click_exception_modules() -> list:
    """click's exception module(s): typer >= 0.20 vendors its own click as `typer._click`."""
    mods = []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            mods.append(importlib.import_module(name))
        except ImportError:
            pass
    return mods


def main() -> None:
    """Entry point: run the app, print one line and exit non-zero on user errors."""
    try:
        app(standalone_mode=False)
    except HybridperfError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except (FileNotFoundError, PermissionError, IsADirectoryError) as e:
        print(f"error: {e.strerror}: {e.filename}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # usage errors from (typer's) click
        if isinstance(e, typer.Exit):
            sys.exit(e.exit_code)
        for mod in _click_exception_modules():
            if isinstance(e, getattr(mod, "Exit", ())):
                sys.exit(e.exit_code)
            if isinstance(e, getattr(mod, "Abort", ())):
                sys.exit(1)
            if isinstance(e, mod.ClickException):
                msg = " ".join(e.format_message().split())
                if msg:  # `hybridperf` alone prints its help with an empty message
                    print(f"error: {msg}", file=sys.stderr)
                sys.exit(e.exit_code or 2)
        raise
