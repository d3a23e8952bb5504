"""`model_type`s the kernel enumerator reads as another's: a multimodal wrapper's language model, an architecture
under another name, and a family read as a kin with the fields its type implies (`read_as`)."""
from __future__ import annotations

from hybridperf.errors import InputError

#: vision-language wrappers whose text-only forward is their language model (`text_config`), read as that
#: model_type (the vision tower runs no kernel for text input)
LANGUAGE_MODEL_OF = {"qwen3_vl": "qwen3", "qwen3_vl_moe": "qwen3_moe", "qwen2_vl": "qwen2", "qwen2_5_vl": "qwen2",
                     "mistral3": "mistral", "qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text",
                     "gemma3": "gemma3_text", "gemma4": "gemma4_text", "kimi_k25": "deepseek_v3",
                     "llama4": "llama4_text"}
#: model_types that name a supported architecture under another name (their `architectures` say so)
SAME_ARCHITECTURE = {"kimi_k2": "deepseek_v3", "mimo": "qwen2"}  # MiMo: its MTP layers run only when drafting
#: model_types read as another's, with the fields that type implies: Qwen3-Next, the hybrid Qwen3.5-MoE built on (its
#: attention output-gated; its fused qkvz and ba input projections priced as Qwen3.5's four, not measured)
READ_AS = {"qwen3_next": ("qwen3_5_moe_text", {"attn_output_gate": True})}


def read_as(mt: str, d: dict, source: str) -> tuple[str, dict]:
    """The model_type and config dict `d` (of type `mt`) is read as; InputError where the kin cannot model it."""
    outer = {k: d[k] for k in ("dtype", "torch_dtype", "tie_word_embeddings") if d.get(k) is not None}  # the LM's too
    if mt in LANGUAGE_MODEL_OF:
        text = d.get("text_config")
        if not isinstance(text, dict):
            raise InputError(f"{source}: a {mt} config needs a 'text_config' object (its language model)")
        inner = text.get("model_type")
        if mt == "mistral3" and inner not in (None, "mistral", "ministral3"):  # Ministral 3: its own layers
            raise InputError(f"{source}: a mistral3 config whose language model is {inner!r} is not supported")
        mt = "ministral3" if mt == "mistral3" and inner == "ministral3" else LANGUAGE_MODEL_OF[mt]
        d = {**text, **outer, "model_type": mt}
    mt = SAME_ARCHITECTURE.get(mt, mt)
    if mt in READ_AS:
        if mt == "qwen3_next" and (d.get("decoder_sparse_step") not in (None, 1) or d.get("mlp_only_layers")):
            raise InputError(f"{source}: Qwen3-Next with dense layers (decoder_sparse_step, mlp_only_layers) is not "
                             "modelled: Qwen3.5-MoE's layers are all MoE")
        mt, implied = READ_AS[mt]
        d = {**implied, **d, "model_type": mt}
    return mt, d
