"""Switch Transformers and T5 encoder-decoders (top-1 experts every `*_sparse_step` layers in Switch)."""
from __future__ import annotations

from hybridperf.graphs.config import ENCODER_DECODER, ModelConfig
from hybridperf.graphs.family import Family
from hybridperf.graphs.layers.activation import mlp_activation, dropout
from hybridperf.graphs.layers.attention_core import attention_core
from hybridperf.graphs.layers.grads import grad_sums
from hybridperf.graphs.layers.norms import rms_norm
from hybridperf.graphs.primitives import F32, Block, gather, linear, misc, vec


def _switch_ff(p, cfg, tok, train):
    """T5's dense feed-forward (Switch's non-expert layers): wi, act, dropout, wo; gated (T5 v1.1):
    act(wi_0 x) * wi_1 x, the normed x read by both."""
    h, f = cfg.hidden, cfg.ffn
    ks = [*grad_sums(f"{p}.resid_in", tok, h, 2, train), *rms_norm(f"{p}.norm", tok, h, train)]
    if cfg.gated_ffn:
        ks += [*grad_sums(f"{p}.norm_out", tok, h, 2, train), linear(f"{p}.wi_0", tok, h, f, bias=False),
               *mlp_activation(p, cfg.activation, tok, f, train), linear(f"{p}.wi_1", tok, h, f, bias=False),
               vec(f"{p}.gate_mul", "mul", tok, f)]
    else:
        ks += [linear(f"{p}.wi", tok, h, f, bias=False), *mlp_activation(p, cfg.activation, tok, f, train)]
    return ks + [*dropout(f"{p}.drop_act", tok, f, train), linear(f"{p}.wo", tok, f, h, bias=False),
                 *dropout(f"{p}.dropout", tok, h, train), vec(f"{p}.resid_add", "add", tok, h, tag="residual")]


def _switch_moe(p, cfg, B, S, train):
    h, f, E, tok = cfg.hidden, cfg.ffn, cfg.num_experts, B * S
    # top-1 routing with a per-sequence capacity: each expert takes at most `expert_capacity` tokens of
    # every sequence (HF's cumsum over the sequence), so ~B * min(capacity, S/E) tokens per expert
    per_expert = B * min(cfg.expert_capacity, max(1, -(-S // E)))
    # the normed tokens are read by the router and by every expert's gather
    ks = [*grad_sums(f"{p}.resid_in", tok, h, 2, train), *rms_norm(f"{p}.norm", tok, h, train),
          *grad_sums(f"{p}.norm_out", tok, h, E + 1, train), linear(f"{p}.router", tok, h, E, bias=False),
          vec(f"{p}.router_softmax", "softmax", tok, E)]
    if train:
        ks.append(misc(f"{p}.jitter", "route", 3 * tok * h * F32))
    ks += [misc(f"{p}.route_{i}", "route", 4 * tok * E * 8) for i in range(5)]  # argmax, one_hot, cumsum, le, mul, max
    ks.append(misc(f"{p}.clone", "copy", 2 * tok * h * F32))
    for e in range(E):
        ks += [misc(f"{p}.e{e}.gather", "index", (2 * per_expert * h + tok) * F32),
               linear(f"{p}.e{e}.wi", per_expert, h, f, bias=False), *mlp_activation(f"{p}.e{e}", cfg.activation, per_expert, f, train),
               *dropout(f"{p}.e{e}.drop_act", per_expert, f, train),
               linear(f"{p}.e{e}.wo", per_expert, f, h, bias=False),
               misc(f"{p}.e{e}.scatter", "index", (2 * per_expert * h + tok) * F32)]
    ks += [vec(f"{p}.router_scale", "mul", tok, h), *dropout(f"{p}.dropout", tok, h, train),
           vec(f"{p}.resid_add", "add", tok, h, tag="residual")]
    return ks


def _switch_attn(p, cfg, B, S, train, S_kv=None, kv_tok=None):
    h, tok, ad = cfg.hidden, B * S, cfg.attn_dim
    kv_tok = tok if kv_tok is None else kv_tok
    # self-attention reads the normed tokens three times; cross-attention reads the encoder output
    # twice (k, v) in every decoder layer
    reads = grad_sums(f"{p}.enc_out", kv_tok, h, 3, train) if p == "cross_attn" \
        else grad_sums(f"{p}.norm_out", tok, h, 3, train)
    ks = [*grad_sums(f"{p}.resid_in", tok, h, 2, train), *rms_norm(f"{p}.norm", tok, h, train), *reads,
          linear(f"{p}.q", tok, h, ad, bias=False),
          linear(f"{p}.k", kv_tok, h, ad, bias=False), linear(f"{p}.v", kv_tok, h, ad, bias=False)]
    # T5's position bias (relative buckets or zeros, plus the padding mask) is a full (B, heads, S, S_kv)
    # tensor: `scores += position_bias` reads two score-sized tensors (NeuSight's trace: VECadd)
    ks += attention_core(p, B, S, cfg.heads, cfg.head_dim, train, scale_op=None, mask_op=("add",), S_kv=S_kv)
    ks += [linear(f"{p}.o", tok, ad, h, bias=False), *dropout(f"{p}.dropout", tok, h, train),
           vec(f"{p}.resid_add", "add", tok, h, tag="residual")]
    return ks


def forward(cfg: ModelConfig, B, S, train) -> list:
    """Encoder-decoder with decoder length = encoder length = S (as NeuSight ran it)."""
    h, V, tok, n = cfg.hidden, cfg.vocab, B * S, cfg.heads
    bias_pre = [misc(f"relpos_{i}", "mask", 2 * S * S * 8) for i in range(10)]  # bucket arithmetic on (S, S)
    bias_pre += [gather("relpos_embedding", S * S, n, 32), misc("relpos_permute", "copy", 2 * S * S * n * F32),
                 misc("mask_add", "copy", 3 * B * n * S * S * F32)]
    # every layer of a stack adds the same (B, n, S, S) position bias to its scores, so autograd sums
    # its gradient over the stack's layers (it reaches the relative-attention embedding)
    enc_pre = [gather("embed_tokens", tok, h, V), *dropout("enc_dropout", tok, h, train), *[
        {**k, "name": "enc." + k["name"]} for k in bias_pre],
        *grad_sums("enc.position_bias", B * n * S, S, cfg.layers, train)]
    # cross-attention's bias: zeros((1, n, S, S)) plus the encoder mask, built once (no gradient)
    dec_pre = [gather("dec_embed_tokens", tok, h, 0), *dropout("dec_dropout", tok, h, train), *[
        {**k, "name": "dec." + k["name"]} for k in bias_pre], misc("dec.causal_mask", "mask", 4 * B * S * S * F32),
        *grad_sums("dec.position_bias", B * n * S, S, cfg.decoder_layers, train),
        misc("dec.cross_zeros", "mask", n * S * S * F32),
        misc("dec.cross_bias", "copy", (n * S * S + B * n * S * S) * F32)]

    def layer_counts(n_layers, step):
        sparse = sum(1 for i in range(n_layers) if step > 0 and (step == 1 or i % step == 1))
        return n_layers - sparse, sparse

    e_dense, e_sparse = layer_counts(cfg.layers, cfg.encoder_sparse_step)
    d_dense, d_sparse = layer_counts(cfg.decoder_layers, cfg.decoder_sparse_step)
    enc_attn = _switch_attn("self_attn", cfg, B, S, train)
    dec_attn = _switch_attn("self_attn", cfg, B, S, train) + _switch_attn("cross_attn", cfg, B, S, train)
    blocks = [Block("encoder_embeddings", 1, enc_pre, "pre")]
    if e_dense:
        blocks.append(Block("encoder_dense", e_dense, enc_attn + _switch_ff("ff", cfg, tok, train)))
    if e_sparse:
        blocks.append(Block("encoder_sparse", e_sparse, enc_attn + _switch_moe("moe", cfg, B, S, train)))
    blocks.append(Block("encoder_final", 1, [*rms_norm("enc_final_norm", tok, h, train),
                                             *dropout("enc_final_dropout", tok, h, train)], "post"))
    blocks.append(Block("decoder_embeddings", 1, dec_pre, "pre"))
    if d_dense:
        blocks.append(Block("decoder_dense", d_dense, dec_attn + _switch_ff("ff", cfg, tok, train)))
    if d_sparse:
        blocks.append(Block("decoder_sparse", d_sparse, dec_attn + _switch_moe("moe", cfg, B, S, train)))
    # a tied LM head first scales the decoder output by d_model ** -0.5 (T5 v1.0, Switch; not T5 v1.1)
    head = [*rms_norm("dec_final_norm", tok, h, train), *dropout("dec_final_dropout", tok, h, train),
            *([vec("tied_scale", "mulu", tok, h)] if cfg.tied_embeddings else []),
            linear("lm_head", tok, h, V, bias=False)]
    blocks.append(Block("head", 1, head, "post"))
    return blocks


#: bytes autograd saves per layer and outside the layers, (fp32 model, 16-bit model), counted by
#: `experiments/models/activation_memory.py` (`hybridperf.graphs.memory`); a model_type not counted names the
#: counted one whose layer it resembles most (not measured): Switch's (and T5's) blocks have ReLU MLPs and attention
#: dropout, BERT's saved set being the closest (what its expert layers keep depends on the tokens routed under the
#: expert capacity, which random weights do not reproduce)
ACTIVATION = {
    "switch_transformers": "bert",
    "t5": "bert",
}
FAMILY = Family(ENCODER_DECODER, forward, activation=ACTIVATION)
