"""The vocabulary a model graph is written in: one kernel row (`_k`) and its constructors (GEMMs, row-wise
and element-wise ops, copies and casts), and the `Block` a family repeats. Families, attention
implementations and mixed precision all build on these, so they live below all of them."""
from __future__ import annotations

from dataclasses import dataclass, field

F32 = 4
MODEL_DTYPES = ("fp32", "fp16", "bf16")
HALF_DTYPES = ("fp16", "bf16")
#: tags of kernels that only the backward launches (`grad_sums`, `grad_cat`)
BACKWARD_ONLY = ("grad_sum", "grad_cat", "grad_zeros", "grad_cast", "grad_attn")


def _k(name, op, B=1, M=0, N=0, K=0, H=0, nbytes=0.0, params=0, bias=False, tag="", fp32=False, dtypes=None,
       form=""):
    # extra_nbytes: further full-size inputs of a fused kernel (`_fused_kernel`); fp32: the kernel runs in
    # fp32 whatever the model's dtype (HF upcasts); dtypes: the model dtypes it is launched in (None: all);
    # form: a GEMM's form (hybridperf.ops.LINEAR_FORMS / BMM_FORMS; a linear's is `mm` unless given)
    return {"name": name, "op": op, "B": int(B), "M": int(M), "N": int(N), "K": int(K), "H": int(H),
            "nbytes": float(nbytes), "params": int(params), "bias": bool(bias), "tag": tag, "extra_nbytes": 0.0,
            "fp32": bool(fp32), "dtypes": tuple(dtypes) if dtypes else None,
            "form": form or ("mm" if op == "linear" else ""), "attn": ""}


def linear(name, tokens, n_in, n_out, bias=True, conv1d=False):
    """nn.Linear, or GPT-2's Conv1D (`conv1d`: addmm with the weight stored (in, out)), over `tokens` rows:
    NeuSight's linear (B=1, M=tokens, N=n_in, K=n_out). Only nn.Linear with a bias has the `linear` form."""
    return _k(name, "linear", 1, tokens, n_in, n_out, params=n_in * n_out + (n_out if bias else 0), bias=bias,
              form="linear" if bias and not conv1d else "mm")


def bmm(name, b, m, n, k):
    return _k(name, "bmm", b, m, n, k)


def grouped_gemm(name, groups, rows, n_in, n_out, experts):
    """One projection of a top-k MoE's experts (HF's grouped_mm): `groups` experts that received
    tokens, `rows` tokens each (`expert_groups`), weights (`experts`, n_in, n_out). Written as a bmm
    of `groups` GEMMs, one kernel, which is how CUDA runs it in bf16 on Hopper and Blackwell; on other
    devices and dtypes PyTorch launches one GEMM per group (`graphs.grouped`, at prediction time)."""
    return _k(name, "bmm", groups, rows, n_in, n_out, params=experts * n_in * n_out, tag="grouped")


def expert_groups(experts: int, top_k: int, tokens: int) -> tuple[int, int]:
    """(experts that receive tokens, tokens each) when `tokens` tokens each pick `top_k` of `experts`
    experts uniformly (balanced routing, what a router of random weights gives): an expert is missed by
    all tokens with probability (1 - top_k / experts)^tokens."""
    pairs = tokens * top_k
    active = experts * (1.0 - (1.0 - top_k / experts) ** tokens)
    groups = max(min(int(round(active)), experts, pairs), 1)
    return groups, -(-pairs // groups)


def vec(name, op, rows, h, tag="", fp32=False):
    return _k(name, op, rows, H=h, tag=tag, fp32=fp32)


def fp32_vec(name, op, rows, h, tag=""):
    """An element-wise kernel computed in fp32 whatever the model's dtype (the state of a recurrent layer)."""
    return vec(name, op, rows, h, tag=tag, fp32=True)


def ln(name, rows, h):
    return _k(name, "ln", rows, H=h, params=2 * h)


def misc(name, kind, nbytes, tag="", fp32=False):
    return _k(name, f"misc:{kind}", nbytes=nbytes, tag=tag, fp32=fp32)


def cast(name, elems, dtypes=HALF_DTYPES):
    """`.to()` between the model's half dtype and fp32 over `elems` elements: a kernel only when the
    model runs in one of `dtypes` (a no-op in fp32); it reads one width and writes the other."""
    return _k(name, "misc:cast", nbytes=2 * elems * F32, dtypes=dtypes)


def gather(name, tokens, h, table_rows):
    return _k(name, "misc:gather", H=h, nbytes=(2 * tokens * h + tokens * 2) * F32, params=table_rows * h)


@dataclass
class Block:
    """A run of kernels repeated `count` times (one transformer layer type, or the embeddings/head)."""

    name: str
    count: int
    kernels: list = field(default_factory=list)
    kind: str = "layer"  # pre | layer | post
