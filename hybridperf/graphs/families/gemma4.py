"""Gemma 4 (`gemma4_text`, and a multimodal `gemma4` config's language model): Gemma 3's sandwich-normed layers,
five sliding-window layers to one full-attention layer (the last one always full), with

* norms that scale by the weight itself (pow(mean + eps, -0.5), in fp32), an unscaled RMSNorm over each head of v,
  per-head norms of q and k, RoPE on the whole head in both layer types (the full layers' `proportional` RoPE
  leaves three quarters of each head at frequency 0), attention scaled by 1, a per-layer scalar at the layer's end;
* full-attention layers of their own head width (`global_head_dim`) and, with `attention_k_eq_v`, their own KV heads
  (`num_global_key_value_heads`) and no v projection: the keys' projection is also the values';
* in the MoE models (`enable_moe_block`), the dense MLP and a top-k MoE side by side on the same input, each normed
  before and after: a router on the unnormed residual (an unscaled norm, a scale per channel, softmax, top-k,
  normalised and scaled per expert, fp32 weights), transformers' grouped experts (`layers.moe.expert_dispatch`);
* in the small models (E2B, E4B), per-layer inputs (`hidden_size_per_layer_input`): a second embedding table of
  every layer's input, projected and normed before the layers, gated into each layer's output; and KV sharing: the
  last `num_kv_shared_layers` layers compute no keys or values, they attend to those of the last earlier layer of
  their type (no cache of their own), their MLP twice as wide with `use_double_wide_mlp`.

Counted with TorchDispatchMode on transformers 5.24's eager code (`experiments/gpu/graph_trace.py`, `HYBRID`; the
small models' whole forwards in `tests/test_gemma4.py`). Not modelled, refused: bidirectional attention, training.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hybridperf.errors import InputError
from hybridperf.graphs.config import LAYER_TYPES, ModelConfig, config_positions, kv_length
from hybridperf.graphs.decode import LLAMA_SETUP_CASTS, cached_attention, decode_setup
from hybridperf.graphs.family import Family, config_int
from hybridperf.graphs.layers.attention_core import attention_core, soft_cap
from hybridperf.graphs.layers.moe import expert_dispatch
from hybridperf.graphs.layers.norms import fp32_norm
from hybridperf.graphs.layers.rope import _rope, causal_and_rotary_setup
from hybridperf.graphs.primitives import F32, Block, _k, cast, gather, linear, misc, vec

#: Gemma4TextConfig's defaults (transformers 5.24) for keys a config may omit
DEFAULTS = {"head_dim": 256, "global_head_dim": 512, "sliding_window": 512, "hidden_activation": "gelu_pytorch_tanh",
            "max_position_embeddings": 131_072, "tie_word_embeddings": True, "hidden_size_per_layer_input": 256,
            "num_kv_shared_layers": 0, "attention_k_eq_v": False, "enable_moe_block": False}
SLIDING_PATTERN = 6  # every sixth layer full by default
#: the mask kernels of the sliding-window layers before the layers of a prefill (TorchDispatchMode, 5.24)
SLIDING_MASK_KERNELS = 13


def parse(d: dict, source: str) -> ModelConfig:
    """The `ModelConfig` of a Gemma 4 language-model config (`graphs.config` unwraps a multimodal one)."""
    # a null per-layer input width is none, as transformers reads it
    d = {**DEFAULTS, **{k: v for k, v in d.items() if v is not None},
         **({"hidden_size_per_layer_input": 0} if "hidden_size_per_layer_input" in d
            and d["hidden_size_per_layer_input"] is None else {})}

    def count(key, minimum=1):
        return config_int(d, key, source, minimum)

    count("hidden_size_per_layer_input", 0)
    if d.get("use_bidirectional_attention") == "all":
        raise InputError(f"{source}: bidirectional Gemma 4 attention is not modelled")
    heads, kv, layers = count("num_attention_heads"), count("num_key_value_heads"), count("num_hidden_layers")
    types = d.get("layer_types")
    if types is None:
        types = ["sliding_attention" if (i + 1) % SLIDING_PATTERN else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or any(t not in LAYER_TYPES for t in types):
        raise InputError(f"{source}: config field 'layer_types' must list {layers} entries, each one of "
                         f"{', '.join(LAYER_TYPES)}")
    types = [*types[:-1], "full_attention"]  # Gemma4TextConfig forces the last layer to full attention
    first_shared = layers - min(count("num_kv_shared_layers", 0), layers)
    if set(types[:first_shared]) != set(types) and first_shared < layers:
        raise InputError(f"{source}: the layers sharing keys and values (the last {layers - first_shared}) need an "
                         "earlier layer of each of their types")
    global_kv = kv
    if d["attention_k_eq_v"] and d.get("num_global_key_value_heads") is not None:
        global_kv = count("num_global_key_value_heads")
    for n in (kv, global_kv):
        if heads % n:
            raise InputError(f"{source}: {heads} attention heads are not a multiple of {n} key/value heads")
    count("global_head_dim"), count("sliding_window")
    experts = {}
    if d["enable_moe_block"]:
        e, k = count("num_experts"), count("top_k_experts")
        if k > e:
            raise InputError(f"{source}: top_k_experts = {k} exceeds the {e} experts")
        experts = {"num_experts": e, "experts_per_token": k, "expert_ffn": count("moe_intermediate_size")}
    return ModelConfig(family="gemma4_text", hidden=count("hidden_size"), heads=heads, layers=layers,
                       ffn=count("intermediate_size"), vocab=count("vocab_size"), head_dim=count("head_dim"),
                       activation=str(d["hidden_activation"]), kv_heads=kv,
                       max_positions=config_positions(d, source, "max_position_embeddings"),
                       name=Path(source).stem if source != "config" else "",
                       raw={**d, "layer_types": types, "global_kv_heads": global_kv, "first_kv_shared": first_shared},
                       **experts)


def layer_config(cfg: ModelConfig, full: bool) -> ModelConfig:
    """The attention shapes of one layer type: a full layer's own head width and key/value heads."""
    if not full:
        return cfg
    return replace(cfg, head_dim=int(cfg.raw["global_head_dim"]), kv_heads=int(cfg.raw["global_kv_heads"]))


def _qkv(cfg: ModelConfig, tok: int, full: bool, shared: bool) -> list:
    """q, k, (v) projections, their per-head norms and RoPE on q and k over `tok` tokens (a KV-shared layer: q's)."""
    lc = layer_config(cfg, full)
    h, H, hd, kvh = cfg.hidden, cfg.heads, lc.head_dim, lc.num_kv_heads
    bias = bool(cfg.raw.get("attention_bias", False))
    k_is_v = full and bool(cfg.raw["attention_k_eq_v"])
    q = [*fp32_norm("input_norm", tok, h), linear("q_proj", tok, h, H * hd, bias=bias),
         *fp32_norm("q_norm", tok * H, hd),
         *_rope("q_rope", tok, H * hd)]
    if shared:
        return q
    return [*q, linear("k_proj", tok, h, kvh * hd, bias=bias),
            *([] if k_is_v else [linear("v_proj", tok, h, kvh * hd, bias=bias)]), *fp32_norm("k_norm", tok * kvh, hd),
            *_rope("k_rope", tok, kvh * hd), *fp32_norm("v_norm", tok * kvh, hd, scale=False)]


def _router(cfg: ModelConfig, tok: int) -> list:
    h, E, k = cfg.hidden, cfg.num_experts, cfg.experts_per_token
    return [*fp32_norm("router.norm", tok, h, scale=False),
            _k("router.scale", "mul", tok, H=h, params=h, tag="broadcast"),
            vec("router.root_scale", "mulu", tok, h), linear("moe.router", tok, h, E, bias=False),
            cast("moe.router_to_fp32", tok * E, dtypes=("bf16",)),
            vec("moe.router_softmax", "softmax", tok, E, fp32=True),
            misc("moe.topk", "route", tok * E * F32 + tok * k * (F32 + 8), tag="gather"),
            misc("moe.topk_sum", "reduce", tok * k * F32, fp32=True),
            _k("moe.topk_norm", "div", tok, H=k, tag="broadcast", fp32=True),
            misc("moe.expert_scale", "route", tok * k * (F32 + 8)),
            vec("moe.expert_scale_mul", "mul", tok, k, fp32=True)]


def _feed_forward(cfg: ModelConfig, tok: int, shared: bool) -> list:
    """From the attention's output projection on: its norm and residual, the normed MLP (beside it the MoE), the
    norm after, the residual, (per-layer inputs) the gated per-layer input, the layer's scalar."""
    h, f, ple = cfg.hidden, cfg.ffn * (2 if shared and cfg.raw.get("use_double_wide_mlp") else 1), _ple(cfg)
    ks = [*fp32_norm("post_attn_norm", tok, h), vec("resid_add1", "add", tok, h, tag="residual"),
          *fp32_norm("pre_ffw_norm", tok, h), linear("gate_proj", tok, h, f, bias=False),
          vec("mlp.act", "gelu", tok, f),
          linear("up_proj", tok, h, f, bias=False), vec("mlp.gate_mul", "mul", tok, f),
          linear("down_proj", tok, f, h, bias=False)]
    if cfg.num_experts:
        ks += [*fp32_norm("post_ffw_norm_1", tok, h), *_router(cfg, tok), *fp32_norm("pre_ffw_norm_2", tok, h),
               *expert_dispatch(cfg, tok, fp32_weights=True), *fp32_norm("post_ffw_norm_2", tok, h),
               vec("moe.add_mlp", "add", tok, h)]
    ks += [*fp32_norm("post_ffw_norm", tok, h), vec("resid_add2", "add", tok, h, tag="residual")]
    if ple:
        ks += [linear("per_layer_gate", tok, h, ple, bias=False), vec("per_layer_act", "gelu", tok, ple),
               vec("per_layer_mul", "mul", tok, ple), linear("per_layer_projection", tok, ple, h, bias=False),
               *fp32_norm("per_layer_norm", tok, h), vec("per_layer_add", "add", tok, h, tag="residual")]
    return ks + [vec("layer_scalar", "mulu", tok, h)]


def _ple(cfg: ModelConfig) -> int:
    return int(cfg.raw.get("hidden_size_per_layer_input") or 0)


def _per_layer_inputs(cfg: ModelConfig, tok: int) -> list:
    """What the per-layer inputs cost before the layers: their scaled embedding (one row of every layer's input per
    token), the projection of the embeddings to them, scaled, normed per layer, added and scaled."""
    ple = _ple(cfg)
    if not ple:
        return []
    width, table = cfg.layers * ple, int(cfg.raw.get("vocab_size_per_layer_input") or cfg.vocab)
    return [gather("embed_per_layer", tok, width, table), vec("embed_per_layer_scale", "mulu", tok, width),
            linear("per_layer_model_projection", tok, cfg.hidden, width, bias=False),
            vec("per_layer_projection_scale", "mulu", tok, width),
            *fp32_norm("per_layer_projection_norm", tok * cfg.layers, ple),
            vec("per_layer_inputs_add", "add", tok, width), vec("per_layer_inputs_scale", "mulu", tok, width)]


def _attention_out(cfg: ModelConfig, tok: int, full: bool) -> list:
    return [linear("o_proj", tok, cfg.heads * layer_config(cfg, full).head_dim, cfg.hidden,
                   bias=bool(cfg.raw.get("attention_bias", False)))]


def _marked(ks: list, sliding: bool, shared: bool) -> list:
    """The attention call marked as a sliding layer's or not, and as reading another layer's keys (no cache fill)."""
    for k in ks:
        if "attn_call" in k:
            k["attn_call"].update(sliding=sliding, shared_kv=shared)  # one dict per call, shared by its kernels
    return ks


def _tables(cfg: ModelConfig, rows: int) -> list:
    """The second layer type's rotary table (each type builds its own), its casts included."""
    if len(set(cfg.raw["layer_types"])) < 2:
        return []
    width = int(cfg.raw["global_head_dim"])  # the full layers' table (the sliding layers' is `causal_and_rotary_setup`)
    return [*(misc(f"rotary_local_{i}", "mask", 2 * rows * width * F32) for i in range(6)),
            *(cast(f"rotary_local_cast_{i}", rows * width) for i in range(4))]


def _post(cfg: ModelConfig, tok: int) -> list:
    cap = cfg.raw.get("final_logit_softcapping")
    return [*fp32_norm("final_norm", tok, cfg.hidden), linear("lm_head", tok, cfg.hidden, cfg.vocab, bias=False),
            *(soft_cap("logit_softcap", tok, cfg.vocab) if cap else [])]


#: block name of each (full attention, KV shared) layer kind
BLOCKS = {(True, False): "layer", (False, False): "sliding_layer", (True, True): "shared_layer",
          (False, True): "shared_sliding_layer"}


def _blocks(cfg: ModelConfig, layer) -> list:
    """One block per kind of layer the model has; `layer(full, shared)` is its kernels."""
    first_shared = cfg.raw["first_kv_shared"]
    counts = {kind: 0 for kind in BLOCKS}
    for i, t in enumerate(cfg.raw["layer_types"]):
        counts[(t == "full_attention", i >= first_shared)] += 1
    return [Block(BLOCKS[kind], n, layer(*kind), "layer") for kind, n in counts.items() if n]


def forward(cfg: ModelConfig, B, S, train) -> list:
    """Gemma4ForCausalLM's prefill (inference; the family does not train)."""
    tok = B * S

    def layer(full, shared):
        lc = layer_config(cfg, full)
        attn = attention_core("attn", B, S, cfg.heads, lc.head_dim, False, scale_op="mulu", mask_op=("addu",),
                              dropout=False, softmax_fp32=True, kv_groups=cfg.heads // lc.num_kv_heads)
        return [*_qkv(cfg, tok, full, shared), *_marked(attn, not full, shared), *_attention_out(cfg, tok, full),
                *_feed_forward(cfg, tok, shared)]

    pre = [gather("embed_tokens", tok, cfg.hidden, cfg.vocab), vec("embed_scale", "mulu", tok, cfg.hidden),
           *_per_layer_inputs(cfg, tok), *causal_and_rotary_setup(B, S, cfg.head_dim),
           *(misc(f"sliding_mask_{i}", "mask", 2 * S * S * F32) for i in range(SLIDING_MASK_KERNELS)),
           *_tables(cfg, tok)]
    return [Block("embeddings", 1, pre, "pre"), *_blocks(cfg, layer), Block("head", 1, _post(cfg, tok), "post")]


def decode(cfg: ModelConfig, B: int, seq: int) -> list:
    """One decode step: the full layers attend to every cached token, the sliding ones to their window."""

    def layer(full, shared):
        lc = layer_config(cfg, full)
        keys = kv_length(cfg, seq, sliding=not full)
        attn = cached_attention("attn", lc, B, keys, "mulu", ("addu",), softmax_fp32=True, sliding=not full,
                                strided_cache=not full and seq >= cfg.sliding_window)
        if shared:  # it reads the keys and values another layer cached: no cache of its own to extend
            attn = [k for k in attn if not k.get("cache_len")]
        return [*_qkv(cfg, B, full, shared), *attn, *_attention_out(cfg, B, full), *_feed_forward(cfg, B, shared)]

    kv = kv_length(cfg, seq)
    pre = [gather("embed_tokens", B, cfg.hidden, cfg.vocab), vec("embed_scale", "mulu", B, cfg.hidden),
           *_per_layer_inputs(cfg, B), *decode_setup(cfg, B, kv, FAMILY.setup_kernels[cfg.family]),
           *(cast(f"setup_cast_{i}", B * kv) for i in range(LLAMA_SETUP_CASTS)), *_tables(cfg, B)]
    return [Block("embeddings", 1, pre, "pre"), *_blocks(cfg, layer), Block("head", 1, _post(cfg, B), "post")]


def kv_cache_width(cfg: ModelConfig) -> dict:
    """Keys and values cached per token and layer, by layer type (the full layers' own head width and KV heads),
    spread over the layers of that type: the KV-shared layers cache none."""
    full, types = layer_config(cfg, True), cfg.raw["layer_types"]
    own = types[:cfg.raw["first_kv_shared"]]
    return {t: 2 * c.num_kv_heads * c.head_dim * own.count(t) / types.count(t)
            for t, c in (("full_attention", full), ("sliding_attention", cfg)) if types.count(t)}


FAMILY = Family(("gemma4_text",), forward, decode, setup_kernels={"gemma4_text": 34}, parse=parse,
                kv_cache_width=kv_cache_width, position_limited=True, softmax_fp32=("gemma4_text",), trains=False)
