"""Kernels the backward alone launches: sums of a tensor's gradients, slice and chunk gradients, casts."""
from __future__ import annotations

from hybridperf.graphs.primitives import F32, HALF_DTYPES, _k


def grad_cat(p, elems, train):
    """The backward's torch.cat of the gradients of a chunked tensor (chunk's backward) of `elems`
    elements: one copy, launched in the backward only."""
    return [_k(f"{p}.grad_cat", "misc:copy", nbytes=2 * elems * F32, tag="grad_cat")] if train else []


def slice_grads(p, rows, width, parts, train):
    """The backward of `parts` equal slices of a (rows, width) tensor (ATen's slice_backward, e.g. RoPE's
    halves): each slice's gradient is copied into a zero-filled gradient of the whole tensor, two kernels
    launched in the backward only (autograd then adds the parts' gradients: `grad_sums`)."""
    if not train:
        return []
    return [k for i in range(parts) for k in (
        _k(f"{p}.slice{i}_zeros", "misc:mask", nbytes=rows * width * F32, tag="grad_zeros"),
        _k(f"{p}.slice{i}_copy", "misc:copy", nbytes=2 * rows * width // parts * F32, tag="grad_cat"))]


def grad_cast(p, elems, train):
    """A gradient cast to the model's half dtype in the backward only, over `elems` elements: an fp32 op
    that read a half-precision tensor (type promotion, no forward cast) hands it an fp32 gradient."""
    return [_k(f"{p}.grad_cast", "misc:cast", nbytes=2 * elems * F32, tag="grad_cast", dtypes=HALF_DTYPES)] \
        if train else []


def grad_sums(p, rows, h, readers, train, fp32=False):
    """The backward's sums of the gradients of a (rows, h) tensor that `readers` forward ops read:
    `readers - 1` adds, launched in the backward only (no forward kernel); `fp32`: the tensor is an
    upcast copy, so are its gradients."""
    return [_k(f"{p}.grad_sum{i}", "add", rows, H=h, tag="grad_sum", fp32=fp32)
            for i in range(readers - 1)] if train else []
