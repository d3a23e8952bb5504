"""`hybridperf compare` and `hybridperf.graphs.compare`: one model step ranked over several GPUs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hybridperf.cli.app import app
from hybridperf.devices import list_devices
from hybridperf.graphs import predict_model
from hybridperf.graphs.compare import compare_devices, resolve_devices
from hybridperf.predictor import Predictor

from conftest import assert_one_line_error, run_cli

TINY = Path(__file__).resolve().parent / "data" / "tiny_gpt2_config.json"
PRIOR = Predictor.prior_only()
runner = CliRunner()


def test_each_row_is_that_devices_prediction_fastest_first():
    df = compare_devices(TINY, 2, 128, "H100-SXM, NVIDIA L4, Tesla T4", "train", PRIOR)
    assert list(df["e2e_ms"]) == sorted(df["e2e_ms"])
    assert df["vs_fastest"].iloc[0] == pytest.approx(1.0) and (df["vs_fastest"] >= 1).all()
    for r in df.to_dict("records"):
        alone = predict_model(TINY, 2, 128, "train", r["device"], PRIOR)
        assert r["e2e_ms"] == pytest.approx(alone.ms, rel=1e-9)
        assert (r["lo_ms"], r["hi_ms"]) == pytest.approx((alone.lo_ms, alone.hi_ms), rel=1e-9)
        assert r["tokens_per_s"] == pytest.approx(2 * 128 * 1000 / r["e2e_ms"])


def test_a_device_the_step_does_not_fit_is_flagged_and_ranked_last():
    cfg = json.loads(TINY.read_text())
    cfg.update(n_embd=4096, n_layer=48, n_head=32, vocab_size=50257)  # ~10B parameters: fits 80 GB, not 8
    df = compare_devices(cfg, 1, 256, ["Tesla P4", "H100-SXM"], "inf", PRIOR)
    assert list(df["device"]) == ["NVIDIA H100 80GB HBM3", "Tesla P4"]
    assert list(df["fits"]) == [True, False]
    assert df["mem_fraction"].iloc[1] > 1


def test_decode_rate_counts_one_token_per_sequence():
    df = compare_devices(TINY, 4, 256, ["A100-80GB"], "decode", PRIOR)
    assert df["tokens_per_s"].iloc[0] == pytest.approx(4 * 1000 / df["e2e_ms"].iloc[0])


def test_device_lists():
    assert len(resolve_devices("all")) == len(list_devices())
    # two aliases of one GPU are one row
    assert [d.name for d in resolve_devices(["H100", "H100-SXM", "NVIDIA L4"])] == \
        ["NVIDIA H100 80GB HBM3", "NVIDIA L4"]


def test_cli_json_csv_and_plot(tmp_path):
    csv, png = tmp_path / "rank.csv", tmp_path / "rank.png"
    r = runner.invoke(app, ["compare", "--config", str(TINY), "--batch", "2", "--seq", "64", "--devices",
                            "L4,H100,A10", "--prior-only", "--json", "--output", str(csv), "--plot", str(png)])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    assert {x["device"] for x in rows} == {"NVIDIA H100 80GB HBM3", "NVIDIA A10", "NVIDIA L4"}
    assert [x["e2e_ms"] for x in rows] == sorted(x["e2e_ms"] for x in rows)
    assert csv.read_text().splitlines()[0].startswith("device,e2e_ms,lo_ms,hi_ms")
    assert png.stat().st_size > 1000


def test_plot_without_a_suffix_is_a_png_at_that_path(tmp_path):
    """No suffix means PNG (docs/compare.md): the file itself holds it, with no temporary left beside it."""
    plot = tmp_path / "rank"
    r = runner.invoke(app, ["compare", "--config", str(TINY), "--batch", "1", "--seq", "64", "--devices", "L4,H100",
                            "--prior-only", "--plot", str(plot)])
    assert r.exit_code == 0, r.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["rank"]


def test_cli_table_notes_emulated_bf16():
    r = runner.invoke(app, ["compare", "--config", str(TINY), "--batch", "1", "--seq", "64", "--devices",
                            "H100,Tesla T4", "--dtype", "bf16", "--prior-only"])
    assert r.exit_code == 0, r.output
    assert "NVIDIA H100 80GB HBM3" in r.stdout and "no bf16 units (Tesla T4)" in r.stderr


@pytest.mark.parametrize("args", [
    ("--devices", "H100,No Such GPU"),
    ("--devices", " , "),
    ("--mode", "serve"),
    ("--batch", "0"),
])
def test_bad_input_is_one_line_error(monkeypatch, capsys, args):
    base = {"--config": str(TINY), "--batch": "1", "--seq": "64", "--devices": "H100", "--mode": "inf"}
    base.update(dict(zip(args[::2], args[1::2])))
    code, err = run_cli(monkeypatch, capsys, ["compare", *[x for kv in base.items() for x in kv], "--prior-only"])
    assert_one_line_error(code, err)
