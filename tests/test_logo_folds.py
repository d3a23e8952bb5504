"""leave_one_gpu_out: each fold fits and predicts with its own prior constants (e.g. the tile tables
rebuilt without the held-out GPU's traces)."""
from __future__ import annotations

import pandas as pd

from hybridperf.priors import constants
from hybridperf.training import kernels


def test_each_fold_fits_and_predicts_with_its_constants(monkeypatch):
    seen = []

    def fake_fit(train, cfg, progress=None, constants=None):
        seen.append(("fit", constants, sorted(train["device"].unique())))
        return {}

    def fake_predict(fitted, ev, constants=None):
        seen.append(("predict", constants, sorted(ev["device"].unique())))
        return ev.copy()

    monkeypatch.setattr(kernels, "fit_all", fake_fit)
    monkeypatch.setattr(kernels, "predict_heldout", fake_predict)
    rows = pd.DataFrame({"device": ["a", "a", "b", "b"], "latency_ms": [1.0, 2.0, 3.0, 4.0]})
    logo = kernels.leave_one_gpu_out(rows, rows, kernels.TrainConfig(), fold_constants=lambda d: f"without {d}")
    assert seen == [("fit", "without a", ["b"]), ("predict", "without a", ["a"]),
                    ("fit", "without b", ["a"]), ("predict", "without b", ["b"])]
    assert list(logo["heldout"]) == ["a", "a", "b", "b"]


def test_held_out_tile_table_drops_an_architecture_traced_on_that_gpu_alone():
    a100 = constants.batched_sgemm_table(exclude_device="NVIDIA A100-PCIE-40GB")
    assert "ampere" not in a100 and "ada" not in a100 and "pascal" in a100
    assert a100["hopper"] == constants.BATCHED_SGEMM_TRACES["hopper"]["NVIDIA H200"]
    p4 = constants.batched_sgemm_table(exclude_device="Tesla P4")
    assert p4["pascal"] == ((64, 128),)  # what the P100 alone ran
    assert dict(constants.fitted_constants("NVIDIA A100-PCIE-40GB").batched_sgemm_tiles) == a100
    assert dict(constants.DEFAULT_CONSTANTS.batched_sgemm_tiles) == constants.batched_sgemm_table()


def test_a_traced_architecture_keeps_its_own_tiles_and_falls_back_without_them():
    shipped = constants.batched_sgemm_table()
    assert shipped["hopper"] != shipped["ampere"]  # the H200's trace, not Ampere's assumed family
    h200 = constants.batched_sgemm_table(exclude_device="NVIDIA H200")
    assert h200["hopper"] == shipped["ampere"]  # scored without its own trace: the untraced assumption
