"""Activations and dropout in eager PyTorch."""
from __future__ import annotations

from hybridperf.errors import InputError
from hybridperf.graphs.fusion import BINARY_POINTWISE
from hybridperf.graphs.layers.grads import grad_sums
from hybridperf.graphs.primitives import vec


def mlp_activation(p, act, tok, f, train=False):
    act = act.lower()
    if act in ("gelu_new", "gelu_pytorch_tanh_eager", "gelu_fast"):
        # NewGELUActivation in eager: 0.5*x*(1+tanh(c*(x+0.044715*x^3))) = 8 kernels
        return [vec(f"{p}.gelu_{i}", op, tok, f, tag="internal" if op in BINARY_POINTWISE else "")
                for i, op in enumerate(("mulu", "powu", "mulu", "add", "mulu", "tanh", "addu", "mul"))] \
            + grad_sums(f"{p}.gelu_x", tok, f, 3, train)  # x: 0.5 * x, x ** 3 and x + 0.044715 * x ** 3
    if act in ("relu",):
        return [vec(f"{p}.relu", "relu", tok, f)]
    if act in ("gelu", "gelu_python", "gelu_pytorch_tanh", "silu", "swish"):
        return [vec(f"{p}.act", "gelu", tok, f)]
    raise InputError(f"unsupported activation {act!r}")


def dropout(p, tok, h, train):
    return [vec(p, "mul", tok, h, tag="dropout")] if train else []
