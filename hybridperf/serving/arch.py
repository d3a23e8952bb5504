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
    qwen3_next             Qwen3.5-MoE's layers (`graphs.aliases.READ_AS`)
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

from dataclasses import dataclass, replace

from hybridperf.errors import InputError
from hybridperf.graphs.aliases import READ_AS
from hybridperf.graphs.config import DEEPSEEK_DEFAULTS, LLAMA_LIKE, MOE_LLAMA, config_from_dict, config_positions
from hybridperf.graphs.families.qwen3_5 import default_layer_types
from hybridperf.serving import arch_families
from hybridperf.serving.arch_families import field_int
from hybridperf.serving.block_sparse import BlockSparse
from hybridperf.serving.compressed import INDEX_SCALE_BYTES, CompressedAttention

#: families read as DeepSeek-V3 (multi-head latent attention + MoE)
MLA_ALIASES = ("kimi_k2", "kimi_k25", "glm_moe_dsa", "deepseek_v32")
#: families read as a grouped-query-attention MoE
GQA_MOE_ALIASES = ("minimax_m2", "minimax_m3", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_vl_moe_text", "qwen3_next")
#: families read as another's dense layers
DENSE_ALIASES = {"qwen3_vl_text": "qwen3", "qwen3_5": "qwen3", "qwen3_5_text": "qwen3", "mimo": "qwen2"}
#: families read as a GQA MoE with a shared expert interleaved with dense layers
LLAMA4 = ("llama4", "llama4_text")
#: families read by their own fields (`serving.arch_families`)
OWN_FIELDS = {"nemotron_h": arch_families.nemotron_h, "nemotron_nas": arch_families.nemotron_nas,
              "gemma4": arch_families.gemma4, "gemma4_text": arch_families.gemma4,
              "mimo_v2_flash": arch_families.mimo_v2, "step3p7": arch_families.step3p7,
              "deepseek_v4": arch_families.deepseek_v4, "deepseek_ref": arch_families.deepseek_v4}


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
    if mt in OWN_FIELDS:
        return Arch(**OWN_FIELDS[mt](d, name))
    if "DeepseekV4ForCausalLM" in (d.get("architectures") or []):
        return Arch(**arch_families.deepseek_v4(d, name))
    max_keys, block_sparse = 0, None
    if mt == "minimax_m3":
        sparse = d.get("sparse_attention_config") or {}
        if isinstance(sparse, dict) and sparse.get("use_sparse_attention"):
            max_keys = (field_int(sparse, "sparse_topk_blocks") + field_int(sparse, "sparse_local_block", 1)) \
                * field_int(sparse, "sparse_block_size")
            layers, freq = field_int(d, "num_hidden_layers"), sparse.get("sparse_attention_freq")
            n_sparse = sum(1 for f in freq if f) if isinstance(freq, list) else layers
            block_sparse = BlockSparse(dense_layers=layers - n_sparse, sparse_layers=n_sparse,
                                       index_heads=field_int(sparse, "sparse_num_index_heads", 1),
                                       index_dim=field_int(sparse, "sparse_index_dim", 128), attended=max_keys)
        freq = d.get("moe_layer_freq")
        dense = [i for i, f in enumerate(freq) if not f] if isinstance(freq, list) \
            else list(range(field_int(d, "first_k_dense_replace", 0)))
        d = {**d, "mlp_only_layers": dense,
             "moe_intermediate_size": d.get("moe_intermediate_size") or d.get("intermediate_size"),
             "intermediate_size": d.get("dense_intermediate_size") or d.get("intermediate_size"),
             "shared_expert_intermediate_size": (d.get("shared_intermediate_size") or 0)
             * int(d.get("n_shared_experts") or 0)}
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
        kw.update(mla=True, q_lora_rank=int(d.get("q_lora_rank") or 0), kv_lora_rank=field_int(d, "kv_lora_rank"),
                  rope_dim=field_int(d, "qk_rope_head_dim"), v_head_dim=field_int(d, "v_head_dim"), kv_heads=cfg.heads)
        if d.get("index_topk"):
            kw.update(max_keys=field_int(d, "index_topk"), index_heads=field_int(d, "index_n_heads", 0),
                      index_dim=field_int(d, "index_head_dim", 0))
            if bool(kw["index_heads"]) != bool(kw["index_dim"]):
                raise InputError(f"{name or 'config'}: a DSA indexer needs both index_n_heads and index_head_dim")
    if max_keys:
        kw.update(max_keys=max_keys, block_sparse=block_sparse)
    types = list(d.get("layer_types") or [])
    if not types and mt.startswith(("qwen3_next", "qwen3_5")):
        types = default_layer_types(cfg.layers, field_int(d, "full_attention_interval", 4))
    if types:
        kw["linear_layers"] = sum(t == "linear_attention" for t in types)
    if kda:
        kw["linear_layers"] = len(kda)
        kw["moe_latent"] = int(d.get("routed_expert_hidden_size") or 0)
    if kw.get("linear_layers"):
        kw.update(lin_k_heads=field_int(d, "linear_num_key_heads", cfg.num_kv_heads),
                  lin_v_heads=field_int(d, "linear_num_value_heads", cfg.heads),
                  lin_k_dim=field_int(d, "linear_key_head_dim", 128),
                  lin_v_dim=field_int(d, "linear_value_head_dim", 128))
    kw["q_gate"] = bool(d.get("attn_output_gate", False))
    if cfg.sliding_window:
        kw.update(sliding_layers=sum(t == "sliding_attention" for t in cfg.layer_types), window=cfg.sliding_window)
    return Arch(**kw)
