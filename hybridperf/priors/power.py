"""Sustained arithmetic rate under the board power limit.

A GPU running dense math at full rate draws ~ (energy per FLOP) x (FLOP/s). Where the board's TDP
cannot feed its spec-sheet peak, clocks drop until power fits: sustained = min(peak, TDP / e).
`e` (board joules per FLOP, including memory and static power) is a property of the process node and
of the datapath (vector FMA vs. tensor-core MMA), not of the individual GPU. The per-node values are
engineering estimates anchored on public sustained-throughput figures of individual boards (named
beside each value), never on the evaluation data: ~15 pJ per sustained fp32 FLOP for 12-16 nm boards (a 70 W T4 then sustains
~4.5 of its 8.1 TFLOP/s, while a 75 W P4 and the 250 W V100/P100 stay at their peak), ~14 pJ at
7-8 nm (the 250 W A100 PCIe, unlike the 400 W SXM part, then sustains ~18 of 19.5), ~6-10 pJ at 4-5 nm.
Matrix units (tensor cores) spend 5-10x less per 16-bit FLOP (`MATRIX_ENERGY_RATIO`), and 8-bit
operands half of that again: at full rate an 8-bit MMA moves the same bits as a 16-bit one at half
rate. Only low-TDP, high-peak cards (T4, L4, A10-class) are capped; big-board GPUs are untouched.
Sustained means seconds of back-to-back work: a capped board runs faster for the first tens of
milliseconds (an L4 runs fp16 GEMMs at 69 TFLOP/s in a 7 ms burst and at 53 from 80 ms on).
"""
from __future__ import annotations

from hybridperf.devices import DeviceSpec, dtype_key

#: board pJ per vector FLOP, by architecture (process node in the comment)
VECTOR_PJ_PER_FLOP = {
    "pascal": 15.0,  # 16 nm
    "volta": 15.0,  # 12 nm
    "turing": 15.0,  # 12 nm
    "ampere": 14.0,  # 7 nm (GA100) / 8 nm (GA10x): a 250 W A100 PCIe sustains ~18 of 19.5 TFLOP/s
    "cdna1": 12.0,  # 7 nm
    "cdna2": 10.0,  # 6 nm
    "cdna3": 7.0,  # 5 nm
    "cdna4": 5.0,  # 3 nm (N3P), ~30% below 5 nm at equal speed: an estimate, no sustained MI350X/MI355X GEMM anchors it
    "ada": 6.0,  # 4 nm: a 450 W RTX 4090 sustains ~75 TFLOP/s fp32
    "hopper": 9.5,  # 4 nm (its matrix units: MATRIX_ENERGY_RATIO)
    "blackwell": 6.0,  # 4 nm, second generation
}
#: board energy per 16-bit matrix-unit FLOP / energy per vector FLOP, by architecture. Anchors are
#: public measurements of power-capped boards: a 70 W T4 sustains ~24 TFLOP/s in cuBLAS fp16 GEMMs
#: (NVIDIA developer forum, "About GPU peak performance": 4096^3 x 100, power capping), 2.9 pJ; a
#: 72 W L4 53-54 TFLOP/s in torch.mm fp16 at 4096-10240 (zzc0721/torch-performance-test-data
#: issue 120), 1.35 pJ; a 700 W H200 runs fp16 linears of 2048-8192 rows at a median 711-800 TFLOP/s of
#: kernel time (`experiments/data/measured/h200/kernel_trace.csv`, compute-bound rows over 30 us; public
#: torch.mm 759 fp16 and 790 bf16), 0.81 pJ: 0.085 of Hopper's vector energy, which puts those rows at
#: 1.06x their kernel time. Elsewhere ~0.1. The H100 (same chip, held out of the anchor: public 736-798
#: TFLOP/s at 4096-8192, its PCIe card 437-496) and V100S and L40S are checked, not fitted, by
#: `experiments/kernels/public_gemm_check.py`.
MATRIX_ENERGY_RATIO = {"volta": 0.19, "turing": 0.19, "ada": 0.22, "hopper": 0.085}
DEFAULT_MATRIX_ENERGY_RATIO = 0.1
#: matrix-unit energy per FLOP by operand type, relative to 16-bit operands: fp32 matrix units
#: (AMD MFMA) save less; 8-bit operands move half the bits per FLOP, 4-bit a quarter
MATRIX_ENERGY_BY_DTYPE = {"fp32": 5.0, "fp8": 0.5, "int8": 0.5, "fp4": 0.25, "int4": 0.25}
_DEFAULT_PJ = 10.0


def matrix_pj_per_flop(device: DeviceSpec, dtype: str) -> float:
    """Board pJ per dense matrix-unit FLOP of `dtype`. A part whose 4-bit peak is more than twice its 8-bit
    one (Blackwell Ultra: B300 13.5 PF fp4 over 4.5 fp8, B200 9 over 4.5) packs more 4-bit MMA into the same
    SMs, clock and power: its energy per 4-bit FLOP shrinks by that excess, an engineering estimate (no
    measurement of a B300 anchors it), without which a 1,100 W B300 sustained 1.1x a B200's fp4 rate,
    not the 1.5x its sheet gives."""
    key = dtype_key(dtype)
    pj = VECTOR_PJ_PER_FLOP.get(device.arch, _DEFAULT_PJ) \
        * MATRIX_ENERGY_RATIO.get(device.arch, DEFAULT_MATRIX_ENERGY_RATIO) * MATRIX_ENERGY_BY_DTYPE.get(key, 1.0)
    fp4, fp8 = device.peak_tflops.get("fp4_tc", 0.0), device.peak_tflops.get("fp8_tc", 0.0)
    if key in ("fp4", "int4") and fp8 > 0 and fp4 > 2.0 * fp8:
        pj *= 2.0 * fp8 / fp4
    return pj


#: SMs with 128 FP32 lanes and four single-issue schedulers (GA10x, Ada, Hopper, Blackwell) need an
#: FFMA in every issue slot to reach the spec peak, but dense math also issues shared-memory loads and
#: integer address arithmetic: it reaches ~3/4 of that doubled peak (RTX 3090 SGEMM ~25 of 35.6
#: TFLOP/s). GA100 and Volta (64 lanes, an FFMA every other slot) and Pascal (dual issue) are not limited.
SHARED_FP32_INT32_ISSUE = 0.75
SINGLE_ISSUE_128_LANE_ARCHS = ("ampere", "ada", "hopper", "blackwell")
#: architectures whose fraction was measured: a lent H200 ran torch.mm fp32 at 50.2 and 50.9 TFLOP/s
#: (4096^3, 8192^3; experiments/data/measured/h200/gemm.csv), 0.80 of 67 once the tile model's 0.95 is
#: taken out. The H100 (same SM and clocks) is held out of it.
ISSUE_FRACTION_BY_ARCH = {"hopper": 0.80}


def uses_matrix_units(device: DeviceSpec, dtype: str = "fp32", matrix: bool = False) -> bool:
    """Whether dense math that may use matrix units (`matrix`) really runs on them in `dtype`: the
    device has a faster matrix peak for it (NVIDIA fp32 has none, TF32 being off)."""
    return matrix and device.peak(dtype, matrix=True) > device.peak(dtype, matrix=False)


def issue_limited_peak(device: DeviceSpec, dtype: str = "fp32", matrix: bool = False) -> float:
    """Spec peak (FLOP/s), times the issue limit of 128-lane single-issue SMs for vector math."""
    peak = device.peak(dtype, matrix=matrix)
    uses_matrix = uses_matrix_units(device, dtype, matrix)
    limited = device.vendor == "nvidia" and device.arch in SINGLE_ISSUE_128_LANE_ARCHS and device.cores_per_sm == 128
    return peak * ISSUE_FRACTION_BY_ARCH.get(device.arch, SHARED_FP32_INT32_ISSUE) if limited and not uses_matrix else peak


#: bf16 GEMMs on GPUs with neither bf16 vector nor bf16 matrix units (Pascal, Volta, Turing) are
#: emulated: cuBLAS converts and computes in fp32. Public torch.mm bf16 / fp32 throughput on such
#: GPUs (experiments/data/public_gemm_tflops.csv): T4 0.52-0.55, P4 0.57, P40 0.52, RTX 2080 0.56,
#: V100S 0.73; the median of the five GPUs.
EMULATED_BF16_GEMM_RATE = 0.56


def emulates_bf16(device: DeviceSpec) -> bool:
    """Whether `device` has no bf16 unit, so that bf16 math runs through fp32."""
    return not any(device.peak_tflops.get(k, 0.0) > 0 for k in ("bf16", "bf16_tc"))


def sustained_flops(device: DeviceSpec, dtype: str = "fp32", matrix: bool = False) -> float:
    """FLOP/s the device can sustain for dense math in `dtype`: min(issue-limited peak, TDP / energy
    per FLOP); bf16 GEMMs without bf16 units at EMULATED_BF16_GEMM_RATE of the fp32 rate."""
    if matrix and dtype_key(dtype) == "bf16" and emulates_bf16(device):
        return EMULATED_BF16_GEMM_RATE * sustained_flops(device, "fp32", matrix)
    peak = issue_limited_peak(device, dtype, matrix)
    if device.tdp_w <= 0:
        return peak
    pj = matrix_pj_per_flop(device, dtype) if uses_matrix_units(device, dtype, matrix) \
        else VECTOR_PJ_PER_FLOP.get(device.arch, _DEFAULT_PJ)
    return min(peak, device.tdp_w / (pj * 1e-12))
