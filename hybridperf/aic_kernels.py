"""Kernel latency of rows in aiconfigurator's perf-table schema (`op_name` gemm, context_attention,
generation_attention, moe; docs/aiconfigurator-kernels.md): prior x exp(residual) with a 90% interval.

Runs on numpy, pandas and onnxruntime only. The bundle (`exported_models/aic_kernels`, built by
`python -m experiments.kernels.aiconfigurator_kernels --ship exported_models/aic_kernels`) holds the fitted
prior constants, per-family residual models where they beat the prior held out, and
split-conformal interval quantiles per (family, dtype), widened for an architecture, kernel family or
dtype no training system ran.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hybridperf.aic_rows import DTYPE_NAMES, OPS, attn_kin, matmul_kin
from hybridperf.devices import DeviceSpec
from hybridperf.errors import ModelBundleError
from hybridperf.priors import attention
from hybridperf.priors.llm_gemm import (GEMM_DTYPES, TILES, KernelConstants, combine_ms, device_dtype, fitted_constants,
                                        floor_s, gemm_parts, kernel_dtype, split_reduce_s)
from hybridperf.priors.moe import (MATERIALIZED_COMBINE, PERMUTED, WARP_MMA, ZERO_FILLED, computes_remote_pairs,
                                  moe_parts)
from hybridperf.residual_models.bundle import Bundle, load_bundle, shipped_models_dir

#: kernel family of a `kernel_source` string: the first keyword it contains
KERNEL_FAMILIES = (("deepgemm", "deepgemm"), ("marlin", "marlin"), ("oaitriton", "triton_kernels"),
                   ("triton", "triton"), ("cutlass", "cutlass"), ("cutedsl", "flashinfer"), ("flashinfer", "flashinfer"),
                   ("trtllm", "trtllm"), ("xqa", "trtllm"), ("plugin", "trt_plugin"), ("fa3", "flash_attn"),
                   ("flash", "flash_attn"), ("nongated", "trtllm"), ("torch", "torch"), ("linear", "torch"),
                   ("sglang", "torch"), ("vllm", "torch"))
FAMILY_NAMES = tuple(sorted({f for _, f in KERNEL_FAMILIES} | {"other"}))
#: log half-width added to each side of an interval for what leave-one-GPU-out never tested: an
#: architecture the tile model does not know (the four training GPUs are four NVIDIA architectures,
#: so the conformal quantiles already hold a new NVIDIA one), a kernel family or dtype no training
#: system ran, a memory technology (HBM, GDDR: `memory_family`) no training GPU had. Chosen, not
#: fitted: the order of the per-GPU median bias in leave-one-GPU-out (0.1-0.4)
DEFAULT_WIDEN = {"arch": 0.25, "kernel_family": 0.15, "dtype": 0.25, "memory": 0.25, "ridge": 0.25}
#: a GPU whose ridge (`ridge_flop_per_byte`) lies beyond the training GPUs' range by more than this factor balances
#: compute against memory where none of them did (H20: 37 FLOP/B, the four training GPUs 153-419): its intervals
#: widen by DEFAULT_WIDEN["ridge"]. Held out, A100 (153 against 292-419) stays inside and is covered 91-99% already
RIDGE_SPAN = 2.0
#: the interval of a family/dtype the bundle has no quantiles for (log), a wide default
FALLBACK_Q = (-0.6, 0.6)
#: interval stratum of rows whose measured path (`source_key`) no training system ran: their constants come from
#: other kernels of the dtype, so their interval covers at least the held-out errors of such rows (`op:kind:new_source`)
NEW_SOURCE = "new_source"


def unseen_arch_widen(arch: str, widen: dict = DEFAULT_WIDEN) -> float:
    """How much wider (log, each side) an interval is on an architecture without a GEMM tile model (any but the
    `TILES` ones, Ampere to Blackwell: AMD CDNA, Intel Xe, NVIDIA before Ampere, a spec file's unknown one): its
    kernels, libraries and engine builds are none the fits saw."""
    return widen["arch"] if arch not in TILES else 0.0


def memory_family(device: DeviceSpec) -> str:
    """`gddr` or `hbm`: the memory a GPU's kernels stream from, which sets their bandwidth, latency and the
    weight of its L2 (a GDDR card's large L2 serves what an HBM part streams from DRAM)."""
    return "gddr" if str(device.mem_type).strip().upper().startswith(("GDDR", "LPDDR")) else "hbm"


def ridge_flop_per_byte(device: DeviceSpec) -> float:
    """16-bit matrix FLOPs per DRAM byte at spec rates: where a kernel turns from memory- to compute-bound."""
    half = max(device.peak("bf16", matrix=True), device.peak("fp16", matrix=True))
    return half / (device.mem_bw_gbs * 1e9) if device.mem_bw_gbs > 0 else np.inf


def ridge_outside(device: DeviceSpec, systems) -> bool:
    """Whether `device`'s ridge lies beyond the training `systems`' (aiconfigurator ids) by more than RIDGE_SPAN."""
    from hybridperf.datasets.aiconfigurator import SYSTEM_DEVICES
    from hybridperf.devices import get_device

    known = [ridge_flop_per_byte(get_device(SYSTEM_DEVICES[s])) for s in systems or () if s in SYSTEM_DEVICES]
    r = ridge_flop_per_byte(device)
    return bool(known) and (r < min(known) / RIDGE_SPAN or r > max(known) * RIDGE_SPAN)


def kernel_family(source) -> np.ndarray:
    """Each row's kernel family (deepgemm, cutlass, triton, flashinfer, marlin, torch, ...) from its
    `kernel_source`."""
    src = pd.Series(np.asarray(source, dtype=object)).fillna("").astype(str).str.lower()
    out = np.full(len(src), "other", dtype=object)
    cats = src.astype("category")
    for i, s in enumerate(cats.cat.categories):
        fam = next((f for key, f in KERNEL_FAMILIES if key in s), "other")
        out[cats.cat.codes.to_numpy() == i] = fam
    return out


#: the table name a cache format no table holds takes in `features`, by the attention prior key it is priced as (one
#: not here keeps its own name: a 16-bit or int8 name reads the same bytes off either)
KV_TABLE_NAMES = {"fp8": "fp8", "fp4": "nvfp4", "int4": "nvfp4"}


def priced_dtype(name: str) -> str:
    """The GEMM/MoE dtype the prior prices a row of dtype `name` as: its modelled kin (`aic_rows.matmul_kin`), else
    the name itself (a blank or float name: bfloat16's rates)."""
    kin = matmul_kin(name)
    return kin if kin in GEMM_DTYPES else name


def _attn_dtype(series) -> np.ndarray:
    """aiconfigurator dtype names -> the short keys the attention prior reads (a blank cell: bf16, its
    interval widened)."""
    return np.asarray([attn_kin(s) or "bf16" for s in np.asarray(series, dtype=object)], dtype=object)


def prior_terms(df: pd.DataFrame, device: DeviceSpec, gemm_c: KernelConstants | None = None,
                moe_c: KernelConstants | None = None,
                attn_c: attention.AttentionConstants | None = None) -> pd.DataFrame:
    """Per row: `prior_ms` and the physics terms the residual models read (`compute_ms`, `memory_ms`,
    `floor_ms` (the kernels' floors and `fixed_ms`, a split-K GEMM's reduction), `flops`, `bytes`, `waves`,
    ...). Rows are priced in groups of one (op, dtype, kernel source); constants default to the fitted
    ones (`fitted_constants`; the attention prior's shipped `attention.CONSTANTS`)."""
    attn_c = attention.CONSTANTS if attn_c is None else attn_c
    gemm_c = fitted_constants()["gemm"] if gemm_c is None else gemm_c
    moe_c = fitted_constants()["moe"] if moe_c is None else moe_c
    n = len(df)
    cols = {k: np.full(n, np.nan) for k in ("prior_ms", "compute_ms", "memory_ms", "floor_ms", "fixed_ms", "flops",
                                            "bytes", "waves", "weight_bytes", "aux", "kernels")}
    ops = df["op_name"].to_numpy()
    fam = kernel_family(df["kernel_source"])
    for op in OPS:
        m = ops == op
        if not m.any():
            continue
        sub = df.loc[m]
        if op in ("gemm", "moe"):
            dcol = "gemm_dtype" if op == "gemm" else "moe_dtype"
            # whose collector timed the row, and which version (`llm_gemm.replay_copies`)
            version = sub["version"].astype(str) if "version" in sub.columns else [""] * len(sub)
            codes, groups = pd.MultiIndex.from_arrays([sub[dcol].astype(str), sub["kernel_source"].astype(str),
                                                      framework_of(sub), version]).factorize()
            for i in range(len(groups)):
                dt, ks, framework, ver = groups[i]
                dt = priced_dtype(dt)
                mm = np.zeros(n, dtype=bool)
                mm[np.flatnonzero(m)[codes == i]] = True
                s = df.loc[mm]
                c = gemm_c if op == "gemm" else moe_c
                if op == "gemm":
                    p = gemm_parts(s["m"], s["n"], s["k"], dt, device, kernel_source=ks, framework=framework,
                                   version=ver)
                    waves = p["waves"]
                else:
                    kf = kernel_family([ks])[0]
                    p = moe_parts(s["num_tokens"], s["hidden_size"], s["inter_size"], s["topk"], s["num_experts"],
                                  device, dt, s["moe_tp_size"], s["moe_ep_size"], s["distribution"].astype(str),
                                  "nongated" not in ks, combine=kf in MATERIALIZED_COMBINE, zero_fill=kf in ZERO_FILLED,
                                  warp_mma=kf in WARP_MMA, whole_tokens=computes_remote_pairs(framework, ver),
                                  permuted=kf in PERMUTED)
                    waves = p["padded"] / np.maximum(p["routed"], 1.0)
                dt = p["dtype"]  # the one its kernels run on this device
                _fill(cols, mm, p, combine_ms(p, dt, c, ks), floor_s(c, dt, ks, p["clock_mhz"], p["arch"]), waves, c)
        else:
            a_dt, kv_dt = _attn_dtype(sub["attn_dtype"]), _attn_dtype(sub["kv_cache_dtype"])
            srcs = sub["kernel_source"].astype(str).to_numpy()
            for key in sorted(set(zip(a_dt, kv_dt, srcs))):
                sel = (a_dt == key[0]) & (kv_dt == key[1]) & (srcs == key[2])
                mm = np.zeros(n, dtype=bool)
                mm[np.flatnonzero(m)[sel]] = True
                s = df.loc[mm]
                b, h, kvh, hd = s["batch_size"], s["num_heads"], s["num_key_value_heads"], s["head_dim"]
                if op == "context_attention":
                    t = attention.context_attention_ms(b, s["isl"], h, kvh, hd, device, dtype=key[0], kv_dtype=key[1],
                                                       causal=True, window=s["window_size"], prefix=s["step"],
                                                       kernel_source=key[2], constants=attn_c)
                    q, kv = s["isl"].to_numpy(), (s["isl"] + s["step"]).to_numpy()
                else:
                    kv = (s["step"] + s["isl"]).to_numpy()
                    t = attention.generation_attention_ms(b, kv, h, kvh, hd, device, dtype=key[0], kv_dtype=key[1],
                                                          window=s["window_size"], kernel_source=key[2],
                                                          constants=attn_c)
                    q = s["isl"].to_numpy()
                w = s["window_size"].to_numpy()
                keys = np.where(w > 0, np.minimum(kv, w), kv)
                flops = 4.0 * b.to_numpy() * h.to_numpy() * q * keys * hd.to_numpy()
                nbytes = 2.0 * b.to_numpy() * keys * kvh.to_numpy() * hd.to_numpy() * 2.0
                t = np.asarray(t, dtype=np.float64)
                cols["prior_ms"][mm] = t
                cols["compute_ms"][mm] = flops / device.peak(key[0], matrix=True) * 1e3
                cols["memory_ms"][mm] = nbytes / (device.mem_bw_gbs * 1e9) * 1e3
                cols["floor_ms"][mm] = cols["fixed_ms"][mm] = 0.0
                cols["flops"][mm], cols["bytes"][mm] = flops, nbytes
                cols["waves"][mm] = np.ceil(b.to_numpy() * h.to_numpy() * np.ceil(q / 128.0) / device.num_sms)
                cols["weight_bytes"][mm] = nbytes
                cols["aux"][mm] = q / np.maximum(keys, 1.0)
    out = pd.DataFrame(cols, index=df.index)
    out["kernel_family"] = fam
    return out


def _fill(cols, mask, parts, prior_ms, floor_s, waves, constants) -> None:
    cols["prior_ms"][mask] = prior_ms
    cols["compute_ms"][mask] = parts["compute"] * 1e3
    cols["memory_ms"][mask] = parts["memory"] * 1e3
    cols["fixed_ms"][mask] = split_reduce_s(parts, constants) * 1e3
    cols["floor_ms"][mask] = parts["kernels"] * floor_s * 1e3 + cols["fixed_ms"][mask]
    cols["flops"][mask], cols["bytes"][mask] = parts["flops"], parts["bytes"]
    cols["waves"][mask], cols["weight_bytes"][mask] = waves, parts["weight_bytes"]
    cols["aux"][mask] = parts["quant"] * 1e3
    cols["kernels"][mask] = parts["kernels"]


def _log(x) -> np.ndarray:
    return np.log(np.maximum(np.nan_to_num(np.asarray(x, dtype=np.float64), nan=1.0), 1e-12))


#: features of the residual models: the shape's work and the prior's terms, the device only as it
#: meets the kernel (waves over SMs, compute over memory time, working set over L2), never its name
FEATURES = ("log_prior_ms", "log_compute_ms", "log_memory_ms", "compute_over_memory", "floor_share",
            "log_flops", "log_bytes", "log_intensity_over_ridge", "log_waves", "log_weight_over_l2", "log_aux",
            "a_bytes", "w_bytes", "log_dim1", "log_dim2", "log_dim3", "log_dim4", "log_dim5", "log_dim6",
            *(f"kf_{f}" for f in FAMILY_NAMES))
#: the residual's direction in each feature a GPU with more DRAM bandwidth or L2 moves (+1: non-decreasing,
#: -1: non-increasing), so that such a GPU, its SMs, clock and FLOP/s the same, is not priced slower (H200
#: against H100). Unconstrained, trees split on the four training GPUs' values and priced an H200 more than
#: 2% slower than an H100 on 12% of sampled decode-attention rows (up to 1.54x) whose prior was not slower
BANDWIDTH_MONOTONE = {"log_prior_ms": 1, "log_memory_ms": 1, "compute_over_memory": -1,
                      "log_intensity_over_ridge": -1, "log_weight_over_l2": 1}
#: per family, the rates its residual's ratio features (`compute_over_memory`, `log_intensity_over_ridge`) read
#: at a fixed reference (H100's) instead of the device's: such a rate then moves only its own term, constrained
#: in `MONOTONE`, and the prior. With the device's rates in the ratios, a residual constrained in one rate moved
#: the wrong way with the other: decode's (bandwidth-monotone) priced a GB200 slower than a B200 on 47 of 900
#: sampled rows (up to 1.24x), prefill's (free) an H200 slower than an H100 on 90 of 921 (up to 1.13x), GEMM's
#: and MoE's 0.4% and 8% of rows with a quarter more FLOP/s (up to 1.09x). Decode reads FLOP/s there and keeps
#: its bandwidth ratios, which its KV read binds; prefill reads bandwidth there and keeps its FLOP/s ratios, which
#: the held-out L40S needs (constrained in them too: 44 -> 55%); GEMM and MoE read both there (held out: no GPU
#: more than 0.4 points worse, A100 GEMM 18.1 -> 16.4%; experiments/RESULTS.md section 10)
REFERENCE_RATES = {"generation_attention": {"flops": 989.4e12}, "context_attention": {"bandwidth": 3350e9},
                   "gemm": {"flops": 989.4e12, "bandwidth": 3350e9}, "moe": {"flops": 989.4e12, "bandwidth": 3350e9}}
#: ... and a GEMM's or MoE's monotone terms: its own compute and memory times, the prior, the weight over L2 and
#: `log_aux`, its serial passes' time (activation quantization; a MoE's permute and finalize); `floor_share` (the
#: launch floor over the prior) and the waves stay free (constraining the floor's share cost GEMMs 0.4-1.6 points
#: held out)
GEMM_MONOTONE = {"log_prior_ms": 1, "log_compute_ms": 1, "log_memory_ms": 1, "log_weight_over_l2": 1, "log_aux": 1}
#: each family's monotone constraints (families absent: unconstrained)
MONOTONE = {"gemm": GEMM_MONOTONE, "moe": GEMM_MONOTONE,
            "generation_attention": {**BANDWIDTH_MONOTONE, "log_compute_ms": 1},
            "context_attention": {"log_memory_ms": 1, "log_weight_over_l2": 1}}


def monotone_constraints(op: str) -> tuple[int, ...] | None:
    """XGBoost's monotone constraint per FEATURES column of `op`'s residual (None: unconstrained)."""
    if op not in MONOTONE:
        return None
    return tuple(MONOTONE[op].get(f, 0) for f in FEATURES)


#: per op: the six shape columns `log_dim*` are (None: 1); a MoE's TP and EP split say how much of its
#: token-expert work is rank 0's and how much every rank still passes over (routing, the combine)
DIMS = {"gemm": ("m", "n", "k", "k", None, None),
        "moe": ("num_tokens", "hidden_size", "inter_size", "topk", "moe_tp_size", "moe_ep_size"),
        "context_attention": ("batch_size", "isl", "num_key_value_heads", "head_dim", None, None),
        "generation_attention": ("batch_size", "step", "num_key_value_heads", "head_dim", None, None)}


def features(df: pd.DataFrame, terms: pd.DataFrame, device: DeviceSpec) -> np.ndarray:
    """(rows, len(FEATURES)) float32 residual features of rows of one op family."""
    op = str(df["op_name"].iloc[0]) if len(df) else "gemm"
    # the ratio features' rates: the reference's where `REFERENCE_RATES` names one, else the device's
    ref = REFERENCE_RATES.get(op, {})
    peak, bw = ref.get("flops", device.peak("bf16", matrix=True)), ref.get("bandwidth", device.mem_bw_gbs * 1e9)
    ridge = peak / bw
    compute = terms["flops"] / peak * 1e3 if "flops" in ref else terms["compute_ms"]
    memory = terms["bytes"] / bw * 1e3 if "bandwidth" in ref else terms["memory_ms"]
    dt = df[{"gemm": "gemm_dtype", "moe": "moe_dtype"}.get(op, "kv_cache_dtype")].astype(str).to_numpy()
    if op in ("gemm", "moe"):  # the operands its kernels read on this device (`llm_gemm.device_dtype`)
        dt = np.array([device_dtype(priced_dtype(d), device) for d in dt], dtype=object)
    else:  # a cache format no table holds reads as the table name of the format it is priced as
        dt = np.array([d if d in DTYPE_NAMES[op] else KV_TABLE_NAMES.get(attn_kin(d), d) for d in dt], dtype=object)
    ab = np.array([GEMM_DTYPES.get(d, (2.0, 2.0, ""))[0] for d in dt])
    wb = np.array([GEMM_DTYPES.get(d, (2.0, 2.0, ""))[1] if op in ("gemm", "moe") else
                   (0.5 if d == "nvfp4" else 1.0 if "8" in d else 2.0) for d in dt])
    cols = [
        _log(terms["prior_ms"]), _log(terms["compute_ms"]), _log(terms["memory_ms"]),
        _log(compute) - _log(memory),
        terms["floor_ms"].to_numpy() / np.maximum(terms["prior_ms"].to_numpy(), 1e-12),
        _log(terms["flops"]), _log(terms["bytes"]), _log(terms["flops"]) - _log(terms["bytes"]) - np.log(ridge),
        _log(terms["waves"]), _log(terms["weight_bytes"]) - np.log(device.l2_mb * 1e6), _log(terms["aux"]),
        ab, wb, *(_log(df[c]) if c else np.zeros(len(df)) for c in DIMS[op]),
        *((terms["kernel_family"].to_numpy() == f).astype(np.float64) for f in FAMILY_NAMES),
    ]
    return np.column_stack([np.asarray(c, dtype=np.float64) for c in cols]).astype(np.float32)


#: a framework read off a kernel source where a row does not name it: (prefix or suffix, framework)
SOURCE_FRAMEWORKS = (("sglang", "SGLang"), ("vllm", "VLLM"), ("torch.nn.functional.linear", "VLLM"),
                     ("torch_flow", "TRTLLM"), ("trt_flow", "TRTLLM"), ("deepgemm", "TRTLLM"),
                     ("moe_torch_flow", "TRTLLM"), ("torch_sdpa", "torch"), ("torch._scaled_mm", "torch"))


def framework_of(df: pd.DataFrame) -> np.ndarray:
    """Each row's framework: its `framework` cell, else read off its kernel source (SOURCE_FRAMEWORKS, and
    vLLM's kernel classes, `...Kernel`), else ""."""
    given = df["framework"].astype(str).to_numpy(object) if "framework" in df else np.full(len(df), "", dtype=object)
    blank = given == ""
    if not blank.any():
        return given
    srcs = df["kernel_source"].astype(str).to_numpy(object)
    read = {src: next((fw for key, fw in SOURCE_FRAMEWORKS if src.startswith(key)),
                      "VLLM" if src.endswith("Kernel") else "") for src in set(srcs[blank].tolist())}
    out = given.copy()
    out[blank] = [read[src] for src in srcs[blank]]
    return out


def dtype_of(df: pd.DataFrame) -> np.ndarray:
    """Each row's dtype label (gemm_dtype, moe_dtype, or attention's `attn/kv` pair)."""
    def col(c):
        return df[c].astype(str).to_numpy() if c in df else np.full(len(df), "", dtype=object)

    ops = df["op_name"].astype(str).to_numpy()
    attn = np.char.add(np.char.add(col("attn_dtype").astype(str), "/"), col("kv_cache_dtype").astype(str))
    return np.where(ops == "gemm", col("gemm_dtype"), np.where(ops == "moe", col("moe_dtype"), attn)).astype(object)


def source_key(df: pd.DataFrame) -> np.ndarray:
    """Each row's measured path, `dtype|kernel_source`: what a fit keys its efficiencies, floors and host
    dispatch by."""
    src = df["kernel_source"].astype(str).to_numpy().astype(object) if "kernel_source" in df else ""
    return (dtype_of(df).astype(object) + "|" + src).astype(object)


def new_sources(ops, sources, trained_sources: dict) -> np.ndarray:
    """Per row, whether its measured path (`sources`, `source_key`) is one no training system ran, for the ops
    `trained_sources` lists (`op -> fitted paths`); rows of other ops are not called new."""
    ops, sources = np.asarray(ops, dtype=object), np.asarray(sources, dtype=object)
    new = np.zeros(len(ops), dtype=bool)
    for op, fitted in trained_sources.items():
        m = ops == op
        new[m] = ~np.isin(sources[m], list(fitted))
    return new


def run_dtype_of(df: pd.DataFrame, device: DeviceSpec | None = None) -> np.ndarray:
    """`dtype_of`, with each GEMM row's dtype replaced by the one its kernels run (`llm_gemm.kernel_dtype`:
    SGLang's int8_wo rows are W8A8), and on `device` each GEMM and MoE row's by the one that GPU runs
    (`llm_gemm.device_dtype`: nvfp4 weight-only without FP4 units): what a training system's rows teach and a
    new row is checked against."""
    dts = dtype_of(df)
    ops = df["op_name"].astype(str).to_numpy()
    gemm = ops == "gemm"
    if "kernel_source" in df and gemm.any():
        srcs = df["kernel_source"].astype(str).to_numpy()[gemm]
        dts[gemm] = [kernel_dtype(d, k, device) for d, k in zip(dts[gemm], srcs)]
    moe = ops == "moe"
    if device is not None and moe.any():
        dts[moe] = [device_dtype(d, device) for d in dts[moe]]
    return dts


def interval_quantiles(ivs: dict, trained: dict, ops, dts, families, arch: str, kinds: dict,
                       widen: dict = DEFAULT_WIDEN, run_dts=None, memory: str | None = None,
                       sources=None, off_ridge: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(q_lo, q_hi) per row, log: the conformal quantiles of the row's `op:kind:dtype` (else `op:kind`,
    else FALLBACK_Q), widened for an architecture without a tile model, and, where `trained` lists
    them, for a dtype (the one its kernels run, `run_dts`; `dts` when None) or kernel family no training
    system ran, a memory family (`memory`) no training GPU had, or a ridge outside theirs (`off_ridge`,
    `ridge_outside`); a row whose measured path (`sources`, `source_key`) no training system ran covers at least
    its op's NEW_SOURCE quantiles, widened for the GPU alike."""
    ops, dts, families = (np.asarray(x, dtype=object) for x in (ops, dts, families))
    run_dts = dts if run_dts is None else np.asarray(run_dts, dtype=object)
    q_lo, q_hi = np.full(len(ops), FALLBACK_Q[0]), np.full(len(ops), FALLBACK_Q[1])
    extra = unseen_arch_widen(arch, widen)  # what this GPU has that no training GPU had
    if memory is not None and trained.get("memory") and memory not in trained["memory"]:
        extra += widen.get("memory", 0.0)
    extra += widen.get("ridge", 0.0) if off_ridge else 0.0
    fitted = trained.get("sources", {}) if sources is not None else {}
    new_path = new_sources(ops, sources, fitted)
    for op, kind in kinds.items():
        m = ops == op
        for dt in set(dts[m].tolist()):
            mm = m & (dts == dt)
            iv = ivs.get(f"{op}:{kind}:{dt}") or ivs.get(f"{op}:{kind}")
            if iv is not None:
                q_lo[mm], q_hi[mm] = iv["q_lo"], iv["q_hi"]
            q_lo[mm] -= extra
            q_hi[mm] += extra
        if trained:
            for key, what, by in (("dtypes", run_dts, widen["dtype"]),
                                  ("kernel_families", families, widen["kernel_family"])):
                new = m & ~np.isin(what, list(trained.get(key, {}).get(op, [])))
                q_lo[new] -= by
                q_hi[new] += by
        iv = ivs.get(f"{op}:{kind}:{NEW_SOURCE}")
        mm = m & new_path
        if iv is not None and mm.any():
            q_lo[mm] = np.minimum(q_lo[mm], iv["q_lo"] - extra)
            q_hi[mm] = np.maximum(q_hi[mm], iv["q_hi"] + extra)
    return q_lo, q_hi


def row_intervals(df: pd.DataFrame, device: DeviceSpec, ivs: dict, trained: dict, families, kinds: dict,
                  widen: dict = DEFAULT_WIDEN) -> tuple[np.ndarray, np.ndarray]:
    """`interval_quantiles` of validated `df`'s rows on `device`: each row's dtype, the one its kernels run there,
    its measured path, and what the GPU has that the `trained` systems had not. A dtype no table holds takes the
    quantiles of its priced kin (`priced_dtype`; attention's `attn_kin`), widened as a dtype no training system ran."""
    ops, dts = df["op_name"].to_numpy(), dtype_of(df)
    matmul = np.isin(ops, ("gemm", "moe"))
    dts[matmul] = [priced_dtype(d) for d in dts[matmul]]
    dts[~matmul] = ["/".join(p if p in DTYPE_NAMES["context_attention"] else KV_TABLE_NAMES.get(attn_kin(p), p)
                             for p in d.split("/")) for d in dts[~matmul]]
    return interval_quantiles(ivs, trained, ops, dts, families, device.kernel_arch, kinds,
                              widen, run_dtype_of(df, device), memory_family(device), source_key(df),
                              ridge_outside(device, trained.get("systems")))


@dataclass
class AicPredictor:
    """The bundle's pieces: prior constants, residual sessions, interval quantiles, what was trained."""

    gemm_c: KernelConstants | None = None
    moe_c: KernelConstants | None = None
    bundle: Bundle | None = None
    manifest: dict = field(default_factory=dict)
    offsets: dict = field(default_factory=dict)  # few-shot log shifts, `op:dtype` and `op`, harness-prefixed (calibrate_to)
    scales: dict = field(default_factory=dict)  # few-shot interval widening per harness-prefixed op, a factor >= 1

    @classmethod
    def load(cls, path: str | Path | None = None) -> "AicPredictor":
        root = Path(path) if path is not None else shipped_models_dir() / "aic_kernels"
        if path is None and not (root / "manifest.json").is_file():
            return cls()
        b = load_bundle(root, expect_kind="aic-kernels")
        m = b.manifest
        for fam, spec in m.get("residuals", {}).items():
            f = spec.get("file")
            if f not in b.sessions or b.sessions[f].get_inputs()[0].shape[1] != len(FEATURES):
                raise ModelBundleError(f"{root}: residual of {fam} ({f}) is not a listed ONNX file of {len(FEATURES)} features")
            scale = spec.get("scale", 1.0)
            if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0.0 <= scale <= 1.0:
                raise ModelBundleError(f"{root}: residual scale of {fam} is {scale!r}, not a number in [0, 1]")
        try:
            c = m["constants"]
            return cls(KernelConstants.from_dict(c["gemm"]), KernelConstants.from_dict(c["moe"]), b, m)
        except (KeyError, TypeError, AttributeError, ValueError):
            raise ModelBundleError(f"{root}: manifest has no valid prior constants") from None

    def predict(self, df: pd.DataFrame, device: DeviceSpec, prior_only: bool = False) -> pd.DataFrame:
        """`pred_ms`, `lo_ms`, `hi_ms`, `prior_ms` per row of validated `df`, in its order."""
        terms = prior_terms(df, device, self.gemm_c, self.moe_c)
        log_pred = _log(terms["prior_ms"])
        ops, dts, harness = df["op_name"].to_numpy(), dtype_of(df), harness_of(df)
        bare = (harness == TORCH_HARNESS) & np.isin(ops, ENGINE_RESIDUALS)  # take the prior and its interval
        kinds = {}
        for op in OPS:
            m = ops == op
            if not m.any():
                continue
            res = self.manifest.get("residuals", {}).get(op)
            use_res = res is not None and self.bundle is not None and not prior_only
            mr = m & ~bare
            if use_res and mr.any():
                X = features(df.loc[mr], terms.loc[mr], device)
                log_pred[mr] += float(res.get("scale", 1.0)) * np.clip(self.bundle.run(res["file"], X)[:, 0], -2.0, 2.0)
            kinds[op] = "hybrid" if use_res else "prior"
            for h, dt in set(zip(harness[m].tolist(), dts[m].tolist())):
                mm = m & (dts == dt) & (harness == h)
                log_pred[mm] += self.offsets.get(f"{h}{op}:{dt}", self.offsets.get(f"{h}{op}", 0.0))
        ivs, trained = self.manifest.get("intervals", {}), self.manifest.get("trained", {})
        widen, families = {**DEFAULT_WIDEN, **self.manifest.get("widen", {})}, terms["kernel_family"].to_numpy()
        q_lo, q_hi = row_intervals(df, device, ivs, trained, families, kinds, widen)
        if bare.any():
            q_lo[bare], q_hi[bare] = row_intervals(df.loc[bare], device, ivs, trained, families[bare],
                                                   {op: "prior" for op in set(ops[bare])}, widen)
        scaled = np.char.add(harness.astype(str), ops.astype(str))
        for key, f in self.scales.items():
            q_lo[scaled == key] *= f
            q_hi[scaled == key] *= f
        pred = np.exp(log_pred)
        lo = np.minimum(pred * np.exp(q_lo), pred)
        hi = np.maximum(pred * np.exp(q_hi), pred)
        return pd.DataFrame({"pred_ms": pred, "lo_ms": lo, "hi_ms": hi, "prior_ms": terms["prior_ms"].to_numpy()},
                            index=df.index)


#: the key prefix of calibration shifts learned from PyTorch's own kernels (`collect --schema aiconfigurator`
#: rows, framework `torch`); they shift only such rows. A serving engine's attention and fp8 GEMMs are other
#: kernels: on the H100, our torch rows' shift moved the engines' held-out MAPE from 18.2% to 17.8-18.8% (k = 16-64),
#: no sure gain (experiments/results/h100_collected.md)
TORCH_HARNESS = "torch|"
#: ops whose residual learned a serving engine's own per-call work (vLLM's FA3 wrapper: 1.75-3.2x a bare SDPA call
#: below 50 us), so PyTorch's bare kernels (TORCH_HARNESS rows) take the prior: our H100's SDPA prefills 31.6 -> 22.9%
#: MAPE, checked on our H200's, 31.9 -> 23.4% (`experiments/transfer/collected_pair.py`)
ENGINE_RESIDUALS = ("context_attention",)


def harness_of(df: pd.DataFrame) -> np.ndarray:
    """Each row's calibration harness: TORCH_HARNESS for rows PyTorch's own kernels timed (framework
    `torch`), "" for a serving engine's rows."""
    torch_rows = pd.Series(framework_of(df), dtype=object).astype(str).str.strip().str.lower() == "torch"
    return np.where(torch_rows.to_numpy(), TORCH_HARNESS, "").astype(object)
