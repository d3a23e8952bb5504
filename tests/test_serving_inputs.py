"""Serving inputs refused rather than run as something else: a request longer than the model's positions,
(`--rows`) a count column that is 0, negative or fractional, or an unknown mode, and an acceptance rate without
speculative decoding."""
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


@pytest.mark.parametrize("rope, limit", [
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072),  # Qwen3's long mode
    ({"type": "linear", "factor": 2.0}, 16384),
    ({"rope_type": "dynamic", "factor": 4.0}, 32768),
    ({"rope_type": "default"}, 8192),
])
def test_rope_scaling_stretches_the_positions_as_vllm_does(rope, limit):
    """vLLM's max_model_len: yarn's original length x factor, linear and dynamic the positions x factor."""
    assert arch_from_dict({**LLAMA3, "rope_scaling": rope}).max_positions == limit


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


def test_rows_with_a_config_folder_holding_no_configs_is_an_error(monkeypatch, capsys, tmp_path):
    # the folder above model_configs, say: every row would be refused, so say so once instead of writing OUT.csv
    (tmp_path / "README.md").write_text("not a config")
    rows = tmp_path / "runs.csv"
    pd.DataFrame([AGG]).to_csv(rows, index=False)
    out = tmp_path / "out.csv"
    code, err = run_cli(monkeypatch, capsys, ["predict-serving", "--rows", rows, "--configs", tmp_path,
                                              "--output", out])
    assert_one_line_error(code, err)
    assert "no model configs" in err and not out.exists()


@pytest.mark.parametrize("extra", [["--device", "h200_sxm"], ["--json"], ["--tp", "8"], ["--concurrency", "4"],
                                   ["--acceptance", "0.9"]])
def test_rows_with_a_one_run_option_is_an_error_not_ignored(monkeypatch, capsys, configs, tmp_path, extra):
    rows = tmp_path / "runs.csv"
    pd.DataFrame([AGG]).to_csv(rows, index=False)
    out = tmp_path / "out.csv"
    code, err = run_cli(monkeypatch, capsys, ["predict-serving", "--rows", rows, "--configs", configs,
                                              "--output", out, *extra])
    assert_one_line_error(code, err)
    assert extra[0] in err and "each row states its own" in err and not out.exists()


@pytest.mark.parametrize("extra", [["--output", "out.csv"], ["--configs", "."]])
def test_one_run_with_a_rows_only_option_is_an_error_not_ignored(monkeypatch, capsys, configs, tmp_path, extra):
    cfg = configs / "meta-llama--Meta-Llama-3-8B_config.json"
    code, err = run_cli(monkeypatch, capsys, ["predict-serving", "--config", cfg, "--device", "h100_sxm", "--engine",
                                              "vllm", "--isl", "128", "--osl", "16", "--concurrency", "1", *extra])
    assert_one_line_error(code, err)
    assert extra[0] in err and "only works with --rows" in err and not (tmp_path / "out.csv").exists()


@pytest.fixture
def configs(tmp_path):
    d = tmp_path / "configs"
    d.mkdir()
    (d / "meta-llama--Meta-Llama-3-8B_config.json").write_text(json.dumps(LLAMA3))
    return d


AGG = {"backend": "vllm", "model_path": "meta-llama/Meta-Llama-3-8B", "system": "h100_sxm", "mode": "agg",
       "isl": 1024, "osl": 128, "tp_size": 1, "batch_size": 4}
DISAGG = {**AGG, "mode": "disagg", "tp_size": None, "batch_size": None, "prefill_tp_size": 1, "decode_tp_size": 1,
          "prefill_num_workers": 1, "decode_num_workers": 1, "decode_batch_size": 4}


@pytest.mark.parametrize("row, reason", [
    ({**AGG, "tp_size": 0}, "tp_size must be a positive integer, got 0"),
    ({**AGG, "tp_size": -2}, "tp_size must be a positive integer, got -2"),
    ({**AGG, "batch_size": 0}, "batch_size must be a positive integer, got 0"),
    ({**AGG, "pp_size": 1.5}, "pp_size must be a positive integer, got 1.5"),
    ({**AGG, "osl": 100.5}, "osl must be a positive integer, got 100.5"),
    ({**AGG, "isl": 0}, "isl must be a positive integer, got 0"),
    ({**AGG, "attention_dp_size": 0}, "attention_dp_size must be a positive integer, got 0"),
    ({**AGG, "moe_ep_size": -1}, "moe_ep_size must be a positive integer or 0 (not given), got -1"),
    ({**AGG, "mode": "weird"}, "mode must be one of agg, disagg, got 'weird'"),
    ({**DISAGG, "decode_num_workers": 0}, "decode_num_workers must be a positive integer, got 0"),
    ({**DISAGG, "prefill_tp_size": 0}, "prefill_tp_size must be a positive integer, got 0"),
])
def test_bad_count_or_mode_leaves_the_row_unpredicted(configs, row, reason):
    out = predict_rows(pd.DataFrame([AGG, row, DISAGG]), configs, CAL)
    assert list(out.reason) == ["", reason, ""]
    assert math.isnan(out.pred_tpot_ms.iloc[1]) and (out.pred_tpot_ms.iloc[[0, 2]] > 0).all()


def test_empty_cells_and_zero_moe_columns_keep_meaning_not_given(configs):
    """An agg row's empty prefill/decode columns, a disagg row's empty tp_size, an empty mode (agg), a mode in
    other case and spacing, and moe_tp_size/moe_ep_size 0 (how silicon_sample.csv writes a dense run) predict
    as their plain rows do."""
    plain = predict_rows(pd.DataFrame([AGG, DISAGG]), configs, CAL)
    blank = predict_rows(pd.DataFrame([{**AGG, "mode": None, "moe_tp_size": 0, "moe_ep_size": 0,
                                        "prefill_tp_size": float("nan")},
                                       {**DISAGG, "mode": " Disagg", "prefill_moe_tp_size": 0,
                                        "decode_moe_ep_size": 0}]), configs, CAL)
    assert list(blank.reason) == ["", ""]
    pd.testing.assert_series_equal(plain.pred_tpot_ms, blank.pred_tpot_ms)


def test_cli_rows_report_the_bad_row_and_predict_the_rest(monkeypatch, capsys, configs, tmp_path):
    from hybridperf.cli.app import main

    rows, out = tmp_path / "runs.csv", tmp_path / "out.csv"
    pd.DataFrame([AGG, {**AGG, "tp_size": 0}, DISAGG]).to_csv(rows, index=False)
    monkeypatch.setattr("sys.argv", ["hybridperf", "predict-serving", "--rows", str(rows), "--configs", str(configs),
                                     "--output", str(out)])
    main()
    assert "2 of 3 rows predicted" in capsys.readouterr().out
    got = pd.read_csv(out, keep_default_na=False)
    assert list(got.reason) == ["", "tp_size must be a positive integer, got 0", ""]


def test_acceptance_without_speculation_is_refused(monkeypatch, capsys, llama3):
    with pytest.raises(InputError, match="--acceptance 0.8 applies only with --spec-tokens > 0"):
        predict_serving(LLAMA3, "h100_sxm", "vllm", 1024, 128, concurrency=1, acceptance=0.8, calibration=CAL)
    plain = predict_serving(LLAMA3, "h100_sxm", "vllm", 1024, 128, concurrency=1, calibration=CAL)
    assert predict_serving(LLAMA3, "h100_sxm", "vllm", 1024, 128, concurrency=1, acceptance=0.7,
                           calibration=CAL) == plain  # the default, given explicitly
    assert predict_serving(LLAMA3, "h100_sxm", "vllm", 1024, 128, concurrency=1, spec_tokens=2, acceptance=0.8,
                           calibration=CAL).tpot.ms < plain.tpot.ms
    code, err = run_cli(monkeypatch, capsys, ["predict-serving", "--config", llama3, "--device", "h100_sxm",
                                              "--engine", "vllm", "--isl", 1024, "--osl", 128, "--concurrency", 1,
                                              "--acceptance", 0.8])
    assert_one_line_error(code, err)
    assert "--spec-tokens" in err


def test_rows_state_their_speculation_or_leave_an_mtp_checkpoints_open(configs):
    """`spec_tokens` and `acceptance` price a row's speculative decoding; a row of an MTP checkpoint that leaves
    them empty may have drafted (silicon_sample.csv does not say), so its TPOT interval reaches down to an
    MTP run's, its prediction and the other bounds those of a run without; a checkpoint without MTP layers,
    or a row stating spec_tokens 0, keeps its interval."""
    (configs / "acme--Llama-MTP_config.json").write_text(json.dumps({**LLAMA3, "num_nextn_predict_layers": 1}))
    mtp = {**AGG, "model_path": "acme/Llama-MTP"}
    out = predict_rows(pd.DataFrame([AGG, mtp, {**mtp, "spec_tokens": 0}, {**mtp, "spec_tokens": 3},
                                     {**mtp, "spec_tokens": 2, "acceptance": 0.9}]), configs, CAL)
    assert list(out.reason) == [""] * 5
    plain, unstated, none, three, two = (out.iloc[i] for i in range(5))
    for col in ("pred_ttft_ms", "pred_tpot_ms", "pred_tpot_hi_ms"):
        assert unstated[col] == none[col] == plain[col]  # the MTP layers change nothing but that bound
    assert plain.pred_tpot_lo_ms == none.pred_tpot_lo_ms
    assert unstated.pred_tpot_lo_ms < 0.8 * none.pred_tpot_lo_ms
    assert unstated.pred_tpot_lo_ms == pytest.approx(three.pred_tpot_lo_ms)  # UNSTATED_MTP: three drafts at 0.7
    assert three.pred_tpot_ms < 0.8 * none.pred_tpot_ms and two.pred_tpot_ms < three.pred_tpot_ms
    assert (out.pred_tpot_lo_ms <= out.pred_tpot_ms).all()


@pytest.mark.parametrize("cells, reason", [
    ({"spec_tokens": 1.5}, "spec_tokens must be a non-negative integer, got 1.5"),
    ({"spec_tokens": -1}, "spec_tokens must be a non-negative integer, got -1"),
    ({"spec_tokens": 40}, "speculative tokens must be an integer in [0, 16], got 40"),
    ({"spec_tokens": 2, "acceptance": 1.2}, "acceptance must be in (0, 1), got 1.2"),
    ({"acceptance": 0.8}, "acceptance is given without spec_tokens"),
])
def test_bad_speculation_columns_leave_the_row_unpredicted(configs, cells, reason):
    out = predict_rows(pd.DataFrame([AGG, {**AGG, **cells}]), configs, CAL)
    assert list(out.reason) == ["", reason]
