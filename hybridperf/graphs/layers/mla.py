"""DeepSeek-V3's multi-head latent attention (shared by its prefill, training and decode graphs)."""
from __future__ import annotations

from hybridperf.graphs.config import DEEPSEEK_DEFAULTS, ModelConfig
from hybridperf.graphs.layers.attention_core import attention_core
from hybridperf.graphs.layers.grads import grad_cat, grad_sums, slice_grads
from hybridperf.graphs.layers.norms import rms_norm
from hybridperf.graphs.layers.rope import _rope, halves_rope
from hybridperf.graphs.primitives import F32, linear, misc, vec


def mla_dims(cfg: ModelConfig) -> dict:
    """DeepSeek-V3's latent-attention widths: q_lora (0: one q_proj), kv_lora, nope, rope, v; interleaved RoPE."""
    raw = cfg.raw
    keys = {"kv_lora": "kv_lora_rank", "qk_nope": "qk_nope_head_dim", "qk_rope": "qk_rope_head_dim", "v": "v_head_dim"}
    return {"q_lora": int(raw.get("q_lora_rank", DEEPSEEK_DEFAULTS["q_lora_rank"]) or 0),
            "interleave": bool(raw.get("rope_interleave", True)),
            **{k: int(raw.get(key, DEEPSEEK_DEFAULTS[key])) for k, key in keys.items()}}


def mla_query_and_latent(cfg: ModelConfig, tok: int, train: bool = False) -> list:
    """The first half of DeepSeek-V3's latent attention over `tok` tokens (the prefill, training and decode
    graphs share it): the input norm, q through a low-rank `q_a_proj`, RMSNorm and `q_b_proj` (or one
    q_proj), the key/value latent and the shared rotary key from `kv_a_proj_with_mqa`, RMSNorm over the
    latent, RoPE on the rotated part of q and k, and q re-assembled (torch.cat). In the backward each split
    is a torch.cat of its parts' gradients and each head-split view a layout copy."""
    d = mla_dims(cfg)
    h, H = cfg.hidden, cfg.heads
    rope, r, qk = d["qk_rope"], d["kv_lora"], d["qk_nope"] + d["qk_rope"]
    bias = bool(cfg.raw.get("attention_bias", False))
    ks = [*grad_sums("resid_in", tok, h, 2, train), *rms_norm("input_norm", tok, h, train),
          *grad_sums("input_norm_out", tok, h, 2, train)]
    if d["q_lora"]:
        ks += [linear("q_a_proj", tok, h, d["q_lora"], bias=bias), *rms_norm("q_a_norm", tok, d["q_lora"], train),
               linear("q_b_proj", tok, d["q_lora"], H * qk, bias=False)]
    else:
        ks.append(linear("q_proj", tok, h, H * qk, bias=False))

    def rot(p, rows, w):
        if d["interleave"]:
            return halves_rope(p, rows, w, train)
        return [*_rope(p, rows, w), *grad_sums(f"{p}_x", rows, w, 3, train), *slice_grads(f"{p}_x", rows, w, 2, train)]

    return ks + [*grad_cat("q_split", tok * H * qk, train), *grad_cat("q_layout", tok * H * qk, train),
                 linear("kv_a_proj", tok, h, r + rope, bias=bias), *grad_cat("kv_a_split", tok * (r + rope), train),
                 *rms_norm("kv_a_norm", tok, r, train), *rot("q_rope", tok, H * rope), *rot("k_rope", tok, rope),
                 misc("q_cat", "copy", 2 * tok * H * qk * F32)]


def mla_attention(cfg: ModelConfig, B: int, S: int, train: bool = False) -> list:
    """DeepSeek-V3's multi-head latent attention in HF eager code (DeepseekV3Attention, transformers 5.23),
    from the input norm to the post-attention norm: `mla_query_and_latent`, the latent expanded to every
    head's key and value (`kv_b_proj`), the keys assembled into a new tensor (two copies: the shared rotary
    key broadcast to every head, whose gradient is summed over the heads), then eager attention with
    (nope + rope)-wide keys and v_head_dim-wide values."""
    d = mla_dims(cfg)
    h, H, tok = cfg.hidden, cfg.heads, B * S
    nope, rope, v, r = d["qk_nope"], d["qk_rope"], d["v"], d["kv_lora"]
    qk = nope + rope
    bias = bool(cfg.raw.get("attention_bias", False))
    ks = [*mla_query_and_latent(cfg, tok, train),
          linear("kv_b_proj", tok, r, H * (nope + v), bias=False),
          *grad_cat("kv_b_layout", tok * H * (nope + v), train), *grad_cat("kv_b_split", tok * H * (nope + v), train),
          misc("k_nope_copy", "copy", 2 * tok * H * nope * F32),
          misc("k_rope_copy", "copy", 2 * tok * H * rope * F32, tag="broadcast_copy"),
          # autograd's copies for the two slot copies into the new key tensor (CopySlices): the key gradient
          # twice, each slot's part, and the zeroed rotary slot
          *(k for n, w in (("key_a", qk), ("rope", rope), ("rope_zero", rope), ("rope_in", rope), ("key_b", qk),
                           ("nope", nope)) for k in grad_cat(f"k_slots.{n}", tok * H * w, train))]
    core = attention_core("attn", B, S, H, qk, train, scale_op="mulu", mask_op=("addu",), dropout=False,
                           softmax_fp32=True, layout=("v",), v_dim=v)
    # v is a slice of kv_b_proj's output: its gradient reaches the split's torch.cat, no layout copy of its own
    ks += [{**k, "tag": ""} if k["name"] == "attn.v_copy" else k for k in core]
    return ks + [linear("o_proj", tok, H * v, h, bias=bias), vec("resid_add1", "add", tok, h, tag="residual"),
                 *grad_sums("resid_mid", tok, h, 2, train), *rms_norm("post_norm", tok, h, train)]
