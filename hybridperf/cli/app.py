"""The `hybridperf` command line. Each command group lives in its own module under hybridperf/cli/
and registers itself on `app`; `main()` turns every HybridperfError, OS error (full disk, no permission)
and malformed-data error into one `error:` line on stderr, exit 2; anything else (a bug) into one line
too, exit 3."""
from __future__ import annotations

import importlib
import os
import sys

import typer

from hybridperf import __version__
from hybridperf.errors import HybridperfError

app = typer.Typer(
    name="hybridperf",
    help="Predict the latency of ML kernels, models and collectives on GPUs, including unseen ones.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"hybridperf {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")) -> None:
    pass


# Each module defines `register(app)`; keep the list short and explicit.
from hybridperf.cli import collect as _collect  # noqa: E402
from hybridperf.cli import collective as _collective  # noqa: E402
from hybridperf.cli import compare as _compare  # noqa: E402
from hybridperf.cli import constants as _constants  # noqa: E402
from hybridperf.cli import data as _data  # noqa: E402
from hybridperf.cli import devices as _devices  # noqa: E402
from hybridperf.cli import kernels as _kernels  # noqa: E402
from hybridperf.cli import model as _model  # noqa: E402
from hybridperf.cli import serving as _serving  # noqa: E402
from hybridperf.cli import train as _train  # noqa: E402
from hybridperf.cli import transfer as _transfer  # noqa: E402

for _mod in (_kernels, _model, _compare, _collective, _devices, _constants, _data, _collect, _train, _transfer,
             _serving):
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
    except OSError as e:  # ENOSPC, EACCES, ENOTDIR, a missing file...: the OS's words and the path
        where = f": {e.filename}" if e.filename else ""
        print(f"error: {e.strerror or _first_line(e)}{where}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # usage errors from (typer's) click, malformed data from a library
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
        if _is_data_error(e):
            print(f"error: malformed input ({_first_line(e)})", file=sys.stderr)
            sys.exit(2)
        if os.environ.get("HYBRIDPERF_DEBUG"):
            raise
        # a bug, not the user's input: still one line (HYBRIDPERF_DEBUG=1 shows the traceback)
        print(f"error: internal error {type(e).__name__}: {_first_line(e)} (HYBRIDPERF_DEBUG=1 shows where; "
              f"please report it)", file=sys.stderr)
        sys.exit(3)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _is_data_error(e: Exception) -> bool:
    """A library's complaint about the content of a user's file: pandas' parser, text decoding, pyarrow
    (parquet), JSON."""
    import json

    kinds = [UnicodeError, json.JSONDecodeError]
    pd = sys.modules.get("pandas")
    if pd is not None:
        kinds += [pd.errors.ParserError, pd.errors.EmptyDataError]
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        kinds.append(pa.lib.ArrowException)
    return isinstance(e, tuple(kinds))
