"""Shared fixtures: a small synthetic kernel table and a tiny trained ONNX bundle.

The tiny bundle is trained once per session (a few seconds on 2 CPU cores) and shared by
test_bundle.py, test_transfer.py and test_cli_kernels.py. Tests that need it skip when torch or
xgboost are not installed (the bundle fixture calls `pytest.importorskip`).
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

#: the training devices of the tiny bundle and the synthetic "true latency / prior" factor of each
TINY_DEVICES = {"Tesla T4": 1.15, "Tesla V100-PCIE-32GB": 0.95, "NVIDIA A100-PCIE-40GB": 1.05}
TINY_OPS = ("bmm", "linear", "add", "softmax", "ln")
TINY_SEED = 1234


def random_shapes(rng: np.random.Generator, n: int, ops=TINY_OPS) -> pd.DataFrame:
    """`n` random NeuSight-style kernel rows (OPName, B, M, N, K, H) cycling through `ops`."""
    rows = []
    for i in range(n):
        op = ops[i % len(ops)]
        if op in ("bmm", "linear"):
            B = int(rng.choice([1, 2, 4, 8, 16, 32]))
            M, N, K = (int(2 ** rng.uniform(5, 11)) for _ in range(3))
            rows.append({"OPName": op, "B": B, "M": M, "N": N, "K": K, "H": np.nan})
        else:
            rows.append({"OPName": op, "B": int(2 ** rng.uniform(3, 14)), "M": np.nan, "N": np.nan, "K": np.nan,
                         "H": int(2 ** rng.uniform(6, 13))})
    return pd.DataFrame(rows)


def synth_measurements(rng: np.random.Generator, n: int, device: str, factor: float, sigma: float = 0.05,
                       ops=TINY_OPS) -> pd.DataFrame:
    """NeuSight-style rows with Device and a synthetic Latency = prior * factor * lognormal noise."""
    from hybridperf.datasets.schema import canonicalize
    from hybridperf.devices import get_device
    from hybridperf.priors.kernel_prior import prior_ms

    raw = random_shapes(rng, n, ops)
    prior = prior_ms(canonicalize(raw), get_device(device))
    # a smooth, device-independent function of the kernel's size the residual models can learn, plus noise
    shape_term = 0.3 * np.tanh(np.log(prior / 0.1)) + np.where(raw["OPName"].isin(["bmm", "linear"]), 0.1, -0.05)
    raw["Latency"] = prior * factor * np.exp(shape_term + rng.normal(0.0, sigma, n))
    raw["Device"] = device
    return raw


def synth_neusight_frame(rows_per_device: int = 150, seed: int = TINY_SEED, devices=None) -> pd.DataFrame:
    """The NeuSight-style training frame (OPName,B,M,N,K,H,Latency,Device) over `devices`."""
    rng = np.random.default_rng(seed)
    devices = devices or TINY_DEVICES
    frames = [synth_measurements(rng, rows_per_device, d, f) for d, f in devices.items()]
    return pd.concat(frames, ignore_index=True)[["OPName", "B", "M", "N", "K", "H", "Latency", "Device"]]


def synth_table(rows_per_device: int = 150, seed: int = TINY_SEED) -> pd.DataFrame:
    """The canonical training table of the tiny bundle."""
    from hybridperf.datasets.schema import canonicalize

    return canonicalize(synth_neusight_frame(rows_per_device, seed), require_latency=True)


def tiny_config(seed: int = 0):
    from hybridperf.training.kernels import TrainConfig

    return TrainConfig(seed=seed, max_rows=150, mlp={"hidden": (16,), "n_seeds": 2, "epochs": 3},
                       xgb={"n_estimators": 20, "max_depth": 3, "n_jobs": 1})


def train_tiny(out_dir: Path, seed: int = 0, table: pd.DataFrame | None = None) -> Path:
    """Train a tiny bundle into `out_dir` and return it."""
    pytest.importorskip("torch")
    pytest.importorskip("xgboost")
    pytest.importorskip("onnxmltools")
    import torch

    # one thread: with 2 cores shared by other processes, 2-thread OpenMP/torch pools spin and stall
    torch.set_num_threads(1)
    from hybridperf.training.kernels import train_kernel_bundle

    train_kernel_bundle(synth_table() if table is None else table, out_dir, tiny_config(seed))
    return out_dir


@pytest.fixture(scope="session")
def tiny_table() -> pd.DataFrame:
    return synth_table()


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory, tiny_table) -> Path:
    """Directory of a tiny kernel bundle trained on synthetic data of 3 devices (read-only: copy to modify)."""
    return train_tiny(tmp_path_factory.mktemp("tiny_bundle") / "kernels", seed=0, table=tiny_table)


@pytest.fixture
def bundle_copy(tiny_bundle, tmp_path) -> Path:
    """A private, modifiable copy of the tiny bundle."""
    dst = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, dst)
    return dst


def run_cli(monkeypatch, capsys, args) -> tuple[int, str]:
    """Run `hybridperf ARGS` in-process through the real entry point; returns (exit code, stderr)."""
    from hybridperf.cli.app import main

    monkeypatch.setattr(sys, "argv", ["hybridperf", *map(str, args)])
    with pytest.raises(SystemExit) as exc:
        main()
    return exc.value.code, capsys.readouterr().err


def assert_one_line_error(code, err) -> None:
    """A user error: non-zero exit, exactly one non-empty stderr line starting 'error:', no traceback."""
    assert code not in (0, None), err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:"), err
    assert "Traceback" not in err


def predict_model_run(tmp_path: Path, config: dict, *args) -> dict:
    """`hybridperf predict-model --config CONFIG ARGS --json` through typer's CliRunner: exit 0, and its last line's
    numbers finite with 0 < lo <= e2e <= hi; returns that JSON object."""
    import json
    import math

    from typer.testing import CliRunner

    from hybridperf.cli.app import app

    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = CliRunner().invoke(app, ["predict-model", "--config", str(path), *map(str, args), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert all(math.isfinite(v) for v in out.values()) and 0 < out["lo_ms"] <= out["e2e_ms"] <= out["hi_ms"]
    return out
