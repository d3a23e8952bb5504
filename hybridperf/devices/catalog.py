"""The built-in catalog of accelerators and nodes, from public spec sheets (dense peaks, boost clock).

Names are exactly what `torch.cuda.get_device_name()` prints. Add a device by appending a DeviceSpec.
"""
from __future__ import annotations

from hybridperf.devices.spec import DeviceSpec

DEVICES: list[DeviceSpec] = [
    DeviceSpec(
        name="Tesla P4", vendor="nvidia", arch="pascal", num_sms=20, cores_per_sm=128,
        boost_clock_mhz=1113, mem_gb=8, mem_bw_gbs=192, l2_mb=2, mem_type="GDDR5",
        peak_tflops={"fp32": 5.7, "int8": 22.0}, smem_per_sm_kb=96, tdp_w=75,
        pcie_gen=3, pcie_bw_gbs=16, aliases=("P4",),
    ),
    DeviceSpec(
        name="Tesla P100-PCIE-16GB", vendor="nvidia", arch="pascal", num_sms=56, cores_per_sm=64,
        boost_clock_mhz=1329, mem_gb=16, mem_bw_gbs=732, l2_mb=4, mem_type="HBM2",
        peak_tflops={"fp32": 9.3, "fp16": 18.7, "fp64": 4.7}, smem_per_sm_kb=64, tdp_w=250,
        pcie_gen=3, pcie_bw_gbs=16, aliases=("P100", "P100-PCIE"),
    ),
    DeviceSpec(
        name="Tesla T4", vendor="nvidia", arch="turing", num_sms=40, cores_per_sm=64,
        boost_clock_mhz=1590, mem_gb=16, mem_bw_gbs=320, l2_mb=4, mem_type="GDDR6",
        peak_tflops={"fp32": 8.1, "fp16": 16.2, "fp16_tc": 65.0, "int8_tc": 130.0},
        smem_per_sm_kb=64, max_threads_per_sm=1024, tdp_w=70, pcie_gen=3, pcie_bw_gbs=16,
        aliases=("T4",),
    ),
    DeviceSpec(
        name="Tesla V100-PCIE-32GB", vendor="nvidia", arch="volta", num_sms=80, cores_per_sm=64,
        boost_clock_mhz=1380, mem_gb=32, mem_bw_gbs=900, l2_mb=6, mem_type="HBM2",
        peak_tflops={"fp32": 14.0, "fp16": 28.0, "fp64": 7.0, "fp16_tc": 112.0},
        smem_per_sm_kb=96, tdp_w=250, pcie_gen=3, pcie_bw_gbs=16, aliases=("V100", "V100-PCIE"),
    ),
    DeviceSpec(
        name="NVIDIA A100-PCIE-40GB", vendor="nvidia", arch="ampere", num_sms=108, cores_per_sm=64,
        boost_clock_mhz=1410, mem_gb=40, mem_bw_gbs=1555, l2_mb=40, mem_type="HBM2",
        peak_tflops={"fp32": 19.5, "fp16": 78.0, "bf16": 39.0, "fp64": 9.7, "tf32_tc": 156.0,
                     "fp16_tc": 312.0, "bf16_tc": 312.0, "int8_tc": 624.0},
        smem_per_sm_kb=164, tdp_w=250, pcie_gen=4, pcie_bw_gbs=32, link_name="NVLink3",
        link_bw_gbs=300, aliases=("A100-PCIE-40GB", "A100-40GB-PCIe"),
    ),
    DeviceSpec(
        name="NVIDIA H100 80GB HBM3", vendor="nvidia", arch="hopper", num_sms=132, cores_per_sm=128,
        boost_clock_mhz=1980, mem_gb=80, mem_bw_gbs=3350, l2_mb=50, mem_type="HBM3",
        peak_tflops={"fp32": 67.0, "fp16": 134.0, "bf16": 134.0, "fp64": 34.0, "tf32_tc": 494.7,
                     "fp16_tc": 989.4, "bf16_tc": 989.4, "fp8_tc": 1978.9, "int8_tc": 1978.9},
        smem_per_sm_kb=228, tdp_w=700, pcie_gen=5, pcie_bw_gbs=64, link_name="NVLink4",
        link_bw_gbs=450, form_factor="SXM", aliases=("H100-SXM", "H100", "H100-SXM5-80GB"),
    ),
]
