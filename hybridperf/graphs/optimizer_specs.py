"""Which foreach ops each `torch.optim` optimizer runs in one step and what state it keeps.

The declarations the model graph (its memory, its validation of `--optimizer`) and the step's kernels
(`hybridperf.graphs.optimizer`, whose docstring records how they were read) share; kept apart from the
kernels so that the graph can use them without importing the module that builds on the graph.
"""
from __future__ import annotations

from dataclasses import dataclass

from hybridperf.errors import InputError


@dataclass(frozen=True)
class ForeachOp:
    """One multi-tensor op of the step: the ATen op, its tensor lists (depth) and full-size streams."""

    name: str
    aten: str
    depth: int
    streams: int  # tensors read + written, each once, of the parameter's size
    scalarlist: bool = False
    steps: bool = False  # runs over the one-element step counters (kept on the device by fused Adam)


@dataclass(frozen=True)
class OptimizerSpec:
    ops: tuple
    states: int  # parameter-sized state tensors kept between steps
    step_temps: int  # parameter-sized temporaries allocated inside the step


_ADAM = (ForeachOp("lerp_m", "_foreach_lerp_", 2, 3), ForeachOp("mul_v", "_foreach_mul_", 1, 2),
         ForeachOp("addcmul_v", "_foreach_addcmul_", 3, 3), ForeachOp("sqrt_v", "_foreach_sqrt", 2, 2),
         ForeachOp("div_bias", "_foreach_div_", 1, 2, scalarlist=True), ForeachOp("add_eps", "_foreach_add_", 1, 2),
         ForeachOp("addcdiv_p", "_foreach_addcdiv_", 3, 4, scalarlist=True))
OPTIMIZERS = {
    "sgd": OptimizerSpec((ForeachOp("add_p", "_foreach_add_", 2, 3),), states=0, step_temps=0),
    "sgd-momentum": OptimizerSpec((ForeachOp("mul_buf", "_foreach_mul_", 1, 2),
                                   ForeachOp("add_buf", "_foreach_add_", 2, 3),
                                   ForeachOp("add_p", "_foreach_add_", 2, 3)), states=1, step_temps=0),
    "adam": OptimizerSpec(_ADAM, states=2, step_temps=1),
    "adamw": OptimizerSpec((ForeachOp("mul_decay", "_foreach_mul_", 1, 2), *_ADAM), states=2, step_temps=1),
    "adam-fused": OptimizerSpec((ForeachOp("add_step", "_foreach_add_", 1, 2, steps=True),
                                 ForeachOp("fused_adam", "_fused_adam_", 4, 7)), states=2, step_temps=0),
}


def optimizer_spec(name: str) -> OptimizerSpec:
    """The spec of optimizer `name`, or InputError naming the known ones."""
    key = str(name).strip().lower()
    if key not in OPTIMIZERS:
        raise InputError(f"unknown optimizer {name!r}; supported: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[key]


def optimizer_state_bytes(n_params: float, optimizer: str, dtype_bytes: float = 4.0) -> tuple[float, float]:
    """(state bytes kept between steps, temporary bytes inside the step) for `n_params` parameters."""
    spec = optimizer_spec(optimizer)
    return spec.states * n_params * dtype_bytes, spec.step_temps * n_params * dtype_bytes
