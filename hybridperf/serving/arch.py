"""The architecture numbers a serving engine's step time depends on, read from a HF config.

Families `graphs.config.load_config` reads (llama, qwen3, qwen3_moe, gpt_oss, deepseek_v3, ...) go
through it, so both layers agree on what a config means. Serving also meets families the kernel
enumerator does not trace; they map onto the nearest one by their published layer structure:

    kimi_k2, kimi_k25      DeepSeek-V3's layers (MLA + top-k MoE), Kimi-K2's expert count
    kimi_linear (Kimi-K3)  DeepSeek-V3's layers, its `kda_layers` with Kimi delta attention (a linear-attention
                           layer: `linear_layers`) in place of MLA, experts in the `routed_expert_hidden_size`
                           latent space
    glm_moe_dsa,           DeepSeek-V3's layers (GLM-5: wider heads); their sparse attention (DSA) reads at
    deepseek_v32           most `index_topk` keys per query
    minimax_m2             grouped-query attention + top-k MoE (Qwen3-MoE's layers, Mixtral's field names)
    qwen3_5_moe(_text)     Qwen3-MoE's layers, three of every four with linear attention (a fixed-size
                           state instead of a KV cache: `linear_layers`)
    qwen3_5(_text)         Qwen3's dense layers, three of every four with linear attention
    qwen3_next             Qwen3.5-MoE's layers (`graphs.config.READ_AS`)
    qwen3_vl(_moe)_text    the language model of Qwen3-VL: Qwen3's (Qwen3-MoE's) layers; the vision tower
                           and its image tokens are not modelled
    mimo                   Qwen2's layers (its multi-token-prediction layers do not run without
                           speculative decoding)
    minimax_m3             grouped-query attention + top-k MoE with a shared expert after
                           `first_k_dense_replace` dense layers (`dense_intermediate_size`); its block-sparse
                           attention reads `sparse_topk_blocks` blocks plus the local one per query on every
                           layer (the few dense-attention layers priced so too)
    deepseek_v4            compressed MQA attention (sliding window; CSA and HCA layers' compressed entries,
                           `serving.compressed`) with hyper-connections, and a top-k MoE with a shared expert
    mimo_v2_flash,         a top-k MoE whose full-attention layers sit among sliding-window ones, each kind
    step3p7                with its own KV heads (MiMo-V2: 192-wide keys, 128-wide values), dense first layers
    gemma4(_text)          Gemma's gated-GeLU layers, most with sliding-window attention; the full-attention
                           layers have their own KV heads and head width and may use their keys as values;
                           the MoE variant runs its dense MLP beside the experts (as a shared expert)
    nemotron_h             blocks of one kind each (`hybrid_override_pattern`): Mamba-2 mixers (M) as
                           linear-attention layers (value heads = SSM heads, key heads x width = groups x
                           state size; an fp32 state per sequence), attention (*), non-gated ReLU^2 MLPs (-)
                           and top-k MoE (E) with a shared expert, its experts in a `moe_latent_size`
                           latent space where given; one residual, so one TP all-reduce, per block
    nemotron_nas (DeciLM)  Llama layers pruned per block (`block_configs`): attention removed on some
                           (`no_op`), each MLP its own width; priced at the blocks' mean MLP width
    llama4(_text)          a top-k MoE (`num_local_experts` of `intermediate_size`) plus a shared expert of
                           the same width on every `interleave_moe_layer_step`-th layer, dense MLPs of
                           `intermediate_size_mlp` between; its chunked attention is priced as full
                           attention (the same up to `attention_chunk_size`, 8,192, tokens)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hybridperf.errors import InputError
from hybridperf.serving.block_sparse import BlockSparse
from hybridperf.serving.compressed import INDEX_SCALE_BYTES, CompressedAttention
from hybridperf.graphs.config import (DEEPSEEK_DEFAULTS, LLAMA_LIKE, MOE_LLAMA, READ_AS, config_from_dict,
                                      config_positions)

#: families read as DeepSeek-V3 (multi-head latent attention + MoE)
MLA_ALIASES = ("kimi_k2", "kimi_k25", "glm_moe_dsa", "deepseek_v32")
#: families read as a grouped-query-attention MoE
GQA_MOE_ALIASES = ("minimax_m2", "minimax_m3", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_vl_moe_text", "qwen3_next")
#: families read as another's dense layers
DENSE_ALIASES = {"qwen3_vl_text": "qwen3", "qwen3_5": "qwen3", "qwen3_5_text": "qwen3", "mimo": "qwen2"}
#: families read as a GQA MoE with a shared expert interleaved with dense layers
LLAMA4 = ("llama4", "llama4_text")


@dataclass(frozen=True)
class Arch:
    """One decoder-only LLM as a serving step sees it (whole model, before any parallel split)."""

    name: str
    family: str
    hidden: int
    layers: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int  # query/key width of one head
    v_head_dim: int
    ffn: int  # dense MLP width (dense layers)
    dense_layers: int
    experts: int = 0
    topk: int = 0
    #: group-limited routing (DeepSeek-V3's n_group / topk_group): a token's experts come from `topk_groups` of
    #: `expert_groups` groups of consecutive experts (1 / 1: unlimited)
    expert_groups: int = 1
    topk_groups: int = 1
    expert_ffn: int = 0
    shared_ffn: int = 0
    mla: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_dim: int = 0
    sliding_layers: int = 0  # layers attending to `window` keys only
    window: int = 0
    linear_layers: int = 0  # linear-attention layers (fixed-size state, no KV cache)
    lin_k_heads: int = 0  # a linear-attention layer's key heads, value heads and their widths
    lin_v_heads: int = 0
    lin_k_dim: int = 0
    lin_v_dim: int = 0
    q_gate: bool = False  # full-attention layers project a sigmoid output gate beside q (Qwen3.5)
    max_keys: int = 0  # sparse attention reads at most this many keys (0: all)
    #: DSA's lightning indexer (GLM-5, DeepSeek-V3.2): its heads and width, FP8 scores of every cached key
    #: on every layer, of which the top `max_keys` are attended (0: none)
    index_heads: int = 0
    index_dim: int = 0
    mixer_free_layers: int = 0  # blocks without attention or a linear mixer (Nemotron-H's MLP/MoE blocks)
    mlp_free_layers: int = 0  # blocks without an MLP or MoE (Nemotron-H's mixer blocks)
    gated_mlp: bool = True  # MLPs and experts have a gate projection (SwiGLU); False: up and down only
    moe_latent: int = 0  # experts compute in this latent width, projected from and back to `hidden` (0: none)
    full_kv_heads: int = 0  # full-attention layers' own KV heads and head width where they differ from the
    full_head_dim: int = 0  # sliding layers' (Gemma-4's global layers); 0: the same
    full_k_eq_v: bool = False  # full-attention layers use their keys as values (one cached tensor)
    compressed: CompressedAttention | None = None  # DeepSeek-V4's attention (`serving.compressed`)
    block_sparse: BlockSparse | None = None  # MiniMax-M3's (`serving.block_sparse`; `max_keys` caps its layers)
    #: the longest request (prompt plus output) the engines accept: the config's max_position_embeddings, already
    #: the extended length where it declares rope scaling (0: it states none)
    max_positions: int = 0
    mtp: bool = False  # the checkpoint carries multi-token-prediction layers an engine may draft with (`MTP_KEYS`)

    @property
    def full_layers(self) -> int:
        """KV layers attending to every key (not a sliding window)."""
        return self.kv_layers - self.sliding_layers

    def attn_dims(self, full: bool) -> tuple:
        """(KV heads, query/key head width, value head width, cached widths per KV head over the key width:
        2 when keys and values are alike, 1 when the keys are the values) of a full-attention or a
        sliding layer."""
        kvh, hd, vd = self.kv_heads, self.head_dim, self.v_head_dim
        if full:
            kvh, hd, vd = self.full_kv_heads or kvh, self.full_head_dim or hd, self.full_head_dim or vd
            if self.full_k_eq_v:
                return (kvh, hd, hd, 1.0)
        return (kvh, hd, vd, (hd + vd) / hd)

    def attention_kinds(self) -> tuple:
        """(full, layers, `attn_dims`) of the full-attention layers, then of the sliding-window ones (either
        may count 0 layers)."""
        kinds = ((True, self.full_layers), (False, self.sliding_layers))
        return tuple((full, n, self.attn_dims(full)) for full, n in kinds)

    @property
    def mlp_mats(self) -> int:
        """Weight matrices of one MLP or expert."""
        return 3 if self.gated_mlp else 2

    @property
    def sublayer_share(self) -> float:
        """Residual sublayers (mixers plus MLPs) per layer, over the two of a standard decoder layer: what
        scales the norms, residual adds and TP all-reduces."""
        return (2 * self.layers - self.mixer_free_layers - self.mlp_free_layers) / (2.0 * self.layers)

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers - self.mlp_free_layers

    @property
    def kv_layers(self) -> int:
        """Layers that keep a KV cache."""
        return self.layers - self.linear_layers - self.mixer_free_layers

    def linear_state_bytes(self, tp: int) -> float:
        """Recurrent state one sequence holds on one GPU of a `tp`-way group, over all linear-attention
        layers: (value heads / tp) x key width x value width, fp32 (Qwen3.5's `mamba_ssm_dtype`)."""
        return self.linear_layers * max(self.lin_v_heads / tp, 1.0) * self.lin_k_dim * self.lin_v_dim * 4.0

    def kv_elems_per_token(self, tp: int) -> float:
        """KV-cache elements one token adds on one GPU of a `tp`-way group (all its layers but sliding-window
        ones, whose window is `window_elems` per sequence): MLA caches one latent (not split by TP), GQA
        splits its key/value heads (replicated when fewer than `tp`)."""
        if self.mla:
            return (self.kv_lora_rank + self.rope_dim) * self.kv_layers
        if self.compressed:  # one byte per element: callers scale by the KV dtype (`kv_bytes_per_token`)
            return self.compressed.kv_bytes_per_token(1.0)
        kvh, hd, _, tensors = self.attn_dims(True)
        out = tensors * hd * max(kvh / tp, 1.0) * self.full_layers
        if not self.window or not self.full_layers:  # no window, or every layer windowed: priced per token
            kvh, hd, _, tensors = self.attn_dims(False)
            out += tensors * hd * max(kvh / tp, 1.0) * self.sliding_layers
        return out

    def index_bytes_per_token(self) -> float:
        """Bytes of DSA's FP8 (MSA's 16-bit) index keys one token adds over all layers (not split by TP)."""
        if self.block_sparse:
            return self.block_sparse.index_key_bytes
        return (self.index_dim + INDEX_SCALE_BYTES) * self.kv_layers if self.index_heads else 0.0

    def window_elems(self, tp: int) -> float:
        """KV-cache elements a sequence's sliding-window layers hold on one GPU: the window's keys and values
        (engines keep a windowed cache for them: vLLM's hybrid allocator, SGLang's SWA pool, TensorRT-LLM's
        cyclic cache)."""
        if not (self.sliding_layers and self.window and self.full_layers):
            return 0.0
        kvh, hd, _, tensors = self.attn_dims(False)
        return tensors * hd * max(kvh / tp, 1.0) * self.sliding_layers * self.window

    @property
    def sharded_linear_heads(self) -> int:
        """Key heads of a delta-rule layer (GatedDeltaNet, KDA), which the engines shard over TP (vLLM's
        `num_k_heads // tp_size`): TP must divide them. 0 without such layers, and for Mamba-2, whose groups the
        engines may replicate."""
        return self.lin_k_heads if self.linear_layers and self.family != "nemotron_h" else 0

    def linear_conv_channels(self) -> int:
        """Channels of a linear-attention layer's short causal conv: q and k (key heads), v (value heads); Mamba-2's
        x, B and C alike."""
        return 2 * self.lin_k_heads * self.lin_k_dim + self.lin_v_heads * self.lin_v_dim

    def linear_in_width(self) -> int:
        """Outputs of a linear-attention layer's input projections: q, k (key heads), v, z (value heads) and
        the per-value-head decay and beta."""
        return 2 * self.lin_k_heads * self.lin_k_dim + 2 * self.lin_v_heads * self.lin_v_dim + 2 * self.lin_v_heads

    def params(self) -> dict:
        """Weight elements: {"attn", "dense_mlp", "experts", "shared", "embed", "index"} over all layers
        ("index": DSA's indexer projections, which every TP rank holds whole)."""
        h = self.hidden
        if self.mla:
            q = (h * self.q_lora_rank + self.q_lora_rank * self.heads * self.head_dim) if self.q_lora_rank \
                else h * self.heads * self.head_dim
            kv = h * (self.kv_lora_rank + self.rope_dim) + self.kv_lora_rank * self.heads * (
                self.head_dim - self.rope_dim + self.v_head_dim)
            attn = q + kv + self.heads * self.v_head_dim * h
            attn = attn * self.kv_layers
        elif self.compressed:
            attn = self.compressed.weights(h, self.heads)
        else:
            attn = 0.0
            for _, n, (kvh, hd, vd, tensors) in self.attention_kinds():
                q = self.heads * hd * (2 if self.q_gate else 1)
                attn += (h * (q + tensors * kvh * hd) + self.heads * vd * h) * n
        lin = h * self.linear_in_width() + self.lin_v_heads * self.lin_v_dim * h
        m = float(self.mlp_mats)
        expert_h = self.moe_latent or h
        latent = 2.0 * h * self.moe_latent  # projections into and out of the experts' latent space
        return {"attn": attn + lin * self.linear_layers,
                "dense_mlp": m * h * self.ffn * self.dense_layers,
                "experts": m * expert_h * self.expert_ffn * self.experts * self.moe_layers,
                "shared": (m * h * self.shared_ffn + latent) * self.moe_layers, "embed": 2.0 * h * self.vocab,
                "index": (self.index_heads * self.index_dim * (self.q_lora_rank or h)
                          + h * (self.index_dim + self.index_heads)) * self.kv_layers
                + (self.block_sparse.index_params(h) if self.block_sparse else 0)}


def _text(d: dict) -> dict:
    """A multimodal wrapper's language model (`text_config`), else the config itself."""
    text = d.get("text_config")
    if not (isinstance(text, dict) and "hidden_size" in text):
        return d
    outer = str(d.get("model_type", "")).removesuffix("_vl")  # a text config that does not name its family
    return {"model_type": outer, **text}


def _int(d: dict, key: str, default=None) -> int:
    v = d.get(key, default)
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise InputError(f"config field {key!r} must be a non-negative integer, got {v!r}")
    return int(v)


def _nemotron_h(d: dict, name: str) -> Arch:
    """Nemotron-H: one block per character of `hybrid_override_pattern`, or per entry of the newer configs'
    `layers_block_type` (see the module docstring)."""
    blocks = d.get("layers_block_type")
    if isinstance(blocks, list):
        kinds = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
        pattern = "".join(kinds.get(str(b), "?") for b in blocks)
    else:
        pattern = str(d.get("hybrid_override_pattern") or "")
    layers = _int(d, "num_hidden_layers", len(pattern))
    if not pattern or len(pattern) != layers or set(pattern) - set("M*-E"):
        raise InputError(f"{name or 'config'}: Nemotron-H needs one block kind (mamba/M, attention/*, mlp/-, "
                         f"moe/E) per layer ({layers}), got {pattern!r}")
    count = {c: pattern.count(c) for c in "M*-E"}
    experts = _int(d, "n_routed_experts", 0) if count["E"] else 0
    heads = _int(d, "num_attention_heads")
    return Arch(name=name, family="nemotron_h", hidden=_int(d, "hidden_size"), layers=layers,
                vocab=_int(d, "vocab_size"), heads=heads, kv_heads=_int(d, "num_key_value_heads", heads),
                head_dim=_int(d, "head_dim", d.get("attention_head_dim")),
                v_head_dim=_int(d, "head_dim", d.get("attention_head_dim")), ffn=_int(d, "intermediate_size"),
                dense_layers=count["-"], experts=experts, topk=_int(d, "num_experts_per_tok", 0) if experts else 0,
                expert_ffn=_int(d, "moe_intermediate_size", 0) if experts else 0,
                shared_ffn=_int(d, "moe_shared_expert_intermediate_size", 0) * _int(d, "n_shared_experts", 1)
                if experts else 0,
                linear_layers=count["M"], lin_k_heads=_int(d, "n_groups"), lin_k_dim=_int(d, "ssm_state_size"),
                lin_v_heads=_int(d, "mamba_num_heads"), lin_v_dim=_int(d, "mamba_head_dim"),
                mixer_free_layers=count["-"] + count["E"], mlp_free_layers=count["M"] + count["*"],
                gated_mlp=str(d.get("mlp_hidden_act", "relu2")) not in ("relu2", "relu", "gelu"),
                moe_latent=int(d.get("moe_latent_size") or 0) if experts else 0)


def _nemotron_nas(d: dict, name: str) -> Arch:
    """Llama-Nemotron (DeciLM): Llama layers whose attention may be a no-op and whose MLP width is
    `ffn_mult` x hidden (DeciLM's rounding: 2/3 of it, up to a multiple of 256)."""
    blocks = d.get("block_configs")
    if not isinstance(blocks, list) or not blocks:
        raise InputError(f"{name or 'config'}: nemotron_nas needs `block_configs`, one per layer")
    h, heads = _int(d, "hidden_size"), _int(d, "num_attention_heads")
    attn = [b.get("attention") or {} for b in blocks]
    ffn = [b.get("ffn") or {} for b in blocks]
    groups = [int(a.get("n_heads_in_group") or 0) for a in attn if not a.get("no_op")]
    widths = [math.ceil(2 * float(f.get("ffn_mult") or 0) * h / 3 / 256) * 256 for f in ffn if not f.get("no_op")]
    if not groups or not widths or any(a.get("replace_with_linear") for a in attn + ffn) or len(set(groups)) > 1 \
            or any(a.get("window_length") for a in attn):
        raise InputError(f"{name or 'config'}: nemotron_nas blocks with linear replacements, windows or differing "
                         "KV groups are not modelled")
    return Arch(name=name, family="nemotron_nas", hidden=h, layers=len(blocks), vocab=_int(d, "vocab_size"),
                heads=heads, kv_heads=heads // max(groups[0], 1), head_dim=h // heads, v_head_dim=h // heads,
                ffn=round(sum(widths) / len(widths)), dense_layers=len(widths),
                mixer_free_layers=len(blocks) - len(groups), mlp_free_layers=len(blocks) - len(widths))


def _gemma4(d: dict, name: str) -> Arch:
    """Gemma-4 (see the module docstring)."""
    types = list(d.get("layer_types") or [])
    layers = _int(d, "num_hidden_layers")
    if len(types) != layers or set(types) - {"sliding_attention", "full_attention"}:
        raise InputError(f"{name or 'config'}: gemma4 needs one sliding/full layer type per layer ({layers})")
    if int(d.get("num_kv_shared_layers") or 0) or d.get("use_double_wide_mlp"):
        raise InputError(f"{name or 'config'}: gemma4 layers sharing KV caches or double-wide MLPs are not modelled")
    sliding = types.count("sliding_attention")
    moe = bool(d.get("enable_moe_block"))
    ffn = _int(d, "intermediate_size")
    return Arch(name=name, family="gemma4", hidden=_int(d, "hidden_size"), layers=layers, vocab=_int(d, "vocab_size"),
                heads=_int(d, "num_attention_heads"), kv_heads=_int(d, "num_key_value_heads"),
                head_dim=_int(d, "head_dim"), v_head_dim=_int(d, "head_dim"), ffn=ffn,
                dense_layers=0 if moe else layers, experts=_int(d, "num_experts") if moe else 0,
                topk=_int(d, "top_k_experts") if moe else 0,
                expert_ffn=int(d.get("moe_intermediate_size") or d.get("expert_intermediate_size") or 0) if moe else 0,
                shared_ffn=ffn if moe else 0, sliding_layers=sliding,
                window=_int(d, "sliding_window") if sliding else 0,
                full_kv_heads=int(d.get("num_global_key_value_heads") or 0),
                full_head_dim=int(d.get("global_head_dim") or 0), full_k_eq_v=bool(d.get("attention_k_eq_v")))


def _deepseek_v4(d: dict, name: str) -> Arch:
    """DeepSeek-V4: compressed MQA attention (`serving.compressed`), a top-k MoE with a shared expert on every
    layer (the first `num_hash_layers` route by hash, at the same cost)."""
    layers = _int(d, "num_hidden_layers")
    ratios = tuple(int(r) for r in (d.get("compress_ratios") or [])[:layers])
    if len(ratios) != layers or set(ratios) - {0, 4, 128}:
        raise InputError(f"{name or 'config'}: DeepSeek-V4 needs a compress ratio of 0, 4 or 128 per layer ({layers})")
    hd, heads = _int(d, "head_dim"), _int(d, "num_attention_heads")
    comp = CompressedAttention(ratios=ratios, window=_int(d, "sliding_window"), head_dim=hd,
                               q_lora=_int(d, "q_lora_rank"), o_groups=_int(d, "o_groups"),
                               o_lora=_int(d, "o_lora_rank"), index_heads=_int(d, "index_n_heads"),
                               index_dim=_int(d, "index_head_dim"), index_topk=_int(d, "index_topk"),
                               hc_mult=_int(d, "hc_mult", 1))
    return Arch(name=name, family="deepseek_v4", hidden=_int(d, "hidden_size"), layers=layers,
                vocab=_int(d, "vocab_size"), heads=heads, kv_heads=1, head_dim=hd, v_head_dim=hd,
                ffn=_int(d, "moe_intermediate_size"),
                dense_layers=0, experts=_int(d, "n_routed_experts"), topk=_int(d, "num_experts_per_tok"),
                expert_ffn=_int(d, "moe_intermediate_size"),
                shared_ffn=_int(d, "moe_intermediate_size") * _int(d, "n_shared_experts", 1), compressed=comp)


def _hybrid_window_moe(d: dict, name: str, family: str, full: list, **kw) -> Arch:
    """A top-k MoE whose layers attend either all keys or a sliding window (`full`: a bool per layer)."""
    layers = _int(d, "num_hidden_layers", len(full))
    if len(full) != layers:
        raise InputError(f"{name or 'config'}: {family} needs one attention kind per layer ({layers}), got {len(full)}")
    sliding = layers - sum(full)
    return Arch(name=name, family=family, hidden=_int(d, "hidden_size"), layers=layers, vocab=_int(d, "vocab_size"),
                heads=_int(d, "num_attention_heads"), sliding_layers=sliding,
                window=_int(d, "sliding_window") if sliding else 0, experts=_int(d, "n_routed_experts",
                                                                                  d.get("num_experts")),
                topk=_int(d, "num_experts_per_tok"), expert_ffn=_int(d, "moe_intermediate_size"), **kw)


def _mimo_v2(d: dict, name: str) -> Arch:
    """MiMo-V2-Flash: full-attention layers (`hybrid_layer_pattern` 0) among sliding-window ones (1), each
    kind with its own KV heads; 192-wide keys, 128-wide values; dense first layers (`moe_layer_freq` 0)."""
    pattern, freq = list(d.get("hybrid_layer_pattern") or []), list(d.get("moe_layer_freq") or [])
    dense = sum(not f for f in freq)
    return _hybrid_window_moe(d, name, "mimo_v2_flash", [not p for p in pattern],
                              kv_heads=_int(d, "swa_num_key_value_heads", d.get("num_key_value_heads")),
                              head_dim=_int(d, "swa_head_dim", d.get("head_dim")),
                              v_head_dim=_int(d, "swa_v_head_dim", d.get("v_head_dim")),
                              full_kv_heads=_int(d, "num_key_value_heads"), ffn=_int(d, "intermediate_size"),
                              dense_layers=dense, shared_ffn=_int(d, "moe_intermediate_size") * int(
                                  d.get("n_shared_experts") or 0))


def _step3p7(d: dict, name: str) -> Arch:
    """Step-3.7-Flash: full and sliding-window layers (`layer_types`), dense first layers, a shared expert."""
    types = list(d.get("layer_types") or [])
    if set(types) - {"full_attention", "sliding_attention"}:
        raise InputError(f"{name or 'config'}: step3p7 layer types must be full_attention or sliding_attention")
    hd = _int(d, "head_dim")
    return _hybrid_window_moe(d, name, "step3p7", [t == "full_attention" for t in types],
                              kv_heads=_int(d, "num_key_value_heads"), head_dim=hd, v_head_dim=hd,
                              ffn=_int(d, "intermediate_size"), dense_layers=_int(d, "first_k_dense_replace", 0),
                              shared_ffn=_int(d, "share_expert_dim", 0) * int(d.get("n_shared_experts") or 0))


def arch_from_dict(raw: dict, name: str = "") -> Arch:
    """An `Arch` from a parsed HF config; InputError for families serving cannot model. Its max_positions is what
    vLLM's max_model_len defaults to, whatever the family (`engine_max_positions`)."""
    d = _text(raw)
    positions = config_positions(d, name or "config", "max_position_embeddings")
    mtp = any(isinstance(d.get(k), int) and not isinstance(d.get(k), bool) and d[k] > 0 for k in MTP_KEYS)
    return replace(_family_arch(d, name), max_positions=engine_max_positions(d, positions), mtp=mtp)


#: config fields counting a checkpoint's multi-token-prediction layers (DeepSeek-V3/GLM-5, Qwen3.5, MiniMax-M2)
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")


#: rope scalings whose config already states the extended length in max_position_embeddings
_STATED_LENGTH_ROPE = ("default", "llama3", "longrope", "su", "mrope")


def engine_max_positions(d: dict, positions: int) -> int:
    """The longest request an engine admits by default (vLLM's max_model_len): the config's positions, stretched by
    a rope scaling that does not state its extended length (yarn: its original length x factor; linear and
    dynamic: the positions x factor)."""
    rope = d.get("rope_scaling") or d.get("rope_parameters")
    if not positions or not isinstance(rope, dict):
        return positions
    kind = str(rope.get("rope_type", rope.get("type", "default")))
    factor = rope.get("factor")
    if kind in _STATED_LENGTH_ROPE or not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor < 1:
        return positions
    base = rope.get("original_max_position_embeddings") if kind == "yarn" else positions
    base = base if isinstance(base, int) and not isinstance(base, bool) and base > 0 else positions
    return max(positions, int(base * factor))


def _family_arch(d: dict, name: str) -> Arch:
    """The layers of the language-model config `d`, by its family."""
    mt = str(d.get("model_type", "")).lower().replace("-", "_")
    if mt in READ_AS:  # the fields its type implies (Qwen3-Next: output-gated attention)
        d = {**READ_AS[mt][1], **d}
    if mt == "nemotron_h":
        return _nemotron_h(d, name)
    if mt == "nemotron_nas":
        return _nemotron_nas(d, name)
    if mt in ("gemma4", "gemma4_text"):
        return _gemma4(d, name)
    if mt == "mimo_v2_flash":
        return _mimo_v2(d, name)
    if mt == "step3p7":
        return _step3p7(d, name)
    if mt in ("deepseek_v4", "deepseek_ref") or "DeepseekV4ForCausalLM" in (d.get("architectures") or []):
        return _deepseek_v4(d, name)
    max_keys, block_sparse = 0, None
    if mt == "minimax_m3":
        sparse = d.get("sparse_attention_config") or {}
        if isinstance(sparse, dict) and sparse.get("use_sparse_attention"):
            max_keys = (_int(sparse, "sparse_topk_blocks") + _int(sparse, "sparse_local_block", 1)) \
                * _int(sparse, "sparse_block_size")
            layers, freq = _int(d, "num_hidden_layers"), sparse.get("sparse_attention_freq")
            n_sparse = sum(1 for f in freq if f) if isinstance(freq, list) else layers
            block_sparse = BlockSparse(dense_layers=layers - n_sparse, sparse_layers=n_sparse,
                                       index_heads=_int(sparse, "sparse_num_index_heads", 1),
                                       index_dim=_int(sparse, "sparse_index_dim", 128), attended=max_keys)
        freq = d.get("moe_layer_freq")
        dense = [i for i, f in enumerate(freq) if not f] if isinstance(freq, list) \
            else list(range(_int(d, "first_k_dense_replace", 0)))
        d = {**d, "mlp_only_layers": dense,
             "moe_intermediate_size": d.get("moe_intermediate_size") or d.get("intermediate_size"),
             "intermediate_size": d.get("dense_intermediate_size") or d.get("intermediate_size"),
             "shared_expert_intermediate_size": (d.get("shared_intermediate_size") or 0) * int(d.get("n_shared_experts") or 0)}
    kda = []
    if mt == "kimi_linear":  # Kimi-K3: DeepSeek-V3's MLA and MoE under other field names, most layers KDA
        lin = d.get("linear_attn_config") or {}
        kda = list(lin.get("kda_layers") or []) if isinstance(lin, dict) else []
        d = {**d, "n_routed_experts": d.get("num_experts"), "num_experts_per_tok": d.get("num_experts_per_token"),
             "n_shared_experts": d.get("num_shared_experts"), "n_group": 1, "topk_group": 1,
             "linear_num_key_heads": lin.get("num_heads"), "linear_num_value_heads": lin.get("num_heads"),
             "linear_key_head_dim": lin.get("head_dim"), "linear_value_head_dim": lin.get("head_dim")}
    if mt in MLA_ALIASES or mt == "kimi_linear":
        d = {**DEEPSEEK_DEFAULTS, **{k: v for k, v in d.items() if v is not None}, "model_type": "deepseek_v3"}
        if mt in ("glm_moe_dsa", "deepseek_v32"):  # groups do not constrain routing; `head_dim` is the indexer's
            d = {**d, "n_group": 1, "topk_group": 1, "head_dim": None}
    elif mt in DENSE_ALIASES:
        d = {**d, "model_type": DENSE_ALIASES[mt]}
    elif mt in LLAMA4:
        d = {**d, "model_type": "qwen3_moe", "num_experts": d.get("num_local_experts"),
             "moe_intermediate_size": d.get("intermediate_size"),
             "intermediate_size": d.get("intermediate_size_mlp") or d.get("intermediate_size"),
             "decoder_sparse_step": d.get("interleave_moe_layer_step") or 1,
             "shared_expert_intermediate_size": d.get("intermediate_size")}
    elif mt in GQA_MOE_ALIASES:
        d = {**d, "model_type": "qwen3_moe", "num_experts": d.get("num_experts", d.get("num_local_experts")),
             "moe_intermediate_size": d.get("moe_intermediate_size", d.get("intermediate_size")),
             "intermediate_size": d.get("intermediate_size") or d.get("moe_intermediate_size")}
    cfg = config_from_dict({k: v for k, v in d.items() if v is not None}, source=name or "config")
    if cfg.decoder_layers or cfg.family not in LLAMA_LIKE:
        raise InputError(f"{name or 'config'}: serving models Llama-style decoder LLMs (dense, MoE, MLA and their "
                         f"kin); model_type {mt!r} is not one")
    moe = cfg.family in MOE_LLAMA
    kw = dict(name=name, family=mt, hidden=cfg.hidden, layers=cfg.layers, vocab=cfg.vocab, heads=cfg.heads,
              kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, v_head_dim=cfg.head_dim, ffn=cfg.ffn,
              dense_layers=cfg.layers - cfg.sparse_layers if moe else cfg.layers)
    if moe:
        shared = cfg.shared_ffn or int(d.get("shared_expert_intermediate_size") or 0) * (mt != "qwen3_moe")
        kw.update(experts=cfg.num_experts, topk=cfg.experts_per_token, expert_ffn=cfg.expert_ffn, shared_ffn=shared)
        groups, picked = int(d.get("n_group") or 1), int(d.get("topk_group") or 1)
        if 1 <= picked < groups and cfg.num_experts % groups == 0:
            kw.update(expert_groups=groups, topk_groups=picked)
    if cfg.family == "deepseek_v3":
        kw.update(mla=True, q_lora_rank=int(d.get("q_lora_rank") or 0), kv_lora_rank=_int(d, "kv_lora_rank"),
                  rope_dim=_int(d, "qk_rope_head_dim"), v_head_dim=_int(d, "v_head_dim"), kv_heads=cfg.heads)
        if d.get("index_topk"):
            kw.update(max_keys=_int(d, "index_topk"), index_heads=_int(d, "index_n_heads", 0),
                      index_dim=_int(d, "index_head_dim", 0))
            if bool(kw["index_heads"]) != bool(kw["index_dim"]):
                raise InputError(f"{name or 'config'}: a DSA indexer needs both index_n_heads and index_head_dim")
    if max_keys:
        kw.update(max_keys=max_keys, block_sparse=block_sparse)
    types = list(d.get("layer_types") or [])
    if not types and mt.startswith(("qwen3_next", "qwen3_5")):  # none listed: every `full_attention_interval`-th full
        step = _int(d, "full_attention_interval", 4)
        types = ["full_attention" if (i + 1) % step == 0 else "linear_attention" for i in range(cfg.layers)]
    if types:
        kw["linear_layers"] = sum(t == "linear_attention" for t in types)
    if kda:
        kw["linear_layers"] = len(kda)
        kw["moe_latent"] = int(d.get("routed_expert_hidden_size") or 0)
    if kw.get("linear_layers"):
        kw.update(lin_k_heads=_int(d, "linear_num_key_heads", cfg.num_kv_heads),
                  lin_v_heads=_int(d, "linear_num_value_heads", cfg.heads),
                  lin_k_dim=_int(d, "linear_key_head_dim", 128), lin_v_dim=_int(d, "linear_value_head_dim", 128))
    kw["q_gate"] = bool(d.get("attn_output_gate", False))
    if cfg.sliding_window:
        kw.update(sliding_layers=sum(t == "sliding_attention" for t in cfg.layer_types), window=cfg.sliding_window)
    return Arch(**kw)
