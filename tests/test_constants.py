"""Prior constants as explicit data: per-GPU fits held out by value, and their provenance table."""
from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from hybridperf.cli.app import app
from hybridperf.priors import constants
from hybridperf.priors.constants import DEFAULT_CONSTANTS, PROVENANCE, PriorConstants, fitted_constants


def test_constants_are_frozen_values():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_CONSTANTS.reread_l2_mb = 0.1
    with pytest.raises(TypeError):
        DEFAULT_CONSTANTS.batched_sgemm_tiles["hopper"] = ()


def test_holding_a_gpu_out_changes_only_the_value_passed_never_the_default():
    before = repr(DEFAULT_CONSTANTS)
    held = fitted_constants("NVIDIA H200")
    assert "hopper" not in held.split_rate_exponent and "hopper" in DEFAULT_CONSTANTS.split_rate_exponent
    assert held.reread_l2_mb == pytest.approx(constants.REREAD_L2_SHARE_FITS["NVIDIA A100-PCIE-40GB"] * 40.0)
    assert repr(DEFAULT_CONSTANTS) == before
    tiles = held.with_batched_tiles("hopper", [[64, 64]])
    assert tiles.batched_sgemm_tiles["hopper"] == ((64, 64),) and held.batched_sgemm_tiles["hopper"] != ((64, 64),)
    assert "hopper" not in held.with_batched_tiles("hopper", None).batched_sgemm_tiles
    assert isinstance(tiles, PriorConstants)


def test_every_provenance_entry_names_a_real_constant_and_flags_one_gpu_defaults():
    for p in PROVENANCE:
        p.value()  # AttributeError for a renamed or deleted constant
    flagged = {p.name for p in PROVENANCE if p.one_gpu_default}
    assert "gemm.K_OVERHEAD_MATRIX" in flagged  # read off the H200, prices every matrix-unit GEMM
    assert "constants.SPLIT_RATE_FITS" not in flagged  # held out per GPU


def test_constants_command_prints_the_table_and_json():
    runner = CliRunner()
    res = runner.invoke(app, ["constants", "--json", "--one-gpu"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert rows and all(r["one_gpu_default"] for r in rows)
    res = runner.invoke(app, ["constants"], env={"COLUMNS": "250"})
    assert res.exit_code == 0 and "prior constants" in res.stdout
    assert "attention.decode_fp8_bw[fa3]" in res.stdout  # a family key is printed, not read as markup


def test_attention_constants_are_in_the_table_and_sdpas_are_flagged():
    from hybridperf.priors.constants import provenance_rows

    rows = {r["name"]: r for r in provenance_rows()}
    assert rows["attention.efficiency[fa3]"]["read_off"].count(",") == 3  # four aiconfigurator systems
    assert rows["attention.decode_fp8_ms[flashinfer]"]["unit"] == "ms"
    assert not rows["attention.efficiency[fa3]"]["one_gpu_default"]
    assert rows["attention.sdpa_wave_ms"]["one_gpu_default"]  # read off our H100's SDPA rows, prices every GPU
    assert not rows["attention.mem_efficient_efficiency"]["read_off"]  # a guess, read off nothing
