"""Per-call latency floor: what the smallest kernel of each op class costs end to end.

With NeuSight's methodology (CUDA events around one eager PyTorch call, mean of the 5 fastest of 25),
even an empty-sized kernel costs tens of microseconds: kernel launch, the event pair, and for some
ops a second kernel or host-side work (e.g. LayerNorm's stats, linear's bias). Across the five training
GPUs of the artifact (P4 ... A100) the 1st percentile of each op class sits within ~20% of these values,
so the floor is modelled as a per-op-class constant (device-agnostic); the residual model refines it.
"""
from __future__ import annotations

#: floor in ms per op class for the NeuSight measurement harness (PyTorch 2.1, CUDA events)
FLOOR_MS = {
    "elementwise": 0.026,
    "bmm": 0.032,
    "softmax": 0.033,
    "layernorm": 0.047,
    "linear": 0.056,
}
DEFAULT_FLOOR_MS = 0.03


def launch_floor_ms(op_class: str) -> float:
    """Latency floor (ms) of one timed call of an op of `op_class`."""
    return FLOOR_MS.get(op_class, DEFAULT_FLOOR_MS)
