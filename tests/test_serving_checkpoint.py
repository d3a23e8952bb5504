"""A quantized checkpoint's own precision as predict-serving's default (`serving.checkpoint`)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hybridperf.cli.app import app
from hybridperf.serving.checkpoint import checkpoint_kv_dtype, checkpoint_precision

LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
         "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256}
MOE = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4,
       "num_hidden_layers": 48, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
       "num_experts_per_tok": 8, "vocab_size": 151936, "head_dim": 128}
INT4 = {"config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}, "targets": ["Linear"]}},
        "ignore": ["lm_head", "re:.*self_attn.*"], "quant_method": "compressed-tensors"}


def _read(tmp_path, cfg, beside=None, name="org--model"):
    path = tmp_path / f"{name}_config.json"
    path.write_text(json.dumps(cfg))
    if beside is not None:
        (tmp_path / f"{name}_hf_quant_config.json").write_text(json.dumps({"quantization": beside}))
    return checkpoint_precision(path, cfg, "num_experts" in cfg)


@pytest.mark.parametrize("cfg,beside,expected", [
    ({**LLAMA, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}, None, ("fp8", "")),
    (LLAMA, {"quant_algo": "FP8", "exclude_modules": ["lm_head"]}, ("fp8", "")),  # ModelOpt's file beside the config
    (MOE, {"quant_algo": "NVFP4", "exclude_modules": ["lm_head", "model.layers.0.self_attn*"]}, ("bf16", "fp4")),
    (MOE, {"quant_algo": "NVFP4", "exclude_modules": ["lm_head", "model.layers.0.mlp.gate"]}, ("fp4", "")),
    ({**MOE, "quantization_config": INT4}, None, ("bf16", "int4")),
    ({**MOE, "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}},
     None, ("bf16", "fp4")),
    ({**MOE, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "moe_quant_algo": "NVFP4",
                                     "quantized_layers": {"layers.0.mlp.experts": {"quant_algo": "NVFP4"}}}},
     None, ("fp8", "fp4")),
    (MOE, {"quant_algo": "MIXED_PRECISION", "quantized_layers": {"model.layers.0.mlp.experts.0.up_proj": {
        "quant_algo": "NVFP4"}, "model.layers.0.self_attn.q_proj": {"quant_algo": "MXFP8"}}}, ("fp8", "fp4")),
    ({**LLAMA, "quantization_config": {"quant_method": "awq", "bits": 4}}, None, ("int4", "")),
    # GLM-5-FP8: only norms, the router and the attention's indexer left out: attention is FP8 too
    ({**MOE, "quantization_config": {"quant_method": "fp8", "modules_to_not_convert": [
        "model.layers.0.self_attn.indexer.k_norm", "model.layers.0.self_attn.indexers_proj", "lm_head"]}},
     None, ("fp8", "")),
    # NVFP4 weights over 16-bit activations (compressed-tensors' NVFP4A16) are 4-bit weight-only
    ({**LLAMA, "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"g": {
        "weights": {"num_bits": 4, "type": "float"}, "input_activations": None}}}}, None, ("int4", ""))])
def test_checkpoint_formats(tmp_path, cfg, beside, expected):
    got = _read(tmp_path, cfg, beside)
    assert (got.precision, got.moe_precision) == expected


@pytest.mark.parametrize("cfg,beside", [
    (LLAMA, None),  # not quantized
    (LLAMA, {"quant_algo": "MIXED_PRECISION", "quantized_layers": {  # a dense model in two formats
        "model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"}, "model.layers.0.mlp.up_proj": {
            "quant_algo": "W4A16_NVFP4"}}}),
    ({**LLAMA, "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}, None),
    (LLAMA, {"quant_algo": "NVFP4", "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]})])  # 16-bit attention
def test_unread_or_absent_quantization_gives_none(tmp_path, cfg, beside):
    assert _read(tmp_path, cfg, beside) is None


def _serve(path, *extra):
    r = CliRunner().invoke(app, ["predict-serving", "--config", str(path), "--device", "H100", "--engine", "vllm",
                                 "--isl", "1024", "--osl", "128", "--concurrency", "8", "--json", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_predict_serving_serves_an_fp8_checkpoint_in_fp8_by_default(tmp_path):
    path = tmp_path / "org--llama-fp8_config.json"
    path.write_text(json.dumps({**LLAMA, "quantization_config": {"quant_method": "fp8"}}))
    auto, note = _serve(path)
    assert "--precision fp8, the checkpoint's" in note
    assert auto == _serve(path, "--precision", "fp8")[0]
    assert _serve(path, "--precision", "bf16")[0]["tpot_ms"] > auto["tpot_ms"]  # an explicit precision wins
    mixed = tmp_path / "org--mixed_config.json"
    mixed.write_text(json.dumps(LLAMA))
    (tmp_path / "org--mixed_hf_quant_config.json").write_text(json.dumps({"quantization": {
        "quant_algo": "MIXED_PRECISION", "quantized_layers": {"a.self_attn.q_proj": {"quant_algo": "FP8"},
                                                              "a.mlp.up_proj": {"quant_algo": "W4A16_NVFP4"}}}}))
    plain, note = _serve(mixed)
    assert "priced in bf16" in note and plain == _serve(mixed, "--precision", "bf16")[0]


def test_a_refused_run_of_a_quantized_checkpoint_is_one_error_line(tmp_path, monkeypatch, capsys):
    """The checkpoint's notes are said once the run is predicted: a refused one prints its error alone."""
    from conftest import assert_one_line_error, run_cli

    path = tmp_path / "org--llama-fp8_config.json"
    path.write_text(json.dumps({**LLAMA, "quantization_config": {"quant_method": "fp8"}}))
    assert_one_line_error(*run_cli(monkeypatch, capsys, [
        "predict-serving", "--config", path, "--device", "h100_sxm", "--engine", "vllm", "--isl", "128", "--osl", "16",
        "--concurrency", "1", "--pp", str(LLAMA["num_hidden_layers"] + 1)]))


def test_a_checkpoint_stating_an_fp8_kv_cache_is_served_with_one(tmp_path):
    """ModelOpt's `kv_cache_quant_algo` FP8 (or compressed-tensors' 8-bit float `kv_cache_scheme`) is what the engines'
    `--kv-cache-dtype auto` runs: an NVFP4-experts checkpoint whose attention stays 16-bit gets an FP8 cache, which a
    long context's decode reads in half the time; --kv-dtype still wins."""
    nvfp4 = {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
             "exclude_modules": ["lm_head", "model.layers.0.self_attn*"]}
    path = tmp_path / "org--moe-nvfp4_config.json"
    path.write_text(json.dumps(MOE))
    (tmp_path / "org--moe-nvfp4_hf_quant_config.json").write_text(json.dumps({"quantization": nvfp4}))
    assert checkpoint_kv_dtype(path, MOE) == "fp8"
    ct = {**LLAMA, "quantization_config": {**INT4, "kv_cache_scheme": {"num_bits": 8, "type": "float"}}}
    assert checkpoint_kv_dtype(tmp_path / "x_config.json", ct) == "fp8"
    assert checkpoint_kv_dtype(tmp_path / "x_config.json", {**LLAMA, "quantization_config": INT4}) is None
    args = ("--isl", "8192", "--osl", "256")
    auto, note = _serve(path, *args)
    assert "--kv-dtype fp8, the checkpoint's" in note
    assert auto == _serve(path, *args, "--kv-dtype", "fp8")[0]
    assert _serve(path, *args, "--kv-dtype", "bf16")[0]["tpot_ms"] > auto["tpot_ms"]
