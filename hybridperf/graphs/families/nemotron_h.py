"""Nemotron-H (`nemotron_h`: Nemotron-H, Nemotron 3 Nano/Super): a stack of single-mixer blocks, one kind each by
`layers_block_type` (or the letters of `hybrid_override_pattern`): Mamba-2 (M), attention without positional
embeddings (*), a ReLU^2 MLP (-) and a top-k MoE of ReLU^2 experts with a shared expert and DeepSeek-V3's sigmoid
router (E), each after an RMSNorm computed in fp32 and before the block's residual add.

The Mamba-2 mixer (`layers.mamba`) runs transformers' PyTorch path (without `mamba-ssm` and `causal-conv1d`
installed; with them their Triton and CUDA kernels run instead, not modelled): a prefill's SSD scan over chunks of
`chunk_size` tokens, written as einsums (batched GEMMs over every chunk at once, so the kernel count does not grow
with the length), a decode step's state update of (heads x head_dim x state) per sequence. Counted with
TorchDispatchMode on transformers 5.24's eager code (`experiments/gpu/graph_trace.py`, `NEMOTRON_H`). Training is
refused.
"""
from __future__ import annotations

from pathlib import Path

from hybridperf.errors import InputError
from hybridperf.graphs.attention import fills_cache
from hybridperf.graphs.config import ModelConfig, config_positions, kv_length
from hybridperf.graphs.decode import cached_attention, decode_setup
from hybridperf.graphs.family import Family, config_int
from hybridperf.graphs.layers.attention_core import attention_core
from hybridperf.graphs.layers.mamba import attention_kv_width, mamba2_prefill, mamba2_state_bytes, mamba2_step
from hybridperf.graphs.layers.moe import deepseek_router, expert_dispatch
from hybridperf.graphs.layers.norms import fp32_norm
from hybridperf.graphs.primitives import F32, Block, expert_groups, gather, grouped_gemm, linear, misc, vec

#: hybrid_override_pattern's letters -> block kind
KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
#: NemotronHConfig's defaults (transformers 5.24) for keys a config may omit
DEFAULTS = {"head_dim": 128, "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
            "conv_kernel": 4, "chunk_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 1,
            "topk_group": 1, "moe_intermediate_size": 7688, "moe_shared_expert_intermediate_size": 7688,
            "max_position_embeddings": 4096, "tie_word_embeddings": False, "mlp_hidden_act": "relu2"}


def parse(d: dict, source: str) -> ModelConfig:
    """The `ModelConfig` of a Nemotron-H config; its blocks' kinds in `raw["blocks"]`."""
    d = {**DEFAULTS, **{k: v for k, v in d.items() if v is not None}}

    def count(key):
        return config_int(d, key, source)

    blocks, pattern = d.get("layers_block_type"), d.get("hybrid_override_pattern")
    if blocks is None:  # the older configs' letters
        if not isinstance(pattern, str) or not pattern or any(c not in KINDS for c in pattern):
            raise InputError(f"{source}: config field 'hybrid_override_pattern' must be a string of "
                             f"{', '.join(KINDS)} (one letter per block), or 'layers_block_type' a list")
        blocks = [KINDS[c] for c in pattern]
    if not isinstance(blocks, list) or not blocks or any(b not in KINDS.values() for b in blocks):
        raise InputError(f"{source}: config field 'layers_block_type' must list blocks, each one of "
                         f"{', '.join(KINDS.values())}")
    layers = count("num_hidden_layers") if d.get("num_hidden_layers") is not None else len(blocks)
    if layers != len(blocks):
        raise InputError(f"{source}: num_hidden_layers = {layers} but the config lists {len(blocks)} blocks")
    if str(d["mlp_hidden_act"]) != "relu2":
        raise InputError(f"{source}: only Nemotron-H's relu2 MLPs are modelled, got {d['mlp_hidden_act']!r}")
    heads, kv = count("num_attention_heads"), count("num_key_value_heads")
    if heads % kv:
        raise InputError(f"{source}: {heads} attention heads are not a multiple of {kv} key/value heads")
    if count("mamba_num_heads") % count("n_groups"):
        raise InputError(f"{source}: mamba_num_heads must be a multiple of n_groups")
    for key in ("mamba_head_dim", "ssm_state_size", "conv_kernel", "chunk_size"):
        count(key)
    experts = {}
    if "moe" in blocks:
        e, k = count("n_routed_experts"), count("num_experts_per_tok")
        if k > e:
            raise InputError(f"{source}: num_experts_per_tok = {k} exceeds the {e} experts")
        experts = {"num_experts": e, "experts_per_token": k, "expert_ffn": count("moe_intermediate_size"),
                   "shared_ffn": count("moe_shared_expert_intermediate_size")}
    return ModelConfig(family="nemotron_h", hidden=count("hidden_size"), heads=heads, layers=layers,
                       ffn=count("intermediate_size"), vocab=count("vocab_size"), head_dim=count("head_dim"),
                       activation="relu2", kv_heads=kv, max_positions=config_positions(d, source,
                                                                                      "max_position_embeddings"),
                       name=Path(source).stem if source != "config" else "",
                       raw={**d, "blocks": blocks}, **experts)


def _relu2(p: str, tok: int, n_in: int, width: int) -> list:
    """A ReLU^2 MLP: up, relu, square, down."""
    return [linear(f"{p}.up_proj", tok, n_in, width, bias=False), vec(f"{p}.relu", "relu", tok, width),
            vec(f"{p}.square", "powu", tok, width), linear(f"{p}.down_proj", tok, width, n_in, bias=False)]


def _moe(cfg: ModelConfig, tok: int) -> list:
    """DeepSeek-V3's router (normalised top-k, scaled), the latent projections where the experts work in
    `moe_latent_size`, the grouped ReLU^2 experts (fp32 weights), the shared expert and their sum."""
    h, E, k, f = cfg.hidden, cfg.num_experts, cfg.experts_per_token, cfg.expert_ffn
    latent = int(cfg.raw.get("moe_latent_size") or 0)
    width = latent or h
    groups, rows = expert_groups(E, k, tok)
    pairs = tok * k
    experts = [grouped_gemm("experts.up", groups, rows, width, f, E), vec("experts.relu", "relu", pairs, f),
               vec("experts.square", "powu", pairs, f), grouped_gemm("experts.down", groups, rows, f, width, E)]
    routed = expert_dispatch(cfg, tok, fp32_weights=True, experts=experts)
    if latent:
        routed = [linear("moe.latent_in", tok, h, latent, bias=False), *routed,
                  linear("moe.latent_out", tok, latent, h, bias=False)]
    return [*deepseek_router(cfg, tok), misc("moe.topk_sum", "reduce", pairs * F32, fp32=True),
            misc("moe.topk_eps", "mask", 2 * tok * F32, fp32=True), vec("moe.topk_norm", "div", tok, k, fp32=True),
            vec("moe.routed_scale", "mulu", tok, k, fp32=True), *routed, *_relu2("shared", tok, h, cfg.shared_ffn),
            vec("moe.add_shared", "add", tok, h)]


def _block(cfg: ModelConfig, kind: str, B: int, S: int, mode: str, seq: int) -> list:
    """One block of `kind` over B x S new tokens (decode: S = 1 after `seq` cached)."""
    tok, h = B * S, cfg.hidden
    H, hd, kvh = cfg.heads, cfg.head_dim, cfg.num_kv_heads
    if kind == "mamba":
        mixer = mamba2_step(cfg, B) if mode == "decode" else mamba2_prefill(cfg, B, S, fills_cache(cfg, mode))
    elif kind == "attention":
        qkv = [linear("q_proj", tok, h, H * hd, bias=False), linear("k_proj", tok, h, kvh * hd, bias=False),
               linear("v_proj", tok, h, kvh * hd, bias=False)]
        attn = cached_attention("attn", cfg, B, kv_length(cfg, seq), "mulu", ("addu",), softmax_fp32=True) \
            if mode == "decode" else attention_core("attn", B, S, H, hd, False, scale_op="mulu", mask_op=("addu",),
                                                    dropout=False, softmax_fp32=True, kv_groups=H // kvh)
        mixer = [*qkv, *attn, linear("o_proj", tok, H * hd, h, bias=False)]
    elif kind == "mlp":
        mixer = _relu2("mlp", tok, h, cfg.ffn)
    else:
        mixer = _moe(cfg, tok)
    return [*fp32_norm("norm", tok, h), *mixer, vec("resid_add", "add", tok, h, tag="residual")]


#: block name of each kind
BLOCK_NAMES = {"attention": "layer", "mamba": "mamba_layer", "mlp": "mlp_layer", "moe": "moe_layer"}


def _layers(cfg: ModelConfig, B: int, S: int, mode: str, seq: int) -> list:
    blocks = cfg.raw["blocks"]
    return [Block(BLOCK_NAMES[kind], blocks.count(kind), _block(cfg, kind, B, S, mode, seq), "layer")
            for kind in BLOCK_NAMES if blocks.count(kind)]


def _post(cfg: ModelConfig, tok: int) -> list:
    return [*fp32_norm("final_norm", tok, cfg.hidden), linear("lm_head", tok, cfg.hidden, cfg.vocab, bias=False)]


def forward(cfg: ModelConfig, B, S, train) -> list:
    """NemotronHForCausalLM's prefill (inference; the family does not train): embeddings and the causal mask (no
    positional table), the blocks, the final norm and head."""
    tok = B * S
    pre = [gather("embed_tokens", tok, cfg.hidden, cfg.vocab),
           *(misc(f"causal_{i}", "mask", 2 * S * S * F32) for i in range(4)),
           misc("causal_clone", "copy", 2 * B * S * S * F32)]
    return [Block("embeddings", 1, pre, "pre"), *_layers(cfg, B, S, "inf", S),
            Block("head", 1, _post(cfg, tok), "post")]


def decode(cfg: ModelConfig, B: int, seq: int) -> list:
    pre = [gather("embed_tokens", B, cfg.hidden, cfg.vocab),
           *decode_setup(cfg, B, kv_length(cfg, seq), FAMILY.setup_kernels[cfg.family])]
    return [Block("embeddings", 1, pre, "pre"), *_layers(cfg, B, 1, "decode", seq),
            Block("head", 1, _post(cfg, B), "post")]


FAMILY = Family(("nemotron_h",), forward, decode, setup_kernels={"nemotron_h": 14}, parse=parse,
                kv_cache_width=attention_kv_width, state_bytes=mamba2_state_bytes, position_limited=True,
                softmax_fp32=("nemotron_h",), trains=False)
