"""Llama-like decoders (Llama, Mistral, Ministral 3, Qwen, SmolLM3, Gemma, Phi-3, Granite, OLMo 2 and 3, Mixtral,
Qwen-MoE, GPT-OSS, OLMoE)."""
from __future__ import annotations

from hybridperf.errors import InputError
from hybridperf.graphs.attention import mark_window
from hybridperf.graphs.config import LLAMA_LIKE, MOE_LLAMA, ModelConfig, kv_length
from hybridperf.graphs.decode import cached_attention, decode_setup
from hybridperf.graphs.family import Family
from hybridperf.graphs.layers.attention_core import attention_core, soft_cap
from hybridperf.graphs.layers.grads import grad_cat, grad_sums
from hybridperf.graphs.layers.llama import (granite_scale, llama_layer_blocks, llama_layout_copies, llama_qkv,
                                            llama_variant, output_norm, second_rotary_table)
from hybridperf.graphs.layers.norms import rms_norm
from hybridperf.graphs.layers.rope import causal_and_rotary_setup
from hybridperf.graphs.memory import moe_layer_extra_bytes
from hybridperf.graphs.primitives import F32, Block, gather, linear, misc, vec


#: families that build a sliding-window causal mask beside the causal one (Qwen2MoeModel even when no layer
#: uses it; Gemma 2 and 3 and OLMo 3 for their sliding layers), and its kernels in a prefill forward
#: (TorchDispatchMode, transformers 5.23-5.24)
SLIDING_MASK_KERNELS = {"qwen2_moe": 23, "gemma2": 23, "gemma3_text": 23, "olmo3": 23,
                        "gpt_oss": 6}  # 14 for the mask, net of 8 position and padding checks Llama's path has


def forward(cfg: ModelConfig, B, S, train) -> list:
    """LlamaForCausalLM-style decoder (HF eager): RMSNorm, RoPE, grouped-query attention, gated MLP (a
    top-k MoE in the sparse layers of MOE_LLAMA families: block `layer`, their dense layers `dense_layer`).
    No dropout kernels (attention_dropout = 0); the families' changes are `llama_variant`'s."""
    h, V, tok = cfg.hidden, cfg.vocab, B * S
    v = llama_variant(cfg)
    gemma = v["gemma"]
    # embeddings, the causal mask (full, triu, arange compare, mul, expand+clone) and the rotary tables
    pre = [gather("embed_tokens", tok, h, V), *([vec("embed_scale", "mulu", tok, h)] if gemma else []),
           *granite_scale("embed_multiplier", tok, h, v), *causal_and_rotary_setup(B, S, cfg.head_dim),
           *[misc(f"sliding_mask_{i}", "mask", 2 * S * S * F32)
             for i in range(SLIDING_MASK_KERNELS.get(cfg.family, 0))],
           *second_rotary_table(cfg, tok)]
    oss, olmo = v["oss"], v["olmo"]
    if olmo:  # no norm before the attention: q, k, v and the residual add read the layer's input
        attn = [*grad_sums("resid_in", tok, h, 4, train), *llama_qkv(cfg, tok, train)]
    else:
        attn = [*grad_sums("resid_in", tok, h, 2, train), *rms_norm("input_norm", tok, h, train, gemma, oss),
                *grad_sums("input_norm_out", tok, h, 1 if v["fused"] else 3, train), *llama_qkv(cfg, tok, train)]
    attn += attention_core("attn", B, S, cfg.heads, cfg.head_dim, train, scale_op="mulu", mask_op=("addu",),
                            dropout=False, softmax_fp32=not v["oss"], layout=llama_layout_copies(cfg),
                            softcap=v["softcap"], kv_groups=cfg.heads // cfg.num_kv_heads, sinks=v["oss"])
    if v["oss"] or v["fused"]:  # RoPE ends in a torch.cat: q's (and without grouped-query, k's) gradient is
        # laid back out of the head-split view by a copy of its own
        attn += grad_cat("q_layout", tok * cfg.heads * cfg.head_dim, train)
        if cfg.num_kv_heads == cfg.heads:
            attn += grad_cat("k_layout", tok * cfg.heads * cfg.head_dim, train)
    attn += [linear("o_proj", tok, cfg.heads * cfg.head_dim, h, bias=v["o_bias"]),
             *output_norm("post_attn_norm", tok, h, v, train),
             *granite_scale("resid_scale1", tok, h, v), vec("resid_add1", "add", tok, h, tag="residual"),
             *grad_sums("resid_mid", tok, h, 3 if olmo else 2, train),
             *([] if olmo else rms_norm("post_norm", tok, h, train, gemma, oss))]
    post = [*rms_norm("final_norm", tok, h, train, gemma, oss or olmo), linear("lm_head", tok, h, V, bias=False),
            *(soft_cap("logit_softcap", tok, V) if v["final_softcap"] else []),
            *granite_scale("logits_scaling", tok, V, v, "divu")]
    sliding = None  # from `window` tokens on, transformers masks the sliding layers only (SDPA's cost differs)
    if not cfg.every_layer_slides and "sliding_attention" in cfg.layer_types and S >= cfg.sliding_window > 0:
        attn, sliding = mark_window(attn, False), mark_window(attn, True)
    return [Block("embeddings", 1, pre, "pre"),
            *without_rope(cfg, llama_layer_blocks(cfg, attn, tok, train, sliding_attn=sliding)),
            Block("head", 1, post, "post")]


def without_rope(cfg: ModelConfig, layers: list) -> list:
    """SmolLM3's NoPE layers (`no_rope_layers` 0, by default every `no_rope_layer_interval`-th, 4): its layer without
    RoPE on q and k (block `nope_layer`, TorchDispatchMode on transformers 5.24); other families' layers as they are."""
    if cfg.family != "smollm3":
        return layers
    if cfg.raw.get("use_sliding_window") and cfg.raw.get("sliding_window"):
        raise InputError("SmolLM3's sliding-window layers (use_sliding_window) are not modelled")
    flags = cfg.raw.get("no_rope_layers")
    if flags is None:
        step = int(cfg.raw.get("no_rope_layer_interval") or 4)
        flags = [int((i + 1) % step != 0) for i in range(cfg.layers)]
    if not isinstance(flags, list) or len(flags) != cfg.layers or any(f not in (0, 1) for f in flags):
        raise InputError(f"config field 'no_rope_layers' must list {cfg.layers} entries, each 0 or 1")
    nope = flags.count(0)
    (full,) = layers  # one layer block: SmolLM3 slides no window (refused above)
    rope = [k for k in full.kernels if not k["name"].startswith(("q_rope", "k_rope"))]
    out = [Block(full.name, cfg.layers - nope, full.kernels, full.kind), Block("nope_layer", nope, rope, full.kind)]
    return [b for b in out if b.count]


def decode(cfg: ModelConfig, B: int, seq: int) -> list:
    h, V = cfg.hidden, cfg.vocab
    v = llama_variant(cfg)
    gemma = v["gemma"]
    kv, kv_sliding = kv_length(cfg, seq), kv_length(cfg, seq, sliding=True)
    pre = [gather("embed_tokens", B, h, V), *([vec("embed_scale", "mulu", B, h)] if gemma else []),
           *granite_scale("embed_multiplier", B, h, v), *decode_setup(cfg, B, kv, FAMILY.setup_kernels[cfg.family])]

    olmo = v["olmo"]

    def attn(keys, slides):  # a sliding layer's cache is a strided slice once `seq` passed the window - 1 it keeps
        return [*([] if olmo else rms_norm("input_norm", B, h, unit_offset=gemma, fp32_weight=v["oss"])),
                *llama_qkv(cfg, B),
                *cached_attention("attn", cfg, B, keys, "mulu", ("addu",), softmax_fp32=not v["oss"],
                                  softcap=v["softcap"], sinks=v["oss"],
                                  strided_cache=slides and seq >= cfg.sliding_window > 0,
                                  strided_values=cfg.family == "phi3" and B > 1, sliding=slides),
                linear("o_proj", B, cfg.heads * cfg.head_dim, h, bias=v["o_bias"]),
                *output_norm("post_attn_norm", B, h, v),
                *granite_scale("resid_scale1", B, h, v), vec("resid_add1", "add", B, h),
                *([] if olmo else rms_norm("post_norm", B, h, unit_offset=gemma, fp32_weight=v["oss"]))]

    post = [*rms_norm("final_norm", B, h, unit_offset=gemma, fp32_weight=v["oss"] or olmo),
            linear("lm_head", B, h, V, bias=False),
            *(soft_cap("logit_softcap", B, V) if v["final_softcap"] else []),
            *granite_scale("logits_scaling", B, V, v, "divu")]
    # the B new tokens pass the MLP (a top-k MoE's sparse layers route them); Gemma 2 and 3's and OLMo 3's sliding
    # layers attend to their window only, once the cache is longer (block `sliding_layer`)
    mixed = not cfg.every_layer_slides and "sliding_attention" in cfg.layer_types
    # from `window` keys on transformers masks the sliding layers, also while their cache still holds them all
    sliding = attn(kv_sliding, True) if kv_sliding != kv or (mixed and kv >= cfg.sliding_window > 0) else None
    full = attn(kv, cfg.every_layer_slides)
    return [Block("embeddings", 1, pre, "pre"),
            *without_rope(cfg, llama_layer_blocks(cfg, full, B, sliding_attn=sliding)),
            Block("head", 1, post, "post")]


#: bytes autograd saves per layer and outside the layers, (fp32 model, 16-bit model), counted by
#: `experiments/models/activation_memory.py` (`hybridperf.graphs.memory`); a model_type not counted names the
#: counted one whose layer it resembles most (not measured: Mistral and Qwen2 are Llama's block)
ACTIVATION = {
    "llama": ({"c_h": 40.04, "c_f": 16.0, "c_a": 4.0, "d_h": 13.72, "d_v": 4.07},
              {"c_h": 24.04, "c_f": 8.0, "c_a": 6.0, "d_h": 8.82, "d_v": 4.07}),
    "qwen3": ({"c_h": 56.08, "c_f": 16.0, "c_a": 4.06, "d_h": 13.64, "d_v": 4.09},
              {"c_h": 36.08, "c_f": 8.0, "c_a": 6.06, "d_h": 8.74, "d_v": 4.09}),
    "gemma": ({"c_h": 40.1, "c_f": 16.0, "c_a": 4.0, "d_h": 13.71, "d_v": 4.08},
              {"c_h": 28.1, "c_f": 8.0, "c_a": 6.0, "d_h": 10.81, "d_v": 4.08}),
    "gemma2": ({"c_h": 56.2, "c_f": 16.0, "c_a": 7.99, "d_h": 13.6, "d_v": 8.11},
               {"c_h": 44.2, "c_f": 8.0, "c_a": 7.99, "d_h": 10.7, "d_v": 6.11}),
    "gemma3_text": ({"c_h": 72.27, "c_f": 16.0, "c_a": 4.04, "d_h": 13.5, "d_v": 4.15},
                    {"c_h": 60.27, "c_f": 8.0, "c_a": 6.04, "d_h": 10.6, "d_v": 4.15}),
    "mistral": "llama",
    "ministral3": "llama",
    "qwen2": "llama",
    "smollm3": "llama",
    "phi3": "llama",
    "granite": "llama",
    "olmo2": ({"c_h": 56.08, "c_f": 16.0, "c_a": 4.01, "d_h": 13.64, "d_v": 4.09},
              {"c_h": 44.08, "c_f": 8.0, "c_a": 6.01, "d_h": 11.64, "d_v": 4.09}),
    "olmo3": "olmo2",
    "mixtral": "llama",
    "qwen2_moe": "llama",
    "qwen3_moe": "qwen3",
    "gpt_oss": "llama",
    "olmoe": "qwen3",
    "minimax_m2": "qwen3",
}
def saved_extra(cfg: ModelConfig, tok: int, eb: float) -> list:
    """A MoE layer's saved routing state and gathered tokens beyond Llama's layer (`graphs.memory`)."""
    if not cfg.sparse_layers:
        return []
    return [(moe_layer_extra_bytes(tok, cfg.experts_per_token, cfg.hidden, eb,
                                   bool(cfg.shared_ffn) and cfg.family == "qwen2_moe",
                                   cfg.expert_ffn if cfg.family == "gpt_oss" else 0), cfg.sparse_layers)]


#: a decode step's setup kernels: position ids, the causal mask and the rotary cos/sin (19), and a sliding-window
#: mask too in Qwen2-MoE (unused there), Gemma 2 and 3, OLMo 3 and GPT-OSS
FAMILY = Family(tuple(f for f in LLAMA_LIKE if f != "deepseek_v3"), forward, decode,
                setup_kernels={**{f: 19 for f in LLAMA_LIKE if f != "deepseek_v3"},
                               "qwen2_moe": 34, "gemma2": 34, "gemma3_text": 34, "olmo3": 34, "gpt_oss": 33},
                tensor_parallel=tuple(f for f in LLAMA_LIKE if f not in MOE_LLAMA),  # MoE experts: dp only
                activation=ACTIVATION, saved_extra=saved_extra, position_limited=True,
                softmax_fp32=tuple(f for f in LLAMA_LIKE if f not in ("deepseek_v3", "gpt_oss")))
