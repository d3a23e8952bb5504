"""GPT-NeoX / Pythia: fused QKV, partial RoPE, parallel residual."""
from __future__ import annotations

from hybridperf.graphs.config import ModelConfig, kv_length
from hybridperf.graphs.decode import cached_attention, decode_setup
from hybridperf.graphs.family import Family
from hybridperf.graphs.layers.activation import mlp_activation, dropout
from hybridperf.graphs.layers.attention_core import attention_core
from hybridperf.graphs.layers.grads import grad_cat, grad_sums
from hybridperf.graphs.layers.rope import cat_rope, causal_and_rotary_setup, rotary_dim
from hybridperf.graphs.primitives import Block, gather, linear, ln, vec


def neox_layout(cfg: ModelConfig) -> dict:
    """GPT-NeoX's options: rotated width per head (`rotary_pct`, 0.25 in Pythia), parallel residual,
    biases, and whether training launches dropout kernels (Pythia's dropouts are 0)."""
    return {"rotary_dim": rotary_dim(cfg, 0.25), "parallel": bool(cfg.raw.get("use_parallel_residual", True)),
            "bias": bool(cfg.raw.get("attention_bias", True)),
            "attn_dropout": float(cfg.raw.get("attention_dropout") or 0) > 0,
            "hidden_dropout": float(cfg.raw.get("hidden_dropout") or 0) > 0}


def neox_rope(tok: int, heads: int, hd: int, rot: int, train: bool) -> list:
    """GPT-NeoX's RoPE on q and k (`cat_rope`)."""
    return cat_rope("q", tok, heads, hd, rot, train) + cat_rope("k", tok, heads, hd, rot, train)


def forward(cfg: ModelConfig, B, S, train) -> list:
    """GPTNeoXForCausalLM (HF eager, TorchDispatchMode-counted): LayerNorm, a fused QKV GEMM whose output
    is chunked (its gradient is one concatenation), partial RoPE ending in a torch.cat (q and k come out
    contiguous: only v needs a layout copy), softmax in fp32, and with the parallel residual
    x + attn(ln1(x)) + mlp(ln2(x)) (two adds; x read by both norms and the sum)."""
    h, f, V, tok = cfg.hidden, cfg.ffn, cfg.vocab, B * S
    o = neox_layout(cfg)
    pre = [gather("embed_in", tok, h, V), *dropout("emb_dropout", tok, h, train and o["hidden_dropout"]),
           *causal_and_rotary_setup(B, S, o["rotary_dim"])]
    L = [*grad_sums("resid_in", tok, h, 3 if o["parallel"] else 2, train), ln("input_layernorm", tok, h),
         linear("query_key_value", tok, h, 3 * h, bias=o["bias"]), *grad_cat("qkv_out", tok * 3 * h, train),
         *neox_rope(tok, cfg.heads, cfg.head_dim, o["rotary_dim"], train)]
    L += attention_core("attn", B, S, cfg.heads, cfg.head_dim, train, scale_op="mulu", mask_op=("addu",),
                         dropout=o["attn_dropout"], softmax_fp32=True, layout=("v",))
    L += [linear("dense", tok, h, h, bias=o["bias"]),
          *dropout("attn_dropout_out", tok, h, train and o["hidden_dropout"])]
    mlp = [linear("dense_h_to_4h", tok, h, f), *mlp_activation("mlp", cfg.activation, tok, f, train),
           linear("dense_4h_to_h", tok, f, h), *dropout("mlp_dropout", tok, h, train and o["hidden_dropout"])]
    if o["parallel"]:
        L += [ln("post_attention_layernorm", tok, h), *mlp, vec("resid_add1", "add", tok, h, tag="residual"),
              vec("resid_add2", "add", tok, h, tag="residual")]
    else:
        L += [vec("resid_add1", "add", tok, h, tag="residual"), *grad_sums("resid_mid", tok, h, 2, train),
              ln("post_attention_layernorm", tok, h), *mlp, vec("resid_add2", "add", tok, h, tag="residual")]
    post = [ln("final_layer_norm", tok, h), linear("embed_out", tok, h, V, bias=False)]
    return [Block("embeddings", 1, pre, "pre"), Block("layer", cfg.layers, L, "layer"), Block("head", 1, post, "post")]


def decode(cfg: ModelConfig, B: int, seq: int) -> list:
    h, f, V = cfg.hidden, cfg.ffn, cfg.vocab
    kv = kv_length(cfg, seq)
    o = neox_layout(cfg)
    pre = [gather("embed_in", B, h, V), *decode_setup(cfg, B, kv, FAMILY.setup_kernels[cfg.family])]
    attn = [ln("input_layernorm", B, h), linear("query_key_value", B, h, 3 * h, bias=o["bias"]),
            *neox_rope(B, cfg.heads, cfg.head_dim, o["rotary_dim"], False),
            *cached_attention("attn", cfg, B, kv, "mulu", ("addu",), softmax_fp32=True),
            linear("dense", B, h, h, bias=o["bias"])]
    mlp = [ln("post_attention_layernorm", B, h), linear("dense_h_to_4h", B, h, f),
           *mlp_activation("mlp", cfg.activation, B, f), linear("dense_4h_to_h", B, f, h)]
    L = attn + mlp + [vec("resid_add1", "add", B, h), vec("resid_add2", "add", B, h)]
    post = [ln("final_layer_norm", B, h), linear("embed_out", B, h, V, bias=False)]
    return [Block("embeddings", 1, pre, "pre"), Block("layer", cfg.layers, L, "layer"), Block("head", 1, post, "post")]


#: bytes autograd saves per layer and outside the layers, (fp32 model, 16-bit model), counted by
#: `experiments/models/activation_memory.py` (`hybridperf.graphs.memory`); a model_type not counted names the
#: counted one whose layer it resembles most (not measured)
ACTIVATION = {
    "gpt_neox": ({"c_h": 28.08, "c_f": 8.0, "c_a": 4.01, "d_h": 8.29, "d_v": 4.1},
                 {"c_h": 14.04, "c_f": 4.0, "c_a": 6.0, "d_h": 4.15, "d_v": 4.07}),
}
FAMILY = Family(("gpt_neox",), forward, decode, setup_kernels={"gpt_neox": 19},
                tensor_parallel=("gpt_neox",), activation=ACTIVATION, position_limited=True,
                softmax_fp32=("gpt_neox",))
