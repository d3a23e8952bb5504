"""The catalog as data: every file ships and loads, the contract's names and aiconfigurator's system ids
resolve, low-precision peaks exist where the hardware has them, a few entries' numbers are pinned, and
a malformed data file fails in one line naming the file and the field."""
from __future__ import annotations

import ast
import fnmatch
import json
import re
from pathlib import Path

import pytest

from hybridperf.devices import get_device, get_node, list_devices, list_nodes
from hybridperf.devices.datafiles import data_files, load_catalog
from hybridperf.devices.spec import DeviceSpec, NodeSpec
from hybridperf.errors import UnknownDeviceError

REPO = Path(__file__).resolve().parents[1]
CONTRACT = REPO.parent / "shared" / "CONTRACT.md"

#: the Devices section of the contract, by name (CONTRACT_NAMES below re-reads it where it is present)
CONTRACT_DEVICES = [
    "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA B200", "NVIDIA B300 SXM6 AC", "NVIDIA GB200", "NVIDIA GB300",
    "NVIDIA L4", "NVIDIA L40S", "NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA A100 80GB PCIe",
    "AMD Instinct MI300X", "Tesla T4", "H100-SXM",
]
CONTRACT_NODES = ["DGX-H100", "DGX-A100", "DGX-B200", "GB200-NVL72"]

#: aiconfigurator's system ids (file names under aiconfigurator_core/systems/) -> the catalog GPU
SYSTEM_GPUS = {
    "a100_sxm": "NVIDIA A100-SXM4-80GB", "h100_sxm": "NVIDIA H100 80GB HBM3", "h200_sxm": "NVIDIA H200",
    "b200_sxm": "NVIDIA B200", "b300_sxm": "NVIDIA B300 SXM6 AC", "gb200": "NVIDIA GB200", "gb300": "NVIDIA GB300",
    "l40s": "NVIDIA L40S", "rtx_pro_6000": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "rtx_pro_6000_server": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "a100_pcie": "NVIDIA A100 80GB PCIe",
    "h100_pcie": "NVIDIA H100 PCIe", "l4": "NVIDIA L4", "a30": "NVIDIA A30",
    "b60": "Intel(R) Arc(TM) Pro B60 Graphics",
}
#: system ids that also name a node, with its GPU count per NVLink/PCIe domain
SYSTEM_NODES = {"a100_sxm": 8, "h100_sxm": 8, "h200_sxm": 8, "b200_sxm": 8, "b300_sxm": 8, "gb200": 72, "gb300": 72,
                "l40s": 8, "rtx_pro_6000": 8, "rtx_pro_6000_server": 8, "b60": 8}


def _contract_names() -> list[str]:
    """Backticked names in the contract's Devices section that look like a GPU, node or system id."""
    text = CONTRACT.read_text()
    section = text.split("## Devices", 1)[1].split("\n## ", 1)[0]
    names = re.findall(r"`([^`]+)`", section)
    return [n for n in names if not n.startswith("-") and "(" not in n and "," not in n and n != "..."]


@pytest.mark.parametrize("name", CONTRACT_DEVICES + CONTRACT_NODES + list(SYSTEM_GPUS))
def test_contract_names_and_system_ids_resolve_to_a_gpu(name):
    assert get_device(name).name in {d.name for d in list_devices()}


def test_contract_section_names_all_resolve():
    if not CONTRACT.is_file():
        pytest.skip(f"shared contract absent: {CONTRACT} not found")
    names = _contract_names()
    assert "NVIDIA GB300" in names and "GB200-NVL72" in names, names
    for n in names:
        get_device(n)  # raises on a name the catalog lacks
    for n in CONTRACT_NODES:
        assert n in names


@pytest.mark.parametrize("name", CONTRACT_NODES)
def test_contract_nodes_resolve(name):
    node = get_node(name)
    assert node.gpus_per_node >= 8 and get_device(node.device).name == node.device


@pytest.mark.parametrize("system,gpu", sorted(SYSTEM_GPUS.items()))
def test_system_id_resolves_to_its_gpu(system, gpu):
    assert get_device(system).name == gpu


@pytest.mark.parametrize("system,gpus", sorted(SYSTEM_NODES.items()))
def test_system_id_resolves_to_a_node_of_that_gpu(system, gpus):
    node = get_node(system)
    assert node.device == get_device(system).name and node.gpus_per_node == gpus
    assert node.intra_bw_gbs > 0 and node.inter_bw_gbs > 0 and node.source


def test_nvl72_is_one_nvlink_domain_of_hosts_with_four_gpus():
    for name in ("GB200-NVL72", "GB300-NVL72"):
        node = get_node(name)
        assert (node.gpus_per_node, node.gpus_per_host, node.intra_topology) == (72, 4, "nvswitch")
        assert node.intra_bw_gbs == 900.0
    assert get_node("gb300").inter_bw_gbs == 2 * get_node("gb200").inter_bw_gbs  # ConnectX-8 vs ConnectX-7


def test_pcie_servers_have_no_nvlink():
    l40s, pro = get_node("l40s"), get_node("rtx_pro_6000_server")
    assert l40s.intra_topology == pro.intra_topology == "pcie"
    assert (l40s.intra_bw_gbs, pro.intra_bw_gbs) == (32.0, 64.0)  # L40S is a PCIe gen4 card, RTX PRO 6000 gen5
    assert get_device("l40s").link_bw_gbs == get_device("rtx_pro_6000").link_bw_gbs == 0


FP8 = ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA H20",
       "NVIDIA GH200 480GB", "NVIDIA GH200 144G HBM3e", "NVIDIA L4", "NVIDIA L40", "NVIDIA L40S",
       "AMD Instinct MI300X", "AMD Instinct MI325X"]
FP4 = ["NVIDIA B200", "NVIDIA B300 SXM6 AC", "NVIDIA GB200", "NVIDIA GB300",
       "NVIDIA RTX PRO 6000 Blackwell Server Edition", "AMD Instinct MI350X", "AMD Instinct MI355X"]
NO_FP8 = ["NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A10", "NVIDIA A30", "NVIDIA A40",
          "AMD Instinct MI250X", "AMD Instinct MI250", "Tesla T4"]


@pytest.mark.parametrize("name", FP8 + FP4)
def test_fp8_peak_where_the_hardware_has_it(name):
    p = get_device(name).peak_tflops
    assert p["fp8_tc"] >= p["fp16_tc"] and "int8_tc" in p


@pytest.mark.parametrize("name", FP4)
def test_fp4_peak_on_blackwell_and_cdna4(name):
    d = get_device(name)
    assert d.peak_tflops["fp4_tc"] >= d.peak_tflops["fp8_tc"]
    assert d.peak("fp4", matrix=True) == pytest.approx(d.peak_tflops["fp4_tc"] * 1e12)


@pytest.mark.parametrize("name", NO_FP8 + FP8)
def test_no_fp4_before_blackwell_and_no_fp8_before_hopper(name):
    p = get_device(name).peak_tflops
    assert "fp4_tc" not in p
    assert ("fp8_tc" in p) == (name not in NO_FP8)


@pytest.mark.parametrize("name,expect", [
    ("NVIDIA H100 80GB HBM3", dict(num_sms=132, mem_gb=80, mem_bw_gbs=3350, l2_mb=50, tdp_w=700, link_bw_gbs=450,
                                   bf16_tc=989.4, fp8_tc=1978.9)),
    ("NVIDIA H200", dict(num_sms=132, mem_gb=141, mem_bw_gbs=4800, l2_mb=60, tdp_w=700, boost_clock_mhz=1980)),
    ("NVIDIA B200", dict(num_sms=148, mem_gb=180, mem_bw_gbs=7700, tdp_w=1000, link_bw_gbs=900, bf16_tc=2250.0,
                         fp8_tc=4500.0, fp4_tc=9000.0)),
    ("NVIDIA B300 SXM6 AC", dict(mem_gb=268, mem_bw_gbs=8000, tdp_w=1100, bf16_tc=2250.0, fp4_tc=13500.0, int8_tc=125.0)),
    ("NVIDIA GB300", dict(mem_gb=277, tdp_w=1400, bf16_tc=2500.0, fp8_tc=5000.0, fp4_tc=15000.0)),
    ("NVIDIA L40S", dict(num_sms=142, mem_gb=48, mem_bw_gbs=864, pcie_gen=4, bf16_tc=362.05, fp8_tc=733.0)),
    ("NVIDIA A100-SXM4-80GB", dict(num_sms=108, mem_bw_gbs=2039, l2_mb=40, link_bw_gbs=300, bf16_tc=312.0)),
    ("AMD Instinct MI300X", dict(num_sms=304, mem_gb=192, mem_bw_gbs=5300, fp32=81.7, bf16_tc=1307.4, fp8_tc=2614.9)),
    ("AMD Instinct MI355X", dict(num_sms=256, mem_gb=288, mem_bw_gbs=8000, fp32=78.6, bf16_tc=2516.6, fp4_tc=10066.3)),
])
def test_pinned_entries(name, expect):
    d = get_device(name)
    for k, v in expect.items():
        got = d.peak_tflops.get(k) if k in d.peak_tflops or k.endswith("_tc") or k == "fp32" else getattr(d, k)
        assert got == v, (name, k, got, v)
    assert d.source and "http" in d.source


def test_pinned_nodes():
    h = get_node("DGX-H100")
    assert (h.gpus_per_node, h.intra_bw_gbs, h.inter_bw_gbs, h.inter_node_bw_gbs) == (8, 450.0, 50.0, 400.0)
    b = get_node("b300_sxm")
    assert (b.name, b.intra_bw_gbs, b.inter_bw_gbs) == ("DGX-B300", 900.0, 100.0)


def test_every_entry_names_its_source():
    for x in [*list_devices(), *list_nodes()]:
        assert x.source.strip(), x.name


def _package_data_patterns() -> list[str]:
    """setup.py's package_data globs for hybridperf.devices (read, not executed)."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "package_data":
            return ast.literal_eval(node.value)["hybridperf.devices"]
    raise AssertionError("setup.py has no package_data")


def test_every_data_file_ships_in_the_wheel_and_loads():
    root = REPO / "hybridperf" / "devices"
    on_disk = sorted(p.relative_to(root).as_posix() for p in (root / "data").rglob("*") if p.is_file())
    patterns = _package_data_patterns()
    assert on_disk and all(any(fnmatch.fnmatch(f, pat) for pat in patterns) for f in on_disk), (on_disk, patterns)
    loaded = [p.name for kind in ("gpus", "nodes") for p in data_files(kind)]
    assert sorted(loaded) == sorted(Path(f).name for f in on_disk)
    n_entries = {kind: sum(len(json.loads(p.read_text())) for p in data_files(kind)) for kind in ("gpus", "nodes")}
    assert n_entries == {"gpus": len(list_devices()), "nodes": len(list_nodes())}


def _write(tmp_path, entries, name="10_test.json") -> Path:
    (tmp_path / name).write_text(entries if isinstance(entries, str) else json.dumps(entries))
    return tmp_path


def _one_line_error(tmp_path, cls=DeviceSpec) -> str:
    with pytest.raises(UnknownDeviceError) as e:
        load_catalog("gpus", cls, root=tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "10_test.json" in msg
    return msg


def _good() -> dict:
    return get_device("NVIDIA L4").to_dict()


def test_a_good_file_loads_the_same_spec(tmp_path):
    assert load_catalog("gpus", DeviceSpec, root=_write(tmp_path, [_good()])) == [get_device("NVIDIA L4")]


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d.update(mem_bw_gbs="fast"), "mem_bw_gbs"),
    (lambda d: d.update(num_sms=58.5), "num_sms"),
    (lambda d: d.update(aliases="L4"), "aliases"),
    (lambda d: d["peak_tflops"].update(fp8="x"), "peak_tflops"),
    (lambda d: d["peak_tflops"].update(fp8_tensor=1.0), "fp8_tensor"),
    (lambda d: d.update(bogus=1), "bogus"),
    (lambda d: d.pop("mem_gb"), "mem_gb"),
    (lambda d: d.pop("source"), "source"),
    (lambda d: d.update(source=" "), "source"),
])
def test_malformed_entry_names_file_entry_and_field(tmp_path, mutate, field):
    d = _good()
    mutate(d)
    msg = _one_line_error(_write(tmp_path, [d]))
    assert field in msg and "NVIDIA L4" in msg, msg


@pytest.mark.parametrize("text,words", [
    ("[{not json", "malformed JSON"),
    ('{"name": "x"}', "array"),
    ("[1]", "entry 0"),
    ('[{"name": "a", "name": "b"}]', "twice"),
])
def test_malformed_file_names_the_file(tmp_path, text, words):
    assert words in _one_line_error(_write(tmp_path, text))


def test_node_file_checked_the_same_way(tmp_path):
    node = get_node("DGX-H100").to_dict()
    node["gpus_per_node"] = "eight"
    with pytest.raises(UnknownDeviceError, match=r"10_test\.json: entry 'DGX-H100': field 'gpus_per_node'"):
        load_catalog("nodes", NodeSpec, root=_write(tmp_path, [node]))


def test_empty_folder_is_an_error(tmp_path):
    with pytest.raises(UnknownDeviceError, match="no catalog files"):
        load_catalog("gpus", DeviceSpec, root=tmp_path)


def test_devices_command_lists_and_specs_every_gpu():
    """`hybridperf devices` renders the whole catalog, and `--spec` prints every GPU (and a system id's)."""
    from typer.testing import CliRunner

    from hybridperf.cli.app import app

    runner = CliRunner()
    r = runner.invoke(app, ["devices"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    for x in [*list_devices(), *list_nodes()]:
        assert x.name in r.output
    for name in [d.name for d in list_devices()] + list(SYSTEM_GPUS):
        r = runner.invoke(app, ["devices", "--spec", name])
        assert r.exit_code == 0, (name, r.output)
        assert json.loads(r.output)["name"] == get_device(name).name


def test_cli_reports_a_broken_packaged_file_in_one_line(tmp_path, monkeypatch, capsys):
    """The catalog is read on first use, so a broken shipped file is the command's one-line error."""
    import sys

    import hybridperf.devices as devices_pkg
    from hybridperf.cli.app import main
    from hybridperf.devices import catalog, datafiles, nodes

    d = _good()
    d["mem_gb"] = "lots"
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "10_test.json").write_text(json.dumps([d]))
    caches = (catalog.devices, nodes.nodes, devices_pkg._device_index, devices_pkg._node_index)
    monkeypatch.setattr(datafiles, "data_dir", lambda kind: tmp_path / kind)
    monkeypatch.setattr(sys, "argv", ["hybridperf", "devices", "--spec", "L4"])
    for c in caches:
        c.cache_clear()
    try:
        with pytest.raises(SystemExit) as e:
            main()
    finally:
        monkeypatch.undo()
        for c in caches:
            c.cache_clear()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "10_test.json" in err and "'mem_gb'" in err
    assert get_device("L4").mem_gb == 24  # the real catalog is back


def test_two_entries_answering_to_one_name_is_an_error():
    from dataclasses import replace

    from hybridperf.devices import _index

    l4 = get_device("L4")
    twin = replace(l4, name="NVIDIA L4 Twin", aliases=("L4",))
    with pytest.raises(UnknownDeviceError, match="'L4' of 'NVIDIA L4 Twin' also names 'NVIDIA L4'"):
        _index([l4, twin])


def test_a_malformed_catalog_file_read_at_import_is_one_error_line(monkeypatch, capsys):
    """The catalog is read while the CLI is imported: the console entry imports it inside the error handling, so a
    bad data file is one `error:` line and exit 2, not a traceback."""
    import sys
    import types

    from hybridperf.cli import entry
    from hybridperf.errors import SpecError

    class Broken(types.ModuleType):
        def __getattr__(self, name):
            raise SpecError("60_nvidia_hopper.json: entry 'NVIDIA H20': field 'mem_bw_gbs' must be a number")

    monkeypatch.setitem(sys.modules, "hybridperf.cli.app", Broken("hybridperf.cli.app"))
    with pytest.raises(SystemExit) as e:
        entry.main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert "mem_bw_gbs" in err
