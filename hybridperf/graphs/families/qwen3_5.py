"""Qwen3.5 (dense and MoE): hybrid decoders of Gated DeltaNet layers (linear attention with a recurrent state)
and gated full-attention layers, every `full_attention_interval`-th layer (4) full by default.

Both layer types are counted with TorchDispatchMode on transformers 5.24's eager code, bf16 and fp32, prefill and
decode (`experiments/gpu/graph_trace.py`, `decode_trace.py`), and run the library's PyTorch path: the one
transformers takes when neither `flash-linear-attention` nor `causal-conv1d` is installed (with them it calls their
Triton and CUDA kernels instead, not modelled). That path's prefill walks the sequence in chunks of 64 tokens:
nine kernels a chunk and layer, so a long prefill launches thousands of small kernels. A decode step updates the
(key_dim x value_dim) state of each value head once. `torch.linalg.solve_triangular` (the chunks' UT transform) is
priced as the batched GEMM of its shape. Training is not modelled (autograd through the chunk loop).

A multimodal `qwen3_5` / `qwen3_5_moe` config is read as its language model (`text_config`); the vision tower runs
no kernel for text input.
"""
from __future__ import annotations

from pathlib import Path

from hybridperf.errors import InputError
from hybridperf.graphs.attention import fills_cache
from hybridperf.graphs.config import ModelConfig, config_positions, kv_length
from hybridperf.graphs.decode import LLAMA_SETUP_CASTS, cached_attention, decode_setup
from hybridperf.graphs.family import Family, config_int
from hybridperf.graphs.layers.attention_core import attention_core
from hybridperf.graphs.layers.moe import moe_block
from hybridperf.graphs.layers.norms import rms_norm
from hybridperf.graphs.layers.rope import cat_rope, causal_and_rotary_setup, rotary_dim
from hybridperf.graphs.primitives import (F32, HALF_DTYPES, MODEL_DTYPES, Block, bmm, cast, fp32_vec, gather,
                                          linear, misc, vec)

#: Qwen3_5TextConfig's and Qwen3_5MoeTextConfig's defaults (transformers 5.24) for keys a config may omit
DEFAULTS = {"head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
            "linear_num_key_heads": 16, "linear_num_value_heads": 32, "full_attention_interval": 4,
            "max_position_embeddings": 32768}
MOE_DEFAULTS = {"num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
                "shared_expert_intermediate_size": 512}
CHUNK = 64  # torch_chunk_gated_delta_rule's chunk of the sequence
LAYER_TYPES = ("linear_attention", "full_attention")


def default_layer_types(layers: int, interval: int) -> list:
    """Every `interval`-th layer full attention, the others linear: what a config listing no `layer_types` means."""
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]


def parse(d: dict, source: str) -> ModelConfig:
    """The `ModelConfig` of a Qwen3.5 language-model config (`graphs.config` unwraps a multimodal one)."""
    mt = str(d.get("model_type"))
    moe = mt == "qwen3_5_moe_text"
    # Qwen3_5MoeTopKRouter normalises the top-k weights whatever the config says
    d = {**DEFAULTS, **(MOE_DEFAULTS if moe else {}), "tie_word_embeddings": False, **d, "norm_topk_prob": True}

    def count(key):
        return config_int(d, key, source)

    for key in ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads"):
        count(key)
    heads, kv, layers = count("num_attention_heads"), count("num_key_value_heads"), count("num_hidden_layers")
    if heads % kv:
        raise InputError(f"{source}: {heads} attention heads are not a multiple of {kv} key/value heads")
    if count("linear_num_value_heads") % count("linear_num_key_heads"):
        raise InputError(f"{source}: linear_num_value_heads must be a multiple of linear_num_key_heads")
    types = d.get("layer_types")
    if types is None:
        types = default_layer_types(layers, count("full_attention_interval"))
    if not isinstance(types, list) or len(types) != layers or any(t not in LAYER_TYPES for t in types):
        raise InputError(f"{source}: config field 'layer_types' must list {layers} entries, each one of "
                         f"{', '.join(LAYER_TYPES)}")
    experts = {}
    if moe:
        e, k = count("num_experts"), count("num_experts_per_tok")
        if k > e:
            raise InputError(f"{source}: num_experts_per_tok = {k} exceeds the {e} experts")
        experts = {"num_experts": e, "experts_per_token": k, "expert_ffn": count("moe_intermediate_size"),
                   "shared_ffn": count("shared_expert_intermediate_size")}
    ffn = count("intermediate_size") if not moe else int(d.get("intermediate_size") or experts["expert_ffn"])
    return ModelConfig(family=mt, hidden=count("hidden_size"), heads=heads, layers=layers, ffn=ffn,
                       vocab=count("vocab_size"), head_dim=count("head_dim"),
                       activation=str(d.get("hidden_act") or "silu"),
                       max_positions=config_positions(d, source, "max_position_embeddings"), kv_heads=kv,
                       name=Path(source).stem if source != "config" else "", raw={**d, "layer_types": types},
                       **experts)


def dims(cfg: ModelConfig) -> dict:
    """The Gated DeltaNet's widths: key and value heads, their head widths, and the conv's channels."""
    r = cfg.raw
    hk, hv, dk, dv = (int(r[k]) for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                          "linear_value_head_dim"))
    return {"hk": hk, "hv": hv, "dk": dk, "dv": dv, "conv": 2 * hk * dk + hv * dv,
            "width": int(r["linear_conv_kernel_dim"])}


def _norm(p: str, rows: int, h: int) -> list:
    """Qwen3_5RMSNorm: Gemma's (1 + weight) in fp32."""
    return rms_norm(p, rows, h, unit_offset=True)


def _l2norm(p: str, rows: int, width: int) -> list:
    """x * rsqrt(sum(x * x) + eps) over each head of q or k (fp32)."""
    return [vec(f"{p}.sq", "mul", rows, width, fp32=True), misc(f"{p}.sum", "reduce", rows * width * F32, fp32=True),
            misc(f"{p}.eps", "mask", 2 * rows * F32, fp32=True),
            misc(f"{p}.rsqrt", "mask", 2 * rows * F32, "rsqrt", True),
            vec(f"{p}.mul", "mul", rows, width, tag="broadcast", fp32=True)]


def _delta_inputs(cfg: ModelConfig, B: int, S: int, decode: bool) -> list:
    """A Gated DeltaNet layer from its input norm to the fp32 q, k, v, beta and decay of `B` sequences of `S` new
    tokens: the four input projections, the causal depthwise conv with SiLU (a decode step concatenates its conv
    state), beta and the decay gate, q and k repeated to the value heads, the casts to fp32 and the l2 norms."""
    g, h, tok = dims(cfg), cfg.hidden, B * S
    hv, dk, dv, conv = g["hv"], g["dk"], g["dv"], g["conv"]
    ks = [*_norm("input_norm", tok, h), linear("in_proj_qkv", tok, h, conv, bias=False),
          linear("in_proj_z", tok, h, hv * dv, bias=False), linear("in_proj_b", tok, h, hv, bias=False),
          linear("in_proj_a", tok, h, hv, bias=False)]
    state = B * conv * g["width"]
    if decode:  # causal_conv1d_update: cat(state, x), the state's copy back, a conv over width positions
        ks += [misc("conv_state_cat", "copy", 2 * state * F32), misc("conv_state_copy", "copy", 2 * state * F32),
               vec("conv1d", "mulu", B * g["width"], conv)]
    else:
        ks.append(vec("conv1d", "mulu", tok, conv))
    ks += [vec("conv_silu", "gelu", tok, conv), vec("beta_sigmoid", "tanh", tok, hv),
           cast("a_log_to_fp32", hv), misc("a_log_exp", "mask", 2 * hv * F32, fp32=True),
           misc("a_log_neg", "mask", 2 * hv * F32, fp32=True), cast("a_to_fp32", tok * hv),
           vec("dt_bias", "add", tok, hv, fp32=True), vec("softplus", "tanh", tok, hv, fp32=True),
           vec("decay", "mul", tok, hv, fp32=True)]
    if g["hk"] < hv:  # repeat_interleave of q and k to the value heads
        ks += [misc(f"{n}_repeat", "copy", 2 * tok * hv * dk * F32) for n in ("q", "k")]
    ks += [cast("q_to_fp32", tok * hv * dk), cast("k_to_fp32", tok * hv * dk), cast("v_to_fp32", tok * hv * dv),
           cast("beta_to_fp32", tok * hv), *_l2norm("q_l2", tok * hv, dk), *_l2norm("k_l2", tok * hv, dk),
           vec("q_scale", "divu" if decode else "mulu", tok * hv, dk, fp32=True)]
    return ks


def _delta_chunked(cfg: ModelConfig, B: int, S: int, fill: bool) -> list:
    """torch_chunk_gated_delta_rule over `S` tokens padded to chunks of 64: the intra-chunk products and decays,
    two triangular solves, then nine kernels per chunk (the state read, the output, the state update); `fill`:
    the layer's conv and recurrent states are written into the cache."""
    g = dims(cfg)
    hv, dk, dv = g["hv"], g["dk"], g["dv"]
    chunks = -(-S // CHUNK)
    bh, padded = B * hv, B * hv * chunks * CHUNK  # padded rows of all heads
    n = bh * chunks  # chunks of all heads

    ks = [*(misc(f"pad_{x}", "copy", 2 * padded * w * F32, fp32=True) for x, w in (("q", dk), ("k", dk), ("v", dv))),
          *(misc(f"pad_{x}", "copy", 2 * padded * F32, fp32=True) for x in ("beta", "decay")),
          fp32_vec("v_beta", "mul", padded, dv, "broadcast"), fp32_vec("k_beta", "mul", padded, dk, "broadcast"),
          misc("chunk_mask_ones", "mask", CHUNK * CHUNK), misc("chunk_mask_triu", "mask", 2 * CHUNK * CHUNK),
          misc("decay_cumsum", "reduce", 2 * padded * F32, fp32=True),
          fp32_vec("pair_decay_sub", "add", padded, CHUNK, "sub_broadcast"),
          fp32_vec("pair_decay_mask", "addu", padded, CHUNK),
          fp32_vec("pair_decay_exp", "tanh", padded, CHUNK),
          {**bmm("ut_kk", n, CHUNK, dk, CHUNK), "fp32": True}, fp32_vec("ut_decay", "mul", padded, CHUNK),
          {**bmm("intra_qk", n, CHUNK, dk, CHUNK), "fp32": True}, fp32_vec("intra_decay", "mul", padded, CHUNK),
          misc("cum_decay_exp", "mask", 2 * padded * F32, fp32=True),
          fp32_vec("k_beta_decay", "mul", padded, dk, "broadcast"),
          {**bmm("solve_values", n, CHUNK, CHUNK, dv), "fp32": True},
          {**bmm("solve_keys", n, CHUNK, CHUNK, dk), "fp32": True},
          misc("state_zeros", "mask", bh * dk * dv * F32, fp32=True),
          misc("out_zeros", "mask", padded * dv * F32, fp32=True),
          misc("q_decay_exp", "mask", 2 * padded * F32, fp32=True), fp32_vec("q_decay", "mul", padded, dk, "broadcast"),
          misc("k_decay_sub", "mask", 2 * padded * F32, fp32=True),
          misc("k_decay_exp", "mask", 2 * padded * F32, fp32=True), fp32_vec("k_decay", "mul", padded, dk, "broadcast"),
          misc("chunk_decay_exp", "mask", 2 * n * F32, fp32=True)]
    rows = bh * CHUNK  # one chunk of every head
    step = [{**bmm("chunk_state_read", bh, CHUNK, dk, dv), "fp32": True},
            fp32_vec("chunk_v_new", "add", rows, dv, "sub"),
            {**bmm("chunk_inter", bh, CHUNK, dk, dv), "fp32": True},
            {**bmm("chunk_intra", bh, CHUNK, CHUNK, dv), "fp32": True}, fp32_vec("chunk_out_add", "add", rows, dv),
            misc("chunk_out_copy", "copy", 2 * rows * dv * F32, fp32=True),
            fp32_vec("chunk_state_decay", "mul", bh * dk, dv, "broadcast"),
            {**bmm("chunk_state_update", bh, dk, CHUNK, dv), "fp32": True},
            fp32_vec("chunk_state_add", "add", bh * dk, dv)]
    ks += [{**k, "name": f"{k['name']}_{i}"} for i in range(chunks) for k in step]
    if chunks > 1:  # the output of strided solves is laid out again before the head merge
        ks.append(misc("out_layout", "copy", 2 * padded * dv * F32, fp32=True))
    if fill:  # the final state into the cache
        ks += [misc("state_cache_zeros", "mask", bh * dk * dv * F32, fp32=True),
               misc("state_cache_copy", "copy", 2 * bh * dk * dv * F32, fp32=True)]
    return ks


def _delta_step(cfg: ModelConfig, B: int) -> list:
    """torch_recurrent_gated_delta_rule for one new token: decay the state, read it with k, the delta, the state
    update, read it with q (fp32), and the state's copy into the cache."""
    g = dims(cfg)
    hv, dk, dv = g["hv"], g["dk"], g["dv"]
    bh, st = B * hv, B * hv * dk  # state rows: (B x heads x dk, dv)
    return [misc("out_zeros", "mask", bh * dv * F32, fp32=True), misc("decay_exp", "mask", 2 * bh * F32, fp32=True),
            vec("state_decay", "mul", st, dv, tag="broadcast", fp32=True),
            vec("state_k", "mul", st, dv, tag="broadcast", fp32=True),
            misc("kv_mem", "reduce", st * dv * F32, fp32=True), vec("delta_sub", "add", bh, dv, tag="sub", fp32=True),
            vec("delta_beta", "mul", bh, dv, tag="broadcast", fp32=True),
            vec("state_outer", "mul", st, dv, tag="broadcast", fp32=True), vec("state_add", "add", st, dv, fp32=True),
            vec("state_q", "mul", st, dv, tag="broadcast", fp32=True),
            misc("out_sum", "reduce", st * dv * F32, fp32=True), misc("out_copy", "copy", 2 * bh * dv * F32, fp32=True),
            misc("state_cache_copy", "copy", 2 * st * dv * F32, fp32=True)]


def _delta_output(cfg: ModelConfig, tok: int, decode: bool) -> list:
    """The core output cast back (a prefill's is also laid out again: a copy in fp32 too), the gated RMSNorm over
    each value head (x normed, times the weight, times silu(z) in fp32) and the output projection."""
    g = dims(cfg)
    rows, dv = tok * g["hv"], g["dv"]
    return [cast("core_to_half", rows * dv, dtypes=HALF_DTYPES if decode else MODEL_DTYPES),
            cast("gnorm.to_fp32", rows * dv), vec("gnorm.pow", "powu", rows, dv, fp32=True),
            misc("gnorm.mean", "reduce", rows * dv * F32, fp32=True),
            misc("gnorm.eps", "mask", 2 * rows * F32, fp32=True),
            misc("gnorm.rsqrt", "mask", 2 * rows * F32, "rsqrt", True),
            vec("gnorm.mul", "mul", rows, dv, tag="broadcast", fp32=True), cast("gnorm.to_half", rows * dv),
            vec("gnorm.weight", "mul", rows, dv, tag="broadcast"), cast("gnorm.z_to_fp32", rows * dv),
            vec("gnorm.z_silu", "gelu", rows, dv, fp32=True), vec("gnorm.gate", "mul", rows, dv, fp32=True),
            cast("gnorm.out_to_half", rows * dv), linear("out_proj", tok, g["hv"] * dv, cfg.hidden, bias=False)]


def _gated_qkv(cfg: ModelConfig, tok: int) -> list:
    """Full attention's projections: q with its output gate (one GEMM twice as wide; the gate laid out), the
    per-head q and k norms, RoPE on the first quarter of each head and the torch.cat of the rest."""
    h, hd, H, kvh = cfg.hidden, cfg.head_dim, cfg.heads, cfg.num_kv_heads
    rot, bias = rotary_dim(cfg, 0.25), bool(cfg.raw.get("attention_bias", False))
    q, k = cat_rope("q", tok, H, hd, rot, train=False), cat_rope("k", tok, kvh, hd, rot, train=False)
    return [linear("q_proj", tok, h, 2 * H * hd, bias=bias), misc("gate_copy", "copy", 2 * tok * H * hd * F32),
            *_norm("q_norm", tok * H, hd), linear("k_proj", tok, h, kvh * hd, bias=bias),
            *_norm("k_norm", tok * kvh, hd), linear("v_proj", tok, h, kvh * hd, bias=bias),
            *q, *k]


def _gate_out(cfg: ModelConfig, tok: int) -> list:
    width = cfg.heads * cfg.head_dim
    return [vec("attn_gate_sigmoid", "tanh", tok, width), vec("attn_gate", "mul", tok, width),
            linear("o_proj", tok, width, cfg.hidden, bias=bool(cfg.raw.get("attention_bias", False)))]


def _mlp(cfg: ModelConfig, tok: int) -> list:
    """The post-attention norm and the gated MLP (the MoE's experts and shared expert), with both residual adds."""
    h, f = cfg.hidden, cfg.ffn
    mlp = moe_block(cfg, tok) if cfg.num_experts else [
        linear("gate_proj", tok, h, f, bias=False), vec("mlp.act", "gelu", tok, f),
        linear("up_proj", tok, h, f, bias=False), vec("mlp.gate_mul", "mul", tok, f),
        linear("down_proj", tok, f, h, bias=False)]
    return [vec("resid_add1", "add", tok, h, tag="residual"), *_norm("post_norm", tok, h), *mlp,
            vec("resid_add2", "add", tok, h, tag="residual")]


def _pre(cfg: ModelConfig, B: int, S: int) -> list:
    """Embeddings, the causal mask and the rotary table, whose three position sections (mrope) are composed into one
    (two slice copies each for cos and sin, and a cat)."""
    rot = rotary_dim(cfg, 0.25)
    return [gather("embed_tokens", B * S, cfg.hidden, cfg.vocab), *causal_and_rotary_setup(B, S, rot),
            *(misc(f"mrope_{i}", "mask", 2 * B * S * rot * F32) for i in range(6))]


def _post(cfg: ModelConfig, tok: int) -> list:
    return [*_norm("final_norm", tok, cfg.hidden), linear("lm_head", tok, cfg.hidden, cfg.vocab, bias=False)]


def _blocks(cfg: ModelConfig, linear_layer: list, full_layer: list) -> list:
    full = cfg.raw["layer_types"].count("full_attention")
    layers = [Block("layer", full, full_layer, "layer"),
              Block("linear_layer", cfg.layers - full, linear_layer, "layer")]
    return [b for b in layers if b.count]


def forward(cfg: ModelConfig, B, S, train) -> list:
    """Qwen3_5ForCausalLM's prefill (inference; the family does not train)."""
    tok = B * S
    fill = fills_cache(cfg, "inf")
    kvh, hd = cfg.num_kv_heads, cfg.head_dim
    attn = attention_core("attn", B, S, cfg.heads, hd, False, scale_op="mulu", mask_op=("addu",), dropout=False,
                          softmax_fp32=True, layout=("k", "v") if kvh < cfg.heads else ("v",),
                          kv_groups=cfg.heads // kvh)
    full = [*_norm("input_norm", tok, cfg.hidden), *_gated_qkv(cfg, tok), *attn, *_gate_out(cfg, tok), *_mlp(cfg, tok)]
    g = dims(cfg)
    state = B * g["conv"] * g["width"]
    conv_fill = [misc("conv_state_zeros", "mask", state * F32), misc("conv_state_fill", "copy", 2 * state * F32),
                 *([misc("conv_state_pad", "copy", 2 * state * F32)] if S < g["width"] else [])]  # F.pad first
    ins = _delta_inputs(cfg, B, S, decode=False)
    at = next(i for i, k in enumerate(ins) if k["name"] == "conv1d")  # the cache takes the conv input first
    lin = [*ins[:at], *(conv_fill if fill else []), *ins[at:], *_delta_chunked(cfg, B, S, fill),
           *_delta_output(cfg, tok, decode=False), *_mlp(cfg, tok)]
    return [Block("embeddings", 1, _pre(cfg, B, S), "pre"), *_blocks(cfg, lin, full),
            Block("head", 1, _post(cfg, tok), "post")]


def decode(cfg: ModelConfig, B: int, seq: int) -> list:
    """One decode step: the full layers attend to `seq` cached tokens plus the new one, the linear layers update
    their conv and recurrent states."""
    kv = kv_length(cfg, seq)
    rot = rotary_dim(cfg, 0.25)
    pre = [gather("embed_tokens", B, cfg.hidden, cfg.vocab),
           *decode_setup(cfg, B, kv, FAMILY.setup_kernels[cfg.family]),
           *(cast(f"setup_cast_{i}", B * kv) for i in range(LLAMA_SETUP_CASTS)),
           *(misc(f"mrope_{i}", "mask", 2 * B * rot * F32) for i in range(6))]
    full = [*_norm("input_norm", B, cfg.hidden), *_gated_qkv(cfg, B),
            *cached_attention("attn", cfg, B, kv, "mulu", ("addu",), softmax_fp32=True), *_gate_out(cfg, B),
            *_mlp(cfg, B)]
    lin = [*_delta_inputs(cfg, B, 1, decode=True), *_delta_step(cfg, B), *_delta_output(cfg, B, decode=True),
           *_mlp(cfg, B)]
    return [Block("embeddings", 1, pre, "pre"), *_blocks(cfg, lin, full), Block("head", 1, _post(cfg, B), "post")]


def kv_cache_width(cfg: ModelConfig) -> float:
    """Keys and values of the full-attention layers, spread over all layers (`state_bytes`: the linear layers')."""
    full = cfg.raw["layer_types"].count("full_attention")
    return 2 * cfg.num_kv_heads * cfg.head_dim * full / cfg.layers


def state_bytes(cfg: ModelConfig, dtype_bytes: float) -> float:
    """Bytes a sequence's cache holds whatever its length: each linear layer's fp32 recurrent state (value heads x
    dk x dv) and its conv state (the last `linear_conv_kernel_dim` inputs of the conv, in the model's dtype)."""
    g = dims(cfg)
    linear = cfg.layers - cfg.raw["layer_types"].count("full_attention")
    return linear * (g["hv"] * g["dk"] * g["dv"] * F32 + g["conv"] * g["width"] * dtype_bytes)


NAMES = ("qwen3_5_text", "qwen3_5_moe_text")
FAMILY = Family(NAMES, forward, decode, setup_kernels={n: 19 for n in NAMES}, parse=parse,
                kv_cache_width=kv_cache_width, state_bytes=state_bytes, position_limited=True, softmax_fp32=NAMES,
                trains=False)
