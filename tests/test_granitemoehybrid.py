"""Granite 4.0 (Mamba-2 and attention layers, each with a MoE beside a shared MLP): graph, config, CLI."""
from __future__ import annotations

import pytest
from conftest import predict_model_run
from hybridperf.errors import InputError
from hybridperf.graphs import build_graph, load_config

SMALL = {"model_type": "granitemoehybrid", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 32, "shared_intermediate_size": 48, "num_local_experts": 4, "num_experts_per_tok": 2,
         "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_n_groups": 2, "mamba_d_state": 8, "mamba_d_conv": 4,
         "mamba_expand": 2, "mamba_chunk_size": 8, "vocab_size": 100, "max_position_embeddings": 512,
         "embedding_multiplier": 12.0, "logits_scaling": 8.0, "residual_multiplier": 0.22}


def _per_layer(kind, mode, dtype, seq=8, **extra):
    other = "full_attention" if kind == "linear_attention" else "linear_attention"

    def n(types):
        cfg = {**SMALL, **extra, "num_hidden_layers": len(types), "layer_types": types}
        return int(build_graph(cfg, 2, seq, mode, dtype=dtype).kernel_table()["count"].sum())
    return n([other, kind, kind]) - n([other, kind])


@pytest.mark.parametrize("kind,mode,seq,extra,fp32,bf16", [
    ("linear_attention", "inf", 8, {}, 114, 128), ("linear_attention", "inf", 20, {}, 117, 131),
    ("linear_attention", "inf", 3, {}, 115, 129), ("linear_attention", "decode", 8, {}, 70, 82),
    ("full_attention", "inf", 8, {}, 55, 63), ("full_attention", "decode", 8, {}, 53, 61),
    ("linear_attention", "inf", 8, {"num_local_experts": 0}, 94, 106),
    ("full_attention", "inf", 8, {"num_local_experts": 0, "position_embedding_type": "rope"}, 45, 51)])
def test_layers_launch_what_hf_eager_launches(kind, mode, seq, extra, fp32, bf16):
    """TorchDispatchMode on transformers 5.24's eager GraniteMoeHybrid (`python -m experiments.gpu.graph_trace`,
    `HYBRID`): Nemotron-H's Mamba-2 mixer (its conv state padded first below the conv's width), Llama's norms, the
    router's top-k softmax, gated experts and the shared MLP, the residual multipliers; RoPE only when asked for."""
    assert _per_layer(kind, mode, "fp32", seq, **extra) == fp32
    assert _per_layer(kind, mode, "bf16", seq, **extra) == bf16


def test_config_names_memory_and_refusals():
    cfg = load_config({**SMALL, "num_hidden_layers": 4, "layer_types": ["mamba", "mamba", "attention", "mamba"]})
    assert cfg.raw["blocks"] == ["mamba", "mamba", "attention", "mamba"]
    assert (cfg.raw["mamba_num_heads"], cfg.raw["mamba_head_dim"], cfg.raw["chunk_size"]) == (4, 32, 8)
    assert load_config({**SMALL, "num_hidden_layers": 2, "mamba_d_head": "auto"}).raw["mamba_head_dim"] == 32
    g = build_graph(cfg, 2, 16, "decode", dtype="bf16")
    # one attention layer's keys and values (17 tokens) and three Mamba layers' fp32 state and conv state, per sequence
    kv = 2 * 17 * 2 * 2 * 16 * 2
    states = 2 * 3 * (4 * 32 * 8 * 4 + (128 + 2 * 2 * 8) * 4 * 2)
    assert g._kv_cache_bytes() == pytest.approx(kv + states)
    for bad, needle in (({"layer_types": ["mamba"]}, "layer_types"), ({"mamba_d_head": 30}, "mamba_expand"),
                        ({"num_experts_per_tok": 9}, "exceeds")):
        with pytest.raises(InputError, match=needle):
            load_config({**SMALL, "num_hidden_layers": 2, **bad})
    with pytest.raises(InputError, match="not modelled"):
        build_graph(cfg, 2, 16, "train")


@pytest.mark.parametrize("mode", ["inf", "decode"])
def test_predict_model_cli(tmp_path, mode):
    predict_model_run(tmp_path, {**SMALL, "num_hidden_layers": 4, "dtype": "bfloat16",
                                 "layer_types": ["mamba", "mamba", "mamba", "attention"]},
                      "--batch", 2, "--seq", 300, "--mode", mode, "--device", "L40S")
