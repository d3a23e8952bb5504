"""Memory-saving training: activation recomputation (`--recompute`) and ZeRO sharding (`--zero`)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import assert_one_line_error, run_cli

from hybridperf.devices import get_device
from hybridperf.errors import InputError
from hybridperf.graphs import build_graph, predict_model
from hybridperf.graphs.memory import checkpoint_bytes, layer_saved_bytes, outside_saved_bytes
from hybridperf.graphs.parallel import predict_parallel
from hybridperf.predictor import Predictor

GPT2 = {"model_type": "gpt2", "n_embd": 256, "n_head": 4, "n_layer": 4, "vocab_size": 1000, "n_positions": 512,
        "activation_function": "gelu_new"}
DEV = "NVIDIA A100-SXM4-80GB"


def test_recompute_reruns_each_layers_forward_and_nothing_else():
    plain = build_graph(GPT2, 2, 128, "train").kernel_table()
    rc = build_graph(GPT2, 2, 128, "train", recompute=True).kernel_table()
    again = rc[rc["phase"] == "rc"].drop(columns="phase").reset_index(drop=True)
    layer_fw = plain[(plain["phase"] == "fw") & (plain["block"] == "layer")].drop(columns="phase")
    assert len(again) > 0
    assert again.equals(layer_fw.reset_index(drop=True))
    # every other phase is unchanged
    assert rc[rc["phase"] != "rc"].reset_index(drop=True).equals(plain)


def test_recompute_adds_the_layers_forward_time_to_the_backward():
    pred = Predictor.prior_only()
    a = predict_model(GPT2, 2, 128, "train", DEV, pred, attn="eager")
    b = predict_model(GPT2, 2, 128, "train", DEV, pred, recompute=True, attn="eager")
    k = a.kernels
    layer_fw = float(k.loc[(k["phase"] == "fw") & (k["block"] == "layer"), "total_ms"].sum()) * np.exp(a.log_bias)
    assert b.fw_ms == pytest.approx(a.fw_ms)
    assert b.bw_ms == pytest.approx(a.bw_ms + layer_fw, rel=1e-9)
    assert "rc" in b.breakdown().columns and "rc" not in a.breakdown().columns


def test_recompute_keeps_only_each_layers_input():
    g = build_graph(GPT2, 2, 128, "train", recompute=True)
    full = build_graph(GPT2, 2, 128, "train").memory()
    h, ffn, heads, v, layers = 256, 1024, 4, 1000, 4
    want = (layers * checkpoint_bytes(h, 2, 128) + layer_saved_bytes("gpt2", h, ffn, heads, 2, 128)
            + outside_saved_bytes("gpt2", h, v, 2, 128)) / 1e9
    mem = g.memory()
    assert mem.activations == pytest.approx(want)
    assert mem.activations < full.activations
    assert mem.weights == full.weights and mem.grads == full.grads


def test_recompute_is_for_training_only(monkeypatch, capsys, tmp_path):
    with pytest.raises(InputError, match="training"):
        build_graph(GPT2, 1, 64, "inf", recompute=True)
    cfg = tmp_path / "gpt2.json"
    cfg.write_text(json.dumps(GPT2))
    code, err = run_cli(monkeypatch, capsys, ["predict-model", "--config", cfg, "--batch", 1, "--seq", 64,
                                              "--device", DEV, "--recompute", "--prior-only"])
    assert_one_line_error(code, err)


def test_parallel_recompute_matches_one_gpu_and_shrinks_stage_memory():
    pred = Predictor.prior_only()
    one = predict_model(GPT2, 4, 128, "train", DEV, pred, recompute=True, attn="eager").to_dict()
    par = predict_parallel(GPT2, 4, 128, "train", DEV, predictor=pred, recompute=True).result
    for key in ("e2e_ms", "fw_ms", "bw_ms"):
        assert par[key] == pytest.approx(one[key])
    plain = predict_parallel(GPT2, 4, 128, "train", "DGX-A100", pp=2, predictor=pred)
    rc = predict_parallel(GPT2, 4, 128, "train", "DGX-A100", pp=2, predictor=pred, recompute=True)
    assert rc.memory.activations < plain.memory.activations
    assert rc.result["bw_ms"] > plain.result["bw_ms"]
    assert rc.result["fw_ms"] == pytest.approx(plain.result["fw_ms"])
    assert get_device(DEV).mem_gb > rc.memory.total


# ---- ZeRO (`zero=1|2|3`, `--zero`) ------------------------------------------------------------------

def test_prefetched_gathers_hide_behind_the_previous_unit():
    from hybridperf.graphs.parallel_comm import _prefetched

    assert _prefetched([10, 10, 10], [1, 1, 1]) == pytest.approx(1.0)  # only the first gather shows
    assert _prefetched([10, 10, 10], [1, 1, 1], [2, 2, 2]) == pytest.approx(3.0)  # and the last scatter
    assert _prefetched([1, 1], [5, 5]) == pytest.approx(9.0)  # gathers longer than compute serialise


def _zero_runs(**kw):
    pred = Predictor.prior_only()
    return {z: predict_parallel(GPT2, 8, 128, "train", "DGX-A100", dp=4, predictor=pred, optimizer="adam", zero=z,
                                **kw) for z in (0, 1, 2, 3)}


def test_zero_shards_state_then_gradients_then_parameters():
    runs = _zero_runs()
    m = {z: r.memory for z, r in runs.items()}
    assert "zero_gather_ms" not in runs[0].result
    assert m[1].optimizer == pytest.approx(m[0].optimizer / 4) and m[1].grads == m[0].grads
    assert m[2].grads == pytest.approx(m[0].grads / 4) and m[2].weights == m[0].weights
    assert m[3].weights < m[0].weights and m[3].grads == pytest.approx(m[2].grads)
    assert m[0].total > m[1].total > m[2].total > m[3].total


def test_zero_components_add_up_and_the_step_runs_on_a_slice():
    runs = _zero_runs()
    for z, r in runs.items():
        res = r.result
        assert r.components()["ms"].sum() == pytest.approx(r.ms, rel=1e-9)
        assert res["fw_ms"] + res["bw_ms"] + res["opt_ms"] == pytest.approx(r.ms)
        if z:
            assert res["zero_gather_ms"] > 0
    step = {z: r.components().set_index("component").loc["optimizer step", "ms"] for z, r in runs.items()}
    assert step[1] < step[0] and step[1] == pytest.approx(step[2])
    # ZeRO-1/2 gather the updated parameters after the step; ZeRO-3 gathers them in the forward instead
    assert runs[1].result["opt_ms"] == pytest.approx(step[1] + runs[1].result["zero_gather_ms"])
    assert runs[3].result["fw_ms"] > runs[0].result["fw_ms"]


def test_zero_one_runs_with_pipelines():
    pred = Predictor.prior_only()
    r = predict_parallel(GPT2, 8, 128, "train", "DGX-A100", dp=2, pp=2, predictor=pred, optimizer="adam", zero=1)
    assert r.components()["ms"].sum() == pytest.approx(r.ms, rel=1e-9)


@pytest.mark.parametrize("args", [["--dp", 4, "--zero", 2],  # no optimizer
                                  ["--dp", 4, "--zero", 4, "--optimizer", "adam"],
                                  ["--zero", 1, "--optimizer", "adam"],  # no dp
                                  ["--dp", 2, "--pp", 2, "--zero", 3, "--optimizer", "adam"]])
def test_zero_bad_combinations_are_one_line_errors(monkeypatch, capsys, tmp_path, args):
    cfg = tmp_path / "gpt2.json"
    cfg.write_text(json.dumps(GPT2))
    code, err = run_cli(monkeypatch, capsys, ["predict-model", "--config", cfg, "--batch", 8, "--seq", 64, "--mode",
                                              "train", "--device", "DGX-A100", "--prior-only", *args])
    assert_one_line_error(code, err)
