"""The `Arch` fields of families serving reads by their own config fields rather than through `graphs.config`
(`serving.arch`'s module docstring says how each is read): each builder returns the keyword arguments of an `Arch`."""
from __future__ import annotations

import math

from hybridperf.errors import InputError
from hybridperf.serving.compressed import CompressedAttention


def field_int(d: dict, key: str, default=None) -> int:
    """A config field as a non-negative integer (`default` where absent); InputError otherwise."""
    v = d.get(key, default)
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise InputError(f"config field {key!r} must be a non-negative integer, got {v!r}")
    return int(v)


def nemotron_h(d: dict, name: str) -> dict:
    """Nemotron-H: one block per character of `hybrid_override_pattern`, or per entry of the newer configs'
    `layers_block_type` (see the module docstring)."""
    blocks = d.get("layers_block_type")
    if isinstance(blocks, list):
        kinds = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
        pattern = "".join(kinds.get(str(b), "?") for b in blocks)
    else:
        pattern = str(d.get("hybrid_override_pattern") or "")
    layers = field_int(d, "num_hidden_layers", len(pattern))
    if not pattern or len(pattern) != layers or set(pattern) - set("M*-E"):
        raise InputError(f"{name or 'config'}: Nemotron-H needs one block kind (mamba/M, attention/*, mlp/-, "
                         f"moe/E) per layer ({layers}), got {pattern!r}")
    count = {c: pattern.count(c) for c in "M*-E"}
    experts = field_int(d, "n_routed_experts", 0) if count["E"] else 0
    heads = field_int(d, "num_attention_heads")
    return dict(name=name, family="nemotron_h", hidden=field_int(d, "hidden_size"), layers=layers,
                vocab=field_int(d, "vocab_size"), heads=heads, kv_heads=field_int(d, "num_key_value_heads", heads),
                head_dim=field_int(d, "head_dim", d.get("attention_head_dim")),
                v_head_dim=field_int(d, "head_dim", d.get("attention_head_dim")), ffn=field_int(d, "intermediate_size"),
                dense_layers=count["-"], experts=experts, topk=field_int(d, "num_experts_per_tok", 0) if experts else 0,
                expert_ffn=field_int(d, "moe_intermediate_size", 0) if experts else 0,
                shared_ffn=field_int(d, "moe_shared_expert_intermediate_size", 0) * field_int(d, "n_shared_experts", 1)
                if experts else 0,
                linear_layers=count["M"], lin_k_heads=field_int(d, "n_groups"),
                lin_k_dim=field_int(d, "ssm_state_size"),
                lin_v_heads=field_int(d, "mamba_num_heads"), lin_v_dim=field_int(d, "mamba_head_dim"),
                mixer_free_layers=count["-"] + count["E"], mlp_free_layers=count["M"] + count["*"],
                gated_mlp=str(d.get("mlp_hidden_act", "relu2")) not in ("relu2", "relu", "gelu"),
                moe_latent=int(d.get("moe_latent_size") or 0) if experts else 0)


def nemotron_nas(d: dict, name: str) -> dict:
    """Llama-Nemotron (DeciLM): Llama layers whose attention may be a no-op and whose MLP width is
    `ffn_mult` x hidden (DeciLM's rounding: 2/3 of it, up to a multiple of 256)."""
    blocks = d.get("block_configs")
    if not isinstance(blocks, list) or not blocks:
        raise InputError(f"{name or 'config'}: nemotron_nas needs `block_configs`, one per layer")
    h, heads = field_int(d, "hidden_size"), field_int(d, "num_attention_heads")
    attn = [b.get("attention") or {} for b in blocks]
    ffn = [b.get("ffn") or {} for b in blocks]
    groups = [int(a.get("n_heads_in_group") or 0) for a in attn if not a.get("no_op")]
    widths = [math.ceil(2 * float(f.get("ffn_mult") or 0) * h / 3 / 256) * 256 for f in ffn if not f.get("no_op")]
    if not groups or not widths or any(a.get("replace_with_linear") for a in attn + ffn) or len(set(groups)) > 1 \
            or any(a.get("window_length") for a in attn):
        raise InputError(f"{name or 'config'}: nemotron_nas blocks with linear replacements, windows or differing "
                         "KV groups are not modelled")
    return dict(name=name, family="nemotron_nas", hidden=h, layers=len(blocks), vocab=field_int(d, "vocab_size"),
                heads=heads, kv_heads=heads // max(groups[0], 1), head_dim=h // heads, v_head_dim=h // heads,
                ffn=round(sum(widths) / len(widths)), dense_layers=len(widths),
                mixer_free_layers=len(blocks) - len(groups), mlp_free_layers=len(blocks) - len(widths))


def gemma4(d: dict, name: str) -> dict:
    """Gemma-4 (see the module docstring)."""
    types = list(d.get("layer_types") or [])
    layers = field_int(d, "num_hidden_layers")
    if len(types) != layers or set(types) - {"sliding_attention", "full_attention"}:
        raise InputError(f"{name or 'config'}: gemma4 needs one sliding/full layer type per layer ({layers})")
    if int(d.get("num_kv_shared_layers") or 0) or d.get("use_double_wide_mlp"):
        raise InputError(f"{name or 'config'}: gemma4 layers sharing KV caches or double-wide MLPs are not modelled")
    sliding = types.count("sliding_attention")
    moe = bool(d.get("enable_moe_block"))
    ffn = field_int(d, "intermediate_size")
    return dict(name=name, family="gemma4", hidden=field_int(d, "hidden_size"), layers=layers,
                vocab=field_int(d, "vocab_size"),
                heads=field_int(d, "num_attention_heads"), kv_heads=field_int(d, "num_key_value_heads"),
                head_dim=field_int(d, "head_dim"), v_head_dim=field_int(d, "head_dim"), ffn=ffn,
                dense_layers=0 if moe else layers, experts=field_int(d, "num_experts") if moe else 0,
                topk=field_int(d, "top_k_experts") if moe else 0,
                expert_ffn=int(d.get("moe_intermediate_size") or d.get("expert_intermediate_size") or 0) if moe else 0,
                shared_ffn=ffn if moe else 0, sliding_layers=sliding,
                window=field_int(d, "sliding_window") if sliding else 0,
                full_kv_heads=int(d.get("num_global_key_value_heads") or 0),
                full_head_dim=int(d.get("global_head_dim") or 0), full_k_eq_v=bool(d.get("attention_k_eq_v")))


def deepseek_v4(d: dict, name: str) -> dict:
    """DeepSeek-V4: compressed MQA attention (`serving.compressed`), a top-k MoE with a shared expert on every
    layer (the first `num_hash_layers` route by hash, at the same cost)."""
    layers = field_int(d, "num_hidden_layers")
    ratios = tuple(int(r) for r in (d.get("compress_ratios") or [])[:layers])
    if len(ratios) != layers or set(ratios) - {0, 4, 128}:
        raise InputError(f"{name or 'config'}: DeepSeek-V4 needs a compress ratio of 0, 4 or 128 per layer ({layers})")
    hd, heads = field_int(d, "head_dim"), field_int(d, "num_attention_heads")
    comp = CompressedAttention(ratios=ratios, window=field_int(d, "sliding_window"), head_dim=hd,
                               q_lora=field_int(d, "q_lora_rank"), o_groups=field_int(d, "o_groups"),
                               o_lora=field_int(d, "o_lora_rank"), index_heads=field_int(d, "index_n_heads"),
                               index_dim=field_int(d, "index_head_dim"), index_topk=field_int(d, "index_topk"),
                               hc_mult=field_int(d, "hc_mult", 1))
    return dict(name=name, family="deepseek_v4", hidden=field_int(d, "hidden_size"), layers=layers,
                vocab=field_int(d, "vocab_size"), heads=heads, kv_heads=1, head_dim=hd, v_head_dim=hd,
                ffn=field_int(d, "moe_intermediate_size"),
                dense_layers=0, experts=field_int(d, "n_routed_experts"), topk=field_int(d, "num_experts_per_tok"),
                expert_ffn=field_int(d, "moe_intermediate_size"),
                shared_ffn=field_int(d, "moe_intermediate_size") * field_int(d, "n_shared_experts", 1), compressed=comp)


def _hybrid_window_moe(d: dict, name: str, family: str, full: list, **kw) -> dict:
    """A top-k MoE whose layers attend either all keys or a sliding window (`full`: a bool per layer)."""
    layers = field_int(d, "num_hidden_layers", len(full))
    if len(full) != layers:
        raise InputError(f"{name or 'config'}: {family} needs one attention kind per layer ({layers}), got {len(full)}")
    sliding = layers - sum(full)
    return dict(name=name, family=family, hidden=field_int(d, "hidden_size"), layers=layers,
                vocab=field_int(d, "vocab_size"),
                heads=field_int(d, "num_attention_heads"), sliding_layers=sliding,
                window=field_int(d, "sliding_window") if sliding else 0,
                experts=field_int(d, "n_routed_experts", d.get("num_experts")),
                topk=field_int(d, "num_experts_per_tok"), expert_ffn=field_int(d, "moe_intermediate_size"), **kw)


def mimo_v2(d: dict, name: str) -> dict:
    """MiMo-V2-Flash: full-attention layers (`hybrid_layer_pattern` 0) among sliding-window ones (1), each
    kind with its own KV heads; 192-wide keys, 128-wide values; dense first layers (`moe_layer_freq` 0)."""
    pattern, freq = list(d.get("hybrid_layer_pattern") or []), list(d.get("moe_layer_freq") or [])
    dense = sum(not f for f in freq)
    return _hybrid_window_moe(d, name, "mimo_v2_flash", [not p for p in pattern],
                              kv_heads=field_int(d, "swa_num_key_value_heads", d.get("num_key_value_heads")),
                              head_dim=field_int(d, "swa_head_dim", d.get("head_dim")),
                              v_head_dim=field_int(d, "swa_v_head_dim", d.get("v_head_dim")),
                              full_kv_heads=field_int(d, "num_key_value_heads"), ffn=field_int(d, "intermediate_size"),
                              dense_layers=dense, shared_ffn=field_int(d, "moe_intermediate_size") * int(
                                  d.get("n_shared_experts") or 0))


def step3p7(d: dict, name: str) -> dict:
    """Step-3.7-Flash: full and sliding-window layers (`layer_types`), dense first layers, a shared expert."""
    types = list(d.get("layer_types") or [])
    if set(types) - {"full_attention", "sliding_attention"}:
        raise InputError(f"{name or 'config'}: step3p7 layer types must be full_attention or sliding_attention")
    hd = field_int(d, "head_dim")
    return _hybrid_window_moe(d, name, "step3p7", [t == "full_attention" for t in types],
                              kv_heads=field_int(d, "num_key_value_heads"), head_dim=hd, v_head_dim=hd,
                              ffn=field_int(d, "intermediate_size"),
                              dense_layers=field_int(d, "first_k_dense_replace", 0),
                              shared_ffn=field_int(d, "share_expert_dim", 0) * int(d.get("n_shared_experts") or 0))
