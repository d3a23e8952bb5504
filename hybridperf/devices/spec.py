"""Device and node specifications: the spec-sheet numbers every prior and feature is built from.

A `DeviceSpec` describes one accelerator; a `NodeSpec` describes a box of identical GPUs and how they
talk to each other (and to other boxes). Peak rates are dense (no sparsity), in TFLOP/s, at boost clock.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path

from hybridperf.errors import SpecError, UnknownDeviceError
from hybridperf.jsonio import read_json_object

#: The dtypes a prior can ask a peak for. `*_tc` are matrix (tensor/matrix-core) rates, the others
#: are plain vector (CUDA-core / stream-processor) rates.
PEAK_KEYS = ("fp32", "fp16", "bf16", "fp64", "int8", "tf32_tc", "fp16_tc", "bf16_tc", "fp8_tc", "int8_tc", "fp32_tc",
             "fp4_tc")


#: bytes in one "GB" of a spec sheet's device memory (an 80 GB H100 has 80 GiB)
DEVICE_GB_BYTES = 2**30


@dataclass(frozen=True)
class DeviceSpec:
    """Spec-sheet description of one accelerator.

    `name` is exactly what `torch.cuda.get_device_name()` prints; `aliases` are short names (H100-SXM).
    `peak_tflops` maps keys of `PEAK_KEYS` to dense TFLOP/s (TOP/s for int8); a missing key means the
    device has no such unit (e.g. no tensor cores on a P100).
    """

    name: str
    vendor: str  # "nvidia" | "amd" | "intel"
    arch: str  # pascal, volta, turing, ampere, ada, hopper, blackwell, cdna1, cdna2, cdna3, xe2
    num_sms: int  # SMs (NVIDIA) or CUs (AMD)
    boost_clock_mhz: float
    mem_gb: float
    mem_bw_gbs: float  # peak DRAM bandwidth, GB/s
    l2_mb: float  # last-level on-chip cache (L2; Infinity Cache not counted)
    peak_tflops: dict[str, float]
    aliases: tuple[str, ...] = ()
    cores_per_sm: int = 64  # fp32 lanes per SM/CU
    smem_per_sm_kb: float = 96.0  # shared memory / LDS per SM
    max_threads_per_sm: int = 2048
    l2_partitions: int = 1  # L2 halves that each cache for their own SMs (2: GA100, GH100, dual-die B200-class)
    mem_type: str = "HBM2"
    ecc_reserved: float = 0.0  # share of memory ECC takes on cards that enable it on GDDR (1/16)
    sfu_exp_per_sm_clock: float = 16.0  # MUFU.EX2 exponentials per SM per clock (softmax); 32 on Blackwell Ultra
    tensor_isa: str = ""  # "mma": the tensor cores take mma.sync only (sm_120 Blackwell); "": the arch's own
    compute_capability: str = ""  # "9.0" as torch.cuda.get_device_capability() gives it (NVIDIA); "": not recorded
    tdp_w: float = 0.0
    pcie_gen: int = 3
    pcie_bw_gbs: float = 16.0  # per direction
    link_name: str = ""  # "NVLink3", "Infinity Fabric", "" for none
    link_bw_gbs: float = 0.0  # total GPU-to-GPU bandwidth per direction, GB/s
    form_factor: str = "PCIe"  # PCIe | SXM | OAM | NVL
    source: str = ""  # the public spec sheet the numbers come from
    notes: str = ""  # how they were read off it (sparse -> dense, derived clocks, assumptions)

    def __post_init__(self):
        _validate(self, _DEVICE_RULES)
        peaks = self.peak_tflops
        if not isinstance(peaks, dict) or not peaks:
            raise SpecError(f"field peak_tflops is {peaks!r}; allowed: an object of dense TFLOP/s per key of "
                            f"{', '.join(PEAK_KEYS)}")
        for key, value in peaks.items():
            if key not in PEAK_KEYS:
                raise SpecError(f"field peak_tflops has key {key!r}; allowed keys: {', '.join(PEAK_KEYS)}")
            check_number(value, f"peak_tflops.{key}", float, 0.0, 1e6, "TFLOP/s")
        check_number(peaks.get("fp32"), "peak_tflops.fp32", float, 0.0, 1e6, "TFLOP/s", lo_open=True)

    @property
    def kernel_arch(self) -> str:
        """The architecture whose kernel designs (GEMM tiles, fused attention, grouped GEMMs) run on this part:
        Blackwell variants as blackwell; a Hopper/Blackwell-generation part whose tensor cores take mma.sync
        only (`tensor_isa` "mma": GeForce and RTX PRO Blackwell, sm_120, have no wgmma or tcgen05) as ada,
        whose kernels (FlashAttention-2, CUTLASS mma.sync GEMMs) are what it runs."""
        arch = "blackwell" if self.arch.startswith("blackwell") else self.arch
        return "ada" if self.tensor_isa == "mma" and arch in ("hopper", "blackwell") else arch

    @property
    def mem_bytes(self) -> float:
        """Device memory a program can allocate, in bytes: a spec sheet's "80 GB" is 80 GiB of HBM (an H100
        reports 81,559 MiB), less what ECC reserves on a GDDR card that enables it (an L40S reports 46,068 of
        49,152 MiB)."""
        return float(self.mem_gb) * DEVICE_GB_BYTES * (1.0 - self.ecc_reserved)

    def peak(self, dtype: str = "fp32", matrix: bool = False) -> float:
        """Best dense peak in FLOP/s for `dtype`; `matrix=True` allows tensor/matrix cores."""
        key = _dtype_key(dtype)
        candidates = [self.peak_tflops.get(key, 0.0)]
        if matrix:
            candidates.append(self.peak_tflops.get(f"{key}_tc", 0.0))
        best = max(candidates)
        if best <= 0 and key != "fp32":
            best = self.peak_tflops.get("fp32", 0.0)
        return best * 1e12

    def has_matrix_units(self, dtype: str) -> bool:
        """Whether the part's tensor/matrix cores take `dtype` operands (fp8, fp4, int8, ...): a `<dtype>_tc`
        peak, or, for fp4, a Blackwell part (data-center or sm_120) whose spec lacks that figure. Engines run
        an fp8 or fp4 checkpoint on a GPU without them weight-only, dequantized into the 16-bit MMA."""
        key = _dtype_key(dtype)
        return self.peak_tflops.get(f"{key}_tc", 0.0) > 0 or (key == "fp4" and self.arch.startswith("blackwell"))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["aliases"] = list(self.aliases)
        return d

    @classmethod
    def from_dict(cls, d: dict, source: str = "") -> "DeviceSpec":
        """A spec from the project's JSON fields (`to_dict`); SpecError naming `source` and the field."""
        return _from_dict(cls, d, source or "device spec")


@dataclass(frozen=True)
class NodeSpec:
    """A node of `gpus_per_node` identical GPUs, with its intra- and inter-node fabrics.

    Bandwidths are per GPU, per direction, in GB/s (what one GPU can push into the fabric);
    latencies are one-way software+hardware latencies of a small message, in microseconds.
    `intra_topology`: "nvswitch" (all-to-all at full rate), "nvlink_pairs" (GPUs bridged in pairs,
    PCIe between pairs), "pcie" (everything through the PCIe switch / host), "mesh" (every GPU linked
    directly to every other, e.g. AMD Infinity Fabric; `pair_bw_gbs` is one link, `intra_bw_gbs` all).
    """

    name: str
    device: str  # DeviceSpec name
    gpus_per_node: int
    intra_topology: str
    intra_bw_gbs: float
    intra_latency_us: float
    inter_bw_gbs: float = 25.0  # InfiniBand HDR 200 Gb/s per GPU = 25 GB/s
    inter_latency_us: float = 5.0
    inter_name: str = "InfiniBand"
    pair_bw_gbs: float = 0.0  # for nvlink_pairs: the bridge's per-direction bandwidth (mesh: one link's)
    inter_node_bw_gbs: float = 0.0  # all NICs of the node together, per direction; 0: gpus_per_node * inter_bw_gbs
    nic_line_gbs: float = 0.0  # line rate of a GPU's NIC port as NCCL's tuner sees it; 0: inter_bw_gbs
    aliases: tuple[str, ...] = ()
    gpus_per_host: int = 0  # GPUs under one host OS (4 on an NVL72 tray); 0: gpus_per_node
    source: str = ""  # the public spec sheet the numbers come from
    notes: str = ""
    arch: str = ""  # the GPUs' architecture when `device` is not a catalog name (a JSON spec's); "": the catalog's
    # how this node's collective measurements are timed, predict-collective's `--timing auto`: `graph`, back to back
    # (nccl-tests, aiconfigurator's tables) or `call`, each call alone with its host's floor (Vidur's profiles)
    collective_timing: str = "graph"

    def __post_init__(self):
        _validate(self, _NODE_RULES)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["aliases"] = list(self.aliases)
        return d

    @classmethod
    def from_dict(cls, d: dict, source: str = "") -> "NodeSpec":
        """A node from its JSON fields (`to_dict`); SpecError naming `source` and the field."""
        return _from_dict(cls, d, source or "node spec")


#: what each spec field may hold: (type, lowest, highest, unit, whether the lowest is excluded);
#: strings: (str, None, allowed values or None). Ranges are generous physical bounds, so that a typo
#: (0 SMs, bandwidth in bytes/s) fails here rather than as an inf or a negative latency later.
_DEVICE_RULES = {
    "name": (str, None, None), "vendor": (str, None, ("nvidia", "amd", "intel")), "arch": (str, None, None),
    "num_sms": (int, 1, 100_000, "SMs/CUs", False),
    "boost_clock_mhz": (float, 0.0, 10_000.0, "MHz", True),
    "mem_gb": (float, 0.0, 1e5, "GB", True),
    "mem_bw_gbs": (float, 0.0, 1e6, "GB/s", True),
    "l2_mb": (float, 0.0, 1e5, "MB", True),
    "cores_per_sm": (int, 1, 4096, "lanes per SM", False),
    "smem_per_sm_kb": (float, 0.0, 1e5, "KB", True),
    "max_threads_per_sm": (int, 1, 1_000_000, "threads", False),
    "l2_partitions": (int, 1, 64, "partitions", False),
    "mem_type": (str, "", None), "ecc_reserved": (float, 0.0, 0.5, "share of memory", False),
    "sfu_exp_per_sm_clock": (float, 0.0, 1024.0, "exponentials per SM per clock", True),
    "tdp_w": (float, 0.0, 1e5, "W (0: unknown)", False),
    "pcie_gen": (int, 1, 16, "", False), "pcie_bw_gbs": (float, 0.0, 1e5, "GB/s", True),
    "link_name": (str, "", None), "link_bw_gbs": (float, 0.0, 1e6, "GB/s (0: no link)", False),
    "form_factor": (str, None, None), "tensor_isa": (str, "", ("", "mma")),
    "compute_capability": (str, "", None),
}
TOPOLOGIES = ("nvswitch", "nvlink_pairs", "pcie", "mesh")
#: how a collective is timed (`hybridperf.priors.collectives`)
COLLECTIVE_TIMINGS = ("graph", "call")
_NODE_RULES = {
    "name": (str, None, None), "device": (str, None, None),
    "gpus_per_node": (int, 1, 100_000, "GPUs", False),
    "intra_topology": (str, None, TOPOLOGIES),
    "intra_bw_gbs": (float, 0.0, 1e6, "GB/s", True),
    "intra_latency_us": (float, 0.0, 1e6, "us", False),
    "inter_bw_gbs": (float, 0.0, 1e6, "GB/s", True),
    "inter_latency_us": (float, 0.0, 1e6, "us", False),
    "inter_name": (str, "", None), "arch": (str, "", None),
    "pair_bw_gbs": (float, 0.0, 1e6, "GB/s (0: none)", False),
    "inter_node_bw_gbs": (float, 0.0, 1e8, "GB/s (0: derived)", False),
    "nic_line_gbs": (float, 0.0, 1e6, "GB/s (0: inter_bw_gbs)", False),
    "collective_timing": (str, None, COLLECTIVE_TIMINGS),
}


def check_number(value, field: str, kind: type, lo: float, hi: float, unit: str = "", lo_open: bool = False):
    """`value` as a number of `kind` (int or float) in [lo, hi] ((lo, hi] with `lo_open`), else
    SpecError naming the field and the allowed range. Booleans, strings, null, lists, NaN and inf are
    refused; an integer field takes an integral float (108.0) but not 108.7."""
    low = "(" if lo_open else "["
    allowed = f"{'an integer' if kind is int else 'a number'} in {low}{lo:g}, {hi:g}]" + (f" {unit}" if unit else "")
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"
    if ok:
        try:
            ok = math.isfinite(float(value)) and (value > lo if lo_open else value >= lo) and value <= hi
        except OverflowError:  # an integer beyond any float
            ok = False
    if ok and kind is int:
        ok = float(value).is_integer()
    if not ok:
        shown = repr(value)
        raise SpecError(f"field {field} is {shown if len(shown) <= 40 else shown[:37] + '...'}; allowed: {allowed}")
    return int(value) if kind is int else value


def _validate(spec, rules: dict) -> None:
    """Check every field of a frozen spec against `rules`; integral floats in integer fields become ints."""
    for name, rule in rules.items():
        value = getattr(spec, name)
        if rule[0] is str:
            empty_ok, choices = rule[1] == "", rule[2]
            if not isinstance(value, str) or (not value.strip() and not empty_ok) \
                    or (choices is not None and value not in choices):
                what = f"one of {', '.join(map(repr, choices))}" if choices else "a string" + ("" if empty_ok else " (not empty)")
                raise SpecError(f"field {name} is {value!r}; allowed: {what}")
            continue
        object.__setattr__(spec, name, check_number(value, name, *rule))
    aliases = spec.aliases
    if isinstance(aliases, str) or not isinstance(aliases, (list, tuple)) \
            or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise SpecError(f"field aliases is {aliases!r}; allowed: a list of names")
    object.__setattr__(spec, "aliases", tuple(aliases))


def _from_dict(cls, d: dict, source: str):
    """`cls(**d)` for a spec read from a file: unknown or missing fields and out-of-range values raise
    one SpecError that names `source`."""
    if not isinstance(d, dict):
        raise SpecError(f"{source}: expected a JSON object of {cls.__name__} fields")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise SpecError(f"{source}: unknown fields {unknown}; allowed: {sorted(names)}")
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING and f.name not in d]
    if required:
        raise SpecError(f"{source}: missing fields {required}")
    try:
        return cls(**d)
    except SpecError as e:
        raise SpecError(f"{source}: {e}") from None


_DTYPE_KEYS = {
    "float32": "fp32", "fp32": "fp32", "float": "fp32", "torch.float32": "fp32",
    "float16": "fp16", "fp16": "fp16", "half": "fp16", "torch.float16": "fp16",
    "bfloat16": "bf16", "bf16": "bf16", "torch.bfloat16": "bf16",
    "float64": "fp64", "fp64": "fp64", "double": "fp64",
    "tf32": "tf32", "fp8": "fp8", "float8": "fp8", "float8_e4m3fn": "fp8", "int8": "int8",
    "fp4": "fp4", "nvfp4": "fp4", "int4": "int4",
}

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8, "tf32": 4, "fp8": 1, "int8": 1, "fp4": 0.5, "int4": 0.5}


def _dtype_key(dtype: str) -> str:
    try:
        return _DTYPE_KEYS[str(dtype).strip().lower()]
    except KeyError:
        raise UnknownDeviceError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}"
                                 " (float32, float16, bfloat16 and torch's names are accepted too)") from None


def dtype_key(dtype: str) -> str:
    """Canonical short dtype key (fp32, fp16, bf16, ...) for any common spelling."""
    return _dtype_key(dtype)


def from_neusight_json(d: dict, source: str = "") -> DeviceSpec:
    """Build a DeviceSpec from a NeuSight artifact device config (Mem_Bw, Num_Sm, Freq, SingleFLOPs...)."""
    required = ("Device", "Mem_Bw", "Num_Sm", "Freq", "L2Cache", "Dev_Mem")
    missing = [k for k in required if k not in d]
    if missing:
        raise UnknownDeviceError(f"NeuSight device JSON {source} lacks {missing}")
    if not isinstance(d["Device"], str) or not d["Device"].strip():
        raise SpecError(f"{source}: field Device is {d['Device']!r}; allowed: the GPU's name")
    name = d["Device"]
    amd = "SingleFLOPsMM" in d or name.upper().startswith("AMD")
    flops_key = "SingleFLOPsVEC" if amd and "SingleFLOPsVEC" in d else "SingleFLOPs"
    if flops_key not in d:
        raise UnknownDeviceError(f"NeuSight device JSON {source} has no positive SingleFLOPs")
    try:
        num = {key: check_number(d.get(key, default), key, kind, lo, hi, unit, lo_open)
               for key, (kind, lo, hi, unit, lo_open, default) in _NEUSIGHT_RULES.items()
               if key in d or default is not None}
        num[flops_key] = check_number(d[flops_key], flops_key, float, 0.0, 1e9, "GFLOP/s", lo_open=True)
        # GFLOP/s of one FMA per lane a clock (NeuSight's AMD files count a CU's 16-lane SIMDs in Core_Per_SM: 4)
        per_sm = num["Core_Per_SM"] * (AMD_SIMD_LANES if amd and num["Core_Per_SM"] < AMD_SIMD_LANES else 1)
        lanes = num["Num_Sm"] * per_sm * 2.0 * num["Freq"] / 1e3
        if not lanes / UNIT_SLACK <= num[flops_key] <= lanes * UNIT_SLACK:
            raise SpecError(f"field {flops_key} is {num[flops_key]:g} GFLOP/s, but Num_Sm x Core_Per_SM lanes x 2 x "
                            f"Freq (MHz) give {lanes:.0f}: give {flops_key} in GFLOP/s, Freq in MHz and Core_Per_SM as "
                            "NeuSight's files do")
        peaks = {"fp32": num[flops_key] / 1e3}
        if amd:
            peaks["fp32_tc"] = check_number(d.get("SingleFLOPsMM", 0.0), "SingleFLOPsMM", float, 0.0, 1e9,
                                            "GFLOP/s") / 1e3
        return DeviceSpec(
            name=name, vendor="amd" if amd else "nvidia", arch="unknown", num_sms=num["Num_Sm"],
            boost_clock_mhz=num["Freq"], mem_gb=num["Dev_Mem"], mem_bw_gbs=num["Mem_Bw"], l2_mb=num["L2Cache"],
            peak_tflops=peaks, cores_per_sm=num["Core_Per_SM"],
        )
    except SpecError as e:
        raise SpecError(f"{source or 'NeuSight device JSON'}: {e}") from None


#: how far a NeuSight file's fp32 rate may lie from its lanes x 2 FLOP x clock before it is taken for a unit slip
#: (TFLOP/s or GHz for GFLOP/s or MHz: 1000x); packed fp32 (MI210) and a defaulted Core_Per_SM stay within 2x
UNIT_SLACK = 4.0
#: lanes of one SIMD of an AMD compute unit, which NeuSight's AMD files count in Core_Per_SM (MI100: 4)
AMD_SIMD_LANES = 16
#: NeuSight's device-file fields: (type, lowest, highest, unit, lowest excluded, default when absent)
#: (the ranges refuse a file in other units: GHz, TB/s, MiB or KB would fall outside them)
_NEUSIGHT_RULES = {
    "Num_Sm": (int, 1, 100_000, "SMs", False, None),
    "Core_Per_SM": (int, 1, 4096, "lanes per SM", False, 64),
    "Freq": (float, 100.0, 10_000.0, "MHz", False, None),
    "Dev_Mem": (float, 0.0, 4096.0, "GB", True, None),
    "Mem_Bw": (float, 10.0, 1e6, "GB/s", False, None),
    "L2Cache": (float, 0.0, 4096.0, "MB", True, None),
}


def load_spec_file(path: str | Path) -> DeviceSpec:
    """Load a device spec JSON, in the NeuSight artifact format or the project's own format."""
    p = Path(path)
    d = read_json_object(p, error=UnknownDeviceError)
    if "Device" in d:
        return from_neusight_json(d, str(p))
    return DeviceSpec.from_dict(d, source=str(p))
