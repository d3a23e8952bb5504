"""The backward of each forward kernel, and the gradient accumulation into parameters.

Mappings onto the vocabulary (each is a documented approximation):
    causal `where(mask, x, min)`, OPT's `max(x, min)`, a broadcast mask add  -> addu on the same shape
    (they stream x once in and once out; the broadcast mask stays in L2)
    dropout (train)                                  -> mul (reads x, writes y and the mask)
    backward of a unary op (relu, gelu, tanh, mulu)  -> mul (reads grad and the saved tensor)
    backward of a product with a constant (RoPE)     -> one mul
    backward of repeat_kv's copy (grouped-query)     -> the layout copy, and a sum over each group
    backward of x ** e (powu)                        -> pow, mul by e, mul by the gradient
    backward of softmax / LayerNorm over H           -> softmax / ln over 2H (~2x the bytes); where PyTorch's
                                                        backward is unvectorised (`row_softmax`), its 3 tensors
    backward of a GEMM                               -> two GEMMs of the same FLOPs (dX, and dW in the transposed
                                                        form: it reduces over the tokens, `TRANSPOSED_FORM`)
    backward of a broadcast product (tag broadcast)  -> both products, then the broadcast operand's
    (RMSNorm's x * rsqrt and weight * x, MoE weights)   gradient summed over the broadcast dimension
                                                        (reduce); a quotient's five kernels (div, div,
                                                        neg, mul, div), then the sum
    backward of RMSNorm's rsqrt (tag rsqrt)          -> three per-row kernels (pow, two muls)
    backward of a slice (RoPE's halves; slice_grads) -> a zero-filled gradient of the whole tensor and a copy
    an fp32 op reading a half tensor (`grad_cast`)   -> a cast of its gradient (backward only)
    gradient accumulation of a parameter             -> add over the parameter's elements
    a tensor read by n ops of the forward            -> n - 1 adds of its gradient in the backward
    (autograd sums the gradients of every reader: `grad_sums`, e.g. a BERT layer's input feeds q, k,
    v and the residual add; counted per family with TorchDispatchMode on HF eager layers)
"""
from __future__ import annotations

from hybridperf.graphs.primitives import F32, _k, misc, vec
from hybridperf.ops import TRANSPOSED_FORM


def backward_kernels(k: dict) -> list:
    """Kernels of the backward of forward kernel `k` (see the module docstring for the rules)."""
    op, n, tag = k["op"], k["name"], k.get("tag", "")
    if tag == "dropout":  # grad * mask * scale
        return [vec(n + ".bw", "mul", k["B"], k["H"])]
    if tag == "where":  # where(mask, grad, 0)
        return [vec(n + ".bw", "addu", k["B"], k["H"])]
    if tag == "grad_sum":  # a backward-only add (`grad_sums`)
        return [vec(n, "add", k["B"], k["H"])]
    if tag == "grad_cat":  # a backward-only copy (`grad_cat`, `slice_grads`)
        return [misc(n, "copy", k["nbytes"])]
    if tag == "grad_zeros":  # a backward-only zero-filled gradient (`slice_grads`)
        return [misc(n, "mask", k["nbytes"])]
    if tag in ("grad_cast", "grad_attn"):  # a backward-only cast (`grad_cast`), a fused attention backward
        return [{**k, "tag": ""}]
    if tag == "layout":  # the gradient is copied back into the layout the forward copied out of
        return [misc(n + ".bw", "copy", k["nbytes"])]
    if tag == "repeat":  # repeat_kv's copy: laid back, then summed over each key/value head's query heads
        return [misc(n + ".bw", "copy", k["nbytes"]), misc(n + ".bw_sum", "reduce", k["nbytes"] / 2)]
    if tag == "constant":  # a product with a tensor that takes no gradient (RoPE's cos and sin): one mul
        return [vec(n + ".bw", "mul", k["B"], k["H"])]
    if tag == "sub":  # a - b: b's gradient is negated
        return [vec(n + ".bw", "mulu", k["B"], k["H"])]
    if tag == "broadcast_copy":  # a copy of a tensor broadcast over heads: its gradient summed back
        return [misc(n + ".bw", "reduce", k["nbytes"] / 2)]
    if tag == "sub_broadcast":  # x - m with m broadcast over the row: m's gradient is -grad summed over the row
        return [vec(n + ".bw", "mulu", k["B"], k["H"]), misc(n + ".bw_sum", "reduce", k["B"] * k["H"] * F32)]
    if tag == "row_max":  # max(dim) keeps its indices: the gradient is scattered into zeros
        return [misc(n + ".bw_zeros", "mask", k["nbytes"]), misc(n + ".bw", "index", k["nbytes"])]
    if tag in ("strided_softmax", "strided_softmax_bw"):  # dx = y * (dy - sum(y * dy)), unvectorised
        return [misc(n + ".bw", "strided", 3 * k["B"] * k["H"] * F32)]  # reads y and dy, writes dx
    if tag == "strided_softmax_fw":  # an unvectorised forward, a vectorised backward
        return [_k(n + ".bw", "softmax", k["B"], H=2 * k["H"])]
    if tag == "sink_cat":  # the broadcast sink column's gradient summed over batch and rows
        return [misc(n + ".bw", "reduce", k["nbytes"] / 2)]
    if tag in ("clamp", "clamp_max"):  # where(lo <= x <= hi, grad, 0): a scalar, the compares, their and, where
        elems = k["B"] * k["H"]
        compares = 2 if tag == "clamp" else 1
        return [misc(n + ".bw_scalar", "mask", 8), *(misc(f"{n}.bw_cmp{i}", "mask", elems * (F32 + 1))
                                                      for i in range(compares)),
                *([misc(n + ".bw_and", "mask", 3 * elems)] if tag == "clamp" else []),
                vec(n + ".bw", "mul", k["B"], k["H"])]
    if tag == "nll":  # zero-filled (tokens, V) gradient with one scatter
        return [misc(n + ".bw", "copy", k["B"] * k["H"] * F32)]
    if op == "linear":  # plain mm calls (the `mm` form)
        M, N, K = k["M"], k["N"], k["K"]
        out = [_k(n + ".dX", "linear", 1, M, K, N), _k(n + ".dW", "linear", 1, K, M, N, form=TRANSPOSED_FORM)]
        if k["bias"]:
            out.append(misc(n + ".db", "reduce", M * K * F32))
        return out
    if op == "bmm":  # a grouped GEMM's two gradients are grouped GEMMs too (dX, and dW per expert)
        B, M, N, K, g = k["B"], k["M"], k["N"], k["K"], "grouped" if tag == "grouped" else ""
        return [_k(n + ".dA", "bmm", B, M, K, N, tag=g),
                _k(n + ".dB", "bmm", B, N, M, K, tag=g, form=TRANSPOSED_FORM)]
    if op in ("softmax", "ln"):
        return [_k(n + ".bw", op, k["B"], H=2 * k["H"])]
    if op in ("add", "addu"):
        return []  # the gradient passes through
    if tag == "broadcast":  # the broadcast operand's gradient is a full-size product summed down to its shape
        prods = ["mul"] * 2 if op == "mul" else ["div", "div", "mulu", "mul", "div"]
        return [*(vec(f"{n}.bw{i}", o, k["B"], k["H"]) for i, o in enumerate(prods)),
                misc(n + ".bw_sum", "reduce", k["B"] * k["H"] * F32)]
    if tag == "rsqrt":  # d rsqrt(v) = -0.5 v^-1.5: pow, mul by -0.5, mul by the gradient, one value per row
        return [misc(f"{n}.bw{i}", "mask", k["nbytes"]) for i in range(3)]
    if op in ("mulu", "divu"):
        return [vec(n + ".bw", "mulu", k["B"], k["H"])]
    if op == "powu":  # grad * (e * x^(e-1)): pow, mul by e, mul by the gradient
        return [vec(n + ".bw", "powu", k["B"], k["H"]), vec(n + ".bw1", "mulu", k["B"], k["H"]),
                vec(n + ".bw2", "mul", k["B"], k["H"])]
    if op in ("mul", "div", "pow"):
        return [vec(n + ".bw", "mul", k["B"], k["H"]), vec(n + ".bw2", "mul", k["B"], k["H"])]
    if op in ("relu", "gelu", "tanh"):
        return [vec(n + ".bw", "mul", k["B"], k["H"])]
    if op == "misc:gather":
        tokens_h = (k["nbytes"] / F32) / 2.0
        return [misc(n + ".bw", "embedding_bw", k["params"] * F32 + 3 * tokens_h * F32)]
    if op == "misc:reduce":
        return [misc(n + ".bw", "copy", 2 * k["nbytes"])]
    if op == "misc:cast":  # the gradient is cast back
        return [{**k, "name": n + ".bw"}]
    if tag == "gather":  # indexing that carries a gradient: a zero-filled gradient, then a scatter into it
        return [misc(n + ".bw_zeros", "mask", k["nbytes"] / 2), misc(n + ".bw", op.split(":", 1)[1], k["nbytes"])]
    if op == "misc:index":
        return [misc(n + ".bw", "index", k["nbytes"])]
    return []  # copies, masks and routing: no gradient kernels (views / integer tensors)


def accumulation_kernels(k: dict) -> list:
    """`.grad += g` for the parameters kernel `k` owns (one add over the parameter's elements)."""
    p = k.get("params", 0)
    if not p:
        return []
    if k["op"] == "linear":
        out = [vec(k["name"] + ".acc_w", "add", k["K"], k["N"])]
        if k["bias"]:
            out.append(vec(k["name"] + ".acc_b", "add", 1, k["K"]))
        return out
    if k["op"] == "ln":
        return [vec(k["name"] + ".acc_g", "add", 1, k["H"]), vec(k["name"] + ".acc_b", "add", 1, k["H"])]
    if k["op"] == "misc:gather":
        h = max(k["H"], 1)
        return [vec(k["name"] + ".acc", "add", max(p // h, 1), h)]
    return [vec(k["name"] + ".acc", "add", 1, p)]


#: LM heads whose weight is the embedding table when the config ties them (HF ties both)
TIED_HEADS = ("lm_head", "decoder")


def tensor_numels(kernels, tied_head: bool) -> list[int]:
    """Element counts of the parameter tensors `kernels` own, in `model.parameters()` order; with
    `tied_head` an LM head's weight is the embedding table's and is skipped (its bias is not)."""
    out = []
    for k in kernels:
        acc = accumulation_kernels(k)
        if tied_head and k["op"] == "linear" and k["name"] in TIED_HEADS:
            acc = acc[1:]
        out += [int(a["B"]) * int(a["H"]) for a in acc]
    return out
