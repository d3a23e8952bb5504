"""Fused attention: FlashAttention-style prefill (PyTorch SDPA, FlashAttention 2/3/4, FlashInfer, Triton,
TensorRT-LLM's kernels) and decode against a key/value cache (paged, split-KV).

Kernel time only (no host floor). Vectorised over numpy arrays. Shapes: `batch` sequences, `heads` query
heads, `kv_heads` key/value heads (GQA), `head_dim`; prefill of `isl` new tokens over `prefix` cached ones;
decode of one token per sequence against `kv_len` cached ones.

Prefill (`context_attention_ms`, `sdpa_ms`):
    pairs     (query, key) pairs the kernel computes in whole tiles (`block_q` queries, shorter for a short
              prefill, by `block_k` keys): the causal triangle's tiles with the prefix, or a window's band
    compute   4 x pairs x head_dim FLOPs at the matrix rate x the generation's ISA fraction (`GENERATIONS`:
              FA2's mma.sync reaches ~2/3 of Hopper's and Blackwell's wgmma/tcgen05 peak) x a fitted kernel
              efficiency per kernel family (`AttentionConstants.efficiency`), stretched by wave quantization
              of batch x heads x query blocks over the SMs
    layout    one CTA per (sequence, query head, query tile); a prefill shorter than a query tile may pack
              the query heads of a kv head into one tile's rows (FA3's pack_gqa, FlashInfer, TRT-LLM; not
              PyTorch SDPA): batch x kv heads x packed tiles CTAs. Both are priced, the cheaper taken
    exp       one exponential per pair on the SFU (`sfu_exp_per_sm_clock` per SM per clock); overlapped with the GEMMs by kernels
              that ping-pong warpgroups (FA3/FA4, TRT-LLM), added to them by FA2
    memory    q, o once, k and v once per kv head, at achievable bandwidth
    time      overhead + max(compute (+ exp), memory) + a fixed latency per wave of CTAs (SDPA's its own)
Decode (`generation_attention_ms`): the KV-cache read at achievable bandwidth, drawn by the CTAs in flight (batch x
kv heads x KV splits, split-KV when batch x kv heads leaves SMs idle), plus a fixed overhead and a fixed latency per
wave of CTAs stated at a reference SM clock (`REFERENCE_CLOCK_MHZ`) and scaled by the GPU's clock. An engine's
kernel reads an fp8 (or int8, fp4) cache at its family's fitted share of that bandwidth and adds a fitted time per
call. TensorRT-LLM's own decode falls back from XQA to masked MHA beyond 32 query heads per KV head
(`XQA_MAX_GROUP`): one CTA per (sequence, query head, KV block), each a latency-bound chain (a fixed start, then its
block's keys and values at a fitted rate per CTA, in SM cycles), `DECODE_CTAS_PER_SM` resident per SM.
SDPA backward (`sdpa_ms(backward=True)`): 2.5x the forward's GEMM FLOPs (five GEMMs to two) plus the
recomputed exponentials, at its own efficiency. fp32 SDPA runs PyTorch's memory-efficient kernel, whose fp32
GEMMs run on the tensor cores as three TF32 products (`MEM_EFFICIENT_FP32_PASSES`).

The constants fitted from data live in `AttentionConstants` (frozen, each with its provenance);
`experiments/kernels/attention_prior.py` refits them leave-one-GPU-out and reports held-out errors only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hybridperf.devices import DTYPE_BYTES, DeviceSpec
from hybridperf.priors.memory import achievable_bandwidth, l2_hit_fraction

#: the shortest query tile a prefill kernel uses (one MMA's rows)
MIN_BLOCK_Q = 16.0
#: L2 bytes an SM can load per clock (32 B/clk/SM on Ampere to Blackwell)
L2_BYTES_PER_SM_CLOCK = 32.0
#: PyTorch's memory-efficient attention in fp32 multiplies as three TF32 products on the tensor cores
#: (cutlass OpMultiplyAddFastF32), keeping fp32 accuracy at a third of the TF32 rate
MEM_EFFICIENT_FP32_PASSES = 3.0


@dataclass(frozen=True)
class Generation:
    """A FlashAttention-style kernel generation on one architecture: tile sizes (query rows x key columns
    per step, by head_dim bucket), CTAs resident per SM, the share of the arch's matrix peak its MMA
    instructions reach, and whether its softmax overlaps the GEMMs. Published kernel designs, not fits."""

    name: str
    block_q: int
    block_k: int
    ctas_per_sm: int
    isa_fraction: float
    overlap_exp: bool


def _gen(name, bq, bk, ctas, isa, overlap) -> Generation:
    return Generation(name, bq, bk, ctas, isa, overlap)


#: (kernel generation, arch) -> design. FA2 (Dao 2023): 128x64 tiles, mma.sync; on Hopper/Blackwell mma.sync
#: tops out near 2/3 of wgmma/tcgen05 peak. FA3 (Shah et al. 2024): 128x128 (hd 128), wgmma, warpgroup
#: ping-pong. FA4 / TRT-LLM / FlashInfer on Blackwell: 2 x 128 query rows per CTA, tcgen05.
GENERATIONS = {
    ("fa2", "ampere"): _gen("fa2", 128, 64, 1, 1.0, False),
    ("fa2", "ada"): _gen("fa2", 128, 64, 1, 1.0, False),
    ("fa2", "hopper"): _gen("fa2", 128, 64, 1, 0.67, False),
    ("fa2", "blackwell"): _gen("fa2", 128, 64, 1, 0.5, False),
    ("native", "ampere"): _gen("native", 128, 64, 1, 1.0, False),
    ("native", "ada"): _gen("native", 128, 64, 1, 1.0, False),
    ("native", "hopper"): _gen("native", 128, 128, 1, 1.0, True),
    ("native", "blackwell"): _gen("native", 256, 128, 1, 1.0, True),
}

#: kernel_source (aiconfigurator's, or ours) -> kernel family; a family maps to a generation per arch
KERNEL_FAMILIES = {
    "sdpa": "sdpa", "torch_sdpa": "sdpa", "flash_attention": "fa2", "vllm_flash_attn": "fa2", "vllm_flash_attn_fa2": "fa2",
    "fa3": "fa3", "vllm_flash_attn_fa3": "fa3", "vllm_flash_attn_fa4": "fa4",
    "torch_flow": "trtllm", "trtllm_mha": "trtllm", "vllm_flashinfer_trtllmprefill": "trtllm",
    "vllm_flashinfer_trtllmdecode": "trtllm",
    "flashinfer": "flashinfer", "vllm_flashinfer": "flashinfer", "vllm_flashinfer_fiprefill": "flashinfer",
    "vllm_flashinfer_fidecode": "flashinfer", "torch_flow_flashinfer": "flashinfer",
    "triton": "triton", "vllm_triton_attn": "triton",
}
#: kernel sources naming PyTorch's own SDPA (a bare kernel); an unnamed source (None) is a serving engine's
#: fallback and keeps the engines' per-call decode overhead
SDPA_SOURCES = ("sdpa", "torch_sdpa")
#: families whose Hopper/Blackwell code reaches no more than FA2's mma.sync: FA2 itself, and the Triton
#: attention kernels of vLLM and SGLang. PyTorch's SDPA (torch 2.11) is not among them: on the H100 its causal
#: forward reached 600 TFLOP/s (`h100_sdpa_fp8`), beyond what mma.sync can
FA2_FAMILIES = ("fa2", "triton")
#: families whose softmax does not overlap the GEMMs (no warpgroup ping-pong): the exponentials add to the
#: GEMM time. PyTorch's SDPA is one: its head_dim-64 kernels ran at 0.5-0.8x the speed an overlapped
#: softmax would give on the H100 (`h100_sdpa_fp8`)
SERIAL_SOFTMAX_FAMILIES = ("fa2", "triton", "sdpa")
#: a family's kin, whose fitted matrix efficiency it takes where it was never fitted itself: FA3 is FlashAttention-2's
#: algorithm on Hopper's wgmma, which `GENERATIONS` models (FA2 reaches 73% of A100's matrix peak, FA3 75% of
#: H100's: Dao 2023, Shah et al. 2024). FA4 has no published Hopper figure and keeps the engines' median
KIN_FAMILIES = {"fa3": "fa2"}
#: families whose short prefills never pack a kv head's query heads into one tile: PyTorch's flash kernels
UNPACKED_FAMILIES = ("sdpa",)


def kernel_family(kernel_source: str | None) -> str:
    """Kernel family of a kernel source (None: PyTorch SDPA's flash backend; unknown: `native`)."""
    if kernel_source is None:
        return "sdpa"
    return KERNEL_FAMILIES.get(str(kernel_source), "native")


def generation(device: DeviceSpec, family: str) -> Generation:
    kind = "fa2" if family in FA2_FAMILIES else "native"
    return GENERATIONS.get((kind, device.kernel_arch), GENERATIONS[(kind, "ampere")])


@dataclass(frozen=True)
class Fitted:
    """A constant fitted to measurements: value, unit, and where it comes from."""

    value: float
    unit: str
    source: str  # tables (GPU, framework) it was fitted on
    script: str = "experiments/kernels/attention_prior.py"


@dataclass(frozen=True)
class AttentionConstants:
    """Fitted constants of the attention prior (`experiments/kernels/attention_prior.py --write-constants` prints
    them): kernel efficiency per family for prefill and decode, fixed per-kernel overheads and per-wave
    latencies (prefill, decode, PyTorch SDPA's), the fp8 share, an fp8 cache's decode bandwidth share and time per
    call per family, the SDPA backward's efficiency and the memory-efficient backend's (fp32, explicit masks)."""

    efficiency: dict = field(default_factory=dict)  # family -> Fitted (share of the ISA's matrix rate)
    decode_bw: dict = field(default_factory=dict)  # family -> Fitted (share of achievable bandwidth)
    context_overhead_ms: Fitted = Fitted(0.005, "ms", "default")
    decode_overhead_ms: Fitted = Fitted(0.005, "ms", "default")
    decode_wave_ms: Fitted = Fitted(0.002, "ms", "default")  # a decode wave's fixed latency at the reference clock
    context_wave_ms: Fitted = Fitted(0.0, "ms", "default")  # a wave of prefill CTAs' fixed latency
    sdpa_wave_ms: Fitted = Fitted(0.0, "ms", "default")  # the same for PyTorch SDPA's kernels
    sdpa_decode_wave_ms: Fitted = Fitted(0.004, "ms", "default")  # PyTorch SDPA's one-query kernel, per wave
    mmha_cta_kcycles: Fitted = Fitted(10.0, "kcycles", "default")  # TensorRT-LLM's masked-MHA decode: a CTA's start
    mmha_bytes_per_cycle: Fitted = Fitted(8.0, "B/cycle", "default")  # ... and one CTA's K/V stream (bf16 width)
    fp8_efficiency: Fitted = Fitted(1.0, "share", "default")  # fp8 prefill's share of the bf16 efficiency
    decode_fp8_bw: dict = field(default_factory=dict)  # family -> Fitted (an fp8 cache's share of decode_bw)
    decode_fp8_ms: dict = field(default_factory=dict)  # family -> Fitted (an fp8 cache's added time per call)
    sdpa_bwd_efficiency: Fitted = Fitted(0.5, "share", "default")
    sdpa_bwd_wide_head: Fitted = Fitted(1.0, "ratio", "default")  # backward slowdown per head-dim doubling past 128
    mem_efficient_efficiency: Fitted = Fitted(0.5, "share", "default")

    def eff(self, family: str) -> float:
        """A family's fitted efficiency; a family never fitted takes its kin's (`KIN_FAMILIES`), else the median
        of the engines' families."""
        f = self.efficiency.get(family) or self.efficiency.get(KIN_FAMILIES.get(family, ""))
        return f.value if f else _engine_median(self.efficiency, 0.6)

    def bw(self, family: str) -> float:
        """A family's fitted decode bandwidth share; a family never fitted takes the engines' median."""
        f = self.decode_bw.get(family)
        return f.value if f else _engine_median(self.decode_bw, 0.8)

    def fp8_bw(self, family: str) -> float:
        """A family's share of its decode bandwidth on an fp8 cache (dequantizing in the kernel, some kernels gain
        little from the halved bytes); a family never fitted takes the engines' median."""
        f = self.decode_fp8_bw.get(family)
        return f.value if f else _engine_median(self.decode_fp8_bw, 1.0)

    def fp8_ms(self, family: str) -> float:
        """A family's added time per decode call on an fp8 cache (small caches decode slower in fp8 than in bf16:
        1.2-1.8x in FlashInfer's, FA3's and TensorRT-LLM's tables); a family never fitted takes the engines' median."""
        f = self.decode_fp8_ms.get(family)
        return f.value if f else _engine_median(self.decode_fp8_ms, 0.0)


def _engine_median(per_family: dict, default: float) -> float:
    """The median over the engines' kernel families: PyTorch SDPA's entries, read off one GPU's SDPA kernels
    (ours), stand for no engine's kernel and would carry that GPU into every family a fold never saw."""
    vals = [v.value for k, v in per_family.items() if k != "sdpa"]
    return float(np.median(vals)) if vals else default


_ALL = "a100_sxm, h100_sxm, l40s, b200_sxm aiconfigurator attention tables (all frameworks)"
_H100 = "h100_sdpa_fp8 (NVIDIA H100 80GB HBM3, torch 2.11; one GPU)"
_H200 = "our H200's graph-timed SDPA decode kernels (experiments/data/measured/h200/modern, torch 2.11; one GPU)"
#: shipped constants, `python -m experiments.kernels.attention_prior --write-constants`: fitted on all four
#: aiconfigurator systems (prefill, decode) and on the H100 SDPA measurements (sdpa, its backward); the same
#: fit's held-out errors are in experiments/results/attention_prior.md. PyTorch's one-query SDPA reads a
#: contiguous KV cache, not pages: it is taken to stream at achievable DRAM bandwidth (share 1, not fitted);
#: checked on our H200's SDPA decode kernels (`experiments/kernels/modern_kernels.py`): 86% MAPE with
#: FA2's paged share (~0.6), 26% with 1. Its per-wave latency is read off those H200 kernels: the engines'
#: (11 us a wave) made a 3 us call on our H100 cost 12 us. No measurement has set the memory-efficient
#: backend's efficiency (fp32, explicit masks): its default is a guess, never fitted; on our H200's masked calls, every
#: tile computed, it prices them within 6% (`modern_kernels`).
CONSTANTS = AttentionConstants(
    efficiency={"fa2": Fitted(0.723, "share", _ALL), "fa3": Fitted(0.702, "share", _ALL),
                "fa4": Fitted(0.328, "share", _ALL), "trtllm": Fitted(0.483, "share", _ALL),
                "flashinfer": Fitted(0.556, "share", _ALL), "triton": Fitted(0.200, "share", _ALL),
                "sdpa": Fitted(0.882, "share", _H100)},
    decode_bw={"fa2": Fitted(0.650, "share", _ALL), "fa3": Fitted(0.926, "share", _ALL),
               "fa4": Fitted(0.775, "share", _ALL), "trtllm": Fitted(1.065, "share", _ALL),
               "flashinfer": Fitted(1.190, "share", _ALL), "triton": Fitted(0.716, "share", _ALL),
               "sdpa": Fitted(1.0, "share", "achievable DRAM bandwidth (not fitted; checked on our H200)")},
    context_overhead_ms=Fitted(0.0072, "ms", _ALL),
    decode_overhead_ms=Fitted(0.00088, "ms", _ALL),
    decode_wave_ms=Fitted(0.0102, "ms", _ALL),
    context_wave_ms=Fitted(0.0068, "ms", _ALL),
    sdpa_wave_ms=Fitted(0.00186, "ms", _H100),
    sdpa_decode_wave_ms=Fitted(0.00386, "ms", _H200),
    fp8_efficiency=Fitted(0.602, "share", _ALL),
    mmha_cta_kcycles=Fitted(12.04, "kcycles", _ALL),
    mmha_bytes_per_cycle=Fitted(6.72, "B/cycle", _ALL),
    decode_fp8_bw={"fa3": Fitted(0.750, "share", _ALL), "flashinfer": Fitted(0.917, "share", _ALL),
                   "triton": Fitted(0.628, "share", _ALL), "trtllm": Fitted(0.896, "share", _ALL)},
    decode_fp8_ms={"fa3": Fitted(0.0048, "ms", _ALL), "flashinfer": Fitted(0.0035, "ms", _ALL),
                   "triton": Fitted(0.0020, "ms", _ALL), "trtllm": Fitted(0.0009, "ms", _ALL)},
    sdpa_bwd_efficiency=Fitted(0.730, "share", _H100),
    sdpa_bwd_wide_head=Fitted(1.486, "ratio", _H100),
    mem_efficient_efficiency=Fitted(0.5, "share", "default (not measured)"),
)


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def computed_pairs(q_len, kv_len, causal: bool, window, block_q: int, block_k: int) -> np.ndarray:
    """(query, key) pairs a tiled kernel computes per (sequence, head): whole tiles of `block_q` queries by
    `block_k` keys (a short prefill still fills one query tile), the causal triangle's tiles with the prefix,
    or a sliding window's band of tiles."""
    q, kv, w = _f(q_len), _f(kv_len), _f(window)
    nq = np.ceil(q / block_q)
    nk = np.ceil(kv / block_k)
    band = np.where(w > 0, np.ceil((w + block_q) / block_k) + 1.0, nk)
    if causal:
        prefix = np.maximum(kv - q, 0.0)
        tiles = nq * (np.ceil(prefix / block_k) + 0.5) + (block_q / block_k) * nq * (nq + 1) / 2.0
        tiles = np.minimum(tiles, nq * np.minimum(nk, band))
    else:
        tiles = nq * np.minimum(nk, band)
    return tiles * block_q * block_k


def wave_stretch(ctas, device: DeviceSpec, ctas_per_sm: int) -> np.ndarray:
    """Time stretch of `ctas` equal CTAs over the SMs: ceil(waves) / waves (1 once many waves run)."""
    waves = np.maximum(_f(ctas), 1.0) / (device.num_sms * ctas_per_sm)
    return np.ceil(waves) / waves


#: the SM clock the per-wave latencies are stated at (an H100 SXM's boost clock)
REFERENCE_CLOCK_MHZ = 1980.0


def clock_scale(device: DeviceSpec) -> float:
    """A decode wave's fixed latency (load a query tile, a few keys, write the result: a chain of dependent
    instructions, not a stream) in units of the reference SM clock's."""
    return REFERENCE_CLOCK_MHZ / device.boost_clock_mhz


def exp_rate(device: DeviceSpec) -> float:
    """Exponentials per second on the SFUs (`sfu_exp_per_sm_clock`: 16 per SM per clock from sm_80 to sm_100,
    twice that on Blackwell Ultra)."""
    return device.num_sms * device.sfu_exp_per_sm_clock * device.boost_clock_mhz * 1e6


def matrix_rate(device: DeviceSpec, dtype: str) -> float:
    half = device.peak("fp16" if dtype in ("fp16", "float16") else "bf16", matrix=True)
    return max(device.peak("fp8", matrix=True), half) if dtype in ("fp8", "float8") else half


def context_attention_ms(batch, isl, heads, kv_heads, head_dim, device: DeviceSpec, dtype: str = "bf16",
                         kv_dtype: str = "bf16", causal: bool = True, window=0, prefix=0,
                         kernel_source: str | None = None, constants: AttentionConstants = CONSTANTS,
                         v_dim=None) -> np.ndarray:
    """Kernel time (ms) of one fused attention forward over a prefill."""
    batch, isl, heads, kv_heads, head_dim, prefix = (_f(x) for x in (batch, isl, heads, kv_heads, head_dim, prefix))
    vd = head_dim if v_dim is None else _f(v_dim)
    fam = kernel_family(kernel_source)
    g = generation(device, fam)
    kv = isl + prefix
    group = np.maximum(heads / np.maximum(kv_heads, 1.0), 1.0)
    rate = matrix_rate(device, dtype) * g.isa_fraction * constants.eff(fam) \
        * (constants.fp8_efficiency.value if dtype == "fp8" else 1.0)
    eb, kb = DTYPE_BYTES.get(dtype, 2), DTYPE_BYTES.get(kv_dtype, 2)
    read = np.where(_f(window) > 0, np.minimum(kv, isl + _f(window)), kv)  # a sliding window reads its band only
    nbytes = batch * (isl * heads * (head_dim + vd) * eb + read * kv_heads * (head_dim + vd) * kb)
    mem = kv_read_ms(nbytes, device) / 1e3
    # one CTA per (sequence, query head, query tile), or GQA-packed: the query heads of a key/value head
    # share a tile's rows (FA3's pack_gqa, FlashInfer, TRT-LLM), fewer CTAs when the prefill is short;
    # the kernel runs the cheaper layout
    per_head = _prefill_layout_ms(batch, heads, isl, kv, 1.0, causal, window, head_dim + vd, rate, mem, g, fam,
                                  device, constants)
    if fam in UNPACKED_FAMILIES:
        return per_head + constants.context_overhead_ms.value
    packed = _prefill_layout_ms(batch, kv_heads, isl, kv, group, causal, window, head_dim + vd, rate, mem, g, fam,
                                device, constants)
    short = isl < g.block_q  # packing is for a prefill shorter than one query tile
    return np.where(short, np.minimum(per_head, packed), per_head) + constants.context_overhead_ms.value


def _prefill_layout_ms(batch, units, isl, kv, group, causal, window, qk_v_dim, rate, mem, g: Generation, fam: str,
                       device: DeviceSpec, constants: AttentionConstants) -> np.ndarray:
    """Kernel body (ms) when `units` (query heads, or key/value heads with their `group` query heads packed
    into one tile's rows) each run their own query tiles. A short prefill gets a shorter query tile
    (kernels pick it by rows, 16 at least)."""
    rows = isl * group
    bq = np.minimum(g.block_q, np.maximum(MIN_BLOCK_Q, 2.0 ** np.ceil(np.log2(np.maximum(rows, 1.0)))))
    per_tile = np.maximum(np.floor(bq / group), 1.0)  # whole tokens, each with its `group` query heads
    spans = np.ceil(group / bq)  # tiles one token's heads fill when the group is wider than a tile
    tiles = np.ceil(isl / per_tile) * spans
    pairs = computed_pairs(isl, kv, causal, window, per_tile, g.block_k) * (bq / per_tile) * spans
    flops = 2.0 * batch * units * pairs * qk_v_dim
    ctas = batch * units * tiles
    stretch = wave_stretch(ctas, device, g.ctas_per_sm)
    mm = flops / rate * stretch
    ex = batch * units * pairs / exp_rate(device) * stretch
    compute = np.maximum(mm, ex) if g.overlap_exp and fam not in SERIAL_SOFTMAX_FAMILIES else mm + ex
    # every wave of CTAs pays a fixed latency (load the query tile, write the output): PyTorch SDPA's in
    # proportion to its tile's rows, as our H100's collected SDPA calls of a few tokens (short tiles) show; the
    # engines' whole, which their tables fit better (experiments/RESULTS.md, section 10)
    waves = np.ceil(ctas / (device.num_sms * g.ctas_per_sm))
    if fam == "sdpa":
        return np.maximum(compute, mem) * 1e3 + waves * constants.sdpa_wave_ms.value * bq / g.block_q
    return np.maximum(compute, mem) * 1e3 + waves * constants.context_wave_ms.value


def l2_bandwidth(device: DeviceSpec) -> float:
    """Bytes per second the SMs load from L2 (L2_BYTES_PER_SM_CLOCK per SM per clock)."""
    return device.num_sms * L2_BYTES_PER_SM_CLOCK * device.boost_clock_mhz * 1e6


def kv_read_ms(nbytes, device: DeviceSpec, parallel_fraction=1.0) -> np.ndarray:
    """Time (ms) to stream `nbytes` of keys and values that a repeated call finds in L2 as far as they fit
    (`l2_hit_fraction`): L2 at L2_BYTES_PER_SM_CLOCK per SM, DRAM at achievable bandwidth. Ada's 96 MB L2
    holds a decode step's whole cache up to ~50 MB, read several times faster than its GDDR6."""
    nbytes = _f(nbytes)
    hit = l2_hit_fraction(nbytes, device)
    dram = achievable_bandwidth(device)
    return nbytes * (hit / l2_bandwidth(device) + (1.0 - hit) / dram) / np.clip(parallel_fraction, 1e-3, 1.0) * 1e3


#: decode CTAs resident per SM (small CTAs: one (sequence, kv head, split) each)
DECODE_CTAS_PER_SM = 4
#: TensorRT-LLM's own attention op (aiconfigurator's `torch_flow`) decodes with XQA, which packs up to this many
#: query heads of a KV head into one CTA; a larger group falls back to masked MHA, one CTA per (sequence, query head)
#: streaming that head's keys and values at bf16 width (an fp8 cache takes as long on Hopper and Blackwell). All four
#: GPUs' tables show the cliff: 6-60x slower than XQA's one pass at 48-128 query heads per KV head, not at 32. Each
#: CTA is a dependent chain, not a bandwidth share: fitted per GPU, its start (9-13k cycles) and its stream (6-9
#: bytes per cycle) agree across A100, H100, L40S and B200 in SM cycles (`mmha_ms`; a long cache on few CTAs is split
#: over more, TensorRT-LLM's multi-block mode)
XQA_MAX_GROUP = 32
XQA_SOURCES = ("torch_flow",)


def decode_splits(batch, kv_heads, kv_len, device: DeviceSpec, min_chunk: int = 256) -> np.ndarray:
    """KV splits a split-KV decode kernel uses: enough to give every SM two CTAs when batch x kv heads is
    small, no chunk shorter than `min_chunk` keys on average (a fractional count: kernels split unevenly, and a
    whole count priced a 257-key cache 1.2x faster than a 254-key one, its chunk halved)."""
    work = np.maximum(_f(batch) * _f(kv_heads), 1.0)
    want = np.ceil(2.0 * device.num_sms / work)
    return np.clip(np.minimum(want, _f(kv_len) / min_chunk), 1.0, None)


def generation_attention_ms(batch, kv_len, heads, kv_heads, head_dim, device: DeviceSpec, dtype: str = "bf16",
                            kv_dtype: str = "bf16", window=0, kernel_source: str | None = None,
                            constants: AttentionConstants = CONSTANTS, q_len=1, xqa_fallback: bool = True) -> np.ndarray:
    """Kernel time (ms) of one decode step's attention: `q_len` (1) query tokens per sequence. `xqa_fallback`:
    whether TensorRT-LLM's fallback beyond `XQA_MAX_GROUP` applies (False for MLA and DeepSeek-V4's attention,
    which it decodes in kernels of their own)."""
    batch, kv_len, heads, kv_heads, head_dim, window = (
        _f(x) for x in (batch, kv_len, heads, kv_heads, head_dim, window))
    fam = kernel_family(kernel_source)
    keys = np.where(window > 0, np.minimum(kv_len, window), kv_len)
    nbytes = batch * 2.0 * keys * kv_heads * head_dim * DTYPE_BYTES.get(kv_dtype, 2)
    ctas = batch * kv_heads * decode_splits(batch, kv_heads, keys, device)
    par = np.minimum(ctas / (2.0 * device.num_sms), 1.0)
    # an 8- or 4-bit cache is dequantized in the engines' kernels: fp8's fitted rule (no table holds int8 or fp4)
    quantized = DTYPE_BYTES.get(kv_dtype, 2) < 2 and kernel_source not in SDPA_SOURCES
    mem = kv_read_ms(nbytes, device, par) / (constants.bw(fam) * (constants.fp8_bw(fam) if quantized else 1.0))
    group = heads / np.maximum(kv_heads, 1.0)
    # GQA packs a kv head's query heads into one MMA's rows; MHA wastes all but one of 16 rows
    rows = np.maximum(group * _f(q_len), 1.0)
    mma_rows = np.ceil(rows / 16.0) * 16.0
    flops = 4.0 * batch * kv_heads * mma_rows * keys * head_dim
    compute = flops / (matrix_rate(device, dtype) * constants.eff(fam)) * 1e3
    waves = np.ceil(ctas / (device.num_sms * DECODE_CTAS_PER_SM))
    if kernel_source in SDPA_SOURCES:  # a bare kernel: no engine's per-call work in its timed region
        return np.maximum(mem, compute) + waves * constants.sdpa_decode_wave_ms.value * clock_scale(device)
    body = np.maximum(mem, compute) + waves * constants.decode_wave_ms.value * clock_scale(device)
    if xqa_fallback and kernel_source in XQA_SOURCES:
        body = np.where(group > XQA_MAX_GROUP, mmha_ms(batch, heads, keys, head_dim, device, constants), body)
    return body + constants.decode_overhead_ms.value + (constants.fp8_ms(fam) if quantized else 0.0)


def mmha_ms(batch, heads, keys, head_dim, device: DeviceSpec, constants: AttentionConstants = CONSTANTS) -> np.ndarray:
    """TensorRT-LLM's masked-MHA decode (ms): a CTA per (sequence, query head, KV block) -- its multi-block mode
    splits a long cache over CTAs when the sequences and heads leave SMs idle (`decode_splits`) -- in waves of
    `DECODE_CTAS_PER_SM` per SM, each a fixed start plus its block's keys and values at bf16 width streamed at one
    CTA's fitted rate, both in SM cycles at the boost clock."""
    splits = decode_splits(batch, heads, keys, device)
    waves = np.ceil(_f(batch) * _f(heads) * splits / (device.num_sms * DECODE_CTAS_PER_SM))
    cycles = constants.mmha_cta_kcycles.value * 1e3 \
        + _f(keys) / splits * _f(head_dim) * 4.0 / constants.mmha_bytes_per_cycle.value
    return waves * cycles / (device.boost_clock_mhz * 1e6) * 1e3


def sdpa_ms(batch, seq, heads, kv_heads, head_dim, device: DeviceSpec, dtype: str = "bf16", causal: bool = True,
            backward: bool = False, kv_seq=None, backend: str = "flash", window=0, v_dim=None,
            constants: AttentionConstants = CONSTANTS) -> np.ndarray:
    """Kernel time (ms) of PyTorch's `scaled_dot_product_attention` forward, or of its backward alone
    (`backward=True`): `seq` queries against `kv_seq` keys (default `seq`). `backend`: `flash` (FA2 or cuDNN, half
    precision, no mask), `efficient` (memory-efficient: fp32, or an explicit mask, whose masked tiles are
    still computed), or `decode` (one query row: the KV-cache read bounds it)."""
    kv_seq = seq if kv_seq is None else kv_seq
    if backend == "decode":
        t = generation_attention_ms(batch, kv_seq, heads, kv_heads, head_dim, device, dtype, dtype, window,
                                    "sdpa", constants, q_len=seq)
        return 2.5 * t if backward else t
    prefix = np.maximum(_f(kv_seq) - _f(seq), 0.0)
    fwd = context_attention_ms(batch, seq, heads, kv_heads, head_dim, device, "bf16" if dtype == "fp32" else dtype,
                               dtype, causal, window if backend == "flash" else 0, prefix,
                               "sdpa", constants, v_dim)
    over = constants.context_overhead_ms.value
    body = fwd - over
    if backend == "efficient":
        scale = constants.eff("sdpa") / constants.mem_efficient_efficiency.value
        if dtype == "fp32":  # three TF32 products on the tensor cores (or the fp32 lanes, if faster)
            tc = _fp32_rate(device)
            scale *= matrix_rate(device, "bf16") / tc
        body = body * scale
    if backward:  # FA2's backward takes smaller tiles for a head wider than 128 (FlashAttention's kernel traits)
        wide = np.maximum(np.log2(_f(head_dim) / 128.0), 0.0)
        body = body * 2.5 * constants.eff("sdpa") / constants.sdpa_bwd_efficiency.value \
            * constants.sdpa_bwd_wide_head.value ** wide
    return body + over


def _fp32_rate(device: DeviceSpec) -> float:
    """FLOP/s of fp32 GEMMs inside the memory-efficient kernel: 3xTF32 on tensor cores, fp32 matrix cores
    where the part has them (AMD's MFMA; CDNA4 dropped TF32), else the vector units."""
    return max(device.peak("tf32", matrix=True) / MEM_EFFICIENT_FP32_PASSES, device.peak("fp32", matrix=True))
