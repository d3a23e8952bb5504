"""Whole-model latency: predict every kernel of the graph in one batch, then compose.

Kernel predictions (`pred_k`, from the kernel `Predictor`: prior x learned residual) are latencies as
NeuSight measured single kernels: CUDA events around ONE eager call. Each carries the harness's per-call
floor (`hybridperf.priors.launch.launch_floor_ms`, 26-56 us by op class) which kernels launched back to
back inside a model do not pay. Inside a model a kernel costs its device time plus the gap to the next
launch, so the composition is

    t_k = max(scale * max(pred_k - floor_k, 0) + gap, cpu)       per launched kernel (ms)
    e2e = exp(log_bias[mode]) * sum_k t_k * count_k

  * `floor_k`: the harness floor of the kernel's op class on HARNESS_HOST (0 for the misc kernels of
    `hybridperf.graphs.misc`, which are predicted without it);
  * `gap`: ms per launched kernel (launch gap / eager dispatch), device-agnostic;
  * `scale`: device-time scale (1 when not fitted); `cpu`: optional lower bound per kernel, the eager
    dispatch cost when the GPU starves (0 when not fitted);
  * a GEMM of the grouped-GEMM fallback's C++ loop (`hybridperf.graphs.grouped`, `native_loop`) costs
    t_k = max(scale * max(pred_k - floor_k, 0), LOOP_LAUNCH_MS): no eager Python dispatch of its own;
  * `log_bias[mode]`: optional per-mode residual scalar (0 when not fitted).

The constants live in `hybridperf.graphs.calibration`, per kernel-predictor kind ('prior', 'bundle'),
fitted on NeuSight's whole-model labels by `experiments/models/model_latency.py` (which reports them
leave-one-device-out). A kind without constants uses `DEFAULT_GAP_MS` and nothing else.
`correction=False` gives the plain NeuSight-style sum of isolated-kernel predictions (t_k = pred_k).
Python-only nodes of the traced graph (size, view, permute, getitem, eval-mode dropout) launch no
kernel: they are left out (their host time is what `gap`/`cpu` absorb).

`calibration` may instead hold constants refitted to runs measured on the target GPU and host
(`hybridperf.graphs.measured_runs`); their interval comes from the fit's posterior.

Interval: errors of kernels inside one model are strongly correlated (the same GEMM shapes repeat
in every layer, and a device the kernel model misjudges is misjudged for all of them), so kernel
intervals are combined as the time-share-weighted mean of their log half-widths, never as
independent sums. When the calibration holds model-level residual quantiles (leave-one-device-out),
those are used instead, widened by the time-weighted out-of-range score of the kernels.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.devices import DTYPE_BYTES, DeviceSpec, get_device
from hybridperf.errors import InputError, ModelBundleError
from hybridperf.graphs.attention import FUSED_LOG_HALF_WIDTH, check_cudnn_plans, cudnn_plan_ms, \
    fused_attention_ms
from hybridperf.graphs.calibration import CALIBRATION
from hybridperf.graphs.config import MOE_LLAMA
from hybridperf.graphs.grouped import launch_grouped_gemms, native_loop
from hybridperf.graphs.kernels import build_graph
from hybridperf.graphs.misc import MISC_LOG_HALF_WIDTH, misc_latency_ms
from hybridperf.graphs.model_graph import ModelGraph
from hybridperf.graphs.optimizer import optimizer_table, param_numels
from hybridperf.graphs.request import DEFAULT_ATTN, ModelRequest
from hybridperf.ops import FUSED_OPS, GEMM_OPS, OP_CLASS
from hybridperf.predictor import Predictor, shipped_models_dir
from hybridperf.priors.launch import floors_ms, launch_floor_ms
from hybridperf.priors.memory import memory_time_ms
from hybridperf.stats import Z90

GROUPS = ("linear", "bmm", "attention", "elementwise", "softmax", "layernorm", "embedding", "memory")
#: kernel-table phases that make up bw_ms: the backward, gradient accumulation, and the forward of
#: checkpointed layers re-run inside the backward
BACKWARD_PHASES = ("bw", "acc", "rc")
OOD_WIDEN = 0.25
#: per-kernel launch gap (ms) used when the calibration has no fitted constants for a predictor kind
DEFAULT_GAP_MS = 0.01
#: the least a GEMM of the grouped-GEMM fallback's C++ loop costs: ATen's dispatch and the kernel launch from
#: C++ (a few us, a design figure), so a loop of tiny GEMMs is bound by its host, not by zero
LOOP_LAUNCH_MS = 0.004
#: how much slower than `cpu_ms` another host dispatches a transformers kernel: the host's, not the GPU's.
#: The H200's and a first H100 lease's hosts took 14 us a kernel, two later leases of the same H100 type
#: 24-29 us, with the same torch, transformers and script (`experiments/data/measured/h100/modern`,
#: `sdpa_backends`). A run's upper bound lets its host-bound time run this much slower
HOST_SPREAD = 2.0
#: how much faster than `cpu_ms` another host dispatches a transformers kernel: the fastest hosts lent (the H200's
#: and the first H100 lease's) took about 14 us, 0.78 of the 18 us floor, and their runs scatter below that. A run's
#: lower bound lets its host-bound time run this fast: the narrowest of 0.66 / 0.72 / 0.78 / 1 under which each set of
#: lent-machine runs is covered >= 85% (`python -m experiments.models.host_floor`, `results/host_floor.md`)
HOST_FASTEST = 0.72
#: how much more host time than `cpu_ms` the forward kernels of a grouped-experts MoE block (router, dispatch and
#: experts: names `MOE_KERNELS`, in the MOE_LLAMA families it was chosen on, eager) take where the host bounds them:
#: their ops launch more than their one counted kernel on CUDA (an H100 op profile of Qwen1.5-MoE,
#: `measured/h100/families/op_profile.csv`: topk, histc and cumsum two kernels each, grouped_mm a setup kernel more,
#: sort a radix kernel and two copies) and go through Python's indexing. Chosen on the MoE runs of five run sets
#: (H100 leases, our H200; transformers 5.17 and 5.24), each set left out picking 0.4-0.5
#: (`python -m experiments.models.moe_host`): held-out MAPE 15.6 / 12.3 / 11.2 / 13.4 -> 14.5 / 11.7 / 9.4 / 12.3%,
#: and on the fast first H100 lease 12.6 -> 13.7%
MOE_HOST_EXTRA = 0.4
MOE_KERNELS = ("moe.", "experts.")
#: graph modes composed with another mode's constants: a decode step is an eager no_grad forward, as
#: inference is (no decode step has been measured to fit its own)
COMPOSITION_MODE = {"decode": "inf"}
#: whose call floor a model's kernels are predicted with and have taken off again (`floor_k`): the
#: composition constants were fitted on NeuSight's labels with that host's floors, and a kernel's
#: device time inside a model does not depend on which host's floor was added and removed
HARNESS_HOST = "neusight"
#: what a kernel replayed from a CUDA graph costs beyond its busy time: median (graph replay - profiled busy
#: time) / kernels over 34 static-cache decode steps of six models on our H100 (0.18-0.66 us;
#: `experiments/data/measured/h100/generate_decode/graph_decode.csv`)
GRAPH_GAP_MS = 0.00029


def composition_params(kind: str, mode: str, calibration: dict | None = None, correction: bool = True) -> dict:
    """Composition constants {scale, gap_ms, cpu_ms, log_bias, (q_lo, q_hi)} for a predictor kind and mode.

    Calibration layout: {kind: {"scale", "gap_ms", "cpu_ms", "inf": {"log_bias", "q_lo", "q_hi"},
    "train": {...}}}; every entry optional. `correction=False`: the plain sum of isolated predictions."""
    if not correction:
        return {"raw": True, "scale": 1.0, "gap_ms": 0.0, "cpu_ms": 0.0, "log_bias": 0.0}
    ck = (CALIBRATION if calibration is None else calibration).get(kind, {})
    cm = ck.get(mode, {})
    out = {"raw": False, "scale": float(ck.get("scale", 1.0)), "gap_ms": float(ck.get("gap_ms", DEFAULT_GAP_MS)),
           "cpu_ms": float(ck.get("cpu_ms", 0.0)), "log_bias": float(cm.get("log_bias", 0.0))}
    if "q_lo" in cm and "q_hi" in cm:
        out["q_lo"], out["q_hi"] = float(cm["q_lo"]), float(cm["q_hi"])
    if "posterior" in ck:
        out["posterior"] = ck["posterior"]
    return out


def device_time_and_launches(tab: pd.DataFrame) -> tuple[float, float]:
    """(kernel device time in ms, eager launches) of a predicted kernel table (`predict_table`'s
    columns): the sum of max(pred - harness floor, 0) x count, and the sum of counts but `native_loop`'s."""
    count = tab["count"].to_numpy(np.float64)
    dev = np.maximum(tab["pred_ms"].to_numpy() - tab["floor_ms"].to_numpy(), 0.0)
    return float(np.sum(dev * count)), float(count[~native_loop(tab)].sum())


def posterior_interval(device_ms: float, launches: float, scale: float, gap_ms: float,
                       posterior: dict) -> tuple[float, float]:
    """(q_lo, q_hi), log space: the central 90% interval of a prediction with kernel device time
    `device_ms` and `launches` under constants (`scale`, `gap_ms`) fitted to measured runs
    (`hybridperf.graphs.measured_runs`), whose Laplace covariance and per-run sd are `posterior`."""
    a, b = scale * device_ms, gap_ms * launches
    j = np.array([a, b]) / max(a + b, 1e-300)
    sd = float(np.sqrt(posterior["sigma_run"] ** 2 + j @ np.asarray(posterior["cov"], dtype=np.float64) @ j))
    return -Z90 * sd, Z90 * sd


def harness_floor_ms(ops) -> np.ndarray:
    """Per-call harness floor (ms) of each op name: the op class floor, 0 for `misc:` kernels and the fused
    attention kernels (both priced as device time, `predict_table`)."""
    priced_alone = lambda o: o.startswith("misc:") or o in FUSED_OPS  # noqa: E731
    return np.array([0.0 if priced_alone(o) else launch_floor_ms(OP_CLASS[o], "call", HARNESS_HOST) for o in ops],
                    dtype=np.float64)


def in_model_ms(pred_ms, floor_ms, scale: float = 1.0, gap_ms: float = DEFAULT_GAP_MS, cpu_ms=0.0,
                raw: bool = False, looped=None) -> np.ndarray:
    """Per-launch time of kernels inside a model: max(scale * max(pred - floor, 0) + gap, cpu) (`cpu_ms`: one host
    time or one per kernel, `host_ms`), or max(scale * max(pred - floor, 0), LOOP_LAUNCH_MS) where `looped` (a C++
    loop launches them, `grouped.native_loop`)."""
    pred_ms = np.asarray(pred_ms, dtype=np.float64)
    if raw:
        return pred_ms.copy()
    dev = scale * np.maximum(pred_ms - np.asarray(floor_ms, dtype=np.float64), 0.0)
    eager = np.maximum(dev + gap_ms, cpu_ms)
    return eager if looped is None else np.where(np.asarray(looped, dtype=bool), np.maximum(dev, LOOP_LAUNCH_MS), eager)


def graph_launch_ms(tab: pd.DataFrame) -> np.ndarray:
    """Per-launch time of kernels replayed from a CUDA graph: no host, so each kernel costs its device time but
    at least a profiler-timed kernel's floor of its op class (`priors.launch.KERNEL_FLOOR_MS`, read off Vidur's
    A100 profiles), plus the gap between back-to-back kernels (`GRAPH_GAP_MS`)."""
    dev = np.maximum(tab["pred_ms"].to_numpy() - tab["floor_ms"].to_numpy(), 0.0)
    classes = [OP_CLASS.get(op, "misc") for op in tab["op"]]
    return np.maximum(dev, floors_ms(classes, ["kernel"] * len(classes))) + GRAPH_GAP_MS


def moe_host_extra(graph: ModelGraph) -> float:
    """`MOE_HOST_EXTRA` for an eager graph of a MOE_LLAMA family, else 0."""
    return MOE_HOST_EXTRA if graph.config.family in MOE_LLAMA and not graph.fused else 0.0


def host_ms(tab: pd.DataFrame, cpu_ms: float, moe_extra: float = 0.0) -> np.ndarray:
    """Each row's host time per launch: `cpu_ms`, (1 + `moe_extra`) x it for a forward MoE kernel."""
    moe = tab["name"].str.startswith(MOE_KERNELS).to_numpy(bool) & (tab["phase"].to_numpy() == "fw")
    return cpu_ms * np.where(moe, 1.0 + moe_extra, 1.0)


def host_bound_share(tab: pd.DataFrame, par: dict) -> float:
    """Share of a composed model's time spent in kernels whose host dispatch (`cpu_ms`) outlasts their device
    time and gap: the part another host would run at its own speed."""
    if par["raw"] or par["cpu_ms"] <= 0:
        return 0.0
    dev = par["scale"] * np.maximum(tab["pred_ms"].to_numpy() - tab["floor_ms"].to_numpy(), 0.0)
    bound = (dev + par["gap_ms"] < host_ms(tab, par["cpu_ms"], par.get("moe_extra", 0.0))) \
        & ~np.asarray(native_loop(tab), dtype=bool)
    total = tab["total_ms"].to_numpy()
    return float(total[bound].sum() / max(total.sum(), 1e-300))


def predictor_kind(predictor: Predictor) -> str:
    return "bundle" if predictor.bundle is not None else "prior"


def resolve_predictor(model_bundle: str | Path | None = None, prior_only: bool = False,
                      warn: bool = True) -> Predictor:
    """The kernel predictor to use: `--prior-only`, an explicit bundle, else the shipped bundle when
    `exported_models/kernels/manifest.json` exists, else the prior alone (with a warning on stderr)."""
    if prior_only and model_bundle is not None:
        raise InputError("--model-bundle and --prior-only are mutually exclusive")
    if prior_only:
        return Predictor.prior_only()
    if model_bundle is not None:
        p = Path(model_bundle)
        if not (p / "manifest.json").is_file() and (p / "kernels" / "manifest.json").is_file():
            p = p / "kernels"
        return Predictor.load(p)
    shipped = shipped_models_dir() / "kernels"
    if (shipped / "manifest.json").is_file():
        try:
            return Predictor.load(shipped)
        except ModelBundleError as e:
            if warn:
                print(f"warning: shipped kernel bundle unusable ({e}); using the analytical prior only",
                      file=sys.stderr)
            return Predictor.prior_only()
    if warn:
        print("warning: no trained kernel bundle found; using the analytical prior only", file=sys.stderr)
    return Predictor.prior_only()


@dataclass
class ModelPrediction:
    """Per-kernel predictions of one graph plus the composed totals (`ms`, with its 90% interval
    [`lo_ms`, `hi_ms`]); `to_dict` gives them the contract's names."""

    graph: ModelGraph
    kernels: pd.DataFrame  # kernel_table() + pred_ms, lo_ms, hi_ms, ood, floor_ms, t_ms, total_ms (= t x count)
    ms: float
    lo_ms: float
    hi_ms: float
    fw_ms: float
    bw_ms: float
    log_bias: float
    kind: str
    opt_ms: float = 0.0  # the optimizer step (graphs with an optimizer only)
    plan_ms: float = 0.0  # host time building cuDNN attention plans (a decode step's new key lengths), in fw_ms

    def to_dict(self) -> dict:
        """The contract's {"e2e_ms", "lo_ms", "hi_ms", "fw_ms", "bw_ms"}, plus "opt_ms" with an optimizer."""
        out = {"e2e_ms": self.ms, "lo_ms": self.lo_ms, "hi_ms": self.hi_ms, "fw_ms": self.fw_ms,
               "bw_ms": self.bw_ms}
        if self.graph.optimizer:
            out["opt_ms"] = self.opt_ms
        return out

    def breakdown(self) -> pd.DataFrame:
        """Time (ms, after the composition correction) and share per op group and phase."""
        k = self.kernels
        scale = float(np.exp(self.log_bias))
        t = (k.assign(ms=k["total_ms"] * scale).pivot_table(index="group", columns="phase", values="ms",
                                                             aggfunc="sum", fill_value=0.0))
        phases = ("fw", *(("rc",) if self.graph.recompute else ()), "bw", "acc",
                  *(("opt",) if self.graph.optimizer else ()))
        for ph in phases:
            if ph not in t.columns:
                t[ph] = 0.0
        t = t[list(phases)]
        t["total"] = t.sum(axis=1)
        order = [g for g in GROUPS if g in t.index] + [g for g in t.index if g not in GROUPS]
        t = t.loc[order]
        if self.plan_ms > 0:  # host time, no kernel: a row of its own
            t.loc["cudnn_plans"] = 0.0
            t.loc["cudnn_plans", ["fw", "total"]] = self.plan_ms
        t["share"] = t["total"] / max(t["total"].sum(), 1e-12)
        return t.rename_axis("group").reset_index()


def graph_kernels(graph: ModelGraph, device: DeviceSpec) -> pd.DataFrame:
    """The graph's kernel table, plus its optimizer step's kernels (phase 'opt') when it has one."""
    tab = graph.kernel_table()
    if graph.optimizer:
        opt = optimizer_table(param_numels(graph), graph.optimizer, device, "fp32" if graph.amp else graph.dtype)
        tab = pd.concat([tab, opt], ignore_index=True)
    return tab


def predict_kernels_of(graph: ModelGraph, device: DeviceSpec, predictor: Predictor) -> pd.DataFrame:
    """`graph_kernels` with pred_ms/lo_ms/hi_ms/ood/floor_ms per row (one predictor call); `total_ms`
    here is the isolated-call sum pred_ms x count (`compose` replaces it by in-model time)."""
    return predict_table(graph_kernels(graph, device), device, predictor)


def kernel_requests(tab: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """The rows of a kernel table the kernel predictor prices (every op but the `misc:` ones) and
    their requests to it (NeuSight-style columns, on HARNESS_HOST)."""
    vi = np.flatnonzero(~(tab["op"].str.startswith("misc:") | tab["op"].isin(FUSED_OPS)).to_numpy())
    q = tab.iloc[vi]
    req = pd.DataFrame({"OPName": q["op"].to_numpy(), "B": q["B"].to_numpy(np.float64),
                        "M": q["M"].to_numpy(np.float64), "N": q["N"].to_numpy(np.float64),
                        "K": q["K"].to_numpy(np.float64), "H": q["H"].to_numpy(np.float64),
                        "dtype": q["dtype"].to_numpy(), "host": HARNESS_HOST, "form": q["form"].to_numpy()})
    gemm = q["op"].isin(GEMM_OPS).to_numpy()
    req.loc[gemm, "H"] = np.nan
    req.loc[~gemm, ["M", "N", "K"]] = np.nan
    return vi, req


def model_kernel_requests(graph: ModelGraph, device) -> pd.DataFrame:
    """The kernel predictor's requests for every kernel of `graph` it prices, each with its launch
    `count`: what a model-aware `hybridperf suggest` designs for (`suggest_kernels(target=...)`)."""
    dev = get_device(device)
    tab = launch_grouped_gemms(graph_kernels(graph, dev), dev).reset_index(drop=True)
    vi, req = kernel_requests(tab)
    return req.assign(count=tab["count"].to_numpy(np.float64)[vi])


def predict_table(tab: pd.DataFrame, device: DeviceSpec, predictor: Predictor) -> pd.DataFrame:
    """Per-kernel predictions of a table with `graph_kernels`'s columns (grouped expert GEMMs launched as
    `device` runs them, `hybridperf.graphs.grouped`): the predictor's for the kernels it prices,
    `hybridperf.graphs.misc`'s for the others."""
    tab = launch_grouped_gemms(tab, device).reset_index(drop=True)
    pred = np.zeros(len(tab))
    lo = np.zeros(len(tab))
    hi = np.zeros(len(tab))
    ood = np.zeros(len(tab))
    vi, req = kernel_requests(tab)
    if len(vi):
        out = predictor.predict(req, device)
        pred[vi] = out["pred_ms"].to_numpy()
        lo[vi] = out["lo_ms"].to_numpy()
        hi[vi] = out["hi_ms"].to_numpy()
        ood[vi] = out["ood"].to_numpy()
    # a fused kernel's further full-size inputs (`extra_nbytes`): streamed once more at achievable bandwidth
    extra = memory_time_ms(tab["extra_nbytes"].to_numpy(np.float64), device)
    pred, lo, hi = pred + extra, lo + extra, hi + extra
    fi = np.flatnonzero(tab["op"].isin(FUSED_OPS).to_numpy())
    if len(fi):  # fused attention: device time from its prior, a fixed interval (`graphs.attention`); outside
        # what the model-level quantiles were calibrated on (NeuSight's eager runs), so it widens them (`ood`)
        f = fused_attention_ms(tab.iloc[fi], device)
        pred[fi], lo[fi], hi[fi] = f, f * np.exp(-FUSED_LOG_HALF_WIDTH), f * np.exp(FUSED_LOG_HALF_WIDTH)
        ood[fi] = 1.0
    mi = np.setdiff1d(np.arange(len(tab)), np.concatenate([vi, fi]))
    if len(mi):
        kinds = [s.split(":", 1)[1] for s in tab["op"].iloc[mi]]
        elem_bytes = [DTYPE_BYTES.get(d, 2.0) for d in tab["dtype"].iloc[mi]]
        m = misc_latency_ms(kinds, tab["nbytes"].iloc[mi].to_numpy(), device, np.asarray(elem_bytes, dtype=float))
        pred[mi] = m
        lo[mi] = m * np.exp(-MISC_LOG_HALF_WIDTH)
        hi[mi] = m * np.exp(MISC_LOG_HALF_WIDTH)
    tab["pred_ms"] = pred
    tab["lo_ms"] = lo
    tab["hi_ms"] = hi
    tab["ood"] = ood
    tab["floor_ms"] = harness_floor_ms(tab["op"])
    tab["total_ms"] = pred * tab["count"].to_numpy()
    return tab


def compose(graph: ModelGraph, dev: DeviceSpec, predictor: Predictor, correction: bool = True,
            calibration: dict | None = None, cudnn_plans: str = "build") -> ModelPrediction:
    """Predict and compose one graph on `dev` (see the module docstring for the model). Callers resolve the
    device once, at their boundary, and pass the `DeviceSpec` (which passes through); a name is resolved here.
    `cudnn_plans` (decode): whether the step builds its cuDNN attention plans (`graphs.attention.CUDNN_PLAN_MODES`).
    A graph launched as one CUDA graph (`graph.launch`) is composed without its host (`graph_launch_ms`)."""
    dev = get_device(dev)
    cudnn_plans = check_cudnn_plans(cudnn_plans)
    kind = predictor_kind(predictor)
    if calibration is not None and correction and kind not in calibration:
        raise InputError(f"the composition calibration holds constants for {', '.join(sorted(calibration)) or 'no'}"
                         f" kernel model(s), not for the {kind!r} one used here: calibrate with the same predictor")
    fitted_on = (calibration or {}).get(kind, {}).get("device") if correction else None
    if fitted_on is not None and fitted_on != dev.name:
        raise InputError(f"the composition calibration was fitted to runs on {fitted_on}, not {dev.name}")
    graph_launch = graph.launch == "graph" and correction
    if graph_launch and calibration is not None:
        raise InputError("constants fitted to measured runs compose eager steps; a CUDA-graph step has no host to fit")
    tab = predict_kernels_of(graph, dev, predictor)
    if graph_launch:  # no host: device time only, the fallback interval of the kernels' own
        par = {"raw": False, "scale": 1.0, "gap_ms": 0.0, "cpu_ms": 0.0, "log_bias": 0.0}
        t = graph_launch_ms(tab)
    else:
        par = {**composition_params(kind, COMPOSITION_MODE.get(graph.mode, graph.mode), calibration, correction),
               "moe_extra": moe_host_extra(graph)}
        t = in_model_ms(tab["pred_ms"].to_numpy(), tab["floor_ms"].to_numpy(), par["scale"], par["gap_ms"],
                        host_ms(tab, par["cpu_ms"], par["moe_extra"]), par["raw"], native_loop(tab))
    tab["t_ms"] = t
    tab["total_ms"] = t * tab["count"].to_numpy()
    log_bias = par["log_bias"]
    scale = float(np.exp(log_bias))
    total = tab["total_ms"].to_numpy()
    phase = tab["phase"].to_numpy()
    # a decode step's new key lengths each build a cuDNN plan on the host where PyTorch runs cuDNN attention
    plan_ms = cudnn_plan_ms(tab, dev, graph.mode, cudnn_plans) if correction and not graph_launch else 0.0
    fw = float(total[phase == "fw"].sum()) * scale + plan_ms
    bw = float(total[np.isin(phase, BACKWARD_PHASES)].sum()) * scale
    opt = float(total[phase == "opt"].sum()) * scale
    e2e = fw + bw + opt
    w = total / max(total.sum(), 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        l_k = np.where(tab["pred_ms"] > 0, np.log(tab["lo_ms"] / tab["pred_ms"]), 0.0)
        u_k = np.where(tab["pred_ms"] > 0, np.log(tab["hi_ms"] / tab["pred_ms"]), 0.0)
    ood = float(np.sum(w * tab["ood"].to_numpy()))
    if "posterior" in par:
        q_lo, q_hi = posterior_interval(*device_time_and_launches(tab), par["scale"], par["gap_ms"], par["posterior"])
        widen = 1.0 + OOD_WIDEN * ood
        q_lo, q_hi = q_lo * widen, q_hi * widen
    elif "q_lo" in par:
        widen = 1.0 + OOD_WIDEN * ood
        q_lo, q_hi = par["q_lo"] * widen, par["q_hi"] * widen
    else:
        q_lo, q_hi = float(np.sum(w * l_k)), float(np.sum(w * u_k))
    q_lo, q_hi = min(q_lo, 0.0), max(q_hi, 0.0)
    # host-bound kernels and plan building run at the host's speed: kernels up to HOST_SPREAD slower or
    # HOST_FASTEST as fast, plans up to HOST_SPREAD either way (another source's host built one in 23-37 ms)
    bound = host_bound_share(tab, par)
    host = (bound * (e2e - plan_ms) + plan_ms) / e2e
    q_hi = float(np.log((1.0 - host) * np.exp(q_hi) + host * max(np.exp(q_hi), HOST_SPREAD)))
    lo_kernels = (1.0 - bound) * np.exp(q_lo) + bound * min(np.exp(q_lo), HOST_FASTEST)
    lo = (e2e - plan_ms) * float(lo_kernels) + plan_ms / HOST_SPREAD * float(np.exp(q_lo))
    return ModelPrediction(graph=graph, kernels=tab, ms=e2e, lo_ms=lo,
                           hi_ms=e2e * float(np.exp(q_hi)), fw_ms=fw, bw_ms=bw, log_bias=log_bias, kind=kind,
                           opt_ms=opt, plan_ms=plan_ms)


def predict_request(request: ModelRequest, device, predictor: Predictor | None = None, correction: bool = True,
                    calibration: dict | None = None) -> ModelPrediction:
    """Predict one `ModelRequest` on `device` (a DeviceSpec, name or JSON spec path, resolved here once):
    `compose` of its graph."""
    pred = predictor if predictor is not None else resolve_predictor()
    return compose(request.graph(), get_device(device), pred, correction=correction, calibration=calibration,
                   cudnn_plans=request.cudnn_plans)


def predict_model(config, batch: int, seq: int, mode: str = "inf", device="NVIDIA H100 80GB HBM3",
                  predictor: Predictor | None = None, correction: bool = True, dtype: str | None = None,
                  fused: bool = False, optimizer: str | None = None, recompute: bool = False,
                  calibration: dict | None = None, attn: str = DEFAULT_ATTN, amp: bool = False,
                  cudnn_plans: str = "build", launch: str = "eager") -> ModelPrediction:
    """Whole-model latency of one forward (`inf`) or forward+backward (`train`) pass, or one decode step:
    `predict_request` of the `ModelRequest` these arguments make.

    `config`: path to a HF config.json, a parsed dict, or a `ModelConfig`. Returns the `ModelPrediction`:
    `ms` with its 90% interval [`lo_ms`, `hi_ms`], `fw_ms`, `bw_ms` (0 for inf), the kernel table and
    `breakdown()`; `to_dict()` is the contract's {"e2e_ms", "lo_ms", "hi_ms", "fw_ms", "bw_ms"}.
    `predictor=None` uses the shipped kernel bundle when present, else the analytical prior.
    `dtype`: fp32 (NeuSight's semantics) or the model cast to fp16/bf16 (both scored held out: RESULTS.md 4, 11).
    `fused`: inference with pointwise chains fused as torch.compile does (`fusion.fuse_pointwise`).
    `optimizer` (train): add one optimizer step (sgd, sgd-momentum, adam, adamw, adam-fused;
    `hybridperf.graphs.optimizer`) to the total and report it as `opt_ms`.
    `recompute` (train): activation checkpointing of every layer; its forward re-runs inside bw_ms.
    `calibration`: composition constants fitted to runs measured on `device`
    (`hybridperf.graphs.measured_runs.calibrate_from_runs`, with the same `predictor`); default: shipped.
    `attn`: transformers' attention implementation, `sdpa` (its default) or `eager` (NeuSight's labels:
    dtype fp32, attn eager); `amp`: fp32 weights under bf16 autocast (`hybridperf.graphs.amp`).
    `cudnn_plans` (decode with SDPA where PyTorch runs cuDNN attention first: H100, H200, B200): `build` (the
    step's key lengths are new to the process, as in a first `generate()`) or `cached`.
    `launch`: `eager` (PyTorch dispatches every kernel: transformers' default) or `graph` (the step replayed from
    one CUDA graph, without its host; a decode step over a static cache).
    """
    req = ModelRequest(config, batch, seq, mode, dtype, attn, amp, fused, optimizer, recompute, cudnn_plans, launch)
    return predict_request(req, device, predictor, correction, calibration)


def sweep(config, batches, seqs, mode: str = "inf", device="NVIDIA H100 80GB HBM3",
          predictor: Predictor | None = None, dtype: str | None = None, fused: bool = False,
          optimizer: str | None = None, recompute: bool = False, calibration: dict | None = None,
          attn: str = DEFAULT_ATTN, amp: bool = False, cudnn_plans: str = "build", launch: str = "eager"
          ) -> pd.DataFrame:
    """Predictions over the grid batches x seqs: columns batch, seq, mode, device, e2e/lo/hi/fw/bw_ms
    (and opt_ms with an `optimizer`; `fused`, `optimizer`, `recompute`, `calibration`, `cudnn_plans`, `launch`:
    as in `predict_model`)."""
    from hybridperf.graphs.config import load_config

    cfg = load_config(config)
    dev = get_device(device)
    pred = predictor if predictor is not None else resolve_predictor()
    if isinstance(batches, (int, np.integer)):
        batches = [batches]
    if isinstance(seqs, (int, np.integer)):
        seqs = [seqs]
    if not len(batches) or not len(seqs):
        raise InputError("sweep needs at least one batch size and one sequence length")
    rows = []
    for s in seqs:
        for b in batches:
            graph = build_graph(cfg, b, s, mode, dtype, fused=fused, optimizer=optimizer, recompute=recompute,
                                attn=attn, amp=amp, launch=launch)
            r = compose(graph, dev, pred, calibration=calibration, cudnn_plans=cudnn_plans).to_dict()
            rows.append({"batch": int(b), "seq": int(s), "mode": mode, "device": dev.name, **r})
    return pd.DataFrame(rows)
