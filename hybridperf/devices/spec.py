"""Device and node specifications: the spec-sheet numbers every prior and feature is built from.

A `DeviceSpec` describes one accelerator; a `NodeSpec` describes a box of identical GPUs and how they
talk to each other (and to other boxes). Peak rates are dense (no sparsity), in TFLOP/s, at boost clock.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

from hybridperf.errors import UnknownDeviceError
from hybridperf.jsonio import read_json_object

#: The dtypes a prior can ask a peak for. `*_tc` are matrix (tensor/matrix-core) rates, the others
#: are plain vector (CUDA-core / stream-processor) rates.
PEAK_KEYS = ("fp32", "fp16", "bf16", "fp64", "int8", "tf32_tc", "fp16_tc", "bf16_tc", "fp8_tc", "int8_tc", "fp32_tc",
             "fp4_tc")


@dataclass(frozen=True)
class DeviceSpec:
    """Spec-sheet description of one accelerator.

    `name` is exactly what `torch.cuda.get_device_name()` prints; `aliases` are short names (H100-SXM).
    `peak_tflops` maps keys of `PEAK_KEYS` to dense TFLOP/s (TOP/s for int8); a missing key means the
    device has no such unit (e.g. no tensor cores on a P100).
    """

    name: str
    vendor: str  # "nvidia" | "amd"
    arch: str  # pascal, volta, turing, ampere, ada, hopper, blackwell, cdna1, cdna2, cdna3
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
    l2_partitions: int = 1  # L2 halves that each cache for their own SMs (2 on GA100 and GH100)
    mem_type: str = "HBM2"
    tdp_w: float = 0.0
    pcie_gen: int = 3
    pcie_bw_gbs: float = 16.0  # per direction
    link_name: str = ""  # "NVLink3", "Infinity Fabric", "" for none
    link_bw_gbs: float = 0.0  # total GPU-to-GPU bandwidth per direction, GB/s
    form_factor: str = "PCIe"  # PCIe | SXM | OAM | NVL
    source: str = ""  # the public spec sheet the numbers come from
    notes: str = ""  # how they were read off it (sparse -> dense, derived clocks, assumptions)

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

    def to_dict(self) -> dict:
        d = asdict(self)
        d["aliases"] = list(self.aliases)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "DeviceSpec":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise UnknownDeviceError(f"device spec has unknown fields: {sorted(unknown)}")
        d = dict(d)
        d["aliases"] = tuple(d.get("aliases", ()))
        return cls(**d)


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

    def to_dict(self) -> dict:
        d = asdict(self)
        d["aliases"] = list(self.aliases)
        return d


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
    name = str(d["Device"])
    amd = "SingleFLOPsMM" in d or name.upper().startswith("AMD")
    if amd:
        fp32 = float(d.get("SingleFLOPsVEC", d.get("SingleFLOPs", 0))) / 1e3
        peaks = {"fp32": fp32, "fp32_tc": float(d.get("SingleFLOPsMM", 0)) / 1e3}
    else:
        peaks = {"fp32": float(d.get("SingleFLOPs", 0)) / 1e3}
    if peaks["fp32"] <= 0:
        raise UnknownDeviceError(f"NeuSight device JSON {source} has no positive SingleFLOPs")
    return DeviceSpec(
        name=name,
        vendor="amd" if amd else "nvidia",
        arch="unknown",
        num_sms=int(d["Num_Sm"]),
        boost_clock_mhz=float(d["Freq"]),
        mem_gb=float(d["Dev_Mem"]),
        mem_bw_gbs=float(d["Mem_Bw"]),
        l2_mb=float(d["L2Cache"]),
        peak_tflops=peaks,
        cores_per_sm=int(d.get("Core_Per_SM", 64)),
    )


def load_spec_file(path: str | Path) -> DeviceSpec:
    """Load a device spec JSON, in the NeuSight artifact format or the project's own format."""
    p = Path(path)
    d = read_json_object(p, error=UnknownDeviceError)
    if "Device" in d:
        return from_neusight_json(d, str(p))
    try:
        return DeviceSpec.from_dict(d)
    except TypeError as e:
        raise UnknownDeviceError(f"device spec {p} is incomplete: {e}") from None
