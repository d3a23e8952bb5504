"""The built-in catalog of accelerators, from public spec sheets (dense peaks, boost clock).

Names are exactly what `torch.cuda.get_device_name()` prints. Add a device by appending a DeviceSpec.

Conventions (read before adding an entry):

* `peak_tflops` values are dense (no 2:4 sparsity), TFLOP/s (TOP/s for int8) at boost clock, as printed
  in the vendor datasheet. Where a datasheet prints only the sparse figure, the dense one is half of it.
  Vector keys (fp32, fp16, bf16, fp64) are CUDA-core / stream-processor rates; `*_tc` keys are tensor /
  matrix-core rates. `int8` (no `_tc`) is a DP4A (CUDA-core) rate, used for parts without int8 tensor
  cores (Pascal GP104, Volta). A missing key means the unit does not exist, or is so slow that kernels
  do not use it (e.g. fp16 on GP104 is 1/64 rate: PyTorch computes half in fp32 there), so that
  `DeviceSpec.peak` falls back to fp32.
* fp16_tc / bf16_tc are the rates with fp32 accumulation (what PyTorch/cuBLAS use). GeForce parts run
  fp32-accumulate at half the fp16-accumulate rate; the fp32-accumulate figure is the one stored.
* AMD: `fp32` is the plain (non-packed) vector rate and `fp32_tc` the matrix-core (MFMA) fp32 rate,
  the same split as NeuSight's SingleFLOPsVEC / SingleFLOPsMM. `fp16` is the packed-fp16 vector rate.
  No `bf16` vector key for CDNA: there is no packed bf16 FMA, so bf16 elementwise math runs at fp32 rate.
* `num_sms` is SMs (NVIDIA) or CUs (AMD); `cores_per_sm` fp32 lanes per SM/CU.
* `l2_mb` is the L2 only (AMD Infinity Cache / MALL is not counted).
* `link_bw_gbs` is the sum of a GPU's peer links, per direction (NVIDIA's "600 GB/s NVLink" for A100 is
  bidirectional, so 300 here). 0 and "" when the part has no GPU-to-GPU link (traffic goes over PCIe).
* `pcie_bw_gbs` is per direction: gen3 x16 16, gen4 x16 32, gen5 x16 64.
"""
from __future__ import annotations

from hybridperf.devices.spec import DeviceSpec

DEVICES: list[DeviceSpec] = [
    # ------------------------------------------------------------------ Pascal
    # NVIDIA Tesla P4 datasheet (2016): 5.5 TFLOPS fp32 / 22 TOPS int8 (DP4A) at 1063 MHz; the clock and
    # fp32 peak here are the 1113 MHz max application clock used by the NeuSight artifact (5699 GFLOP/s).
    # GP104: 20 SMs x 128 lanes (NeuSight's JSON writes it as 40 x 64). fp16 is 1/64 rate: omitted.
    DeviceSpec(
        name="Tesla P4", vendor="nvidia", arch="pascal", num_sms=20, cores_per_sm=128,
        boost_clock_mhz=1113, mem_gb=8, mem_bw_gbs=192, l2_mb=2, mem_type="GDDR5",
        peak_tflops={"fp32": 5.7, "fp64": 0.18, "int8": 22.0}, smem_per_sm_kb=96,
        max_threads_per_sm=2048, tdp_w=75, pcie_gen=3, pcie_bw_gbs=16, form_factor="PCIe",
        aliases=("P4",),
    ),
    # NVIDIA Tesla P100 PCIe datasheet (2016): 4.7 fp64 / 9.3 fp32 / 18.7 fp16 TFLOPS, 732 GB/s.
    # Clock: 1328 MHz max application clock (NeuSight: 9519 GFLOP/s); the datasheet boost is 1303 MHz.
    # GP100 has no DP4A, hence no int8 entry.
    DeviceSpec(
        name="Tesla P100-PCIE-16GB", vendor="nvidia", arch="pascal", num_sms=56, cores_per_sm=64,
        boost_clock_mhz=1329, mem_gb=16, mem_bw_gbs=732, l2_mb=4, mem_type="HBM2",
        peak_tflops={"fp32": 9.3, "fp16": 18.7, "fp64": 4.7}, smem_per_sm_kb=64,
        max_threads_per_sm=2048, tdp_w=250, pcie_gen=3, pcie_bw_gbs=16, form_factor="PCIe",
        aliases=("P100", "P100-PCIE", "P100-PCIe-16GB"),
    ),
    # NVIDIA Tesla P100 SXM2 datasheet (2016): 5.3 / 10.6 / 21.2 TFLOPS at 1480 MHz, 732 GB/s;
    # NVLink 1.0: 4 links x 20 GB/s per direction = 80 GB/s per direction (160 GB/s bidirectional).
    DeviceSpec(
        name="Tesla P100-SXM2-16GB", vendor="nvidia", arch="pascal", num_sms=56, cores_per_sm=64,
        boost_clock_mhz=1480, mem_gb=16, mem_bw_gbs=732, l2_mb=4, mem_type="HBM2",
        peak_tflops={"fp32": 10.6, "fp16": 21.2, "fp64": 5.3}, smem_per_sm_kb=64,
        max_threads_per_sm=2048, tdp_w=300, pcie_gen=3, pcie_bw_gbs=16, link_name="NVLink1",
        link_bw_gbs=80, form_factor="SXM", aliases=("P100-SXM2", "P100-SXM", "P100-SXM2-16GB"),
    ),
    # NVIDIA Tesla P40 datasheet (2016): 12 TFLOPS fp32 / 47 TOPS int8 (DP4A) at 1531 MHz boost,
    # 24 GB GDDR5 346 GB/s, 250 W. GP102: 30 SMs x 128 lanes, 3 MB L2. fp16 is 1/64 rate: omitted.
    DeviceSpec(
        name="Tesla P40", vendor="nvidia", arch="pascal", num_sms=30, cores_per_sm=128,
        boost_clock_mhz=1531, mem_gb=24, mem_bw_gbs=346, l2_mb=3, mem_type="GDDR5",
        peak_tflops={"fp32": 11.8, "fp64": 0.37, "int8": 47.0}, smem_per_sm_kb=96,
        max_threads_per_sm=2048, tdp_w=250, pcie_gen=3, pcie_bw_gbs=16, form_factor="PCIe",
        aliases=("P40", "P40-24GB"),
    ),
    # NVIDIA Quadro P4000 datasheet (2017): 5.3 TFLOPS fp32 at 1480 MHz boost, 8 GB GDDR5 243 GB/s, 105 W.
    # GP104: 14 SMs x 128 lanes, 2 MB L2; fp16 1/64 rate (omitted); int8 DP4A 4x fp32 (derived).
    # One of Habitat's (USENIX ATC '21) evaluation GPUs.
    DeviceSpec(
        name="Quadro P4000", vendor="nvidia", arch="pascal", num_sms=14, cores_per_sm=128,
        boost_clock_mhz=1480, mem_gb=8, mem_bw_gbs=243, l2_mb=2, mem_type="GDDR5",
        peak_tflops={"fp32": 5.3, "fp64": 0.17, "int8": 21.2}, smem_per_sm_kb=96,
        max_threads_per_sm=2048, tdp_w=105, pcie_gen=3, pcie_bw_gbs=16, form_factor="PCIe",
        aliases=("P4000",),
    ),
    # ------------------------------------------------------------------ Volta
    # NVIDIA V100 datasheet (2020, "V100 PCIe"): 7 fp64 / 14 fp32 / 112 tensor TFLOPS at 1380 MHz, 900 GB/s.
    # int8: DP4A only (Volta tensor cores lack int8), 4 x fp32 = ~56 TOPS (derived, not on the datasheet).
    DeviceSpec(
        name="Tesla V100-PCIE-16GB", vendor="nvidia", arch="volta", num_sms=80, cores_per_sm=64,
        boost_clock_mhz=1380, mem_gb=16, mem_bw_gbs=900, l2_mb=6, mem_type="HBM2",
        peak_tflops={"fp32": 14.0, "fp16": 28.0, "fp64": 7.0, "fp16_tc": 112.0, "int8": 56.0},
        smem_per_sm_kb=96, max_threads_per_sm=2048, tdp_w=250, pcie_gen=3, pcie_bw_gbs=16,
        form_factor="PCIe", aliases=("V100-PCIe-16GB", "V100-16GB"),
    ),
    # NVIDIA V100 datasheet (2020, "V100 PCIe"), 32 GB model: same silicon and clocks as the 16 GB one.
    DeviceSpec(
        name="Tesla V100-PCIE-32GB", vendor="nvidia", arch="volta", num_sms=80, cores_per_sm=64,
        boost_clock_mhz=1380, mem_gb=32, mem_bw_gbs=900, l2_mb=6, mem_type="HBM2",
        peak_tflops={"fp32": 14.0, "fp16": 28.0, "fp64": 7.0, "fp16_tc": 112.0, "int8": 56.0},
        smem_per_sm_kb=96, max_threads_per_sm=2048, tdp_w=250, pcie_gen=3, pcie_bw_gbs=16,
        form_factor="PCIe", aliases=("V100", "V100-PCIE", "V100-PCIe-32GB", "V100-32GB"),
    ),
    # NVIDIA V100 datasheet (2020, "V100 SXM2"): 7.8 / 15.7 / 125 TFLOPS at 1530 MHz, 900 GB/s, 300 W;
    # NVLink 2.0: 6 links x 25 GB/s per direction = 150 GB/s per direction (300 GB/s bidirectional).
    DeviceSpec(
        name="Tesla V100-SXM2-16GB", vendor="nvidia", arch="volta", num_sms=80, cores_per_sm=64,
        boost_clock_mhz=1530, mem_gb=16, mem_bw_gbs=900, l2_mb=6, mem_type="HBM2",
        peak_tflops={"fp32": 15.7, "fp16": 31.4, "fp64": 7.8, "fp16_tc": 125.0, "int8": 62.8},
        smem_per_sm_kb=96, max_threads_per_sm=2048, tdp_w=300, pcie_gen=3, pcie_bw_gbs=16,
        link_name="NVLink2", link_bw_gbs=150, form_factor="SXM",
        aliases=("V100-SXM2-16GB", "V100-SXM-16GB"),
    ),
    # NVIDIA V100 datasheet (2020, "V100 SXM2"), 32 GB model (DGX-1V / DGX-2 generation).
    DeviceSpec(
        name="Tesla V100-SXM2-32GB", vendor="nvidia", arch="volta", num_sms=80, cores_per_sm=64,
        boost_clock_mhz=1530, mem_gb=32, mem_bw_gbs=900, l2_mb=6, mem_type="HBM2",
        peak_tflops={"fp32": 15.7, "fp16": 31.4, "fp64": 7.8, "fp16_tc": 125.0, "int8": 62.8},
        smem_per_sm_kb=96, max_threads_per_sm=2048, tdp_w=300, pcie_gen=3, pcie_bw_gbs=16,
        link_name="NVLink2", link_bw_gbs=150, form_factor="SXM",
        aliases=("V100-SXM2-32GB", "V100-SXM-32GB", "V100-SXM2", "V100-SXM"),
    ),
    # NVIDIA V100S PCIe datasheet (2019): 8.2 / 16.4 / 130 TFLOPS at 1597 MHz, 1134 GB/s, 250 W.
    DeviceSpec(
        name="Tesla V100S-PCIE-32GB", vendor="nvidia", arch="volta", num_sms=80, cores_per_sm=64,
        boost_clock_mhz=1597, mem_gb=32, mem_bw_gbs=1134, l2_mb=6, mem_type="HBM2",
        peak_tflops={"fp32": 16.4, "fp16": 32.8, "fp64": 8.2, "fp16_tc": 130.0, "int8": 65.4},
        smem_per_sm_kb=96, max_threads_per_sm=2048, tdp_w=250, pcie_gen=3, pcie_bw_gbs=16,
        form_factor="PCIe", aliases=("V100S", "V100S-PCIe"),
    ),
    # NVIDIA TITAN V (2017): 14.9 fp32, 110 tensor TFLOPS at 1455 MHz boost, 12 GB HBM2 652.8 GB/s,
    # 4.5 MB L2, 250 W. GV100 with 80 SMs, as the V100.
    DeviceSpec(
        name="NVIDIA TITAN V", vendor="nvidia", arch="volta", num_sms=80, cores_per_sm=64,
        boost_clock_mhz=1455, mem_gb=12, mem_bw_gbs=652.8, l2_mb=4.5, mem_type="HBM2",
        peak_tflops={"fp32": 14.9, "fp16": 29.8, "fp64": 7.45, "fp16_tc": 110.0, "int8": 59.6},
        smem_per_sm_kb=96, max_threads_per_sm=2048, tdp_w=250, pcie_gen=3, pcie_bw_gbs=16,
        form_factor="PCIe", aliases=("TITAN-V",),
    ),
    # ------------------------------------------------------------------ Turing
    # NVIDIA T4 datasheet (2019): 8.1 fp32 / 65 fp16 tensor / 130 int8 TOPS at 1590 MHz, 320 GB/s, 70 W.
    # Turing: 64 KB max shared memory and 1024 threads per SM; fp64 1/32 rate; no bf16.
    DeviceSpec(
        name="Tesla T4", vendor="nvidia", arch="turing", num_sms=40, cores_per_sm=64,
        boost_clock_mhz=1590, mem_gb=16, mem_bw_gbs=320, l2_mb=4, mem_type="GDDR6",
        peak_tflops={"fp32": 8.1, "fp16": 16.2, "fp64": 0.25, "fp16_tc": 65.0, "int8_tc": 130.0},
        smem_per_sm_kb=64, max_threads_per_sm=1024, tdp_w=70, pcie_gen=3, pcie_bw_gbs=16,
        form_factor="PCIe", aliases=("T4",),
    ),
    # NVIDIA Turing whitepaper (2018), GeForce RTX 2070 at the reference 1620 MHz boost: 7.5 fp32,
    # tensor fp16 with fp32 accumulate 29.9 (59.7 with fp16 accumulate; GeForce runs fp32-accumulate
    # at half rate), INT8 119.4; TU106: 36 SMs, 4 MB L2, 8 GB GDDR6 448 GB/s, 175 W. A Habitat GPU.
    DeviceSpec(
        name="NVIDIA GeForce RTX 2070", vendor="nvidia", arch="turing", num_sms=36, cores_per_sm=64,
        boost_clock_mhz=1620, mem_gb=8, mem_bw_gbs=448, l2_mb=4, mem_type="GDDR6",
        peak_tflops={"fp32": 7.5, "fp16": 14.9, "fp64": 0.23, "fp16_tc": 29.9, "int8_tc": 119.4},
        smem_per_sm_kb=64, max_threads_per_sm=1024, tdp_w=175, pcie_gen=3, pcie_bw_gbs=16,
        form_factor="PCIe", aliases=("RTX-2070", "2070"),
    ),
    # NVIDIA Turing whitepaper (2018), GeForce RTX 2080 Ti at the reference 1545 MHz boost: 13.4 fp32,
    # tensor fp16 with fp32 accumulate 53.8 (107.6 with fp16 accumulate), INT8 215.2; TU102 with 68 SMs,
    # 5.5 MB L2, 11 GB GDDR6 616 GB/s, 250 W; NVLink bridge 100 GB/s bidirectional = 50 per direction.
    # A Habitat GPU.
    DeviceSpec(
        name="NVIDIA GeForce RTX 2080 Ti", vendor="nvidia", arch="turing", num_sms=68, cores_per_sm=64,
        boost_clock_mhz=1545, mem_gb=11, mem_bw_gbs=616, l2_mb=5.5, mem_type="GDDR6",
        peak_tflops={"fp32": 13.4, "fp16": 26.9, "fp64": 0.42, "fp16_tc": 53.8, "int8_tc": 215.2},
        smem_per_sm_kb=64, max_threads_per_sm=1024, tdp_w=250, pcie_gen=3, pcie_bw_gbs=16,
        link_name="NVLink2", link_bw_gbs=50, form_factor="PCIe", aliases=("RTX-2080-Ti", "2080Ti"),
    ),
    # NVIDIA TITAN RTX (2018): TU102 with 72 SMs at 1770 MHz boost: 16.3 fp32, 130 tensor TFLOPS (full
    # rate with fp32 accumulate, unlike GeForce), 6 MB L2, 24 GB GDDR6 672 GB/s, 280 W; NVLink 50/dir.
    DeviceSpec(
        name="NVIDIA TITAN RTX", vendor="nvidia", arch="turing", num_sms=72, cores_per_sm=64,
        boost_clock_mhz=1770, mem_gb=24, mem_bw_gbs=672, l2_mb=6, mem_type="GDDR6",
        peak_tflops={"fp32": 16.3, "fp16": 32.6, "fp64": 0.51, "fp16_tc": 130.5, "int8_tc": 261.0},
        smem_per_sm_kb=64, max_threads_per_sm=1024, tdp_w=280, pcie_gen=3, pcie_bw_gbs=16,
        link_name="NVLink2", link_bw_gbs=50, form_factor="PCIe", aliases=("TITAN-RTX",),
    ),
    # ------------------------------------------------------------------ Ampere (GA10x)
    # NVIDIA A10 datasheet (2021): 31.2 fp32, TF32 62.5, FP16/BF16 125, INT8 250 (dense) at 1695 MHz,
    # 24 GB GDDR6 600 GB/s, 150 W. GA102: 100 KB smem and 1536 threads per SM, fp16 vector 1:1 with fp32.
    DeviceSpec(
        name="NVIDIA A10", vendor="nvidia", arch="ampere", num_sms=72, cores_per_sm=128,
        boost_clock_mhz=1695, mem_gb=24, mem_bw_gbs=600, l2_mb=6, mem_type="GDDR6",
        peak_tflops={"fp32": 31.2, "fp16": 31.2, "bf16": 31.2, "fp64": 0.49, "tf32_tc": 62.5,
                     "fp16_tc": 125.0, "bf16_tc": 125.0, "int8_tc": 250.0},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=150, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("A10", "A10-24GB"),
    ),
    # NVIDIA A10G (AWS G5 instances; no public NVIDIA datasheet): GA102 with 80 SMs (10,240 lanes) at
    # 1710 MHz: 35.0 fp32; its tensor rates are GeForce-like, half the A10's: TF32 35, FP16/BF16 70 with
    # fp32 accumulate, INT8 140 (Baseten's A10 vs A10G comparison); 24 GB GDDR6 600 GB/s, 6 MB L2.
    # Power limit 300 W (nvidia-smi on g5 instances).
    DeviceSpec(
        name="NVIDIA A10G", vendor="nvidia", arch="ampere", num_sms=80, cores_per_sm=128,
        boost_clock_mhz=1710, mem_gb=24, mem_bw_gbs=600, l2_mb=6, mem_type="GDDR6",
        peak_tflops={"fp32": 35.0, "fp16": 35.0, "bf16": 35.0, "fp64": 0.55, "tf32_tc": 35.0,
                     "fp16_tc": 70.0, "bf16_tc": 70.0, "int8_tc": 140.0},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=300, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("A10G", "A10G-24GB"),
    ),
    # NVIDIA RTX A5000 datasheet (2021): 27.8 fp32, 222.2 tensor TFLOPS sparse -> 111.1 dense, at 1695
    # MHz; GA102 with 64 SMs, 24 GB GDDR6 768 GB/s, 230 W; NVLink bridge 112.5 GB/s bidirectional.
    DeviceSpec(
        name="NVIDIA RTX A5000", vendor="nvidia", arch="ampere", num_sms=64, cores_per_sm=128,
        boost_clock_mhz=1695, mem_gb=24, mem_bw_gbs=768, l2_mb=6, mem_type="GDDR6",
        peak_tflops={"fp32": 27.8, "fp16": 27.8, "bf16": 27.8, "fp64": 0.43, "tf32_tc": 55.6,
                     "fp16_tc": 111.1, "bf16_tc": 111.1, "int8_tc": 222.2},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=230, pcie_gen=4, pcie_bw_gbs=32,
        link_name="NVLink3", link_bw_gbs=56.25, form_factor="PCIe", aliases=("RTX-A5000", "A5000"),
    ),
    # NVIDIA RTX A4000 datasheet (2021): 19.2 fp32, 153.4 tensor TFLOPS sparse -> 76.7 dense, at 1560
    # MHz; GA104 with 48 SMs, 4 MB L2, 16 GB GDDR6 448 GB/s, 140 W, single slot, no NVLink.
    DeviceSpec(
        name="NVIDIA RTX A4000", vendor="nvidia", arch="ampere", num_sms=48, cores_per_sm=128,
        boost_clock_mhz=1560, mem_gb=16, mem_bw_gbs=448, l2_mb=4, mem_type="GDDR6",
        peak_tflops={"fp32": 19.2, "fp16": 19.2, "bf16": 19.2, "fp64": 0.3, "tf32_tc": 38.4,
                     "fp16_tc": 76.7, "bf16_tc": 76.7, "int8_tc": 153.4},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=140, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("RTX-A4000", "A4000"),
    ),
    # NVIDIA A40 datasheet (2021): 37.4 fp32, TF32 74.8, FP16/BF16 149.7, INT8 299.3 (dense) at 1740 MHz,
    # 48 GB GDDR6 696 GB/s, 300 W; NVLink bridge (2 GPUs) 112.5 GB/s bidirectional = 56.25 per direction.
    DeviceSpec(
        name="NVIDIA A40", vendor="nvidia", arch="ampere", num_sms=84, cores_per_sm=128,
        boost_clock_mhz=1740, mem_gb=48, mem_bw_gbs=696, l2_mb=6, mem_type="GDDR6",
        peak_tflops={"fp32": 37.4, "fp16": 37.4, "bf16": 37.4, "fp64": 0.58, "tf32_tc": 74.8,
                     "fp16_tc": 149.7, "bf16_tc": 149.7, "int8_tc": 299.3},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=300, pcie_gen=4, pcie_bw_gbs=32,
        link_name="NVLink3", link_bw_gbs=56.25, form_factor="PCIe", aliases=("A40", "A40-48GB"),
    ),
    # NVIDIA RTX A6000 datasheet (2021): 38.7 fp32, 309.7 tensor TFLOPS (sparse fp16) -> 154.8 dense,
    # 48 GB GDDR6 768 GB/s, 300 W; NVLink bridge 112.5 GB/s bidirectional = 56.25 per direction.
    DeviceSpec(
        name="NVIDIA RTX A6000", vendor="nvidia", arch="ampere", num_sms=84, cores_per_sm=128,
        boost_clock_mhz=1800, mem_gb=48, mem_bw_gbs=768, l2_mb=6, mem_type="GDDR6",
        peak_tflops={"fp32": 38.7, "fp16": 38.7, "bf16": 38.7, "fp64": 0.6, "tf32_tc": 77.4,
                     "fp16_tc": 154.8, "bf16_tc": 154.8, "int8_tc": 309.7},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=300, pcie_gen=4, pcie_bw_gbs=32,
        link_name="NVLink3", link_bw_gbs=56.25, form_factor="PCIe", aliases=("RTX-A6000", "A6000"),
    ),
    # NVIDIA Ampere GA102 whitepaper (2020), RTX 3090: 35.6 fp32, TF32 35.6, FP16/BF16 tensor with fp32
    # accumulate 71 (142 with fp16 accumulate), INT8 284, 936 GB/s GDDR6X, 350 W; NVLink bridge 56.25/dir.
    DeviceSpec(
        name="NVIDIA GeForce RTX 3090", vendor="nvidia", arch="ampere", num_sms=82, cores_per_sm=128,
        boost_clock_mhz=1695, mem_gb=24, mem_bw_gbs=936, l2_mb=6, mem_type="GDDR6X",
        peak_tflops={"fp32": 35.6, "fp16": 35.6, "bf16": 35.6, "fp64": 0.56, "tf32_tc": 35.6,
                     "fp16_tc": 71.0, "bf16_tc": 71.0, "int8_tc": 284.0},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=350, pcie_gen=4, pcie_bw_gbs=32,
        link_name="NVLink3", link_bw_gbs=56.25, form_factor="PCIe", aliases=("RTX-3090", "3090"),
    ),
    # NVIDIA Ampere GA102 whitepaper (2020), GeForce RTX 3080 (10 GB): 29.8 fp32 (68 SMs at 1710 MHz);
    # tensor with fp32 accumulate: FP16/BF16 59.5, TF32 29.8 (the fp16-accumulate rate is 2x); INT8 238
    # (dense); 760 GB/s GDDR6X, 5 MB L2, 320 W. No NVLink.
    DeviceSpec(
        name="NVIDIA GeForce RTX 3080", vendor="nvidia", arch="ampere", num_sms=68, cores_per_sm=128,
        boost_clock_mhz=1710, mem_gb=10, mem_bw_gbs=760, l2_mb=5, mem_type="GDDR6X",
        peak_tflops={"fp32": 29.8, "fp16": 29.8, "bf16": 29.8, "fp64": 0.47, "tf32_tc": 29.8,
                     "fp16_tc": 59.5, "bf16_tc": 59.5, "int8_tc": 238.0},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=320, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("RTX-3080", "3080"),
    ),
    # GeForce RTX 3070 (GA104, same whitepaper's rates per SM): 20.3 fp32 (46 SMs at 1725 MHz); FP16/BF16
    # tensor with fp32 accumulate 40.6, TF32 20.3, INT8 162.6 (dense); 8 GB GDDR6 448 GB/s, 4 MB L2, 220 W.
    DeviceSpec(
        name="NVIDIA GeForce RTX 3070", vendor="nvidia", arch="ampere", num_sms=46, cores_per_sm=128,
        boost_clock_mhz=1725, mem_gb=8, mem_bw_gbs=448, l2_mb=4, mem_type="GDDR6",
        peak_tflops={"fp32": 20.3, "fp16": 20.3, "bf16": 20.3, "fp64": 0.32, "tf32_tc": 20.3,
                     "fp16_tc": 40.6, "bf16_tc": 40.6, "int8_tc": 162.6},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=220, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("RTX-3070", "3070"),
    ),
    # GeForce RTX 3060 (GA106, 12 GB): 12.7 fp32 (28 SMs at 1777 MHz); FP16/BF16 tensor with fp32
    # accumulate 25.5, TF32 12.7, INT8 101.9 (dense); GDDR6 360 GB/s, 3 MB L2, 170 W.
    DeviceSpec(
        name="NVIDIA GeForce RTX 3060", vendor="nvidia", arch="ampere", num_sms=28, cores_per_sm=128,
        boost_clock_mhz=1777, mem_gb=12, mem_bw_gbs=360, l2_mb=3, mem_type="GDDR6",
        peak_tflops={"fp32": 12.7, "fp16": 12.7, "bf16": 12.7, "fp64": 0.2, "tf32_tc": 12.7,
                     "fp16_tc": 25.5, "bf16_tc": 25.5, "int8_tc": 101.9},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=170, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("RTX-3060", "3060"),
    ),
    # ------------------------------------------------------------------ Ampere (GA100)
    # GA100 and GH100 (Hopper, below) split L2 into two partitions, each caching for the SMs wired to it
    # (NVIDIA's A100 and H100 whitepapers): `l2_partitions=2`.
    # NVIDIA A30 datasheet (2021): 5.2 fp64, 10.3 fp32, TF32 82, FP16/BF16 165, INT8 330 (dense) at
    # 1440 MHz, 24 GB HBM2 933 GB/s, 24 MB L2, 165 W; NVLink bridge 200 GB/s bidirectional = 100/dir.
    # Vector fp16 4x and bf16 2x fp32, as on A100.
    DeviceSpec(
        name="NVIDIA A30", vendor="nvidia", arch="ampere", num_sms=56, cores_per_sm=64,
        boost_clock_mhz=1440, mem_gb=24, mem_bw_gbs=933, l2_mb=24, mem_type="HBM2",
        peak_tflops={"fp32": 10.3, "fp16": 41.3, "bf16": 20.6, "fp64": 5.2, "tf32_tc": 82.0,
                     "fp16_tc": 165.0, "bf16_tc": 165.0, "int8_tc": 330.0},
        smem_per_sm_kb=164, max_threads_per_sm=2048, l2_partitions=2, tdp_w=165, pcie_gen=4, pcie_bw_gbs=32,
        link_name="NVLink3", link_bw_gbs=100, form_factor="PCIe", aliases=("A30", "A30-24GB"),
    ),
    # NVIDIA A100 datasheet (2021) / A100 whitepaper (2020): 9.7 fp64, 19.5 fp32, 78 fp16 and 39 bf16
    # (non-tensor), TF32 156, FP16/BF16 312, INT8 624 (dense) at 1410 MHz; 40 GB HBM2 1555 GB/s, 250 W.
    # NVLink bridge on PCIe cards: 600 GB/s bidirectional (3 bridges, 2 GPUs) = 300 per direction.
    DeviceSpec(
        name="NVIDIA A100-PCIE-40GB", vendor="nvidia", arch="ampere", num_sms=108, cores_per_sm=64,
        boost_clock_mhz=1410, mem_gb=40, mem_bw_gbs=1555, l2_mb=40, mem_type="HBM2",
        peak_tflops={"fp32": 19.5, "fp16": 78.0, "bf16": 39.0, "fp64": 9.7, "tf32_tc": 156.0,
                     "fp16_tc": 312.0, "bf16_tc": 312.0, "int8_tc": 624.0},
        smem_per_sm_kb=164, max_threads_per_sm=2048, l2_partitions=2, tdp_w=250, pcie_gen=4, pcie_bw_gbs=32,
        link_name="NVLink3", link_bw_gbs=300, form_factor="PCIe",
        aliases=("A100-PCIE-40GB", "A100-40GB-PCIe", "A100-40GB", "A100-40G"),
    ),
    # NVIDIA A100 80GB PCIe datasheet (2021): same compute as above, 80 GB HBM2e 1935 GB/s, 300 W.
    # "A100" and "A100-80G(B)" point here: it is the A100 of the NeuSight (A100 80GB PCIe) and Vidur
    # (Azure NC A100 v4, pairwise NVLink) artifacts. Use "A100-SXM" for the DGX/HGX part.
    DeviceSpec(
        name="NVIDIA A100 80GB PCIe", vendor="nvidia", arch="ampere", num_sms=108, cores_per_sm=64,
        boost_clock_mhz=1410, mem_gb=80, mem_bw_gbs=1935, l2_mb=40, mem_type="HBM2e",
        peak_tflops={"fp32": 19.5, "fp16": 78.0, "bf16": 39.0, "fp64": 9.7, "tf32_tc": 156.0,
                     "fp16_tc": 312.0, "bf16_tc": 312.0, "int8_tc": 624.0},
        smem_per_sm_kb=164, max_threads_per_sm=2048, l2_partitions=2, tdp_w=300, pcie_gen=4, pcie_bw_gbs=32,
        link_name="NVLink3", link_bw_gbs=300, form_factor="PCIe",
        aliases=("A100-80GB-PCIe", "A100-PCIe-80GB", "A100-80G-PCIe", "A100-80GB", "A100-80G",
                 "A100", "A100-PCIe"),
    ),
    # NVIDIA A100 datasheet (2021), SXM4 40 GB: 1555 GB/s, 400 W; NVLink3 12 links = 600 GB/s bidir = 300/dir.
    DeviceSpec(
        name="NVIDIA A100-SXM4-40GB", vendor="nvidia", arch="ampere", num_sms=108, cores_per_sm=64,
        boost_clock_mhz=1410, mem_gb=40, mem_bw_gbs=1555, l2_mb=40, mem_type="HBM2",
        peak_tflops={"fp32": 19.5, "fp16": 78.0, "bf16": 39.0, "fp64": 9.7, "tf32_tc": 156.0,
                     "fp16_tc": 312.0, "bf16_tc": 312.0, "int8_tc": 624.0},
        smem_per_sm_kb=164, max_threads_per_sm=2048, l2_partitions=2, tdp_w=400, pcie_gen=4, pcie_bw_gbs=32,
        link_name="NVLink3", link_bw_gbs=300, form_factor="SXM",
        aliases=("A100-SXM-40GB", "A100-SXM4-40GB", "A100-40GB-SXM"),
    ),
    # NVIDIA A100 datasheet (2021), SXM4 80 GB: 80 GB HBM2e 2039 GB/s, 400 W, NVLink3 300 GB/s per direction.
    DeviceSpec(
        name="NVIDIA A100-SXM4-80GB", vendor="nvidia", arch="ampere", num_sms=108, cores_per_sm=64,
        boost_clock_mhz=1410, mem_gb=80, mem_bw_gbs=2039, l2_mb=40, mem_type="HBM2e",
        peak_tflops={"fp32": 19.5, "fp16": 78.0, "bf16": 39.0, "fp64": 9.7, "tf32_tc": 156.0,
                     "fp16_tc": 312.0, "bf16_tc": 312.0, "int8_tc": 624.0},
        smem_per_sm_kb=164, max_threads_per_sm=2048, l2_partitions=2, tdp_w=400, pcie_gen=4, pcie_bw_gbs=32,
        link_name="NVLink3", link_bw_gbs=300, form_factor="SXM",
        aliases=("A100-SXM-80GB", "A100-SXM4-80GB", "A100-80GB-SXM", "A100-SXM", "A100-SXM4"),
    ),
    # NVIDIA A800 SXM4 80GB: an A100-SXM4-80GB with NVLink cut to 400 GB/s bidirectional (8 links).
    DeviceSpec(
        name="NVIDIA A800-SXM4-80GB", vendor="nvidia", arch="ampere", num_sms=108, cores_per_sm=64,
        boost_clock_mhz=1410, mem_gb=80, mem_bw_gbs=2039, l2_mb=40, mem_type="HBM2e",
        peak_tflops={"fp32": 19.5, "fp16": 78.0, "bf16": 39.0, "fp64": 9.7, "tf32_tc": 156.0,
                     "fp16_tc": 312.0, "bf16_tc": 312.0, "int8_tc": 624.0},
        smem_per_sm_kb=164, max_threads_per_sm=2048, l2_partitions=2, tdp_w=400, pcie_gen=4, pcie_bw_gbs=32,
        link_name="NVLink3", link_bw_gbs=200, form_factor="SXM", aliases=("A800-SXM4-80GB", "A800", "A800-SXM4"),
    ),
    # NVIDIA A800 80GB PCIe: an A100 80GB PCIe with its NVLink bridge cut to 400 GB/s bidirectional.
    DeviceSpec(
        name="NVIDIA A800 80GB PCIe", vendor="nvidia", arch="ampere", num_sms=108, cores_per_sm=64,
        boost_clock_mhz=1410, mem_gb=80, mem_bw_gbs=1935, l2_mb=40, mem_type="HBM2e",
        peak_tflops={"fp32": 19.5, "fp16": 78.0, "bf16": 39.0, "fp64": 9.7, "tf32_tc": 156.0,
                     "fp16_tc": 312.0, "bf16_tc": 312.0, "int8_tc": 624.0},
        smem_per_sm_kb=164, max_threads_per_sm=2048, l2_partitions=2, tdp_w=300, pcie_gen=4, pcie_bw_gbs=32,
        link_name="NVLink3", link_bw_gbs=200, form_factor="PCIe", aliases=("A800-PCIe", "A800-80GB-PCIe"),
    ),
    # ------------------------------------------------------------------ Ada Lovelace
    # NVIDIA L4 datasheet (2023): 30.3 fp32; TF32 120, FP16/BF16 242, FP8/INT8 485 (all with sparsity)
    # -> dense 60 / 121 / 242.5; 24 GB GDDR6 300 GB/s, 48 MB L2, 72 W. Boost 2040 MHz (58 SMs x 128 x 2).
    DeviceSpec(
        name="NVIDIA L4", vendor="nvidia", arch="ada", num_sms=58, cores_per_sm=128,
        boost_clock_mhz=2040, mem_gb=24, mem_bw_gbs=300, l2_mb=48, mem_type="GDDR6",
        peak_tflops={"fp32": 30.3, "fp16": 30.3, "bf16": 30.3, "fp64": 0.47, "tf32_tc": 60.0,
                     "fp16_tc": 121.0, "bf16_tc": 121.0, "fp8_tc": 242.5, "int8_tc": 242.5},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=72, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("L4", "L4-24GB"),
    ),
    # NVIDIA L40 datasheet (2022): 90.5 fp32, TF32 90.5, FP16/BF16 181.05, FP8/INT8 362 (dense) at
    # 2490 MHz, 48 GB GDDR6 864 GB/s, 96 MB L2, 300 W. No NVLink.
    DeviceSpec(
        name="NVIDIA L40", vendor="nvidia", arch="ada", num_sms=142, cores_per_sm=128,
        boost_clock_mhz=2490, mem_gb=48, mem_bw_gbs=864, l2_mb=96, mem_type="GDDR6",
        peak_tflops={"fp32": 90.5, "fp16": 90.5, "bf16": 90.5, "fp64": 1.41, "tf32_tc": 90.5,
                     "fp16_tc": 181.05, "bf16_tc": 181.05, "fp8_tc": 362.0, "int8_tc": 362.0},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=300, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("L40", "L40-48GB"),
    ),
    # NVIDIA L40S datasheet (2023): 91.6 fp32, TF32 183, FP16/BF16 362.05, FP8/INT8 733 (dense) at
    # 2520 MHz, 48 GB GDDR6 864 GB/s, 96 MB L2, 350 W. No NVLink.
    DeviceSpec(
        name="NVIDIA L40S", vendor="nvidia", arch="ada", num_sms=142, cores_per_sm=128,
        boost_clock_mhz=2520, mem_gb=48, mem_bw_gbs=864, l2_mb=96, mem_type="GDDR6",
        peak_tflops={"fp32": 91.6, "fp16": 91.6, "bf16": 91.6, "fp64": 1.43, "tf32_tc": 183.0,
                     "fp16_tc": 362.05, "bf16_tc": 362.05, "fp8_tc": 733.0, "int8_tc": 733.0},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=350, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("L40S", "L40S-48GB"),
    ),
    # NVIDIA RTX 6000 Ada Generation datasheet (2022): 91.1 fp32; tensor (fp32 accumulate at full rate on
    # this professional card) FP16/BF16 364.2, TF32 182.1, FP8/INT8 728.5 dense (half the sparsity
    # figures); 142 SMs at 2505 MHz, 48 GB GDDR6 960 GB/s, 96 MB L2, 300 W. No NVLink.
    DeviceSpec(
        name="NVIDIA RTX 6000 Ada Generation", vendor="nvidia", arch="ada", num_sms=142, cores_per_sm=128,
        boost_clock_mhz=2505, mem_gb=48, mem_bw_gbs=960, l2_mb=96, mem_type="GDDR6",
        peak_tflops={"fp32": 91.1, "fp16": 91.1, "bf16": 91.1, "fp64": 1.42, "tf32_tc": 182.1,
                     "fp16_tc": 364.2, "bf16_tc": 364.2, "fp8_tc": 728.5, "int8_tc": 728.5},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=300, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("RTX-6000-Ada",),
    ),
    # NVIDIA Ada whitepaper (2022), RTX 4090: 82.6 fp32; tensor with fp32 accumulate: FP16/BF16 165.2,
    # FP8 330.3 (the fp16-accumulate rates are 2x); TF32 82.6; INT8 660.6 (dense); 1008 GB/s GDDR6X,
    # 72 MB L2, 450 W. No NVLink.
    DeviceSpec(
        name="NVIDIA GeForce RTX 4090", vendor="nvidia", arch="ada", num_sms=128, cores_per_sm=128,
        boost_clock_mhz=2520, mem_gb=24, mem_bw_gbs=1008, l2_mb=72, mem_type="GDDR6X",
        peak_tflops={"fp32": 82.6, "fp16": 82.6, "bf16": 82.6, "fp64": 1.29, "tf32_tc": 82.6,
                     "fp16_tc": 165.2, "bf16_tc": 165.2, "fp8_tc": 330.3, "int8_tc": 660.6},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=450, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("RTX-4090", "4090"),
    ),
    # Ada whitepaper (2022), GeForce RTX 4080 (AD103): 48.7 fp32 (76 SMs at 2505 MHz); tensor with fp32
    # accumulate: FP16/BF16 97.5, FP8 194.9, TF32 48.7; INT8 389.9 (dense); 16 GB GDDR6X 716.8 GB/s,
    # 64 MB L2, 320 W.
    DeviceSpec(
        name="NVIDIA GeForce RTX 4080", vendor="nvidia", arch="ada", num_sms=76, cores_per_sm=128,
        boost_clock_mhz=2505, mem_gb=16, mem_bw_gbs=716.8, l2_mb=64, mem_type="GDDR6X",
        peak_tflops={"fp32": 48.7, "fp16": 48.7, "bf16": 48.7, "fp64": 0.76, "tf32_tc": 48.7,
                     "fp16_tc": 97.5, "bf16_tc": 97.5, "fp8_tc": 194.9, "int8_tc": 389.9},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=320, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("RTX-4080", "4080"),
    ),
    # GeForce RTX 4070 (AD104, the whitepaper's per-SM rates): 29.1 fp32 (46 SMs at 2475 MHz); FP16/BF16
    # tensor with fp32 accumulate 58.3, FP8 116.6, TF32 29.1, INT8 233.2 (dense); 12 GB GDDR6X 504 GB/s,
    # 36 MB L2, 200 W.
    DeviceSpec(
        name="NVIDIA GeForce RTX 4070", vendor="nvidia", arch="ada", num_sms=46, cores_per_sm=128,
        boost_clock_mhz=2475, mem_gb=12, mem_bw_gbs=504, l2_mb=36, mem_type="GDDR6X",
        peak_tflops={"fp32": 29.1, "fp16": 29.1, "bf16": 29.1, "fp64": 0.45, "tf32_tc": 29.1,
                     "fp16_tc": 58.3, "bf16_tc": 58.3, "fp8_tc": 116.6, "int8_tc": 233.2},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=200, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("RTX-4070", "4070"),
    ),
    # NVIDIA RTX 5000 Ada Generation datasheet (2023): 65.3 fp32 (100 SMs at 2550 MHz); tensor (fp32
    # accumulate at full rate, as on the RTX 6000 Ada) FP16/BF16 261.1, TF32 130.6, FP8/INT8 522.2
    # (dense); 32 GB GDDR6 576 GB/s, 64 MB L2, 250 W.
    DeviceSpec(
        name="NVIDIA RTX 5000 Ada Generation", vendor="nvidia", arch="ada", num_sms=100, cores_per_sm=128,
        boost_clock_mhz=2550, mem_gb=32, mem_bw_gbs=576, l2_mb=64, mem_type="GDDR6",
        peak_tflops={"fp32": 65.3, "fp16": 65.3, "bf16": 65.3, "fp64": 1.02, "tf32_tc": 130.6,
                     "fp16_tc": 261.1, "bf16_tc": 261.1, "fp8_tc": 522.2, "int8_tc": 522.2},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=250, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("RTX-5000-Ada",),
    ),
    # NVIDIA RTX 4000 Ada Generation datasheet (2023): 26.7 fp32 (48 SMs at 2175 MHz); tensor FP16/BF16
    # 106.9, TF32 53.5, FP8/INT8 213.8 (dense); 20 GB GDDR6 360 GB/s, 48 MB L2, 130 W, single slot.
    DeviceSpec(
        name="NVIDIA RTX 4000 Ada Generation", vendor="nvidia", arch="ada", num_sms=48, cores_per_sm=128,
        boost_clock_mhz=2175, mem_gb=20, mem_bw_gbs=360, l2_mb=48, mem_type="GDDR6",
        peak_tflops={"fp32": 26.7, "fp16": 26.7, "bf16": 26.7, "fp64": 0.42, "tf32_tc": 53.5,
                     "fp16_tc": 106.9, "bf16_tc": 106.9, "fp8_tc": 213.8, "int8_tc": 213.8},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=130, pcie_gen=4, pcie_bw_gbs=32,
        form_factor="PCIe", aliases=("RTX-4000-Ada",),
    ),
    # ------------------------------------------------------------------ Hopper
    # NVIDIA H100 PCIe datasheet (2022/2023): 26 fp64, 51 fp32; TF32 756, FP16/BF16 1513, FP8/INT8 3026
    # (with sparsity) -> dense 378 / 756 / 1513; 80 GB HBM2e 2.0 TB/s, 350 W, boost 1755 MHz (114 SMs);
    # NVLink bridge (2 GPUs) 600 GB/s bidirectional = 300 per direction.
    DeviceSpec(
        name="NVIDIA H100 PCIe", vendor="nvidia", arch="hopper", num_sms=114, cores_per_sm=128,
        boost_clock_mhz=1755, mem_gb=80, mem_bw_gbs=2000, l2_mb=50, mem_type="HBM2e",
        peak_tflops={"fp32": 51.2, "fp16": 102.4, "bf16": 102.4, "fp64": 25.6, "tf32_tc": 378.0,
                     "fp16_tc": 756.0, "bf16_tc": 756.0, "fp8_tc": 1513.0, "int8_tc": 1513.0},
        smem_per_sm_kb=228, max_threads_per_sm=2048, l2_partitions=2, tdp_w=350, pcie_gen=5, pcie_bw_gbs=64,
        link_name="NVLink4", link_bw_gbs=300, form_factor="PCIe",
        aliases=("H100-PCIe", "H100-PCIe-80GB", "H100-80GB-PCIe"),
    ),
    # NVIDIA H100 SXM datasheet (2022/2023): 34 fp64, 67 fp32; TF32 494.7, FP16/BF16 989.4, FP8/INT8
    # 1978.9 (dense); 80 GB HBM3 3.35 TB/s, 700 W, boost 1980 MHz (132 SMs); NVLink4 900 GB/s
    # bidirectional = 450 per direction. (Tensor peaks are quoted at ~1830 MHz, fp32 at 1980 MHz.)
    DeviceSpec(
        name="NVIDIA H100 80GB HBM3", vendor="nvidia", arch="hopper", num_sms=132, cores_per_sm=128,
        boost_clock_mhz=1980, mem_gb=80, mem_bw_gbs=3350, l2_mb=50, mem_type="HBM3",
        peak_tflops={"fp32": 67.0, "fp16": 134.0, "bf16": 134.0, "fp64": 34.0, "tf32_tc": 494.7,
                     "fp16_tc": 989.4, "bf16_tc": 989.4, "fp8_tc": 1978.9, "int8_tc": 1978.9},
        smem_per_sm_kb=228, max_threads_per_sm=2048, l2_partitions=2, tdp_w=700, pcie_gen=5, pcie_bw_gbs=64,
        link_name="NVLink4", link_bw_gbs=450, form_factor="SXM",
        aliases=("H100-SXM", "H100", "H100-SXM5-80GB", "H100-SXM5", "H100-80GB", "H100-80G"),
    ),
    # NVIDIA GH200 Grace Hopper datasheet (2023), GPU side of the 96 GB HBM3 module (torch: "GH200 480GB"):
    # compute as H100 SXM (34 / 67 / 494.7 / 989.4 / 1978.9 dense), 96 GB HBM3 4.0 TB/s, 50 MB L2; the
    # module's power is configurable 450-1000 W incl. the Grace CPU: we take H100 SXM's 700 W for the GPU.
    # NVLink4 900 GB/s bidirectional = 450 per direction (NVLink-C2C to the CPU not modelled).
    DeviceSpec(
        name="NVIDIA GH200 480GB", vendor="nvidia", arch="hopper", num_sms=132, cores_per_sm=128,
        boost_clock_mhz=1980, mem_gb=96, mem_bw_gbs=4000, l2_mb=50, mem_type="HBM3",
        peak_tflops={"fp32": 67.0, "fp16": 134.0, "bf16": 134.0, "fp64": 34.0, "tf32_tc": 494.7,
                     "fp16_tc": 989.4, "bf16_tc": 989.4, "fp8_tc": 1978.9, "int8_tc": 1978.9},
        smem_per_sm_kb=228, max_threads_per_sm=2048, l2_partitions=2, tdp_w=700, pcie_gen=5, pcie_bw_gbs=64,
        link_name="NVLink4", link_bw_gbs=450, form_factor="SXM", aliases=("GH200", "GH200-96GB"),
    ),
    # NVIDIA H800 SXM5 (export variant of H100 SXM): H100 SXM compute except fp64 (~1 TF), 80 GB HBM3
    # 3.35 TB/s, 700 W; NVLink 400 GB/s bidirectional = 200 per direction.
    DeviceSpec(
        name="NVIDIA H800", vendor="nvidia", arch="hopper", num_sms=132, cores_per_sm=128,
        boost_clock_mhz=1980, mem_gb=80, mem_bw_gbs=3350, l2_mb=50, mem_type="HBM3",
        peak_tflops={"fp32": 67.0, "fp16": 134.0, "bf16": 134.0, "fp64": 1.0, "tf32_tc": 494.7,
                     "fp16_tc": 989.4, "bf16_tc": 989.4, "fp8_tc": 1978.9, "int8_tc": 1978.9},
        smem_per_sm_kb=228, max_threads_per_sm=2048, l2_partitions=2, tdp_w=700, pcie_gen=5, pcie_bw_gbs=64,
        link_name="NVLink4", link_bw_gbs=200, form_factor="SXM", aliases=("H800", "H800-SXM"),
    ),
    # NVIDIA H100 NVL datasheet (2023, per GPU): 30 fp64, 60 fp32; TF32 835, FP16/BF16 1671, FP8/INT8
    # 3341 (with sparsity) -> dense 417.5 / 835.5 / 1670.5; 94 GB HBM3 3.9 TB/s, 350-400 W, boost 1785 MHz;
    # NVLink bridge 600 GB/s bidirectional = 300 per direction.
    DeviceSpec(
        name="NVIDIA H100 NVL", vendor="nvidia", arch="hopper", num_sms=132, cores_per_sm=128,
        boost_clock_mhz=1785, mem_gb=94, mem_bw_gbs=3900, l2_mb=50, mem_type="HBM3",
        peak_tflops={"fp32": 60.0, "fp16": 120.0, "bf16": 120.0, "fp64": 30.0, "tf32_tc": 417.5,
                     "fp16_tc": 835.5, "bf16_tc": 835.5, "fp8_tc": 1670.5, "int8_tc": 1670.5},
        smem_per_sm_kb=228, max_threads_per_sm=2048, l2_partitions=2, tdp_w=400, pcie_gen=5, pcie_bw_gbs=64,
        link_name="NVLink4", link_bw_gbs=300, form_factor="NVL",
        aliases=("H100-NVL", "H100-NVL-94GB", "H100-94GB"),
    ),
    # NVIDIA H200 datasheet (2024), SXM: compute as H100 SXM (34 / 67 / 494.7 / 989.4 / 1978.9 dense);
    # 141 GB HBM3e 4.8 TB/s, 700 W; NVLink4 900 GB/s bidirectional = 450 per direction.
    DeviceSpec(
        name="NVIDIA H200", vendor="nvidia", arch="hopper", num_sms=132, cores_per_sm=128,
        boost_clock_mhz=1980, mem_gb=141, mem_bw_gbs=4800, l2_mb=50, mem_type="HBM3e",
        peak_tflops={"fp32": 67.0, "fp16": 134.0, "bf16": 134.0, "fp64": 34.0, "tf32_tc": 494.7,
                     "fp16_tc": 989.4, "bf16_tc": 989.4, "fp8_tc": 1978.9, "int8_tc": 1978.9},
        smem_per_sm_kb=228, max_threads_per_sm=2048, l2_partitions=2, tdp_w=700, pcie_gen=5, pcie_bw_gbs=64,
        link_name="NVLink4", link_bw_gbs=450, form_factor="SXM",
        aliases=("H200", "H200-SXM", "H200-141GB"),
    ),
    # NVIDIA H200 datasheet (2024), NVL (PCIe card): compute as H100 NVL (30 / 60 / 417.5 / 835.5 / 1670.5
    # dense); 141 GB HBM3e 4.8 TB/s, up to 600 W; NVLink bridge (2/4-way) 900 GB/s bidirectional = 450/dir.
    DeviceSpec(
        name="NVIDIA H200 NVL", vendor="nvidia", arch="hopper", num_sms=132, cores_per_sm=128,
        boost_clock_mhz=1785, mem_gb=141, mem_bw_gbs=4800, l2_mb=50, mem_type="HBM3e",
        peak_tflops={"fp32": 60.0, "fp16": 120.0, "bf16": 120.0, "fp64": 30.0, "tf32_tc": 417.5,
                     "fp16_tc": 835.5, "bf16_tc": 835.5, "fp8_tc": 1670.5, "int8_tc": 1670.5},
        smem_per_sm_kb=228, max_threads_per_sm=2048, l2_partitions=2, tdp_w=600, pcie_gen=5, pcie_bw_gbs=64,
        link_name="NVLink4", link_bw_gbs=450, form_factor="NVL", aliases=("H200-NVL",),
    ),
    # ------------------------------------------------------------------ Blackwell
    # NVIDIA HGX B200 spec table (2025, per GPU): 37 fp64, 75 fp32; TF32 2.2 PF, FP16/BF16 4.5 PF,
    # FP8 / INT8 9 P (with sparsity) -> dense 1100 / 2250 / 4500; 180 GB HBM3e 7.7 TB/s, 1000 W;
    # NVLink5 1.8 TB/s bidirectional = 900 per direction. 148 SMs (2 dies x 74); boost ~1965 MHz.
    # L2 126 MB as reported by cudaDeviceProp in microbenchmark papers (not on the datasheet).
    # Vector fp16/bf16 rates are not published: omitted (peak() falls back to fp32).
    DeviceSpec(
        name="NVIDIA B200", vendor="nvidia", arch="blackwell", num_sms=148, cores_per_sm=128,
        boost_clock_mhz=1965, mem_gb=180, mem_bw_gbs=7700, l2_mb=126, mem_type="HBM3e",
        peak_tflops={"fp32": 75.0, "fp64": 37.0, "tf32_tc": 1100.0, "fp16_tc": 2250.0,
                     "bf16_tc": 2250.0, "fp8_tc": 4500.0, "int8_tc": 4500.0},
        smem_per_sm_kb=228, max_threads_per_sm=2048, tdp_w=1000, pcie_gen=5, pcie_bw_gbs=64,
        link_name="NVLink5", link_bw_gbs=900, form_factor="SXM",
        aliases=("B200", "B200-SXM", "B200-180GB"),
    ),
    # NVIDIA RTX Blackwell whitepaper (2025), GeForce RTX 5090 (GB202): 104.8 fp32 (170 SMs at 2407 MHz);
    # tensor with fp32 accumulate: FP16/BF16 209.5, FP8 419, TF32 104.8; INT8 838 (dense); 32 GB GDDR7
    # 1792 GB/s, 96 MB L2, 575 W, PCIe 5. No NVLink.
    DeviceSpec(
        name="NVIDIA GeForce RTX 5090", vendor="nvidia", arch="blackwell", num_sms=170, cores_per_sm=128,
        boost_clock_mhz=2407, mem_gb=32, mem_bw_gbs=1792, l2_mb=96, mem_type="GDDR7",
        peak_tflops={"fp32": 104.8, "fp16": 104.8, "bf16": 104.8, "fp64": 1.64, "tf32_tc": 104.8,
                     "fp16_tc": 209.5, "bf16_tc": 209.5, "fp8_tc": 419.0, "int8_tc": 838.0},
        smem_per_sm_kb=100, max_threads_per_sm=1536, tdp_w=575, pcie_gen=5, pcie_bw_gbs=64,
        form_factor="PCIe", aliases=("RTX-5090", "5090"),
    ),
    # ------------------------------------------------------------------ AMD CDNA
    # AMD Instinct MI100 datasheet (2020): 11.5 fp64, 23.1 fp32, 46.1 fp32 matrix, 184.6 fp16 matrix,
    # 92.3 bf16 matrix, 184.6 int8 at 1502 MHz; 32 GB HBM2 1228.8 GB/s, 8 MB L2 (ROCm GPU specs table),
    # 300 W. Infinity Fabric: 3 links at 23 GT/s x16 = 46 GB/s per direction each (92 GB/s bidirectional
    # per link on the datasheet) = 138 GB/s per direction. 40 waves/CU = 2560 threads.
    DeviceSpec(
        name="AMD Instinct MI100", vendor="amd", arch="cdna1", num_sms=120, cores_per_sm=64,
        boost_clock_mhz=1502, mem_gb=32, mem_bw_gbs=1228.8, l2_mb=8, mem_type="HBM2",
        peak_tflops={"fp32": 23.1, "fp16": 46.1, "fp64": 11.5, "fp32_tc": 46.1, "fp16_tc": 184.6,
                     "bf16_tc": 92.3, "int8_tc": 184.6},
        smem_per_sm_kb=64, max_threads_per_sm=2560, tdp_w=300, pcie_gen=4, pcie_bw_gbs=32,
        link_name="Infinity Fabric", link_bw_gbs=138, form_factor="PCIe", aliases=("MI100",),
    ),
    # AMD Instinct MI210 datasheet (2022): 22.6 fp64 vector / 45.3 fp64 matrix, 22.6 fp32 vector (45.3
    # packed), 45.3 fp32 matrix, 181 fp16/bf16 matrix, 181 int8 at 1700 MHz; 64 GB HBM2e 1638.4 GB/s, 300 W.
    # L2 8 MB (one CDNA2 GCD; ROCm GPU specs table) -- the NeuSight JSON says 16, which is the MI250's two GCDs.
    # Infinity Fabric bridge: 3 links x 50 GB/s per direction (100 bidirectional each) = 150 per direction.
    DeviceSpec(
        name="AMD Instinct MI210", vendor="amd", arch="cdna2", num_sms=104, cores_per_sm=64,
        boost_clock_mhz=1700, mem_gb=64, mem_bw_gbs=1638.4, l2_mb=8, mem_type="HBM2e",
        peak_tflops={"fp32": 22.6, "fp16": 45.3, "fp64": 22.6, "fp32_tc": 45.3, "fp16_tc": 181.0,
                     "bf16_tc": 181.0, "int8_tc": 181.0},
        smem_per_sm_kb=64, max_threads_per_sm=2048, tdp_w=300, pcie_gen=4, pcie_bw_gbs=32,
        link_name="Infinity Fabric", link_bw_gbs=150, form_factor="PCIe", aliases=("MI210",),
    ),
    # AMD Instinct MI250X datasheet (2021): per OAM (2 GCDs) 47.9 fp64/fp32 vector, 95.7 fp32 matrix,
    # 383 fp16/bf16/int8 matrix at 1700 MHz; 128 GB HBM2e 3.2 TB/s, 220 CUs, 16 MB L2, 560 W.
    # CHOICE: one entry = ONE GCD, because ROCm/torch expose each GCD as its own device (torch prints
    # "AMD Instinct MI250X" twice per module, 110 CUs / 64 GB each). So every number is half the module's:
    # 110 CUs, 64 GB, 1638.4 GB/s, 8 MB L2, 280 W. Links: each GCD has 4 IF links to the other GCD in the
    # package (4 x 50 = 200 GB/s per direction) and ~4 external ones; 200 per direction is used.
    DeviceSpec(
        name="AMD Instinct MI250X", vendor="amd", arch="cdna2", num_sms=110, cores_per_sm=64,
        boost_clock_mhz=1700, mem_gb=64, mem_bw_gbs=1638.4, l2_mb=8, mem_type="HBM2e",
        peak_tflops={"fp32": 23.95, "fp16": 47.9, "fp64": 23.95, "fp32_tc": 47.9, "fp16_tc": 191.5,
                     "bf16_tc": 191.5, "int8_tc": 191.5},
        smem_per_sm_kb=64, max_threads_per_sm=2048, tdp_w=280, pcie_gen=4, pcie_bw_gbs=32,
        link_name="Infinity Fabric", link_bw_gbs=200, form_factor="OAM",
        aliases=("MI250X", "MI250X-GCD", "AMD Instinct MI250X/MI250"),
    ),
    # AMD Instinct MI250 datasheet (2021): per OAM 45.3 fp64/fp32 vector, 90.5 fp32 matrix, 362.1
    # fp16/bf16/int8 matrix at 1700 MHz, 208 CUs, 128 GB HBM2e 3.2 TB/s, 500 W. One GCD per entry, as for
    # MI250X: 104 CUs, 64 GB, 1638.4 GB/s, 8 MB L2, 250 W (same compute as an MI210).
    # Links: 6 external IF links per module (3 per GCD) plus the in-package GCD link; 150/dir assumed.
    DeviceSpec(
        name="AMD Instinct MI250", vendor="amd", arch="cdna2", num_sms=104, cores_per_sm=64,
        boost_clock_mhz=1700, mem_gb=64, mem_bw_gbs=1638.4, l2_mb=8, mem_type="HBM2e",
        peak_tflops={"fp32": 22.6, "fp16": 45.3, "fp64": 22.6, "fp32_tc": 45.3, "fp16_tc": 181.0,
                     "bf16_tc": 181.0, "int8_tc": 181.0},
        smem_per_sm_kb=64, max_threads_per_sm=2048, tdp_w=250, pcie_gen=4, pcie_bw_gbs=32,
        link_name="Infinity Fabric", link_bw_gbs=150, form_factor="OAM",
        aliases=("MI250", "MI250-GCD"),
    ),
    # AMD Instinct MI300X datasheet (2023): 81.7 fp64 vector, 163.4 fp64/fp32 matrix, 163.4 "fp32 vector"
    # (that figure counts packed fp32; the plain rate, stored as fp32 to match MI100/MI210, is 81.7),
    # TF32 653.7, FP16/BF16 1307.4, FP8/INT8 2614.9 (dense) at 2100 MHz; 304 CUs, 192 GB HBM3 5.3 TB/s,
    # 750 W. L2: 8 XCDs x 4 MB = 32 MB (256 MB Infinity Cache not counted; ROCm GPU specs table).
    # Infinity Fabric: 7 links x 64 GB/s per direction (128 bidirectional) = 448 per direction.
    DeviceSpec(
        name="AMD Instinct MI300X", vendor="amd", arch="cdna3", num_sms=304, cores_per_sm=64,
        boost_clock_mhz=2100, mem_gb=192, mem_bw_gbs=5300, l2_mb=32, mem_type="HBM3",
        peak_tflops={"fp32": 81.7, "fp16": 163.4, "fp64": 81.7, "fp32_tc": 163.4, "tf32_tc": 653.7,
                     "fp16_tc": 1307.4, "bf16_tc": 1307.4, "fp8_tc": 2614.9, "int8_tc": 2614.9},
        smem_per_sm_kb=64, max_threads_per_sm=2048, tdp_w=750, pcie_gen=5, pcie_bw_gbs=64,
        link_name="Infinity Fabric", link_bw_gbs=448, form_factor="OAM",
        aliases=("MI300X", "AMD Instinct MI300X OAM", "AMD Instinct MI300X VF"),
    ),
    # AMD Instinct MI325X datasheet (2024): compute as MI300X (same CDNA3 die and clock), 256 GB HBM3e
    # 6 TB/s, 1000 W; same 7-link Infinity Fabric.
    DeviceSpec(
        name="AMD Instinct MI325X", vendor="amd", arch="cdna3", num_sms=304, cores_per_sm=64,
        boost_clock_mhz=2100, mem_gb=256, mem_bw_gbs=6000, l2_mb=32, mem_type="HBM3e",
        peak_tflops={"fp32": 81.7, "fp16": 163.4, "fp64": 81.7, "fp32_tc": 163.4, "tf32_tc": 653.7,
                     "fp16_tc": 1307.4, "bf16_tc": 1307.4, "fp8_tc": 2614.9, "int8_tc": 2614.9},
        smem_per_sm_kb=64, max_threads_per_sm=2048, tdp_w=1000, pcie_gen=5, pcie_bw_gbs=64,
        link_name="Infinity Fabric", link_bw_gbs=448, form_factor="OAM",
        aliases=("MI325X", "AMD Instinct MI325X OAM"),
    ),
]
