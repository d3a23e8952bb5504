"""mlflow tracking for training runs: a local SQLite store (./mlflow.db) by default.

Tracking is auxiliary: if mlflow is missing or its store cannot be opened, training goes on and a
one-line warning says why.
"""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"


@contextlib.contextmanager
def tracked_run(name: str, out_dir: Path, params: dict, tracking_uri: str | None = None, enabled: bool = True):
    """Open an mlflow run logging `params`; yields a `log_metrics(dict)` callable. The bundle directory
    `out_dir` is logged as the run's artifacts on exit."""
    run = None
    if enabled:
        try:
            import mlflow

            mlflow.set_tracking_uri(tracking_uri or DEFAULT_TRACKING_URI)
            mlflow.set_experiment("hybridperf")
            run = mlflow.start_run(run_name=name)
            mlflow.log_params({k: json.dumps(v) if isinstance(v, (dict, list, tuple)) else v for k, v in params.items()})
        except Exception as e:  # mlflow raises many types; tracking must never stop training
            print(f"warning: mlflow tracking disabled ({str(e).splitlines()[0][:200]})", file=sys.stderr)
            run = None
    if run is None:
        yield lambda metrics: None
        return
    try:
        yield lambda metrics: mlflow.log_metrics({k: float(v) for k, v in metrics.items()})
        if Path(out_dir).exists():
            mlflow.log_artifacts(str(out_dir), artifact_path="bundle")
    finally:
        mlflow.end_run()
