"""Count the kernels of one Hugging Face eager decode step and compare them with `--mode decode`'s graph.

For small random-weight GPT-2, GPT-Neo, GPT-NeoX, OPT (and OPT-350m's layout), Llama (with grouped-query and with
multi-head attention), Qwen3, Gemma, Phi-3, Granite, OLMo 2 and 3 and the MoE decoders' models, in fp32 and bf16:
prefill 8 tokens with `use_cache=True`, then run one decode step `model(next_ids, past_key_values=cache)` under
TorchDispatchMode and record every ATen op that launches a kernel (views, transposes, expands and slices launch
none). A 4-layer minus a 2-layer model gives the kernels per layer, the rest are outside the layers.
`build_graph(..., mode="decode")` must launch exactly as many in both places.

    python -m experiments.gpu.decode_trace      # needs torch and transformers; ~10 s on the CPU

Prints one row per family and dtype and exits non-zero if a count differs.
"""
from __future__ import annotations

import sys

import pandas as pd

#: ATen ops that return views or only allocate (no kernel)
VIEW_OPS = ("view", "unsqueeze", "squeeze", "aten.t.", "_unsafe_view", "transpose", "expand", "slice", "alias",
            "split", "select", "detach", "permute", "lift_fresh", "as_strided", "_reshape_alias", "aten.empty",
            "aten.new_empty")
#: small configurations of each family, in HF's config keys
CONFIGS = {
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 512},
    "gpt_neo": {"model_type": "gpt_neo", "hidden_size": 64, "num_heads": 4, "vocab_size": 100,
                "max_position_embeddings": 512, "intermediate_size": 256},
    "opt": {"model_type": "opt", "hidden_size": 64, "ffn_dim": 128, "num_attention_heads": 4, "vocab_size": 100,
            "max_position_embeddings": 512, "word_embed_proj_dim": 64},
    "llama_gqa": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 512},
    "llama_mha": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                  "num_key_value_heads": 4, "vocab_size": 100, "max_position_embeddings": 512},
    "qwen3": {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "max_position_embeddings": 512},
    "gemma": {"model_type": "gemma", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "max_position_embeddings": 512},
    "gemma2": {"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "max_position_embeddings": 512},
    "gemma3": {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "max_position_embeddings": 512},
    "gpt_neox": {"model_type": "gpt_neox", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                 "vocab_size": 100, "max_position_embeddings": 512},
    "phi3": {"model_type": "phi3", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 512, "pad_token_id": 0,
             "partial_rotary_factor": 0.5},
    "granite": {"model_type": "granite", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 512,
                "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "logits_scaling": 16.0},
    "olmo2": {"model_type": "olmo2", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "max_position_embeddings": 512},
    "olmo3": {"model_type": "olmo3", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "max_position_embeddings": 512,
              "sliding_window": 4},  # shorter than the 8 cached tokens: the sliding layers' cache is cropped
    "mixtral": {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 512, "num_local_experts": 4,
                "num_experts_per_tok": 2},
    "qwen2_moe": {"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 512, "num_experts": 4,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 96},
    "qwen3_moe": {"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "max_position_embeddings": 512,
                  "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": True},
    "deepseek_v3": {"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                    "num_key_value_heads": 4, "vocab_size": 100, "max_position_embeddings": 512, "q_lora_rank": 32,
                    "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
                    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
                    "moe_intermediate_size": 32, "first_k_dense_replace": 0},
    "olmoe": {"model_type": "olmoe", "hidden_size": 64, "intermediate_size": 32, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 512, "num_experts": 4,
              "num_experts_per_tok": 2, "pad_token_id": 0},
    "minimax_m2": {"model_type": "minimax_m2", "hidden_size": 64, "intermediate_size": 32, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "max_position_embeddings": 512,
                   "num_local_experts": 4, "num_experts_per_tok": 2, "rotary_dim": 8},
    "gpt_oss": {"model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 32, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "max_position_embeddings": 512,
                "num_local_experts": 4, "num_experts_per_tok": 2},
    "opt_350m": {"model_type": "opt", "hidden_size": 64, "ffn_dim": 128, "num_attention_heads": 4, "vocab_size": 100,
                 "max_position_embeddings": 512, "word_embed_proj_dim": 32, "do_layer_norm_before": False},
}
LAYER_KEY = {"gpt2": "n_layer", "gpt_neo": "num_layers"}


def with_layers(cfg: dict, layers: int) -> dict:
    out = {**cfg, LAYER_KEY.get(cfg["model_type"], "num_hidden_layers"): layers}
    if cfg["model_type"] == "gpt_neo":  # global and local layers alternate, as released
        out["attention_types"] = [[["global", "local"], layers // 2]]
    if cfg["model_type"] == "olmo3":  # every layer sliding (HF's default makes every 4th full, which the 2- and
        out["layer_types"] = ["sliding_attention"] * layers  # 4-layer difference would count as per-layer)
    return out


#: backward ops of views that launch kernels: a zero-filled gradient of the whole input and a copy of the
#: view's gradient into it (ATen's slice_backward / select_backward), two kernels each
SCATTER_BACKWARD = ("slice_backward", "select_backward")


def kernel_recorder(ops: list):
    """A TorchDispatchMode that appends the name of every kernel-launching ATen op it sees to `ops`
    (twice for the two kernels of a SCATTER_BACKWARD op)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func)
            if any(v in name for v in SCATTER_BACKWARD):
                ops.extend((name, name))
            elif not any(v in name for v in VIEW_OPS):
                ops.append(name)
            return func(*args, **(kwargs or {}))

    return Record()


def traced_kernels(torch, transformers, cfg: dict, dtype: str, batch: int = 2, past: int = 8) -> int:
    """Kernel-launching ATen ops of one decode step after `past` cached tokens."""
    hf = transformers.AutoConfig.for_model(**cfg)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf, attn_implementation="eager").eval()
    model.to({"fp32": torch.float32, "bf16": torch.bfloat16}[dtype])
    ops = []
    with torch.no_grad():
        cache = model(torch.randint(0, 100, (batch, past)), use_cache=True).past_key_values
        ids = torch.randint(0, 100, (batch, 1))
        with kernel_recorder(ops):
            model(ids, past_key_values=cache, use_cache=True)
    return len(ops)


def graph_kernels(cfg: dict, dtype: str, batch: int = 2, past: int = 8) -> tuple[int, int]:
    """(kernels per layer, kernels outside the layers) of `build_graph(..., mode="decode")`."""
    from hybridperf.graphs import build_graph

    t = build_graph(with_layers(cfg, 2), batch, past, "decode", dtype=dtype).kernel_table()
    in_layer = t["block"].isin(("layer", "sliding_layer"))  # each config here has one kind of layer
    return int(in_layer.sum()), int((~in_layer).sum())


def main() -> int:
    try:
        import torch
        import transformers
    except ImportError as e:  # pragma: no cover - a developer tool
        sys.exit(f"error: this experiment needs torch and transformers ({e.name} is missing)")
    transformers.logging.set_verbosity_error()
    rows = []
    for name, cfg in CONFIGS.items():
        for dtype in ("fp32", "bf16"):
            two = traced_kernels(torch, transformers, with_layers(cfg, 2), dtype)
            four = traced_kernels(torch, transformers, with_layers(cfg, 4), dtype)
            per_layer = (four - two) // 2
            g_layer, g_out = graph_kernels(cfg, dtype)
            rows.append({"model": name, "dtype": dtype, "traced_per_layer": per_layer, "graph_per_layer": g_layer,
                         "traced_outside": two - 2 * per_layer, "graph_outside": g_out})
    df = pd.DataFrame(rows)
    df["match"] = (df["traced_per_layer"] == df["graph_per_layer"]) & (df["traced_outside"] == df["graph_outside"])
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    print(df.to_string(index=False))
    return 0 if df["match"].all() else 1


if __name__ == "__main__":
    raise SystemExit(main())
