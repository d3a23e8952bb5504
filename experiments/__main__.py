"""`python -m experiments run [--only NAME ...] [--list] [--data PATH] [--quick]`: run the experiments in
dependency order and write their tables and plots into experiments/results/ (see experiments/README.md)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from experiments.common import DATA, OUT, RESULTS, add_data_argument
from experiments.pipeline import QUICK_MINUTES, STEPS, Outcome, PipelineError, has_gpu, has_torch, run, select, \
    skip_reason

_STYLE = {"ok": "green", "skipped": "yellow", "failed": "red"}


def list_steps(console: Console, steps, data: Path) -> None:
    """One row per step: where it lives, what it needs, how long it runs, what it writes, and whether it
    would run on this machine now."""
    gpu, torch = has_gpu(), has_torch()
    table = Table(title=f"experiment steps, in run order (data: {data})")
    for col in ("step", "module", "needs", "~min", "results/", "here"):
        table.add_column(col, overflow="fold")
    for s in steps:
        reason = skip_reason(s, data, OUT, gpu, torch)
        table.add_row(s.name, s.module.removeprefix("experiments."), s.needs, f"{s.minutes:g}",
                      " ".join(dst for _, dst in s.results) or "-",
                      "runs" if reason is None else f"[yellow]skips: {reason}[/]")
    console.print(table)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the steps in order, results into experiments/results/")
    r.add_argument("--only", nargs="+", metavar="NAME", help="run only these steps (still in dependency order)")
    r.add_argument("--list", action="store_true", help="list the steps, their needs and run times; run nothing")
    add_data_argument(r, DATA)
    r.add_argument("--quick", action="store_true", help=f"leave out steps longer than {QUICK_MINUTES:g} min")
    args = ap.parse_args(argv)
    console = Console()
    try:
        steps = select(STEPS, args.only, args.quick)
    except PipelineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    data = Path(args.data).resolve()
    if args.list:
        list_steps(console, steps, data)
        return 0

    def report(o: Outcome) -> None:
        console.print(f"[{_STYLE[o.status]}]{o.status:8}[/] {o.step}: {o.detail}", highlight=False, soft_wrap=True)
        sys.stdout.flush()

    outcomes = run(steps, data, OUT, RESULTS, report=report)
    failed = [o.step for o in outcomes if o.status == "failed"]
    console.print(f"{sum(o.status == 'ok' for o in outcomes)} ran, "
                  f"{sum(o.status == 'skipped' for o in outcomes)} skipped, {len(failed)} failed"
                  + (f": {', '.join(failed)}" if failed else ""), soft_wrap=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
