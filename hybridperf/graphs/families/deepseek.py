"""DeepSeek-V3 (Kimi-K2, Moonlight): multi-head latent attention and a top-k MoE with shared experts."""
from __future__ import annotations

from hybridperf.graphs.attention import mark_call
from hybridperf.graphs.config import ModelConfig, kv_length
from hybridperf.graphs.decode import cache_row, decode_setup
from hybridperf.graphs.family import Family
from hybridperf.graphs.layers.attention_core import attention_scores
from hybridperf.graphs.layers.llama import llama_layer_blocks
from hybridperf.graphs.layers.mla import mla_attention, mla_dims, mla_query_and_latent
from hybridperf.graphs.layers.norms import rms_norm
from hybridperf.graphs.layers.rope import causal_and_rotary_setup
from hybridperf.graphs.memory import mla_layer_extra_bytes, moe_layer_extra_bytes
from hybridperf.graphs.primitives import F32, Block, bmm, gather, linear, misc, vec


def forward(cfg: ModelConfig, B, S, train) -> list:
    """DeepseekV3ForCausalLM (HF eager): Llama's embeddings, mask, rotary table and head around layers of
    multi-head latent attention (`mla_attention`) and a dense MLP (the first `first_k_dense_replace`,
    block `dense_layer`) or the top-k MoE with its shared experts (`moe_block`, block `layer`)."""
    h, V, tok = cfg.hidden, cfg.vocab, B * S
    pre = [gather("embed_tokens", tok, h, V), *causal_and_rotary_setup(B, S, mla_dims(cfg)["qk_rope"])]
    post = [*rms_norm("final_norm", tok, h, train), linear("lm_head", tok, h, V, bias=False)]
    return [Block("embeddings", 1, pre, "pre"), *llama_layer_blocks(cfg, mla_attention(cfg, B, S, train), tok, train),
            Block("head", 1, post, "post")]


def _mla(cfg: ModelConfig, B: int, kv: int) -> list:
    """DeepSeek-V3's latent attention for B new tokens (`layers.mla.mla_attention`): the cache holds the normed
    key/value latent and the rotated shared key (two torch.cat per layer and step), and every step expands
    the whole cache again: `kv_b_proj` over kv tokens, the keys assembled for every head, the values copied."""
    d = mla_dims(cfg)
    h, H = cfg.hidden, cfg.heads
    nope, rope, v, r = d["qk_nope"], d["qk_rope"], d["v"], d["kv_lora"]
    qk = nope + rope
    return [*mla_query_and_latent(cfg, B),
            cache_row("attn.cache_latent", "copy", 2 * B * kv * r * F32, kv),
            cache_row("attn.cache_rope", "copy", 2 * B * kv * rope * F32, kv),
            linear("kv_b_proj", B * kv, r, H * (nope + v), bias=False),
            misc("k_nope_copy", "copy", 2 * B * kv * H * nope * F32),
            misc("k_rope_copy", "copy", 2 * B * kv * H * rope * F32),
            *mark_call([bmm("attn.qk", B * H, 1, qk, kv), *attention_scores("attn", B * H, kv, "mulu", ("addu",), True),
                        misc("attn.v_copy", "copy", 2 * B * kv * H * v * F32), bmm("attn.av", B * H, 1, kv, v)],
                       B=B, S=1, S_kv=kv, heads=H, kv_heads=H, hd=qk, vd=v, train=False),
            linear("o_proj", B, H * v, h, bias=bool(cfg.raw.get("attention_bias", False))),
            vec("resid_add1", "add", B, h), *rms_norm("post_norm", B, h)]


def decode(cfg: ModelConfig, B: int, seq: int) -> list:
    h, V = cfg.hidden, cfg.vocab
    kv = kv_length(cfg, seq)
    pre = [gather("embed_tokens", B, h, V), *decode_setup(cfg, B, kv, FAMILY.setup_kernels[cfg.family])]
    post = [*rms_norm("final_norm", B, h), linear("lm_head", B, h, V, bias=False)]
    return [Block("embeddings", 1, pre, "pre"), *llama_layer_blocks(cfg, _mla(cfg, B, kv), B),
            Block("head", 1, post, "post")]


def saved_extra(cfg: ModelConfig, tok: int, eb: float) -> list:
    """What DeepSeek-V3's layers save beyond Llama's (`graphs.memory`): the MoE's routing state in its sparse
    layers, and every layer's latent attention."""
    d = mla_dims(cfg)
    widths = (d["q_lora"], d["kv_lora"] + d["qk_rope"], cfg.heads * (d["qk_nope"] + d["qk_rope"]),
              cfg.heads * (d["qk_nope"] + d["v"]), cfg.hidden)
    moe = [(moe_layer_extra_bytes(tok, cfg.experts_per_token, cfg.hidden, eb, False, 0), cfg.sparse_layers)] \
        if cfg.sparse_layers else []
    return moe + [(mla_layer_extra_bytes(tok, widths, eb), cfg.layers)]


def kv_cache_width(cfg: ModelConfig) -> int:
    """The cache holds the key/value latent and the shared rotary key, once per token and layer."""
    d = mla_dims(cfg)
    return d["kv_lora"] + d["qk_rope"]


#: bytes autograd saves per layer and outside the layers, (fp32 model, 16-bit model), counted by
#: `experiments/models/activation_memory.py` (`hybridperf.graphs.memory`); a model_type not counted names the
#: counted one whose layer it resembles most (not measured)
ACTIVATION = {
    "deepseek_v3": "llama",
}
FAMILY = Family(("deepseek_v3",), forward, decode, setup_kernels={"deepseek_v3": 19}, activation=ACTIVATION,
                saved_extra=saved_extra, kv_cache_width=kv_cache_width, position_limited=True,
                softmax_fp32=("deepseek_v3",))
