"""Pointwise fusion: chains of elementwise kernels merged into one kernel each, as a fusing compiler runs
inference (NeuSight's `-fusion` runs; `build_graph(..., fused=True)`)."""
from __future__ import annotations

from hybridperf.graphs.primitives import F32, vec


#: element-wise ops a fusing compiler merges into one kernel; `where` (tag) stays apart, as in the traced
#: fused graphs
POINTWISE = ("add", "addu", "mul", "mulu", "div", "divu", "pow", "powu", "relu", "gelu", "tanh")


#: pointwise ops with a second full-size operand
BINARY_POINTWISE = ("add", "mul", "div", "pow")


def _fusible(k: dict) -> bool:
    return k["op"] in POINTWISE and k.get("tag", "") != "where"


def _external_inputs(chain: list) -> int:
    """Full-size tensors a fused chain reads besides its first input: the second operands of its binary
    ops, except those computed inside the chain (tag `internal`, e.g. GELU's x + 0.044715 x^3) and
    broadcast ones (tag `broadcast`, e.g. RMSNorm's per-row scale and per-column weight)."""
    return sum(1 for k in chain if k["op"] in BINARY_POINTWISE and k.get("tag", "") not in ("internal", "broadcast"))


def _fused_kernel(chain: list, anchor: dict | None = None) -> dict:
    """One kernel for `chain` (pointwise ops on one tensor shape), ending in the row-wise `anchor`
    (softmax or LayerNorm) when given. Intermediate tensors stay in registers, so the kernel streams its
    inputs once and writes one output: the anchor's kernel (or a unary / binary element-wise op) plus
    `extra_nbytes` for every further full-size input."""
    extra = _external_inputs(chain)
    rows, h = chain[0]["B"], chain[0]["H"]
    name = "+".join(k["name"] for k in chain + ([anchor] if anchor else []))
    if anchor is not None:
        base, more = anchor, extra
    else:
        base, more = vec(name, "add" if extra else "mulu", rows, h), max(extra - 1, 0)
    return {**base, "name": name, "tag": "fused", "extra_nbytes": more * rows * h * F32, "fp32": False,
            "params": sum(k.get("params", 0) for k in chain) + (anchor or {}).get("params", 0)}


def fuse_pointwise(kernels: list) -> list:
    """A block's forward kernels after vertical fusion, as a fusing compiler (torch.compile) runs them
    and as NeuSight's fused graphs record them (`results/opgraph/*-fusion.csv`):

      * a run of consecutive pointwise ops on one tensor shape becomes one kernel (GPT-2's eight-kernel
        GELU, BERT's scale + mask add);
      * such a run also folds into a following softmax or LayerNorm over the same rows (BERT's
        scale + mask + softmax, residual add + LayerNorm), unless its output has another consumer
        (tag `residual`: a pre-LN model's residual stream, read again by the next residual add);
      * GEMMs, copies, `where` and the misc kernels are left as they are and end a run (PyTorch's unvectorised
        kernels, `misc:strided`, become the compiler's copy or softmax);
      * dtype casts (`cast`) disappear: the compiler converts in registers, so a fused kernel reads
        and writes the model's dtype even where eager code upcasts.
    """
    out, chain = [], []

    def flush():
        if len(chain) == 1:
            out.append(chain[0])
        elif chain:
            out.append(_fused_kernel(chain))
        chain.clear()

    for k in kernels:
        if k["op"] == "misc:cast":
            continue
        if k["op"] == "misc:strided":  # a compiler generates its own kernels: no PyTorch unvectorised path
            k = {**k, "op": "softmax"} if k["tag"].startswith("strided_softmax") else {**k, "op": "misc:copy"}
        same = bool(chain) and (k["B"], k["H"]) == (chain[-1]["B"], chain[-1]["H"])
        open_end = bool(chain) and chain[-1].get("tag", "") != "residual"
        if _fusible(k):
            if chain and not (same and open_end):
                flush()
            chain.append(k)
        elif k["op"] in ("softmax", "ln") and same and open_end:
            out.append(_fused_kernel(chain, k))
            chain.clear()
        else:
            flush()
            out.append(k)
    flush()
    return out
