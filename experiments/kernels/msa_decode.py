"""MiniMax-M3's block-sparse attention (MSA) in decode (issue 57): how serving's pricing of a layer grows with the
context against aiconfigurator's `msa_generation_module` tables (B200; vLLM 0.24 and SGLang 0.5.16; bf16 weights and
cache; 16 query heads a rank, TP 4). Nothing is fitted on these tables: serving prices a sparse layer's attention over
its 2,176 attended keys and its index scan over every cached 16-bit index key (`serving.block_sparse`), the 2x
bytes-per-key rule of thumb the tables show at long contexts. Beside it, serving's pricing before (attention capped
at 2,176 keys, no index scan). The module's time at one cached token is subtracted from both, so the projections and
fixed kernels (priced elsewhere) drop out.

    python -m experiments.kernels.msa_decode --data ../shared/datasets --out experiments/results/msa_decode.md
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import aic_table_args, ape
from hybridperf.devices import get_device
from hybridperf.serving.api import Worker, setup_cost
from hybridperf.serving.arch import arch_from_dict
from hybridperf.serving.cost import Parallel
from hybridperf.serving.engines import get_engine

TABLES = {"vllm": "b200_sxm/msa/vllm/0.24.0", "sglang": "b200_sxm/msa/sglang/0.5.16"}
HEADS, TP = 16, 4
BATCHES = (1, 16, 64, 256)
STEPS = (2048, 8192, 32768, 131072)
BIG_US = 50.0


def growth(data: Path) -> pd.DataFrame:
    """Measured and priced growth of one layer's decode time from one cached token to `step`, per engine and
    batch (us)."""
    cfg = json.loads((data / "aiconfigurator" / "model_configs" / "MiniMaxAI--MiniMax-M3_config.json").read_text())
    arch = arch_from_dict(cfg, "MiniMax-M3")
    every = replace(arch, block_sparse=replace(arch.block_sparse, dense_layers=0, sparse_layers=arch.layers))
    device, rows = get_device("b200_sxm"), []
    for engine, folder in TABLES.items():
        t = pd.read_parquet(data / "aiconfigurator" / "systems" / "data" / folder
                            / "msa_generation_module_perf.parquet")
        t = t[(t["kv_cache_dtype"] == "bfloat16") & (t["gemm_type"] == "bfloat16") & (t["num_heads"] == HEADS)]
        t = t.groupby(["batch_size", "step"])["latency"].min()
        costs = {name: setup_cost(a, device, get_engine(engine), Worker(Parallel(tp=TP, moe_tp=TP), precision="fp8"),
                                  16384, 8, 1024, 128)[0] for name, a in (("now", every),
                                                                        ("before", replace(arch, block_sparse=None)))}
        for b in BATCHES:
            steps = t.loc[b].index.to_numpy()
            for s in STEPS:
                near = steps[np.argmin(np.abs(steps - s))]  # vLLM's table steps are 2^k - 1
                if abs(near - s) > 1:
                    continue
                row = {"engine": engine, "batch": b, "cached_tokens": int(near),
                       "measured_us": (t.loc[(b, near)] - t.loc[(b, steps.min())]) * 1e3}
                for name, c in costs.items():
                    row[f"{name}_us"] = (c.decode_attn_ms(b * near, b) - c.decode_attn_ms(b * steps.min(), b)) \
                        / arch.layers * 1e3
                rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    a = aic_table_args(__doc__, "msa_decode.md")
    df = growth(a.data)
    df["now_ape"], df["before_ape"] = ape(df["now_us"], df["measured_us"]), ape(df["before_us"], df["measured_us"])
    big = df[df["measured_us"] >= BIG_US]
    cols = ["now_ape", "before_ape"]
    long = big.groupby("engine")[cols].mean().rename(columns=lambda c: f"{c}_long")
    summary = df.groupby("engine")[cols].mean().join(long).round(1)
    a.out.write_text(f"""# MiniMax-M3's block-sparse attention in decode: growth with the context

Reproduce: `python -m experiments.kernels.msa_decode --data ../shared/datasets` (B200 `msa_generation_module`
tables, bf16, {HEADS} query heads a rank; one layer's decode time at the cached tokens less its time at one, against
serving's pricing now and before; nothing fitted on these tables).

MAPE % over the rows below, now and before, and (`_long`) over those whose growth is at least {BIG_US:.0f} us (a long
context at a batch; one sequence's scan runs on few SMs and reads its keys below the DRAM rate serving charges):

{summary.to_markdown()}

{df.round(1).to_markdown(index=False)}
""")
    print(df.round(1).to_string(index=False))


if __name__ == "__main__":
    main()
