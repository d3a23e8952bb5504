"""GPT-2 (GPT2LMHeadModel, also the GPT-3-style configs) and GPT-Neo: learned positions, LayerNorm, GELU MLP."""
from __future__ import annotations

from hybridperf.graphs.config import ModelConfig, kv_length
from hybridperf.graphs.decode import cached_attention, decode_setup
from hybridperf.graphs.family import Family
from hybridperf.graphs.layers.activation import mlp_activation, dropout
from hybridperf.graphs.layers.attention_core import attention_core
from hybridperf.graphs.layers.grads import grad_sums
from hybridperf.graphs.primitives import Block, gather, linear, ln, misc, vec


def forward(cfg: ModelConfig, B, S, train) -> list:
    h, f, V, tok = cfg.hidden, cfg.ffn, cfg.vocab, B * S
    neo = cfg.family == "gpt_neo"
    pre = [misc("arange", "mask", S * 8), gather("wte", tok, h, V), gather("wpe", S, h, max(cfg.max_positions, S)),
           vec("embed_add", "add", tok, h, tag="residual"), *dropout("embed_dropout", tok, h, train)]
    L = [*grad_sums("resid_in", tok, h, 2, train), ln("ln_1", tok, h)]
    if neo:
        L += [*grad_sums("ln_1_out", tok, h, 3, train), linear("q_proj", tok, h, h, bias=False),
              linear("k_proj", tok, h, h, bias=False), linear("v_proj", tok, h, h, bias=False)]
    else:
        L += [linear("c_attn", tok, h, 3 * h, conv1d=True)]
    # GPT-Neo's eager attention casts q and k to fp32 (`_attn`): QK^T, mask and softmax run in fp32
    L += attention_core("attn", B, S, cfg.heads, cfg.head_dim, train,
                         scale_op=None if neo else "divu", mask_op=(("addu", "where"),), qk_fp32=neo)
    conv = not neo  # GPT-2's projections are Conv1D (addmm of x @ W), GPT-Neo's nn.Linear
    L += [linear("attn_proj", tok, h, h, conv1d=conv), *dropout("resid_dropout", tok, h, train),
          vec("resid_add1", "add", tok, h, tag="residual"), *grad_sums("resid_mid", tok, h, 2, train),
          ln("ln_2", tok, h), linear("c_fc", tok, h, f, conv1d=conv),
          *mlp_activation("mlp", cfg.activation, tok, f, train), linear("mlp_proj", tok, f, h, conv1d=conv),
          *dropout("mlp_dropout", tok, h, train), vec("resid_add2", "add", tok, h, tag="residual")]
    post = [ln("ln_f", tok, h), linear("lm_head", tok, h, V, bias=False)]
    return [Block("embeddings", 1, pre, "pre"), Block("layer", cfg.layers, L, "layer"), Block("head", 1, post, "post")]


def decode(cfg: ModelConfig, B: int, seq: int) -> list:
    h, f, V = cfg.hidden, cfg.ffn, cfg.vocab
    kv = kv_length(cfg, seq)
    neo = cfg.family == "gpt_neo"
    pre = [gather("wte", B, h, V), gather("wpe", 1, h, cfg.max_positions), vec("embed_add", "add", B, h),
           *decode_setup(cfg, B, kv, FAMILY.setup_kernels[cfg.family])]
    L = [ln("ln_1", B, h)]
    if neo:  # no scaling; the causal window's where, then the padding mask's add; q and k cast to fp32
        L += [linear("q_proj", B, h, h, bias=False), linear("k_proj", B, h, h, bias=False),
              linear("v_proj", B, h, h, bias=False),
              *cached_attention("attn", cfg, B, kv, None, ("addu", "addu"), qk_fp32=True)]
    else:
        L += [linear("c_attn", B, h, 3 * h, conv1d=True),
              *cached_attention("attn", cfg, B, kv, "mulu", ("addu",), q_copy=True)]
    conv = not neo  # GPT-2's Conv1D, GPT-Neo's nn.Linear
    L += [linear("attn_proj", B, h, h, conv1d=conv), vec("resid_add1", "add", B, h), ln("ln_2", B, h),
          linear("c_fc", B, h, f, conv1d=conv), *mlp_activation("mlp", cfg.activation, B, f),
          linear("mlp_proj", B, f, h, conv1d=conv), vec("resid_add2", "add", B, h)]
    post = [ln("ln_f", B, h), linear("lm_head", B, h, V, bias=False)]
    return [Block("embeddings", 1, pre, "pre"), Block("layer", cfg.layers, L, "layer"), Block("head", 1, post, "post")]


#: bytes autograd saves per layer and outside the layers, (fp32 model, 16-bit model), counted by
#: `experiments/models/activation_memory.py` (`hybridperf.graphs.memory`); a model_type not counted names the
#: counted one whose layer it resembles most (not measured)
ACTIVATION = {
    "gpt2": ({"c_h": 41.68, "c_f": 20.0, "c_a": 12.01, "d_h": 11.84, "d_v": 4.11},
             {"c_h": 20.84, "c_f": 10.0, "c_a": 6.0, "d_h": 5.92, "d_v": 4.08}),
    "gpt_neo": ({"c_h": 32.06, "c_f": 20.0, "c_a": 4.01, "c_m": 1.0, "d_h": 7.88, "d_v": 4.1},
                {"c_h": 20.03, "c_f": 10.0, "c_a": 6.01, "c_m": 1.0, "d_h": 3.94, "d_v": 4.07}),
}
FAMILY = Family(("gpt2", "gpt_neo"), forward, decode, setup_kernels={"gpt2": 12, "gpt_neo": 12},
                tensor_parallel=("gpt2", "gpt_neo"), activation=ACTIVATION, position_limited=True,
                softmax_fp32=("gpt_neo",))
