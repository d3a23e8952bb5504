"""`--mode decode`: one generated token per sequence against a key/value cache (hybridperf.graphs.decode)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hybridperf.cli.app import app
from hybridperf.errors import InputError
from hybridperf.graphs import build_graph, predict_model
from hybridperf.graphs.config import kv_length, load_config
from hybridperf.predictor import Predictor

PRIOR = Predictor.prior_only()
DEV = "NVIDIA H100 80GB HBM3"
TINY = Path(__file__).resolve().parent / "data" / "tiny_gpt2_config.json"
#: the configurations of experiments/gpu/decode_trace.py (2 layers)
CONFIGS = {
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 512, "n_layer": 2},
    "gpt_neo": {"model_type": "gpt_neo", "hidden_size": 64, "num_heads": 4, "vocab_size": 100, "num_layers": 2,
                "max_position_embeddings": 512, "intermediate_size": 256,
                "attention_types": [[["global", "local"], 1]]},
    "opt": {"model_type": "opt", "hidden_size": 64, "ffn_dim": 128, "num_attention_heads": 4, "vocab_size": 100,
            "max_position_embeddings": 512, "word_embed_proj_dim": 64, "num_hidden_layers": 2},
    "llama_gqa": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 512,
                  "num_hidden_layers": 2},
    "llama_mha": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                  "num_key_value_heads": 4, "vocab_size": 100, "max_position_embeddings": 512,
                  "num_hidden_layers": 2},
}
#: kernels per layer and outside the layers of one decode step, counted with TorchDispatchMode on HF eager
#: models with a DynamicCache (torch 2.13, transformers 5.23; `python -m experiments.gpu.decode_trace`)
TRACED = {
    ("gpt2", "fp32"): (24, 17), ("gpt2", "bf16"): (24, 17),
    ("gpt_neo", "fp32"): (25, 17), ("gpt_neo", "bf16"): (28, 17),
    ("opt", "fp32"): (19, 21), ("opt", "bf16"): (21, 21),
    ("llama_gqa", "fp32"): (42, 27), ("llama_gqa", "bf16"): (48, 32),
    ("llama_mha", "fp32"): (40, 27), ("llama_mha", "bf16"): (46, 32),
}


@pytest.mark.parametrize("name,dtype", sorted(TRACED))
def test_decode_step_launches_the_traced_kernels(name, dtype):
    t = build_graph(CONFIGS[name], 2, 8, "decode", dtype=dtype).kernel_table()
    in_layer = t["block"] == "layer"
    assert (int(in_layer.sum()), int((~in_layer).sum())) == TRACED[(name, dtype)]
    assert set(t["phase"]) == {"fw"}


def test_decode_attention_reads_the_whole_cache_for_one_query():
    cfg = CONFIGS["llama_gqa"]
    t = build_graph(cfg, 3, 100, "decode").kernel_table().set_index("name")
    qk, av = t.loc["attn.qk"], t.loc["attn.av"]
    assert (qk["B"], qk["M"], qk["N"], qk["K"]) == (3 * 4, 1, 16, 101)  # batch x heads, one query, head_dim, kv
    assert (av["B"], av["M"], av["N"], av["K"]) == (3 * 4, 1, 101, 16)
    assert t.loc["attn.softmax", "H"] == 101
    # torch.cat copies the cache (2 kv heads) every step; repeat_kv writes it out for all 4 heads
    assert t.loc["attn.cache_k", "nbytes"] == 2 * 3 * 2 * 16 * 101 * 4
    assert t.loc["attn.repeat_k", "nbytes"] == 3 * (2 + 4) * 16 * 101 * 4
    assert "attn.repeat_k" not in build_graph(CONFIGS["llama_mha"], 3, 100, "decode").kernel_table()["name"].values
    assert t.loc["q_proj", "M"] == 3  # one row per sequence


def test_decode_latency_grows_with_context_and_batch_and_is_cheaper_than_prefill():
    big = {"model_type": "gpt2", "n_embd": 1024, "n_head": 16, "n_layer": 8, "vocab_size": 50257,
           "n_positions": 4096}
    step = {s: predict_model(big, 8, s, "decode", DEV, predictor=PRIOR, attn="eager").ms for s in (128, 1024, 4000)}
    assert step[128] < step[1024] < step[4000]
    assert predict_model(big, 32, 1024, "decode", DEV, predictor=PRIOR, attn="eager").ms > step[1024]
    r = predict_model(big, 8, 1024, "decode", DEV, predictor=PRIOR, attn="eager")
    assert r.bw_ms == 0 and r.lo_ms <= r.ms <= r.hi_ms
    assert r.ms < predict_model(big, 8, 1024, "inf", DEV, predictor=PRIOR, attn="eager").ms


def test_decode_memory_holds_the_cache_and_mistral_keeps_its_window():
    cfg = CONFIGS["llama_gqa"]
    g = build_graph(cfg, 4, 200, "decode", dtype="bf16")
    kv = 2 * 2 * 4 * 201 * 2 * 16 * 2  # K and V, layers, batch, tokens, kv heads x head_dim, bytes
    assert g.memory().activations * 1e9 >= kv
    mistral = {**cfg, "model_type": "mistral", "sliding_window": 64}
    assert kv_length(load_config(mistral), 200) == 64 and kv_length(load_config(mistral), 10) == 11
    assert kv_length(load_config(cfg), 200) == 201
    t = build_graph(mistral, 1, 200, "decode").kernel_table().set_index("name")
    assert t.loc["attn.qk", "K"] == 64


@pytest.mark.parametrize("config,kwargs,match", [
    ({"model_type": "bert", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
      "intermediate_size": 128, "vocab_size": 100}, {}, "causal LM"),
    (CONFIGS["gpt2"], {"fused": True}, "inference only"),
    (CONFIGS["gpt2"], {"seq": 512}, "seq \\+ 1 = 513 exceeds"),
    # an encoder beyond its positions: no length would make it decode, so that is what is said
    ({"model_type": "bert", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
      "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 512}, {"seq": 100_000}, "causal LM"),
])
def test_decode_refuses_what_it_does_not_model(config, kwargs, match):
    seq = kwargs.pop("seq", 16)
    with pytest.raises(InputError, match=match):
        build_graph(config, 1, seq, "decode", **kwargs)


def test_decode_through_the_cli():
    runner = CliRunner()
    base = ["predict-model", "--config", str(TINY), "--batch", "4", "--seq", "100", "--mode", "decode",
            "--device", "NVIDIA L4", "--prior-only"]
    r = runner.invoke(app, base + ["--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(out) == {"e2e_ms", "lo_ms", "hi_ms", "fw_ms", "bw_ms"} and out["e2e_ms"] > 0
    r = runner.invoke(app, base)
    assert r.exit_code == 0 and "tokens/s" in r.stdout
    r = runner.invoke(app, base + ["--tp", "2"])
    assert r.exit_code != 0 and "one GPU" in str(r.exception)


def test_a_host_bound_step_may_run_on_a_host_faster_or_slower_than_the_floor():
    """A tiny model's decode step is all host dispatch: its interval spans the hosts seen (HOST_FASTEST to
    HOST_SPREAD of the floor); a GPU-bound prefill keeps the kernels' own lower side."""
    from hybridperf.graphs.compose import HOST_FASTEST, HOST_SPREAD

    host = predict_model(CONFIGS["llama_gqa"], 1, 64, "decode", DEV, predictor=PRIOR, dtype="bf16",
                         cudnn_plans="cached")
    assert host.lo_ms / host.ms == pytest.approx(HOST_FASTEST, rel=0.02)
    assert host.hi_ms / host.ms == pytest.approx(HOST_SPREAD, rel=0.02)
    big = {"model_type": "gpt2", "n_embd": 1024, "n_head": 16, "n_layer": 8, "vocab_size": 50257,
           "n_positions": 4096}
    gpu = predict_model(big, 16, 2048, "inf", DEV, predictor=PRIOR, dtype="bf16")
    assert HOST_FASTEST + 0.05 < gpu.lo_ms / gpu.ms < 1.0 < gpu.hi_ms / gpu.ms < HOST_SPREAD
