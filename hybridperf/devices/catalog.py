"""The built-in catalog of accelerators: spec-sheet numbers kept as data, one JSON file per family.

The entries live in `hybridperf/devices/data/gpus/*.json` (one file per vendor architecture, e.g.
`60_nvidia_hopper.json`), each a list of objects with `DeviceSpec`'s fields plus `source` (the public
spec sheet) and `notes` (how the numbers were read off it). A file per family rather than per GPU:
JSON has no comments, so provenance lives in each entry's `source`/`notes`, and siblings that share
most numbers (A100 boards, H100/H200 variants) sit side by side where a reviewer compares them; the
numeric prefix fixes the catalog's order (see `datafiles`). `docs/devices.md` says how to add a GPU.

Names are exactly what `torch.cuda.get_device_name()` prints.

Conventions (read before adding an entry):

* `peak_tflops` values are dense (no 2:4 sparsity), TFLOP/s (TOP/s for int8) at boost clock, as printed
  in the vendor datasheet. Where a datasheet prints only the sparse figure, the dense one is half of it;
  a rack or 8-GPU baseboard table is divided by its GPU count.
  Vector keys (fp32, fp16, bf16, fp64) are CUDA-core / stream-processor rates; `*_tc` keys are tensor /
  matrix-core rates. `int8` (no `_tc`) is a DP4A (CUDA-core) rate, used for parts without int8 tensor
  cores (Pascal GP104, Volta). A missing key means the unit does not exist, or is so slow that kernels
  do not use it (e.g. fp16 on GP104 is 1/64 rate: PyTorch computes half in fp32 there), so that
  `DeviceSpec.peak` falls back to fp32. `fp8_tc` exists from Ada/Hopper/CDNA3 on, `fp4_tc` from
  Blackwell/CDNA4 on.
* fp16_tc / bf16_tc are the rates with fp32 accumulation (what PyTorch/cuBLAS use). GeForce parts run
  fp32-accumulate at half the fp16-accumulate rate; the fp32-accumulate figure is the one stored.
* AMD: `fp32` is the plain (non-packed) vector rate and `fp32_tc` the matrix-core (MFMA) fp32 rate,
  the same split as NeuSight's SingleFLOPsVEC / SingleFLOPsMM. `fp16` is the packed-fp16 vector rate.
  No `bf16` vector key for CDNA: there is no packed bf16 FMA, so bf16 elementwise math runs at fp32 rate.
* `num_sms` is SMs (NVIDIA) or CUs (AMD); `cores_per_sm` fp32 lanes per SM/CU; `fp32` agrees with
  SMs x lanes x 2 x boost clock to within 5% (tests check it).
* `l2_mb` is the L2 only (AMD Infinity Cache / MALL is not counted).
* `link_bw_gbs` is the sum of a GPU's peer links, per direction (NVIDIA's "600 GB/s NVLink" for A100 is
  bidirectional, so 300 here). 0 and "" when the part has no GPU-to-GPU link (traffic goes over PCIe).
* `pcie_bw_gbs` is per direction: gen3 x16 16, gen4 x16 32, gen5 x16 64, gen6 x16 128.
"""
from __future__ import annotations

from functools import cache

from hybridperf.devices.datafiles import load_catalog
from hybridperf.devices.spec import DeviceSpec


@cache
def devices() -> tuple[DeviceSpec, ...]:
    """Every catalog GPU, read on first use, so that a broken data file surfaces as the command's
    one-line error rather than at import."""
    return tuple(load_catalog("gpus", DeviceSpec))


def __getattr__(name: str):
    if name == "DEVICES":  # the catalog as a list, as before it was data
        return list(devices())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
