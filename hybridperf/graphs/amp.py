"""Mixed precision: an fp32 model under `torch.autocast("cuda", dtype=torch.bfloat16)` (`--amp`).

Autocast runs matrix products (linear, matmul, SDPA) in bf16 and casts their fp32 inputs on the way in;
layer/RMS norms, softmax and the loss run in fp32 (autocast's fp32 list); other element-wise ops run in
the dtype they receive (bf16 after a GEMM, fp32 on the residual stream, which stays fp32 because the
embeddings and residual adds take fp32 operands). The graph is the bf16 one rewritten per kernel:

  * every weight is cast to bf16 once per forward (autocast caches the casts of leaf parameters), and its
    gradient cast back to fp32 in the backward (the cast's backward), accumulated into an fp32 `.grad`;
  * a GEMM whose input comes off an fp32 kernel casts that input (each consumer casts its own copy), and SDPA
    casts q and k, which RoPE's fp32 cos/sin left in fp32;
  * norms (their upcasts vanish: the stream is fp32 already), RoPE, softmax, embeddings, residual adds and
    gradient accumulation run in fp32, and so do a MoE's grouped expert GEMMs, which autocast does not cast,
    and the key cache's copy of RoPE's fp32 keys;
  * weights, gradients and the optimizer step are fp32 (`ModelGraph.amp`).

Checked against a CPU autocast trace (TorchDispatchMode, transformers 5.24, Llama with SDPA): 48 kernels per
layer in the forward, 14 of them casts, as here.
"""
from __future__ import annotations

#: ops whose kernels autocast runs in bf16
LOW_PRECISION_OPS = ("linear", "bmm", "attention", "attention_bw")
#: ops autocast runs in fp32 (its fp32 list: norms, softmax, log_softmax)
FP32_OPS = ("ln", "softmax")
FP32_TAGS = ("residual", "strided_softmax", "strided_softmax_fw")  # the last two: a softmax PyTorch runs unvectorised
#: an RMSNorm's casts to fp32 and back to its input's dtype: no-ops on the fp32 residual stream
NORM_CASTS = (".to_fp32", ".to_half")


def amp_blocks(blocks: list) -> list:
    """Blocks of a bf16 graph rewritten as autocast runs an fp32 model (module docstring)."""
    from hybridperf.graphs.attention import CACHE_FILL, parse_spec
    from hybridperf.graphs.primitives import BACKWARD_ONLY, Block, cast

    out = []
    for blk in blocks:
        ks, fp32_stream, rotary, prev_gemm = [], True, False, False  # a block starts on the fp32 residual stream
        for k in blk.kernels:
            op, name = k["op"], k["name"]
            if k.get("tag") in BACKWARD_ONLY:  # launched in the backward only: not on the forward's stream
                ks.append(k)
                continue
            if op == "misc:cast" and name.endswith(NORM_CASTS):
                continue  # an RMSNorm's .to(float32) / .to(input dtype) of an fp32 tensor: no kernel
            if op in LOW_PRECISION_OPS and k.get("tag") != "grouped":
                # consecutive GEMMs read the same input (q/k/v, gate/up): each casts its own copy
                if fp32_stream and op == "linear":
                    ks.append(cast(f"{name}.in_cast", k["M"] * k["N"]))
                if op == "linear" and k["params"]:
                    ks.append(cast(f"{name}.w_cast", k["params"]))
                if op == "attention" and rotary:  # RoPE with fp32 cos/sin left q and k in fp32
                    kvh = parse_spec(k["attn"])["kv_heads"]
                    ks += [cast(f"{name}.q_cast", k["B"] * k["M"] * k["H"] * k["K"]),
                           cast(f"{name}.k_cast", k["B"] * k["N"] * kvh * k["K"])]
                ks.append(k)
                prev_gemm = True
                fp32_stream = fp32_stream and op == "linear"  # attention's and bmm's outputs are bf16
                continue
            if prev_gemm and op != "misc:cast":
                fp32_stream = False  # a GEMM's bf16 output feeds what follows
            prev_gemm = False
            rope = "rope" in name
            rotary |= rope
            rotated_keys = rotary and k.get("tag") == CACHE_FILL and name.endswith("_k")  # the cache copies them
            if op in FP32_OPS or k.get("tag") in FP32_TAGS or op == "misc:gather" or rope or rotated_keys \
                    or (k.get("tag") == "broadcast" and name.endswith(".weight")):
                k = {**k, "fp32": True}
            if k.get("tag") == "grouped":
                # grouped expert GEMMs are not on autocast's list: fp32 weights and fp32 tokens, so they run
                # in fp32 (our H200 and H100: MoE models train 2-5x slower under AMP than in bf16)
                k = {**k, "fp32": True}
            ks.append(k)
            if op != "misc:cast":
                fp32_stream = k["fp32"]
        out.append(Block(blk.name, blk.count, ks, blk.kind))
    return out
