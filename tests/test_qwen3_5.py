"""Qwen3.5's hybrid decoder (Gated DeltaNet and gated full-attention layers): graph, config, CLI."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import predict_model_run
from hybridperf.errors import InputError
from hybridperf.graphs import build_graph, load_config

SMALL = {"model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "max_position_embeddings": 512,
         "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
         "linear_value_head_dim": 16}
MOE = {**SMALL, "model_type": "qwen3_5_moe_text", "num_experts": 4, "num_experts_per_tok": 2,
       "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48}
SHARED_CONFIGS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "aiconfigurator" / "model_configs"


def _kernels(cfg: dict, kind: str, layers: int, mode: str, dtype: str, seq: int) -> int:
    types = ["full_attention"] + [kind] * (layers - 1)
    g = build_graph({**cfg, "num_hidden_layers": layers, "layer_types": types}, 2, seq, mode, dtype=dtype)
    return int(g.kernel_table()["count"].sum())


def _per_layer(cfg, kind, mode, dtype, seq=8):
    return _kernels(cfg, kind, 3, mode, dtype, seq) - _kernels(cfg, kind, 2, mode, dtype, seq)


@pytest.mark.parametrize("cfg,kind,mode,seq,fp32,bf16", [
    (SMALL, "linear_attention", "inf", 8, 98, 114), (SMALL, "linear_attention", "inf", 130, 117, 133),
    (SMALL, "linear_attention", "decode", 8, 70, 87), (SMALL, "full_attention", "inf", 8, 64, 78),
    (SMALL, "full_attention", "decode", 8, 63, 77), (MOE, "linear_attention", "inf", 8, 123, 141),
    (MOE, "linear_attention", "decode", 8, 95, 114), (MOE, "full_attention", "inf", 130, 89, 105)])
def test_layers_launch_what_hf_eager_launches(cfg, kind, mode, seq, fp32, bf16):
    """Kernels per layer as TorchDispatchMode counts them on transformers 5.24's eager Qwen3.5 (its PyTorch gated
    delta rule; `python -m experiments.gpu.graph_trace`, `HYBRID`), with the cache an inference forward fills."""
    assert _per_layer(cfg, kind, mode, "fp32", seq) == fp32
    assert _per_layer(cfg, kind, mode, "bf16", seq) == bf16


def test_short_prefill_pads_the_conv_state_and_moe_always_normalises():
    """Fewer tokens than the conv's width: the cache pads them first (one kernel more, traced at 1 and 3 tokens);
    Qwen3.5-MoE's router normalises its top-k weights whatever `norm_topk_prob` says."""
    short = {s: _per_layer(SMALL, "linear_attention", "inf", "bf16", s) for s in (3, 4)}
    assert short[3] == short[4] + 1
    assert load_config({**MOE, "norm_topk_prob": False, "num_hidden_layers": 4}).raw["norm_topk_prob"] is True


def test_prefill_walks_the_sequence_in_chunks_of_64():
    per = {s: _per_layer(SMALL, "linear_attention", "inf", "bf16", s) for s in (64, 65, 128, 129)}
    assert per[65] - per[64] == 10  # a second chunk: nine kernels, and the output laid out again
    assert per[128] == per[65] and per[129] - per[128] == 9
    bmm = build_graph({**SMALL, "num_hidden_layers": 4}, 2, 200, "inf").kernel_table()
    reads = bmm[bmm["name"].str.startswith("chunk_state_read")]
    assert len(reads) == 4 and set(reads["B"]) == {2 * 4}  # 4 chunks, each over batch x value heads


def test_wrapper_defaults_and_blocks():
    """A multimodal config is read as its `text_config`; every fourth layer is full attention by default; only those
    layers cache keys and values."""
    text = {k: v for k, v in SMALL.items() if k != "model_type"}
    cfg = load_config({"model_type": "qwen3_5", "dtype": "bfloat16", "tie_word_embeddings": True, "text_config": {
        **text, "model_type": "qwen3_5_text", "num_hidden_layers": 8, "tie_word_embeddings": False}})
    assert cfg.family == "qwen3_5_text" and cfg.tied_embeddings and cfg.raw["dtype"] == "bfloat16"
    assert cfg.raw["layer_types"].count("full_attention") == 2
    g = build_graph(cfg, 2, 16, "decode", dtype="bf16")
    assert [(b.name, b.count) for b in g.blocks if b.kind == "layer"] == [("layer", 2), ("linear_layer", 6)]
    # batch x tokens x (k, v) x kv heads x head_dim x bytes x 2 full layers, and per sequence 6 linear layers' fp32
    # state (4 value heads x 16 x 16) and conv state (4 inputs of 2 x 2 x 16 + 4 x 16 channels, bf16)
    assert g._kv_cache_bytes() == pytest.approx(2 * 17 * 2 * 2 * 16 * 2 * 2 + 2 * 6 * (4 * 16 * 16 * 4 + 128 * 4 * 2))
    assert not load_config({**SMALL, "num_hidden_layers": 4}).tied_embeddings  # Qwen3_5TextConfig's default
    moe = load_config({"model_type": "qwen3_5_moe", "text_config": {**MOE, "num_hidden_layers": 4}})
    assert (moe.family, moe.num_experts, moe.experts_per_token, moe.shared_ffn) == ("qwen3_5_moe_text", 4, 2, 48)


@pytest.mark.parametrize("bad,needle", [
    ({"layer_types": ["full_attention"]}, "layer_types"), ({"linear_num_value_heads": 3}, "multiple"),
    ({"linear_key_head_dim": 0}, "linear_key_head_dim"), ({"num_key_value_heads": 3}, "multiple")])
def test_bad_configs_are_refused(bad, needle):
    with pytest.raises(InputError, match=needle):
        load_config({**SMALL, "num_hidden_layers": 4, **bad})


def test_training_and_a_wrapper_without_language_model_are_refused():
    with pytest.raises(InputError, match="not modelled"):
        build_graph({**SMALL, "num_hidden_layers": 4}, 2, 16, "train")
    with pytest.raises(InputError, match="text_config"):
        load_config({"model_type": "qwen3_5"})


@pytest.mark.parametrize("mode", ["inf", "decode"])
def test_predict_model_cli(tmp_path, mode):
    predict_model_run(tmp_path, {**SMALL, "num_hidden_layers": 8, "dtype": "bfloat16"},
                      "--batch", 2, "--seq", 300, "--mode", mode, "--device", "H100-SXM")


@pytest.mark.skipif(not SHARED_CONFIGS.is_dir(), reason="needs ../shared/datasets (aiconfigurator's model configs)")
def test_released_configs_build():
    """Qwen3.5-27B: 64 layers, every fourth full; Qwen3.5-35B-A3B: 40 MoE layers of 256 experts."""
    dense = load_config(SHARED_CONFIGS / "Qwen--Qwen3.5-27B_config.json")
    assert (dense.layers, dense.raw["layer_types"].count("full_attention"), dense.head_dim) == (64, 16, 256)
    moe = load_config(SHARED_CONFIGS / "Qwen--Qwen3.5-35B-A3B_config.json")
    assert (moe.layers, moe.num_experts, moe.experts_per_token) == (40, 256, 8)
    assert build_graph(moe, 1, 64, "decode", dtype="bf16").kernel_table()["count"].sum() > 0


def test_qwen3_next_reads_as_qwen3_5_moe():
    """Qwen3-Next's config lists no layer types and no output gate: every fourth layer full, its attention gated,
    in predict-model's graph and in serving (Qwen3-Next-80B-A3B's geometry: 80B weights, 36 linear layers)."""
    from hybridperf.serving.arch import arch_from_dict

    nxt = {"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16,
           "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 151936, "intermediate_size": 5120,
           "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
           "shared_expert_intermediate_size": 512, "full_attention_interval": 4, "linear_key_head_dim": 128,
           "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
           "max_position_embeddings": 262144}
    cfg = load_config(nxt)
    assert cfg.family == "qwen3_5_moe_text" and cfg.num_experts == 512 and cfg.raw["attn_output_gate"]
    assert cfg.raw["layer_types"][:4] == ["linear_attention"] * 3 + ["full_attention"]
    a = arch_from_dict(nxt, "qwen3_next")
    assert (a.linear_layers, a.kv_layers, a.q_gate, a.lin_v_heads) == (36, 12, True, 32)
    assert 79e9 < sum(a.params().values()) < 81e9
    assert build_graph({**nxt, "num_hidden_layers": 4}, 1, 64, "decode", dtype="bf16").kernel_table()["count"].sum() > 0
    with pytest.raises(InputError, match="decoder_sparse_step"):
        load_config({**nxt, "mlp_only_layers": [0]})

