"""Device catalog: look up a GPU or node by its torch name, an alias, or a JSON spec file."""
from __future__ import annotations

import math
from dataclasses import replace
from functools import cache
from pathlib import Path

from hybridperf.devices.catalog import devices as _catalog_devices
from hybridperf.devices.nodes import nodes as _catalog_nodes
from hybridperf.devices.spec import (
    DTYPE_BYTES,
    PEAK_KEYS,
    DeviceSpec,
    NodeSpec,
    dtype_key,
    from_neusight_json,
    load_spec_file,
)
from hybridperf.errors import UnknownDeviceError

__all__ = [
    "DTYPE_BYTES", "PEAK_KEYS", "DeviceSpec", "NodeSpec", "dtype_key", "from_neusight_json",
    "load_spec_file", "get_device", "find_node", "get_node", "list_devices", "list_nodes", "generic_spec_note",
]


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def _index(items) -> dict:
    """Normalised name/alias -> entry; two entries answering to one name is a catalog error."""
    idx = {}
    for it in items:
        for key in (it.name, *it.aliases):
            other = idx.setdefault(_norm(key), it)
            if other is not it and other.name != it.name:
                raise UnknownDeviceError(f"catalog: {key!r} of {it.name!r} also names {other.name!r}; "
                                         f"names and aliases must differ after dropping case and punctuation")
    return idx


@cache
def _device_index() -> dict:
    return _index(_catalog_devices())


@cache
def _node_index() -> dict:
    return _index(_catalog_nodes())


#: brand words a driver or a user may put before the model name ("NVIDIA H100", "Tesla V100", "AMD
#: Instinct MI210"); a name the catalog does not hold verbatim is looked up again without them
_BRAND_WORDS = ("nvidia", "tesla", "geforce", "quadro", "amd", "instinct", "radeon", "intel")


def _without_brand(key: str) -> str | None:
    """A normalised name with its first brand word removed, None when it starts with none."""
    brand = next((b for b in _BRAND_WORDS if key.startswith(b) and len(key) > len(b)), None)
    return None if brand is None else key[len(brand):]


def _debrand(key: str) -> str:
    """A normalised name without its leading brand words."""
    rest = _without_brand(key)
    return key if rest is None else _debrand(rest)


@cache
def _debranded_index() -> dict:
    """Brand-free name/alias -> entry, for a query that leaves out a brand word the catalog name carries
    ("H100 80GB HBM3"); a key two GPUs share after dropping brands answers to neither."""
    idx: dict = {}
    for it in _catalog_devices():
        for key in {_debrand(_norm(k)) for k in (it.name, *it.aliases)}:
            idx[key] = it if idx.get(key, it) is it else None
    return idx


def _lookup_device(name: str) -> DeviceSpec | None:
    """The catalog GPU `name` denotes: verbatim (normalised), else with leading brand words removed from it,
    from the catalog's names, or from both."""
    key = _norm(name)
    index = _device_index()
    hit = index.get(key)
    while hit is None:
        key = _without_brand(key)
        if key is None:
            return _debranded_index().get(_debrand(_norm(name)))
        hit = index.get(key)
    return hit


def get_device(name_or_path: str | DeviceSpec) -> DeviceSpec:
    """Resolve a device: a DeviceSpec, a catalog name/alias (case/punctuation-insensitive,
    underscores as spaces, brand words such as "NVIDIA" or "Tesla" optional), a node name (its
    GPU), or the path of a JSON spec."""
    if isinstance(name_or_path, DeviceSpec):
        return name_or_path
    s = str(name_or_path)
    hit = _lookup_device(s)
    if hit is not None:
        return hit
    node = _node_index().get(_norm(s))
    if node is not None:
        gpu = _device_index().get(_norm(node.device))
        if gpu is None:
            raise UnknownDeviceError(f"catalog node {node.name!r} names GPU {node.device!r}, which the catalog lacks")
        return gpu
    if s.lower().endswith(".json") or Path(s).is_file():
        if not Path(s).is_file():
            raise UnknownDeviceError(f"device spec file not found: {s}")
        return _enrich_from_catalog(load_spec_file(s))
    raise UnknownDeviceError(
        f"unknown device {s!r}; run `hybridperf devices` for the catalog, or pass a JSON spec path"
    )


def _closest_variant(base: DeviceSpec, spec: DeviceSpec) -> DeviceSpec:
    """The catalog board of `base`'s vendor and architecture whose core count (SMs x cores per SM:
    NeuSight's files count a Pascal SM as two of 64 cores), DRAM bandwidth and memory size are closest
    to `spec`'s (in that order), `base` itself on a tie: a name such as "NVIDIA H100" denotes the SXM
    board in the catalog, while a file giving 114 SMs and 2 TB/s describes the PCIe one, whose TDP
    (350 W, not 700) caps its arithmetic."""
    def distance(d: DeviceSpec):
        bw = abs(math.log(max(d.mem_bw_gbs, 1e-9) / max(spec.mem_bw_gbs, 1e-9)))
        # the file's SMs at the board's own cores per SM too: a file leaving Core_Per_SM out (64 by default) names
        # 132 SMs of an H100, not the H20's 78 SMs of 128 cores nearest 132 x 64
        cores = min(abs(d.num_sms * d.cores_per_sm - spec.num_sms * spec.cores_per_sm),
                    abs(d.num_sms - spec.num_sms) * d.cores_per_sm)
        return cores, round(bw, 2), abs(d.mem_gb - spec.mem_gb)

    siblings = [d for d in _catalog_devices() if d.vendor == base.vendor and d.arch == base.arch]
    best = min(siblings, key=distance)
    return base if distance(base) <= distance(best) else best


def _enrich_from_catalog(spec: DeviceSpec) -> DeviceSpec:
    """A spec loaded from a NeuSight-format file carries only SMs, clock, fp32 peak, memory and L2.
    When it names a catalog GPU, the catalog supplies the rest (architecture, TDP, memory type, other
    dtypes' peaks, interconnect) from the board of that GPU the file's numbers describe
    (`_closest_variant`), and the file's own numbers take precedence."""
    base = _lookup_device(spec.name)
    if base is None or spec.arch != "unknown":
        return spec
    base = _closest_variant(base, spec)
    return replace(base, num_sms=spec.num_sms, boost_clock_mhz=spec.boost_clock_mhz, mem_gb=spec.mem_gb,
                   mem_bw_gbs=spec.mem_bw_gbs, l2_mb=spec.l2_mb, cores_per_sm=spec.cores_per_sm,
                   peak_tflops={**base.peak_tflops, **spec.peak_tflops})


def generic_spec_note(spec: DeviceSpec) -> str | None:
    """A one-line note when `spec` lacks what the priors read beyond the NeuSight fields (a NeuSight-format
    file naming a GPU the catalog does not hold), else None."""
    if spec.arch != "unknown":
        return None
    return (f"{spec.name} is not in the catalog and its spec gives no architecture, TDP or memory type: "
            f"no power cap, issue limit or traced GEMM tiles apply and DRAM is taken as HBM "
            f"(`hybridperf devices --spec NAME` prints a catalog GPU's full spec to edit instead)")


def find_node(name: str) -> NodeSpec | None:
    """The catalog node `name` names (its name or an alias), None when it names none."""
    return _node_index().get(_norm(str(name)))


def get_node(name: str | NodeSpec) -> NodeSpec:
    """Resolve a node (e.g. `DGX-H100`) by name or alias."""
    if isinstance(name, NodeSpec):
        return name
    hit = find_node(name)
    if hit is None:
        raise UnknownDeviceError(f"unknown node {name!r}; known: {', '.join(n.name for n in _catalog_nodes())}")
    return hit


def list_devices() -> list[DeviceSpec]:
    """All catalog devices."""
    return list(_catalog_devices())


def list_nodes() -> list[NodeSpec]:
    """All catalog nodes."""
    return list(_catalog_nodes())
