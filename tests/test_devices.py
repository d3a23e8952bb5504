"""Device catalog: coverage, unique names, sane numbers, and JSON spec loading."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybridperf.devices import PEAK_KEYS, get_device, list_devices
from hybridperf.devices.catalog import DEVICES
from hybridperf.errors import SpecError, UnknownDeviceError

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
NEUSIGHT_CONFIGS = DATASETS / "neusight" / "data" / "device_configs"

REQUIRED_NAMES = [
    "Tesla P4", "Tesla P100-PCIE-16GB", "Tesla P100-SXM2-16GB",
    "Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB", "Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB",
    "Tesla T4", "NVIDIA A10", "NVIDIA A30", "NVIDIA A40",
    "NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB",
    "NVIDIA L4", "NVIDIA L40S", "NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL",
    "NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA H20", "NVIDIA GH200 480GB", "NVIDIA GH200 144G HBM3e", "NVIDIA B200",
    "NVIDIA B300 SXM6 AC", "NVIDIA GB200", "NVIDIA GB300", "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "NVIDIA L40", "AMD Instinct MI100", "AMD Instinct MI210", "AMD Instinct MI250", "AMD Instinct MI250X",
    "AMD Instinct MI300X", "AMD Instinct MI325X", "AMD Instinct MI350X", "AMD Instinct MI355X",
]

ALIASES = {
    "A100-80GB-PCIe": "NVIDIA A100 80GB PCIe",
    "A100-SXM-80GB": "NVIDIA A100-SXM4-80GB",
    "H100-SXM": "NVIDIA H100 80GB HBM3",
    "h100sxm": "NVIDIA H100 80GB HBM3",
    "H100-PCIe": "NVIDIA H100 PCIe",
    "H100-NVL": "NVIDIA H100 NVL",
    "L4": "NVIDIA L4",
    "MI300X": "AMD Instinct MI300X",
    "T4": "Tesla T4",
    "NVIDIA_A100_80GB_PCIe": "NVIDIA A100 80GB PCIe",  # NeuSight-style folder name
    "nvidia h100 80gb hbm3": "NVIDIA H100 80GB HBM3",
}

ARCHS = {"pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna1", "cdna2", "cdna3", "cdna4", "xe2"}
LINKS = {"", "NVLink1", "NVLink2", "NVLink3", "NVLink4", "NVLink5", "Infinity Fabric"}
# `int8` (no _tc) is the DP4A rate of parts without int8 tensor cores; DeviceSpec.peak("int8") reads it.
ALLOWED_PEAK_KEYS = set(PEAK_KEYS) | {"int8"}


def _norm(s: str) -> str:
    return "".join(ch for ch in s.lower() if ch.isalnum())


def test_catalog_size():
    assert len(DEVICES) >= 25
    assert list_devices() == list(DEVICES)


def test_names_and_aliases_unique_after_normalization():
    owner: dict[str, str] = {}
    for d in DEVICES:
        for key in (d.name, *d.aliases):
            k = _norm(key)
            assert k, f"{d.name}: empty key {key!r}"
            assert k not in owner, f"{key!r} of {d.name} collides with a key of {owner[k]}"
            owner[k] = d.name


@pytest.mark.parametrize("name", REQUIRED_NAMES)
def test_required_devices_resolve(name):
    d = get_device(name)
    assert d.name == name


@pytest.mark.parametrize("alias,name", sorted(ALIASES.items()))
def test_aliases_resolve(alias, name):
    assert get_device(alias).name == name


@pytest.mark.parametrize("written,name", [
    ("NVIDIA H100", "NVIDIA H100 80GB HBM3"),
    ("NVIDIA A100-PCIE-80GB", "NVIDIA A100 80GB PCIe"),
    ("NVIDIA Tesla T4", "Tesla T4"),
    ("nvidia l4", "NVIDIA L4"),
    ("H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),  # the catalog name's brand word left out
    ("B300 SXM6 AC", "NVIDIA B300 SXM6 AC"),
    ("V100S-PCIE-32GB", "Tesla V100S-PCIE-32GB"),
    ("Instinct MI300X", "AMD Instinct MI300X"),
])
def test_brand_words_are_optional(written, name):
    assert get_device(written).name == name


@pytest.mark.parametrize("brand_only", ["NVIDIA", "Tesla", "AMD Instinct"])
def test_brand_alone_is_not_a_device(brand_only):
    with pytest.raises(UnknownDeviceError):
        get_device(brand_only)


def test_get_device_passes_spec_through():
    d = DEVICES[0]
    assert get_device(d) is d


@pytest.mark.parametrize("d", DEVICES, ids=lambda d: d.name)
def test_spec_fields_sane(d):
    assert d.vendor in {"nvidia", "amd", "intel"}
    assert d.arch in ARCHS
    assert d.link_name in LINKS
    assert d.form_factor in {"PCIe", "SXM", "OAM", "NVL"}
    assert (d.link_name == "") == (d.link_bw_gbs == 0)
    x16 = {3: 16, 4: 32, 5: 64, 6: 128}[d.pcie_gen]
    assert d.pcie_bw_gbs in (x16, x16 / 2)  # x16, or x8 (Arc Pro B60)
    for v in (d.num_sms, d.cores_per_sm, d.boost_clock_mhz, d.mem_gb, d.mem_bw_gbs, d.l2_mb,
              d.smem_per_sm_kb, d.max_threads_per_sm, d.tdp_w):
        assert v > 0
    assert set(d.peak_tflops) <= ALLOWED_PEAK_KEYS, set(d.peak_tflops) - ALLOWED_PEAK_KEYS
    assert all(v > 0 for v in d.peak_tflops.values())
    fp32 = d.peak_tflops["fp32"]
    for k in ("fp16_tc", "bf16_tc", "tf32_tc", "fp8_tc", "int8_tc", "fp32_tc"):
        if k in d.peak_tflops:
            assert d.peak_tflops[k] >= fp32, (k, d.peak_tflops[k], fp32)
    # fp32 peak agrees with lanes x 2 FLOP (FMA) x clock to within 5%
    derived = d.num_sms * d.cores_per_sm * 2 * d.boost_clock_mhz / 1e6
    assert abs(derived - fp32) / fp32 < 0.05, (derived, fp32)
    # matrix peaks ordered as on every spec sheet
    p = d.peak_tflops
    if "fp8_tc" in p:
        assert p["fp8_tc"] >= p["fp16_tc"]
    if "tf32_tc" in p and "fp16_tc" in p:
        assert p["tf32_tc"] <= p["fp16_tc"]
    assert d.peak("fp16", matrix=True) >= d.peak("fp32")


def test_peak_lookup():
    h100 = get_device("H100-SXM")
    assert h100.peak("bf16", matrix=True) == pytest.approx(989.4e12)
    assert h100.peak("float32") == pytest.approx(67e12)
    p4 = get_device("P4")
    assert p4.peak("fp16") == pytest.approx(p4.peak("fp32"))  # no fp16 unit: falls back to fp32
    assert p4.peak("int8") == pytest.approx(22e12)


def test_unknown_device_raises():
    with pytest.raises(UnknownDeviceError):
        get_device("NVIDIA Imaginary X9000")
    with pytest.raises(UnknownDeviceError):
        get_device("does/not/exist.json")


def test_neusight_device_configs_load():
    if not NEUSIGHT_CONFIGS.is_dir():
        pytest.skip(f"shared datasets absent: {NEUSIGHT_CONFIGS} not found")
    files = sorted(NEUSIGHT_CONFIGS.glob("*.json"))
    assert files, f"no JSON files in {NEUSIGHT_CONFIGS}"
    for f in files:
        d = get_device(str(f))
        raw = json.loads(f.read_text())
        assert d.name == raw["Device"]
        assert d.peak("fp32") > 0
        # the same GPU is in the catalog, and the numbers roughly agree with the artifact's
        cat = get_device(raw["Device"])
        assert cat.mem_bw_gbs == pytest.approx(float(raw["Mem_Bw"]), rel=0.02)
        assert cat.peak("fp32") == pytest.approx(d.peak("fp32"), rel=0.05)


def test_project_json_round_trip(tmp_path):
    src = get_device("NVIDIA A100 80GB PCIe")
    p = tmp_path / "my_gpu.json"
    p.write_text(json.dumps(src.to_dict()))
    back = get_device(str(p))
    assert back == src


def test_malformed_json_raises(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UnknownDeviceError):
        get_device(str(bad))
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]")
    with pytest.raises(UnknownDeviceError):
        get_device(str(arr))
    unknown_field = tmp_path / "extra.json"
    unknown_field.write_text(json.dumps({**DEVICES[0].to_dict(), "bogus": 1}))
    with pytest.raises(UnknownDeviceError):
        get_device(str(unknown_field))
    incomplete = tmp_path / "incomplete.json"
    incomplete.write_text(json.dumps({"name": "x", "vendor": "nvidia"}))
    with pytest.raises(UnknownDeviceError):
        get_device(str(incomplete))
    neusight_missing = tmp_path / "ns.json"
    neusight_missing.write_text(json.dumps({"Device": "X", "Mem_Bw": 100}))
    with pytest.raises(UnknownDeviceError):
        get_device(str(neusight_missing))


def test_neusight_json_of_a_catalog_gpu_is_enriched_from_the_catalog(tmp_path):
    """A NeuSight-format file carries only SMs, clock, fp32 peak, memory and L2; the catalog supplies
    the architecture, TDP, memory type and other peaks, and the file's own numbers win."""
    p = tmp_path / "l4.json"
    p.write_text(json.dumps({"Device": "NVIDIA L4", "Dev_Mem": 24, "Mem_Bw": 310, "Num_Sm": 58, "Core_Per_SM": 128,
                             "Freq": 2040, "SingleFLOPs": 30300, "L2Cache": 48}))
    spec, cat = get_device(str(p)), get_device("NVIDIA L4")
    assert (spec.arch, spec.tdp_w, spec.mem_type) == (cat.arch, cat.tdp_w, cat.mem_type)
    assert spec.mem_bw_gbs == 310  # the file's number, not the catalog's
    assert spec.peak_tflops["fp16_tc"] == cat.peak_tflops["fp16_tc"]
    unknown = tmp_path / "x.json"
    unknown.write_text(p.read_text().replace("NVIDIA L4", "Mystery GPU"))
    assert get_device(str(unknown)).arch == "unknown"


def test_neusight_json_is_enriched_from_the_board_its_numbers_describe(tmp_path):
    """A file naming "NVIDIA H100" (the SXM board in the catalog) with 114 SMs and 2 TB/s is the PCIe
    board, whose 350 W TDP caps its arithmetic; NeuSight's own P4 file, which counts 40 SMs of 64 cores,
    stays the P4 (2560 cores), not the 30-SM P40."""
    def neusight(name, sms, cores, bw, mem):
        p = tmp_path / f"{name}-{sms}-{bw}.json"
        p.write_text(json.dumps({"Device": name, "Dev_Mem": mem, "Mem_Bw": bw, "Num_Sm": sms, "Core_Per_SM": cores,
                                 "Freq": 1755, "SingleFLOPs": sms * cores * 2 * 1.755, "L2Cache": 50}))
        return get_device(str(p))

    assert neusight("NVIDIA H100", 114, 128, 2000, 80).tdp_w == get_device("NVIDIA H100 PCIe").tdp_w == 350
    assert neusight("NVIDIA H100", 132, 128, 3350, 80).tdp_w == get_device("NVIDIA H100 80GB HBM3").tdp_w
    assert neusight("NVIDIA A100", 108, 64, 1935, 80).tdp_w == get_device("NVIDIA A100 80GB PCIe").tdp_w
    assert neusight("Tesla P4", 40, 64, 192, 8).tdp_w == get_device("Tesla P4").tdp_w == 75


def test_neusight_json_in_other_units_is_refused(tmp_path):
    """NeuSight's files give SingleFLOPs in GFLOP/s and Freq in MHz; a file in TFLOP/s or GHz would price every
    kernel ~1000x off, so a rate its lanes and clock do not give is refused, naming the units."""
    base = {"Device": "My GPU", "Dev_Mem": 40, "Mem_Bw": 1555, "Num_Sm": 80, "Core_Per_SM": 128, "Freq": 1700,
            "L2Cache": 40}
    for bad, field in (({"SingleFLOPs": 35}, "GFLOP/s"), ({"SingleFLOPs": 35000, "Freq": 1.7}, "Freq"),
                       ({"SingleFLOPs": 35, "Freq": 1.7}, "Freq"), ({"SingleFLOPs": 35000, "Mem_Bw": 1.555}, "Mem_Bw"),
                       ({"SingleFLOPs": 35000, "Dev_Mem": 40960}, "Dev_Mem")):
        p = tmp_path / "gpu.json"
        p.write_text(json.dumps({**base, **bad}))
        with pytest.raises(SpecError, match=field):
            get_device(str(p))
    p.write_text(json.dumps({**base, "SingleFLOPs": 35000}))
    assert get_device(str(p)).peak("fp32") == pytest.approx(35e12)


def test_a_spec_printed_by_devices_loads_back_as_the_same_gpu(tmp_path):
    """`hybridperf devices --spec NAME` prints the project's JSON format: edited and passed back as
    --device, it is the catalog GPU, while a NeuSight file for an unknown GPU carries a note saying what
    the priors must assume."""
    from typer.testing import CliRunner

    from hybridperf.cli.app import app
    from hybridperf.devices import generic_spec_note

    r = CliRunner().invoke(app, ["devices", "--spec", "L4"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    d["name"], d["aliases"] = "My L4", []
    p = tmp_path / "mine.json"
    p.write_text(json.dumps(d))
    mine, cat = get_device(str(p)), get_device("NVIDIA L4")
    assert mine.to_dict() == {**cat.to_dict(), "name": "My L4", "aliases": []}
    assert generic_spec_note(mine) is None and generic_spec_note(cat) is None
    ns = tmp_path / "ns.json"
    ns.write_text(json.dumps({"Device": "Mystery GPU", "Dev_Mem": 24, "Mem_Bw": 300, "Num_Sm": 58,
                              "Core_Per_SM": 128, "Freq": 2040, "SingleFLOPs": 30300, "L2Cache": 48}))
    note = generic_spec_note(get_device(str(ns)))
    assert note and "Mystery GPU" in note and "\n" not in note
    assert CliRunner().invoke(app, ["devices", "--spec", "no such gpu"]).exit_code != 0


def test_a10g_is_its_own_device_not_the_a10():
    """AWS's A10G prints as `NVIDIA A10G`; it must not resolve to the A10, whose tensor rate is ~1.8x."""
    a10g, a10 = get_device("NVIDIA A10G"), get_device("NVIDIA A10")
    assert a10g.name == "NVIDIA A10G" and get_device("A10G") is a10g
    assert a10g.num_sms == 80 and a10.num_sms == 72
    assert a10g.peak("fp16", matrix=True) < a10.peak("fp16", matrix=True)
    assert a10g.peak("fp32") > a10.peak("fp32")


def test_allocatable_memory_is_gib_less_ecc_on_gddr_data_center_cards():
    """What nvidia-smi reports: H100 80 GiB (81,559 MiB, near 81,920), L40S 46,068 MiB (1/16 to ECC), RTX 4090 all."""
    from hybridperf.devices import get_device

    assert get_device("NVIDIA H100 80GB HBM3").mem_bytes == 80 * 2**30
    assert get_device("NVIDIA L40S").mem_bytes / 2**20 == pytest.approx(46068, rel=0.001)
    assert get_device("NVIDIA L4").mem_bytes / 2**20 == pytest.approx(23034, rel=0.001)
    assert get_device("NVIDIA GeForce RTX 4090").mem_bytes == 24 * 2**30


def test_ecc_reserved_is_validated():
    from hybridperf.devices import get_device
    from hybridperf.devices.spec import DeviceSpec

    d = get_device("NVIDIA L40S").to_dict()
    with pytest.raises(SpecError, match="ecc_reserved"):
        DeviceSpec.from_dict({**d, "ecc_reserved": 0.7})
    for field, bad in (("tensor_isa", "wgmma"), ("sfu_exp_per_sm_clock", 0.0)):
        with pytest.raises(SpecError, match=field):
            DeviceSpec.from_dict({**d, field: bad})
    assert DeviceSpec.from_dict({**d, "tensor_isa": "mma"}).kernel_arch == "ada"


@pytest.mark.parametrize("name,sms,bw,board", [
    ("NVIDIA H100 80GB HBM3", 132, 3350, "NVIDIA H100 80GB HBM3"),  # Core_Per_SM left out: 64 by default
    ("NVIDIA H100", 114, 2000, "NVIDIA H100 PCIe"),
])
def test_a_neusight_file_naming_a_gpu_takes_the_board_its_sms_describe(tmp_path, name, sms, bw, board):
    """A file that leaves Core_Per_SM out is matched by its SM count at each board's own cores per SM: 132 SMs of an
    H100 (its 700 W, not the H20's 78 SMs nearest 132 x 64 cores, which priced Llama-3-8B 4.3x slower)."""
    f = tmp_path / "gpu.json"
    f.write_text(json.dumps({"Device": name, "Dev_Mem": 80, "Mem_Bw": bw, "Num_Sm": sms, "Freq": 1755,
                             "SingleFLOPs": 51000, "L2Cache": 50}))
    spec = get_device(str(f))
    assert spec.tdp_w == get_device(board).tdp_w and spec.num_sms == sms
    assert spec.peak_tflops["bf16_tc"] == get_device(board).peak_tflops["bf16_tc"]
