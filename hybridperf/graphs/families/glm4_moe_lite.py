"""GLM-4.7-Flash (`glm4_moe_lite`): DeepSeek-V3's layers (multi-head latent attention, a sigmoid-routed top-k MoE with
a shared expert) under GLM's defaults, its dense layers named by `mlp_layer_types` (the first one by default). It
parses into a DeepSeek-V3 `ModelConfig`, so `families.deepseek` builds it; transformers 5.24's eager code launches the
same kernels per layer (TorchDispatchMode, `experiments/gpu/graph_trace.py`)."""
from __future__ import annotations

from hybridperf.errors import InputError
from hybridperf.graphs.config import ModelConfig, config_from_dict
from hybridperf.graphs.families.deepseek import FAMILY as DEEPSEEK
from hybridperf.graphs.family import Family

#: Glm4MoeLiteConfig's defaults (transformers 5.24) where DeepseekV3Config's differ
DEFAULTS = {"q_lora_rank": 768, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 192,
            "v_head_dim": 256, "n_group": 1, "topk_group": 1, "n_routed_experts": 64, "num_experts_per_tok": 4,
            "moe_intermediate_size": 1536, "n_shared_experts": 1, "norm_topk_prob": True, "tie_word_embeddings": False}


def parse(d: dict, source: str) -> ModelConfig:
    """DeepSeek-V3's `ModelConfig` of a GLM-4.7-Flash config: its leading dense layers as `first_k_dense_replace`."""
    d = {**DEFAULTS, **{k: v for k, v in d.items() if v is not None}}
    layers = d.get("num_hidden_layers")
    types = d.get("mlp_layer_types")
    if types is None and isinstance(layers, int):
        types = ["dense"] + ["sparse"] * (layers - 1)
    dense = next((i for i, t in enumerate(types or []) if t != "dense"), len(types or []))
    if not isinstance(types, list) or len(types) != layers or any(t != "sparse" for t in types[dense:]):
        raise InputError(f"{source}: config field 'mlp_layer_types' must list {layers} entries, 'dense' ones first "
                         "and then 'sparse' ones")
    return config_from_dict({**d, "model_type": "deepseek_v3", "first_k_dense_replace": dense}, source)


FAMILY = Family(("glm4_moe_lite",), DEEPSEEK.forward, DEEPSEEK.decode, setup_kernels={"glm4_moe_lite": 19},
                parse=parse, activation={"glm4_moe_lite": "llama"})
