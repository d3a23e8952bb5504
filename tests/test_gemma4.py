"""Gemma 4's language model (sliding and full layers of their own shapes, the MoE beside the MLP): graph, config."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import predict_model_run
from hybridperf.errors import InputError
from hybridperf.graphs import build_graph, load_config

SMALL = {"model_type": "gemma4_text", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 32, "num_global_key_value_heads": 1,
         "attention_k_eq_v": True, "sliding_window": 4, "hidden_size_per_layer_input": 0, "vocab_size": 100,
         "max_position_embeddings": 512, "final_logit_softcapping": 30.0}
MOE = {**SMALL, "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 32}
SHARED_CONFIGS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "aiconfigurator" / "model_configs"


def _per_layer(cfg, kind, mode, dtype):
    """Kernels of one more `kind` layer (the last layer is full attention, as Gemma4TextConfig forces)."""
    def n(layers):
        types = [kind] * (layers - 1) + ["full_attention"] if kind != "full_attention" else ["full_attention"] * layers
        g = build_graph({**cfg, "num_hidden_layers": len(types), "layer_types": types}, 2, 8, mode, dtype=dtype)
        return int(g.kernel_table()["count"].sum())
    return n(3) - n(2)


@pytest.mark.parametrize("cfg,kind,mode,fp32,bf16", [
    (SMALL, "sliding_attention", "inf", 74, 96), (SMALL, "sliding_attention", "decode", 72, 94),
    (SMALL, "full_attention", "inf", 73, 95), (SMALL, "full_attention", "decode", 71, 93),
    ({**SMALL, "attention_k_eq_v": False}, "full_attention", "inf", 74, 96),
    (MOE, "sliding_attention", "inf", 123, 158), (MOE, "full_attention", "decode", 120, 155)])
def test_layers_launch_what_hf_eager_launches(cfg, kind, mode, fp32, bf16):
    """TorchDispatchMode on transformers 5.24's eager Gemma 4 (`python -m experiments.gpu.graph_trace`, `HYBRID`):
    nine-kernel norms (seven without a scale), the full layers' keys doubling as values (one GEMM fewer), the MoE's
    two extra norms on each side, its router and grouped experts."""
    assert _per_layer(cfg, kind, mode, "fp32") == fp32
    assert _per_layer(cfg, kind, mode, "bf16") == bf16


def test_full_layers_have_their_own_shapes_and_cache():
    """A full layer's q/k GEMMs are `global_head_dim` wide with `num_global_key_value_heads`; a decode step's sliding
    layers read their window only; the cache holds each type's own width (the last layer forced full)."""
    cfg = load_config({**SMALL, "num_hidden_layers": 4, "layer_types": ["sliding_attention"] * 4})
    assert cfg.raw["layer_types"] == ["sliding_attention"] * 3 + ["full_attention"]
    g = build_graph(cfg, 2, 16, "decode", dtype="bf16")
    t = g.kernel_table()
    k_full = t[(t["block"] == "layer") & (t["name"] == "k_proj")].iloc[0]
    k_slide = t[(t["block"] == "sliding_layer") & (t["name"] == "k_proj")].iloc[0]
    assert (k_full["K"], k_slide["K"]) == (1 * 32, 2 * 16)
    assert not ((t["block"] == "layer") & (t["name"] == "v_proj")).any()
    qk = t[t["name"] == "attn.qk"].set_index("block")
    assert (qk.loc["layer", "K"], qk.loc["sliding_layer", "K"]) == (17, 4)
    # bf16 x batch x (one full layer: 17 tokens of k and v, 1 head of 32; three sliding ones: their 4-token window
    # of 2 heads of 16)
    assert g._kv_cache_bytes() == pytest.approx(2 * 2 * (1 * 17 * 2 * 1 * 32 + 3 * 4 * 2 * 2 * 16))


#: a small Gemma 4 E-model: per-layer inputs, the last two of six layers reading earlier layers' keys and values
SMALL_E = {**SMALL, "attention_k_eq_v": False, "hidden_size_per_layer_input": 16, "vocab_size_per_layer_input": 100,
           "num_kv_shared_layers": 2, "use_double_wide_mlp": True, "num_hidden_layers": 6,
           "layer_types": ["sliding_attention", "full_attention"] * 3}


@pytest.mark.parametrize("mode,dtype,own,shared,outside", [
    ("inf", "bf16", 110, 85, 62), ("inf", "fp32", 85, 65, 52), ("decode", "bf16", 108, 83, 77),
    ("decode", "fp32", 83, 63, 64)])
def test_small_models_gate_per_layer_inputs_and_share_keys(mode, dtype, own, shared, outside):
    """E2B/E4B-style: each layer gates its per-layer input in (14 kernels), the KV-shared layers compute no keys or
    values and fill no cache (25 fewer), the per-layer inputs cost 15 kernels before the layers (13 in fp32). Per
    layer as TorchDispatchMode counts transformers 5.24 (eager); the whole forwards: 687 / 535 (inference bf16 /
    fp32) and 676 / 524 kernels (decode) traced, 672 / 522 and 675 / 522 here (the mask and position bookkeeping
    before the layers is counted short, as for every family: 15 / 13 kernels in a prefill, 1 / 2 in a decode step)."""
    t = build_graph(SMALL_E, 2, 8, mode, dtype=dtype, attn="eager").kernel_table()
    per_block = t.groupby("block").size()
    assert (per_block["layer"], per_block["sliding_layer"]) == (own, own)
    assert (per_block["shared_layer"], per_block["shared_sliding_layer"]) == (shared, shared)
    assert per_block["embeddings"] + per_block["head"] == outside
    gate = t[(t["block"] == "shared_layer") & (t["name"] == "gate_proj")].iloc[0]
    assert gate["K"] == 2 * 128  # use_double_wide_mlp: the shared layers' MLP twice as wide
    cfg = load_config(SMALL_E)
    widths = build_graph(cfg, 2, 8, "decode").kernel_table()
    assert not widths["name"].str.endswith("cache_k")[widths["block"].str.startswith("shared")].any()


@pytest.mark.parametrize("bad,needle", [({"num_kv_shared_layers": 3, "layer_types": ["sliding_attention"] * 3
                                         + ["full_attention"] * 3, "num_hidden_layers": 6}, "earlier layer"),
                                        ({"use_bidirectional_attention": "all"}, "bidirectional"),
                                        ({"layer_types": ["full_attention"]}, "layer_types"),
                                        ({"num_global_key_value_heads": 3}, "multiple")])
def test_what_is_not_modelled_is_refused(bad, needle):
    with pytest.raises(InputError, match=needle):
        load_config({**SMALL, "num_hidden_layers": 4, **bad})
    with pytest.raises(InputError, match="not modelled"):
        build_graph({**SMALL, "num_hidden_layers": 4}, 2, 8, "train")
    assert load_config({"model_type": "gemma4", "text_config": {**SMALL, "num_hidden_layers": 6}}).layers == 6
    assert load_config({**SMALL, "num_hidden_layers": 4, "hidden_size_per_layer_input": None}).raw[
        "hidden_size_per_layer_input"] == 0  # null: no per-layer inputs, as transformers reads it


@pytest.mark.parametrize("mode", ["inf", "decode"])
def test_predict_model_cli(tmp_path, mode):
    predict_model_run(tmp_path, {**MOE, "num_hidden_layers": 6, "dtype": "bfloat16"},
                      "--batch", 2, "--seq", 64, "--mode", mode, "--device", "B200")


@pytest.mark.skipif(not SHARED_CONFIGS.is_dir(), reason="needs ../shared/datasets (aiconfigurator's model configs)")
def test_released_configs_build():
    moe = load_config(SHARED_CONFIGS / "google--gemma-4-26B-A4B_config.json")
    assert (moe.layers, moe.num_experts, moe.experts_per_token, moe.sliding_window) == (30, 128, 8, 1024)
    dense = load_config(SHARED_CONFIGS / "nvidia--Gemma-4-31B-IT-NVFP4_config.json")
    assert (dense.layers, dense.raw["global_kv_heads"], dense.raw["global_head_dim"]) == (60, 4, 512)
    assert build_graph(dense, 1, 64, "decode", dtype="bf16").kernel_table()["count"].sum() > 0
