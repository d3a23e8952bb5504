"""The model-family registry: one `Family` declaration per module of `hybridperf.graphs.families`.

A family is everything `build_graph` needs to know about a HF `model_type` beyond the shared layers: the
forward builder (prefill and training), the decode-step builder (causal LMs only), the number of tiny
kernels a decode step launches before its first layer, which of its model_types have a tensor-parallel
split, what its layers save for the backward, and for a model_type `graphs.config` does not know, the
parser of its HF config. The families package imports each of its modules and registers its `FAMILY`;
`register` is the hook for a family defined anywhere else.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from hybridperf.errors import InputError
from hybridperf.graphs.config import PLUGIN_PARSERS

#: model_type -> its Family, in registration order
FAMILIES: dict = {}


@dataclass(frozen=True)
class Family:
    """One model family. `forward(cfg, batch, seq, train)` and `decode(cfg, batch, seq)` return `Block`s;
    `setup_kernels`: per model_type, the position/mask/rotary kernels of a decode step's setup. `parse(d, source)`:
    the `ModelConfig` of a HF config dict of a model_type `graphs.config` does not parse itself."""

    names: tuple  # the HF model_types it builds
    forward: Callable
    decode: Callable | None = None
    setup_kernels: dict = field(default_factory=dict)
    parse: Callable | None = None
    tensor_parallel: tuple = ()  # names whose layers have a tensor/pipeline split (`graphs.tensor_parallel`)
    #: model_type -> (fp32, 16-bit) saved-activation coefficients (`graphs.memory`), or the counted model_type
    #: whose coefficients it borrows; a model_type without an entry has no training-memory estimate
    activation: dict = field(default_factory=dict)
    #: (cfg, tokens, dtype_bytes) -> [(bytes, layers)]: what its layers save beyond `activation`'s coefficients
    #: (a top-k MoE's routing state, latent attention), each per layer over `layers` layers
    saved_extra: Callable | None = None
    #: cfg -> cached elements per token and layer (default: keys and values, 2 x kv heads x head_dim), or a dict of
    #: them by layer type ("full_attention", "sliding_attention")
    kv_cache_width: Callable | None = None
    #: (cfg, dtype bytes) -> bytes each sequence's cache holds whatever its length (linear-attention states)
    state_bytes: Callable | None = None
    position_limited: bool = False  # learned or rotary position tables cap the sequence at `max_positions`
    softmax_fp32: tuple = ()  # names whose eager attention takes its softmax in fp32 in a half-precision model
    trains: bool = True  # False: training is refused (a backward not counted against HF's)

    @property
    def causal_lm(self) -> bool:
        """A decoder-only causal LM (it has a decode step): its forward returns a key/value cache and its loss
        casts the logits to fp32."""
        return self.decode is not None


def config_int(d: dict, key: str, source: str, minimum: int = 1) -> int:
    """Field `key` of a plugin family's HF config `d` as an integer >= `minimum` (a float like 4.0 passes);
    InputError naming the field and the config otherwise."""
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not float(v).is_integer() or v < minimum:
        raise InputError(f"{source}: config field {key!r} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def register(family: Family) -> Family:
    """Add `family` under each of its names; a name another family holds already is an error."""
    if isinstance(family.names, str) or not family.names or not all(isinstance(n, str) and n for n in family.names):
        raise InputError(f"a family's names are a non-empty tuple of model_types, got {family.names!r}")
    taken = sorted(n for n in family.names if n in FAMILIES and FAMILIES[n] is not family)
    if taken:
        raise InputError(f"model family names already registered: {', '.join(taken)}")
    FAMILIES.update({n: family for n in family.names})
    if family.parse is not None:
        PLUGIN_PARSERS.update({n: family.parse for n in family.names})
    return family


def family_of(model_type: str) -> Family:
    """The registered family of `model_type` (InputError if none)."""
    if model_type not in FAMILIES:
        raise InputError(f"no model family registered for {model_type!r}; registered: {', '.join(FAMILIES)}")
    return FAMILIES[model_type]


def decode_families() -> list[str]:
    """The model_types that have a decode step."""
    return [n for n, f in FAMILIES.items() if f.decode is not None]
