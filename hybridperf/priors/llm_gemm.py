"""GEMMs of today's LLM stacks (bf16/fp16, fp8 per-tensor and block-scaled, nvfp4, int4/int8
weight-only), as aiconfigurator's `gemm` tables time them: C[m, n] = A[m, k] @ B[k, n], k the
reduction, n the weight's output features, m the tokens; a bf16 activation goes in and comes out.

The physics: the matrix unit's rate for the dtype, tiles of the architecture's kernels quantized into
waves over the SMs (split-K fills the machine when there are fewer tiles than SMs, but for kernels that
run one fixed tile per range of m: `FIXED_TILE_SOURCES`), DRAM traffic of the
operands (small-M decode GEMMs are bound by the weight's bytes), a separate pass that quantizes the bf16
activation for fp8/fp8_block/nvfp4 (dynamic scales, as the frameworks' linears do), and a per-kernel
floor inside a CUDA graph; a path timed without a graph (`eager_timed`) costs at least the host's
dispatch, and a path whose dtype names another computation runs that one (`UNFUSED_PATHS`). How much
of the spec-sheet rate a dtype's kernels reach is measured data
(`KernelConstants`, fitted by `hybridperf.training.aic_kernels` with its provenance), passed explicitly.

Kernel time (inside a CUDA graph: no host dispatch, but for the `eager_timed` paths). Vectorised over numpy
arrays.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from hybridperf.devices import DeviceSpec
from hybridperf.priors.power import matrix_pj_per_flop

#: gemm dtype -> (bytes per A element, bytes per B (weight) element, peak key of the math)
GEMM_DTYPES = {
    "bfloat16": (2.0, 2.0, "bf16"),
    "float16": (2.0, 2.0, "fp16"),
    "fp8": (1.0, 1.0, "fp8"),
    "fp8_block": (1.0, 1.0, "fp8"),
    "nvfp4": (0.5, 0.5, "fp4"),
    "int4_wo": (2.0, 0.5, "bf16"),
    "int8_wo": (2.0, 1.0, "bf16"),
    "sq": (1.0, 1.0, "int8"),
    "w4afp8": (1.0, 0.5, "fp8"),
    "w4a16_mxfp4": (2.0, 0.5, "bf16"),
    "w4a8_mxfp4_mxfp8": (1.0, 0.5, "fp8"),
    # aiconfigurator's modes none of the four shared systems' tables holds (sdk/common.py's GEMMQuantMode and
    # MoEQuantMode): fp8 with a precomputed activation scale (its quantization timed apart) or TRT's
    # out-of-the-box fp8; NVFP4 weights dequantized into the bf16 MMA (Hopper); Blackwell's trtllm-gen MXFP4 x
    # MXFP8 MoE; Hopper's CUTLASS MXFP4 weight-only MoE
    "fp8_static": (1.0, 1.0, "fp8"),
    "fp8_ootb": (1.0, 1.0, "fp8"),
    "nvfp4_wo": (2.0, 0.5, "bf16"),
    "w4a16_nvfp4": (2.0, 0.5, "bf16"),
    "w4a8_mxfp4_mxfp8_trtllm": (1.0, 0.5, "fp8"),
    "w4a16_mxfp4_cutlass": (2.0, 0.5, "bf16"),
}
#: dtypes whose bf16 activation a separate kernel quantizes before the GEMM
QUANTIZED_ACTIVATION = frozenset({"fp8", "fp8_block", "nvfp4", "sq", "w4afp8", "w4a8_mxfp4_mxfp8", "fp8_ootb",
                                  "w4a8_mxfp4_mxfp8_trtllm"})
#: framework paths whose rows' dtype names another computation: (gemm dtype, kernel source) -> (dtype its
#: kernels run, bytes per activation element its unfused quantization moves, that pass's kernels).
#: aiconfigurator's SGLang `int8_wo` rows (its collector up to SGLang 0.5.6, kernel source "sglang") are
#: W8A8: the bf16 activation is quantized per token in nine eager PyTorch ops inside the graph (fp32
#: upcast 2+4 bytes, abs 8, amax 4, two scalar ops per row, divide 8, round 8, clamp 8, int8 cast 5),
#: then sgl-kernel's int8_scaled_mm runs on int8 tensor cores; H100 rows scale with m*k as that pass does
#: (4096x4096x4096: 437 us, of which 0.8 GB of quantization traffic is ~300), not as a weight-only GEMM.
#: `collect`'s fp8 rows (`datasets.aic_collector.quantize_fp8`) quantize in four PyTorch kernels: the amax
#: reduction (reads 2 bytes), two scalar ops on the scale, and the scaled cast (reads 2, writes 1).
UNFUSED_PATHS = {("int8_wo", "sglang"): ("sq", 47.0, 9.0), ("fp8", "torch._scaled_mm"): ("fp8", 5.0, 4.0)}


#: weight-only dense GEMMs (TensorRT-LLM's fpA_intB): on Blackwell they run its Sm80 kernels, warp-level MMA
#: (`dispatch_to_arch` sends sm_100 and up there; `warp_mma_peak`), not tcgen05
WARP_MMA_ON_BLACKWELL = frozenset({"int4_wo", "int8_wo"})


#: dtypes whose activations need matrix units a GPU may lack -> (those units, the weight-only mode engines run such
#: a checkpoint in without them): NVFP4 as 4-bit weights dequantized into the 16-bit MMA (aiconfigurator's
#: `nvfp4_wo`; its MoE twin `w4a16_nvfp4` is priced the same), FP8 as 8-bit weights (vLLM's Marlin on Ampere).
#: The 2x-fp8 peak an FP4 dtype would otherwise take put an 8192^3 nvfp4 GEMM on H100 above its fp8 peak.
WEIGHT_ONLY_WITHOUT_UNITS = {"nvfp4": ("fp4", "nvfp4_wo"), "fp8": ("fp8", "int8_wo"), "fp8_block": ("fp8", "int8_wo"),
                             "fp8_static": ("fp8", "int8_wo"), "fp8_ootb": ("fp8", "int8_wo")}


def device_dtype(dtype: str, device: DeviceSpec) -> str:
    """The dtype `device` runs `dtype` as: one whose activations need matrix units the GPU lacks
    (`DeviceSpec.has_matrix_units`) as its weight-only mode (`WEIGHT_ONLY_WITHOUT_UNITS`), any other as
    itself. The one rule of `predict-kernels` and `predict-serving`."""
    units, weight_only = WEIGHT_ONLY_WITHOUT_UNITS.get(dtype, ("", dtype))
    return weight_only if units and not device.has_matrix_units(units) else dtype


def kernel_dtype(gemm_dtype: str, kernel_source: str | None, device: DeviceSpec | None = None) -> str:
    """The dtype whose kernels (and fitted constants) a row's path runs (`UNFUSED_PATHS`), on `device`
    where given (`device_dtype`)."""
    dt = UNFUSED_PATHS.get((gemm_dtype, str(kernel_source or "")), (gemm_dtype,))[0]
    return dt if device is None else device_dtype(dt, device)


#: bytes of scale per weight element: 1 fp8 scale per 16 (nvfp4), 1 fp32 per 128x128 block, 1 bf16 per 128-group
SCALE_BYTES = {"nvfp4": 1 / 16, "fp8_block": 4 / 16384, "int4_wo": 2 / 128, "w4a16_mxfp4": 1 / 32,
               "w4a8_mxfp4_mxfp8": 1 / 32, "w4afp8": 2 / 128, "nvfp4_wo": 1 / 16, "w4a16_nvfp4": 1 / 16,
               "w4a8_mxfp4_mxfp8_trtllm": 1 / 32, "w4a16_mxfp4_cutlass": 1 / 32}

#: smallest slice of the reduction one SM takes under split-K (k elements)
SPLIT_K_CHUNK = 256
#: DRAM bandwidth one SM can draw, in multiples of its fair share (bandwidth / SMs): vLLM's unsplit CUTLASS fp8
#: decode GEMMs of few tiles draw at least 75 GB/s a block on H100 and 148 on B200, ~3x their share
SM_BANDWIDTH_SHARE = 3.0
#: math and memory of one kernel overlap imperfectly: body = (compute^P + memory^P)^(1/P), which is
#: the slower term alone when they differ and 1.26x it when they are equal (P = 3)
OVERLAP_P = 3.0
#: L2 bandwidth over DRAM bandwidth, for weight bytes L2 serves (a modelling choice: 2.5-4x on
#: A100/H100 microbenchmarks; the fitted memory efficiency absorbs the rest)
L2_BANDWIDTH_RATIO = 3.0
#: dtypes whose kernels behave most alike, nearest first: where a dtype's constants were never fitted
#: (nvfp4 held out with Blackwell), its kin's stand in
DTYPE_KIN = {"nvfp4": ("fp8",), "fp8_block": ("fp8",), "w4a8_mxfp4_mxfp8": ("fp8",), "w4afp8": ("fp8",),
             "sq": ("fp8",), "float16": ("bfloat16",), "int4_wo": ("int8_wo",), "int8_wo": ("int4_wo",),
             "w4a16_mxfp4": ("int4_wo", "int8_wo"), "fp8_static": ("fp8",), "fp8_ootb": ("fp8",),
             "nvfp4_wo": ("int4_wo", "w4a16_mxfp4"), "w4a16_nvfp4": ("int4_wo", "w4a16_mxfp4"),
             "w4a8_mxfp4_mxfp8_trtllm": ("w4a8_mxfp4_mxfp8", "fp8"), "w4a16_mxfp4_cutlass": ("w4a16_mxfp4", "int4_wo")}
#: per-architecture matrix-unit tiles (rows of M, columns of N) the GEMM libraries choose among, and the
#: fraction of the per-SM rate a tile sustains (smaller tiles re-read more operands per FLOP):
#: Ampere/Ada mma.sync CTA tiles, Hopper wgmma 64xN per warpgroup (128x128 / 128x256 CTAs),
#: Blackwell tcgen05 tiles up to 256 rows over an SM pair.
TILES = {
    "ampere": ((128, 256, 1.0), (128, 128, 0.97), (64, 128, 0.85), (64, 64, 0.7)),
    "ada": ((128, 256, 1.0), (128, 128, 0.97), (64, 128, 0.85), (64, 64, 0.7)),
    "hopper": ((128, 256, 1.0), (128, 128, 0.97), (64, 256, 0.9), (64, 128, 0.85)),
    "blackwell": ((256, 256, 1.0), (256, 128, 0.97), (128, 256, 0.97), (128, 128, 0.9), (64, 128, 0.8)),
}
#: a GEMM of few rows (decode) runs swapped, the weight's columns in the MMA's M slot and the tokens in its N
#: slot, which takes 8, 16 or 32 (cuBLAS's and the engines' small-M kernels): its rows pad to that, not to a
#: 64-row tile, at `SMALL_M_EFFICIENCY` of the per-SM rate (a design figure: such tiles re-read the weight tile
#: for few FLOPs). Without them a 1-row GEMM on a GPU of low matrix rate and fast memory (H20-3e: 148 TFLOP/s,
#: 4.8 TB/s) was priced bound by 64 padded rows, slower than on an H100
SMALL_M_TILES = (8, 16, 32)
SMALL_M_EFFICIENCY = 0.5
#: widest first: of tiles as fast, the first listed is taken (`tile_compute_s`), so 16 or 32 rows run one tile of
#: their own split as deep as 8 rows' (the same reduction), not 2-4 tiles of 8 rows that leave k unsplit
_SMALL_M_TILE_SPECS = tuple((tm, 128, SMALL_M_EFFICIENCY) for tm in sorted(SMALL_M_TILES, reverse=True))
#: relative margin by which a tile must beat the one before it: an exact tie in the model (8 x 128 unsplit and
#: 64 x 128 split five ways at m = 230) went to whichever rounding favoured, so a GB200 was priced 1.5x a B200
TILE_TIE = 1e-9
#: matrix peak of a dtype a catalog entry lacks, as a multiple of another peak: Blackwell's fp4 tensor
#: rate is twice its fp8 rate (B200 sheet: 9 PF fp4 dense, 4.5 PF fp8), which only a part with FP4 units
#: (`DeviceSpec.has_matrix_units`: a Blackwell spec without its fp4 figure) reaches; a GPU without fp8/fp4
#: units (Ampere; fp4 before Blackwell) runs those kernels by upcasting, at the 16-bit rate.
PEAK_FALLBACK = {"fp4": (("fp8", 2.0), ("bf16", 1.0)), "fp8": (("bf16", 1.0),), "int8": (("bf16", 1.0),)}
#: an eager call's time is the slower of the host's dispatch and the GPU's work, which overlap (the host
#: enqueues the next call while the GPU runs this one): (gpu^P + host^P)^(1/P), a near-max
HOST_OVERLAP_P = 4.0


def eager_timed(gemm_dtype: str, kernel_source: str | None) -> bool:
    """Whether aiconfigurator timed this path without a CUDA graph, so that a call costs at least the
    host's dispatch of the framework's Python path: vLLM's block-fp8 linears (its collector sets
    `use_cuda_graph=False` for fp8_block; the rows name vLLM's kernel classes, `*Fp8BlockScaledMMKernel`),
    flat at 60-350 us per call up to shapes whose GPU time exceeds it."""
    return gemm_dtype == "fp8_block" and str(kernel_source or "").endswith("Fp8BlockScaledMMKernel")


@dataclass(frozen=True)
class KernelConstants:
    """What fraction of the spec-sheet matrix rate and DRAM bandwidth a dtype's kernels reach, and the
    per-kernel floor inside a CUDA graph in thousands of GPU cycles at the boost clock (launch and drain
    are clocked work: the shipped fits are 3.8-4.6k cycles, 2-3 us at these GPUs' boost clocks),
    per dtype and kernel source, the host's dispatch per call (us) of `eager_timed` paths (a host CPU's
    time, not GPU cycles), and a split-K reduction's cycles per doubling of the split (`split_reduce_s`);
    read off measured tables (`fitted_on`, by `source`)."""

    compute_eff: tuple[tuple[str, float], ...]
    memory_eff: tuple[tuple[str, float], ...]
    floor_kcycles: tuple[tuple[str, float], ...]
    fitted_on: tuple[str, ...] = ()
    source: str = ""
    host_us: tuple[tuple[str, float], ...] = ()
    reduce_kcycles: float = 0.0  # per doubling of a split-K factor (`split_reduce_s`)

    def __post_init__(self):
        if not (np.isfinite(self.reduce_kcycles) and self.reduce_kcycles >= 0):
            raise ValueError(f"reduce_kcycles must be a finite number >= 0, not {self.reduce_kcycles!r}")

    def value(self, field: str, dtype: str, kernel_source: str | None = None, arch: str | None = None) -> float:
        """The constant of `dtype` run by `kernel_source` where fitted, on GPUs of the kernel architecture
        `arch` first (`key@arch`: the same kernels on the same SMs), else of the dtype (on `arch` first),
        else of its nearest fitted kin (`DTYPE_KIN`) run by the same kernel source (a framework's generic path,
        such as TensorRT-LLM's `torch_flow`, wraps every dtype in the same launches), else of that kin (on `arch`
        first), else of bfloat16."""
        table = dict(getattr(self, field))
        kin = DTYPE_KIN.get(dtype, ())
        own = [f"{dtype}|{kernel_source}"] if kernel_source else []
        keys = [*(f"{k}@{arch}" for k in own if arch), *own, *([f"{dtype}@{arch}"] if arch else []), dtype] \
            + ([f"{k}|{kernel_source}" for k in kin] if kernel_source else []) \
            + [*(f"{k}@{arch}" for k in kin if arch), *kin, "bfloat16"]
        return float(next((table[k] for k in keys if k in table), 1.0))

    def host_s(self, dtype: str, kernel_source: str | None, arch: str | None = None) -> float:
        """Host dispatch per call (s) of an `eager_timed` path: its own where fitted (on `arch` first), else
        its dtype's (over the fitted eager paths), else 0 (constants fitted on no eager path)."""
        table = dict(self.host_us)
        key = f"{dtype}|{kernel_source}"
        return float(table.get(f"{key}@{arch}", table.get(key, table.get(dtype, 0.0)))) * 1e-6

    def pooled(self) -> "KernelConstants":
        """These constants without their per-architecture keys (`key@arch`): what a GPU of an architecture
        outside the fit is priced with."""
        def drop(table):
            return tuple((k, v) for k, v in table if "@" not in k)

        return replace(self, compute_eff=drop(self.compute_eff), memory_eff=drop(self.memory_eff),
                       floor_kcycles=drop(self.floor_kcycles), host_us=drop(self.host_us))

    def to_dict(self) -> dict:
        d = {"compute_eff": dict(self.compute_eff), "memory_eff": dict(self.memory_eff),
             "floor_kcycles": dict(self.floor_kcycles), "fitted_on": list(self.fitted_on), "source": self.source}
        d = {**d, "host_us": dict(self.host_us)} if self.host_us else d
        return {**d, "reduce_kcycles": self.reduce_kcycles} if self.reduce_kcycles else d

    @classmethod
    def from_dict(cls, d: dict) -> "KernelConstants":
        return cls(tuple(sorted(d["compute_eff"].items())), tuple(sorted(d["memory_eff"].items())),
                   tuple(sorted(d["floor_kcycles"].items())), tuple(d.get("fitted_on", ())), d.get("source", ""),
                   tuple(sorted(d.get("host_us", {}).items())), float(d.get("reduce_kcycles", 0.0)))


#: spec-sheet roofline: every rate reached, no floor
ROOFLINE = KernelConstants((("bfloat16", 1.0),), (("bfloat16", 1.0),), (("bfloat16", 0.0),), (), "spec sheet")

#: prior constants fitted on aiconfigurator's four shared systems (a100_sxm, h100_sxm, l40s, b200_sxm),
#: written by `python -m experiments.kernels.aiconfigurator_kernels --ship exported_models/aic_kernels`
CONSTANTS_FILE = Path(__file__).resolve().parent / "data" / "aic_constants.json"


@lru_cache(maxsize=1)
def fitted_constants() -> dict:
    """{"gemm": KernelConstants, "moe": KernelConstants} read from `CONSTANTS_FILE` (each carries
    the systems it was fitted on and the command that fitted it)."""
    d = json.loads(CONSTANTS_FILE.read_text())
    return {k: KernelConstants.from_dict(v) for k, v in d.items()}


def spec_matrix_peak(device: DeviceSpec, peak_key: str) -> float:
    """Spec-sheet dense matrix FLOP/s of `peak_key` (bf16, fp16, fp8, fp4, int8) on `device`, through
    `PEAK_FALLBACK` where the catalog lacks it."""
    rate = device.peak_tflops.get(f"{peak_key}_tc", 0.0)
    for other, ratio in PEAK_FALLBACK.get(peak_key, ()):
        if rate > 0:
            break
        if ratio <= 1.0 or device.has_matrix_units(peak_key):  # a faster rate needs the dtype's own units
            rate = device.peak_tflops.get(f"{other}_tc", 0.0) * ratio
    return rate * 1e12 if rate > 0 else device.peak(peak_key if peak_key != "fp4" else "bf16", matrix=True)


def matrix_peak(device: DeviceSpec, peak_key: str) -> float:
    """Matrix FLOP/s of `peak_key` the board sustains: the spec peak, capped where its TDP cannot feed
    it (`hybridperf.priors.power`'s energy per matrix FLOP of the architecture, scaled by the operand
    width: 8-bit operands move half the bits of 16-bit ones per FLOP, 4-bit a quarter). The cap binds
    on L40S (350 W for 362 TFLOP/s) and B200 (1000 W for 2250), barely on H100, A100."""
    peak = spec_matrix_peak(device, peak_key)
    if device.tdp_w <= 0:
        return peak
    return min(peak, device.tdp_w / (matrix_pj_per_flop(device, peak_key) * 1e-12))


#: dense FLOPs per SM per clock of warp-level MMA (`mma.sync`, Ampere's instruction, which Hopper and
#: Blackwell keep beside their warpgroup / tensor-memory MMA): 1024 FMA of 16-bit operands, twice that of
#: 8-bit ones (sm_89 on)
WARP_MMA_FLOPS_PER_CLOCK = {"bfloat16": 2048.0, "fp16": 2048.0, "fp8": 4096.0, "int8": 4096.0}


def warp_mma_peak(device: DeviceSpec, peak_key: str) -> float:
    """Matrix FLOP/s of kernels built on warp-level MMA (Marlin by design, Triton below 64-row tiles): at
    most the SMs x clock x `WARP_MMA_FLOPS_PER_CLOCK`, a cap that binds on Hopper and Blackwell only."""
    peak = matrix_peak(device, peak_key)
    per_clock = WARP_MMA_FLOPS_PER_CLOCK.get(peak_key, WARP_MMA_FLOPS_PER_CLOCK["bfloat16"])
    if device.vendor != "nvidia" or device.num_sms <= 0 or device.boost_clock_mhz <= 0:
        return peak
    return min(peak, device.num_sms * device.boost_clock_mhz * 1e6 * per_clock)


def version_tuple(text) -> tuple:
    """(major, minor, patch) of a version string such as `1.3.0rc20` or `0.5.6.post2`; () if none."""
    return tuple(int(x) for x in re.findall(r"\d+", str(text or ""))[:3])


def replay_copies(framework: str | None, gemm_dtype: str, version: str | None = None) -> float | None:
    """Copies of a GEMM's operands aiconfigurator's collector for `framework` cycled per timed call when it
    measured `version`'s tables (their `collect_gemm.py`'s `outside_loop_count`): SGLang 6 (as many as its
    memory budget allows, six wherever L2 could matter), 1 before 0.5.7 (one op replayed); vLLM 6, but 1 for
    its fp8_block and nvfp4 linears; TensorRT-LLM 5 before 1.3, then min(5, ceil(L2 / weight)) (None, as for
    any other source: `_replay_hit`). The version cut-offs are the collector changes' dates (January and
    March 2026) read against the tables' versions. PyTorch's own harnesses (framework `torch`) replay one copy."""
    fw, v = str(framework or "").strip().lower(), version_tuple(version)
    if fw == "torch":  # `collect --schema aiconfigurator` and a CUDA graph replay one set of operands
        return 1.0
    if fw == "sglang":
        return 1.0 if v and v < (0, 5, 7) else 6.0
    if fw == "vllm":
        return 1.0 if gemm_dtype in ("fp8_block", "nvfp4") else 6.0
    if fw == "trtllm" and v and v < (1, 3):
        return 5.0
    return None


#: how fast L2 hits fall off once a cycled footprint outgrows the L2 a copy can live in: (capacity / footprint)
#: to this power. 8 rather than 4: held-out GEMM prior cell mean 0.2 points lower (A100, H100, L40S better, B200 level)
REPLAY_HIT_POWER = 8.0


def _replay_hit(cycled_bytes, device: DeviceSpec, resident_bytes=0.0, copies: float | None = None) -> np.ndarray:
    """Share of L2 hits under aiconfigurator's timing, which cycles through `copies` copies of `cycled_bytes`
    (beside `resident_bytes` every copy shares; TensorRT-LLM's min(5, ceil(L2 / cycled)) when None) so that
    most come from DRAM: when the footprint fits in the L2 of one partition (`DeviceSpec.l2_partitions`: a
    tile replayed on an SM of the other half misses where the last call cached it) all hit, else LRU-like
    replacement leaves (capacity / footprint)^REPLAY_HIT_POWER. On A100, H100 and B200 a TensorRT-LLM 1.3
    decode GEMM whose weight is 0.5-1.2x the whole L2 reads at DRAM speed."""
    cycled = np.maximum(np.asarray(cycled_bytes, dtype=np.float64), 1.0)
    l2 = device.l2_mb * 1e6
    if l2 <= 0:
        return np.zeros_like(cycled + resident_bytes)
    if copies is None:
        copies = np.minimum(5.0, np.maximum(np.ceil(l2 / cycled), 1.0))
    return np.minimum(replay_capacity(device) / (resident_bytes + copies * cycled), 1.0) ** REPLAY_HIT_POWER


def replay_capacity(device: DeviceSpec) -> float:
    """Bytes of L2 a kernel replayed back to back finds its last call's data in: one partition's
    (`DeviceSpec.l2_partitions`), as the next call may run a tile on an SM of the other half."""
    return device.l2_mb * 1e6 / max(device.l2_partitions, 1)


def l2_weight_hit(weight_bytes, device: DeviceSpec, copies: float | None = None) -> np.ndarray:
    """Share of a GEMM's weight reads served by L2 under aiconfigurator's timing (`_replay_hit`: L40S's 96 MB
    L2 serves a tenth of a cycled 128 MB weight)."""
    return _replay_hit(weight_bytes, device, copies=copies)


def l2_output_hit(out_bytes, in_bytes, device: DeviceSpec, copies: float | None = None) -> np.ndarray:
    """Share of a replayed GEMM's output writes L2 absorbs. Every copy the timing cycles through writes
    the same freed-and-reused output buffer, so while it fits in L2 beside the copies' inputs its dirty
    lines are overwritten in place and never reach DRAM. Counted on GDDR cards with inline ECC only
    (`ecc_reserved` > 0: L4, L40, L40S, A10, A10G, A40, T4), where a DRAM write is the slow path: L40S's
    small-k GEMMs write 1.4 TB/s while their outputs fit its 96 MB L2 and 0.55 TB/s beyond, where
    A100, H100 and B200 (HBM, side-band ECC) show no such step at their L2 sizes."""
    out = np.maximum(np.asarray(out_bytes, dtype=np.float64), 1.0)
    if device.ecc_reserved <= 0:
        return np.zeros_like(out)
    return _replay_hit(in_bytes, device, resident_bytes=out, copies=copies)


#: kernel sources that dispatch one fixed tile per range of m and never split k: vLLM's CUTLASS fp8
#: `cutlass_scaled_mm` (csrc/quantization/w8a8/cutlass: scaled_mm_c2x_sm89_fp8_dispatch.cuh,
#: c3x/scaled_mm_sm90_fp8_dispatch.cuh, c3x/scaled_mm_sm100_fp8_dispatch.cuh; small m swaps A and B so
#: that the tile's wide side runs over n; the dispatch's narrower tiles for small n are not modelled).
#: (gemm dtype, kernel source) -> per architecture it runs on: (largest m, tile rows of m, tile columns of n)
FIXED_TILE_SOURCES = {
    ("fp8", "CutlassFP8ScaledMMLinearKernel"): {
        "ada": ((16, 16, 64), (32, 32, 64), (64, 64, 64), (256, 64, 128), (np.inf, 128, 128)),
        "hopper": ((16, 16, 64), (64, 64, 64), (128, 64, 128), (np.inf, 128, 128)),
        "blackwell": ((16, 32, 128), (64, 64, 128), (256, 128, 128), (np.inf, 256, 128)),
    },
}


def _fixed_tiles(m, fixed: dict | None, device: DeviceSpec):
    """(tile rows, tile columns) per element of `m` from a `FIXED_TILE_SOURCES` entry, else None (no entry, or
    an architecture the kernel has no dispatch for)."""
    ranges = (fixed or {}).get(device.kernel_arch)
    if not ranges:
        return None
    tops, rows, cols = (np.array(c, dtype=np.float64) for c in zip(*ranges))
    i = np.searchsorted(tops, np.asarray(m, dtype=np.float64))  # the first range whose largest m covers m
    return rows[i], cols[i]


def tile_compute_s(m, n, k, peak: float, device: DeviceSpec, fixed: dict | None = None) -> tuple[np.ndarray, ...]:
    """(seconds, waves, CTAs, split-K factor) of the best tile of the device's architecture at 100% of
    `peak`: each wave runs one tile per SM for `2*tm*tn*k` FLOPs at the per-SM rate; with fewer tiles than
    SMs split-K spreads the reduction over up to `SMs / tiles` SMs, in chunks of at least `SPLIT_K_CHUNK`.
    A kernel of `FIXED_TILE_SOURCES` (`fixed`: its entry) runs its own tile for the row's m, unsplit."""
    sms = float(device.num_sms)
    per_sm = peak / sms
    own = _fixed_tiles(m, fixed, device)
    if own is not None:
        tm, tn = own
        count = np.ceil(m / tm) * np.ceil(n / tn)
        waves = np.maximum(np.ceil(count / sms), 1.0)
        return waves * 2.0 * tm * tn * k / per_sm, waves, count, np.ones_like(count)
    tiles = TILES.get(device.kernel_arch, TILES["hopper"]) + _SMALL_M_TILE_SPECS
    best = None
    for tm, tn, eff in tiles:
        count = np.ceil(m / tm) * np.ceil(n / tn)
        waves = np.maximum(np.ceil(count / sms), 1.0)
        split = np.clip(np.minimum(np.floor(sms / count), np.ceil(k / SPLIT_K_CHUNK)), 1.0, None)
        t = waves * 2.0 * tm * tn * k / split / (per_sm * eff)
        if best is None:
            best = [t, waves, count * split, split]
        else:
            better = t < best[0] * (1.0 - TILE_TIE)
            best = [np.where(better, new, old) for new, old in zip((t, waves, count * split, split), best)]
    return best[0], best[1], best[2], best[3]


def bandwidth_share(ctas, device: DeviceSpec) -> np.ndarray:
    """Share of DRAM bandwidth `ctas` concurrent thread blocks can draw: an SM pulls at most
    `SM_BANDWIDTH_SHARE` times its fair share (bandwidth / SMs), so a decode GEMM of few tiles and
    short k cannot stream its weight at full rate."""
    return np.clip(np.asarray(ctas, dtype=np.float64) * SM_BANDWIDTH_SHARE / device.num_sms, 1e-3, 1.0)


def gemm_parts(m, n, k, gemm_dtype: str, device: DeviceSpec, replayed: bool = True,
               kernel_source: str | None = None, framework: str | None = None, version: str | None = None) -> dict:
    """The GEMM's ideal times (s) at spec rates: `compute` (tiles and waves at the matrix peak), `memory` (A,
    B with its scales, C through DRAM), `quant` (the activation-quantization pass), and `kernels` launched,
    `split_levels` (log2 of the split-K factor), `waves`, `flops`, `bytes`: the pieces `gemm_ms` scales by
    fitted efficiencies and the residual model reads as features. `replayed`: timed as the kernel tables are,
    the same GEMM back to back, so a weight that fits in L2 is partly served from it (`l2_weight_hit`); False
    inside a model's forward pass, where every layer's weight comes from DRAM; `framework` and `version`: whose
    collector timed it, for the copies it cycles (`replay_copies`). `kernel_source`: a path of `UNFUSED_PATHS`
    runs its own dtype's kernels after its unfused quantization pass. `dtype`: the one the kernels run on this
    device (`kernel_dtype`), whose fitted constants price them; `timed_dtype`: the row's own, which says how its
    collector timed it (`eager_timed`)."""
    m, n, k = (np.asarray(x, dtype=np.float64) for x in (m, n, k))
    copies = replay_copies(framework, gemm_dtype, version)
    unfused = UNFUSED_PATHS.get((gemm_dtype, str(kernel_source or "")))
    requested, gemm_dtype = gemm_dtype, kernel_dtype(gemm_dtype, kernel_source, device)
    a_bytes, b_bytes, peak_key = GEMM_DTYPES.get(gemm_dtype, GEMM_DTYPES["bfloat16"])
    peak = matrix_peak(device, peak_key)
    if gemm_dtype in WARP_MMA_ON_BLACKWELL and device.kernel_arch == "blackwell":
        peak = warp_mma_peak(device, peak_key)
    bw = device.mem_bw_gbs * 1e9
    compute, waves, ctas, split = tile_compute_s(m, n, k, peak, device,
                                                 FIXED_TILE_SOURCES.get((gemm_dtype, str(kernel_source or ""))))
    w_bytes = k * n * (b_bytes + SCALE_BYTES.get(gemm_dtype, 0.0))
    hit = l2_weight_hit(k * n * b_bytes, device, copies) if replayed else 0.0
    out_hit = l2_output_hit(m * n * 2.0, m * k * a_bytes + k * n * b_bytes, device, copies) if replayed else 0.0
    nbytes = m * k * a_bytes + w_bytes + m * n * 2.0
    dram_bytes = nbytes - (w_bytes * hit + m * n * 2.0 * out_hit) * (1.0 - 1.0 / L2_BANDWIDTH_RATIO)
    quantized = gemm_dtype in QUANTIZED_ACTIVATION
    quant_bytes, quant_kernels = unfused[1:] if unfused else ((2.0 + a_bytes, 1.0) if quantized else (0.0, 0.0))
    return {"compute": compute, "memory": dram_bytes / (bw * bandwidth_share(ctas, device)),
            "quant": m * k * quant_bytes / bw, "clock_mhz": device.boost_clock_mhz, "kernels": 1.0 + quant_kernels,
            "split_levels": np.log2(split), "arch": device.kernel_arch,
            "waves": waves, "flops": 2.0 * m * n * k, "bytes": nbytes, "weight_bytes": w_bytes, "peak": peak,
            "spec_peak": spec_matrix_peak(device, peak_key), "dtype": gemm_dtype, "timed_dtype": requested}


def combine_ms(parts: dict, dtype: str, constants: KernelConstants, kernel_source: str | None = None) -> np.ndarray:
    """Kernel time (ms) from `gemm_parts`-style pieces: the slower of math and memory at the dtype's
    (and kernel source's) fitted efficiencies, plus the quantization pass and one floor per kernel; an
    `eager_timed` path takes the near-max of that and the host's dispatch."""
    arch = parts.get("arch")
    ce, me = (constants.value(f, dtype, kernel_source, arch) for f in ("compute_eff", "memory_eff"))
    body = ((parts["compute"] / ce) ** OVERLAP_P + (parts["memory"] / me) ** OVERLAP_P) ** (1.0 / OVERLAP_P) \
        + parts["quant"] / me
    gpu = body + parts["kernels"] * floor_s(constants, dtype, kernel_source, parts["clock_mhz"], arch) \
        + split_reduce_s(parts, constants)
    timed = parts.get("timed_dtype", dtype)  # the collector's path, whatever kernels run it on this GPU
    if eager_timed(timed, kernel_source):
        host = constants.host_s(timed, kernel_source, arch)
        gpu = (gpu ** HOST_OVERLAP_P + host ** HOST_OVERLAP_P) ** (1.0 / HOST_OVERLAP_P)
    return gpu * 1e3


def rate_capped(parts: dict, max_share: float | None) -> dict:
    """`parts` whose math (tiles and waves included) achieves no more than `max_share` of the dtype's spec-sheet
    peak (None: as they are), for a caller whose own scale on the result was fitted where the prior stays below."""
    if max_share is None:
        return parts
    return {**parts, "compute": np.maximum(parts["compute"], parts["flops"] / (max_share * parts["spec_peak"]))}


def split_reduce_s(parts: dict, constants: KernelConstants) -> np.ndarray:
    """Latency (s) of reducing a split-K GEMM's partial sums: `reduce_kcycles` per doubling of the split
    factor (dependent round trips through L2). The small-n, long-k GEMMs of every training GPU grow by
    about that much each time k doubles while their tiles and bytes stay few; the value is chosen per fit
    from a grid by the training rows' MAPE (`training.aic_kernels.fit_constants`)."""
    return np.asarray(parts.get("split_levels", 0.0)) * constants.reduce_kcycles * 1e3 / (parts["clock_mhz"] * 1e6)


def floor_s(constants: KernelConstants, dtype: str, kernel_source: str | None, clock_mhz: float,
            arch: str | None = None) -> float:
    """One kernel's floor (s) on a GPU of boost clock `clock_mhz` and kernel architecture `arch`."""
    return constants.value("floor_kcycles", dtype, kernel_source, arch) * 1e3 / (clock_mhz * 1e6)


def gemm_ms(m, n, k, gemm_dtype: str, device: DeviceSpec, kernel_source: str | None = None,
            constants: KernelConstants | None = None, replayed: bool = True, framework: str | None = None,
            version: str | None = None, max_share: float | None = None) -> np.ndarray:
    """Kernel time (ms) of an (m x k) @ (k x n) GEMM in `gemm_dtype` (a key of `GEMM_DTYPES`), with
    `constants` (default: those fitted on aiconfigurator's four shared systems; `ROOFLINE` for the
    spec sheet alone). A `kernel_source` the constants were fitted on (aiconfigurator's names) takes
    its own efficiencies and floor. `replayed`, `framework`, `version`: see `gemm_parts`; `max_share`:
    `rate_capped`."""
    parts = rate_capped(gemm_parts(m, n, k, gemm_dtype, device, replayed, kernel_source, framework, version), max_share)
    constants = fitted_constants()["gemm"] if constants is None else constants
    return combine_ms(parts, parts["dtype"], constants, kernel_source)
