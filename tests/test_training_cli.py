"""`hybridperf train` on a small synthetic CSV, then loading the bundle it wrote."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from conftest import assert_one_line_error, run_cli, synth_neusight_frame

runner = CliRunner()


@pytest.fixture
def fast_training(monkeypatch):
    """The CLI has no flags for the learners' sizes: shrink TrainConfig's defaults for the test."""
    pytest.importorskip("torch")
    pytest.importorskip("xgboost")
    pytest.importorskip("onnxmltools")
    import torch

    import hybridperf.training.kernels as kernels

    torch.set_num_threads(1)
    small = functools.partial(kernels.TrainConfig, mlp={"hidden": (16,), "n_seeds": 2, "epochs": 3},
                              xgb={"n_estimators": 20, "max_depth": 3, "n_jobs": 1})
    monkeypatch.setattr(kernels, "TrainConfig", small)


@pytest.fixture
def train_csv(tmp_path) -> Path:
    p = tmp_path / "train.csv"
    synth_neusight_frame(rows_per_device=60, seed=5).to_csv(p, index=False)
    return p


def test_train_then_load(fast_training, train_csv, tmp_path, monkeypatch):
    from hybridperf.cli.app import app
    from hybridperf.predictor import Predictor

    out = tmp_path / "bundle"
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    r = runner.invoke(app, ["train", "--data", str(train_csv), "--out", str(out), "--max-rows", "100", "--no-track"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["train_config"]["max_rows"] == 100
    assert m["train_config"]["mlp"]["epochs"] == 3  # the monkeypatch reached the CLI
    assert sorted(m["training_data"]["devices"]) == sorted(pd.read_csv(train_csv)["Device"].unique())
    assert m["training_data"]["rows"] == len(pd.read_csv(train_csv))
    assert list(work.iterdir()) == []  # --no-track: no ./mlruns
    p = Predictor.load(out)
    res = p.predict(pd.read_csv(train_csv).drop(columns=["Latency", "Device"]), "NVIDIA H100 80GB HBM3")
    assert np.isfinite(res["pred_ms"]).all() and (res["pred_ms"] > 0).all()
    assert (res["lo_ms"] <= res["pred_ms"]).all() and (res["pred_ms"] <= res["hi_ms"]).all()


def test_train_devices_filter(fast_training, train_csv, tmp_path):
    from hybridperf.cli.app import app

    out = tmp_path / "bundle"
    r = runner.invoke(app, ["train", "--data", str(train_csv), "--out", str(out), "--max-rows", "100", "--no-track",
                            "--devices", "Tesla T4,NVIDIA A100-PCIE-40GB"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["training_data"]["devices"] == ["NVIDIA A100-PCIE-40GB", "Tesla T4"]


def test_train_unknown_device_filter(fast_training, train_csv, tmp_path, monkeypatch, capsys):
    code, err = run_cli(monkeypatch, capsys, ["train", "--data", train_csv, "--out", tmp_path / "b", "--no-track",
                                            "--devices", "No Such GPU"])
    assert_one_line_error(code, err)


def test_train_bad_rows(fast_training, tmp_path, monkeypatch, capsys):
    p = tmp_path / "bad.csv"
    p.write_text("OPName,B,H,Latency,Device\nadd,4,1024,-1,Tesla T4\n")
    code, err = run_cli(monkeypatch, capsys, ["train", "--data", p, "--out", tmp_path / "b", "--no-track"])
    assert_one_line_error(code, err)


def test_train_single_device_is_a_one_line_error(fast_training, tmp_path, monkeypatch, capsys):
    p = tmp_path / "one.csv"
    frame = synth_neusight_frame(rows_per_device=30, seed=2)
    frame[frame["Device"] == "Tesla T4"].to_csv(p, index=False)
    code, err = run_cli(monkeypatch, capsys, ["train", "--data", p, "--out", tmp_path / "b", "--no-track"])
    assert_one_line_error(code, err)


def test_train_missing_data(tmp_path, monkeypatch, capsys):
    code, err = run_cli(monkeypatch, capsys, ["train", "--data", tmp_path / "nope.csv", "--out", tmp_path / "b",
                                            "--max-rows", "100", "--no-track"])
    assert_one_line_error(code, err)
    assert "nope.csv" in err
    assert not (tmp_path / "b").exists()
