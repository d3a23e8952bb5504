"""aiconfigurator's perf-table rows as the kernel priors read them: the columns each op carries, the values
the priors can price, and `validate`, which refuses the rest with one line naming the row and column rather
than pricing a guess (docs/aiconfigurator-kernels.md)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from hybridperf.datasets.aic_collector import FLOAT_DTYPES
from hybridperf.datasets.schema import shown
from hybridperf.devices import dtype_key
from hybridperf.errors import InputError, UnknownDeviceError
from hybridperf.priors.llm_gemm import GEMM_DTYPES
from hybridperf.priors.moe import distribution_alpha

OPS = ("gemm", "context_attention", "generation_attention", "moe")
#: columns each op's rows must carry (aiconfigurator's names)
REQUIRED = {
    "gemm": ("m", "n", "k", "gemm_dtype"),
    "context_attention": ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim"),
    "generation_attention": ("batch_size", "num_heads", "num_key_value_heads", "head_dim", "step"),
    "moe": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_dtype"),
}
NUMERIC = ("m", "n", "k", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "step",
           "window_size", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
           "moe_ep_size")
TEXT = ("gemm_dtype", "moe_dtype", "attn_dtype", "kv_cache_dtype", "distribution", "kernel_source", "framework",
        "version")
DEFAULTS = {"window_size": 0, "step": 0, "isl": 1, "moe_tp_size": 1, "moe_ep_size": 1,
            "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "distribution": "balanced", "kernel_source": ""}
#: numeric columns each op reads besides its REQUIRED ones (DEFAULTS fills them where absent)
OPTIONAL = {"gemm": (), "context_attention": ("step", "window_size"), "generation_attention": ("isl", "window_size"),
            "moe": ("moe_tp_size", "moe_ep_size")}
#: of the sizes, those that may be 0: no cached prefix, no sliding window
MAY_BE_ZERO = ("step", "window_size")
#: the column naming each op's dtype: the GEMM and MoE priors read `GEMM_DTYPES`, attention `attn_key`
DTYPE_COLUMNS = {"gemm": ("gemm_dtype",), "moe": ("moe_dtype",),
                 "context_attention": ("attn_dtype", "kv_cache_dtype"),
                 "generation_attention": ("attn_dtype", "kv_cache_dtype")}
#: aiconfigurator's attention dtype names that are another's (FMHAQuantMode.fp8_block: SGLang's wide-EP fp8)
ATTN_DTYPE_ALIASES = {"fp8_block": "fp8"}
#: dtype names each op's prior takes: the GEMM and MoE priors `GEMM_DTYPES`, attention aiconfigurator's attention
#: and KV-cache names (FMHAQuantMode, KVCacheQuantMode); each also the float names `collect --schema
#: aiconfigurator` writes (float32, bf16, ...), float32 priced as bfloat16 with a widened interval (the CLI says so)
_MATMUL_NAMES = frozenset(GEMM_DTYPES) | frozenset(FLOAT_DTYPES)
_ATTN_NAMES = frozenset({"bfloat16", "float16", "fp8", "fp8_block", "int8"}) | frozenset(FLOAT_DTYPES)
DTYPE_NAMES = {"gemm": _MATMUL_NAMES, "moe": _MATMUL_NAMES, "context_attention": _ATTN_NAMES,
               "generation_attention": _ATTN_NAMES}


def matmul_kin(name) -> str:
    """The GEMM/MoE dtype a row of `name` is priced as: itself where the prior models it (or a float name,
    `collect`'s), else the modelled quant mode its name reads as (aiconfigurator adds modes): 4-bit weights under
    16-bit math (`mxfp4_wo`, `w4a16_*`, `int4_awq`) as a weight-only 4-bit mode, 8-bit ones (`fp8_wo`, `w8a16`) as
    `int8_wo`, 4-bit weights under 8-bit math (`w4a8_*`, `w4afp8_*`) as `w4a8_mxfp4_mxfp8` or `w4afp8`, a 4-bit
    float as `nvfp4`, `mxfp8` as `fp8_block`, another fp8 as `fp8`, int8 as `sq`; else "" (refused). The row's
    interval widens for a dtype no training system ran, as it keeps its own name there."""
    s = str(name).strip().lower()
    if s in _MATMUL_NAMES:
        return s
    four = "fp4" in s or "int4" in s or s.startswith("w4")
    eight_bit_math = "a8" in s or "fp8" in s
    weight_only = "wo" in s.split("_") or s.startswith(("w4a16", "w8a16")) or ("int4" in s and not eight_bit_math)
    if weight_only:
        return ("w4a16_mxfp4" if "mx" in s else "nvfp4_wo" if "nv" in s else "int4_wo") if four else "int8_wo"
    if four and (eight_bit_math or s.startswith(("w4a8", "w4afp8"))):
        return "w4a8_mxfp4_mxfp8" if "fp4" in s else "w4afp8"
    if "fp4" in s:
        return "nvfp4"
    if "fp8" in s:
        return "fp8_block" if "block" in s or "mx" in s else "fp8"
    if "int8" in s or s.startswith("w8"):
        return "sq"
    return ""


#: attention prior keys an attention or KV-cache dtype may price as: the names of `_ATTN_NAMES`, and a 4-bit cache
#: (TensorRT-LLM's NVFP4 KV cache on Blackwell), read at its bytes
_ATTN_KEYS = frozenset({"bf16", "fp16", "fp32", "fp8", "int8", "fp4", "int4"})


def attn_kin(name) -> str | None:
    """The attention prior's key an attention or KV-cache dtype `name` is priced as: `attn_key`'s where it is one
    of `_ATTN_KEYS`, else fp8 for a name of an 8-bit float no spelling table holds (`mxfp8`, `fp8_e4m3`), else
    None (refused)."""
    key = attn_key(name)
    if key in _ATTN_KEYS:
        return key
    s = str(name).strip().lower()
    return "fp8" if key is None and ("fp8" in s or "e4m3" in s or "e5m2" in s) else None


def _numbers(s: pd.Series) -> np.ndarray:
    """A column's cells as float64, NaN where a cell is blank, text or True/False (pandas would read True
    as 1, a size no one meant)."""
    if pd.api.types.is_bool_dtype(s):
        return np.full(len(s), np.nan)
    if pd.api.types.is_numeric_dtype(s):
        return s.to_numpy(dtype=np.float64, na_value=np.nan)
    cells = s.astype(object)
    flags = np.fromiter((isinstance(v, (bool, np.bool_)) for v in cells), bool, len(cells))
    return pd.to_numeric(cells.where(~flags), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _refuse(df: pd.DataFrame, source: str, bad: np.ndarray, what: str, col: str | None = None) -> None:
    """One-line InputError on the first row of `bad`: what it needs, its row (1-based) and its `col` cell as
    written."""
    if bad.any():
        i = int(np.argmax(bad))
        got = f", got {shown(df[col].iloc[i])}" if col in df else ""
        raise InputError(f"{source}: {what} (row {i + 1}{got})")


def attn_key(name) -> str | None:
    """The attention prior's short key (bf16, fp8, ...) of a dtype name (ATTN_DTYPE_ALIASES, or any
    spelling `dtype_key` reads), None for a name it does not know."""
    try:
        return dtype_key(ATTN_DTYPE_ALIASES.get(str(name), str(name)))
    except UnknownDeviceError:
        return None


def validate(df: pd.DataFrame, source: str = "input") -> pd.DataFrame:
    """A copy of the rows with every column the priors read, numeric ones as float64. One-line InputError,
    naming the row and column, on what they cannot price rather than a guess: an unknown op or routing
    distribution, a dtype whose name reads as none the priors model (`matmul_kin`), a missing column, a size
    that is not a positive whole number (`step`, `window_size`: non-negative; True/False is no size), MoE
    experts that EP does not split evenly, a `latency` neither blank nor positive and finite (it would leave
    the score silently)."""
    if "op_name" not in df:
        raise InputError(f"{source}: no op_name column")
    out = df.copy()
    ops = out["op_name"].astype(str).str.strip().str.lower()
    bad = sorted(set(ops) - set(OPS))
    if bad:
        raise InputError(f"{source}: unknown op_name {bad[:3]}; expected one of {list(OPS)}")
    out["op_name"] = ops.to_numpy()
    for op in set(ops):
        missing = [c for c in REQUIRED[op] if c not in out]
        if missing:
            raise InputError(f"{source}: {op} rows need columns {missing}")
    for c, v in DEFAULTS.items():
        if c not in out:
            out[c] = v
        else:  # a blank cell takes the default, but in a column its op requires (a decode's `step`): refused below
            required = ops.isin([op for op, cols in REQUIRED.items() if c in cols]).to_numpy()
            out[c] = out[c].where(out[c].notna() | required, v)
    for c in TEXT:
        if c in out:  # a blank or whitespace-only cell takes DEFAULTS' value ("" for a GEMM/MoE dtype: bf16, widened)
            s = out[c].astype(object)
            s = s.where(s.notna(), "").astype(str).str.strip()
            out[c] = s.where(s != "", DEFAULTS.get(c, ""))
    for c in sorted({c for cols in DTYPE_COLUMNS.values() for c in cols} & set(out.columns)):  # `BF16 `: bfloat16
        out[c] = out[c].str.lower().map(lambda v: FLOAT_DTYPES.get(v, v))  # as the tables spell them
    for c in NUMERIC:
        out[c] = _numbers(out[c]) if c in out else np.nan
    for op in sorted(set(ops)):
        m = (ops == op).to_numpy()
        for c in [*(c for c in REQUIRED[op] if c in NUMERIC), *OPTIONAL[op]]:
            v = out[c].to_numpy()
            sign = "non-negative" if c in MAY_BE_ZERO else "positive finite"
            _refuse(df, source, m & ~(np.isfinite(v) & ((v >= 0) if c in MAY_BE_ZERO else (v > 0))),
                    f"{op} rows need a {sign} {c}", c)
            _refuse(df, source, m & (v != np.floor(v)), f"{op} rows need a whole number {c}", c)
        for c in DTYPE_COLUMNS[op]:  # a blank cell is priced as bf16, its interval widened
            names = out[c].to_numpy()
            kin = matmul_kin if op in ("gemm", "moe") else attn_kin
            unknown = [d for d in set(names[m].tolist()) if d != "" and d not in DTYPE_NAMES[op] and not kin(d)]
            _refuse(df, source, m & np.isin(names, unknown),
                    f"{op} rows' {c} is none the priors know ({', '.join(sorted(DTYPE_NAMES[op]))}"
                    + (", or a quant mode naming fp8, fp4, int8 or int4" if op in ("gemm", "moe") else
                       ", fp4, int4, or a name of an fp8 format") + ")", c)
    attn = ops.str.endswith("_attention").to_numpy()
    moe = (ops == "moe").to_numpy()
    h, kv, e, k, ep, tp, inter = (out[c].to_numpy() for c in ("num_heads", "num_key_value_heads", "num_experts",
                                                                "topk", "moe_ep_size", "moe_tp_size", "inter_size"))
    with np.errstate(invalid="ignore"):  # the other ops' rows are NaN there
        _refuse(df, source, attn & ((kv > h) | (np.mod(h, kv) != 0)),
                "num_key_value_heads must be a whole number dividing num_heads", "num_key_value_heads")
        _refuse(df, source, moe & ((k > e) | (ep > e)), "moe rows need topk and moe_ep_size no larger than num_experts")
        _refuse(df, source, moe & (np.mod(e, ep) != 0), "moe rows need a moe_ep_size dividing num_experts",
                "moe_ep_size")
        _refuse(df, source, moe & (np.mod(inter, tp) != 0), "moe rows need a moe_tp_size dividing inter_size",
                "moe_tp_size")
    names = out["distribution"].to_numpy()
    for name in sorted(set(names[moe].tolist())):
        try:
            distribution_alpha([name])
        except ValueError as err:
            _refuse(df, source, moe & (names == name), str(err))
    if "latency" in df:
        written = df["latency"].notna().to_numpy() & (df["latency"].astype(str).str.strip() != "").to_numpy()
        y = _numbers(df["latency"])
        _refuse(df, source, written & ~(np.isfinite(y) & (y > 0)),
                "latency must be blank or a positive, finite number of ms", "latency")
    return out
