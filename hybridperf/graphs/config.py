"""Hugging Face `config.json` -> `ModelConfig`, the few numbers the kernel enumerator needs. The `model_type`s read
here (plugin families, `graphs.families`, parse their own: Qwen3.5, Gemma 4, GLM-4.7-Flash, Llama 4):

    gpt2                 GPT2LMHeadModel (also the artifact's "GPT-3" xl/2.7B/6.7B/13B configs: GPT-2 style,
                         Conv1D projections = addmm, fused QKV, gelu_new as 8 eager kernels)
    gpt_neo              GPT-Neo style (separate q/k/v Linear without bias, no attention scaling)
    gpt_neox             GPT-NeoX / Pythia: fused QKV GEMM, RoPE on `rotary_pct` of each head, attention
                         and MLP in parallel from the same input (`use_parallel_residual`), untied head
    bert                 BERT as NeuSight traced it: inference = BertForSequenceClassification (pooler +
                         classifier), training = BertForPreTraining (pooler + MLM head + NSP head)
    roberta, xlm_roberta BERT's layers; position ids counted from the input ids (cumsum), at most
                         max_position_embeddings - 2 tokens; inference = *ForSequenceClassification,
                         training = *ForMaskedLM (MLM head, no pooler or NSP head)
    opt                  OPTForCausalLM (separate q/k/v Linear, pre-LN, ReLU; OPT-350m's narrow embeddings
                         with project_in/out and post-LN layers too)
    switch_transformers  Switch Transformer encoder-decoder with top-1 MoE every `*_sparse_step` layers
    t5                   T5ForConditionalGeneration: Switch's dense blocks only; `feed_forward_proj`
                         "relu" (T5 v1.0) or "gated-gelu" (v1.1, Flan-T5: wi_0, wi_1 and a gate multiply)
    llama, mistral,      LlamaForCausalLM-style decoders: RMSNorm, rotary embeddings, grouped-query
    qwen2, qwen3,        attention (`num_key_value_heads`), gated SiLU MLP, untied LM head by default;
    gemma, phi3          qwen2 has biases on q/k/v, qwen3 an RMSNorm over each head of q and k; gemma
                         scales its embeddings by sqrt(hidden), multiplies its norms by (1 + weight) in
                         fp32, gates with GELU and ties its LM head; phi3 fuses q/k/v into one GEMM and
                         gate/up into another, and may rotate only part of each head
                         (`partial_rotary_factor`). Mistral and Phi-3 slide every layer's window when
                         the config sets `sliding_window` (transformers' mask and cache then do).
    gemma2, gemma3_text  Gemma's layer with "sandwich" norms (a further RMSNorm on the attention output and
                         on the MLP output, before each residual add) and sliding-window layers
                         (`layer_types`; by default every other layer in gemma2, five of every six in
                         gemma3): eager attention still computes every score, but a decode step's sliding
                         layers attend to their window only. gemma2 soft-caps the attention scores and the
                         logits (`attn_logit_softcapping`, `final_logit_softcapping`: x / c, tanh, * c);
                         gemma3 normalises each head of q and k and builds a rotary table per layer type.
                         A multimodal `gemma3` config is read as its language model (`text_config`, with
                         Gemma3TextConfig's defaults); the vision tower is not modelled.
    granite              Llama's layer with IBM Granite's scalings, a kernel each: the embeddings times
                         `embedding_multiplier`, each sublayer's output times `residual_multiplier`, the logits
                         divided by `logits_scaling` (`attention_multiplier` replaces the score scale).
    olmo2, olmo3         OLMo 2: Llama's attention and MLP with the norms moved to their outputs (an RMSNorm on
                         each sublayer's output before its residual add, none on its input) and an RMSNorm over
                         the whole q and k projections; its norms multiply the weight in fp32, as GPT-OSS's.
                         OLMo 3 adds sliding-window layers (`layer_types`; by default three of every four).
                         Under --tp the q/k norms' reduction across ranks is not priced (two per layer, tiny).
    mixtral, qwen2_moe,  Llama's attention (qwen2_moe: Qwen2's q/k/v biases, qwen3_moe: Qwen3's q/k norms)
    qwen3_moe            with a top-k mixture of experts in place of the MLP: a softmax router over
                         `num_local_experts` / `num_experts` experts, `num_experts_per_tok` experts per
                         token, each a gated MLP of `intermediate_size` (mixtral) or `moe_intermediate_size`
                         (qwen); qwen2_moe adds a sigmoid-gated shared expert of `shared_expert_intermediate_size`.
                         Layers in `mlp_only_layers`, or off `decoder_sparse_step`, keep a dense MLP.
    gpt_oss              GPT-OSS: Mixtral-style top-k experts (`num_local_experts`, `intermediate_size` wide)
                         with biases and a clamped SwiGLU, a biased router and a softmax over the k chosen logits,
                         biased attention with a sink logit per head, RoPE on contiguous halves, sliding-window
                         (`sliding_window`, 128) and full layers alternating.
    minimax_m2           MiniMax-M2: OLMoE's q/k norms, RoPE on `rotary_dim` of each head, Mixtral's expert fields,
                         a sigmoid router with a score-correction bias (the weights normalised, in fp32).
    deepseek_v3          DeepSeek-V3 (and Kimi-K2, Moonlight): multi-head latent attention (low-rank q through
                         `q_lora_rank`, keys and values expanded from a `kv_lora_rank` latent, RoPE on
                         `qk_rope_head_dim` of each head, interleaved by default) and a top-k MoE of
                         `n_routed_experts` chosen by a sigmoid router limited to `topk_group` of `n_group`
                         expert groups, plus `n_shared_experts` shared experts; the first `first_k_dense_replace`
                         layers keep a dense MLP. A decode step caches the latent and re-expands it every step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hybridperf.errors import InputError
from hybridperf.graphs.aliases import read_as
from hybridperf.jsonio import read_json_object

#: llama-likes whose MLP is a top-k mixture of experts (HF's grouped experts, `graphs.layers.moe.moe_block`)
MOE_LLAMA = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "gpt_oss", "olmoe", "minimax_m2")
#: MoE families whose every layer is sparse, each expert `intermediate_size` wide
ALL_SPARSE = ("mixtral", "gpt_oss", "olmoe", "minimax_m2")
#: Gemma's llama-likes: (1 + weight) RMSNorms in fp32, sqrt(hidden)-scaled embeddings, a tied LM head
GEMMA = ("gemma", "gemma2", "gemma3_text")
#: Gemma 2 and 3: sandwich norms and sliding-window layers (`ModelConfig.layer_types`)
SLIDING_GEMMA = ("gemma2", "gemma3_text")
#: families whose every layer slides its window when the config sets `sliding_window` (no `layer_types`)
EVERY_LAYER_SLIDING = ("mistral", "ministral3", "phi3")
#: families whose `layer_types` mix sliding-window and full attention
SLIDING_LAYERS = (*SLIDING_GEMMA, "gpt_oss", "olmo3", "gemma4_text")
#: HF's `sliding_window` default when a config omits the key (none for the families not listed)
SLIDING_WINDOW_DEFAULT = {"gemma2": 4096, "gemma3_text": 4096, "gpt_oss": 128, "mistral": 4096, "olmo3": 4096}
LLAMA_LIKE = ("llama", "mistral", "ministral3", "qwen2", "qwen3", "smollm3", *GEMMA, "phi3", "granite", "olmo2",
              "olmo3", *MOE_LLAMA)
#: OLMo 2 and 3: norms on the sublayer outputs and over whole q/k projections; rotary tables kept fp32 in 16-bit models
OLMO = ("olmo2", "olmo3")
#: T5-style encoder-decoders (T5 is Switch without the expert layers)
ENCODER_DECODER = ("switch_transformers", "t5")
#: BERT's encoder with RoBERTa's position ids and heads
ROBERTA_LIKE = ("roberta", "xlm_roberta")
SUPPORTED_MODEL_TYPES = ("gpt2", "gpt_neo", "gpt_neox", "bert", *ROBERTA_LIKE, "opt", *ENCODER_DECODER, *LLAMA_LIKE)
#: llama-likes whose LM head reuses the embedding table unless the config says otherwise
TIED_BY_DEFAULT = (*GEMMA, "smollm3")
#: HF's Gemma3TextConfig defaults (transformers 5.23), which a gemma3 text config (or a multimodal one's) leans on
GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096,
                        "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131_072,
                        "query_pre_attn_scalar": 256}
#: HF's attention-layer types (`layer_types`)
LAYER_TYPES = ("full_attention", "sliding_attention")
#: model_type -> parse(dict, source) -> ModelConfig of the families that parse their own configs (filled by
#: `graphs.family.register` as the families package loads, which importing any `hybridperf.graphs` module does)
PLUGIN_PARSERS: dict = {}


@dataclass(frozen=True)
class ModelConfig:
    """Architecture numbers of one transformer, normalised across HF families."""

    family: str  # one of SUPPORTED_MODEL_TYPES
    hidden: int
    heads: int
    layers: int
    ffn: int
    vocab: int
    head_dim: int
    activation: str = "gelu"  # gelu | gelu_new | relu
    max_positions: int = 0
    # encoder-decoder / MoE (switch_transformers)
    decoder_layers: int = 0
    num_experts: int = 0
    expert_capacity: int = 0
    encoder_sparse_step: int = 0
    decoder_sparse_step: int = 0
    kv_heads: int = 0  # grouped-query attention (llama-like); 0 = as many as `heads`
    gated_ffn: bool = False  # T5's "gated-*" feed-forward: act(wi_0 x) * wi_1 x
    # top-k mixture of experts (MOE_LLAMA): experts per token, each expert's and the shared expert's width
    experts_per_token: int = 0
    expert_ffn: int = 0
    shared_ffn: int = 0
    name: str = ""
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def tied_embeddings(self) -> bool:
        """Whether the LM head reuses the embedding table (HF's default: yes, except llama-likes)."""
        default = self.family not in (*LLAMA_LIKE, "gpt_neox") or self.family in TIED_BY_DEFAULT
        return bool(self.raw.get("tie_word_embeddings", default))

    @property
    def num_kv_heads(self) -> int:
        """Key/value heads (fewer than `heads` under grouped-query attention)."""
        return self.kv_heads or self.heads

    @property
    def attn_dim(self) -> int:
        """Width of the attention projections (heads x head_dim; equals hidden except for T5-style models)."""
        return self.heads * self.head_dim

    @property
    def total_layers(self) -> int:
        return self.layers + self.decoder_layers

    @property
    def sparse_layers(self) -> int:
        """Decoder layers of a top-k MoE (MOE_LLAMA) whose MLP is the expert block; the rest are dense:
        HF's Qwen-MoE rule, layer i is sparse unless in `mlp_only_layers` or (i + 1) % `decoder_sparse_step` != 0;
        every Mixtral layer is sparse (MixtralConfig has neither key)."""
        if self.family not in MOE_LLAMA:
            return 0
        if self.family in ALL_SPARSE:
            return self.layers
        if self.family == "deepseek_v3":  # the first `first_k_dense_replace` layers are dense
            dense = self.raw.get("first_k_dense_replace", DEEPSEEK_DEFAULTS["first_k_dense_replace"])
            return max(self.layers - int(dense), 0)
        step = int(self.raw.get("decoder_sparse_step") or 1)
        dense = set(self.raw.get("mlp_only_layers") or [])
        return sum(1 for i in range(self.layers) if i not in dense and (i + 1) % step == 0)

    @property
    def every_layer_slides(self) -> bool:
        """Whether every layer attends to a sliding window (Mistral, Phi-3 with `sliding_window` set)."""
        return self.family in EVERY_LAYER_SLIDING and self.sliding_window > 0

    @property
    def sliding_window(self) -> int:
        """Keys a sliding-window layer attends to (0: none): Mistral's and Phi-3's `sliding_window` (every layer),
        or Gemma 2 and 3's and GPT-OSS's (their sliding layers); HF's default (`SLIDING_WINDOW_DEFAULT`) when the
        key is absent, none when it is null."""
        if self.family in (*EVERY_LAYER_SLIDING, *SLIDING_LAYERS):
            return int(self.raw.get("sliding_window", SLIDING_WINDOW_DEFAULT.get(self.family)) or 0)
        return 0

    @property
    def layer_types(self) -> tuple:
        """Each decoder layer's attention, "full_attention" or "sliding_attention" (SLIDING_LAYERS; every other
        family: all full): the config's `layer_types`, or HF's default, gemma2 and gpt_oss sliding on even layers
        and gemma3 and olmo3 on all but every `sliding_window_pattern`-th (6) and every 4th. No sliding layer
        without a `sliding_window`."""
        if self.family not in SLIDING_LAYERS or not self.sliding_window:
            return ("full_attention",) * self.layers
        given = self.raw.get("layer_types")
        if given:
            return tuple(given)
        step = {"gemma3_text": int(self.raw.get("sliding_window_pattern") or 6), "olmo3": 4}.get(self.family, 2)
        return tuple("sliding_attention" if (i + 1) % step else "full_attention" for i in range(self.layers))

    @property
    def token_ffn(self) -> float:
        """MLP width one token passes through, averaged over the layers: `ffn`, or in a top-k MoE its
        `experts_per_token` experts plus the shared expert in the sparse layers (what it saves for the backward
        grows with it; `ModelGraph.memory`)."""
        if self.family not in MOE_LLAMA:
            return float(self.ffn)
        sparse = self.sparse_layers
        moe = self.experts_per_token * self.expert_ffn + self.shared_ffn
        return (sparse * moe + (self.layers - sparse) * self.ffn) / self.layers


def _get(d: dict, *keys, default=None):
    return next((d[k] for k in keys if d.get(k) is not None), default)


def _pos_int(value, key: str, source: str) -> int:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer()
    if not ok or int(value) < 1:
        raise InputError(f"{source}: config field {key!r} must be a positive integer, got {value!r}")
    return int(value)


#: optional integer fields read with a default: a string or a fraction there is refused in one line
_OPTIONAL_COUNTS = ("max_position_embeddings", "n_positions", "pad_token_id", "sliding_window", "decoder_sparse_step",
                    "sliding_window_pattern", "first_k_dense_replace", "n_inner", "num_key_value_heads", "head_dim")


def _count(value, key: str, source: str) -> int:
    """A non-negative integer config field, or InputError naming it."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer()
    if not ok or int(value) < 0:
        raise InputError(f"{source}: config field {key!r} must be a non-negative integer, got {value!r}")
    return int(value)


def config_positions(d: dict, source: str, *keys: str, default: int = 0) -> int:
    """The positions the first of `keys` the config gives states (`default` where it gives none): a positive
    integer, since a table of 0 positions is a broken config, not an unlimited one."""
    key = next((k for k in keys if d.get(k) is not None), None)
    return default if key is None else _pos_int(d[key], key, source)


def check_positions(positions: int, max_positions: int, what: str) -> None:
    """InputError when a sequence needs more positions than the model's table holds (`max_positions`; 0: the
    config states no limit): HF models cannot index past it, and serving engines refuse such a request."""
    if max_positions and positions > max_positions:
        raise InputError(f"{what} = {positions} exceeds the model's maximum of {max_positions} positions")


#: HF's defaults of the MoE families (MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig in transformers 5.23)
_MOE_DEFAULTS = {"mixtral": (8, 2), "qwen2_moe": (60, 4), "qwen3_moe": (128, 8), "deepseek_v3": (256, 8),
                 "gpt_oss": (128, 4), "olmoe": (64, 8), "minimax_m2": (256, 8)}
#: DeepseekV3Config's attention (multi-head latent attention) and routing defaults (transformers 5.23)
DEEPSEEK_DEFAULTS = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                     "v_head_dim": 128, "n_group": 8, "topk_group": 4, "n_shared_experts": 1,
                     "first_k_dense_replace": 3, "moe_intermediate_size": 2048}


def _moe_fields(d: dict, mt: str, ffn: int, source: str) -> dict:
    """num_experts, experts_per_token, expert_ffn and shared_ffn of a MOE_LLAMA config."""
    n_default, k_default = _MOE_DEFAULTS[mt]
    experts = _pos_int(_get(d, "num_local_experts", "num_experts", "n_routed_experts", default=n_default),
                       "num_experts", source)
    k = _pos_int(_get(d, "num_experts_per_tok", default=k_default), "num_experts_per_tok", source)
    if k > experts:
        raise InputError(f"{source}: num_experts_per_tok = {k} exceeds the {experts} experts")
    if mt in ALL_SPARSE:
        return {"num_experts": experts, "experts_per_token": k, "expert_ffn": ffn}
    if mt == "deepseek_v3":
        return _deepseek_fields(d, experts, k, source)
    expert_ffn = _pos_int(_get(d, "moe_intermediate_size", default=1408 if mt == "qwen2_moe" else 768),
                          "moe_intermediate_size", source)
    shared = 0
    if mt == "qwen2_moe":
        shared = _pos_int(_get(d, "shared_expert_intermediate_size", default=5632), "shared_expert_intermediate_size",
                          source)
    step = d.get("decoder_sparse_step", 1)
    if step is not None:
        _pos_int(step, "decoder_sparse_step", source)
    dense = d.get("mlp_only_layers") or []
    if not isinstance(dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense):
        raise InputError(f"{source}: config field 'mlp_only_layers' must be a list of layer indices, got {dense!r}")
    return {"num_experts": experts, "experts_per_token": k, "expert_ffn": expert_ffn, "shared_ffn": shared}


def _deepseek_fields(d: dict, experts: int, k: int, source: str) -> dict:
    """Check DeepSeek-V3's latent-attention and routing fields; its MoE fields (`_moe_fields`)."""
    v = {key: d.get(key, default) for key, default in DEEPSEEK_DEFAULTS.items()}
    for key, val in v.items():
        # no low-rank query (one q_proj, as in Moonlight), or no dense layer
        if (key, val) not in (("q_lora_rank", None), ("first_k_dense_replace", 0)):
            _pos_int(val, key, source)
    if experts % v["n_group"] or v["topk_group"] > v["n_group"] or k > experts // v["n_group"] * v["topk_group"]:
        raise InputError(f"{source}: {experts} experts in n_group = {v['n_group']} groups, topk_group = "
                         f"{v['topk_group']}, cannot route {k} experts per token")
    return {"num_experts": experts, "experts_per_token": k, "expert_ffn": int(v["moe_intermediate_size"]),
            "shared_ffn": int(v["n_shared_experts"]) * int(v["moe_intermediate_size"])}


def _sliding_fields(d: dict, layers: int, source: str) -> None:
    """Check what Gemma 2 and 3 and GPT-OSS add: `layer_types` (one per layer), a positive `sliding_window` and
    (Gemma 2) soft-caps."""
    given = d.get("layer_types")
    if given is not None:
        if not isinstance(given, list) or len(given) != layers or any(t not in LAYER_TYPES for t in given):
            raise InputError(f"{source}: config field 'layer_types' must list {layers} entries, each one of "
                             f"{', '.join(LAYER_TYPES)}")
    for key in ("sliding_window", "sliding_window_pattern"):
        if d.get(key) is not None:
            _pos_int(d[key], key, source)
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        v = d.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
            raise InputError(f"{source}: config field {key!r} must be a positive number or null, got {v!r}")


def config_from_dict(d: dict, source: str = "config") -> ModelConfig:
    """Build a `ModelConfig` from a parsed HF config dict; InputError on unsupported or incomplete ones."""
    if not isinstance(d, dict):
        raise InputError(f"{source}: expected a JSON object, got {type(d).__name__}")
    mt = str(d.get("model_type", "")).strip().lower().replace("-", "_")
    if not mt:
        raise InputError(f"{source}: no 'model_type' in the config")
    mt, d = read_as(mt, d, source)
    if mt == "gemma3_text":
        d = {**GEMMA3_TEXT_DEFAULTS, **d}
    if mt in PLUGIN_PARSERS:
        return PLUGIN_PARSERS[mt](d, source)
    if mt not in SUPPORTED_MODEL_TYPES:
        raise InputError(f"{source}: unsupported model_type {mt!r}; supported: "
                         f"{', '.join((*SUPPORTED_MODEL_TYPES, *PLUGIN_PARSERS))}")
    for key in _OPTIONAL_COUNTS:
        if d.get(key) is not None:
            _count(d[key], key, source)

    def need(key_names, what):
        v = _get(d, *key_names)
        if v is None:
            raise InputError(f"{source}: missing {what} (one of {', '.join(key_names)})")
        return _pos_int(v, key_names[0], source)

    name = Path(source).stem if source != "config" else ""
    vocab = need(("vocab_size",), "vocab size")
    if mt in ("gpt2", "gpt_neo"):
        hidden = need(("n_embd", "hidden_size"), "hidden size")
        heads = need(("n_head", "num_heads", "num_attention_heads"), "head count")
        layers = need(("n_layer", "num_layers", "num_hidden_layers"), "layer count")
        inner = _get(d, "n_inner", "intermediate_size")
        ffn = _pos_int(inner, "n_inner", source) if inner else 4 * hidden
        act = str(_get(d, "activation_function", default="gelu_new"))
        maxpos = config_positions(d, source, "n_positions", "max_position_embeddings")
    elif mt in ("gpt_neox", "bert", *ROBERTA_LIKE):
        hidden = need(("hidden_size",), "hidden size")
        heads = need(("num_attention_heads",), "head count")
        layers = need(("num_hidden_layers",), "layer count")
        ffn = need(("intermediate_size",), "intermediate size")
        act = str(_get(d, "hidden_act", default="gelu"))
        maxpos = config_positions(d, source, "max_position_embeddings", default=2048 if mt == "gpt_neox" else 512)
        if mt in ROBERTA_LIKE:  # positions start after the padding index (514 rows hold 512 tokens)
            maxpos -= int(_get(d, "pad_token_id", default=1) or 0) + 1
            if maxpos < 1:
                raise InputError(f"{source}: max_position_embeddings leaves no position after the padding index")
    elif mt == "opt":
        hidden = need(("hidden_size",), "hidden size")
        heads = need(("num_attention_heads",), "head count")
        layers = need(("num_hidden_layers",), "layer count")
        ffn = need(("ffn_dim",), "ffn_dim")
        act = str(_get(d, "activation_function", default="relu"))
        maxpos = config_positions(d, source, "max_position_embeddings", default=2048)
        if _get(d, "word_embed_proj_dim") is not None:  # OPT-350m embeds narrower (graphs.families.opt.opt_layout)
            _pos_int(d["word_embed_proj_dim"], "word_embed_proj_dim", source)
    elif mt in LLAMA_LIKE:
        hidden = need(("hidden_size",), "hidden size")
        heads = need(("num_attention_heads",), "head count")
        layers = need(("num_hidden_layers",), "layer count")
        ffn = need(("intermediate_size",), "intermediate size")
        kv = _pos_int(_get(d, "num_key_value_heads", default=heads), "num_key_value_heads", source)
        if heads % kv:
            raise InputError(f"{source}: {heads} attention heads are not a multiple of {kv} key/value heads")
        head_dim = _pos_int(_get(d, "head_dim", default=hidden // heads), "head_dim", source)
        if mt == "deepseek_v3":  # a query/key head: its un-rotated and rotated parts
            head_dim = sum(_pos_int(d.get(key, DEEPSEEK_DEFAULTS[key]), key, source)
                           for key in ("qk_nope_head_dim", "qk_rope_head_dim"))
        moe = _moe_fields(d, mt, ffn, source) if mt in MOE_LLAMA else {}
        if mt in SLIDING_LAYERS:
            _sliding_fields(d, layers, source)
        act = _get(d, "hidden_activation", "hidden_act") if mt in SLIDING_GEMMA else _get(d, "hidden_act")
        return ModelConfig(family=mt, hidden=hidden, heads=heads, layers=layers, ffn=ffn, vocab=vocab,
                           head_dim=head_dim, activation=str(act or ("gelu_pytorch_tanh" if mt in GEMMA else "silu")),
                           max_positions=config_positions(d, source, "max_position_embeddings"),
                           kv_heads=kv, name=name, raw=d, **moe)
    else:  # switch_transformers, t5
        hidden = need(("d_model",), "d_model")
        heads = need(("num_heads",), "num_heads")
        layers = need(("num_layers",), "num_layers")
        ffn = need(("d_ff",), "d_ff")
        head_dim = need(("d_kv",), "d_kv")
        decoder_layers = _pos_int(_get(d, "num_decoder_layers", default=layers), "num_decoder_layers", source)
        if mt == "t5":  # HF T5Config: "gated-gelu" runs gelu_new (tanh approximation); no expert layers
            proj = str(_get(d, "feed_forward_proj", default="relu")).lower()
            act = proj.split("-")[-1]
            return ModelConfig(family=mt, hidden=hidden, heads=heads, layers=layers, ffn=ffn, vocab=vocab,
                               head_dim=head_dim, activation="gelu_new" if act == "gelu" else act,
                               decoder_layers=decoder_layers, gated_ffn=proj.startswith("gated-"), name=name, raw=d)
        return ModelConfig(
            family=mt, hidden=hidden, heads=heads, layers=layers, ffn=ffn, vocab=vocab, head_dim=head_dim,
            activation=str(_get(d, "dense_act_fn", "feed_forward_proj", default="relu")), decoder_layers=decoder_layers,
            num_experts=_pos_int(_get(d, "num_experts", default=8), "num_experts", source),
            expert_capacity=_pos_int(_get(d, "expert_capacity", default=64), "expert_capacity", source),
            encoder_sparse_step=int(_get(d, "encoder_sparse_step", default=2) or 0),
            decoder_sparse_step=int(_get(d, "decoder_sparse_step", default=2) or 0),
            name=name, raw=d,
        )
    if hidden % heads:
        raise InputError(f"{source}: hidden size {hidden} is not divisible by {heads} heads")
    return ModelConfig(family=mt, hidden=hidden, heads=heads, layers=layers, ffn=ffn, vocab=vocab,
                       head_dim=hidden // heads, activation=act, max_positions=maxpos, name=name, raw=d)


def load_config(config) -> ModelConfig:
    """A `ModelConfig` from a path to a HF config.json, a dict, or a `ModelConfig` (returned as is)."""
    if isinstance(config, ModelConfig):
        return config
    if isinstance(config, dict):
        return config_from_dict(config)
    if not isinstance(config, (str, Path)):
        raise InputError(f"config must be a path, a dict or a ModelConfig, got {type(config).__name__}")
    path = Path(config)
    if not path.is_file():
        raise InputError(f"config file not found: {path}")
    return config_from_dict(read_json_object(path), source=str(path))


def built_dtype(config) -> tuple[str, str]:
    """(model dtype, why) of a HF config (path or dict) as transformers 5's `from_config` builds it: the config's
    top-level `dtype` (or the older `torch_dtype`), which it also applies to a multimodal config's sub-configs,
    else PyTorch's default float32. InputError where that dtype is not one `build_graph` prices."""
    from hybridperf.devices.spec import dtype_key
    from hybridperf.errors import HybridperfError
    from hybridperf.graphs.primitives import MODEL_DTYPES

    raw = read_json_object(Path(config)) if isinstance(config, (str, Path)) else getattr(config, "raw", config)
    for key in ("dtype", "torch_dtype"):
        name = raw.get(key)
        try:
            dtype = dtype_key(name) if isinstance(name, str) else None
        except HybridperfError:  # "auto" or a name torch lacks: from_config would not build with it either
            dtype = None
        if dtype is None:
            continue
        if dtype not in MODEL_DTYPES:
            raise InputError(f"the config's {key} {name!r} is not a model dtype predict-model prices "
                             f"({', '.join(MODEL_DTYPES)}): pass --dtype")
        return dtype, f"the config's {key}"
    return "fp32", "PyTorch's default: the config names no dtype"


def model_dtype(config, dtype: str | None = None, amp: bool = False) -> tuple[str, str]:
    """(model dtype, why; "" when given) of a run: `dtype` (any common spelling), fp32 under `amp` (fp32 weights
    under autocast), else the dtype transformers builds the config in (`built_dtype`)."""
    from hybridperf.devices.spec import dtype_key

    if dtype is not None:
        return dtype_key(dtype), ""
    if amp:
        return "fp32", ""
    dtype, why = built_dtype(config)
    return dtype, f"{why}; --dtype to cast"


def kv_length(cfg: ModelConfig, seq: int, sliding: bool = False) -> int:
    """Keys each new token attends to after `seq` cached tokens: seq + 1, or at most the sliding window in
    Mistral's and Phi-3's layers and in Gemma 2 and 3's `sliding` layers (HF's sliding cache keeps window - 1
    tokens)."""
    window = cfg.sliding_window if cfg.every_layer_slides or sliding else 0
    return min(seq + 1, window) if window else seq + 1
