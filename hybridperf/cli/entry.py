"""The console entry point (`hybridperf`, `python -m hybridperf`): the CLI is imported inside the error handling,
so a malformed catalog data file, which the import reads, stops the command with one `error:` line too."""
from __future__ import annotations

import sys

from hybridperf.errors import HybridperfError


def main() -> None:
    try:
        from hybridperf.cli.app import main as run
    except HybridperfError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    run()
