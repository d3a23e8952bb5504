"""`--rows`: predict a CSV of serving runs in aiconfigurator's `silicon_sample.csv` columns.

A row names an engine (`backend`), an HF id (`model_path`), a system (`system`), the weight precisions
(`gemm_quant_mode`, `moe_quant_mode`, else `precision`), ISL/OSL, and either one aggregated instance
(`tp_size`, `pp_size`, `attention_dp_size`, `moe_tp_size`, `moe_ep_size`, `batch_size` per attention-DP
rank) or prefill and decode workers (`prefill_*`, `decode_*`, `*_num_workers`). The concurrency of the
closed-loop benchmark is `silicon_concurrency=` in `silicon_data_source` when given (spread over instances
where it is a multiple of what one aggregated instance runs: `concurrency_of`), else the batch size times
the attention-DP ranks (times the decode workers). Optional `spec_tokens` and `acceptance` give the run's
speculative decoding; a row that leaves `spec_tokens` empty may have drafted with its checkpoint's MTP layers
(silicon_sample.csv's rows do not say), so its TPOT interval reaches down to that (`UNSTATED_MTP`).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from hybridperf.aic_rows import matmul_kin
from hybridperf.datasets.aic_collector import FLOAT_DTYPES
from hybridperf.errors import HybridperfError, InputError
from hybridperf.serving.api import Worker, node_for, predict_serving
from hybridperf.serving.calibration import Calibration
from hybridperf.serving.cost import (KV_DTYPE_BYTES, PRECISIONS, QUANT_MODES, KernelModels, Parallel, Speculation,
                                     default_kv_dtype)
from hybridperf.serving.checkpoint import kv_dtype_of_file
from hybridperf.serving.load import as_arch, resolve_config

REQUIRED = ("backend", "model_path", "system", "mode", "isl", "osl")
#: `interval_stratum`: the run's interval stratum (`calibration.STRATA`; its own quantiles where calibrated, else the
#: pooled ones; empty: none)
PRED_COLUMNS = ("pred_ttft_ms", "pred_ttft_lo_ms", "pred_ttft_hi_ms", "pred_tpot_ms", "pred_tpot_lo_ms",
                "pred_tpot_hi_ms", "reason", "interval_stratum")


def _empty(v) -> bool:
    """A cell that does not give a value: missing, NaN (pandas' empty cell) or ""."""
    return v is None or (isinstance(v, float) and math.isnan(v)) or v == ""


def _num(row, key, default=None):
    v = row.get(key)
    if _empty(v):
        return default
    try:
        return float(v)
    except (TypeError, ValueError):
        raise InputError(f"column {key!r}: not a number: {v!r}") from None


#: count columns whose 0 means "not given", as silicon_sample.csv writes them (dense runs, some vLLM runs)
ZERO_IS_EMPTY = ("moe_tp_size", "moe_ep_size")
MODES = ("agg", "disagg")


def _int(row, key, default=1) -> int:
    """A count column: `default` where the cell is empty (or 0 in a ZERO_IS_EMPTY column), else a positive
    whole number; InputError naming the column, since a 0 or a fraction read as something else would predict
    a run nobody made."""
    v = _num(row, key, None)
    zero_ok = key.removeprefix("prefill_").removeprefix("decode_") in ZERO_IS_EMPTY
    if v is None or (v == 0 and zero_ok):
        return default
    if not (v >= 1 and float(v).is_integer()):
        raise InputError(f"{key} must be a positive integer{' or 0 (not given)' if zero_ok else ''}, got {v:g}")
    return int(v)


def run_mode(row) -> str:
    """The row's mode, agg or disagg (case and spaces aside, as `backend`); an empty cell is agg, a run on one
    instance; anything else an InputError."""
    mode = row.get("mode")
    if _empty(mode):
        return "agg"
    mode = str(mode).strip().lower()
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def _mode_precision(name: str) -> str | None:
    """The CLI precision of a lower-case aiconfigurator quant-mode name (`QUANT_MODES`), or of the modelled mode a
    name no run here used reads as (`aic_rows.matmul_kin`: `mxfp8` as fp8, `bf16` as bfloat16); None for neither."""
    kin = name if name in QUANT_MODES else matmul_kin(name)
    return QUANT_MODES.get(FLOAT_DTYPES.get(kin, kin))


def row_precision(row, key) -> str:
    """The CLI precision of a row's `key` quantization column (`gemm_quant_mode`, `moe_quant_mode`), else of
    its `precision` column (a precision, or a quant mode's name), else bf16 (`_mode_precision`); InputError for
    a mode or precision not modelled."""
    mode = row.get(key)
    if isinstance(mode, str) and mode.strip():
        mode = mode.strip().lower()
        prec = _mode_precision(mode)
        if prec is None:
            raise InputError(f"unsupported {key} {mode!r}")
        return prec
    p = row.get("precision")
    if isinstance(p, str) and p.strip():
        p = p.strip().lower()
        prec = p if p in PRECISIONS else _mode_precision(p)
        if prec is None:
            raise InputError(f"unsupported precision {p!r}")
        return prec
    return "bf16"


#: a worker's parallelism columns (after the mode's prefix)
SIZE_COLUMNS = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")


def _worker(row, prefix: str, prec: str, moe_prec: str, kv: str, node_gpus: int) -> Worker:
    """The row's (prefix's) worker; each empty size 1, but a disaggregated worker with none given is refused:
    its GPUs are not said, and one GPU is no guess for a worker of a disaggregated deployment."""
    if prefix and all(_int(row, prefix + c, None) is None for c in SIZE_COLUMNS):  # none given (`_int`'s reading)
        raise InputError(f"a disaggregated row needs its {prefix.rstrip('_')} worker's sizes: "
                         f"{', '.join(prefix + c for c in SIZE_COLUMNS)} are all empty or 0")
    tp, adp = _int(row, f"{prefix}tp_size"), _int(row, f"{prefix}attention_dp_size")
    ep = _int(row, f"{prefix}moe_ep_size")
    moe_tp = _int(row, f"{prefix}moe_tp_size", 0)  # 0: not given
    if moe_tp:
        tp, adp, moe_tp, ep = _tp_times_ep(tp, adp, moe_tp, ep, node_gpus)
    if moe_tp * ep != tp * adp:
        moe_tp = max(tp * adp // ep, 1)
    return Worker(Parallel(tp=tp, pp=_int(row, f"{prefix}pp_size"), adp=adp, moe_tp=moe_tp, moe_ep=ep), prec,
                  moe_prec, KV_DTYPE_BYTES[kv])


#: GPUs beyond which a row's TP x attention-DP product is taken for the TP x EP pattern even inside one
#: NVLink domain (GB200/GB300 NVL72: 72 GPUs): the tables' runs use TP groups of at most 8
MAX_STAGE_GPUS = 8


def _tp_times_ep(tp: int, adp: int, moe_tp: int, ep: int, node_gpus: int) -> tuple[int, int, int, int]:
    """(tp, adp, moe_tp, ep) of an instance whose columns hold its TP x EP: one pipeline stage spans more GPUs
    than a node (or than 8 inside a rack-scale NVLink domain, `MAX_STAGE_GPUS`), which these exports' engines
    never ran as one tensor-parallel group. silicon_sample.csv writes runs so in two ways:
    - the TP (or attention-DP) column holds TP x EP, equal to the given moe_tp x ep, ep > 1 and moe_tp a
      multiple of ep (ids `..._tp8_ep8_...` with tp_size 64 and moe_tp_size 8 on the 8-GPU b200_sxm, their
      measurements repeated under tp_size 8). The EP ranks are then the stage's GPUs, each expert whole;
    - vLLM's runs with expert parallelism (ids `..._tp4_ep4_...`): the attention-DP column holds the EP
      (dividing the TP) and moe_ep_size TP x EP, moe_tp 1 (only vLLM rows have that shape; it is read so
      whatever the backend). vLLM splits the experts over the TP group's GPUs
      (`--enable-expert-parallel`), so the instance is `tp` GPUs with EP over them.
    Anything else is read as written."""
    gpus = tp * adp
    if gpus <= min(node_gpus, MAX_STAGE_GPUS) or ep < 2:
        return tp, adp, moe_tp, ep
    if moe_tp == 1 and ep == gpus and tp > 1 and adp > 1 and tp % adp == 0:
        return tp, 1, 1, tp
    if moe_tp < ep or moe_tp % ep or moe_tp * ep != gpus:
        return tp, adp, moe_tp, ep
    if tp > 1 and tp % ep == 0:
        tp //= ep
    elif adp % ep == 0:
        adp //= ep
    else:
        return tp, adp, moe_tp, ep
    return tp, adp, max(tp * adp // ep, 1), ep


def concurrency_of(row) -> int:
    """Requests in flight on one instance. An aggregated row's `batch_size` per attention-DP rank bounds what
    one instance runs, so a benchmark concurrency that is a multiple of `batch_size` x attention-DP ranks was
    served by that many instances side by side (each gets its share; queueing behind a full batch would have
    put seconds into TTFTs measured at well under one)."""
    m = re.search(r"silicon_concurrency=(\d+)", str(row.get("silicon_data_source", "")))
    if run_mode(row) == "disagg":
        return int(m.group(1)) if m else \
            _int(row, "decode_batch_size") * _int(row, "decode_attention_dp_size") * _int(row, "decode_num_workers")
    per_instance = _int(row, "batch_size") * _int(row, "attention_dp_size")
    if not m:
        return per_instance
    total = int(m.group(1))
    if _num(row, "batch_size") and total > per_instance and total % per_instance == 0:
        return per_instance
    return total


#: the speculation a run of an MTP checkpoint (`Arch.mtp`) may have used where its row does not say: the engines'
#: DeepSeek MTP recipes chain three drafts (SGLang's --speculative-num-steps 3, TensorRT-LLM's
#: num_nextn_predict_layers 3), each accepted at the CLI's default rate. silicon_sample.csv's TensorRT-LLM
#: DeepSeek-R1 runs on B200 under 1.2.0rc6.post3 take 0.4-0.8x the TPOT of the same runs under post2 (0.8x at
#: concurrency 256, 0.5x at 4): speculation's shape, which no column records.
UNSTATED_MTP = Speculation(3, 0.7)


def row_speculation(row) -> Speculation | None:
    """The row's speculative decoding from `spec_tokens` (drafts per step, 0: none) and `acceptance` (default
    the CLI's); None where `spec_tokens` is empty (not stated)."""
    k = _num(row, "spec_tokens")
    if k is None:
        if not _empty(row.get("acceptance")):
            raise InputError("acceptance is given without spec_tokens")
        return None
    if not (k >= 0 and float(k).is_integer()):
        raise InputError(f"spec_tokens must be a non-negative integer, got {k:g}")
    spec = Speculation(int(k), _num(row, "acceptance", Speculation.acceptance))
    spec.check()
    return spec


def row_request(row: dict, config_dir, config=None) -> dict:
    """The `predict_serving` arguments of one row; InputError saying why a row cannot be modelled. `config` (a
    config path): the model every row runs, in place of its `model_path` looked up in `config_dir`."""
    engine = str(row.get("backend", "")).strip().lower()
    path = config if config is not None else resolve_config(str(row.get("model_path", "")), config_dir)
    prec, moe_prec = row_precision(row, "gemm_quant_mode"), row_precision(row, "moe_quant_mode")
    isl, osl = _int(row, "isl", None), _int(row, "osl", None)
    if isl is None or osl is None:
        raise InputError("isl and osl must be given")
    arch = as_arch(path)  # a missing config file is refused here
    kv = kv_dtype_of_file(str(Path(str(path)).resolve())) or default_kv_dtype(prec)  # what `auto` runs
    req = dict(config=arch, device=str(row.get("system")), engine=engine, isl=isl, osl=osl,
               concurrency=concurrency_of(row), precision=prec, moe_precision=moe_prec, kv_dtype=kv)
    spec = row_speculation(row)
    if spec is not None and spec.tokens:
        req.update(spec_tokens=spec.tokens, acceptance=spec.acceptance)
    node_gpus = node_for(req["device"]).gpus_per_node
    if run_mode(row) == "disagg":
        pw = _worker(row, "prefill_", prec, moe_prec, kv, node_gpus)
        dw = _worker(row, "decode_", prec, moe_prec, kv, node_gpus)
        req["disagg"] = (pw, _int(row, "prefill_num_workers", None), dw, _int(row, "decode_num_workers", None))
    else:
        w = _worker(row, "", prec, moe_prec, kv, node_gpus)
        req.update(tp=w.par.tp, pp=w.par.pp, ep=w.par.moe_ep, attention_dp=w.par.adp, moe_tp=w.par.moe_tp)
    return req


def _drafting_tpot_lo(req: dict, cal: Calibration, models) -> float:
    """TPOT's low bound had the run drafted as UNSTATED_MTP; infinite where such a run cannot be modelled (its
    drafts' KV does not fit), so that the row keeps the bound of the run it is predicted as."""
    try:
        return predict_serving(**req, spec_tokens=UNSTATED_MTP.tokens, acceptance=UNSTATED_MTP.acceptance,
                               calibration=cal, models=models).tpot.lo_ms
    except HybridperfError:
        return math.inf


def predict_rows(df: pd.DataFrame, config_dir, calibration: Calibration | None = None,
                 models: KernelModels | None = None, config=None) -> pd.DataFrame:
    """`df` plus PRED_COLUMNS; a row that cannot be modelled keeps empty predictions and gets a reason.
    `models`: the kernel and collective models (the shipped ones when None); `config`: see `row_request`."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise InputError(f"rows CSV lacks column(s) {', '.join(missing)}")
    if config is None and not Path(config_dir).is_dir():
        raise InputError(f"config directory not found: {config_dir}")
    if config is None and not any(Path(config_dir).glob("*_config.json")):  # the wrong folder: every row refused
        raise InputError(f"no model configs (<org>--<name>_config.json) in {config_dir}")
    cal = calibration or Calibration.load()
    out = {c: [] for c in PRED_COLUMNS}
    for row in df.to_dict("records"):
        try:
            req = row_request(row, config_dir, config)
            r = predict_serving(**req, calibration=cal, models=models)
            tpot_lo = r.tpot.lo_ms
            if req["config"].mtp and "disagg" not in req and _empty(row.get("spec_tokens")):  # not stated
                tpot_lo = min(tpot_lo, _drafting_tpot_lo(req, cal, models))
            vals = (r.ttft.ms, r.ttft.lo_ms, r.ttft.hi_ms, r.tpot.ms, tpot_lo, r.tpot.hi_ms, "", r.stratum)
        except HybridperfError as e:
            vals = (float("nan"),) * 6 + (str(e).replace("\n", " "), "")
        for c, v in zip(PRED_COLUMNS, vals):
            out[c].append(v)
    res = df.copy()
    for c in PRED_COLUMNS:
        res[c] = out[c]
    return res
