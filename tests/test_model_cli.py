"""`hybridperf predict-model` through typer's CliRunner."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hybridperf.cli.app import app

TINY = Path(__file__).resolve().parent / "data" / "tiny_gpt2_config.json"
runner = CliRunner()


def _run(*args):
    return runner.invoke(app, ["predict-model", *map(str, args)])


def _last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def test_json_last_line_inf():
    r = _run("--config", TINY, "--batch", 2, "--seq", 128, "--mode", "inf", "--device", "H100-SXM", "--json",
             "--prior-only")
    assert r.exit_code == 0, r.output
    out = _last_json(r.stdout)
    assert set(out) == {"e2e_ms", "lo_ms", "hi_ms", "fw_ms", "bw_ms"}
    assert out["bw_ms"] == 0 and out["lo_ms"] <= out["e2e_ms"] <= out["hi_ms"]


def test_json_train_with_breakdown():
    r = _run("--config", TINY, "--batch", 2, "--seq", 128, "--mode", "train", "--device", "NVIDIA L4", "--json",
             "--breakdown", "--prior-only")
    assert r.exit_code == 0, r.output
    out = _last_json(r.stdout)
    assert out["bw_ms"] > 0
    assert out["e2e_ms"] == pytest.approx(out["fw_ms"] + out["bw_ms"], rel=1e-3)


def test_device_json_spec(tmp_path):
    spec = {"Device": "Foo GPU", "Dev_Mem": 16, "Mem_Bw": 900, "Num_Sm": 80, "Core_Per_SM": 64, "Freq": 1530,
            "SingleFLOPs": 15700, "L2Cache": 6}
    p = tmp_path / "foo.json"
    p.write_text(json.dumps(spec))
    r = _run("--config", TINY, "--batch", 1, "--seq", 64, "--device", p, "--json", "--prior-only")
    assert r.exit_code == 0, r.output
    assert _last_json(r.stdout)["e2e_ms"] > 0


def test_human_output():
    r = _run("--config", TINY, "--batch", 1, "--seq", 64, "--device", "A100-40GB", "--prior-only")
    assert r.exit_code == 0 and "e2e" in r.stdout


@pytest.mark.parametrize("args", [
    ("--config", "does_not_exist.json", "--batch", 1, "--seq", 64, "--device", "H100"),
    ("--config", TINY, "--batch", 0, "--seq", 64, "--device", "H100"),
    ("--config", TINY, "--batch", 1, "--seq", 64, "--device", "No Such GPU"),
    ("--config", TINY, "--batch", 1, "--seq", 64, "--mode", "eval", "--device", "H100"),
    ("--config", TINY, "--batch", 1, "--seq", 100000, "--device", "H100"),
    ("--config", TINY, "--batch", 1, "--seq", 64, "--mode", "train", "--device", "H100", "--fused"),
    ("--config", TINY, "--batch", 4, "--seq", 64, "--mode", "train", "--device", "DGX-H100", "--dp", 2, "--fused"),
])
def test_bad_input_is_an_error(args):
    r = _run(*args, "--json", "--prior-only")
    assert r.exit_code != 0


def test_more_tokens_than_a_shape_holds_names_the_options():
    r = _run("--config", TINY, "--batch", 10 ** 9, "--seq", 8192, "--device", "H100", "--prior-only")
    assert r.exit_code != 0 and "--batch x --seq must be at most 2^40 tokens" in str(r.exception)


def test_fused_inference_json():
    base = ("--config", TINY, "--batch", 4, "--seq", 128, "--device", "H100-SXM", "--json", "--prior-only")
    eager, fused = _run(*base), _run(*base, "--fused")
    assert eager.exit_code == 0 and fused.exit_code == 0, fused.output
    assert _last_json(fused.stdout)["e2e_ms"] < _last_json(eager.stdout)["e2e_ms"]


def test_malformed_and_unsupported_config(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    assert _run("--config", bad, "--batch", 1, "--seq", 8, "--device", "H100", "--prior-only").exit_code != 0
    unsup = tmp_path / "llama.json"
    unsup.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    assert _run("--config", unsup, "--batch", 1, "--seq", 8, "--device", "H100", "--prior-only").exit_code != 0


def test_one_line_error_through_main(tmp_path):
    """The console entry point prints one line on stderr and exits 2."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "hybridperf", "predict-model", "--config", str(tmp_path / "x.json"),
                        "--batch", "1", "--seq", "8", "--device", "H100", "--json"], capture_output=True, text=True)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:")


def test_missing_model_bundle_is_an_error(tmp_path):
    r = _run("--config", TINY, "--batch", 1, "--seq", 8, "--device", "H100", "--model-bundle", tmp_path / "nope")
    assert r.exit_code != 0


def test_out_of_memory_run_warns_on_stderr_and_still_predicts(tmp_path):
    big = {"model_type": "gpt2", "n_embd": 2560, "n_head": 32, "n_layer": 32, "vocab_size": 50257, "n_positions": 2048}
    cfg = tmp_path / "big_gpt.json"
    cfg.write_text(json.dumps(big))
    r = _run("--config", cfg, "--batch", 8, "--seq", 2048, "--mode", "train", "--device", "NVIDIA L4", "--json",
             "--prior-only")
    assert r.exit_code == 0, r.output
    assert "would not fit" in r.stderr and "24.2 GB" in r.stderr  # 23,040 MiB: ECC takes 1/16 of the 24 GiB
    assert _last_json(r.stdout)["e2e_ms"] > 0
    small = _run("--config", TINY, "--batch", 2, "--seq", 128, "--mode", "train", "--device", "NVIDIA L4",
                 "--json", "--prior-only")
    assert "would not fit" not in small.stderr and "near capacity" not in small.stderr
    plain = _run("--config", TINY, "--batch", 2, "--seq", 128, "--mode", "train", "--device", "NVIDIA L4",
                 "--prior-only")
    assert "memory ~" in plain.stdout


def test_run_near_device_memory_warns_of_allocator_pressure(tmp_path):
    """A training step that fills ~90% of the device is predicted, with a near-capacity warning."""
    from hybridperf.devices import get_device
    from hybridperf.graphs import build_graph
    from hybridperf.graphs.memory import OVERFLOW_FRACTION, PRESSURE_FRACTION

    cfg = tmp_path / "gpt.json"
    cfg.write_text(json.dumps({"model_type": "gpt2", "n_embd": 1280, "n_head": 20, "n_layer": 40,
                               "vocab_size": 50257, "n_positions": 1024}))
    frac = build_graph(cfg, 1, 1024, "train").memory().fraction_of(get_device("NVIDIA L4"))
    assert PRESSURE_FRACTION <= frac <= OVERFLOW_FRACTION
    r = _run("--config", cfg, "--batch", 1, "--seq", 1024, "--mode", "train", "--device", "NVIDIA L4", "--json",
             "--prior-only", "--attn", "eager")  # eager attention keeps its scores for the backward
    assert r.exit_code == 0, r.output
    assert "near capacity" in r.stderr and "would not fit" not in r.stderr


def test_inference_memory_holds_the_kv_cache_and_the_largest_op():
    """A causal LM's inference forward returns its keys and values (HF's use_cache); the rest of what is
    live is the largest op's inputs and output. Measured on a lent H100 (RESULTS section 8): GPT-2-Large
    at batch 16 peaks at 12.65 GB, 6.0 of them the cache."""
    from hybridperf.graphs import build_graph

    cfg = {**json.loads(TINY.read_text()), "vocab_size": 20000}  # the logits are the largest tensor
    h, L, V = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"]
    B, S = 2, 128
    m = build_graph(cfg, B, S, "inf").memory()
    kv = 2 * L * B * S * h * 4
    logits = B * S * (h + V) * 4  # the LM head's input and output
    assert m.activations == pytest.approx((kv + logits) / 1e9)
    off = build_graph({**cfg, "use_cache": False}, B, S, "inf").memory()
    assert off.activations == pytest.approx(logits / 1e9)
    bert = {"model_type": "bert", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
            "intermediate_size": 256, "vocab_size": 100, "max_position_embeddings": 512}
    scores = 2 * 4 * 512 * 512 * 4  # a softmax over (B x heads x S, S) reads and writes the scores
    assert build_graph(bert, 2, 512, "inf").memory().activations == pytest.approx(2 * scores / 1e9)


def test_memory_estimate_counts_parameters_once():
    """GPT-2's tied LM head is the embedding table: weights = the model's parameters, counted once."""
    from hybridperf.graphs import build_graph

    cfg = json.loads(TINY.read_text())
    h, L, V, P = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"], cfg["n_positions"]
    per_layer = 12 * h * h + 13 * h  # qkv, proj, fc, proj weights and biases + 2 LayerNorms
    params = L * per_layer + V * h + P * h + 2 * h
    m = build_graph(TINY, 2, 128, "inf").memory()
    assert m.weights == pytest.approx(params * 4 / 1e9) and m.grads == 0
    t = build_graph(TINY, 2, 128, "train").memory()
    assert t.grads == t.weights and t.activations > m.activations
    assert t.total == pytest.approx(t.weights + t.grads + t.activations)


@pytest.mark.parametrize("fields,expect", [({"torch_dtype": "bfloat16"}, "bf16"), ({"dtype": "float16"}, "fp16"),
                                           ({"torch_dtype": "half"}, "fp16"), ({}, "fp32"),
                                           ({"torch_dtype": "auto"}, "fp32")])
def test_without_dtype_the_model_is_built_in_the_configs_dtype(tmp_path, fields, expect):
    """transformers 5's from_config builds a Hub config in its dtype/torch_dtype (bf16 for most LLMs)."""
    from hybridperf.graphs.config import built_dtype

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**json.loads(TINY.read_text()), **fields}))
    assert built_dtype(cfg)[0] == expect
    args = ("--config", cfg, "--batch", 2, "--seq", 128, "--mode", "inf", "--device", "H100-SXM", "--json",
            "--prior-only")
    default, cast = _run(*args), _run(*args, "--dtype", expect)
    assert default.exit_code == 0 and cast.exit_code == 0, default.output
    assert _last_json(default.stdout) == _last_json(cast.stdout)
    assert f"{expect} model (" in default.stderr and f"{expect} model (" not in cast.stderr


def test_only_the_top_level_dtype_counts_and_an_unpriced_one_is_refused(tmp_path):
    """from_config applies the outer config's dtype to a multimodal config's text_config; float64 is no dtype
    predict-model prices (a one-line error, not a silent fp32)."""
    from hybridperf.graphs.config import built_dtype

    text = {"model_type": "gemma3_text", "hidden_size": 64}
    assert built_dtype({"model_type": "gemma3", "torch_dtype": "bfloat16", "text_config": text})[0] == "bf16"
    assert built_dtype({"model_type": "gemma3", "text_config": {**text, "dtype": "float16"}})[0] == "fp32"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**json.loads(TINY.read_text()), "torch_dtype": "float64"}))
    r = _run("--config", cfg, "--batch", 2, "--seq", 128, "--device", "H100-SXM", "--json", "--prior-only")
    assert r.exit_code != 0 and "float64" in str(r.exception or r.output)
    ok = _run("--config", cfg, "--batch", 2, "--seq", 128, "--device", "H100-SXM", "--json", "--prior-only",
              "--dtype", "float16")
    assert ok.exit_code == 0, ok.output
