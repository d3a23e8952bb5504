"""Calibrating whole-model composition to measured runs (`hybridperf.graphs.measured_runs`,
`predict-model --measured-runs`)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from hybridperf.cli.app import app
from hybridperf.errors import InputError
from hybridperf.graphs import predict_model
from hybridperf.graphs.measured_runs import (
    SIGMA_RUN,
    SIGMA_SCALE,
    calibrate_from_runs,
    fit_posterior,
    read_runs,
)
from hybridperf.predictor import Predictor

TINY = Path(__file__).resolve().parent / "data" / "tiny_gpt2_config.json"
DEVICE = "NVIDIA H100 80GB HBM3"


def _runs_csv(tmp_path, rows, name="runs.csv") -> Path:
    p = tmp_path / name
    pd.DataFrame(rows).to_csv(p, index=False)
    return p


def _zero_shot(batch, seq, mode="inf") -> float:
    return predict_model(TINY, batch, seq, mode, DEVICE, Predictor.prior_only(), attn="eager").ms


def test_fit_recovers_a_device_factor_and_a_host_gap_from_many_runs():
    rng = np.random.default_rng(0)
    dev_ms = rng.uniform(0.5, 200, 40)
    launches = rng.uniform(100, 4000, 40)
    meas = 1.4 * dev_ms + 0.003 * launches  # a 1.4x slower GPU on a host with 3 us launches
    th, cov = fit_posterior(dev_ms, launches, meas, np.zeros(40), 1.0, 0.009, sigma_run=0.01)
    assert np.exp(th[0]) == pytest.approx(1.4, rel=0.02)
    assert 0.009 * np.exp(th[1]) == pytest.approx(0.003, rel=0.1)
    assert np.all(np.linalg.eigvalsh(cov) > 0)


def test_a_run_that_matches_the_zero_shot_prediction_changes_nothing():
    th, _ = fit_posterior([100.0], [500.0], [100.0 + 0.009 * 500], [0.0], 1.0, 0.009)
    assert np.allclose(th, 0.0, atol=1e-9)


def test_one_run_moves_the_prediction_part_of_the_way_by_the_prior_weights():
    # a run dominated by device time, 30% slower than predicted: the log factor moves by the Gaussian
    # posterior weight sigma_scale^2 / (sigma_scale^2 + sigma_run^2)
    th, _ = fit_posterior([1000.0], [1.0], [1300.0 + 0.009], [0.0], 1.0, 0.009)
    w = SIGMA_SCALE ** 2 / (SIGMA_SCALE ** 2 + SIGMA_RUN ** 2)
    assert th[0] == pytest.approx(w * np.log(1.3), rel=1e-3)
    assert 0 < th[0] < np.log(1.3)


def test_calibrated_predictions_follow_the_runs_and_their_interval_narrows(tmp_path):
    p = Predictor.prior_only()
    slow = [{"config": str(TINY), "batch": b, "seq": 128, "mode": "inf", "latency_ms": 1.5 * _zero_shot(b, 128)}
            for b in (1, 4, 16)]
    cal = calibrate_from_runs(_runs_csv(tmp_path, slow), DEVICE, p)
    zero = predict_model(TINY, 8, 128, "inf", DEVICE, p, attn="eager")
    after = predict_model(TINY, 8, 128, "inf", DEVICE, p, calibration=cal, attn="eager")
    assert 1.2 < after.ms / zero.ms < 1.6  # toward the runs, 1.5x the zero-shot prediction at b = 1, 4, 16
    assert after.lo_ms <= after.ms <= after.hi_ms
    assert np.log(after.hi_ms / after.lo_ms) < np.log(zero.hi_ms / zero.lo_ms)
    assert set(after.to_dict()) == {"e2e_ms", "lo_ms", "hi_ms", "fw_ms", "bw_ms"}


def test_a_calibration_is_refused_on_another_device_or_kernel_model(tmp_path):
    p = Predictor.prior_only()
    runs = _runs_csv(tmp_path, [{"config": str(TINY), "batch": 2, "seq": 64, "latency_ms": 1.0}])
    cal = calibrate_from_runs(runs, DEVICE, p)
    with pytest.raises(InputError, match="fitted to runs on"):
        predict_model(TINY, 2, 64, "inf", "NVIDIA L4", p, calibration=cal, attn="eager")
    with pytest.raises(InputError, match="same predictor"):
        predict_model(TINY, 2, 64, "inf", DEVICE, p, calibration={"bundle": cal["prior"]}, attn="eager")


@pytest.mark.parametrize("rows, match", [
    ([{"config": "tiny.json", "batch": 2, "seq": 64}], "missing column"),
    ([{"config": "tiny.json", "batch": 2, "seq": 64, "latency_ms": -1}], "runs.csv:2: latency_ms"),
    ([{"config": "tiny.json", "batch": 2, "seq": 64, "latency_ms": float("nan")}], "latency_ms"),
    ([{"config": "tiny.json", "batch": 0, "seq": 64, "latency_ms": 3}], "batch must be a positive integer"),
    ([{"config": "tiny.json", "batch": 2, "seq": 64, "latency_ms": 3, "mode": "eval"}], "mode must be"),
    ([{"config": "tiny.json", "batch": 2, "seq": 64, "latency_ms": 3, "fused": "maybe"}], "fused must be"),
    ([{"config": "nope.json", "batch": 2, "seq": 64, "latency_ms": 3}], "config file not found"),
])
def test_bad_runs_are_refused_with_file_and_line(tmp_path, rows, match):
    (tmp_path / "tiny.json").write_text(TINY.read_text())
    with pytest.raises(InputError, match=match):
        read_runs(_runs_csv(tmp_path, rows))


def test_runs_resolve_configs_next_to_the_csv_and_take_defaults(tmp_path):
    (tmp_path / "tiny.json").write_text(TINY.read_text())
    runs = read_runs(_runs_csv(tmp_path, [{"config": "tiny.json", "batch": 2, "seq": 64, "latency_ms": 3}]))
    r = runs.iloc[0]
    assert Path(r["config"]) == tmp_path / "tiny.json"
    assert (r["mode"], r["dtype"], r["fused"], r["recompute"], r["optimizer"]) == ("inf", "fp32", False, False, None)


def test_cli_measured_runs(tmp_path):
    runner = CliRunner()
    runs = _runs_csv(tmp_path, [{"config": str(TINY), "batch": 4, "seq": 128, "mode": "train",
                                 "latency_ms": 2.0 * _zero_shot(4, 128, "train")}])
    args = ["predict-model", "--config", str(TINY), "--batch", "4", "--seq", "128", "--mode", "train",
            "--device", DEVICE, "--json", "--prior-only"]
    zero = json.loads(runner.invoke(app, args).stdout.strip().splitlines()[-1])
    r = runner.invoke(app, [*args, "--measured-runs", str(runs)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(out) == {"e2e_ms", "lo_ms", "hi_ms", "fw_ms", "bw_ms"}
    assert 1.5 < out["e2e_ms"] / zero["e2e_ms"] < 2.0
    missing = runner.invoke(app, [*args, "--measured-runs", str(tmp_path / "none.csv")])
    assert missing.exit_code != 0 and "not found" in str(missing.exception)


def test_multi_gpu_step_uses_the_single_gpu_calibration(tmp_path):
    """Runs timed on one GPU calibrate the per-GPU compute of a dp x tp step on a node of that GPU."""
    runner = CliRunner()
    runs = _runs_csv(tmp_path, [{"config": str(TINY), "batch": 4, "seq": 128, "mode": "train",
                                 "latency_ms": 2.0 * _zero_shot(4, 128, "train")}])
    args = ["predict-model", "--config", str(TINY), "--batch", "8", "--seq", "128", "--mode", "train",
            "--device", "DGX-H100", "--dp", "2", "--tp", "2", "--json", "--prior-only"]
    zero = json.loads(runner.invoke(app, args).stdout.strip().splitlines()[-1])
    r = runner.invoke(app, [*args, "--measured-runs", str(runs)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["compute_ms"] > 1.4 * zero["compute_ms"]
    assert out["comm_ms"] == pytest.approx(zero["comm_ms"])  # collectives are not what the runs measured


def test_runs_may_override_the_layer_count_on_some_rows_only(tmp_path):
    p = Predictor.prior_only()
    runs = read_runs(_runs_csv(tmp_path, [
        {"config": str(TINY), "batch": 2, "seq": 64, "latency_ms": 1.0, "layers": None},
        {"config": str(TINY), "batch": 2, "seq": 64, "latency_ms": 1.0, "layers": 8}]))
    from hybridperf.graphs.measured_runs import run_terms

    terms = run_terms(runs, DEVICE, p)
    assert terms["device_ms"].iloc[1] > terms["device_ms"].iloc[0]  # more layers, more kernels
    assert terms["launches"].iloc[1] > terms["launches"].iloc[0]


def test_a_run_without_a_dtype_takes_its_configs_as_predict_model_does(tmp_path):
    cfg = tmp_path / "bf16.json"
    cfg.write_text(json.dumps({**json.loads(TINY.read_text()), "torch_dtype": "bfloat16"}))
    runs = read_runs(_runs_csv(tmp_path, [{"config": str(cfg), "batch": 2, "seq": 64, "latency_ms": 1.0},
                                          {"config": str(cfg), "batch": 2, "seq": 64, "latency_ms": 1.0, "amp": True},
                                          {"config": str(TINY), "batch": 2, "seq": 64, "latency_ms": 1.0}]))
    assert runs["dtype"].tolist() == ["bf16", "fp32", "fp32"]
