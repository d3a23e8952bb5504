"""Llama 4 (`llama4_text`, and a multimodal `llama4` config's language model: Scout, Maverick), as transformers 5.24
runs it eagerly:

* RoPE layers (`no_rope_layers` 1) rotate q and k as complex numbers in fp32 and (with `use_qk_norm`) L2-normalise
  each head of q and k, without a weight; every `no_rope_layer_interval`-th layer is a NoPE layer that scales q by
  1 + `attn_scale` log(1 + floor((position + 1) / `floor_scale`)) (`attn_temperature_tuning`), computed in it;
* attention scores are scaled, masked and soft-maxed in the model's dtype (no fp32 softmax);
* the MoE layers (`moe_layers`, or every `interleave_moe_layer_step`-th) run a sigmoid of the top-k router logits
  (the rest -inf), every token through every expert as one batched GEMM over the experts, scaled by its score (a
  dense computation of all `num_local_experts` experts), and a shared expert of `intermediate_size`; the other layers
  a gated MLP of `intermediate_size_mlp`.

The RoPE layers attend in chunks of `attention_chunk_size` keys: sequences and caches up to one chunk are priced
(full causal attention there); longer ones are refused. Counted with TorchDispatchMode on transformers 5.24's eager
and SDPA code, per layer kind and before the layers (`tests/test_llama4.py` pins the counts). Training is refused
(the complex RoPE's backward is not counted).
"""
from __future__ import annotations

from pathlib import Path

from hybridperf.errors import InputError
from hybridperf.graphs.config import ModelConfig, config_positions, kv_length
from hybridperf.graphs.decode import cached_attention
from hybridperf.graphs.family import Family, config_int
from hybridperf.graphs.layers.activation import mlp_activation
from hybridperf.graphs.layers.attention_core import attention_core
from hybridperf.graphs.layers.norms import fp32_norm, rms_norm
from hybridperf.graphs.primitives import F32, HALF_DTYPES, Block, _k, cast, gather, linear, misc, vec

#: Llama4TextConfig's defaults (transformers 5.24) for keys a config may omit
DEFAULTS = {"intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_local_experts": 16,
            "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "use_qk_norm": True,
            "no_rope_layer_interval": 4, "attention_chunk_size": 8192, "attn_temperature_tuning": True,
            "hidden_act": "silu", "max_position_embeddings": 4096 * 32, "attention_bias": False,
            "tie_word_embeddings": False}
#: the kernels that build a prefill's positions, check for packed sequences (once per mask type), the masks
#: (eager only; SDPA skips them up to one chunk but for one of the chunked mask's) and the complex rotary table
POSITIONS, PACKED_CHECK, FULL_MASK, CHUNK_MASK = 2, 8, 10, 20
#: the same before a decode step's layers: the positions, and the masks (eager)
DECODE_POSITIONS, DECODE_FULL_MASK, DECODE_CHUNK_MASK = 4, 10, 20
#: layer kind (RoPE, MoE) -> block name
BLOCKS = {(True, True): "layer", (False, True): "nope_layer", (True, False): "dense_layer",
          (False, False): "nope_dense_layer"}


def parse(d: dict, source: str) -> ModelConfig:
    """The `ModelConfig` of a Llama 4 language-model config (`graphs.config` unwraps a multimodal one)."""
    d = {**DEFAULTS, **{k: v for k, v in d.items() if v is not None}}

    def count(key, minimum=1):
        return config_int(d, key, source, minimum)

    hidden, heads, layers = count("hidden_size"), count("num_attention_heads"), count("num_hidden_layers")
    kv = count("num_key_value_heads") if "num_key_value_heads" in d else heads
    if heads % kv:
        raise InputError(f"{source}: {heads} attention heads are not a multiple of {kv} key/value heads")
    rope = d.get("no_rope_layers") or [int((i + 1) % count("no_rope_layer_interval") != 0) for i in range(layers)]
    step = count("interleave_moe_layer_step")
    moe = d.get("moe_layers")
    moe = list(range(step - 1, layers, step)) if moe is None else moe
    if not isinstance(rope, list) or len(rope) != layers or any(r not in (0, 1) for r in rope):
        raise InputError(f"{source}: config field 'no_rope_layers' must list {layers} entries, each 0 or 1")
    if not isinstance(moe, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                                        for i in moe):
        raise InputError(f"{source}: config field 'moe_layers' must list layer indices below {layers}")
    e, k = count("num_local_experts"), count("num_experts_per_tok")
    if k > e:
        raise InputError(f"{source}: num_experts_per_tok = {k} exceeds the {e} experts")
    count("attention_chunk_size")
    return ModelConfig(family="llama4_text", hidden=hidden, heads=heads, layers=layers,
                       ffn=count("intermediate_size_mlp"), vocab=count("vocab_size"),
                       head_dim=count("head_dim") if "head_dim" in d else hidden // heads,
                       activation=str(d["hidden_act"]), kv_heads=kv,
                       max_positions=config_positions(d, source, "max_position_embeddings"),
                       name=Path(source).stem if source != "config" else "", num_experts=e, experts_per_token=k,
                       expert_ffn=count("intermediate_size"),
                       raw={**d, "no_rope_layers": rope, "moe_layers": sorted(set(moe))})


def _kinds(cfg: ModelConfig) -> dict:
    """(RoPE, MoE) -> how many layers of that kind."""
    moe = set(cfg.raw["moe_layers"])
    out: dict = {}
    for i, r in enumerate(cfg.raw["no_rope_layers"]):
        kind = (bool(r), i in moe)
        out[kind] = out.get(kind, 0) + 1
    return out


def _check_chunk(cfg: ModelConfig, keys: int) -> None:
    chunk = int(cfg.raw["attention_chunk_size"])
    if keys > chunk and any(cfg.raw["no_rope_layers"]):
        raise InputError(f"Llama 4's chunked attention beyond one chunk ({keys} keys, attention_chunk_size {chunk}) "
                         "is not modelled")


def _positions_scale(cfg: ModelConfig, tok: int) -> list:
    """A NoPE layer's query temperature: the positions (arange, offset, to float), +1, / floor_scale, floor, log1p,
    x attn_scale, +1, then q times it in fp32 and cast back."""
    if not cfg.raw["attn_temperature_tuning"]:
        return []
    w = cfg.heads * cfg.head_dim
    return [*(misc(f"q_temp_{i}", "mask", 2 * tok * F32, fp32=True) for i in range(9)),
            vec("q_temp", "mul", tok, w, fp32=True), cast("q_temp_to_half", tok * w)]


def _qk(cfg: ModelConfig, tok: int, rope: bool) -> list:
    """Input norm, q/k/v projections, and a RoPE layer's complex rotation and L2 norms (a NoPE layer's temperature)."""
    h, H, kvh, hd = cfg.hidden, cfg.heads, cfg.num_kv_heads, cfg.head_dim
    bias = bool(cfg.raw["attention_bias"])
    ks = [*rms_norm("input_norm", tok, h), linear("q_proj", tok, h, H * hd, bias=bias),
          linear("k_proj", tok, h, kvh * hd, bias=bias), linear("v_proj", tok, h, kvh * hd, bias=bias)]
    if not rope:
        return ks + _positions_scale(cfg, tok)
    for x, n in (("q", H), ("k", kvh)):  # x.float() as complex pairs times the table, back to x's dtype
        ks += [cast(f"{x}_to_fp32", tok * n * hd), vec(f"{x}_rope", "mul", tok, n * hd, fp32=True),
               cast(f"{x}_rope_to_half", tok * n * hd)]
    if cfg.raw["use_qk_norm"]:
        ks += [*fp32_norm("q_norm", tok * H, hd, scale=False), *fp32_norm("k_norm", tok * kvh, hd, scale=False)]
    return ks


def _mlp(p: str, cfg: ModelConfig, tok: int, f: int) -> list:
    h = cfg.hidden
    return [linear(f"{p}gate_proj", tok, h, f, bias=False), *mlp_activation(f"{p}mlp", cfg.activation, tok, f),
            linear(f"{p}up_proj", tok, h, f, bias=False), vec(f"{p}mlp.gate_mul", "mul", tok, f),
            linear(f"{p}down_proj", tok, f, h, bias=False)]


def _moe(cfg: ModelConfig, tok: int) -> list:
    """Llama4TextMoe: router logits, top-k, the rest -inf (full_like, scatter_), a sigmoid in fp32; every token
    repeated for every expert and scaled by its score; the experts as two batched GEMMs over all of them; the shared
    expert; the experts' outputs summed and added to it."""
    h, E, f = cfg.hidden, cfg.num_experts, cfg.expert_ffn
    rows = E * tok

    def route(name, nbytes):
        return misc(f"moe.{name}", "route", nbytes)

    return [linear("moe.router", tok, h, E, bias=False), route("topk", tok * E * F32 * 2),
            route("full_like", tok * E * F32), route("scatter", 2 * tok * E * F32),
            cast("moe.router_to_fp32", tok * E), vec("moe.router_sigmoid", "tanh", tok, E, fp32=True),
            cast("moe.router_to_half", tok * E), misc("moe.repeat", "copy", 2 * rows * h * F32),
            misc("moe.scores_copy", "copy", 2 * rows * F32), vec("moe.scale_in", "mul", rows, h, tag="broadcast"),
            _k("experts.gate_up", "bmm", E, tok, h, 2 * f, params=E * h * 2 * f),
            *mlp_activation("experts", cfg.activation, rows, f), vec("experts.gate_mul", "mul", rows, f),
            _k("experts.down", "bmm", E, tok, f, h, params=E * f * h),
            *_mlp("shared.", cfg, tok, f), misc("moe.sum_experts", "reduce", rows * h * F32),
            vec("moe.add_shared", "add", tok, h)]


def _layer(cfg: ModelConfig, tok: int, attn: list, rope: bool, moe: bool) -> list:
    h = cfg.hidden
    return [*_qk(cfg, tok, rope), *attn, linear("o_proj", tok, cfg.heads * cfg.head_dim, h,
                                                bias=bool(cfg.raw["attention_bias"])),
            vec("resid_add1", "add", tok, h), *rms_norm("post_norm", tok, h),
            *(_moe(cfg, tok) if moe else _mlp("", cfg, tok, cfg.ffn)), vec("resid_add2", "add", tok, h)]


def _pre(cfg: ModelConfig, B: int, tok: int, decode: bool) -> list:
    """Embeddings, positions, (prefill) the packed-sequence checks, the masks SDPA skips (named `causal_*`) and the
    complex rotary table (position and frequencies as fp32, ones, polar, scaling)."""
    kinds = {r for r, _ in _kinds(cfg)}
    full, chunk = False in kinds, True in kinds
    if decode:
        ks = [misc(f"pos_{i}", "mask", 2 * B * 8) for i in range(DECODE_POSITIONS)]
        n_full, n_chunk = DECODE_FULL_MASK * full, DECODE_CHUNK_MASK * chunk
    else:
        ks = [*(misc(f"pos_{i}", "mask", 2 * tok * 8) for i in range(POSITIONS)),
              *(misc(f"packed_{i}", "mask", 2 * tok * 8) for i in range(PACKED_CHECK * (full + chunk))),
              *([misc("chunk_mask", "mask", 2 * tok * 8)] if chunk else [])]
        n_full, n_chunk = FULL_MASK * full, CHUNK_MASK * chunk
    ks += [*(misc(f"causal_full_{i}", "mask", 2 * tok * 8) for i in range(n_full)),
           *(misc(f"causal_chunk_{i}", "mask", 2 * tok * 8) for i in range(n_chunk))]
    width = tok * cfg.head_dim // 2
    ks += [_k("rotary_inv_freq", "misc:cast", nbytes=2 * cfg.head_dim * F32, dtypes=HALF_DTYPES),
           *(misc(f"rotary_{i}", "mask", 2 * width * 2 * F32, fp32=True) for i in range(5))]
    return [gather("embed_tokens", tok, cfg.hidden, cfg.vocab), *ks]


def _post(cfg: ModelConfig, tok: int) -> list:
    return [*rms_norm("final_norm", tok, cfg.hidden), linear("lm_head", tok, cfg.hidden, cfg.vocab, bias=False)]


def forward(cfg: ModelConfig, B, S, train) -> list:  # inference only (`Family.trains`)
    _check_chunk(cfg, S)
    tok = B * S
    attn = attention_core("attn", B, S, cfg.heads, cfg.head_dim, False, "mulu", ("addu",), dropout=False,
                          kv_groups=cfg.heads // cfg.num_kv_heads)
    blocks = [Block(BLOCKS[kind], n, _layer(cfg, tok, attn, *kind), "layer") for kind, n in _kinds(cfg).items()]
    return [Block("embeddings", 1, _pre(cfg, B, tok, False), "pre"), *blocks, Block("head", 1, _post(cfg, tok), "post")]


def decode(cfg: ModelConfig, B: int, seq: int) -> list:
    keys = kv_length(cfg, seq)
    _check_chunk(cfg, keys)
    attn = cached_attention("attn", cfg, B, keys, "mulu", ("addu",))
    blocks = [Block(BLOCKS[kind], n, _layer(cfg, B, attn, *kind), "layer") for kind, n in _kinds(cfg).items()]
    return [Block("embeddings", 1, _pre(cfg, B, B, True), "pre"), *blocks, Block("head", 1, _post(cfg, B), "post")]


#: a decode step's positions, masks (eager) and rotary table (its cast, position, frequencies, ones, polar, scaling)
FAMILY = Family(("llama4_text",), forward, decode, parse=parse, position_limited=True, trains=False,
                setup_kernels={"llama4_text": DECODE_POSITIONS + DECODE_FULL_MASK + DECODE_CHUNK_MASK + 6})
