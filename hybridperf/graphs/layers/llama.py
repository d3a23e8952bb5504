"""Llama's decoder layer and the variants llama-like families make of it (shared by the prefill, training
and decode graphs, and by DeepSeek-V3's layers)."""
from __future__ import annotations

from hybridperf.graphs.config import GEMMA, OLMO, SLIDING_GEMMA, ModelConfig
from hybridperf.graphs.layers.activation import mlp_activation
from hybridperf.graphs.layers.grads import grad_cat, grad_sums, slice_grads
from hybridperf.graphs.layers.moe import moe_block
from hybridperf.graphs.layers.norms import rms_norm
from hybridperf.graphs.layers.rope import _rope, cat_rope, halves_rope, rotary_dim
from hybridperf.graphs.primitives import F32, HALF_DTYPES, Block, _k, cast, linear, misc, vec


def llama_variant(cfg: ModelConfig) -> dict:
    """What a llama-like family changes in Llama's layer (the prefill, training and decode graphs share it):
    biases on q/k/v (qwen2 and qwen2_moe, or `attention_bias`) and on the MLP (`mlp_bias`), an RMSNorm over
    each head of q and k before RoPE (qwen3, qwen3_moe and gemma3), Gemma's (1 + weight) norms and
    sqrt(hidden)-scaled embeddings, Gemma 2 and 3's sandwich norms (`sandwich`), Gemma 2's soft-capped scores
    and logits (`softcap`, `final_softcap`; HF's defaults when the keys are absent), a rotary table per layer
    type (gemma3), Phi-3's fused q/k/v and gate/up GEMMs with RoPE on the first `partial_rotary_factor`
    of each head, Granite's multipliers on the embeddings, the sublayer outputs and the logits, OLMo 2's
    norms on the sublayer outputs (`olmo`: none on their inputs) and over the whole q and k projections, and
    MiniMax-M2's RoPE on the first `rotary_dim` of each head (`partial_rope`, Phi-3's without its fused GEMMs)."""
    oss = cfg.family == "gpt_oss"
    qkv_bias = cfg.family == "qwen2" or bool(cfg.raw.get("attention_bias", oss))  # GptOssConfig: on by default
    if cfg.family == "qwen2_moe":  # Qwen2MoeConfig's own key, on by default
        qkv_bias = bool(cfg.raw.get("qkv_bias", True))
    gemma2 = cfg.family == "gemma2"
    return {"qkv_bias": qkv_bias,
            "mlp_bias": bool(cfg.raw.get("mlp_bias", False)),
            "qk_norm": cfg.family in ("qwen3", "qwen3_moe", "gemma3_text"),
            "gemma": cfg.family in GEMMA, "sandwich": cfg.family in SLIDING_GEMMA,
            "softcap": bool(cfg.raw.get("attn_logit_softcapping", 50.0 if gemma2 else None)),
            "final_softcap": bool(cfg.raw.get("final_logit_softcapping", 30.0 if gemma2 else None)),
            "rotary_tables": len(set(cfg.layer_types)) if cfg.family in ("gemma3_text", "olmo3") else 1,
            "fused": cfg.family == "phi3", "oss": oss, "o_bias": oss and qkv_bias, "granite": cfg.family == "granite",
            "olmo": cfg.family in OLMO, "whole_qk_norm": cfg.family in ("olmoe", "minimax_m2"),
            "partial_rope": cfg.family == "minimax_m2",
            "rotary_dim": rotary_dim(cfg, 1.0) if cfg.family in ("phi3", "minimax_m2") else cfg.head_dim}


def output_norm(name: str, rows: int, h: int, variant: dict, train: bool = False) -> list:
    """The RMSNorm on a sublayer's output before its residual add: Gemma 2 and 3's sandwich norm ((1 + weight)),
    OLMo's (weight in fp32); none elsewhere."""
    if variant["sandwich"]:
        return rms_norm(name, rows, h, train, unit_offset=True)
    return rms_norm(name, rows, h, train, fp32_weight=True) if variant["olmo"] else []


def granite_scale(name: str, rows: int, width: int, variant: dict, op: str = "mulu") -> list:
    """Granite's scaling of a [rows, width] tensor by one of its config's multipliers (none elsewhere)."""
    return [vec(name, op, rows, width)] if variant["granite"] else []


def second_rotary_table(cfg: ModelConfig, rows: int) -> list:
    """Gemma 3 and OLMo 3 with both layer types build a rotary table per type: the second one's position cast,
    freqs, cat, cos, sin and two scalings, and in a half-precision model Gemma's three casts (OLMo's tables stay
    fp32: one cast) (TorchDispatchMode, transformers 5.23-5.24; prefill and decode alike, over `rows` tokens)."""
    if llama_variant(cfg)["rotary_tables"] < 2:
        return []
    casts = 1 if cfg.family in OLMO else 3
    return [*(misc(f"rotary_local_{i}", "mask", 2 * rows * cfg.head_dim * F32) for i in range(7)),
            *(cast(f"rotary_local_cast_{i}", rows * cfg.head_dim) for i in range(casts))]


def llama_layout_copies(cfg: ModelConfig) -> tuple:
    """Which of q, k, v eager attention copies into a contiguous batch (`attention_core`'s `layout`).
    Phi-3's RoPE ends in a torch.cat, which leaves q and k contiguous: only repeat_kv's k (grouped-query)
    and the strided v slice of the fused output are copied (TorchDispatchMode, transformers 5.23)."""
    v = llama_variant(cfg)
    if not (v["fused"] or v["oss"] or v["partial_rope"]):  # GPT-OSS's and MiniMax-M2's RoPE also end in a torch.cat
        return ("q", "k", "v")
    return ("k", "v") if cfg.num_kv_heads < cfg.heads else ("v",)


def llama_qkv(cfg: ModelConfig, tok: int, train: bool = False) -> list:
    """q/k/v projections, qwen3's per-head q/k norms, and RoPE on q and k over `tok` tokens."""
    v = llama_variant(cfg)
    h, hd = cfg.hidden, cfg.head_dim
    q_w, kv_w = cfg.heads * hd, cfg.num_kv_heads * hd
    if v["fused"]:  # Phi-3: one GEMM, q, k and v are slices of its output (the backward adds their gradients)
        ks = [linear("qkv_proj", tok, h, q_w + 2 * kv_w, bias=v["qkv_bias"]),
              *grad_sums("qkv_out", tok, q_w + 2 * kv_w, 3, train),
              *slice_grads("qkv_out", tok, q_w + 2 * kv_w, 3, train)]
    else:
        ks = [linear("q_proj", tok, h, q_w, bias=v["qkv_bias"]), linear("k_proj", tok, h, kv_w, bias=v["qkv_bias"]),
              linear("v_proj", tok, h, kv_w, bias=v["qkv_bias"])]
    if v["olmo"]:  # Olmo2RMSNorm over each token's whole q and k projections (weight in fp32)
        ks += [*rms_norm("q_norm", tok, q_w, train, fp32_weight=True),
               *rms_norm("k_norm", tok, kv_w, train, fp32_weight=True)]
    if v["whole_qk_norm"]:  # OLMoE: Llama's RMSNorm over the whole q and k projections, then (clip_qkv) clamps in
        # place, each after a copy autograd keeps of what it overwrites when training
        clips = (("q", q_w), ("k", kv_w), ("v", kv_w)) if cfg.raw.get("clip_qkv") is not None else ()
        ks += [*rms_norm("q_norm", tok, q_w, train), *rms_norm("k_norm", tok, kv_w, train),
               *(k for x, w in clips for k in ([misc(f"{x}_clip_saved", "copy", 2 * tok * w * F32)] if train else [])
                 + [vec(f"{x}_clip", "relu", tok, w, tag="clamp")])]
    if v["qk_norm"]:  # Qwen3RMSNorm (Gemma3RMSNorm) over head_dim, one row per token and head
        ks += [*rms_norm("q_norm", tok * cfg.heads, hd, train, v["gemma"]),
               *rms_norm("k_norm", tok * cfg.num_kv_heads, hd, train, v["gemma"])]
    if v["fused"] or v["partial_rope"]:  # the first rotary_dim of each head rotated, the rest concatenated back
        return ks + cat_rope("q", tok, cfg.heads, hd, v["rotary_dim"], train) \
            + cat_rope("k", tok, cfg.num_kv_heads, hd, v["rotary_dim"], train)
    if v["oss"]:  # GPT-OSS: RoPE on the two chunks of each head
        return ks + [*halves_rope("q_rope", tok, q_w, train, strided=False),
                     *halves_rope("k_rope", tok, kv_w, train, strided=False)]
    # RoPE reads x three times: x * cos, and its two halves in rotate_half
    fp32 = cfg.family in OLMO
    return ks + [*_rope("q_rope", tok, q_w, fp32, train), *grad_sums("q_rope_x", tok, q_w, 3, train),
                 *slice_grads("q_rope_x", tok, q_w, 2, train),
                 *_rope("k_rope", tok, kv_w, fp32, train), *grad_sums("k_rope_x", tok, kv_w, 3, train),
                 *slice_grads("k_rope_x", tok, kv_w, 2, train), *query_position_scale(cfg, tok)]


def query_position_scale(cfg: ModelConfig, tok: int) -> list:
    """Ministral 3 scales each rotated query by 1 + beta log(1 + floor(position / original length)) (Llama 4's
    attention scale), computed again in every layer from the position ids: six tiny fp32 kernels and a cast,
    then the product over q (TorchDispatchMode, transformers 5.24). None elsewhere."""
    if cfg.family != "ministral3":
        return []
    return [*(misc(f"q_pos_scale_{i}", "mask", 2 * tok * F32, fp32=True) for i in range(6)),
            _k("q_pos_scale_cast", "misc:mask", nbytes=2 * tok * F32, dtypes=HALF_DTYPES),  # no gradient: no backward
            vec("q_pos_scale", "mul", tok, cfg.heads * cfg.head_dim, tag="constant")]


def llama_mlp(cfg: ModelConfig, tok: int, train: bool = False) -> list:
    """Gated MLP: gate and up projections (Phi-3: one GEMM, chunked), the activation times up, the down
    projection."""
    h, f = cfg.hidden, cfg.ffn
    v = llama_variant(cfg)
    bias = v["mlp_bias"]
    if v["fused"]:
        up = [linear("gate_up_proj", tok, h, 2 * f, bias=bias), *grad_cat("gate_up_out", tok * 2 * f, train)]
    else:
        up = [linear("gate_proj", tok, h, f, bias=bias), linear("up_proj", tok, h, f, bias=bias)]
    return [*up, *mlp_activation("mlp", cfg.activation, tok, f, train), vec("mlp.gate_mul", "mul", tok, f),
            linear("down_proj", tok, f, h, bias=bias)]


def llama_layer_blocks(cfg: ModelConfig, attn: list, tok: int, train: bool = False,
                       sliding_attn: list | None = None) -> list:
    """The repeated layers of a llama-like decoder (the prefill, training and decode graphs share them):
    `attn` (the layer up to its post-attention norm), then the MLP over `tok` tokens (Gemma 2 and 3: and its
    norm) and the residual add. A MOE_LLAMA family's sparse layers (block `layer`) run `moe_block`, its dense
    ones (`dense_layer`) the gated MLP. `sliding_attn`: the attention of the sliding-window layers where it
    differs from the full layers' (a decode step's shorter cache, or a prefill past the window, whose sliding layers
    alone take a mask; block `sliding_layer`)."""
    h = cfg.hidden
    v = llama_variant(cfg)
    end = [*output_norm("post_ffw_norm", tok, h, v, train), *granite_scale("resid_scale2", tok, h, v),
           vec("resid_add2", "add", tok, h, tag="residual")]
    # the normed x feeds gate and up (Phi-3: one fused GEMM; OLMo 2 feeds them the residual stream, whose
    # readers `attn` counts)
    readers = 1 if v["fused"] or v["olmo"] else 2
    dense = [*grad_sums("post_norm_out", tok, h, readers, train), *llama_mlp(cfg, tok, train)]
    sparse = cfg.sparse_layers
    if sliding_attn is not None:  # Gemma 2 and 3 and OLMo 3 (dense) and GPT-OSS (every layer sparse)
        n = cfg.layer_types.count("sliding_attention")
        mlp = moe_block(cfg, tok, train) if sparse else dense
        layers = [Block("layer", cfg.layers - n, attn + mlp + end, "layer"),
                  Block("sliding_layer", n, sliding_attn + mlp + end, "layer")]
        return [b for b in layers if b.count]
    if not sparse:
        return [Block("layer", cfg.layers, attn + dense + end, "layer")]
    layers = [Block("layer", sparse, attn + moe_block(cfg, tok, train) + end, "layer"),
              Block("dense_layer", cfg.layers - sparse, attn + dense + end, "layer")]
    return [b for b in layers if b.count]
