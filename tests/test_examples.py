"""The examples in examples/ run as a user would run them (shipped models, no data, no GPU)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]


def test_sweep_example_writes_table_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    if not (REPO / "exported_models" / "kernels" / "manifest.json").is_file():
        pytest.skip("no shipped kernel bundle in this checkout")
    res = subprocess.run([sys.executable, str(REPO / "examples" / "sweep_batch.py")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    df = pd.read_csv(tmp_path / "sweep_gpt2_large.csv")
    assert set(df["device"]) == {"NVIDIA H100 80GB HBM3", "NVIDIA A100 80GB PCIe", "NVIDIA L4"}
    assert (df["lo_ms"] <= df["e2e_ms"]).all() and (df["e2e_ms"] <= df["hi_ms"]).all()
    for _, g in df.groupby("device"):  # latency grows with the batch
        assert g.sort_values("batch")["e2e_ms"].is_monotonic_increasing
    assert (tmp_path / "sweep_gpt2_large.png").stat().st_size > 1000


def test_documented_measured_runs_example():
    """docs/predict-model.md's `--measured-runs` command: the shipped runs file, relative config paths."""
    from typer.testing import CliRunner

    from hybridperf.cli.app import app

    args = ["predict-model", "--config", str(REPO / "examples" / "configs" / "gpt2_large.json"), "--batch", "16",
            "--seq", "1024", "--mode", "inf", "--device", "NVIDIA H100 80GB HBM3", "--json"]
    r = CliRunner().invoke(app, [*args, "--measured-runs", str(REPO / "examples" / "h100_runs.csv")])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["lo_ms"] < out["e2e_ms"] < out["hi_ms"]
