"""`predict-kernels` on aiconfigurator rows refuses what the priors cannot price, with one line naming the
row and column, rather than pricing a guess."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from conftest import assert_one_line_error
from hybridperf.aic_kernels import prior_terms, validate
from hybridperf.devices import get_device
from test_bad_inputs import cli

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "aiconfigurator" / "systems" / "data"
H100 = get_device("NVIDIA H100 80GB HBM3")
GEMM = {"op_name": "gemm", "m": 8192, "n": 8192, "k": 8192, "gemm_dtype": "bfloat16"}
MOE = {"op_name": "moe", "num_tokens": 64, "hidden_size": 4096, "inter_size": 1536, "topk": 2, "num_experts": 8,
       "moe_dtype": "bfloat16"}


def _predict(monkeypatch, capsys, tmp_path, rows, device="h100_sxm", *extra, name="rows.csv"):
    """(exit code, stderr, output path) of predict-kernels on `rows` written as CSV (or parquet by `name`)."""
    inp, out = tmp_path / name, tmp_path / "out.csv"
    frame = pd.DataFrame(rows)
    frame.to_parquet(inp) if name.endswith(".parquet") else frame.to_csv(inp, index=False)
    code, _, err = cli(monkeypatch, capsys, ["predict-kernels", inp, "--device", device, "--output", out, *extra])
    return code, err, out


@pytest.mark.parametrize("rows, name, where", [
    ([{**GEMM, "m": True}], "rows.csv", "m (row 1, got True)"),
    ([{**GEMM, "m": True}], "rows.parquet", "m (row 1, got True)"),
    ([GEMM, {**GEMM, "m": 8.5}], "rows.csv", "whole number m (row 2, got 8.5)"),
    ([{**GEMM, "gemm_dtype": "fp7"}], "rows.csv", "gemm_dtype is none the priors know (bf16, bfloat16"),
    ([{**MOE, "distribution": "zipf"}], "rows.csv", "distribution 'zipf'"),
    ([{**MOE, "moe_ep_size": 3}], "rows.csv", "moe_ep_size dividing num_experts (row 1, got 3)"),
    ([{**GEMM, "latency": 1.0}, {**GEMM, "latency": -1}], "rows.csv", "latency"),
    ([{"op_name": "context_attention", "batch_size": 1, "isl": 128, "num_heads": 8, "num_key_value_heads": 8,
       "head_dim": 128, "attn_dtype": "fp7"}], "rows.csv", "attn_dtype is none the priors know"),
])
def test_rows_the_priors_cannot_price_are_refused(monkeypatch, capsys, tmp_path, rows, name, where):
    """Each was priced before (True as 1, 8.5, fp7 as bf16, zipf as balanced, EP 3 of 8 experts) or dropped from
    the score (latency -1); now one line naming the row and column, and no output file."""
    code, err, out = _predict(monkeypatch, capsys, tmp_path, rows, name=name)
    assert_one_line_error(code, err)
    assert where in err and "row" in err, err
    assert not out.exists()


def test_blank_cells_and_collected_float_names_still_predict():
    """A blank latency is a row to predict, `collect`'s float32 rows price (as bf16, noted), EPLB power laws
    route as balanced."""
    rows = validate(pd.DataFrame([{**GEMM, "latency": None, "gemm_dtype": "float32"},
                                  {**MOE, "moe_ep_size": 4, "distribution": "power_law_1.2_eplb", "latency": 0.1}]))
    assert len(prior_terms(rows, H100)) == 2


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/datasets/aiconfigurator not found")
@pytest.mark.parametrize("table", ["gemm/sglang/0.5.6.post2/gemm_perf.parquet", "moe/sglang/0.5.14/moe_perf.parquet",
                                   "attention/trtllm/1.3.0rc20/context_attention_perf.parquet",
                                   "attention/vllm/0.24.0/generation_attention_perf.parquet"])
def test_real_tables_stay_valid(table):
    """aiconfigurator's own values (its dtype names, `power_law_1.2`, `balanced`, whole sizes, latencies) pass."""
    df = pd.read_parquet(SHARED / "h100_sxm" / table)
    rows = validate(df, table)
    assert len(rows) == len(df)
