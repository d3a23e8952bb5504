"""Eager attention's core (QK^T, scale, mask, softmax, dropout, AV, head merge) shared by every family; the
implementation a request chooses rewrites it (`hybridperf.graphs.attention`)."""
from __future__ import annotations

from hybridperf.graphs.attention import mark_call
from hybridperf.graphs.layers.grads import grad_sums, slice_grads
from hybridperf.graphs.primitives import F32, _k, bmm, cast, misc, vec


def attention_core(p, B, S, heads, hd, train, scale_op, mask_op, S_kv=None, dropout=True, softmax_fp32=False,
                    qk_fp32=False, layout=("q", "k", "v"), softcap=False, kv_groups=1, v_dim=None, sinks=False):
    """QK^T, scale, mask, softmax, dropout, AV, head merge: shared by every family.

    Every family hands bmm head-split views, (B, heads, S, hd) permuted out of (B, S, h): torch.matmul
    copies each of Q, K and V into a (B*heads, S, hd) batch before its bmm (OPT's `.contiguous()`
    and Llama's repeat_kv make the same copies explicitly), and the merged heads are copied back.
    These four `layout` copies each cost one more copy in the backward (the gradient is laid out
    back). Checked per layer with TorchDispatchMode on HF eager BERT, GPT-2, GPT-Neo, OPT and Llama
    (transformers 5.23): four clones in the forward, four in the backward (GPT-2 concatenates two
    of them). `dropout=False` for p = 0 (no kernel). `softmax_fp32`: softmax(x, dtype=float32).to(x.dtype)
    (Llama-style eager attention): in a half-precision model the softmax runs in fp32 between two casts;
    for fp16 input PyTorch's CUDA softmax reads the half scores itself (`half_to_float`), bf16 is cast
    first (ATen `softmax`). `qk_fp32` (GPT-Neo): q and k are cast to fp32 before QK^T, so their layout
    copies, the QK^T bmm, the mask and the softmax run in fp32, and the probabilities are cast back.
    `layout`: which of q, k, v arrive as views that need the copy (all but in Phi-3, `llama_layout_copies`).
    `softcap` (Gemma 2): the scaled scores are soft-capped, c * tanh(x / c), before the mask. `kv_groups`
    (grouped-query attention, heads per key/value head): the k and v copies are repeat_kv's, whose gradient
    is summed over each group (tag `repeat`). `v_dim`: the values' head width when it is not the keys'
    (DeepSeek's latent attention). `sinks` (GPT-OSS): a learned logit per head joins each row of scores
    before the softmax (`attention_scores`)."""
    S_kv = S if S_kv is None else S_kv
    vd = v_dim or hd
    bh = B * heads
    tok = B * S
    ks = [cast(f"{p}.q_to_fp32", tok * heads * hd), cast(f"{p}.k_to_fp32", B * S_kv * heads * hd)] if qk_fp32 else []
    if "q" in layout:
        ks.append(misc(f"{p}.q_copy", "copy", 2 * tok * heads * hd * F32, tag="layout", fp32=qk_fp32))
    kv_tag = "repeat" if kv_groups > 1 else "layout"
    if "k" in layout:
        ks.append(misc(f"{p}.k_copy", "copy", 2 * B * S_kv * heads * hd * F32, tag=kv_tag, fp32=qk_fp32))
    ks.append({**bmm(f"{p}.qk", bh, S, hd, S_kv), "fp32": qk_fp32})
    ks += attention_scores(p, bh * S, S_kv, scale_op, mask_op, softmax_fp32, qk_fp32, softcap, sinks and heads, train)
    if train and dropout:
        ks.append(vec(f"{p}.attn_dropout", "mul", bh * S, S_kv, tag="dropout"))
    if "v" in layout:
        ks.append(misc(f"{p}.v_copy", "copy", 2 * B * S_kv * heads * vd * F32, tag=kv_tag))
    ks.append(bmm(f"{p}.av", bh, S, S_kv, vd))
    ks.append(misc(f"{p}.merge_heads", "copy", 2 * tok * heads * vd * F32, tag="layout"))
    return mark_call(ks, B=B, S=S, S_kv=S_kv, heads=heads, kv_heads=heads // kv_groups, hd=hd, vd=vd, train=train)


def attention_scores(p, rows, width, scale_op, mask_op, softmax_fp32=False, qk_fp32=False, softcap=False,
                     sinks=0, train=False) -> list:
    """Scale, soft-cap, mask and softmax of (rows, width) attention scores, with `attention_core`'s upcasts
    (`qk_fp32`: the scores are fp32 already; `softmax_fp32`: softmax(dtype=float32) between casts).
    `mask_op`: ops, or (op, tag) pairs; tag 'where' has a backward kernel, a mask add none. `sinks`
    (GPT-OSS, the number of heads): each row gains its head's sink logit (torch.cat of an expanded, hence
    strided, tensor: PyTorch's unvectorised concatenation), its maximum is subtracted, and the softmax runs
    over width + 1, unvectorised when that breaks 16-byte rows (the sink's probability is dropped, a slice)."""
    ks = [vec(f"{p}.scale", scale_op, rows, width, fp32=qk_fp32)] if scale_op else []
    if softcap:
        ks += soft_cap(f"{p}.softcap", rows, width)
    for i, op in enumerate(mask_op):
        op, tag = op if isinstance(op, tuple) else (op, "")
        ks.append(vec(f"{p}.mask{i}", op, rows, width, tag=tag, fp32=qk_fp32))
    if sinks:  # the sink column is a parameter (one logit per head) broadcast to every row
        return ks + [_k(f"{p}.sink_cat", "misc:strided", nbytes=2 * rows * (width + 1) * F32, params=sinks,
                        tag="sink_cat"),
                     *grad_sums(f"{p}.sink_logits", rows, width + 1, 2, train),
                     misc(f"{p}.sink_max", "reduce", rows * (width + 1) * F32, tag="row_max"),
                     vec(f"{p}.sink_sub", "add", rows, width + 1, tag="sub_broadcast"),
                     row_softmax(f"{p}.softmax", rows, width + 1, qk_fp32),
                     *slice_grads(f"{p}.sink_drop", rows, width + 1, 1, train)]
    if qk_fp32:
        return ks + [vec(f"{p}.softmax", "softmax", rows, width, fp32=True), cast(f"{p}.softmax_out", rows * width)]
    if softmax_fp32:
        return ks + [cast(f"{p}.softmax_in", rows * width, dtypes=("bf16",)),
                     vec(f"{p}.softmax", "softmax", rows, width, fp32=True), cast(f"{p}.softmax_out", rows * width)]
    return ks + [vec(f"{p}.softmax", "softmax", rows, width)]


def row_softmax(p, rows, width, fp32=False) -> dict:
    """Softmax over (rows, width) as PyTorch's CUDA dispatch runs it (`SoftMax.cu`): the forward's warp kernel
    up to 2,048 wide, then its scalar-load register kernel up to 9,216 (unvectorised, `misc:strided`), then
    vectorised kernels unless a row is not a whole number of 16-byte vectors; the backward's warp kernel up
    to 1,024 wide, then vectorised kernels unless misaligned. Tags tell the backward which path it takes."""
    misaligned = width % (4 if fp32 else 8) != 0  # elements in 16 bytes
    fw_strided = 2048 < width <= 9216 or (width > 9216 and misaligned)
    bw_strided = width > 1024 and misaligned
    if fw_strided:
        return _k(p, "misc:strided", rows, H=width, nbytes=2 * rows * width * F32, fp32=fp32,
                  tag="strided_softmax" if bw_strided else "strided_softmax_fw")
    return vec(p, "softmax", rows, width, tag="strided_softmax_bw" if bw_strided else "", fp32=fp32)


def soft_cap(p, rows, width) -> list:
    """Gemma 2's soft-cap of (rows, width) scores or logits in eager HF: x / c, tanh, * c."""
    return [vec(f"{p}_div", "divu", rows, width), vec(f"{p}_tanh", "tanh", rows, width),
            vec(f"{p}_mul", "mulu", rows, width)]
