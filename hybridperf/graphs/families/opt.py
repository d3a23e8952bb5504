"""OPT (OPTForCausalLM): pre-LN (or OPT-350m's post-LN with projected embeddings), ReLU MLP."""
from __future__ import annotations

from hybridperf.graphs.config import ModelConfig, kv_length
from hybridperf.graphs.decode import cached_attention, decode_setup
from hybridperf.graphs.family import Family
from hybridperf.graphs.layers.activation import mlp_activation, dropout
from hybridperf.graphs.layers.attention_core import attention_core
from hybridperf.graphs.layers.grads import grad_sums
from hybridperf.graphs.primitives import F32, Block, gather, linear, ln, misc, vec


def opt_layout(cfg: ModelConfig) -> tuple[int, bool, bool]:
    """(embedding width, pre-LN, final LayerNorm) of an OPT config: OPT-350m embeds in
    `word_embed_proj_dim` (512) and projects in and out of the 1024-wide layers (`project_in`/
    `project_out`), and normalises after each residual add (`do_layer_norm_before=False`, no final
    LayerNorm); the other sizes are pre-LN with a final LayerNorm (unless `_remove_final_layer_norm`)."""
    proj = int(cfg.raw.get("word_embed_proj_dim") or cfg.hidden)
    pre_ln = bool(cfg.raw.get("do_layer_norm_before", True))
    return proj, pre_ln, pre_ln and not cfg.raw.get("_remove_final_layer_norm")


def forward(cfg: ModelConfig, B, S, train) -> list:
    h, f, V, tok = cfg.hidden, cfg.ffn, cfg.vocab, B * S
    proj, pre_ln, final_ln = opt_layout(cfg)
    pre = [gather("embed_tokens", tok, proj, V), misc("causal_full", "mask", S * S * F32),
           misc("causal_fill", "mask", 2 * S * S * F32)]
    pre += [misc(f"mask_{i}", "mask", 2 * B * S * S * F32) for i in range(5)]  # sub, to, masked_fill, bool, masked_fill
    pre += [misc(f"positions_{i}", "mask", 2 * B * S * 8) for i in range(6)]  # ones, long, cumsum, mul, sub, add
    if proj != h:
        pre.append(linear("project_in", tok, proj, h, bias=False))
    pre += [gather("embed_positions", tok, h, max(cfg.max_positions, S) + 2),
            vec("embed_add", "add", tok, h, tag="residual")]
    # pre-LN: the layer input feeds the LayerNorm and the residual add, the normed tokens q, k and v;
    # post-LN: the layer input (the previous layer's LayerNorm) feeds q, k, v and the residual add
    L = [*grad_sums("resid_in", tok, h, 2, train), ln("self_attn_ln", tok, h),
         *grad_sums("self_attn_ln_out", tok, h, 3, train)] if pre_ln else [*grad_sums("resid_in", tok, h, 4, train)]
    L += [linear("q_proj", tok, h, h), vec("q_scale", "mulu", tok, h), linear("k_proj", tok, h, h),
          linear("v_proj", tok, h, h)]
    L += attention_core("attn", B, S, cfg.heads, cfg.head_dim, train, scale_op=None,
                         mask_op=("add", ("addu", "where")), softmax_fp32=True)  # OPT's softmax(dtype=float32)
    L += [linear("out_proj", tok, h, h), *dropout("attn_dropout_out", tok, h, train),
          vec("resid_add1", "add", tok, h, tag="residual")]
    L += [*grad_sums("resid_mid", tok, h, 2, train), ln("final_ln", tok, h)] if pre_ln \
        else [ln("self_attn_ln", tok, h), *grad_sums("resid_mid", tok, h, 2, train)]
    L += [linear("fc1", tok, h, f), *mlp_activation("mlp", cfg.activation, tok, f, train), linear("fc2", tok, f, h),
          *dropout("mlp_dropout", tok, h, train), vec("resid_add2", "add", tok, h, tag="residual")]
    if not pre_ln:
        L.append(ln("final_ln", tok, h))
    post = [ln("final_layer_norm", tok, h)] if final_ln else []
    if proj != h:
        post.append(linear("project_out", tok, h, proj, bias=False))
    post.append(linear("lm_head", tok, proj, V, bias=False))
    return [Block("embeddings", 1, pre, "pre"), Block("layer", cfg.layers, L, "layer"), Block("head", 1, post, "post")]


def decode(cfg: ModelConfig, B: int, seq: int) -> list:
    h, f, V = cfg.hidden, cfg.ffn, cfg.vocab
    kv = kv_length(cfg, seq)
    proj, pre_ln, final_ln = opt_layout(cfg)
    pre = [gather("embed_tokens", B, proj, V), *([linear("project_in", B, proj, h, bias=False)] if proj != h else []),
           gather("embed_positions", B, h, cfg.max_positions + 2), vec("embed_add", "add", B, h),
           *decode_setup(cfg, B, kv, FAMILY.setup_kernels[cfg.family])]
    attn = [linear("q_proj", B, h, h), vec("q_scale", "mulu", B, h), linear("k_proj", B, h, h),
            linear("v_proj", B, h, h), *cached_attention("attn", cfg, B, kv, "mulu", ("addu",), softmax_fp32=True),
            linear("out_proj", B, h, h), vec("resid_add1", "add", B, h)]
    mlp = [linear("fc1", B, h, f), *mlp_activation("mlp", cfg.activation, B, f), linear("fc2", B, f, h),
           vec("resid_add2", "add", B, h)]
    # pre-LN normalises before attention and the MLP, post-LN (OPT-350m) after their residual adds
    if pre_ln:
        L = [ln("self_attn_ln", B, h), *attn, ln("final_ln", B, h), *mlp]
    else:
        L = [*attn, ln("self_attn_ln", B, h), *mlp, ln("final_ln", B, h)]
    post = [ln("final_layer_norm", B, h)] if final_ln else []
    post += [*([linear("project_out", B, h, proj, bias=False)] if proj != h else []),
             linear("lm_head", B, proj, V, bias=False)]
    return [Block("embeddings", 1, pre, "pre"), Block("layer", cfg.layers, L, "layer"), Block("head", 1, post, "post")]


#: bytes autograd saves per layer and outside the layers, (fp32 model, 16-bit model), counted by
#: `experiments/models/activation_memory.py` (`hybridperf.graphs.memory`); a model_type not counted names the
#: counted one whose layer it resembles most (not measured)
ACTIVATION = {
    "opt": ({"c_h": 40.08, "c_f": 4.0, "c_a": 4.01, "d_h": 7.84, "d_v": 4.12},
            {"c_h": 20.04, "c_f": 2.0, "c_a": 6.0, "d_h": 3.92, "d_v": 4.08}),
}
#: OPT's decode setup adds its cumsum position ids
FAMILY = Family(("opt",), forward, decode, setup_kernels={"opt": 16}, tensor_parallel=("opt",), activation=ACTIVATION,
                position_limited=True, softmax_fp32=("opt",))
