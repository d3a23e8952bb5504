"""The kernel ops hybridperf models: names, op classes, and their work (FLOPs) and traffic (bytes).

Shapes follow NeuSight's test CSVs: `bmm` is (B,M,N) @ (B,N,K); `linear` is an input (B,M,N) through
Linear(N, K) with bias; every other op works on a (B, H) tensor (softmax and LayerNorm over H).
All functions are vectorised over numpy arrays of shapes.

A `linear` row also has a form (`LINEAR_FORMS`): `linear`, torch.nn.functional.linear with a bias
(x @ W^T + b, what NeuSight's harness and hybridperf's collector time; the default), `mm`, any other
GEMM of that shape: a bias-free projection, GPT-2's Conv1D addmm (x @ W + b), the backward's dX, or
`mm_t` (`TRANSPOSED_FORM`), a weight gradient. cuBLAS picks different kernels for `linear` and the others
(`hybridperf.priors.constants.SPLIT_RATE_FITS`). A `bmm` row is torch.bmm (form empty) or `mm_t`.
"""
from __future__ import annotations

import numpy as np

from hybridperf.errors import UnknownOpError

#: op name -> op class. The op class picks the prior and the residual model.
OP_CLASS: dict[str, str] = {
    "bmm": "bmm",
    "linear": "linear",
    "softmax": "softmax",
    "ln": "layernorm",
    "attention": "attention", "attention_bw": "attention",
    **{op: "elementwise" for op in (
        "add", "addu", "mul", "mulu", "div", "divu", "pow", "powu", "relu", "gelu", "tanh",
    )},
}
OP_CLASSES: tuple[str, ...] = ("bmm", "linear", "elementwise", "softmax", "layernorm")
GEMM_OPS = ("bmm", "linear")
#: fused attention (PyTorch SDPA) forward and backward, op class `attention`: B=batch, M=queries, N=keys,
#: K=head_dim, H=heads (key/value heads = H, no mask: `hybridperf.graphs.attention` prices model graphs' richer rows)
FUSED_OPS = ("attention", "attention_bw")
#: a GEMM that reduces along its operands' rows, torch.mm(a.t(), b) with a (N, M) and b (N, K): a weight
#: gradient (dW = dY^T X reduces over the tokens). Its tensors' contiguous dimensions are M and K, not N
TRANSPOSED_FORM = "mm_t"
#: forms of a `linear` row (module docstring); the first is the default
LINEAR_FORMS = ("linear", "mm", TRANSPOSED_FORM)
#: forms of a `bmm` row: torch.bmm(x, y) (empty, the default) or torch.bmm(a.mT, b)
BMM_FORMS = ("", TRANSPOSED_FORM)

#: Aliases accepted on input (names torch / FX graphs use) -> canonical op name.
OP_ALIASES = {"layernorm": "ln", "layer_norm": "ln", "matmul": "bmm", "addmm": "linear", "sub": "add",
              "subu": "addu", "silu": "gelu", "sigmoid": "tanh", "exp": "tanh"}

#: Number of tensors of size B*H each elementwise op reads and writes (binary ops read two).
_ELEM_TENSORS = {"add": 3, "mul": 3, "div": 3, "pow": 3,
                 "addu": 2, "mulu": 2, "divu": 2, "powu": 2, "relu": 2, "gelu": 2, "tanh": 2}
#: Arithmetic per element (rough FLOP counts of the CUDA implementations; transcendental ops cost more).
_ELEM_FLOPS = {"add": 1, "mul": 1, "div": 1, "addu": 1, "mulu": 1, "divu": 1, "relu": 1,
               "pow": 8, "powu": 8, "gelu": 14, "tanh": 10}


def canonical_op(name: str) -> str:
    """Canonical op name for `name`, or UnknownOpError."""
    key = str(name).strip().lower()
    key = OP_ALIASES.get(key, key)
    if key not in OP_CLASS:
        raise UnknownOpError(f"unknown op {name!r}; supported: {', '.join(sorted(OP_CLASS))}")
    return key


def op_work(op: str, B, M, N, K, H, dtype_bytes: float = 4.0):
    """(flops, bytes) arrays for `op` over shape arrays. Unused shape fields may be NaN.

    bytes counts compulsory DRAM traffic: each operand read once, the output written once.
    """
    B = np.asarray(B, dtype=np.float64)
    if op in FUSED_OPS:  # B sequences, H heads, M queries, N keys, head width K; no causal skipping
        M, N, K, H = (np.asarray(x, dtype=np.float64) for x in (M, N, K, H))
        flops = 4.0 * B * H * M * N * K * (2.5 if op == "attention_bw" else 1.0)
        return flops, B * H * K * 2.0 * (M + N) * dtype_bytes * (2.0 if op == "attention_bw" else 1.0)
    if op in GEMM_OPS:
        M, N, K = (np.asarray(x, dtype=np.float64) for x in (M, N, K))
        flops = 2.0 * B * M * N * K
        if op == "bmm":
            elems = B * M * N + B * N * K + B * M * K
        else:  # weights shared across the batch, plus bias read and added
            elems = B * M * N + N * K + K + B * M * K
            flops = flops + B * M * K
        return flops, elems * dtype_bytes
    H = np.asarray(H, dtype=np.float64)
    n = B * H
    if op == "softmax":  # max, sub, exp, sum, div
        return 5.0 * n, 2.0 * n * dtype_bytes
    if op == "ln":  # mean, var, normalise, scale+shift; reads gamma/beta
        return 8.0 * n, (2.0 * n + 2.0 * H) * dtype_bytes
    return _ELEM_FLOPS[op] * n, _ELEM_TENSORS[op] * n * dtype_bytes
