"""leave_one_gpu_out: each fold fits and predicts inside its own context (e.g. prior tables rebuilt
without the held-out GPU's traces)."""
from __future__ import annotations

import contextlib

import pandas as pd

from hybridperf.priors import gemm
from hybridperf.training import kernels


def test_each_fold_fits_and_predicts_inside_its_context(monkeypatch):
    active, seen = [], []

    @contextlib.contextmanager
    def fold_context(d):
        active.append(d)
        yield
        active.pop()

    def fake_fit(train, cfg, progress=None):
        seen.append(("fit", tuple(active), sorted(train["device"].unique())))
        return {}

    def fake_predict(fitted, ev):
        seen.append(("predict", tuple(active), sorted(ev["device"].unique())))
        return ev.copy()

    monkeypatch.setattr(kernels, "fit_all", fake_fit)
    monkeypatch.setattr(kernels, "predict_heldout", fake_predict)
    rows = pd.DataFrame({"device": ["a", "a", "b", "b"], "latency_ms": [1.0, 2.0, 3.0, 4.0]})
    logo = kernels.leave_one_gpu_out(rows, rows, kernels.TrainConfig(), fold_context=fold_context)
    assert seen == [("fit", ("a",), ["b"]), ("predict", ("a",), ["a"]),
                    ("fit", ("b",), ["a"]), ("predict", ("b",), ["b"])]
    assert active == [] and list(logo["heldout"]) == ["a", "a", "b", "b"]


def test_held_out_tile_table_drops_an_architecture_traced_on_that_gpu_alone():
    a100 = gemm.batched_sgemm_table(exclude_device="NVIDIA A100-PCIE-40GB")
    assert "ampere" not in a100 and "ada" not in a100 and "pascal" in a100
    assert a100["hopper"] == gemm.BATCHED_SGEMM_TRACES["hopper"]["NVIDIA H200"]
    p4 = gemm.batched_sgemm_table(exclude_device="Tesla P4")
    assert p4["pascal"] == ((64, 128),)  # what the P100 alone ran
    with gemm.batched_sgemm_tiles(a100):
        assert gemm.BATCHED_SGEMM_TILES == a100
    assert gemm.BATCHED_SGEMM_TILES == gemm.batched_sgemm_table()


def test_a_traced_architecture_keeps_its_own_tiles_and_falls_back_without_them():
    shipped = gemm.batched_sgemm_table()
    assert shipped["hopper"] != shipped["ampere"]  # the H200's trace, not Ampere's assumed family
    h200 = gemm.batched_sgemm_table(exclude_device="NVIDIA H200")
    assert h200["hopper"] == shipped["ampere"]  # scored without its own trace: the untraced assumption
