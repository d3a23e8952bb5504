"""Nemotron-H's blocks (Mamba-2, attention, ReLU^2 MLP, MoE): graph, config, CLI."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import predict_model_run
from hybridperf.errors import InputError
from hybridperf.graphs import build_graph, load_config

SMALL = {"model_type": "nemotron_h", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "intermediate_size": 128, "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 8,
         "n_groups": 2, "conv_kernel": 4, "chunk_size": 8, "n_routed_experts": 4, "num_experts_per_tok": 2,
         "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 48, "vocab_size": 100,
         "max_position_embeddings": 512}
SHARED_CONFIGS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "aiconfigurator" / "model_configs"


def _per_block(kind, mode, dtype, seq=8, **extra):
    base = "M" if kind == "*" else "*"  # a model needs an attention block for its cache to know a length

    def n(pattern):
        cfg = {**SMALL, **extra, "num_hidden_layers": len(pattern), "hybrid_override_pattern": pattern}
        return int(build_graph(cfg, 2, seq, mode, dtype=dtype).kernel_table()["count"].sum())
    return n(base + 2 * kind) - n(base + kind)


@pytest.mark.parametrize("kind,mode,seq,fp32,bf16", [
    ("M", "inf", 8, 81, 92), ("M", "inf", 20, 84, 95), ("M", "decode", 8, 37, 46), ("*", "inf", 8, 22, 27),
    ("*", "decode", 8, 20, 25), ("-", "inf", 8, 11, 14), ("E", "inf", 20, 45, 51), ("E", "decode", 8, 45, 51)])
def test_blocks_launch_what_hf_eager_launches(kind, mode, seq, fp32, bf16):
    """TorchDispatchMode on transformers 5.24's eager Nemotron-H (PyTorch Mamba-2 path; `python -m
    experiments.gpu.graph_trace`, `NEMOTRON_H`): a prefill over several SSD chunks lays three einsum operands out
    again (92 -> 95); the MoE block routes with DeepSeek-V3's router of one group."""
    assert _per_block(kind, mode, "fp32", seq) == fp32
    assert _per_block(kind, mode, "bf16", seq) == bf16


def test_latent_moe_projects_into_and_out_of_the_experts_space():
    assert (_per_block("E", "inf", "fp32", moe_latent_size=16), _per_block("E", "inf", "bf16", moe_latent_size=16)) \
        == (47, 53)  # traced too
    t = build_graph({**SMALL, "hybrid_override_pattern": "*E", "num_hidden_layers": 2, "moe_latent_size": 16}, 2, 8,
                    "inf").kernel_table()
    up = t[t["name"] == "experts.up"].iloc[0]
    assert up["N"] == 16  # the experts read the 16-wide latent, not the 64-wide hidden state


def test_config_forms_memory_and_refusals():
    listed = load_config({**SMALL, "layers_block_type": ["mamba", "attention", "moe", "mlp"]})
    lettered = load_config({**SMALL, "hybrid_override_pattern": "M*E-"})
    assert listed.raw["blocks"] == lettered.raw["blocks"] and listed.layers == 4
    g = build_graph(lettered, 2, 16, "decode", dtype="bf16")
    assert [(b.name, b.count) for b in g.blocks if b.kind == "layer"] == [
        ("layer", 1), ("mamba_layer", 1), ("mlp_layer", 1), ("moe_layer", 1)]
    # one attention block's keys and values (17 tokens) and one Mamba block's fp32 state and conv state, per sequence
    kv = 2 * 17 * 2 * 2 * 16 * 2
    states = 2 * (4 * 16 * 8 * 4 + (4 * 16 + 2 * 2 * 8) * 4 * 2)
    assert g._kv_cache_bytes() == pytest.approx(kv + states)
    for bad, needle in (({"hybrid_override_pattern": "M*X"}, "hybrid_override_pattern"),
                        ({"hybrid_override_pattern": "M*", "num_hidden_layers": 3}, "lists 2 blocks"),
                        ({"hybrid_override_pattern": "M*", "mlp_hidden_act": "silu"}, "relu2"),
                        ({"hybrid_override_pattern": "M*", "n_groups": 3}, "multiple")):
        with pytest.raises(InputError, match=needle):
            load_config({**SMALL, **bad})
    with pytest.raises(InputError, match="not modelled"):
        build_graph(lettered, 2, 16, "train")


@pytest.mark.parametrize("mode", ["inf", "decode"])
def test_predict_model_cli(tmp_path, mode):
    predict_model_run(tmp_path, {**SMALL, "hybrid_override_pattern": "ME*ME-", "dtype": "bfloat16"},
                      "--batch", 2, "--seq", 300, "--mode", mode, "--device", "H100-SXM")


@pytest.mark.skipif(not SHARED_CONFIGS.is_dir(), reason="needs ../shared/datasets (aiconfigurator's model configs)")
def test_released_configs_build():
    nano = load_config(SHARED_CONFIGS / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json")
    assert (nano.layers, nano.raw["blocks"].count("mamba"), nano.num_experts) == (52, 23, 128)
    assert build_graph(nano, 1, 64, "decode", dtype="bf16").kernel_table()["count"].sum() > 0
