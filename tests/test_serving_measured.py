"""Few-shot calibration of serving predictions by runs measured on the user's deployment (`serving.measured`)."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from hybridperf.errors import InputError
from hybridperf.devices import get_device
from hybridperf.serving.measured import calibrate, check_measured, offsets, pooled_offset, same_deployment


def _runs(**over) -> pd.DataFrame:
    """Two configurations (models a and b) of one engine, predicted 10 ms TTFT and 2 ms TPOT, 90% band x/2..x2."""
    base = {"system": "h100_sxm", "backend": "vllm", "backend_version": "0.19.0", "precision": "fp8", "mode": "agg",
            "isl": 1024, "osl": 128,
            "reason": "", "pred_ttft_ms": 10.0, "pred_ttft_lo_ms": 5.0, "pred_ttft_hi_ms": 20.0,
            "pred_tpot_ms": 2.0, "pred_tpot_lo_ms": 1.0, "pred_tpot_hi_ms": 4.0}
    rows = [{**base, "model_path": m} for m in ("org/a", "org/a", "org/b")]
    return pd.DataFrame([{**r, **over} for r in rows])


def test_one_measured_run_moves_its_configuration_half_way():
    measured = _runs().iloc[:1].assign(silicon_ttft_ms=40.0, silicon_tpot_ms=2.0)  # TTFT 4x slower than predicted
    out = calibrate(_runs(), offsets(measured))
    assert out["calibration_runs"].tolist() == [1, 1, 0]
    assert out.loc[0, "pred_ttft_ms"] == pytest.approx(20.0)  # 10 x 4 ** (1 / 2): one run, shrunk n / (n + 1)
    assert out.loc[0, ["pred_ttft_lo_ms", "pred_ttft_hi_ms"]].tolist() == pytest.approx([10.0, 40.0])
    assert out.loc[0, "pred_tpot_ms"] == pytest.approx(2.0)
    assert out.loc[2, "pred_ttft_ms"] == 10.0  # model b: no measured run, as predicted


def test_more_runs_pull_harder_and_disaggregated_runs_are_left_alone():
    measured = _runs().iloc[:2].assign(silicon_ttft_ms=[40.0, 40.0], silicon_tpot_ms=[1.0, 4.0])
    offs = offsets(measured)
    assert offs.loc["h100_sxm|vllm|0.19.0|org/a|fp8", "runs"] == 2
    assert offs.loc["h100_sxm|vllm|0.19.0|org/a|fp8", "ttft"] == pytest.approx(2 / 3 * math.log(4))
    assert offs.loc["h100_sxm|vllm|0.19.0|org/a|fp8", "tpot"] == pytest.approx(0.0)  # 0.5x and 2x cancel
    out = calibrate(_runs(mode="disagg"), offs)
    assert out["calibration_runs"].eq(0).all() and out["pred_ttft_ms"].eq(10.0).all()


def test_measured_runs_must_carry_positive_measurements():
    with pytest.raises(InputError, match="silicon_tpot_ms"):
        offsets(_runs().assign(silicon_ttft_ms=1.0))
    with pytest.raises(InputError, match="isl, osl"):  # a run's own columns too, before any is predicted
        check_measured(_runs().assign(silicon_ttft_ms=1.0, silicon_tpot_ms=1.0).drop(columns=["isl", "osl"]))
    with pytest.raises(InputError, match=r"silicon_ttft_ms must be a number of ms in \(0"):
        offsets(_runs().assign(silicon_ttft_ms=0.0, silicon_tpot_ms=1.0))



def test_no_usable_measured_run_and_no_runs_at_all_leave_predictions_alone():
    none = offsets(_runs(mode="disagg").assign(silicon_ttft_ms=1.0, silicon_tpot_ms=1.0))
    assert none.empty
    out = calibrate(_runs(), none)
    assert out["calibration_runs"].eq(0).all() and out["pred_ttft_ms"].eq(10.0).all()
    assert calibrate(_runs().iloc[:0], none).empty
    with pytest.raises(InputError, match="silicon_ttft_ms"):
        offsets(_runs().assign(silicon_ttft_ms=1e300, silicon_tpot_ms=1.0))


def test_an_empty_mode_cell_is_an_aggregated_run_as_predict_rows_reads_it():
    measured = _runs(mode=float("nan")).iloc[:1].assign(silicon_ttft_ms=40.0, silicon_tpot_ms=2.0)
    assert calibrate(_runs(mode=""), offsets(measured))["calibration_runs"].tolist() == [1, 1, 0]


def test_one_run_is_calibrated_by_every_run_of_its_deployment():
    """A single run pools the runs of its engine, GPU and precision whatever their model column, shrunk n / (n + 1)."""
    measured = _runs().assign(silicon_ttft_ms=40.0, silicon_tpot_ms=[1.0, 4.0, 2.0])
    off = pooled_offset(measured)
    assert off["runs"] == 3
    assert off["ttft"] == pytest.approx(3 / 4 * math.log(4)) and off["tpot"] == pytest.approx(0.0)
    assert pooled_offset(_runs(mode="disagg").assign(silicon_ttft_ms=1.0, silicon_tpot_ms=1.0))["runs"] == 0


def test_same_deployment_matches_engine_gpu_and_precision():
    runs = pd.DataFrame([{"system": "h100_sxm", "backend": "vLLM", "precision": "fp8"},
                         {"system": "h100_sxm", "backend": "vllm", "gemm_quant_mode": "fp8_block"},
                         {"system": "b200_sxm", "backend": "vllm", "precision": "fp8"},
                         {"system": "h100_sxm", "backend": "sglang", "precision": "fp8"},
                         {"system": "h100_sxm", "backend": "vllm", "precision": "bf16"},
                         {"system": "nosuchgpu", "backend": "vllm", "precision": "fp8"}])
    assert same_deployment(runs, "vllm", get_device("h100_sxm"), "fp8").tolist() == [True, True] + [False] * 4
    with pytest.raises(InputError, match="unknown engine"):
        same_deployment(runs, "tgi", get_device("h100_sxm"), "fp8")

