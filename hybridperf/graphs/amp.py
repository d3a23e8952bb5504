"""Mixed precision: an fp32 model under `torch.autocast("cuda", dtype=torch.bfloat16)` (`--amp`).

Autocast runs matrix products (linear, matmul, SDPA) in bf16 and casts their fp32 inputs on the way in;
layer/RMS norms, softmax and the loss run in fp32 (autocast's fp32 list); other element-wise ops run in
the dtype they receive (bf16 after a GEMM, fp32 on the residual stream, which stays fp32 because the
embeddings and residual adds take fp32 operands). The graph is the bf16 one rewritten per kernel:

  * every weight is cast to bf16 once per forward (autocast caches the casts of leaf parameters), and its
    gradient cast back to fp32 in the backward (the cast's backward), accumulated into an fp32 `.grad`;
  * a GEMM whose input comes off an fp32 kernel casts that input (each consumer casts its own copy);
  * norms, softmax, embeddings, residual adds and gradient accumulation run in fp32;
  * weights, gradients and the optimizer step are fp32 (`ModelGraph.amp`).
"""
from __future__ import annotations

#: ops whose kernels autocast runs in bf16
LOW_PRECISION_OPS = ("linear", "bmm", "attention", "attention_bw")
#: ops autocast runs in fp32 (its fp32 list: norms, softmax, log_softmax)
FP32_OPS = ("ln", "softmax")
FP32_TAGS = ("residual",)


def amp_blocks(blocks: list) -> list:
    """Blocks of a bf16 graph rewritten as autocast runs an fp32 model (module docstring)."""
    from hybridperf.graphs.kernels import Block, cast

    out = []
    for blk in blocks:
        ks, fp32_stream = [], True  # a block starts on the fp32 residual stream
        for k in blk.kernels:
            op = k["op"]
            if op in LOW_PRECISION_OPS and k.get("tag") != "grouped":
                if fp32_stream and op == "linear":
                    ks.append(cast(f"{k['name']}.in_cast", k["M"] * k["N"]))
                if op == "linear" and k["params"]:
                    ks.append(cast(f"{k['name']}.w_cast", k["params"]))
                ks.append(k)
                fp32_stream = False
                continue
            if op in FP32_OPS or k.get("tag") in FP32_TAGS or op == "misc:gather":
                k = {**k, "fp32": True}
            if op == "bmm" and k["params"]:  # grouped experts: their stacked weights cast once
                ks.append(cast(f"{k['name']}.w_cast", k["params"]))
            ks.append(k)
            if not op.startswith("misc:cast"):
                fp32_stream = k["fp32"]
        out.append(Block(blk.name, blk.count, ks, blk.kind))
    return out
