"""Llama 4 (`graphs.families.llama4`): kernels per layer kind as transformers 5.24 launches them, the wrapper config,
and what is refused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import predict_model_run

from hybridperf.errors import InputError
from hybridperf.graphs import build_graph, load_config

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "aiconfigurator" / "model_configs"
SMALL = {"model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 32, "intermediate_size_mlp": 128,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100,
         "max_position_embeddings": 512, "num_local_experts": 4, "num_experts_per_tok": 1, "attention_chunk_size": 16}
#: layer kinds as (RoPE, MoE) of every layer past the first, which is a RoPE MoE layer
KINDS = {"rope_moe": lambda n: ([1] * n, list(range(n))), "nope_moe": lambda n: ([1] + [0] * (n - 1), list(range(n))),
         "rope_dense": lambda n: ([1] * n, [0])}


def _counts(kind, mode, dtype, attn):
    """(kernels per layer of `kind`, kernels outside the layers) of a 2- and 3-layer model, batch 2, 8 tokens."""
    n = []
    for layers in (2, 3):
        rope, moe = KINDS[kind](layers)
        cfg = {**SMALL, "num_hidden_layers": layers, "no_rope_layers": rope, "moe_layers": moe, "use_cache": False}
        n.append(int(build_graph(cfg, 2, 8, mode, dtype=dtype, attn=attn).kernel_table()["count"].sum()))
    return n[1] - n[0], n[0] - 2 * (n[1] - n[0])


# TorchDispatchMode on Llama4ForCausalLM (transformers 5.24, CPU): (per layer, outside) of each kind; CPU SDPA takes
# grouped-query fp32 attention fused, where CUDA runs it as the math path's eager kernels, so those are not listed
TRACED = {("eager", "inf", "bf16"): {"rope_moe": (72, 47), "nope_moe": (63, 74), "rope_dense": (56, 63)},
          ("eager", "inf", "fp32"): {"rope_moe": (58, 44), "nope_moe": (56, 64), "rope_dense": (44, 58)},
          ("eager", "decode", "bf16"): {"rope_moe": (72, 40), "nope_moe": (63, 59), "rope_dense": (56, 56)},
          ("eager", "decode", "fp32"): {"rope_moe": (58, 37), "nope_moe": (56, 49), "rope_dense": (44, 51)},
          ("sdpa", "inf", "bf16"): {"rope_moe": (64, 27), "nope_moe": (55, 44), "rope_dense": (48, 43)},
          ("sdpa", "decode", "bf16"): {"rope_moe": (66, 20), "nope_moe": (57, 29), "rope_dense": (50, 36)}}


@pytest.mark.parametrize("attn,mode,dtype", list(TRACED))
def test_llama4_layers_launch_what_transformers_launches(attn, mode, dtype):
    """RoPE layers: complex RoPE in fp32 and L2 norms of q and k; NoPE layers: the query temperature; MoE layers: a
    sigmoid of the top-k logits, every expert over every token as two batched GEMMs, the shared expert; masks and
    positions before the layers (SDPA skips the masks)."""
    assert {kind: _counts(kind, mode, dtype, attn) for kind in KINDS} == TRACED[(attn, mode, dtype)]


def test_llama4_layer_kinds_weights_and_refusals(tmp_path):
    """Every fourth layer is a NoPE layer and every layer a MoE by default (Scout), every other with
    `interleave_moe_layer_step` 2 (Maverick); the experts' weights count once; a wrapper config is its language
    model; training and more keys than one attention chunk are refused in a line."""
    cfg = load_config({**SMALL, "num_hidden_layers": 8})
    assert cfg.raw["no_rope_layers"] == [1, 1, 1, 0, 1, 1, 1, 0] and cfg.raw["moe_layers"] == list(range(8))
    blocks = {b.name: b.count for b in build_graph({**SMALL, "num_hidden_layers": 8, "interleave_moe_layer_step": 2},
                                                    1, 8, dtype="bf16").blocks}
    assert blocks == {"embeddings": 1, "layer": 2, "nope_layer": 2, "dense_layer": 4, "head": 1}  # MoE: 1, 3, 5, 7
    wrapped = tmp_path / "llama4.json"
    wrapped.write_text(json.dumps({"model_type": "llama4", "text_config": {**SMALL, "num_hidden_layers": 4}}))
    assert load_config(wrapped).family == "llama4_text"
    g = build_graph({**SMALL, "num_hidden_layers": 4}, 1, 8, dtype="bf16")
    attention = 2 * 64 * 64 + 2 * 64 * 32 + 2 * 64  # q, o; k, v; the two norms
    moe = 64 * 4 + 4 * 64 * 64 + 4 * 32 * 64 + 3 * 64 * 32  # router, gate_up and down of 4 experts, shared expert
    assert g.memory().weights * 1e9 == pytest.approx((4 * (attention + moe) + 2 * 100 * 64 + 64) * 2)
    with pytest.raises(InputError, match="beyond one chunk"):
        build_graph({**SMALL, "num_hidden_layers": 4}, 1, 17, dtype="bf16")
    with pytest.raises(InputError, match="training"):
        build_graph({**SMALL, "num_hidden_layers": 4}, 1, 8, "train", dtype="bf16")


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/datasets/aiconfigurator/model_configs")
def test_llama4_scout_and_maverick_configs_build(tmp_path):
    for name in ("meta-llama--Llama-4-Scout-17B-16E-Instruct", "meta-llama--Llama-4-Maverick-17B-128E-Instruct"):
        cfg = json.loads((SHARED / f"{name}_config.json").read_text())
        predict_model_run(tmp_path, cfg, "--batch", "1", "--seq", "1024", "--mode", "decode", "--device", "H200",
                          "--dtype", "bf16")
