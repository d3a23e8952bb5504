"""Prior constants read off individual GPUs: the per-GPU fits, the value the prior uses, and where each
came from.

A constant fitted on one GPU's measurements must not price that GPU when it is scored held out. So the
per-GPU fits stay here as data, `fitted_constants(exclude_device=...)` turns them into the frozen
`PriorConstants` a prediction uses (the fits of every GPU but the excluded one), and callers pass that
value explicitly (`kernel_prior_terms(..., constants=...)`, `Predictor.with_constants`). Nothing is
rebound at run time.

`PROVENANCE` names every hand-set or fitted constant of the priors with the GPUs and table it was read
off, what it was checked on and the script that refits it; `hybridperf constants` prints it and flags
the constants read off one GPU that price every GPU.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Mapping

import numpy as np

from hybridperf.devices import get_device

#: (tile rows, tile output columns) of the batched SGEMM kernels each traced GPU ran for torch.bmm
#: (NeuSight's test-table traces, cuBLAS 12.1; `experiments/kernels/priors_report.py` re-reads them).
BATCHED_SGEMM_TRACES: dict[str, dict[str, tuple[tuple[int, int], ...]]] = {
    "pascal": {"Tesla P100-PCIE-16GB": ((64, 128),), "Tesla P4": ((64, 128), (128, 128))},
    "ampere": {"NVIDIA A100-PCIE-40GB": ((128, 128),)},
    # experiments/data/measured/h200/kernel_trace.csv (torch 2.11, cuBLAS 13.0): sm80_xmma tiles 32x32,
    # 64x64, 128x64, 64x128, 128x128 (and 256x64, 64x256, 256x128, 128x256, which TILES lacks)
    "hopper": {"NVIDIA H200": ((32, 32), (64, 64), (64, 128), (128, 64), (128, 128))},
}
#: architectures without a trace (of any GPU but the one scored) assumed to run another's SIMT SGEMM
#: kernel family (not verified)
BATCHED_SGEMM_SAME_AS = {"ada": "ampere", "hopper": "ampere"}

#: Per GPU: (pages a tile's operand rows may span before its loads miss the translation cache, GEMM
#: FLOP per GPU clock once every load misses), each fitted on that GPU's Linear test table alone by
#: `experiments/kernels/priors_report.py` (`translation_fits`), which scores each GPU with the others' values.
TRANSLATION_FITS: dict[str, dict[str, tuple[float, float]]] = {
    "pascal": {"Tesla P100-PCIE-16GB": (3.5, 1900.0), "Tesla P4": (2.5, 2450.0)},
}

#: Per GPU: how much slower than the tile model a split-K SGEMM of `F.linear` with a bias runs, as
#: the exponent `a` of its blocks' rate split ** -a, each fitted on that GPU's own fp32 Linear test
#: table by `experiments/kernels/priors_report.py` (`split_rate_fits`), which scores each GPU with the others'.
#: Ampere's and Hopper's cuBLAS rarely split that call over the grid (2 of the A100's 1,040 traced test
#: shapes, 1 of our H200's 18) and run a partial wave of small tiles instead, slower than the split the
#: tile model prices. Their other GEMMs do split (the H100's GPT-2 profile: Conv1D's addmm in
#: cutlass kernels, the backward's mm with xmma split-K), so only the `linear` form pays
#: (`hybridperf.datasets.schema`: a request's `form`). Pascal, Volta and Turing split it as priced.
SPLIT_RATE_FITS: dict[str, dict[str, float]] = {
    "ampere": {"NVIDIA A100-PCIE-40GB": 0.10},
    "hopper": {"NVIDIA H200": 0.35},
}

#: Per GPU with a split L2: the share of its nominal L2 that holds rows awaiting their re-read, each
#: fitted on that GPU's own softmax and LayerNorm test rows (minimum MAPE on a 0.05 grid;
#: `experiments/kernels/priors_report.py`, `reread_share_fits`): the A100's NeuSight test table 7.3 -> 5.9%,
#: our H200's fp32 and fp16 grid (of its 60 MiB L2, what torch reports) 8.8 -> 7.0%. What transfers is the
#: capacity, not the share: both fits hold about 28-30 MB (`reread_capacity_table`), and a GPU held out
#: with the other's capacity scores A100 6.0%, H200 7.0%, where the other's share scored 8.6% and 7.8%.
#: Why less than all of it is a guess: a line read from the far half may be cached in both.
REREAD_L2_SHARE_FITS: dict[str, float] = {"NVIDIA A100-PCIE-40GB": 0.70, "NVIDIA H200": 0.50}

#: Fraction of the tile model's rate that a vendor's BLAS reaches, by (vendor, op). Fitted by
#: `hybridperf.training.library_efficiency` on the traced GEMM nodes of NeuSight's whole-model labels
#: (large fp32 GEMMs on MI100 and MI210; leave-one-AMD-GPU-out in the experiments): rocBLAS on fp32
#: MFMA reaches less of its peak than cuBLAS of its own, batched GEMMs even less. NVIDIA is 1 by
#: construction (the tile model's constants come from NVIDIA GPUs).
LIBRARY_EFFICIENCY: dict[tuple[str, str], float] = {("amd", "linear"): 0.771, ("amd", "bmm"): 0.585}


def batched_sgemm_table(exclude_device: str | None = None) -> dict[str, tuple[tuple[int, int], ...]]:
    """Per architecture, the tiles its batched SGEMM runs, from the traces of every GPU but
    `exclude_device` (leave-one-GPU-out: an architecture traced on that GPU alone drops out)."""
    table = {}
    for arch, by_device in BATCHED_SGEMM_TRACES.items():
        tiles = sorted({t for dev, ts in by_device.items() if dev != exclude_device for t in ts})
        if tiles:
            table[arch] = tuple(tiles)
    table.update({arch: table[src] for arch, src in BATCHED_SGEMM_SAME_AS.items() if src in table and arch not in table})
    return table


def translation_table(exclude_device: str | None = None) -> dict[str, tuple[float, float]]:
    """Per architecture, the translation limit fitted on every GPU but `exclude_device`: the mean page
    budget and the geometric-mean rate of their fits (an architecture fitted on that GPU alone drops out)."""
    table = {}
    for arch, by_device in TRANSLATION_FITS.items():
        fits = np.array([f for dev, f in by_device.items() if dev != exclude_device])
        if len(fits):
            table[arch] = (float(fits[:, 0].mean()), float(np.exp(np.log(fits[:, 1]).mean())))
    return table


def split_rate_table(exclude_device: str | None = None) -> dict[str, float]:
    """Per architecture, the mean split-rate exponent fitted on every GPU but `exclude_device` (an
    architecture fitted on that GPU alone drops out)."""
    table = {}
    for arch, by_device in SPLIT_RATE_FITS.items():
        fits = [a for dev, a in by_device.items() if dev != exclude_device]
        if fits:
            table[arch] = float(np.mean(fits))
    return table


def reread_capacity_table(exclude_device: str | None = None) -> float | None:
    """The L2 capacity (MB) a split L2 keeps for rows awaiting their re-read: the mean of every fitted GPU's
    share x its L2 but `exclude_device`'s (None: no fit left, the whole L2)."""
    fits = [share * get_device(dev).l2_mb for dev, share in REREAD_L2_SHARE_FITS.items() if dev != exclude_device]
    return round(float(np.mean(fits)), 6) if fits else None


def split_l2_share(capacity_mb: float | None, l2_mb: float) -> float:
    """The share of an L2 of `l2_mb` that a re-read capacity of `capacity_mb` is (1: none, or more)."""
    return 1.0 if capacity_mb is None else min(1.0, capacity_mb / l2_mb)


def _frozen(d: Mapping) -> Mapping:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class PriorConstants:
    """The prior constants that come from individual GPUs' fits, as one immutable value.

    `batched_sgemm_tiles`: per architecture, the tiles torch.bmm's vector-math kernels run (absent: the
    orientation rule); `translation_limit`: per architecture, (page budget, FLOP per clock);
    `split_rate_exponent`: per architecture, the slowdown exponent of `F.linear`'s split-K;
    `reread_l2_mb`: the capacity of a split L2 that row-wise re-reads see (None: all of it); `library_efficiency`: per
    (vendor, op), the BLAS's fraction of the tile model's rate."""

    batched_sgemm_tiles: Mapping[str, tuple] = field(default_factory=lambda: _frozen(batched_sgemm_table()))
    translation_limit: Mapping[str, tuple] = field(default_factory=lambda: _frozen(translation_table()))
    split_rate_exponent: Mapping[str, float] = field(default_factory=lambda: _frozen(split_rate_table()))
    reread_l2_mb: float | None = field(default_factory=reread_capacity_table)
    library_efficiency: Mapping[tuple, float] = field(default_factory=lambda: _frozen(LIBRARY_EFFICIENCY))

    def __post_init__(self):
        for name in ("batched_sgemm_tiles", "translation_limit", "split_rate_exponent", "library_efficiency"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    def with_batched_tiles(self, arch: str, tiles) -> "PriorConstants":
        """These constants with `arch`'s batched-SGEMM tiles set to `tiles` (None: the orientation rule)."""
        table = {a: t for a, t in self.batched_sgemm_tiles.items() if a != arch}
        if tiles is not None:
            table[arch] = tuple(tuple(int(v) for v in t) for t in tiles)
        return replace(self, batched_sgemm_tiles=table)

    def with_library_efficiency(self, table: Mapping) -> "PriorConstants":
        """These constants with the vendor BLAS efficiencies `table` ({} = the tile model's rate)."""
        return replace(self, library_efficiency=table)


def fitted_constants(exclude_device: str | None = None) -> PriorConstants:
    """The constants fitted on every GPU but `exclude_device`: how a GPU is scored leave-one-GPU-out."""
    return PriorConstants(
        batched_sgemm_tiles=batched_sgemm_table(exclude_device),
        translation_limit=translation_table(exclude_device),
        split_rate_exponent=split_rate_table(exclude_device),
        reread_l2_mb=reread_capacity_table(exclude_device),
    )


#: the constants a prediction uses unless told otherwise (every GPU's fits)
DEFAULT_CONSTANTS = PriorConstants()


@dataclass(frozen=True)
class Provenance:
    """Where a prior constant comes from. `read_off`: the GPUs (or host) whose measurements set it, empty
    for spec-sheet or public figures; `applies_to`: `all` when it prices every GPU, else what it is
    restricted to; `refit`: the script that refits it."""

    name: str  # module.ATTRIBUTE
    unit: str
    source: str
    read_off: tuple[str, ...] = ()
    table: str = ""
    checked_on: str = ""
    refit: str = ""
    applies_to: str = "all"

    def value(self):
        module, attr = self.name.rsplit(".", 1)
        return getattr(importlib.import_module(f"hybridperf.priors.{module}"), attr)

    @property
    def one_gpu_default(self) -> bool:
        """Read off a single GPU and yet priced onto every GPU: the constants to re-check first."""
        return len(self.read_off) == 1 and self.applies_to == "all"


_H200_GRID = "experiments/data/measured/h200 (grid, kernel_trace)"
PROVENANCE: tuple[Provenance, ...] = (
    Provenance("gemm.TILES", "(tile_m, tile_n, blocks/SM, fraction of SM peak)", "engineering estimate of cuBLAS/CUTLASS tiles"),
    Provenance("gemm.K_OVERHEAD", "reduction steps per tile", "NeuSight fp32 GEMMs", ("P100", "P4", "T4", "V100", "A100"),
               "NeuSight train/test", refit="experiments/kernels/priors_report.py"),
    Provenance("gemm.K_OVERHEAD_MATRIX", "reduction steps per tile", "H200 fp16 GEMMs", ("NVIDIA H200",), _H200_GRID,
               "Vidur A40/A100 linears, H100 fp16/bf16 bmm", "experiments/kernels/priors_report.py"),
    Provenance("gemm.UNALIGNED_MATRIX_SLOWDOWN", "x slower by load width (bytes)", "H200 unaligned fp16 GEMMs",
               ("NVIDIA H200",), _H200_GRID, "H100 unaligned fp16 GEMMs (44 -> 22% MAPE)"),
    Provenance("constants.BATCHED_SGEMM_TRACES", "tiles per GPU", "cuBLAS kernel names in traces",
               ("Tesla P100-PCIE-16GB", "Tesla P4", "NVIDIA A100-PCIE-40GB", "NVIDIA H200"), "NeuSight test traces",
               refit="experiments/kernels/priors_report.py", applies_to="per architecture, leave-one-GPU-out"),
    Provenance("constants.TRANSLATION_FITS", "(pages, FLOP/clock)", "Pascal long-reduction Linears",
               ("Tesla P100-PCIE-16GB", "Tesla P4"), "NeuSight linear test", refit="experiments/kernels/priors_report.py",
               applies_to="pascal, leave-one-GPU-out"),
    Provenance("constants.SPLIT_RATE_FITS", "exponent", "F.linear split-K slowdown",
               ("NVIDIA A100-PCIE-40GB", "NVIDIA H200"), "NeuSight linear test; H200 grid",
               refit="experiments/kernels/priors_report.py", applies_to="ampere and hopper, leave-one-GPU-out"),
    Provenance("constants.REREAD_L2_SHARE_FITS", "share of the fitted GPU's L2 (transferred as MB)",
               "row-wise re-reads on a split L2",
               ("NVIDIA A100-PCIE-40GB", "NVIDIA H200"), "NeuSight softmax/ln test; H200 grid",
               refit="experiments/kernels/priors_report.py", applies_to="split-L2 GPUs, leave-one-GPU-out"),
    Provenance("constants.LIBRARY_EFFICIENCY", "fraction of the tile rate", "traced GEMMs of NeuSight's AMD labels",
               ("AMD Instinct MI100", "AMD Instinct MI210"), "NeuSight labels (FX traces)",
               refit="hybridperf/training/library_efficiency.py", applies_to="amd"),
    Provenance("kernel_prior.ELEMENTWISE_OPMATH_COST", "FLOP-equivalents per element", "H200 fp16 element-wise kernels",
               ("NVIDIA H200",), _H200_GRID, "H100 kernel grid", "experiments/kernels/priors_report.py"),
    Provenance("power.MATRIX_ENERGY_RATIO", "matrix / vector energy per FLOP",
               "public power-capped GEMM rates (T4, L4); H200 linears for hopper", ("NVIDIA H200",),
               "experiments/data/measured/h200/kernel_trace.csv", "H100, V100S, L40S public GEMM rates",
               "experiments/kernels/public_gemm_check.py", applies_to="per architecture (hopper from the H200)"),
    Provenance("power.ISSUE_FRACTION_BY_ARCH", "fraction of the fp32 peak", "H200 torch.mm fp32",
               ("NVIDIA H200",), "experiments/data/measured/h200/gemm.csv", "H100 (same SM)",
               applies_to="hopper"),
    Provenance("power.EMULATED_BF16_GEMM_RATE", "bf16 / fp32 rate", "public torch.mm rates of 5 GPUs"),
    Provenance("memory.HBM_EFFICIENCY", "fraction of DRAM peak", "public STREAM/BabelStream results"),
    Provenance("memory.GDDR_EFFICIENCY", "fraction of DRAM peak", "public STREAM/BabelStream results"),
    Provenance("rowwise.LAYERNORM_ROW_CYCLES", "SM cycles per row", "H200 fp32/fp16 LayerNorm grid", ("NVIDIA H200",),
               _H200_GRID, "H100 grid, NeuSight's five GPUs", "experiments/kernels/priors_report.py"),
    Provenance("rowwise.LAYERNORM_ROW_CYCLES_PER_BYTE", "SM cycles per byte", "H200 fp32/fp16 LayerNorm grid",
               ("NVIDIA H200",), _H200_GRID, "H100 grid, NeuSight's five GPUs", "experiments/kernels/priors_report.py"),
    Provenance("rowwise.SOFTMAX_CYCLES_PER_ELEM", "SM cycles per element", "H200 fp16 softmax rows", ("NVIDIA H200",),
               _H200_GRID, "H100 grid"),
    Provenance("rowwise.REGISTER_SOFTMAX_CYCLES_PER_SLOT", "SM cycles per register slot", "H200 softmax rows",
               ("NVIDIA H200",), _H200_GRID, "H100 grid", applies_to="current PyTorch hosts"),
    Provenance("rowwise.SOFTMAX_SMEM_CYCLES_PER_ELEM", "SM cycles per element", "H200 softmax rows", ("NVIDIA H200",),
               _H200_GRID, "H100 grid", applies_to="current PyTorch hosts"),
    Provenance("rowwise.REREAD_FITS_L2", "share of L2", "NeuSight softmax/ln, chosen leave-one-GPU-out",
               ("P100", "P4", "T4", "V100", "A100"), "NeuSight test", refit="experiments/kernels/priors_report.py"),
    Provenance("launch.FLOOR_MS", "ms per call", "1st percentile of NeuSight's kernels", ("P100", "P4", "T4", "V100", "A100"),
               "NeuSight train", applies_to="call timing, NeuSight host"),
    Provenance("launch.KERNEL_FLOOR_MS", "ms per kernel", "Vidur A100 fp16 profiles", ("NVIDIA A100-SXM4-80GB",),
               "Vidur compute profiles", "Vidur A40 (held out)", applies_to="all (kernel timing)"),
    Provenance("launch.HOST_FLOOR_SCALE", "share of FLOOR_MS", "the lent H200's host (PyTorch 2.11)",
               ("NVIDIA H200",), "experiments/data/measured/h200/kernels.csv", "H100 host: all 0.54",
               applies_to="all (current host)"),
)


def _attention_rows() -> list[dict]:
    """The fused-attention and MLA priors' fitted constants (`attention.CONSTANTS`, `mla.CONSTANTS`, each a
    `Fitted` naming its tables) as provenance rows: aiconfigurator systems, or PyTorch SDPA's one H100."""
    from hybridperf.priors import attention, mla  # noqa: PLC0415  (sibling priors, read only for this table)

    def read_off(source: str) -> tuple[str, ...]:
        if "H100 80GB HBM3" in source:
            return ("NVIDIA H100 80GB HBM3",)
        if "aiconfigurator" in source:
            return tuple(x.strip() for x in source.split(" aiconfigurator")[0].split(","))
        return ()

    c = attention.CONSTANTS
    items = [(f"attention.efficiency[{k}]", v) for k, v in c.efficiency.items()]
    items += [(f"attention.decode_bw[{k}]", v) for k, v in c.decode_bw.items()]
    items += [(f"attention.decode_fp8_bw[{k}]", v) for k, v in c.decode_fp8_bw.items()]
    items += [(f"attention.decode_fp8_ms[{k}]", v) for k, v in c.decode_fp8_ms.items()]
    items += [(f"attention.{f.name}", getattr(c, f.name)) for f in fields(c)
              if isinstance(getattr(c, f.name), attention.Fitted)]
    items += [(f"mla.{f.name}", getattr(mla.CONSTANTS, f.name)) for f in fields(mla.CONSTANTS)]
    rows = []
    for name, f in items:
        off = read_off(f.source)
        rows.append({"name": name, "value": f.value, "unit": f.unit, "source": f.source, "read_off": ", ".join(off),
                     "applies_to": "Hopper, data-center Blackwell" if name.startswith("mla.") else "all",
                     "checked_on": "", "refit": f.script if off else "",
                     "one_gpu_default": len(off) == 1})
    return rows


def provenance_rows() -> list[dict]:
    """`PROVENANCE` and the attention prior's fitted constants as printable rows, each with its current value."""
    rows = []
    for p in PROVENANCE:
        try:
            value = p.value()
        except AttributeError:
            value = "(missing)"
        rows.append({"name": p.name, "value": value, "unit": p.unit, "source": p.source,
                     "read_off": ", ".join(p.read_off), "applies_to": p.applies_to, "checked_on": p.checked_on,
                     "refit": p.refit, "one_gpu_default": p.one_gpu_default})
    return rows + _attention_rows()
