"""One decode step of a causal LM with a key/value cache, as Hugging Face eager generation runs it.

`build_graph(config, batch, seq, mode="decode")`: each of `batch` sequences feeds one new token and
attends to its `seq` cached tokens plus the new one (`kv_length`), as `model(next_ids,
past_key_values=cache)` does inside `generate()`. The step is the model's forward only: no sampling
or logits processing.

The kernels are those HF eager code launches, counted with TorchDispatchMode on GPT-2, GPT-Neo, OPT and
Llama decode steps with a `DynamicCache` (transformers 5.23; `experiments/gpu/decode_trace.py` re-counts
them and compares with this module):

  * every projection, norm, activation and residual kernel of the prefill layer, over `batch` rows;
  * the cache update: `torch.cat` of the cached keys (values) and the new ones, i.e. a copy of the whole
    cache, twice per layer and step;
  * grouped-query attention (fewer key/value heads than heads): `repeat_kv` copies keys and values out
    to every head;
  * QK^T and AV as batched matrix-vector products (batch x heads, 1, head_dim, kv_length), the scale,
    the mask and the softmax over kv_length. The query and the merged heads of one token are views
    (GPT-2 copies its query, a strided slice of the fused QKV output), so the prefill's layout copies
    are gone;
  * before the layers, position ids, the causal mask and (Llama) the rotary table: 12-19 tiny kernels.

HF's half-precision upcasts (RMSNorm, Llama's and OPT's softmax, GPT-Neo's QK^T) are the prefill's.
Mistral's and Phi-3's sliding-window caches keep the last `sliding_window` tokens at most, and so do Gemma 2 and 3's
sliding layers; the other families keep them all (GPT-Neo's local layers included: their window is in the
mask, not the cache). DeepSeek-V3 caches its key/value latent and re-expands it every step (`families.deepseek`).

This module holds what every family's step shares (the setup kernels, the cached attention); each family's
step is the `decode` of its module in `hybridperf.graphs.families`.
"""
from __future__ import annotations

from hybridperf.graphs.attention import mark_call
from hybridperf.graphs.config import LLAMA_LIKE, OLMO, ModelConfig
from hybridperf.graphs.layers.attention_core import attention_scores
from hybridperf.graphs.layers.llama import second_rotary_table
from hybridperf.graphs.primitives import F32, bmm, cast, misc

#: the rotary models' setup casts in a half-precision model (cos and sin and the mask to the model dtype)
LLAMA_SETUP_CASTS = 3


def decode_setup(cfg: ModelConfig, B: int, kv: int, n: int) -> list:
    """The `n` kernels (the family's `Family.setup_kernels`) that build position ids, the causal mask and, for
    rotary models, the rotary cos/sin before the first layer (counted; all tiny), and those models' casts."""
    ks = [misc(f"setup_{i}", "mask", 2 * B * kv * 8) for i in range(n)]
    if cfg.family in (*LLAMA_LIKE, "gpt_neox"):  # rotary tables: cast like Llama's (fp32 ones: the mask only)
        ks += [cast(f"setup_cast_{i}", B * kv) for i in range(1 if cfg.family in OLMO else LLAMA_SETUP_CASTS)]
    return ks + (second_rotary_table(cfg, B) if cfg.family in LLAMA_LIKE else [])


def cached_attention(p: str, cfg: ModelConfig, B: int, kv: int, scale_op, mask_ops, q_copy=False, softmax_fp32=False,
               qk_fp32=False, softcap=False, sinks=False, strided_cache=False, strided_values=False,
               sliding=False) -> list:
    """Cache update, (repeat_kv), QK^T, scale, (soft-cap), mask, softmax and AV of one new token per sequence.
    A torch.cat with a strided input takes PyTorch's unvectorised path (`misc:strided`): `strided_cache`, a full
    sliding-window cache (a slice of the last step's keys and values); `strided_values`, new values sliced out
    of a fused projection (Phi-3's, at batch > 1). `sliding`: a sliding-window layer (its call is marked so)."""
    heads, hd, kvh = cfg.heads, cfg.head_dim, cfg.num_kv_heads
    bh = B * heads
    cache = 2 * B * kvh * hd * kv * F32  # torch.cat reads the cache and the new token, writes them together
    ks = []
    if kvh < heads:  # repeat_kv: expand + reshape materialises the keys and values of every head
        rep = B * (kvh + heads) * hd * kv * F32
        ks += [misc(f"{p}.repeat_k", "copy", rep), misc(f"{p}.repeat_v", "copy", rep)]
    if q_copy:
        ks.append(misc(f"{p}.q_copy", "copy", 2 * bh * hd * F32))
    if qk_fp32:  # GPT-Neo: q.to(float32), k.to(float32) -- the whole cache, every step
        ks += [cast(f"{p}.q_to_fp32", bh * hd), cast(f"{p}.k_to_fp32", bh * kv * hd)]
    ks.append({**bmm(f"{p}.qk", bh, 1, hd, kv), "fp32": qk_fp32})
    ks += attention_scores(p, bh, kv, scale_op, mask_ops, softmax_fp32, qk_fp32, softcap, sinks and cfg.heads)
    ks.append(bmm(f"{p}.av", bh, 1, kv, hd))
    kind = "strided" if strided_cache else "copy"
    return [cache_row(f"{p}.cache_k", kind, cache, kv), cache_row(f"{p}.cache_v", "strided" if strided_values else kind,
                                                               cache, kv),
            *mark_call(ks, B=B, S=1, S_kv=kv, heads=heads, kv_heads=kvh, hd=hd, vd=hd, train=False, sliding=sliding)]


def cache_row(name: str, kind: str, nbytes: float, cache_len: int) -> dict:
    """A dynamic cache's torch.cat of `cache_len` tokens (read and written again every step), marked with its
    length so that `static_cache` can rewrite it."""
    return {**misc(name, kind, nbytes), "cache_len": int(cache_len)}


#: the small kernels a StaticCache layer adds to a decode step: the write positions (arange + the cache's length),
#: the length's in-place update, and a `where` (CPU trace of transformers 5.23's StaticLayer.update and its mask)
STATIC_CACHE_KERNELS = ("positions", "offset", "length_update", "where")


def static_cache(blocks: list) -> list:
    """A decode step over a static cache (transformers' StaticCache; a CUDA graph needs its fixed addresses):
    each layer writes its new token's keys and values in place (`index_copy_`), where a dynamic cache
    concatenates the whole cache again, launches `STATIC_CACHE_KERNELS`, and hands SDPA a mask over the
    whole buffer (its calls are marked `static`)."""
    for blk in blocks:
        out = []
        for k in blk.kernels:
            if "attn_call" in k:
                k["attn_call"]["static"] = True  # one dict per call, shared by its kernels
            if not k.get("cache_len"):
                out.append(k)
                continue
            if k["name"].endswith(("cache_k", "cache_latent")):  # once per layer, before its first write
                out += [misc(f"{k['name']}_{n}", "mask", 64) for n in STATIC_CACHE_KERNELS]
            out.append({**k, "op": "misc:copy", "nbytes": k["nbytes"] / k["cache_len"]})
        blk.kernels = out
    return blocks


#: how a dynamic cache's tensors lie when a decode step concatenates onto them: `contiguous` (a prefill's, and
#: `generate()`'s growing cache), or `strided` (a DynamicCache cropped back between steps is a view)
CACHE_LAYOUTS = ("contiguous", "strided")


def strided_cache(blocks: list) -> list:
    """A decode step over a cropped DynamicCache: each layer's `torch.cat` reads a strided view and takes
    PyTorch's unvectorised kernel (`misc:strided`; `measured/h100/families/README.md`: 0.67-0.69 TB/s against
    about 3 for a copy, 56-86% of big-batch decode steps' device time)."""
    for blk in blocks:
        blk.kernels = [{**k, "op": "misc:strided"} if k.get("cache_len") and k["op"] == "misc:copy" else k
                       for k in blk.kernels]
    return blocks
