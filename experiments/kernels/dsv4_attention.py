"""DeepSeek-V4's attention module, leave-one-GPU-out (issues 57, 58): serving's pricing of one layer's attention
(`hybridperf.serving.compressed`) against aiconfigurator's `dsv4_{csa,hca}_generation_module` tables of the H100 and the
B200 (SGLang 0.5.14, vLLM 0.24, TensorRT-LLM 1.3: a CUDA-graph replay of one layer's `self_attn`, its Q/KV projections,
norms, RoPE, cache store, compressor, CSA's indexer and top-k, FlashMLA and the output projection), each GPU scored with
constants fitted on the other only: `CompressedConstants` (the module's small kernels and activation passes), the sparse
kernels' (`dsa_attention.fit_on`) and the attention prior's (`attention_prior.fit_on`). Beside it, serving's pricing
before: projections plus a per-entry read of the attended entries and the index scan, no kernel floors. The
`dsv4_*_context_module` tables (prefill chunks after a prefix) are scored the same way, with nothing fitted on them; the
`mhc_module` tables (a layer's hyper-connections, B200, H100, L40S) against serving's elementwise pricing, its kernel
floors read off the other systems.

    python -m experiments.kernels.dsv4_attention --data ../shared/datasets --out experiments/results/dsv4_attention.md
    python -m experiments.kernels.dsv4_attention --data ../shared/datasets --write-constants   # fit on both GPUs

Columns: `num_heads` query heads on the rank (the model's over `tp_size`), `batch_size` sequences of `isl` new tokens
after `step` cached ones, `compress_ratio` 4 (CSA) or 128 (HCA), `gemm_type` the projections' dtype, `latency` ms.
"""
from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from experiments.common import aic_table_args, ape, module_tables
from experiments.kernels import attention_prior, dsa_attention
from hybridperf.devices import get_device
from hybridperf.priors.attention import CONSTANTS as ATTENTION_CONSTANTS
from hybridperf.priors.attention import AttentionConstants, Fitted, generation_attention_ms
from hybridperf.priors.memory import memory_time_ms
from hybridperf.priors.mla import SparseMlaConstants
from hybridperf.serving import compressed as C
from hybridperf.serving.arch import arch_from_dict
from hybridperf.serving.compressed import HC_KERNELS
from hybridperf.serving.cost import ELEMENTWISE_KERNELS, ELEMENTWISE_PASSES, _bmm, _gemm, kernel_floor_ms

SYSTEMS = dsa_attention.SYSTEMS
MODELS = {"flash": "deepseek-ai--DeepSeek-V4-Flash_config.json", "pro": "deepseek-ai--DeepSeek-V4-Pro_config.json"}
PARAMS = tuple(f.name for f in fields(C.CompressedConstants))
SCRIPT = "experiments/kernels/dsv4_attention.py"


def load_tables(data: Path, mode: str = "generation") -> pd.DataFrame:
    """Every system's CSA and HCA module tables of `mode` (generation or context), with the model's geometry key."""
    df = module_tables(data, "sparse_attention", f"dsv4_*_{mode}_module_perf.parquet", SYSTEMS)
    df["model_key"] = np.where(df["model"].str.contains("Pro"), "pro", "flash")
    df["kind"] = df["compress_ratio"].map({4: "CSA", 128: "HCA"})
    return df


def layers(data: Path) -> dict:
    """One layer of each compress ratio per model: (its CompressedAttention, the model's Arch)."""
    out = {}
    for key, name in MODELS.items():
        arch = arch_from_dict(json.loads((data / "aiconfigurator" / "model_configs" / name).read_text()), name)
        for r in (4, 128):
            out[key, r] = (replace(arch.compressed, ratios=(r,)), arch)
    return out


def components(df: pd.DataFrame, geo: dict, sparse: SparseMlaConstants, decode: bool,
               attention: AttentionConstants = ATTENTION_CONSTANTS) -> pd.DataFrame:
    """Per row: the GEMMs (serving's `_gemm` pricing); the attention, indexer and top-k kernels as serving prices
    them (`kernels`: `decode_ms`, or `prefill_ms` a launch per sequence's chunk, as its scheduler does) and with the
    batch's chunks in one launch (`one_launch`); the kernel floor; each `CompressedConstants` field's share at 1 (the
    others 0); and serving's pricing before (`old`: a per-entry read of the attended entries and the index scan; a
    prefill without the top-k selection)."""
    cols = ["gemm", "kernels", "one_launch", "old", "floor", *PARAMS]
    out = pd.DataFrame(index=df.index, columns=cols, dtype=float)
    keys = ["system", "model_key", "compress_ratio", "tp_size", "gemm_type"]
    for (sysname, mk, r, tp, gt), g in df.groupby(keys):
        dev, (layer, arch) = get_device(sysname), geo[mk, r]
        dtype = "fp8" if gt == "fp8_block" else "bfloat16"
        heads = arch.heads / tp
        tokens = (g["batch_size"] * g["isl"]).to_numpy(dtype=float)
        gemm = layer.projections_ms(tokens, arch.hidden, arch.heads, tp, dtype, dev, _gemm, _bmm)
        floor = kernel_floor_ms(dev)
        for p in PARAMS:
            unit = C.CompressedConstants(*(Fitted(float(q == p), "", "") for q in PARAMS))
            out.loc[g.index, p] = layer.module_ms(tokens, arch.hidden, heads, dev, floor, unit)
        kern, once, old, chunks = [], [], [], {}
        per_entry = float(generation_attention_ms(1, 1e6, heads, 1, layer.head_dim, dev, kv_dtype="fp8",
                                                  xqa_fallback=False, constants=attention)) / 1e6 / 2
        kw = {"sparse": sparse, "constants": attention}
        for b, isl, step in g[["batch_size", "isl", "step"]].itertuples(index=False):
            if decode:
                kern.append(layer.decode_ms(b * step, int(b), heads, dev, "fp8", None, **kw))
                once.append(kern[-1])
                index = layer._index_ms(b * step / 4.0, b * step / 4.0, dev) if r == 4 else 0.0
                old.append(per_entry * b * float(layer.layer_entries(r, step)) + index)
                continue
            if (isl, step) not in chunks:  # a chunk's own launch, and before: less the top-k selection
                chunk = layer.prefill_ms(int(isl), int(step), heads, dev, "fp8", None, **kw)
                select = layer.select_ms(1, isl, step, dev, sparse) if r == 4 else 0.0
                chunks[isl, step] = chunk, chunk - select
            kern.append(b * chunks[isl, step][0])
            once.append(layer.prefill_ms(int(isl), int(step), heads, dev, "fp8", None, seqs=int(b), **kw))
            old.append(b * chunks[isl, step][1])
        out.loc[g.index, "gemm"], out.loc[g.index, "floor"] = gemm, floor
        out.loc[g.index, "kernels"], out.loc[g.index, "one_launch"] = kern, once
        out.loc[g.index, "old"] = gemm + np.asarray(old)
    return out


def prediction(comp: pd.DataFrame, consts: C.CompressedConstants, kernels: str = "kernels") -> np.ndarray:
    x = np.array([getattr(consts, p).value for p in PARAMS])
    return (comp["gemm"] + comp[kernels]).to_numpy() + comp[list(PARAMS)].to_numpy() @ x


def fit(df: pd.DataFrame, comp: pd.DataFrame, source: str) -> C.CompressedConstants:
    """The module constants by soft-L1 least squares on log(predicted / measured) over `df`'s rows."""
    base, feats = (comp["gemm"] + comp["kernels"]).to_numpy(), comp[list(PARAMS)].to_numpy()
    y = df["latency"].to_numpy()
    r = least_squares(lambda x: np.log((base + feats @ x) / y), [10.0] * len(PARAMS), bounds=(0.0, np.inf),
                      loss="soft_l1", f_scale=0.1)
    units = [getattr(C.MODULE_CONSTANTS, p).unit for p in PARAMS]
    return C.CompressedConstants(*(Fitted(round(float(v), 3), u, source, SCRIPT) for v, u in zip(r.x, units)))


def evaluate(gen: pd.DataFrame, ctx: pd.DataFrame, geo: dict, attn: pd.DataFrame, topk: pd.DataFrame,
             dense: pd.DataFrame):
    """Per held-out GPU: decode rows by framework, kind and batch band, and prefill rows by kind, sequences and
    tokens, today's pricing beside serving's before, every constant fitted without the held-out GPU: the module's,
    the sparse kernels' (`dsa_attention.fit_on`) and the dense attention prior's (`attention_prior.fit_on` on
    `dense`, its tables; prefill attention and the before column's per-entry reads)."""
    cells, fits = [], {}
    present = sorted(set(gen["system"]))
    for held in present:
        others = [s for s in present if s != held]
        sparse = dsa_attention.fit_on(attn, topk, others)
        attention = attention_prior.fit_on(dense, [s for s in attention_prior.SYSTEMS if s != held])
        train = gen[gen["system"].isin(others)]
        consts = fits[held] = fit(train, components(train, geo, sparse, True, attention), ", ".join(others))
        for table, decode in ((gen, True), (ctx, False)):
            test = table[table["system"] == held]
            comp = components(test, geo, sparse, decode, attention)
            test = test.assign(now=prediction(comp, consts), once=prediction(comp, consts, "one_launch"),
                               before=comp["old"].to_numpy())
            if decode:
                band = pd.cut(test["batch_size"], [0, 8, 64, 256, 1 << 20], labels=["1-8", "16-64", "128-256", "512+"])
                keys = ["fw", "kind", band.rename("sequences")]
            else:
                seqs = pd.cut(test["batch_size"], [0, 1, 16, 1 << 20], labels=["1 seq", "2-16 seqs", "32+ seqs"])
                tok = test["batch_size"] * test["isl"]
                band = pd.cut(tok, [0, 2048, 1 << 40], labels=["<=2K tokens", ">2K tokens"])
                keys = ["kind", seqs.rename("sequences"), band.rename("tokens")]
            for key, g in test.groupby(keys, observed=True):
                cells.append({"held_out": held, "phase": "decode" if decode else "prefill",
                              "group": " ".join(str(k) for k in key), "rows": len(g),
                              "before_mape": float(np.mean(ape(g["before"], g["latency"]))),
                              "mape": float(np.mean(ape(g["now"], g["latency"]))),
                              "median_ratio": float(np.median(g["now"] / g["latency"])),
                              "one_launch_mape": np.nan if decode else float(np.mean(ape(g["once"], g["latency"])))})
    return pd.DataFrame(cells), fits


def load_mhc(data: Path) -> pd.DataFrame:
    """Every system's `mhc_module` tables: one layer's hyper-connection pre and post (both sites), summed per shape."""
    d = module_tables(data, "mhc", "mhc_module_perf.parquet", SYSTEMS)
    keys = ["system", "fw", "hidden_size", "hc_mult", "num_tokens"]
    d = d.pivot_table(index=keys, columns="op_name", values="latency", aggfunc="median").reset_index()
    return d.assign(latency=d["pre"] + d["post"]).dropna(subset=["latency"]).reset_index(drop=True)


def serving_elementwise(d: pd.DataFrame, kernels: float) -> np.ndarray:
    """Serving's elementwise work of a hyper-connected layer (`cost.ELEMENTWISE_PASSES` over every stream) at
    least `kernels` kernel floors."""
    out = np.zeros(len(d))
    for sysname, idx in d.groupby("system").indices.items():
        g, dev = d.iloc[idx], get_device(sysname)
        nbytes = g["num_tokens"] * g["hidden_size"] * 2.0 * ELEMENTWISE_PASSES * g["hc_mult"]
        out[idx] = np.maximum(memory_time_ms(nbytes.to_numpy(dtype=float), dev), kernels * kernel_floor_ms(dev))
    return out


def evaluate_mhc(d: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Per held-out system: the kernel floors a layer's mHC takes up to 16 tokens, read off the other systems'
    rows (their median), against serving's pricing with them and with the plain layer's ELEMENTWISE_KERNELS."""
    floors = d["latency"] / [kernel_floor_ms(get_device(s)) for s in d["system"]]
    cells, fits = [], {}
    for held in sorted(set(d["system"])):
        small = (d["system"] != held) & (d["num_tokens"] <= 16)
        fits[held] = float(np.median(floors[small]))
        test = d[d["system"] == held].reset_index(drop=True)
        test = test.assign(now=serving_elementwise(test, fits[held]),
                           before=serving_elementwise(test, ELEMENTWISE_KERNELS))
        band = pd.cut(test["num_tokens"], [0, 64, 1024, 1 << 40], labels=["1-64", "80-1024", ">1024"])
        for (fw, b), g in test.groupby(["fw", band.rename("tokens")], observed=True):
            cells.append({"held_out": held, "framework": fw, "tokens": b, "rows": len(g),
                          "before_mape": float(np.mean(ape(g["before"], g["latency"]))),
                          "mape": float(np.mean(ape(g["now"], g["latency"]))),
                          "median_ratio": float(np.median(g["now"] / g["latency"]))})
    return pd.DataFrame(cells), fits


def write_report(out: Path, cells: pd.DataFrame, fits: dict, mhc: pd.DataFrame, mhc_fits: dict) -> None:
    fit_lines = [f"- {h} held out: " + ", ".join(f"{p} {getattr(c, p).value:.1f}" for p in PARAMS)
                 + f" (fitted on {c.csa_kernels.source})" for h, c in fits.items()]
    summary = cells.groupby(["held_out", "phase"]).apply(
        lambda g: pd.Series({"rows": int(g["rows"].sum()),
                             "before_mape": np.average(g["before_mape"], weights=g["rows"]),
                             "mape": np.average(g["mape"], weights=g["rows"]),
                             "one_launch_mape": np.average(g["one_launch_mape"], weights=g["rows"])}),
        include_groups=False).reset_index()
    lines = ["# DeepSeek-V4 attention module, leave-one-GPU-out", "",
             "Reproduce: `python -m experiments.kernels.dsv4_attention --data ../shared/datasets --out "
             "experiments/results/dsv4_attention.md`", "",
             "aiconfigurator's `dsv4_{csa,hca}_{generation,context}_module` tables: one layer's whole attention module "
             "(DeepSeek-V4 Flash and Pro, TP 1-8, bf16 or fp8-block projections, FP8 cache). `mape`: serving's pricing "
             "(`hybridperf.serving.compressed`: GEMMs; decode, FlashMLA's sparse kernel over the attended entries; "
             "prefill, the dense attention prior windowed at each layer's attended keys, a launch per sequence's "
             "chunk as serving's scheduler prices it; CSA's indexer and top-k; `module_ms`'s kernels and passes), "
             "the module constants fitted on the other GPU's generation rows, the sparse kernels' and the attention "
             "prior's on the other GPUs' tables; `one_launch_mape`: a prefill batch's chunks in one launch, as the "
             "engines run them; "
             "`before_mape`: serving's pricing before it (decode: a per-entry read, no floors, no top-k; prefill: a "
             "launch per chunk, no top-k, no module kernels or passes). MAPE = mean "
             "|pred/measured - 1| in %; a median ratio above 1 is a prediction too slow.", "",
             "Constants per held-out GPU:", "", *fit_lines, "",
             summary.astype({"rows": int}).to_markdown(index=False, floatfmt=".1f"), "",
             cells.to_markdown(index=False, floatfmt=".2f"), "",
             "## Hyper-connections (`mhc_module`: a layer's mHC pre and post, both sites)", "",
             "Serving prices a hyper-connected layer's elementwise work as `cost.ELEMENTWISE_PASSES` over every stream "
             f"at least `compressed.HC_KERNELS` ({HC_KERNELS}) kernel floors (`before`: the plain layer's "
             f"{ELEMENTWISE_KERNELS}). Floors read off the other systems' rows up to 16 tokens: "
             + ", ".join(f"{h} held out {k:.1f}" for h, k in mhc_fits.items())
             + ". Past ~1K tokens serving's passes (the layer's other elementwise work too) meet the module's.", "",
             mhc.to_markdown(index=False, floatfmt=".2f"), ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))


def main() -> None:
    a = aic_table_args(__doc__, "dsv4_attention.md", "every GPU with a table")
    data = a.data
    geo, gen = layers(data), load_tables(data)
    attn, topk = dsa_attention.load_tables(data), dsa_attention.load_tables(data, dsa_attention.TOPK_TABLE)
    if a.write_constants:
        sparse = dsa_attention.fit_on(attn, topk, SYSTEMS)
        print(fit(gen, components(gen, geo, sparse, True), ", ".join(sorted(set(gen["system"])))))
        return
    cells, fits = evaluate(gen, load_tables(data, "context"), geo, attn, topk, attention_prior.load_tables(data))
    mhc, mhc_fits = evaluate_mhc(load_mhc(data))
    write_report(a.out, cells, fits, mhc, mhc_fits)
    print(cells.to_string(index=False))
    print(mhc.to_string(index=False))


if __name__ == "__main__":
    main()
