"""Granite 4.0 (`granitemoehybrid`: Granite-4.0-H Micro/Tiny/Small and the dense Granite 4.0): layers of a Mamba-2
mixer (`layers.mamba`, transformers' PyTorch path) or attention (RoPE only with `position_embedding_type` "rope"),
each followed by a top-k MoE of gated experts beside a gated shared MLP (the shared MLP alone without experts), with
Granite's multipliers: the embeddings, each sublayer's output before its residual add, the logits. Counted with
TorchDispatchMode on transformers 5.24's eager code (`experiments/gpu/graph_trace.py`, `HYBRID`). Training is
refused."""
from __future__ import annotations

from pathlib import Path

from hybridperf.errors import InputError
from hybridperf.graphs.attention import fills_cache
from hybridperf.graphs.config import ModelConfig, config_positions, kv_length
from hybridperf.graphs.decode import LLAMA_SETUP_CASTS, cached_attention, decode_setup
from hybridperf.graphs.family import Family, config_int
from hybridperf.graphs.layers.attention_core import attention_core
from hybridperf.graphs.layers.mamba import attention_kv_width, mamba2_prefill, mamba2_state_bytes, mamba2_step
from hybridperf.graphs.layers.moe import expert_dispatch
from hybridperf.graphs.layers.norms import rms_norm
from hybridperf.graphs.layers.rope import _rope, causal_and_rotary_setup
from hybridperf.graphs.primitives import F32, HALF_DTYPES, Block, cast, gather, linear, misc, vec

#: GraniteMoeHybridConfig's defaults (transformers 5.24) for keys a config may omit
DEFAULTS = {"num_local_experts": 8, "num_experts_per_tok": 2, "shared_intermediate_size": 1024, "mamba_n_heads": 128,
            "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_head": "auto", "mamba_d_conv": 4, "mamba_expand": 2,
            "mamba_chunk_size": 256, "max_position_embeddings": 2048, "tie_word_embeddings": False,
            "hidden_act": "silu", "embedding_multiplier": 1.0, "residual_multiplier": 1.0, "logits_scaling": 1.0}
#: layer_types' names of the two kinds (transformers 5.24's, and the released configs' older ones)
MAMBA, ATTENTION = ("linear_attention", "mamba"), ("full_attention", "attention")


def parse(d: dict, source: str) -> ModelConfig:
    """The `ModelConfig` of a Granite 4.0 config; the Mamba-2 widths stored under `layers.mamba`'s key names."""
    d = {**DEFAULTS, **{k: v for k, v in d.items() if v is not None}}

    def count(key, minimum=1):
        return config_int(d, key, source, minimum)

    hidden, heads, layers = count("hidden_size"), count("num_attention_heads"), count("num_hidden_layers")
    kv = count("num_key_value_heads") if d.get("num_key_value_heads") is not None else heads
    if heads % kv:
        raise InputError(f"{source}: {heads} attention heads are not a multiple of {kv} key/value heads")
    types = d.get("layer_types") or d.get("layers_block_type") or ["mamba"] * layers
    if not isinstance(types, list) or len(types) != layers or any(t not in MAMBA + ATTENTION for t in types):
        raise InputError(f"{source}: config field 'layer_types' must list {layers} entries, each one of "
                         f"{', '.join(MAMBA + ATTENTION)}")
    mamba_heads, inner = count("mamba_n_heads"), count("mamba_expand") * hidden
    head = inner // mamba_heads if d["mamba_d_head"] == "auto" else count("mamba_d_head")
    if head * mamba_heads != inner or mamba_heads % count("mamba_n_groups"):
        raise InputError(f"{source}: mamba_n_heads x mamba_d_head must be mamba_expand x hidden_size, and "
                         "mamba_n_heads a multiple of mamba_n_groups")
    experts = {}
    if count("num_local_experts", 0):
        e, k = count("num_local_experts"), count("num_experts_per_tok")
        if k > e:
            raise InputError(f"{source}: num_experts_per_tok = {k} exceeds the {e} experts")
        experts = {"num_experts": e, "experts_per_token": k, "expert_ffn": count("intermediate_size")}
    mamba = {"mamba_num_heads": mamba_heads, "mamba_head_dim": head, "ssm_state_size": count("mamba_d_state"),
             "n_groups": count("mamba_n_groups"), "conv_kernel": count("mamba_d_conv"),
             "chunk_size": count("mamba_chunk_size")}
    blocks = ["mamba" if t in MAMBA else "attention" for t in types]
    return ModelConfig(family="granitemoehybrid", hidden=hidden, heads=heads, layers=layers,
                       ffn=count("shared_intermediate_size"), vocab=count("vocab_size"), head_dim=hidden // heads,
                       activation=str(d["hidden_act"]), kv_heads=kv,
                       max_positions=config_positions(d, source, "max_position_embeddings"),
                       name=Path(source).stem if source != "config" else "",
                       raw={**d, **mamba, "blocks": blocks, "shared_ffn": count("shared_intermediate_size")},
                       **experts)


def _rope_on(cfg: ModelConfig) -> bool:
    return cfg.raw.get("position_embedding_type") == "rope"


def _attention(cfg: ModelConfig, B: int, S: int, mode: str, seq: int) -> list:
    tok, h, H, hd, kvh = B * S, cfg.hidden, cfg.heads, cfg.head_dim, cfg.num_kv_heads
    bias = bool(cfg.raw.get("attention_bias", False))
    ks = [linear("q_proj", tok, h, H * hd, bias=bias), linear("k_proj", tok, h, kvh * hd, bias=bias),
          linear("v_proj", tok, h, kvh * hd, bias=bias)]
    if _rope_on(cfg):
        ks += [*_rope("q_rope", tok, H * hd), *_rope("k_rope", tok, kvh * hd)]
    attn = cached_attention("attn", cfg, B, kv_length(cfg, seq), "mulu", ("addu",), softmax_fp32=True) \
        if mode == "decode" else attention_core("attn", B, S, H, hd, False, scale_op="mulu", mask_op=("addu",),
                                                dropout=False, softmax_fp32=True, kv_groups=H // kvh)
    return [*ks, *attn, linear("o_proj", tok, H * hd, h, bias=bias)]


def _mlp(cfg: ModelConfig, tok: int) -> list:
    """The top-k MoE (a router over the logits' top k, softmax in fp32, gated experts) beside the gated shared MLP
    (one GEMM for gate and up, chunked), and their sum; the shared MLP alone without experts."""
    h, f = cfg.hidden, cfg.raw["shared_ffn"]
    shared = [linear("shared.input_linear", tok, h, 2 * f, bias=False), vec("shared.act", "gelu", tok, f),
              vec("shared.gate_mul", "mul", tok, f), linear("shared.output_linear", tok, f, h, bias=False)]
    if not cfg.num_experts:
        return shared
    E, k = cfg.num_experts, cfg.experts_per_token
    router = [linear("moe.router", tok, h, E, bias=False), cast("moe.router_to_fp32", tok * E),
              misc("moe.topk", "route", tok * E * F32 + tok * k * (F32 + 8), tag="gather"),
              vec("moe.router_softmax", "softmax", tok, k, fp32=True), cast("moe.weights_to_half", tok * k)]
    return [*router, *expert_dispatch(cfg, tok), *shared, vec("moe.add_shared", "add", tok, h)]


def _layer(cfg: ModelConfig, kind: str, B: int, S: int, mode: str, seq: int) -> list:
    tok, h = B * S, cfg.hidden
    if kind == "mamba":
        mixer = mamba2_step(cfg, B) if mode == "decode" else mamba2_prefill(cfg, B, S, fills_cache(cfg, mode))
    else:
        mixer = _attention(cfg, B, S, mode, seq)
    return [*rms_norm("input_norm", tok, h), *mixer, vec("resid_scale1", "mulu", tok, h),
            vec("resid_add1", "add", tok, h, tag="residual"), *rms_norm("post_norm", tok, h), *_mlp(cfg, tok),
            vec("resid_scale2", "mulu", tok, h), vec("resid_add2", "add", tok, h, tag="residual")]


def _layers(cfg: ModelConfig, B: int, S: int, mode: str, seq: int) -> list:
    blocks = cfg.raw["blocks"]
    return [Block(name, blocks.count(kind), _layer(cfg, kind, B, S, mode, seq), "layer")
            for kind, name in (("attention", "layer"), ("mamba", "mamba_layer")) if blocks.count(kind)]


def _post(cfg: ModelConfig, tok: int) -> list:
    return [*rms_norm("final_norm", tok, cfg.hidden), linear("lm_head", tok, cfg.hidden, cfg.vocab, bias=False),
            vec("logits_scaling", "divu", tok, cfg.vocab)]


def forward(cfg: ModelConfig, B, S, train) -> list:
    """GraniteMoeHybridForCausalLM's prefill (inference; the family does not train)."""
    tok = B * S
    setup = causal_and_rotary_setup(B, S, cfg.head_dim)
    pre = [gather("embed_tokens", tok, cfg.hidden, cfg.vocab), vec("embed_multiplier", "mulu", tok, cfg.hidden),
           *(setup if _rope_on(cfg) else [k for k in setup if not k["name"].startswith("rotary_")])]
    return [Block("embeddings", 1, pre, "pre"), *_layers(cfg, B, S, "inf", S),
            Block("head", 1, _post(cfg, tok), "post")]


def decode(cfg: ModelConfig, B: int, seq: int) -> list:
    kv = kv_length(cfg, seq)
    pre = [gather("embed_tokens", B, cfg.hidden, cfg.vocab), vec("embed_multiplier", "mulu", B, cfg.hidden),
           *decode_setup(cfg, B, kv, FAMILY.setup_kernels[cfg.family]),
           *(cast(f"setup_cast_{i}", B * kv, dtypes=HALF_DTYPES) for i in range(LLAMA_SETUP_CASTS * _rope_on(cfg)))]
    return [Block("embeddings", 1, pre, "pre"), *_layers(cfg, B, 1, "decode", seq),
            Block("head", 1, _post(cfg, B), "post")]


FAMILY = Family(("granitemoehybrid",), forward, decode, setup_kernels={"granitemoehybrid": 14}, parse=parse,
                kv_cache_width=attention_kv_width, state_bytes=mamba2_state_bytes, position_limited=True,
                softmax_fp32=("granitemoehybrid",), trains=False)
