"""How far apart two harnesses time the same kernel call: a floor under the MAPE any row-level predictor can
reach on aiconfigurator's tables, beside the held-out hybrid's MAPE on the same cells.

aiconfigurator's collectors time many shapes more than once on the same GPU: every framework's bf16/fp16
linear is one cuBLAS call through `torch.nn.functional.linear` (SGLang, vLLM, TensorRT-LLM's PyTorch flow), and
a framework's tables of two versions repeat a kernel source's shapes. Two such rows differ by the noise of
both measurements plus whatever their stacks changed per shape (each image's cuBLAS build and heuristics, a
kernel's revision or tactic choice between versions): no column says which. Version pairs therefore bound the
noise from above, and are the floor of a row from a version no table holds. Each pair of harnesses is joined
on the shape, the pair's median log ratio is divided out (a constant per harness a predictor can learn: the
version's or framework's offset), and the rest

    floor = mean |exp(log(t_a / t_b) - median) - 1| / sqrt(2)

estimates one row's share (exact for small Gaussian noise, as in `noise_floor.py`). A cell whose floor is
near a target cannot reach it by any model of the row's columns; far below it, the gap is the model's.

    python -m experiments.kernels.aic_noise_floor [--data ../shared/datasets] [--out experiments/results]

Writes aic_noise_floor.md. About three minutes (one leave-one-GPU-out run of `aiconfigurator_kernels`).
"""
from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import DATA, RESULTS
from hybridperf.aic_kernels import dtype_of
from hybridperf.aic_rows import DTYPE_COLUMNS, OPTIONAL, REQUIRED
from hybridperf.priors.moe import computes_remote_pairs

#: kernel sources whose bf16/fp16 GEMM is `torch.nn.functional.linear` (cuBLAS) in the framework's collector
TORCH_LINEAR = frozenset({"sglang", "sglang_torch_linear", "torch_flow", "torch.nn.functional.linear",
                          "vllm_default"})
HARNESS = ["framework", "version", "kernel_source"]
#: shape columns of a row besides its dtype (the MoE routing too: a power law draws other experts' loads)
EXTRA_SHAPE = {"moe": ("distribution",)}


def shape_columns(op: str) -> list[str]:
    """The columns that make two rows of `op` the same call (dtype columns left to the cell)."""
    return [c for c in (*REQUIRED[op], *OPTIONAL[op], *EXTRA_SHAPE.get(op, ())) if c not in DTYPE_COLUMNS[op]]


def same_call(a: tuple, b: tuple, op: str, dtype: str) -> str | None:
    """Why harnesses `a` and `b` (framework, version, kernel_source) run one call: `version` (one framework's
    kernel source in two versions whose collectors time the same work: not SGLang's MoE tables before and after
    0.5.14, `moe.WHOLE_TOKENS_BEFORE`), `cublas` (a bf16/fp16 linear through torch in both), else None."""
    if a[0] == b[0] and a[2] == b[2] and a[1] != b[1]:
        same_work = op != "moe" or computes_remote_pairs(a[0], a[1]) == computes_remote_pairs(b[0], b[1])
        return "version" if same_work else None
    if op == "gemm" and dtype in ("bfloat16", "float16") and a[2] in TORCH_LINEAR and b[2] in TORCH_LINEAR:
        return "cublas"
    return None


def pair_errors(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (system, op, dtype, kind of pair): shapes timed by both harnesses of a same-call pair, the raw
    MAPE of one against the other, and the floor after each harness pair's median log ratio is divided out."""
    rows = rows.assign(dtype=dtype_of(rows))
    out = []
    for (system, op, dt), cell in rows.groupby(["system", "op_name", "dtype"], observed=True):
        shape = shape_columns(str(op))
        med = cell.groupby([*HARNESS, *shape], observed=True)["latency_ms"].median().rename("t").reset_index()
        by_harness = {h: g.set_index(shape)["t"] for h, g in med.groupby(HARNESS, observed=True)}
        for a, b in itertools.combinations(sorted(by_harness), 2):
            kind = same_call(a, b, str(op), str(dt))
            if kind is None:
                continue
            ta, tb = by_harness[a].align(by_harness[b], join="inner")
            if len(ta) < 10:
                continue
            lr = np.log(ta.to_numpy() / tb.to_numpy())
            out.append({"system": system, "op": op, "dtype": dt, "pair": kind, "shapes": len(lr),
                        "raw": np.abs(np.exp(lr) - 1), "centred": np.abs(np.exp(lr - np.median(lr)) - 1)})
    if not out:
        return pd.DataFrame(columns=["system", "op", "dtype", "pair", "harness_pairs", "shapes", "raw_mape",
                                     "floor"])
    pairs = pd.DataFrame(out)

    def pooled(g: pd.DataFrame) -> pd.Series:
        return pd.Series({"harness_pairs": len(g), "shapes": int(g["shapes"].sum()),
                          "raw_mape": float(np.concatenate(g["raw"].to_list()).mean() * 100),
                          "floor": float(np.concatenate(g["centred"].to_list()).mean() * 100 / np.sqrt(2))})

    return pairs.groupby(["system", "op", "dtype", "pair"], observed=True).apply(pooled).reset_index()


def with_hybrid(floors: pd.DataFrame, res: pd.DataFrame) -> pd.DataFrame:
    """`floors` beside the held-out hybrid's MAPE per (system, op, dtype) (`aiconfigurator_kernels.run`'s rows,
    log errors in `hybrid`) and whether the cell's floor leaves room for 10%."""
    from experiments.kernels.aiconfigurator_kernels import ape

    mape = pd.Series(ape(res["hybrid"]), index=res.index).groupby([res["system"], res["op"], res["dtype"]]).mean()
    out = floors.merge(mape.rename("hybrid_mape").reset_index(), on=["system", "op", "dtype"], how="left")
    out["verdict"] = np.where(out["floor"] >= 10, "floor over 10%",
                              np.where(out["hybrid_mape"] - out["floor"] > 2, "model's error", "near floor"))
    return out


def report(tab: pd.DataFrame) -> str:
    room = tab[tab["verdict"] == "model's error"]
    return "\n".join([
        "# How far apart two harnesses time the same call (aiconfigurator kernels)", "",
        "Reproduce: `python -m experiments.kernels.aic_noise_floor` (method in the module's docstring).", "",
        "Pairs: `cublas`, a bf16/fp16 GEMM timed by two frameworks' collectors through `torch.nn.functional.linear`;"
        " `version`, one framework's kernel source timed by two of its versions. `raw_mape`: one harness's row as the"
        " other's prediction; `floor`: the same after each harness pair's median offset is divided out, / sqrt(2)"
        " (one row's share). `hybrid_mape`: the held-out hybrid on the cell's rows (`aiconfigurator_kernels`, every"
        " GPU held out in turn).", "",
        f"{len(room)} of {len(tab)} cells with such pairs sit more than 2 points above their floor (the model's error);"
        f" {int((tab['verdict'] == 'floor over 10%').sum())} have a floor over 10%.", "",
        tab.round(1).to_markdown(index=False), ""])


def main() -> None:
    from experiments.kernels import aiconfigurator_kernels as aic

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args()
    rows = aic.load_kernels(a.data, systems=aic.SYSTEMS)
    floors = pair_errors(rows)
    res = aic.run(aic.T.sample(rows, aic.T.TRAIN_ROWS))
    tab = with_hybrid(floors, res)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "aic_noise_floor.md").write_text(report(tab))
    print(tab.round(1).to_string(index=False))


if __name__ == "__main__":
    main()
