"""Count the kernels of a Hugging Face eager forward (and training step) and compare them with the graph.

For small random-weight models of every family `predict-model` reads, run one forward under no_grad
(`inf`; causal LMs with `use_cache=False`) and one forward + loss + backward (`train`, a second step, so
that `.grad` exists and the backward accumulates into it, as in NeuSight's timed steps) under
TorchDispatchMode, and record every ATen op that launches a kernel (views launch none; the list is
`decode_trace.VIEW_OPS`). A 3-layer minus a 2-layer model gives the kernels per layer (for T5 and
Switch, per encoder + decoder layer pair). `build_graph` is printed beside them.

The graph is not meant to equal this trace everywhere, and the script says where it differs:
  * NeuSight's labels were measured with transformers 4.x on CUDA, and the graphs of the families they
    validate (BERT, GPT-2, GPT-Neo, OPT, Switch) follow NeuSight's traced graphs, not transformers 5.23:
    5.23 launches more tiny kernels outside the layers (mask and position-id bookkeeping), and its
    attention differs in a kernel or two per layer (e.g. OPT's scale of 1.0).
  * Families added after NeuSight's (GPT-NeoX, Qwen3, SmolLM3 and its NoPE layers, Ministral 3, Gemma 1-3, Phi-3,
    Granite, OLMo 2 and 3, T5, RoBERTa, OPT-350m's layout, the MoE decoders Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE,
    MiniMax-M2, DeepSeek-V3 and GLM-4.7-Flash, GPT-OSS, and Qwen3.5's, Gemma 4's, Granite 4.0's and Nemotron-H's
    layers, `HYBRID`, `NEMOTRON_H`) were built from this trace: their forward layers match it exactly, and
    `tests/test_graphs.py`, `tests/test_moe.py`, `tests/test_qwen3_5.py`, `tests/test_gemma4.py`,
    `tests/test_nemotron_h.py` and `tests/test_granitemoehybrid.py` pin the counts (Llama 4's: `tests/test_llama4.py`).
    So do their training layers (GPT-NeoX, the llama-likes and the MoE decoders; Qwen3.5, Gemma 4, Granite 4.0 and
    Nemotron-H do not train), in fp32 and bf16.
  * A view's backward that scatters into a zero-filled gradient (ATen's slice_backward, select_backward:
    RoPE's halves, Phi-3's fused q/k/v) is two kernels, a fill and a copy, and is counted as two.
  * Ops that only allocate (`aten.empty*`) launch no kernel and are not counted.

    python -m experiments.gpu.graph_trace            # needs torch and transformers; ~1 min on the CPU

Prints one row per family and mode (and, with --out, writes them as CSV).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from experiments.gpu.decode_trace import kernel_recorder

_LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "vocab_size": 100, "max_position_embeddings": 512}
_T5 = {"d_model": 64, "d_kv": 16, "d_ff": 128, "num_heads": 4, "vocab_size": 100, "decoder_start_token_id": 0,
       "pad_token_id": 0}
#: Granite's multipliers (granite-3.3-8b's): each runs a kernel whatever its value
_GRANITE = {"embedding_multiplier": 12.0, "residual_multiplier": 0.22, "logits_scaling": 16.0,
            "attention_multiplier": 0.0078125}
#: 4 experts, 2 per token: with 16 tokens every expert receives some
_MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
_BERT = {"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100, "pad_token_id": 1}
#: no head_dim: HF sets DeepSeek's to its rotary width
_DEEPSEEK = {"model_type": "deepseek_v3", **{k: v for k, v in _LLAMA.items() if k != "head_dim"},
             "num_key_value_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8,
             "qk_nope_head_dim": 16, "v_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2,
             "topk_group": 1, "moe_intermediate_size": 32, "first_k_dense_replace": 1}
#: name: (HF config, layer-count keys, HF class for inf, HF class for train)
MODELS = {
    "bert": ({"model_type": "bert", **_BERT}, ("num_hidden_layers",), "BertForSequenceClassification",
             "BertForPreTraining"),
    "roberta": ({"model_type": "roberta", **_BERT, "max_position_embeddings": 514}, ("num_hidden_layers",),
                "RobertaForSequenceClassification", "RobertaForMaskedLM"),
    "gpt2": ({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 512}, ("n_layer",),
             "GPT2LMHeadModel", "GPT2LMHeadModel"),
    "gpt_neox": ({"model_type": "gpt_neox", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                  "vocab_size": 100, "max_position_embeddings": 512}, ("num_hidden_layers",), "GPTNeoXForCausalLM",
                 "GPTNeoXForCausalLM"),
    "opt": ({"model_type": "opt", "hidden_size": 64, "ffn_dim": 128, "num_attention_heads": 4, "vocab_size": 100,
             "max_position_embeddings": 512, "word_embed_proj_dim": 64}, ("num_hidden_layers",), "OPTForCausalLM",
            "OPTForCausalLM"),
    "opt_350m": ({"model_type": "opt", "hidden_size": 64, "ffn_dim": 128, "num_attention_heads": 4, "vocab_size": 100,
                  "max_position_embeddings": 512, "word_embed_proj_dim": 32, "do_layer_norm_before": False},
                 ("num_hidden_layers",), "OPTForCausalLM", "OPTForCausalLM"),
    "llama": ({"model_type": "llama", **_LLAMA}, ("num_hidden_layers",), "LlamaForCausalLM", "LlamaForCausalLM"),
    "qwen3": ({"model_type": "qwen3", **_LLAMA}, ("num_hidden_layers",), "Qwen3ForCausalLM", "Qwen3ForCausalLM"),
    "gemma": ({"model_type": "gemma", **_LLAMA}, ("num_hidden_layers",), "GemmaForCausalLM", "GemmaForCausalLM"),
    "gemma2": ({"model_type": "gemma2", **_LLAMA}, ("num_hidden_layers",), "Gemma2ForCausalLM", "Gemma2ForCausalLM"),
    "gemma3": ({"model_type": "gemma3_text", **_LLAMA}, ("num_hidden_layers",), "Gemma3ForCausalLM",
               "Gemma3ForCausalLM"),
    "smollm3": ({"model_type": "smollm3", **_LLAMA, "pad_token_id": 0}, ("num_hidden_layers",), "SmolLM3ForCausalLM",
                "SmolLM3ForCausalLM"),
    "smollm3_nope": ({"model_type": "smollm3", **_LLAMA, "pad_token_id": 0, "no_rope_layer_interval": 1},
                     ("num_hidden_layers",), "SmolLM3ForCausalLM", "SmolLM3ForCausalLM"),
    "ministral3": ({"model_type": "ministral3", **_LLAMA, "rope_parameters": {
        "rope_type": "yarn", "rope_theta": 1e6, "factor": 16.0, "original_max_position_embeddings": 16384,
        "llama_4_scaling_beta": 0.1}}, ("num_hidden_layers",), "Ministral3ForCausalLM", "Ministral3ForCausalLM"),
    "granite": ({"model_type": "granite", **_LLAMA, **_GRANITE}, ("num_hidden_layers",), "GraniteForCausalLM",
                "GraniteForCausalLM"),
    "olmo2": ({"model_type": "olmo2", **_LLAMA}, ("num_hidden_layers",), "Olmo2ForCausalLM", "Olmo2ForCausalLM"),
    "olmo3": ({"model_type": "olmo3", **_LLAMA}, ("num_hidden_layers",), "Olmo3ForCausalLM", "Olmo3ForCausalLM"),
    "phi3": ({"model_type": "phi3", **_LLAMA, "pad_token_id": 0, "partial_rotary_factor": 0.5}, ("num_hidden_layers",),
             "Phi3ForCausalLM", "Phi3ForCausalLM"),
    "mixtral": ({"model_type": "mixtral", **_LLAMA, "num_local_experts": 4, "num_experts_per_tok": 2},
                ("num_hidden_layers",), "MixtralForCausalLM", "MixtralForCausalLM"),
    "qwen2_moe": ({"model_type": "qwen2_moe", **_LLAMA, **_MOE, "shared_expert_intermediate_size": 96},
                  ("num_hidden_layers",), "Qwen2MoeForCausalLM", "Qwen2MoeForCausalLM"),
    "qwen3_moe": ({"model_type": "qwen3_moe", **_LLAMA, **_MOE, "norm_topk_prob": True}, ("num_hidden_layers",),
                  "Qwen3MoeForCausalLM", "Qwen3MoeForCausalLM"),
    "olmoe": ({"model_type": "olmoe", **_LLAMA, "intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2,
               "pad_token_id": 0}, ("num_hidden_layers",), "OlmoeForCausalLM", "OlmoeForCausalLM"),
    "minimax_m2": ({"model_type": "minimax_m2", **_LLAMA, "intermediate_size": 32, "num_local_experts": 4,
                    "num_experts_per_tok": 2, "rotary_dim": 8}, ("num_hidden_layers",), "MiniMaxM2ForCausalLM",
                   "MiniMaxM2ForCausalLM"),
    "gpt_oss": ({"model_type": "gpt_oss", **_LLAMA, "intermediate_size": 32, "num_local_experts": 4,
                 "num_experts_per_tok": 2}, ("num_hidden_layers",), "GptOssForCausalLM", "GptOssForCausalLM"),
    "deepseek_v3": (_DEEPSEEK, ("num_hidden_layers",), "DeepseekV3ForCausalLM", "DeepseekV3ForCausalLM"),
    "glm4_moe_lite": ({**{k: v for k, v in _DEEPSEEK.items() if k != "first_k_dense_replace"},
                       "model_type": "glm4_moe_lite", "pad_token_id": 0}, ("num_hidden_layers",),
                      "Glm4MoeLiteForCausalLM", "Glm4MoeLiteForCausalLM"),
    "switch": ({"model_type": "switch_transformers", **_T5, "num_experts": 4, "encoder_sparse_step": 0,
                "decoder_sparse_step": 0}, ("num_layers", "num_decoder_layers"),
               "SwitchTransformersForConditionalGeneration", "SwitchTransformersForConditionalGeneration"),
    "t5": ({"model_type": "t5", **_T5}, ("num_layers", "num_decoder_layers"), "T5ForConditionalGeneration",
           "T5ForConditionalGeneration"),
    "t5_gated": ({"model_type": "t5", **_T5, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
                 ("num_layers", "num_decoder_layers"), "T5ForConditionalGeneration", "T5ForConditionalGeneration"),
}
BATCH, SEQ = 2, 8
_QWEN3_5 = {"model_type": "qwen3_5_text", **_LLAMA, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
            "linear_key_head_dim": 16, "linear_value_head_dim": 16}
_GEMMA4 = {"model_type": "gemma4_text", **_LLAMA, "global_head_dim": 32, "num_global_key_value_heads": 1,
           "attention_k_eq_v": True, "sliding_window": 4, "hidden_size_per_layer_input": 0,
           "final_logit_softcapping": 30.0, "pad_token_id": 0}
_GRANITE4 = {"model_type": "granitemoehybrid", **{k: v for k, v in _LLAMA.items() if k != "head_dim"},
             "intermediate_size": 32, "shared_intermediate_size": 48, "num_local_experts": 4, "num_experts_per_tok": 2,
             "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_n_groups": 2, "mamba_d_state": 8, "mamba_chunk_size": 8,
             "pad_token_id": 0, **_GRANITE}
#: models of two layer types, one row per type: name -> (HF config, its layer types, the layer type the model needs
#: once (a linear layer's cache needs a full one; Gemma 4's last layer is full), whether that one comes first).
#: With the key/value cache an inference forward fills by default; inference at 3 (fewer than Qwen3.5's conv width),
#: 8 and 130 tokens (one and three chunks of its gated delta rule) and a decode step after 8 tokens. Not trained.
HYBRID = {"qwen3_5": (_QWEN3_5, ("linear_attention", "full_attention"), True),
          "qwen3_5_moe": ({**_QWEN3_5, **_MOE, "model_type": "qwen3_5_moe_text", "shared_expert_intermediate_size": 48},
                          ("linear_attention", "full_attention"), True),
          "gemma4": (_GEMMA4, ("sliding_attention", "full_attention"), False),
          "gemma4_kv": ({**_GEMMA4, "attention_k_eq_v": False}, ("full_attention",), False),
          "gemma4_ple": ({**_GEMMA4, "hidden_size_per_layer_input": 16, "vocab_size_per_layer_input": 100},
                         ("sliding_attention", "full_attention"), False),
          "gemma4_moe": ({**_GEMMA4, "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2,
                          "moe_intermediate_size": 32}, ("sliding_attention", "full_attention"), False),
          "granite4": (_GRANITE4, ("linear_attention", "full_attention"), True),
          "granite4_dense_rope": ({**_GRANITE4, "num_local_experts": 0, "position_embedding_type": "rope"},
                                  ("linear_attention", "full_attention"), True)}


def traced_kernels(torch, transformers, cfg: dict, cls: str, mode: str) -> int:
    """Kernel-launching ATen ops of one forward (`inf`) or forward + loss + backward (`train`)."""
    torch.manual_seed(0)
    model = getattr(transformers, cls)._from_config(transformers.AutoConfig.for_model(**cfg),
                                                    attn_implementation="eager")
    model.train(mode == "train")
    ops = []
    ids = torch.randint(2, 100, (BATCH, SEQ))
    kw = {"input_ids": ids}
    if "ConditionalGeneration" in cls:
        kw.update(decoder_input_ids=ids, use_cache=False)
    elif "CausalLM" in cls or "LMHead" in cls:
        kw["use_cache"] = False
    if mode == "inf":
        with torch.no_grad(), kernel_recorder(ops):
            model(**kw)
    else:
        kw["labels"] = ids
        if cls == "BertForPreTraining":
            kw["next_sentence_label"] = torch.zeros(BATCH, dtype=torch.long)
        model(**kw).loss.backward()  # a first step creates .grad; the traced one accumulates into it
        with kernel_recorder(ops):
            model(**kw).loss.backward()
    return len(ops)


def hybrid_kernels(torch, transformers, cfg: dict, kind: str, layers: int, mode: str, dtype: str,
                   seq: int, full_first: bool) -> tuple[int, int]:
    """(traced, graph) kernels of a model of `layers` layers: one full-attention layer (first or last), the rest
    `kind`."""
    from experiments.gpu.decode_trace import traced_kernels as decode_kernels
    from hybridperf.graphs import build_graph

    rest = [kind] * (layers - 1)
    cfg = {**cfg, "num_hidden_layers": layers,
           "layer_types": ["full_attention", *rest] if full_first else [*rest, "full_attention"]}
    graph = int(build_graph(cfg, BATCH, seq, mode, dtype=dtype).kernel_table()["count"].sum())
    if mode == "decode":
        return decode_kernels(torch, transformers, cfg, dtype, BATCH, seq), graph
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg),
                                                          attn_implementation="eager").eval()
    model.to({"fp32": torch.float32, "bf16": torch.bfloat16}[dtype])
    ops, ids = [], torch.randint(2, 100, (BATCH, seq))
    with torch.no_grad(), kernel_recorder(ops):
        model(input_ids=ids, use_cache=True)
    return len(ops), graph


def hybrid_rows(torch, transformers) -> list:
    rows = []
    for name, (cfg, kinds, full_first) in HYBRID.items():
        for kind in kinds:
            for mode, seq in (("inf", 3), ("inf", SEQ), ("inf", 130), ("decode", SEQ)):
                for dtype in ("fp32", "bf16"):
                    (t2, g2), (t3, g3) = (hybrid_kernels(torch, transformers, cfg, kind, n, mode, dtype, seq,
                                                         full_first) for n in (2, 3))
                    rows.append({"model": f"{name} {kind.split('_')[0]}", "mode": f"{mode} {seq}", "dtype": dtype,
                                 "traced_per_layer": t3 - t2, "graph_per_layer": g3 - g2,
                                 "traced_outside": t2 - 2 * (t3 - t2), "graph_outside": g2 - 2 * (g3 - g2)})
    return rows


#: Nemotron-H's blocks, one row per kind (M Mamba-2, * attention, - MLP, E MoE), each added to a model holding one
#: block of another kind (an attention one, so that the cache knows a length); inference at 8 and 20 tokens (one and
#: three SSD chunks of 8) and a decode step after 8 tokens
NEMOTRON_H = {"model_type": "nemotron_h", **_LLAMA, "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 8,
              "n_groups": 2, "conv_kernel": 4, "chunk_size": 8, "n_routed_experts": 4, "num_experts_per_tok": 2,
              "moe_intermediate_size": 32, "moe_shared_expert_intermediate_size": 48, "pad_token_id": 0,
              "use_mamba_kernels": False}


def block_rows(torch, transformers) -> list:
    from experiments.gpu.decode_trace import traced_kernels as decode_kernels
    from hybridperf.graphs import build_graph

    rows = []
    for kind in "M*-E":
        for mode, seq in (("inf", SEQ), ("inf", 20), ("decode", SEQ)):
            for dtype in ("fp32", "bf16"):
                counts = []
                for pattern in ("*M"[kind == "*"] + kind, "*M"[kind == "*"] + 2 * kind):
                    cfg = {**NEMOTRON_H, "num_hidden_layers": len(pattern), "hybrid_override_pattern": pattern}
                    graph = int(build_graph(cfg, BATCH, seq, mode, dtype=dtype).kernel_table()["count"].sum())
                    if mode == "decode":
                        counts.append((decode_kernels(torch, transformers, cfg, dtype, BATCH, seq), graph))
                        continue
                    torch.manual_seed(0)
                    model = transformers.AutoModelForCausalLM.from_config(
                        transformers.AutoConfig.for_model(**cfg), attn_implementation="eager").eval()
                    model.to({"fp32": torch.float32, "bf16": torch.bfloat16}[dtype])
                    ops, ids = [], torch.randint(2, 100, (BATCH, seq))
                    with torch.no_grad(), kernel_recorder(ops):
                        model(input_ids=ids, use_cache=True)
                    counts.append((len(ops), graph))
                (t1, g1), (t2, g2) = counts
                rows.append({"model": f"nemotron_h {kind}", "mode": f"{mode} {seq}", "dtype": dtype,
                             "traced_per_layer": t2 - t1, "graph_per_layer": g2 - g1,
                             "traced_outside": 2 * t1 - t2, "graph_outside": 2 * g1 - g2})
    return rows


def graph_kernels(cfg: dict, mode: str) -> int:
    """The graph's kernels of what `traced_kernels` runs: without the key/value cache a forward fills by default."""
    from hybridperf.graphs import build_graph

    return int(build_graph({**cfg, "use_cache": False}, BATCH, SEQ, mode).kernel_table()["count"].sum())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="write the table as CSV here")
    args = ap.parse_args(argv)
    try:
        import torch
        import transformers
    except ImportError as e:  # pragma: no cover - a developer tool
        sys.exit(f"error: this experiment needs torch and transformers ({e.name} is missing)")
    transformers.logging.set_verbosity_error()
    rows = []
    for name, (cfg, keys, inf_cls, train_cls) in MODELS.items():
        for mode, cls in (("inf", inf_cls), ("train", train_cls)):
            n = {k: {**cfg, **{key: k for key in keys}} for k in (2, 3)}
            t2, t3 = (traced_kernels(torch, transformers, n[k], cls, mode) for k in (2, 3))
            g2, g3 = (graph_kernels(n[k], mode) for k in (2, 3))
            rows.append({"model": name, "mode": mode, "traced_per_layer": t3 - t2, "graph_per_layer": g3 - g2,
                         "traced_outside": t2 - 2 * (t3 - t2), "graph_outside": g2 - 2 * (g3 - g2)})
    df = pd.DataFrame(rows)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; batch {BATCH}, seq {SEQ}")
    print(df.to_string(index=False))
    hybrid = pd.DataFrame(hybrid_rows(torch, transformers) + block_rows(torch, transformers))
    print("\nmodels of two layer types (`HYBRID`; outside includes their one full-attention layer):")
    print(hybrid.to_string(index=False))
    df = pd.concat([df, hybrid], ignore_index=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
