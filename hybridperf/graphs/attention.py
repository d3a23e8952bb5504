"""Attention implementations: one pluggable layer every model family uses, chosen by the request
(transformers' `attn_implementation`).

Every family builds its attention with eager kernels (`layers.attention_core.attention_core`, and
`decode.cached_attention` for a decode step), each call's kernels marked with its shape (`mark_call`). An
implementation rewrites those spans in the built blocks:

  eager  the marked kernels as they are: QK^T, scale, mask, softmax (fp32 upcasts), dropout, AV and the
         layout copies. NeuSight's labels (`--dtype fp32 --attn eager`).
  sdpa   transformers' `sdpa_attention_forward`, transformers 5.x with no padding mask: one fused
         `attention` kernel (`hybridperf.priors.attention.sdpa_ms`) in place of the span, and in training one
         `attention_bw` kernel plus the flash backward's two small ones (dO . O, and dQ's fp32 accumulator
         cast back). The mask is skipped (`is_causal`, or no mask for BERT-like encoders), so the causal-mask
         kernels before the layers go too; grouped-query attention passes `enable_gqa` (no repeat_kv copies),
         and the output lands in (batch, seq, heads, dim) layout (no merge copy: CPU TorchDispatchMode trace of
         transformers 5.24, Llama: 42 -> 34 kernels per layer, decode 42 -> 36). A causal LM's forward still
         concatenates its keys and values into the DynamicCache transformers builds (`cache_fill`).
         Backend (PyTorch's sdp_utils): `flash` in half precision without a mask (FlashAttention-2, or cuDNN
         attention where PyTorch prefers it: Hopper, Blackwell); `efficient`
         (memory-efficient) in fp32, with an explicit mask (a sliding window shorter than the sequence,
         T5's position bias: every tile computed, repeat_kv copies kept) or with a value width unlike the
         key's (DeepSeek's latent attention); `math` (fp32 grouped-query attention: efficient attention takes no
         `enable_gqa`) keeps the eager span. A decode step (one query row) is bound by its KV-cache read.
         Families transformers runs without SDPA (Gemma 2, GPT-OSS, Switch, GPT-Neo) fall back to eager, as
         transformers' default does.
         cuDNN plans: where PyTorch runs cuDNN attention first (compute capability 9.0 and 10.0: H100, H200,
         B200), cuDNN builds an execution plan per new attention shape on the host (`cudnn_plan_builds`).

Adding an implementation (flash_attention_2, paged decode) is one `AttentionImpl` entry in `IMPLEMENTATIONS`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from hybridperf.devices import DeviceSpec
from hybridperf.errors import InputError
from hybridperf.graphs.config import ModelConfig
from hybridperf.graphs.primitives import F32
from hybridperf.priors.attention import sdpa_ms

#: families transformers 5.x cannot run through SDPA (`attn_implementation="sdpa"` raises; the default picks eager)
NO_SDPA = ("gemma2", "gpt_oss", "switch_transformers", "gpt_neo")
#: families whose self-attention is bidirectional (no causal mask)
BIDIRECTIONAL = ("bert", "roberta", "xlm-roberta", "camembert")
#: families whose scores always take an explicit additive bias (T5's relative position bias)
BIAS_MASK = ("t5",)
#: setup kernels of a decode step that build the causal mask, which SDPA skips (Llama, transformers 5.24 trace)
DECODE_MASK_SETUP = 10
#: log half-width of a fused kernel's interval: checked only on one GPU (H100 SDPA), on others a prior alone
FUSED_LOG_HALF_WIDTH = float(np.log(1.4))
#: compute capabilities on which PyTorch (2.11, cuDNN >= 9.15.1) tries cuDNN attention before FlashAttention
#: (`check_prefer_cudnn_attention` in aten/src/ATen/native/transformers/cuda/sdp_utils.cpp: major 9 or 10 with
#: minor 0, so not B300's sm_103 nor sm_120)
CUDNN_FIRST = ("9.0", "10.0")
#: host time (ms) cuDNN takes to build one SDPA execution plan: the median over five decode shapes (batch 1-128,
#: 8-32 heads, head dim 128-256; each the median of 7 calls over a growing key length: 36.6-39.6 ms) on our H100's host
#: (`experiments/data/measured/h100/generate_decode/backends.csv`); CPU-bound, so another host's differs
CUDNN_PLAN_MS = 38.6
#: widest head dimension cuDNN's SDPA takes
CUDNN_MAX_HEAD_DIM = 256
#: a decode step's cuDNN plans: `build` (the process meets these key lengths for the first time: every step of a
#: first `generate()`), `cached` (an earlier pass over the same batch and key lengths built them)
CUDNN_PLAN_MODES = ("build", "cached")


def mark_call(kernels: list, **shape) -> list:
    """Mark the kernels of one eager attention call with its shape (B, S, S_kv, heads, kv_heads, hd, vd, train;
    a decode step's also `sliding`), so that an implementation can replace them."""
    call = dict(shape)
    return [{**k, "attn_call": call} for k in kernels]


def mark_window(kernels: list, sliding: bool) -> list:
    """Copies of `kernels` whose attention calls are marked as a sliding-window layer's or a full layer's
    (`explicit_mask`): a prefill's layers share one build until a window splits them."""
    calls: dict = {}  # one marked copy of each call, shared by its kernels as the original is
    return [{**k, "attn_call": calls.setdefault(id(k["attn_call"]), {**k["attn_call"], "sliding": sliding})}
            if k.get("attn_call") is not None else dict(k) for k in kernels]


@dataclass(frozen=True)
class AttentionImpl:
    """One attention implementation: how it rewrites a family's blocks."""

    name: str
    rewrite: Callable  # (blocks, cfg, dtype, mode) -> blocks
    doc: str


def fills_cache(cfg: ModelConfig, mode: str) -> bool:
    """Whether a pass fills transformers' DynamicCache (`cache_fill`): a causal LM's prefill or training forward
    (a decode step's cache has kernels of its own) unless its config turns `use_cache` off."""
    from hybridperf.graphs.family import family_of

    return mode != "decode" and family_of(cfg.family).causal_lm and bool(cfg.raw.get("use_cache", True))


def rewrite_calls(blocks, per_call) -> list:
    """`blocks` with each marked call's span of kernels replaced by `per_call(call, span)`."""
    from hybridperf.graphs.primitives import Block

    out = []
    for blk in blocks:
        ks, i = [], 0
        while i < len(blk.kernels):
            call = blk.kernels[i].get("attn_call")
            j = i + 1
            while call is not None and j < len(blk.kernels) and blk.kernels[j].get("attn_call") is call:
                j += 1
            ks += blk.kernels[i:j] if call is None else per_call(call, blk.kernels[i:j])
            i = j
        out.append(Block(blk.name, blk.count, ks, blk.kind))
    return out


def _eager(blocks, cfg, dtype, mode):
    """The marked spans as they are, after the cache fill of each grouped-query call (whose `repeat_kv` copies
    follow; in multi-head attention the k and v layout copies are the cache's concatenations)."""
    if not fills_cache(cfg, mode):
        return blocks
    return rewrite_calls(blocks, lambda call, span: (cache_fill(call) if call["kv_heads"] < call["heads"]
                                                     and not call.get("shared_kv") else [])
                         + span)


def backend(cfg: ModelConfig, dtype: str, call: dict, explicit_mask: bool) -> str:
    """PyTorch SDPA backend of one call (module docstring)."""
    gqa = call["kv_heads"] < call["heads"]
    if call["S"] == 1:
        return "decode"
    if dtype == "fp32" and gqa and not explicit_mask:
        return "math"
    if dtype == "fp32" or explicit_mask or call["vd"] != call["hd"]:
        return "efficient"
    return "flash"


def explicit_mask(cfg: ModelConfig, call: dict) -> bool:
    """Whether transformers hands SDPA a mask: T5's bias, or a sliding window no longer than the keys
    (`masking_utils`: a window of `w` keys is masked from `w` keys on, a decode step's full window included).
    A call marked `sliding=False` is a full-attention layer (Gemma 3's global layers in a decode step or a prefill
    past the window); one marked `static` reads a static cache, whose unwritten slots a mask hides."""
    if cfg.family in BIAS_MASK or call.get("static"):
        return True
    layer_slides = call.get("sliding", True)
    window = cfg.sliding_window if layer_slides and (cfg.every_layer_slides or "sliding_attention" in cfg.layer_types) \
        else 0
    return bool(window) and call["S_kv"] >= window


def attn_spec(backend_name: str, kv_heads: int, vd: int, causal: bool) -> str:
    return f"{backend_name};kvh={int(kv_heads)};vd={int(vd)};causal={int(causal)}"


def parse_spec(spec: str) -> dict:
    parts = spec.split(";")
    kv = dict(p.split("=") for p in parts[1:])
    return {"backend": parts[0], "kv_heads": int(kv["kvh"]), "vd": int(kv["vd"]), "causal": kv["causal"] == "1"}


#: tag of the key/value cache fill of a causal LM's prefill or training forward (`amp` copies the keys in fp32 by
#: it; under activation checkpointing `build_graph` turns the cache off, as transformers does)
CACHE_FILL = "cache_fill"


def cache_fill(call: dict) -> list:  # none for a call marked `shared_kv` (it reads another layer's keys)
    """transformers 5.x builds a DynamicCache in every causal LM forward (`use_cache` defaults to the config's,
    True), and its first update concatenates each layer's keys and values onto an empty tensor: two copies of
    the head-split views, on PyTorch's unvectorised `torch.cat` path (`misc:strided`; in eager multi-head attention
    its k and v layout copies stand for them). H100 op profiles (`measured/h100/families_2/op_profile_prefill.csv`,
    `families/op_profile.csv`): two `aten::cat` per layer beyond RoPE's in Llama, GPT-2, OPT, Pythia and Mistral
    prefill (SDPA) and gpt-oss's (eager)."""
    from hybridperf.graphs.primitives import misc

    elems = call["B"] * call["S_kv"] * call["kv_heads"]
    return [misc("attn.cache_fill_k", "strided", 2 * elems * call["hd"] * F32, tag=CACHE_FILL),
            misc("attn.cache_fill_v", "strided", 2 * elems * call["vd"] * F32, tag=CACHE_FILL)]


def mask_to_bias(call: dict) -> list:
    """SDPA turns a boolean mask into an additive one on every call (`convert_boolean_attn_mask` in
    aten/src/ATen/native/transformers/attention.cpp): two scalar tensors filled on the GPU, then a `where` over the
    (batch, 1, queries, keys) mask, reading bools and writing the model's dtype. H100 op profiles
    (`measured/h100/families/op_profile.csv`, Phi-3 and Gemma 3, prefill and grown-cache decode): one `where` and
    two fills per call with a sliding-window mask."""
    from hybridperf.graphs.primitives import misc

    n = call["B"] * call["S"] * call["S_kv"]
    return [misc("attn.mask_zero", "mask", F32), misc("attn.mask_inf", "mask", F32),
            misc("attn.mask_bias", "where", n * (F32 + 2))]  # a bool read, a half-precision write (fp32: 6 n for 5)


def _fused(call: dict, be: str, causal: bool, mask: bool, bool_mask: bool = False) -> list:
    """The SDPA kernels of one call (forward row; backward-only rows for training); `bool_mask`: transformers hands
    it a boolean mask, which SDPA converts first (`mask_to_bias`)."""
    from hybridperf.graphs.primitives import _k, misc

    B, S, Skv, H, hd, vd = call["B"], call["S"], call["S_kv"], call["heads"], call["hd"], call["vd"]
    spec = attn_spec(be, call["kv_heads"], vd, causal)
    out = mask_to_bias(call) if bool_mask else []
    if mask and call["kv_heads"] < H and S > 1:  # with a mask transformers repeats k and v itself (no enable_gqa;
        # a decode step packs the query heads of each key/value head instead)
        rep = B * (call["kv_heads"] + H) * hd * Skv * F32
        out += [misc("attn.repeat_k", "copy", rep, tag="repeat"), misc("attn.repeat_v", "copy", rep, tag="repeat")]
    out.append({**_k("attn.sdpa", "attention", B, S, Skv, hd, H), "attn": spec})
    if call["train"]:
        tok = B * S * H
        out += [{**_k("attn.sdpa_bw", "attention_bw", B, S, Skv, hd, H, tag="grad_attn"), "attn": spec},
                _k("attn.sdpa_bw_dot", "misc:reduce", nbytes=2 * tok * vd * F32, tag="grad_cat"),
                _k("attn.sdpa_bw_dq", "misc:copy", nbytes=2 * tok * hd * F32, tag="grad_cat")]
    return out


def _sdpa(blocks, cfg, dtype, mode):
    from hybridperf.graphs.family import family_of

    if cfg.family in NO_SDPA:  # transformers' default runs them eager
        return _eager(blocks, cfg, dtype, mode)
    causal = cfg.family not in BIDIRECTIONAL
    fills = fills_cache(cfg, mode)
    masked = []

    def fused(call, span):  # the call's cache fill, then SDPA's kernels (the eager span under `math`)
        mask = explicit_mask(cfg, call)
        masked.append(mask)
        be = backend(cfg, dtype, call, mask)
        # a window's mask is boolean (T5's bias is additive; a static cache's mask is counted with the cache)
        converts = mask and cfg.family not in BIAS_MASK and not call.get("static")
        kernels = span if be == "math" else _fused(call, be, causal and not mask, mask, converts)
        return (cache_fill(call) if fills and not call.get("shared_kv") else []) + kernels

    out = rewrite_calls(blocks, fused)
    if any(masked) or cfg.family in BIAS_MASK:
        return out
    # the mask is skipped: drop the kernels that build it before the layers
    drop_setup = DECODE_MASK_SETUP if mode == "decode" and family_of(cfg.family).causal_lm else 0
    for blk in out:
        if blk.kind != "pre":
            continue
        kept = []
        for k in blk.kernels:
            name = k["name"]
            if name.startswith(("causal_", "ext_mask", "mask_")):
                continue
            if drop_setup and name.startswith("setup_") and k["op"] == "misc:mask":
                drop_setup -= 1
                continue
            kept.append(k)
        blk.kernels = kept
    return out


IMPLEMENTATIONS = {
    "eager": AttentionImpl("eager", _eager, "materialized scores: QK^T, scale, mask, softmax, AV (NeuSight's labels)"),
    "sdpa": AttentionImpl("sdpa", _sdpa, "torch.nn.functional.scaled_dot_product_attention (transformers' default)"),
}
ATTN_IMPLEMENTATIONS = tuple(IMPLEMENTATIONS)


def attention_impl(name: str) -> AttentionImpl:
    key = str(name).strip().lower()
    if key not in IMPLEMENTATIONS:
        raise InputError(f"unknown attention implementation {name!r}; one of {', '.join(IMPLEMENTATIONS)}")
    return IMPLEMENTATIONS[key]


def check_cudnn_plans(mode: str) -> str:
    key = str(mode).strip().lower()
    if key not in CUDNN_PLAN_MODES:
        raise InputError(f"unknown cuDNN plan mode {mode!r}; one of {', '.join(CUDNN_PLAN_MODES)}")
    return key


def cudnn_plan_builds(tab: pd.DataFrame, device: DeviceSpec) -> int:
    """cuDNN execution plans one decode step builds on `device`: its distinct half-precision SDPA decode shapes
    whose keys grow a token a step (no explicit mask; a full sliding window keeps its length, so its plan is
    built once). cuDNN keys a plan by batch, heads, head dims and key length (`MHAParams`,
    aten/src/ATen/native/cudnn/MHA.cpp), so each step of `generate()` over key lengths the process has not
    run before builds one per shape, on the host, whichever layer asks first; none where PyTorch does not
    run cuDNN attention first (`CUDNN_FIRST`)."""
    if device.compute_capability not in CUDNN_FIRST or "attn" not in tab.columns:
        return 0
    rows = tab[(tab["op"] == "attention") & tab["dtype"].isin(("fp16", "bf16"))]
    keys = set()
    for r in rows.itertuples(index=False):
        s = parse_spec(r.attn)
        if s["backend"] == "decode" and s["causal"] and r.K <= CUDNN_MAX_HEAD_DIM:
            keys.add((r.B, r.H, s["kv_heads"], r.K, s["vd"], r.N))
    return len(keys)


def cudnn_plan_ms(tab: pd.DataFrame, device: DeviceSpec, mode: str, cudnn_plans: str) -> float:
    """Host time (ms) a step of `mode` spends building cuDNN plans on `device`: `cudnn_plan_builds` x CUDNN_PLAN_MS
    for a decode step whose plans are built (`cudnn_plans`), else 0."""
    if mode != "decode" or check_cudnn_plans(cudnn_plans) != "build":
        return 0.0
    return CUDNN_PLAN_MS * cudnn_plan_builds(tab, device)


def fused_attention_ms(rows: pd.DataFrame, device: DeviceSpec) -> np.ndarray:
    """Device time (ms) of `attention` / `attention_bw` rows of a kernel table (their `attn` spec)."""
    out = np.zeros(len(rows))
    for (op, dt, spec), idx in rows.groupby(["op", "dtype", "attn"], sort=False).indices.items():
        g = rows.iloc[idx]
        s = parse_spec(spec)
        out[idx] = sdpa_ms(g["B"].to_numpy(), g["M"].to_numpy(), g["H"].to_numpy(), s["kv_heads"],
                           g["K"].to_numpy(), device, dt, s["causal"], backward=op == "attention_bw",
                           kv_seq=g["N"].to_numpy(), backend=s["backend"], v_dim=s["vd"])
    return out
