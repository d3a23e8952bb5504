"""Property tests: any valid kernel row on any valid device spec gives a finite, positive prediction
inside its own finite, ordered interval (the output guard then never has to fire on valid input)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from hybridperf.devices import get_node, list_devices  # noqa: E402
from hybridperf.guard import check_predictions  # noqa: E402
from hybridperf.predictor import Predictor  # noqa: E402

FAST = settings(max_examples=25, deadline=None, derandomize=True)
GEMMS = ("bmm", "linear")
VECTOR_OPS = ("add", "addu", "mul", "mulu", "div", "divu", "pow", "powu", "relu", "gelu", "tanh", "softmax", "ln")


@st.composite
def kernel_rows(draw, n_max: int = 12) -> pd.DataFrame:
    rows = []
    for _ in range(draw(st.integers(1, n_max))):
        op = draw(st.sampled_from(GEMMS + VECTOR_OPS))
        dtype = draw(st.sampled_from(("fp32", "fp16", "bf16")))
        if op in GEMMS:
            rows.append({"OPName": op, "B": draw(st.integers(1, 512)), "M": draw(st.integers(1, 16384)),
                         "N": draw(st.integers(1, 16384)), "K": draw(st.integers(1, 16384)), "H": np.nan, "dtype": dtype})
        else:
            rows.append({"OPName": op, "B": draw(st.integers(1, 1 << 16)), "M": np.nan, "N": np.nan, "K": np.nan,
                         "H": draw(st.integers(1, 1 << 16)), "dtype": dtype})
    return pd.DataFrame(rows)


@st.composite
def device_specs(draw):
    """A catalog GPU with its spec-sheet numbers redrawn across (and beyond) today's range."""
    base = draw(st.sampled_from(list_devices()))
    scale = draw(st.floats(0.05, 20.0))
    return replace(base, num_sms=draw(st.integers(1, 512)), boost_clock_mhz=draw(st.floats(200.0, 4000.0)),
                   mem_bw_gbs=draw(st.floats(20.0, 20000.0)), l2_mb=draw(st.floats(0.25, 512.0)),
                   mem_gb=draw(st.floats(1.0, 512.0)), peak_tflops={k: v * scale for k, v in base.peak_tflops.items()})


@pytest.fixture(scope="module")
def predictors():
    out = [Predictor.prior_only()]
    try:
        out.append(Predictor.load())
    except Exception:  # no shipped bundle in this checkout: the prior alone is still checked
        pass
    return out


def _assert_ordered(res: pd.DataFrame) -> None:
    pred, lo, hi = (res[c].to_numpy() for c in ("pred_ms", "lo_ms", "hi_ms"))
    assert np.isfinite(pred).all() and np.isfinite(lo).all() and np.isfinite(hi).all()
    assert (lo > 0).all() and (lo <= pred).all() and (pred <= hi).all()
    check_predictions(pred, lo, hi, "property")


@FAST
@given(rows=kernel_rows(), dev=device_specs(), timing=st.sampled_from(("call", "kernel")))
def test_valid_rows_on_valid_specs_give_finite_ordered_predictions(predictors, rows, dev, timing):
    for p in predictors:
        _assert_ordered(p.predict(rows, dev, timing=timing))


@FAST
@given(dev=device_specs())
def test_valid_specs_survive_a_json_round_trip(dev):
    from hybridperf.devices import DeviceSpec

    assert DeviceSpec.from_dict(dev.to_dict()) == dev


@FAST
@given(nbytes=st.floats(1.0, 1e11), gpus=st.sampled_from((2, 4, 8, 16, 64)), coll=st.sampled_from(
    ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")), intra=st.floats(1.0, 2000.0),
    inter=st.floats(0.5, 200.0), latency=st.floats(0.0, 50.0))
def test_valid_nodes_give_finite_ordered_collective_latency(nbytes, gpus, coll, intra, inter, latency):
    from hybridperf.residual_models.collectives import CollectiveModel, predict_collective

    node = replace(get_node("DGX-H100"), intra_bw_gbs=intra, inter_bw_gbs=inter, inter_node_bw_gbs=8 * inter,
                   intra_latency_us=latency)
    out = predict_collective(coll, nbytes, gpus, None, node, CollectiveModel.load())
    check_predictions(out["ms"], out["lo_ms"], out["hi_ms"], "collective property")
