"""mlflow tracking for training runs (local file store by default); a no-op when mlflow is absent."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path


@contextlib.contextmanager
def tracked_run(name: str, out_dir: Path, params: dict, tracking_uri: str | None = None, enabled: bool = True):
    """Open an mlflow run logging `params`; yields a `log_metrics(dict)` callable. The run's artifacts
    are the bundle directory `out_dir`, logged on exit."""
    if not enabled:
        yield lambda metrics: None
        return
    try:
        import mlflow
    except ImportError:
        yield lambda metrics: None
        return
    mlflow.set_tracking_uri(tracking_uri or (Path("mlruns").resolve().as_uri()))
    mlflow.set_experiment("hybridperf")
    with mlflow.start_run(run_name=name):
        mlflow.log_params({k: json.dumps(v) if isinstance(v, (dict, list, tuple)) else v for k, v in params.items()})
        yield lambda metrics: mlflow.log_metrics({k: float(v) for k, v in metrics.items()})
        if Path(out_dir).exists():
            mlflow.log_artifacts(str(out_dir), artifact_path="bundle")
