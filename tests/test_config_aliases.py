"""Configs that wrap or rename a supported architecture are read as it: a vision-language model's text-only
forward is its language model (`text_config`), and Kimi-K2 is DeepSeek-V3's architecture under another name."""
from __future__ import annotations

import pytest

from hybridperf.errors import InputError
from hybridperf.graphs.config import config_from_dict
from hybridperf.graphs.kernels import build_graph

QWEN3 = {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 1000,
         "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "tie_word_embeddings": False}


def _rows(cfg) -> int:
    return len(build_graph(cfg, 2, 64, "inf", "bf16").kernel_table())


def test_a_vision_language_config_is_its_language_model():
    vl = {"model_type": "qwen3_vl", "text_config": {**QWEN3, "model_type": "qwen3_vl_text"},
          "vision_config": {"depth": 4}}
    assert config_from_dict(vl) == config_from_dict(QWEN3)
    assert _rows(config_from_dict(vl)) == _rows(config_from_dict(QWEN3))
    with pytest.raises(InputError, match="text_config"):
        config_from_dict({"model_type": "qwen3_vl"})


def test_mistral3_is_its_mistral_language_model():
    """Mistral Small 3.x: transformers' Mistral3ForConditionalGeneration runs, on text alone, exactly the kernels
    of its Mistral (TorchDispatchMode, transformers 5.24: 42 a layer and 40 outside in both)."""
    mistral = {**QWEN3, "model_type": "mistral"}
    m3 = {"model_type": "mistral3", "text_config": mistral, "vision_config": {"model_type": "pixtral"}}
    assert config_from_dict(m3) == config_from_dict(mistral)
    assert _rows(config_from_dict(m3)) == _rows(config_from_dict(mistral))
    # Ministral 3's language model is its own (its layers scale q: 49 kernels a layer, not 42)
    assert config_from_dict({**m3, "text_config": {**mistral, "model_type": "ministral3"}}).family == "ministral3"
    with pytest.raises(InputError, match="language model is 'llama'"):
        config_from_dict({**m3, "text_config": {**mistral, "model_type": "llama"}})


def test_mimo_is_read_as_qwen2():
    """MiMo-7B (remote code) is Qwen2's decoder plus multi-token-prediction layers a plain forward does not run."""
    qwen2 = {**QWEN3, "model_type": "qwen2"}
    assert config_from_dict({**qwen2, "model_type": "mimo", "num_nextn_predict_layers": 1}).family == "qwen2"


def test_kimi_k2_is_read_as_deepseek_v3():
    ds = {"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
          "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000,
          "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
          "q_lora_rank": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
          "max_position_embeddings": 4096}
    assert config_from_dict({**ds, "model_type": "kimi_k2"}) == config_from_dict(ds)
    # GLM-4.7-Flash: DeepSeek-V3's layers, its dense ones first by `mlp_layer_types` (traced: 95 kernels a MoE layer)
    glm = {**ds, "model_type": "glm4_moe_lite", "num_hidden_layers": 4,
           "mlp_layer_types": ["dense"] * 2 + ["sparse"] * 2}
    assert config_from_dict(glm) == config_from_dict({**ds, "num_hidden_layers": 4, "first_k_dense_replace": 2})
    assert config_from_dict({**glm, "mlp_layer_types": None}).sparse_layers == 3  # the first layer dense by default
    with pytest.raises(InputError, match="mlp_layer_types"):
        config_from_dict({**glm, "mlp_layer_types": ["sparse", "dense", "sparse", "sparse"]})
    # Kimi-K2.5 wraps a Kimi-K2 language model (`text_config`) beside its vision tower
    wrapped = config_from_dict({"model_type": "kimi_k25", "text_config": {**ds, "model_type": "kimi_k2"}})
    assert (wrapped.family, wrapped.layers, wrapped.num_experts) == ("deepseek_v3", 2, 8)
