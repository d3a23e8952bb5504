"""`hybridperf sweep-serving` and `serving.sweep`: the grid, the SLA pick, bad input, and the Ray executor
(on a local Ray; skipped where the `ray` extra is not installed) giving the in-process points."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from conftest import assert_one_line_error, run_cli
from hybridperf.cli.app import app
from hybridperf.errors import InputError
from hybridperf.serving.sweep import sweep

LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
         "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256}
GRID = dict(tps=(1, 2), concurrencies=(1, 16))


@pytest.fixture()
def config(tmp_path):
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(LLAMA))
    return path


def test_cli_writes_every_point_and_prints_the_best(tmp_path, config):
    out = tmp_path / "sweep.csv"
    r = CliRunner().invoke(app, ["sweep-serving", "--config", str(config), "--devices", "h100_sxm,b200_sxm",
                                 "--engine", "vllm", "--isl", "1024", "--osl", "256", "--tp", "1,2",
                                 "--concurrency", "1,16,64", "--tpot-sla-ms", "15", "--output", str(out)])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out)
    assert len(df) == 12 and set(df["device"]) == {"h100_sxm", "b200_sxm"}
    fit = df[df["reason"].isna()]
    assert len(fit) and (fit[["ttft_ms", "tpot_ms", "tokens_per_s_per_gpu"]] > 0).all().all()
    for k in ("ttft", "tpot"):
        assert (fit[f"{k}_lo_ms"] <= fit[f"{k}_ms"]).all() and (fit[f"{k}_ms"] <= fit[f"{k}_hi_ms"]).all()
    ok = fit[fit["meets_sla"]]
    top = ok.loc[ok["tokens_per_s_per_gpu"].idxmax()]
    assert f"best: {top['device']} tp {top['tp']} concurrency {top['concurrency']}" in r.output
    assert (ok["tpot_hi_ms"] <= 15.0).all()


@pytest.mark.parametrize("args, msg", [
    (["--tp", "1,x"], "--tp takes"), (["--concurrency", "0"], "--concurrency takes"),
    (["--concurrency", "1,,2"], "--concurrency takes"), (["--executor", "spark"], "executor must be one of"),
    (["--tpot-sla-ms", "0.001"], "meets the SLA"), (["--tpot-sla-ms", "nan"], "TPOT limit (--tpot-sla-ms) must be"),
    (["--engine", "bogus"], "unknown engine"), (["--osl", "1"], "osl must be"), (["--precision", "fp3"], "precision"),
    (["--devices", "nosuchgpu"], "nosuchgpu"), (["--tp", "3"], "no configuration of the sweep fits (1 of 1 points:"),
])
def test_cli_bad_input_is_one_error_line(monkeypatch, capsys, config, args, msg):
    code, err = run_cli(monkeypatch, capsys, ["sweep-serving", "--config", config, "--devices", "h100_sxm",
                                              "--engine", "vllm", "--isl", "1024", "--osl", "256", "--tp", "1",
                                              "--concurrency", "1", *args])
    assert_one_line_error(code, err)
    assert msg in err


def test_unknown_executor_and_missing_config_refused(tmp_path):
    with pytest.raises(InputError, match="executor"):
        sweep(LLAMA, ["h100_sxm"], "vllm", 1024, 256, executor="dask", **GRID)
    with pytest.raises(InputError, match="not found"):
        sweep(tmp_path / "missing.json", ["h100_sxm"], "vllm", 1024, 256, **GRID)


def test_ray_executor_gives_the_local_points():
    ray = pytest.importorskip("ray", reason="the `ray` extra is not installed")
    local = sweep(LLAMA, ["h100_sxm", "Tesla T4"], "vllm", 1024, 256, **GRID)
    remote = sweep(LLAMA, ["h100_sxm", "Tesla T4"], "vllm", 1024, 256, executor="ray", **GRID)
    assert not ray.is_initialized()  # the Ray it started is shut down
    assert [p.reason for p in remote] == [p.reason for p in local]
    assert all("weights need" in p.reason for p in remote[4:6])  # 16 GB of bf16 weights on one 16 GB T4
    for a, b in zip(local, remote):
        if not a.reason:
            assert a == b and math.isfinite(a.tpot_ms)
