"""Property tests of the analytical priors (hybridperf.priors) over random valid shapes.

Every op, several catalog devices: the prior and the roofline are positive and finite, the prior never
undercuts its op class's launch floor, more work never makes a kernel faster, and the roofline / prior
respond to the device's spec sheet the way the physics says.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hybridperf.datasets.schema import canonicalize
from hybridperf.devices import get_device
from hybridperf.ops import GEMM_OPS, OP_CLASS
from hybridperf.priors import constants, gemm
from hybridperf.priors.constants import DEFAULT_CONSTANTS, fitted_constants
from hybridperf.priors.gemm import gemm_compute
from hybridperf.priors.kernel_prior import kernel_prior_terms, prior_ms
from hybridperf.priors.launch import launch_floor_ms
from hybridperf.priors.memory import memory_time_ms
from hybridperf.priors.power import issue_limited_peak, sustained_flops
from hybridperf.priors.roofline import roofline_ms
from hybridperf.priors.rowwise import REGISTER_SOFTMAX_MAX_ELEMS, row_issue_ms

DEVICES = ("Tesla T4", "NVIDIA A100-PCIE-40GB", "NVIDIA H100 80GB HBM3", "NVIDIA L4", "AMD Instinct MI300X")
OPS = ("bmm", "linear", "add", "addu", "mul", "relu", "gelu", "tanh", "pow", "softmax", "ln")
VECTOR_OPS = tuple(op for op in OPS if op not in GEMM_OPS)
MONO_TOL = 1 - 1e-9  # wave-quantization plateaus: equal is fine, faster is not

SETTINGS = settings(max_examples=10, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

gemm_shape = st.fixed_dictionaries({
    "B": st.integers(1, 64), "M": st.integers(1, 8192), "N": st.integers(1, 8192), "K": st.integers(1, 8192),
})
vector_shape = st.fixed_dictionaries({"B": st.integers(1, 1 << 17), "H": st.integers(1, 1 << 15)})


def _shapes(op: str):
    return st.lists(gemm_shape if op in GEMM_OPS else vector_shape, min_size=1, max_size=12)


def _table(op: str, shapes: list[dict]) -> pd.DataFrame:
    raw = pd.DataFrame(shapes)
    raw.insert(0, "OPName", op)
    return canonicalize(raw)


def _doubled(op: str, shapes: list[dict], dims) -> tuple[pd.DataFrame, dict]:
    """One table: the base shapes, then each shape with `dim` doubled for every dim; and slices."""
    parts, slices, n = [list(shapes)], {}, len(shapes)
    for i, d in enumerate(dims):
        parts.append([{**s, d: s[d] * 2} for s in shapes])
        slices[d] = slice((i + 1) * n, (i + 2) * n)
    return _table(op, [s for p in parts for s in p]), slices


# ---------------------------------------------------------------------------------------------------
# positivity, finiteness, floor


@pytest.mark.parametrize("op", OPS)
@SETTINGS
@given(shapes=st.data())
def test_prior_positive_finite_and_above_floor(op, shapes):
    rows = shapes.draw(_shapes(op))
    table = _table(op, rows)
    floor = launch_floor_ms(OP_CLASS[op])
    for name in DEVICES:
        dev = get_device(name)
        terms = kernel_prior_terms(table, dev)
        prior = terms["prior_ms"].to_numpy()
        roof = roofline_ms(table["flops"], table["bytes"], dev, "fp32", op in GEMM_OPS)
        assert np.all(np.isfinite(prior)) and np.all(prior > 0), (name, rows)
        assert np.all(np.isfinite(roof)) and np.all(roof > 0), (name, rows)
        np.testing.assert_allclose(terms["roofline_ms"].to_numpy(), roof, rtol=1e-12)
        assert np.all(prior >= floor), (name, rows, prior, floor)
        # every term the features are built from is finite
        assert np.isfinite(terms.to_numpy()).all(), (name, rows)


# ---------------------------------------------------------------------------------------------------
# monotone in work


def _kernel_switch(op: str, rows: list[dict], d: str) -> np.ndarray:
    """Rows whose doubled `d` moves current PyTorch's softmax out of its register kernel: rows just
    past it run the shared-memory kernel, which on the H200 took less time per row at 16k elements than
    the register kernel at 8k (`experiments/data/measured/h200/kernels.csv`)."""
    if op != "softmax" or d != "H":
        return np.zeros(len(rows), dtype=bool)
    H = np.array([r["H"] for r in rows])
    return (H <= REGISTER_SOFTMAX_MAX_ELEMS) & (2 * H > REGISTER_SOFTMAX_MAX_ELEMS)


def _assert_monotone(op: str, rows: list[dict], dims) -> None:
    table, slices = _doubled(op, rows, dims)
    n = len(rows)
    for name in DEVICES:
        p = prior_ms(table, get_device(name))
        base = p[:n]
        for d, sl in slices.items():
            bigger = p[sl]
            bad = (bigger < base * MONO_TOL) & ~_kernel_switch(op, rows, d)
            assert not bad.any(), (
                f"{op} on {name}: doubling {d} made it faster: "
                f"{[(rows[i], base[i], bigger[i]) for i in np.flatnonzero(bad)]}"
            )


@pytest.mark.parametrize("op", GEMM_OPS)
@SETTINGS
@given(data=st.data())
def test_gemm_prior_monotone_in_B_M_K(op, data):
    """Doubling the batch, the rows M, or the output width K never makes a GEMM faster."""
    _assert_monotone(op, data.draw(_shapes(op)), ("B", "M", "K"))


@pytest.mark.parametrize("op", GEMM_OPS)
@SETTINGS
@given(data=st.data())
def test_gemm_prior_monotone_in_reduction_N(op, data):
    """Doubling the reduction length N (with split-K available) never makes a GEMM faster."""
    _assert_monotone(op, data.draw(_shapes(op)), ("N",))


@pytest.mark.parametrize("op", [o for o in VECTOR_OPS if o != "ln"])
@SETTINGS
@given(data=st.data())
def test_vector_prior_monotone_in_B_and_H(op, data):
    _assert_monotone(op, data.draw(_shapes(op)), ("B", "H"))


@SETTINGS
@given(data=st.data())
def test_layernorm_prior_monotone_in_H(data):
    _assert_monotone("ln", data.draw(_shapes("ln")), ("H",))


@SETTINGS
@given(rows=_shapes("ln"))
@example(rows=[{"B": 1, "H": 25386}])
def test_layernorm_prior_monotone_in_B(rows):
    _assert_monotone("ln", rows, ("B",))


# ---------------------------------------------------------------------------------------------------
# the device's spec sheet


def _big_add():
    return _table("add", [{"B": 65536, "H": 8192}])


def _big_gemms():
    return _table("linear", [{"B": 1, "M": 8192, "N": 8192, "K": 8192}]), _table(
        "bmm", [{"B": 8, "M": 4096, "N": 4096, "K": 4096}])


def _double_peaks(dev):
    return dataclasses.replace(dev, peak_tflops={k: 2 * v for k, v in dev.peak_tflops.items()})


@pytest.mark.parametrize("name", DEVICES)
def test_roofline_halves_with_double_bandwidth_for_memory_bound_add(name):
    dev = get_device(name)
    fast = dataclasses.replace(dev, mem_bw_gbs=2 * dev.mem_bw_gbs)
    t = _big_add()
    base = roofline_ms(t["flops"], t["bytes"], dev)
    assert base[0] == pytest.approx(t["bytes"][0] / (dev.mem_bw_gbs * 1e9) * 1e3, rel=1e-12)  # memory-bound
    assert roofline_ms(t["flops"], t["bytes"], fast)[0] == pytest.approx(base[0] / 2, rel=1e-12)
    # and the roofline term of the prior table agrees
    assert kernel_prior_terms(t, fast)["roofline_ms"].iloc[0] == pytest.approx(base[0] / 2, rel=1e-12)


@pytest.mark.parametrize("name", DEVICES)
def test_roofline_halves_with_double_peak_for_compute_bound_gemm(name):
    dev = get_device(name)
    fast = _double_peaks(dev)
    for t in _big_gemms():
        base = roofline_ms(t["flops"], t["bytes"], dev, "fp32", True)
        assert base[0] == pytest.approx(t["flops"][0] / dev.peak("fp32", matrix=True) * 1e3, rel=1e-12)
        assert roofline_ms(t["flops"], t["bytes"], fast, "fp32", True)[0] == pytest.approx(base[0] / 2, rel=1e-12)
        # bandwidth does not matter for a compute-bound GEMM's roofline
        more_bw = dataclasses.replace(dev, mem_bw_gbs=2 * dev.mem_bw_gbs)
        assert roofline_ms(t["flops"], t["bytes"], more_bw, "fp32", True)[0] == pytest.approx(base[0], rel=1e-12)


@pytest.mark.parametrize("name", DEVICES)
@pytest.mark.parametrize("op", ["add", "gelu", "softmax", "ln"])
def test_prior_of_memory_bound_op_faster_with_double_bandwidth(name, op):
    dev = get_device(name)
    fast = dataclasses.replace(dev, mem_bw_gbs=2 * dev.mem_bw_gbs)
    t = _table(op, [{"B": 32768, "H": 16384}])
    floor = launch_floor_ms(OP_CLASS[op])
    slow_t = prior_ms(t, dev)[0] - floor
    fast_t = prior_ms(t, fast)[0] - floor
    assert 0 < fast_t < slow_t
    # memory-bound: exactly half, unless the SMs cannot stream the rows that fast (row-wise kernels)
    # or the arithmetic takes longer than the faster memory (erf-GELU on an A100 with 3 TB/s)
    row_wise = OP_CLASS[op] in ("softmax", "layernorm")
    sm = row_issue_ms(OP_CLASS[op], 32768, 16384, 4, dev, current=True)[()] if row_wise \
        else kernel_prior_terms(t, fast)["compute_ms"].iloc[0]
    assert fast_t == pytest.approx(max(slow_t / 2, sm), rel=1e-9)
    assert memory_time_ms(t["bytes"], fast)[0] == pytest.approx(memory_time_ms(t["bytes"], dev)[0] / 2, rel=1e-12)


def test_half_precision_elementwise_arithmetic_runs_at_the_fp32_rate():
    """ATen computes fp16 element-wise ops in fp32: halving the bytes leaves the arithmetic, so on an
    H200 tensor ** tensor turns compute-bound in fp16 (measured 1.59x its memory time) while add does not."""
    dev = get_device("NVIDIA H200")
    shape = [{"B": 65536, "H": 4096}]
    for op, compute_bound in (("pow", True), ("add", False)):
        fp32 = kernel_prior_terms(_table(op, shape), dev).iloc[0]
        fp16 = kernel_prior_terms(_table(op, shape).assign(dtype="fp16").pipe(canonicalize), dev).iloc[0]
        assert fp16["compute_ms"] == pytest.approx(fp32["compute_ms"], rel=1e-12)
        assert fp16["memory_ms"] == pytest.approx(fp32["memory_ms"] / 2, rel=1e-3)  # L2 holds a little more
        assert (fp16["compute_ms"] > fp16["memory_ms"]) == compute_bound
        assert fp32["compute_ms"] < fp32["memory_ms"]


@pytest.mark.parametrize("name", DEVICES)
def test_prior_of_big_gemm_faster_with_double_peak(name):
    dev = dataclasses.replace(get_device(name), tdp_w=0)  # no power cap: sustained == peak
    fast = _double_peaks(dev)
    assert sustained_flops(fast, "fp32", True) == pytest.approx(2 * sustained_flops(dev, "fp32", True))
    for t in _big_gemms():
        floor = launch_floor_ms(t["op_class"][0])
        slow_t = prior_ms(t, dev)[0] - floor
        fast_t = prior_ms(t, fast)[0] - floor
        assert 0 < fast_t < slow_t
        assert fast_t <= slow_t * 0.6  # compute-bound: close to half (a split-K epilogue stays memory-bound)


@pytest.mark.parametrize("name", DEVICES)
def test_power_cap_never_raises_the_rate(name):
    dev = get_device(name)
    for matrix in (False, True):
        assert 0 < sustained_flops(dev, "fp32", matrix) <= dev.peak("fp32", matrix=matrix)
        uncapped = dataclasses.replace(dev, tdp_w=0)
        assert sustained_flops(uncapped, "fp32", matrix) == issue_limited_peak(dev, "fp32", matrix)
        assert issue_limited_peak(dev, "fp32", matrix) <= dev.peak("fp32", matrix=matrix)


def test_matrix_unit_power_cap_follows_architecture_and_operand_width():
    h100 = get_device("NVIDIA H100 80GB HBM3")
    # 8-bit operands move half the bits per FLOP: a capped board sustains twice its 16-bit rate
    assert sustained_flops(h100, "fp8", True) == pytest.approx(2 * sustained_flops(h100, "fp16", True))
    assert sustained_flops(h100, "fp8", True) <= h100.peak("fp8", matrix=True)
    # the public anchors of the 70-72 W boards (hybridperf.priors.power.MATRIX_ENERGY_RATIO)
    assert sustained_flops(get_device("Tesla T4"), "fp16", True) == pytest.approx(24e12, rel=0.05)
    assert sustained_flops(get_device("NVIDIA L4"), "fp16", True) == pytest.approx(53.5e12, rel=0.05)
    # big boards of the same architectures stay at their peak in fp32 vector math
    v100 = get_device("Tesla V100-SXM2-32GB")
    assert sustained_flops(v100, "fp32") == v100.peak("fp32")


def test_bf16_gemm_is_emulated_without_bf16_units():
    from hybridperf.priors.power import EMULATED_BF16_GEMM_RATE

    t4, a100 = get_device("Tesla T4"), get_device("NVIDIA A100-SXM4-80GB")
    assert sustained_flops(t4, "bf16", True) == pytest.approx(EMULATED_BF16_GEMM_RATE * sustained_flops(t4, "fp32", True))
    assert sustained_flops(a100, "bf16", True) > 10 * sustained_flops(a100, "fp32", True)  # tensor cores
    gemm = _table("linear", [{"B": 1, "M": 4096, "N": 4096, "K": 4096}])
    assert prior_ms(gemm.assign(dtype="bf16"), t4)[0] > 1.5 * prior_ms(gemm, t4)[0]


@pytest.mark.parametrize("name,shared", [("NVIDIA L4", True), ("NVIDIA A10", True), ("NVIDIA A100-PCIE-40GB", False),
                                         ("NVIDIA H100 80GB HBM3", True), ("Tesla P4", False),
                                         ("Tesla V100-PCIE-32GB", False)])
def test_issue_limit_applies_to_128_lane_single_issue_sms_only(name, shared):
    from hybridperf.priors.power import ISSUE_FRACTION_BY_ARCH, SHARED_FP32_INT32_ISSUE

    dev = get_device(name)
    ratio = issue_limited_peak(dev, "fp32") / dev.peak("fp32")
    limit = ISSUE_FRACTION_BY_ARCH.get(dev.arch, SHARED_FP32_INT32_ISSUE)
    assert ratio == pytest.approx(limit if shared else 1.0)
    assert issue_limited_peak(dev, "fp16", matrix=True) == dev.peak("fp16", matrix=True)  # tensor cores: no limit


# ---------------------------------------------------------------------------------------------------
# split-K


def test_split_k_chosen_for_tall_reduction_gemm():
    v100 = get_device("Tesla V100-PCIE-32GB")
    # (B, M, K_out, N_red): the LM-head-like GEMM with a 30522-long reduction and few output tiles
    terms = gemm_compute([1], [512], [768], [30522], v100)
    assert terms.split_k[0] > 1
    no_split = gemm_compute([1], [512], [768], [256], v100)
    assert no_split.split_k[0] == 1
    # the prior table passes N as the reduction and K as the output width
    t = _table("linear", [{"B": 1, "M": 512, "N": 30522, "K": 768}])
    assert kernel_prior_terms(t, v100)["split_k"].iloc[0] > 1


@pytest.mark.parametrize("name", ["Tesla V100-PCIE-32GB", "Tesla T4", "NVIDIA H100 80GB HBM3", "NVIDIA L4"])
def test_split_k_not_chosen_for_square_4096_gemm(name):
    terms = gemm_compute([1], [4096], [4096], [4096], get_device(name))
    assert terms.split_k[0] == 1


@pytest.mark.parametrize("name", ["NVIDIA A100-PCIE-40GB", "AMD Instinct MI300X"])
def test_split_k_not_chosen_for_square_4096_gemm_many_sms(name):
    terms = gemm_compute([1], [4096], [4096], [4096], get_device(name))
    assert terms.split_k[0] == 1


def test_split_k_never_with_short_chunks():
    rng = np.random.default_rng(0)
    n = 400
    B, M, K, N = rng.integers(1, 16, n), rng.integers(1, 4096, n), rng.integers(1, 4096, n), rng.integers(1, 65536, n)
    for name in DEVICES:
        s = gemm_compute(B, M, K, N, get_device(name)).split_k
        assert np.all((s == 1) | (np.ceil(N / s) >= 256))


def test_library_efficiency_applies_to_its_vendor_only():
    from hybridperf.priors.constants import DEFAULT_CONSTANTS, LIBRARY_EFFICIENCY
    from hybridperf.priors.gemm import library_efficiency

    assert library_efficiency("nvidia", "linear") == 1.0
    assert 0 < library_efficiency("amd", "linear") < 1 and 0 < library_efficiency("amd", "bmm") < 1
    gemm = canonicalize(pd.DataFrame({"OPName": ["linear"], "B": [1], "M": [4096], "N": [4096], "K": [4096]}))
    amd = get_device("AMD Instinct MI210")
    slow = prior_ms(gemm, amd)[0]
    tile_rate = DEFAULT_CONSTANTS.with_library_efficiency({})
    fast = prior_ms(gemm, amd, constants=tile_rate)[0]
    assert library_efficiency("amd", "linear", tile_rate) == 1.0
    assert slow > fast * 1.2  # the vendor BLAS reaches less than the tile model's rate
    assert LIBRARY_EFFICIENCY[("amd", "linear")] == library_efficiency("amd", "linear")  # the default untouched


@pytest.mark.parametrize("op", ["bmm", "linear", "add", "softmax", "ln"])
def test_kernel_timing_swaps_only_the_floor(op):
    """A profiler-timed kernel has the same device work as a timed call, minus the call's floor."""
    from hybridperf.priors.launch import KERNEL_FLOOR_MS

    t = canonicalize(pd.DataFrame([{"OPName": op, "B": 8, "M": 256, "N": 512, "K": 128, "H": 1024}]))
    dev = get_device("NVIDIA A40")
    call, kern = kernel_prior_terms(t, dev), kernel_prior_terms(t, dev, "kernel")
    oc = t["op_class"].iloc[0]
    assert kern["floor_ms"].iloc[0] == KERNEL_FLOOR_MS[oc] < launch_floor_ms(oc)
    assert kern["prior_ms"].iloc[0] - kern["floor_ms"].iloc[0] == pytest.approx(call["prior_ms"].iloc[0] - call["floor_ms"].iloc[0])
    # the row's own timing column is used when no timing is given
    assert kernel_prior_terms(t.assign(timing="kernel"), dev)["prior_ms"].iloc[0] == kern["prior_ms"].iloc[0]


def test_unknown_timing_is_an_input_error():
    from hybridperf.errors import InputError

    t = canonicalize(pd.DataFrame([{"OPName": "add", "B": 8, "H": 1024}]))
    with pytest.raises(InputError, match="unknown timing"):
        kernel_prior_terms(t, get_device("NVIDIA A40"), "wall")


def test_bmm_tiles_are_at_least_as_wide_along_the_output_columns():
    """Without a traced tile table (Volta here), torch.bmm keeps tile_n >= tile_m: a 64-wide output
    pads, so the batched GEMM costs more than a free choice of tile."""
    dev = get_device("Tesla V100-PCIE-32GB")
    bmm = gemm_compute([768], [1024], [64], [1024], dev, batched=True)
    free = gemm_compute([768], [1024], [64], [1024], dev)
    assert bmm.tile_n[0] >= bmm.tile_m[0]
    assert bmm.compute_ms[0] > free.compute_ms[0] and free.tile_n[0] < free.tile_m[0]


def test_bmm_uses_the_architectures_traced_tiles():
    """Ampere's batched SGEMM runs 128x128 tiles only (A100 traces), Pascal's 128 output columns:
    attention's 64-wide AV output pads half of each tile. Tensor-core (fp16) bmm is not restricted."""
    a100 = get_device("NVIDIA A100-PCIE-40GB")
    bmm = gemm_compute([768], [1024], [64], [1024], a100, batched=True)
    assert (bmm.tile_m[0], bmm.tile_n[0]) == (128, 128)
    assert gemm_compute([768], [1024], [64], [1024], get_device("Tesla P100-PCIE-16GB"), batched=True).tile_n[0] == 128
    half = gemm_compute([768], [1024], [64], [1024], a100, "fp16", matrix=True, batched=True)
    assert half.tile_n[0] < 128


@pytest.mark.parametrize("name", ["Tesla P100-PCIE-16GB", "Tesla P4"])
def test_translation_limit_slows_long_pascal_reductions_only(name):
    """A Linear of 64k input features on Pascal runs near the translation-limited rate; one of 1k
    features, and the same shapes on Volta, keep the tile model's time."""
    shape = ([1], [4096], [4096])
    for dev, slowed in ((get_device(name), True), (get_device("Tesla V100-PCIE-32GB"), False)):
        for n, long in ((1024, False), (65536, True)):
            with_limit = gemm_compute(*shape, [n], dev).compute_ms[0]
            no_limit = dataclasses.replace(DEFAULT_CONSTANTS, translation_limit={})
            without = gemm_compute(*shape, [n], dev, constants=no_limit).compute_ms[0]
            if slowed and long:
                budget, rate = DEFAULT_CONSTANTS.translation_limit["pascal"]
                limited = 2.0 * 4096 * 4096 * n / (rate * dev.boost_clock_mhz * 1e6) * 1e3
                assert without < with_limit <= max(limited, without)
            else:
                assert with_limit == without


def test_translation_limit_of_a_scored_gpu_comes_from_the_other_pascal_gpus():
    fits = constants.TRANSLATION_FITS["pascal"]
    assert fitted_constants("Tesla P100-PCIE-16GB").translation_limit["pascal"] == pytest.approx(fits["Tesla P4"])
    assert fitted_constants("Tesla P4").translation_limit["pascal"] == pytest.approx(fits["Tesla P100-PCIE-16GB"])
    assert dict(fitted_constants("Tesla T4").translation_limit) == constants.translation_table()
    assert constants.translation_table(exclude_device="Tesla P4")["pascal"] != constants.translation_table()["pascal"]


def test_a_half_precision_gemm_with_unaligned_leading_dimensions_runs_slower_on_matrix_units():
    """fp16 linears whose output columns or reduction length are not a multiple of 8 elements (16
    bytes) ran 2-4x the matrix-unit prior on our H200 (an LM head of 30,522 columns at 26% of peak),
    and about 7x with an odd number of elements (scalar loads); the compute term is divided by
    UNALIGNED_MATRIX_SLOWDOWN of the narrowest load there, and fp32 (vector math) is untouched."""
    dev = get_device("NVIDIA H100 80GB HBM3")
    slow = gemm.UNALIGNED_MATRIX_SLOWDOWN

    def compute(k_out, n_red, dtype):
        return gemm_compute([1], [65536], [k_out], [n_red], dev, dtype=dtype, matrix=dtype != "fp32").compute_ms[0]

    aligned = compute(30528, 1280, "fp16")
    assert compute(30522, 1280, "fp16") / aligned == pytest.approx(slow[4], rel=0.05)  # 61,044 bytes: 4-byte loads
    assert compute(30524, 1280, "fp16") / aligned == pytest.approx(slow[8], rel=0.05)
    assert compute(30521, 1280, "fp16") / aligned == pytest.approx(slow[2], rel=0.05)  # odd: 2-byte loads
    assert slow[2] > slow[4]
    assert compute(4096, 1278, "bf16") / compute(4096, 1280, "bf16") == pytest.approx(slow[4], rel=0.05)
    assert compute(4096, 1279, "bf16") / compute(4096, 1280, "bf16") == pytest.approx(slow[2], rel=0.05)
    assert compute(30522, 1280, "fp32") == pytest.approx(compute(30528, 1280, "fp32"), rel=0.01)


def test_a_weight_gradient_is_aligned_by_its_hidden_sizes_not_its_tokens():
    """dW = dY^T X reduces over the tokens, but its tensors' contiguous dimensions are the hidden sizes
    (M and K): five tokens per expert leave its loads 16-byte wide, where a forward GEMM reducing over
    five elements loads them one by one."""
    dev = get_device("NVIDIA H100 80GB HBM3")

    def compute(m, n, transposed):
        return gemm_compute([8], [m], [2048], [n], dev, "bf16", matrix=True, batched=True,
                            transposed=transposed).compute_ms[0]

    assert compute(7168, 5, True) <= compute(7168, 8, True)  # fewer tokens never cost more
    odd = gemm.UNALIGNED_MATRIX_SLOWDOWN[2]
    assert compute(7168, 5, False) / compute(7168, 5, True) == pytest.approx(odd, rel=0.05)
    assert compute(7167, 64, True) / compute(7167, 64, False) == pytest.approx(odd, rel=0.05)
    rows = pd.DataFrame({"op": ["linear"] * 2, "dtype": "bf16", "B": 1.0, "M": 7168.0, "N": 5.0, "K": 2048.0,
                         "form": ["mm", "mm_t"]})
    prior = kernel_prior_terms(canonicalize(rows), dev)["compute_ms"]
    assert prior[0] / prior[1] == pytest.approx(odd, rel=0.05)


def test_a_matrix_unit_gemm_pays_more_reduction_steps_per_tile():
    """A tile's prologue and epilogue do not speed up with NVIDIA's matrix units, so a half-precision
    GEMM's fixed cost is K_OVERHEAD_MATRIX reduction steps, fp32 (vector math) K_OVERHEAD: a short
    reduction costs more per FLOP on matrix units, a long one about the same."""
    def short_over_long(dtype, name="NVIDIA H100 80GB HBM3"):  # compute time per reduction step, 256 / 8192
        per_step = [gemm_compute([1], [16384], [16384], [n], get_device(name), dtype=dtype,
                                 matrix=dtype != "fp32").compute_ms[0] / n for n in (256, 8192)]
        return per_step[0] / per_step[1]

    def expected(overhead):
        return (256 + overhead) / 256 / ((8192 + overhead) / 8192)

    assert gemm.K_OVERHEAD_MATRIX > gemm.K_OVERHEAD
    assert short_over_long("fp16") == pytest.approx(expected(gemm.K_OVERHEAD_MATRIX), rel=0.03)
    assert short_over_long("fp32") == pytest.approx(expected(gemm.K_OVERHEAD), rel=0.03)
    # AMD's matrix cores keep the vector overhead (their LIBRARY_EFFICIENCY absorbs the rest)
    assert short_over_long("fp16", "AMD Instinct MI210") == pytest.approx(expected(gemm.K_OVERHEAD), rel=0.03)


def _linear_rows(form, dtype="fp32"):
    """A split-prone fp32 Linear (512 rows, 4096 -> 1024) and a large one that fills the GPU."""
    return canonicalize(pd.DataFrame({"OPName": ["linear", "linear"], "B": [1, 1], "M": [512, 8192],
                                      "N": [4096, 2560], "K": [1024, 2560], "dtype": dtype, "form": form}))


def test_hopper_f_linear_pays_for_split_k_and_other_gemm_forms_do_not():
    """On an architecture with a split-rate exponent, F.linear with a bias (`linear` form) is priced
    slower than a plain mm of the same shape where the prior splits, and identically where it does not;
    other architectures, and tensor-core GEMMs, price both forms alike."""
    h100 = get_device("NVIDIA H100 80GB HBM3")
    assert DEFAULT_CONSTANTS.split_rate_exponent["hopper"] > 0
    lin, mm = (kernel_prior_terms(_linear_rows(f), h100) for f in ("linear", "mm"))
    assert mm["split_k"].iloc[0] > 1
    assert lin["prior_ms"].iloc[0] > mm["prior_ms"].iloc[0]
    assert lin["prior_ms"].iloc[1] == mm["prior_ms"].iloc[1]
    for dev, dtype in (("Tesla V100-PCIE-32GB", "fp32"), ("NVIDIA H100 80GB HBM3", "fp16")):
        spec = get_device(dev)
        a, b = (kernel_prior_terms(_linear_rows(f, dtype), spec)["prior_ms"] for f in ("linear", "mm"))
        assert np.array_equal(a.to_numpy(), b.to_numpy())


def test_split_rate_of_a_scored_gpu_comes_from_its_architectures_other_gpus():
    """Each architecture has one fitted GPU, so scoring it leave-one-GPU-out drops the exponent, and the
    `linear` form prices like `mm`; scoring another GPU keeps it."""
    h200 = get_device("NVIDIA H200")
    held = fitted_constants("NVIDIA H200")
    assert "hopper" not in held.split_rate_exponent
    a, b = (kernel_prior_terms(_linear_rows(f), h200, constants=held)["prior_ms"] for f in ("linear", "mm"))
    assert np.array_equal(a.to_numpy(), b.to_numpy())
    assert dict(fitted_constants("NVIDIA H100 80GB HBM3").split_rate_exponent) == constants.split_rate_table()
    assert constants.split_rate_table(exclude_device="NVIDIA A100-PCIE-40GB") == {
        "hopper": constants.SPLIT_RATE_FITS["hopper"]["NVIDIA H200"]}


def test_four_bit_matrix_rate_under_the_power_cap():
    """4-bit MMA moves a quarter of 16-bit's bits per FLOP: on every Blackwell part it sustains more than 8-bit,
    and Blackwell Ultra's wider 4-bit datapath puts a B300 above a GB200 (13.5 vs 10 PF on their sheets)."""
    for name in ("b200_sxm", "b300_sxm", "gb200", "gb300", "rtx_pro_6000_server"):
        dev = get_device(name)
        fp4, fp8, bf16 = (sustained_flops(dev, dt, True) for dt in ("fp4", "fp8", "bf16"))
        assert fp4 > fp8 > bf16
    b200, b300, gb200 = (sustained_flops(get_device(n), "fp4", True) for n in ("b200_sxm", "b300_sxm", "gb200"))
    assert b300 > gb200 > b200 and b300 <= get_device("b300_sxm").peak("fp4", matrix=True)
