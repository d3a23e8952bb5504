"""One decode step of a causal LM with a key/value cache, as Hugging Face eager generation runs it.

`build_graph(config, batch, seq, mode="decode")`: each of `batch` sequences feeds one new token and
attends to its `seq` cached tokens plus the new one (`kv_length`), as `model(next_ids,
past_key_values=cache)` does inside `generate()`. The step is the model's forward only: no sampling
or logits processing.

The kernels are those HF eager code launches, counted with TorchDispatchMode on GPT-2, GPT-Neo, OPT and
Llama decode steps with a `DynamicCache` (transformers 5.23; `experiments/gpu/decode_trace.py` re-counts
them and compares with this module):

  * every projection, norm, activation and residual kernel of the prefill layer, over `batch` rows;
  * the cache update: `torch.cat` of the cached keys (values) and the new ones, i.e. a copy of the whole
    cache, twice per layer and step;
  * grouped-query attention (fewer key/value heads than heads): `repeat_kv` copies keys and values out
    to every head;
  * QK^T and AV as batched matrix-vector products (batch x heads, 1, head_dim, kv_length), the scale,
    the mask and the softmax over kv_length. The query and the merged heads of one token are views
    (GPT-2 copies its query, a strided slice of the fused QKV output), so the prefill's layout copies
    are gone;
  * before the layers, position ids, the causal mask and (Llama) the rotary table: 12-19 tiny kernels.

HF's half-precision upcasts (RMSNorm, Llama's and OPT's softmax, GPT-Neo's QK^T) are the prefill's.
Mistral's sliding-window cache keeps the last `sliding_window` tokens at most, and so do Gemma 2 and 3's
sliding layers; the other families keep them all (GPT-Neo's local layers included: their window is in the
mask, not the cache). DeepSeek-V3 caches its key/value latent and re-expands it every step (`_mla`).
"""
from __future__ import annotations

from hybridperf.graphs.attention import mark_call
from hybridperf.graphs.config import LLAMA_LIKE, ModelConfig, kv_length
from hybridperf.graphs.kernels import (DECODE_BUILDERS, F32, Block, _activation, _rms_norm, attention_scores, bmm, cast,
                                       gather, linear, llama_layer_blocks, llama_qkv, llama_variant, ln, misc,
                                       mla_dims, mla_query_and_latent, neox_layout, neox_rope, opt_layout,
                                       second_rotary_table, soft_cap, vec)

#: kernels that build position ids, the causal mask (arange, add, le, where, ...) and, for Llama, the
#: rotary cos/sin before the first layer (counted; all tiny); OPT adds its cumsum position ids
SETUP_KERNELS = {"gpt2": 12, "gpt_neo": 12, "opt": 16, "llama": 19, "gpt_neox": 19,
                 # a sliding-window mask too (unused in Qwen2-MoE)
                 "qwen2_moe": 34, "gemma2": 34, "gemma3_text": 34, "gpt_oss": 33}
#: of those, the rotary models' casts in a half-precision model (cos and sin and the mask to the model dtype)
LLAMA_SETUP_CASTS = 3


def _setup(cfg: ModelConfig, B: int, kv: int) -> list:
    n = SETUP_KERNELS[cfg.family if cfg.family in SETUP_KERNELS or cfg.family not in LLAMA_LIKE else "llama"]
    ks = [misc(f"setup_{i}", "mask", 2 * B * kv * 8) for i in range(n)]
    if cfg.family in (*LLAMA_LIKE, "gpt_neox"):  # rotary tables: cast like Llama's
        ks += [cast(f"setup_cast_{i}", B * kv) for i in range(LLAMA_SETUP_CASTS)]
    return ks + (second_rotary_table(cfg, B) if cfg.family in LLAMA_LIKE else [])


def _attention(p: str, cfg: ModelConfig, B: int, kv: int, scale_op, mask_ops, q_copy=False, softmax_fp32=False,
               qk_fp32=False, softcap=False, sinks=False) -> list:
    """Cache update, (repeat_kv), QK^T, scale, (soft-cap), mask, softmax and AV of one new token per sequence."""
    heads, hd, kvh = cfg.heads, cfg.head_dim, cfg.num_kv_heads
    bh = B * heads
    cache = 2 * B * kvh * hd * kv * F32  # torch.cat reads the cache and the new token, writes them together
    ks = []
    if kvh < heads:  # repeat_kv: expand + reshape materialises the keys and values of every head
        rep = B * (kvh + heads) * hd * kv * F32
        ks += [misc(f"{p}.repeat_k", "copy", rep), misc(f"{p}.repeat_v", "copy", rep)]
    if q_copy:
        ks.append(misc(f"{p}.q_copy", "copy", 2 * bh * hd * F32))
    if qk_fp32:  # GPT-Neo: q.to(float32), k.to(float32) -- the whole cache, every step
        ks += [cast(f"{p}.q_to_fp32", bh * hd), cast(f"{p}.k_to_fp32", bh * kv * hd)]
    ks.append({**bmm(f"{p}.qk", bh, 1, hd, kv), "fp32": qk_fp32})
    ks += attention_scores(p, bh, kv, scale_op, mask_ops, softmax_fp32, qk_fp32, softcap, sinks and cfg.heads)
    ks.append(bmm(f"{p}.av", bh, 1, kv, hd))
    return [misc(f"{p}.cache_k", "copy", cache), misc(f"{p}.cache_v", "copy", cache),
            *mark_call(ks, B=B, S=1, S_kv=kv, heads=heads, kv_heads=kvh, hd=hd, vd=hd, train=False)]


def _gpt2(cfg: ModelConfig, B: int, seq: int) -> list:
    h, f, V = cfg.hidden, cfg.ffn, cfg.vocab
    kv = kv_length(cfg, seq)
    neo = cfg.family == "gpt_neo"
    pre = [gather("wte", B, h, V), gather("wpe", 1, h, cfg.max_positions), vec("embed_add", "add", B, h),
           *_setup(cfg, B, kv)]
    L = [ln("ln_1", B, h)]
    if neo:  # no scaling; the causal window's where, then the padding mask's add; q and k cast to fp32
        L += [linear("q_proj", B, h, h, bias=False), linear("k_proj", B, h, h, bias=False),
              linear("v_proj", B, h, h, bias=False),
              *_attention("attn", cfg, B, kv, None, ("addu", "addu"), qk_fp32=True)]
    else:
        L += [linear("c_attn", B, h, 3 * h, conv1d=True),
              *_attention("attn", cfg, B, kv, "mulu", ("addu",), q_copy=True)]
    conv = not neo  # GPT-2's Conv1D, GPT-Neo's nn.Linear
    L += [linear("attn_proj", B, h, h, conv1d=conv), vec("resid_add1", "add", B, h), ln("ln_2", B, h),
          linear("c_fc", B, h, f, conv1d=conv), *_activation("mlp", cfg.activation, B, f),
          linear("mlp_proj", B, f, h, conv1d=conv), vec("resid_add2", "add", B, h)]
    post = [ln("ln_f", B, h), linear("lm_head", B, h, V, bias=False)]
    return [Block("embeddings", 1, pre, "pre"), Block("layer", cfg.layers, L, "layer"), Block("head", 1, post, "post")]


def _opt(cfg: ModelConfig, B: int, seq: int) -> list:
    h, f, V = cfg.hidden, cfg.ffn, cfg.vocab
    kv = kv_length(cfg, seq)
    proj, pre_ln, final_ln = opt_layout(cfg)
    pre = [gather("embed_tokens", B, proj, V), *([linear("project_in", B, proj, h, bias=False)] if proj != h else []),
           gather("embed_positions", B, h, cfg.max_positions + 2), vec("embed_add", "add", B, h), *_setup(cfg, B, kv)]
    attn = [linear("q_proj", B, h, h), vec("q_scale", "mulu", B, h), linear("k_proj", B, h, h),
            linear("v_proj", B, h, h), *_attention("attn", cfg, B, kv, "mulu", ("addu",), softmax_fp32=True),
            linear("out_proj", B, h, h), vec("resid_add1", "add", B, h)]
    mlp = [linear("fc1", B, h, f), *_activation("mlp", cfg.activation, B, f), linear("fc2", B, f, h),
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


def _gpt_neox(cfg: ModelConfig, B: int, seq: int) -> list:
    h, f, V = cfg.hidden, cfg.ffn, cfg.vocab
    kv = kv_length(cfg, seq)
    o = neox_layout(cfg)
    pre = [gather("embed_in", B, h, V), *_setup(cfg, B, kv)]
    attn = [ln("input_layernorm", B, h), linear("query_key_value", B, h, 3 * h, bias=o["bias"]),
            *neox_rope(B, cfg.heads, cfg.head_dim, o["rotary_dim"], False),
            *_attention("attn", cfg, B, kv, "mulu", ("addu",), softmax_fp32=True),
            linear("dense", B, h, h, bias=o["bias"])]
    mlp = [ln("post_attention_layernorm", B, h), linear("dense_h_to_4h", B, h, f),
           *_activation("mlp", cfg.activation, B, f), linear("dense_4h_to_h", B, f, h)]
    L = attn + mlp + [vec("resid_add1", "add", B, h), vec("resid_add2", "add", B, h)]
    post = [ln("final_layer_norm", B, h), linear("embed_out", B, h, V, bias=False)]
    return [Block("embeddings", 1, pre, "pre"), Block("layer", cfg.layers, L, "layer"), Block("head", 1, post, "post")]


def _llama(cfg: ModelConfig, B: int, seq: int) -> list:
    h, V = cfg.hidden, cfg.vocab
    v = llama_variant(cfg)
    gemma = v["gemma"]
    kv, kv_sliding = kv_length(cfg, seq), kv_length(cfg, seq, sliding=True)
    pre = [gather("embed_tokens", B, h, V), *([vec("embed_scale", "mulu", B, h)] if gemma else []), *_setup(cfg, B, kv)]

    def attn(keys):
        return [*_rms_norm("input_norm", B, h, unit_offset=gemma, fp32_weight=v["oss"]), *llama_qkv(cfg, B),
                *_attention("attn", cfg, B, keys, "mulu", ("addu",), softmax_fp32=not v["oss"], softcap=v["softcap"],
                            sinks=v["oss"]),
                linear("o_proj", B, cfg.heads * cfg.head_dim, h, bias=v["o_bias"]),
                *(_rms_norm("post_attn_norm", B, h, unit_offset=True) if v["sandwich"] else []),
                vec("resid_add1", "add", B, h), *_rms_norm("post_norm", B, h, unit_offset=gemma, fp32_weight=v["oss"])]

    post = [*_rms_norm("final_norm", B, h, unit_offset=gemma, fp32_weight=v["oss"]),
            linear("lm_head", B, h, V, bias=False),
            *(soft_cap("logit_softcap", B, V) if v["final_softcap"] else [])]
    # the B new tokens pass the MLP (a top-k MoE's sparse layers route them); Gemma 2 and 3's sliding
    # layers attend to their window only, once the cache is longer (block `sliding_layer`)
    sliding = attn(kv_sliding) if kv_sliding != kv else None
    return [Block("embeddings", 1, pre, "pre"), *llama_layer_blocks(cfg, attn(kv), B, sliding_attn=sliding),
            Block("head", 1, post, "post")]


def _mla(cfg: ModelConfig, B: int, kv: int) -> list:
    """DeepSeek-V3's latent attention for B new tokens (`kernels.mla_attention`): the cache holds the normed
    key/value latent and the rotated shared key (two torch.cat per layer and step), and every step expands
    the whole cache again: `kv_b_proj` over kv tokens, the keys assembled for every head, the values copied."""
    d = mla_dims(cfg)
    h, H = cfg.hidden, cfg.heads
    nope, rope, v, r = d["qk_nope"], d["qk_rope"], d["v"], d["kv_lora"]
    qk = nope + rope
    return [*mla_query_and_latent(cfg, B),
            misc("attn.cache_latent", "copy", 2 * B * kv * r * F32),
            misc("attn.cache_rope", "copy", 2 * B * kv * rope * F32),
            linear("kv_b_proj", B * kv, r, H * (nope + v), bias=False),
            misc("k_nope_copy", "copy", 2 * B * kv * H * nope * F32),
            misc("k_rope_copy", "copy", 2 * B * kv * H * rope * F32),
            *mark_call([bmm("attn.qk", B * H, 1, qk, kv), *attention_scores("attn", B * H, kv, "mulu", ("addu",), True),
                        misc("attn.v_copy", "copy", 2 * B * kv * H * v * F32), bmm("attn.av", B * H, 1, kv, v)],
                       B=B, S=1, S_kv=kv, heads=H, kv_heads=H, hd=qk, vd=v, train=False),
            linear("o_proj", B, H * v, h, bias=bool(cfg.raw.get("attention_bias", False))),
            vec("resid_add1", "add", B, h), *_rms_norm("post_norm", B, h)]


def _deepseek(cfg: ModelConfig, B: int, seq: int) -> list:
    h, V = cfg.hidden, cfg.vocab
    kv = kv_length(cfg, seq)
    pre = [gather("embed_tokens", B, h, V), *_setup(cfg, B, kv)]
    post = [*_rms_norm("final_norm", B, h), linear("lm_head", B, h, V, bias=False)]
    return [Block("embeddings", 1, pre, "pre"), *llama_layer_blocks(cfg, _mla(cfg, B, kv), B),
            Block("head", 1, post, "post")]


DECODE_BUILDERS.update({"gpt2": _gpt2, "gpt_neo": _gpt2, "gpt_neox": _gpt_neox, "opt": _opt,
                        **{f: _llama for f in LLAMA_LIKE}, "deepseek_v3": _deepseek})
