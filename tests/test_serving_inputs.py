"""Serving inputs refused rather than run as something else: a request longer than the model's positions, and
(`--rows`) a count column that is 0, negative or fractional, or an unknown mode."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from conftest import assert_one_line_error, run_cli
from hybridperf.errors import InputError
from hybridperf.serving import predict_serving
from hybridperf.serving.api import check_run
from hybridperf.serving.arch import arch_from_dict
from hybridperf.serving.calibration import Calibration, EngineCalibration
from hybridperf.serving.engines import ENGINES
from hybridperf.serving.rows import predict_rows

LLAMA3 = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
          "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192}
#: Llama-3.1: rope scaling from 8,192 positions, max_position_embeddings already the extended length
LLAMA31 = {**LLAMA3, "max_position_embeddings": 131072,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
CAL = Calibration(engines={e: EngineCalibration(gpu_scale=1.5, eager_ms=0.02, graph_ms=0.005, ttft_ms=10.0,
                                                wave_weight=1.0) for e in ENGINES},
                  log_quantiles={"ttft": (-0.4, 0.6), "tpot": (-0.2, 0.3)}, provenance="test")


@pytest.fixture
def llama3(tmp_path):
    path = tmp_path / "llama3_8b.json"
    path.write_text(json.dumps(LLAMA3))
    return path


def test_request_beyond_the_positions_is_refused():
    with pytest.raises(InputError, match="isl \\+ osl = 9000 exceeds the model's maximum of 8192 positions"):
        predict_serving(LLAMA3, "h100_sxm", "vllm", 8000, 1000, concurrency=1, calibration=CAL)
    assert predict_serving(LLAMA3, "h100_sxm", "vllm", 7000, 1192, concurrency=1, calibration=CAL).ttft.ms > 0


def test_rope_scaled_config_takes_its_stated_positions():
    """Llama-3.1's 131,072 positions, not rope scaling's original 8,192."""
    arch = arch_from_dict(LLAMA31)
    assert arch.max_positions == 131072
    check_run(arch, 100_000, 1000, "bf16")
    with pytest.raises(InputError, match="131072 positions"):
        check_run(arch, 131_000, 1000, "bf16")


def test_families_outside_the_graph_parser_read_their_positions_too():
    nemo = {"model_type": "nemotron_h", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 64, "vocab_size": 1000, "intermediate_size": 512, "mamba_num_heads": 8,
            "mamba_head_dim": 32, "n_groups": 2, "ssm_state_size": 16, "num_hidden_layers": 2,
            "hybrid_override_pattern": "M*"}
    assert arch_from_dict({**nemo, "max_position_embeddings": 4096}).max_positions == 4096
    assert arch_from_dict(nemo).max_positions == 0  # none stated: no limit
    with pytest.raises(InputError, match="max_position_embeddings"):
        arch_from_dict({**nemo, "max_position_embeddings": 0})


@pytest.mark.parametrize("isl, osl", [(100000, 1000), (8000, 1000)])
def test_cli_refuses_a_request_beyond_the_positions(monkeypatch, capsys, llama3, isl, osl):
    code, err = run_cli(monkeypatch, capsys, ["predict-serving", "--config", llama3, "--device", "h100_sxm",
                                              "--engine", "vllm", "--isl", isl, "--osl", osl, "--concurrency", 1,
                                              "--json"])
    assert_one_line_error(code, err)
    assert f"isl + osl = {isl + osl} exceeds the model's maximum of 8192 positions" in err


def test_sweep_refuses_a_request_beyond_the_positions_once(monkeypatch, capsys, llama3):
    code, err = run_cli(monkeypatch, capsys, ["sweep-serving", "--config", llama3, "--devices", "h100_sxm",
                                              "--engine", "vllm", "--isl", 8000, "--osl", 1000])
    assert_one_line_error(code, err)
    assert "exceeds the model's maximum of 8192 positions" in err and "points" not in err


def test_rows_beyond_the_positions_get_a_reason(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "meta-llama--Meta-Llama-3-8B_config.json").write_text(json.dumps(LLAMA3))
    row = {"backend": "vllm", "model_path": "meta-llama/Meta-Llama-3-8B", "system": "h100_sxm", "mode": "agg",
           "tp_size": 1, "batch_size": 1}
    out = predict_rows(pd.DataFrame([{**row, "isl": 1024, "osl": 128}, {**row, "isl": 8000, "osl": 1000}]),
                       configs, CAL)
    assert out.reason.iloc[0] == "" and out.pred_ttft_ms.iloc[0] > 0
    assert out.reason.iloc[1] == "isl + osl = 9000 exceeds the model's maximum of 8192 positions"
    assert math.isnan(out.pred_ttft_ms.iloc[1])
