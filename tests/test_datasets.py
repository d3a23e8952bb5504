"""Dataset loaders: canonical-schema errors, NeuSight labels / layer graphs / predictions, Vidur
compute profiles, and `hybridperf data summary`."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from hybridperf.cli import data as data_cli
from hybridperf.datasets.labels import (
    device_from_folder,
    load_labels,
    load_layer_graph,
    load_neusight_predictions,
    parse_run_name,
)
from hybridperf.datasets.schema import COLUMNS, canonicalize, validate
from hybridperf.datasets.vidur_compute import VIDUR_DEVICES, load_vidur_compute, vidur_compute_root
from hybridperf.errors import InputError

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


def needs_shared():
    if not SHARED.is_dir():
        pytest.skip("../shared/datasets not found")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _canon_file(path: Path, **kw) -> pd.DataFrame:
    return canonicalize(pd.read_csv(path), source=str(path), require_latency=True, **kw)


# ---------------------------------------------------------------------------------------------------
# canonical schema errors name file and line
# ---------------------------------------------------------------------------------------------------

def test_canonicalize_missing_opname_names_file(tmp_path):
    f = _write(tmp_path / "noop.csv", "B,H,Latency\n4,8,0.1\n")
    with pytest.raises(InputError, match="OPName") as e:
        _canon_file(f)
    assert "noop.csv" in str(e.value)


@pytest.mark.parametrize(
    "body, line, needle",
    [
        ("add,4,8,0.1\nadd,,8,0.1\n", 3, "shape B"),  # NaN shape on line 3
        ("add,4,8,0.1\nadd,4,8,0.1\nadd,4,8,-0.5\n", 4, "latency"),  # negative latency on line 4
        ("frobnicate,4,8,0.1\n", 2, "unknown op 'frobnicate'; supported: add, addu, attention"),  # names the valid ops
        ("add,4,-8,0.1\n", 2, "shape H"),
        ("add,4,8,0.1\nadd,4,1e400,0.1\n", 3, "shape H must be a whole number"),  # overflows to inf
        ("add,2.5,8,0.1\n", 2, "shape B must be a whole number"),
        ("add,4,8,inf\n", 2, "latency"),
    ],
)
def test_canonicalize_bad_rows_name_file_and_line(tmp_path, body, line, needle):
    f = _write(tmp_path / "kernels.csv", "OPName,B,H,Latency\n" + body)
    with pytest.raises(InputError) as e:
        _canon_file(f)
    msg = str(e.value)
    assert f"kernels.csv:{line}:" in msg and needle in msg
    assert "\n" not in msg


def test_canonicalize_drop_reports(tmp_path):
    f = _write(tmp_path / "k.csv", "OPName,B,H,Latency\nadd,4,8,0.1\nadd,,8,0.1\nrelu,2,2,0.2\n")
    df = _canon_file(f, on_bad="drop")
    assert len(df) == 2 and list(df.columns) == list(COLUMNS)
    assert len(canonicalize.last_report) == 1 and "k.csv:3:" in canonicalize.last_report[0]


# ---------------------------------------------------------------------------------------------------
# NeuSight labels, layer graphs, predictions
# ---------------------------------------------------------------------------------------------------

def test_parse_run_name():
    assert parse_run_name("gpt2_large-inf-1024-4") == {
        "model": "gpt2_large", "mode": "inf", "seq": 1024, "batch": 4, "fusion": False, "variant": ""}
    r = parse_run_name("bert_large-inf-512-16-fusion")
    assert (r["model"], r["mode"], r["seq"], r["batch"], r["fusion"]) == ("bert_large", "inf", 512, 16, True)
    r = parse_run_name("gpt3_xl-train-2048-4-pp4_1")
    assert (r["model"], r["mode"], r["batch"], r["fusion"], r["variant"]) == ("gpt3_xl", "train", 4, False, "pp4_1")
    assert parse_run_name("opt_13-train-2048-2")["model"] == "opt_13"
    assert parse_run_name("README") is None


def test_device_from_folder():
    assert device_from_folder("NVIDIA_A100-PCIE-40GB") == "NVIDIA A100-PCIE-40GB"
    assert device_from_folder("Tesla_T4") == "Tesla T4"
    assert device_from_folder("AMD_Instinct_MI100") == "AMD Instinct MI100"


def _fake_neusight(root: Path) -> Path:
    (root / "data" / "dataset").mkdir(parents=True)
    lab = {"num_layer": 36, "e2e_latency": 30.0, "fw_latency": 10.0, "bwall_latency": 20.0}
    _write(root / "label" / "Tesla_T4" / "gpt2_large-train-1024-4.json", json.dumps(lab))
    _write(root / "label" / "NVIDIA_A100-PCIE-40GB" / "bert_large-inf-512-16-fusion.json",
           json.dumps({"num_layer": 24, "e2e_latency": 5.0, "fw_latency": 5.0, "bwall_latency": 0}))
    _write(root / "label" / "Tesla_T4" / "gpt2_large-train-1024-4.csv",
           "op,target,Name,input_shapes,output_shape,latency,fw_latency,bw_latency,acc_latency,dtype\n"
           'placeholder,input_ids,input_ids,[],"(4, 1024)",0.0,0.0,0,0,torch.int64\n'
           'call_function,<built-in function add>,add_1,"[[4, 1024, 1280], [4, 1024, 1280]]","(4, 1024, 1280)",'
           "0.5,0.2,0.3,0,torch.float32\n"
           "call_function,<built-in function add>,add_2,\"\"\"[[1], [1]]\"\"\",torch.Size([1]),0.01,0.01,0,0,\n")
    pred = {**lab, "e2e_latency": 33.0, "bw_latency": 19.0, "acc_latency": 1.0}
    _write(root / "results" / "prediction" / "Tesla_T4" / "neusight" / "gpt2_large-train-1024-4.json", json.dumps(pred))
    _write(root / "results" / "prediction" / "Tesla_T4" / "roofline" / "gpt2_large-train-1024-4.json", json.dumps(pred))
    return root


def test_load_labels_synthetic(tmp_path):
    root = _fake_neusight(tmp_path / "neusight")
    df = load_labels(tmp_path)  # the parent of the artifact root is accepted too
    assert len(df) == 2
    t4 = df[df.device == "Tesla T4"].iloc[0]
    assert (t4.model, t4["mode"], t4.seq, t4.batch, bool(t4.fusion)) == ("gpt2_large", "train", 1024, 4, False)
    assert (t4.num_layer, t4.e2e_ms, t4.fw_ms, t4.bw_ms) == (36, 30.0, 10.0, 20.0)
    assert t4.graph_path and t4.graph_path.endswith(".csv")
    a100 = df[df.device == "NVIDIA A100-PCIE-40GB"].iloc[0]
    assert bool(a100.fusion) and a100.bw_ms == 0 and pd.isna(a100.graph_path)
    assert load_labels(root, devices=["Tesla T4"]).shape[0] == 1


def test_malformed_label_json_names_file(tmp_path):
    root = _fake_neusight(tmp_path)
    _write(root / "label" / "Tesla_T4" / "opt_13-inf-2048-2.json", "{\"num_layer\": 24, \"e2e_latency\": ")
    with pytest.raises(InputError, match=r"opt_13-inf-2048-2\.json.*malformed JSON"):
        load_labels(root)


def test_layer_graph_odd_quoting(tmp_path):
    root = _fake_neusight(tmp_path)
    g = load_layer_graph(root / "label" / "Tesla_T4" / "gpt2_large-train-1024-4.csv")
    assert g.attrs["format"] == "fx"
    assert g["input_shapes"].tolist() == [[], [[4, 1024, 1280], [4, 1024, 1280]], [[1], [1]]]
    assert g["output_shape"].tolist() == [[4, 1024], [4, 1024, 1280], [1]]
    assert g["latency"].tolist() == [0.0, 0.5, 0.01]
    assert g["target"].iloc[1] == "<built-in function add>"
    with pytest.raises(InputError, match="layer-graph"):
        load_layer_graph(_write(tmp_path / "x.csv", "a,b\n1,2\n"))


def test_predictions_synthetic(tmp_path):
    root = _fake_neusight(tmp_path)
    p = load_neusight_predictions(root)
    assert len(p) == 1 and p.iloc[0].e2e_ms == 33.0 and p.iloc[0].bw_ms == 20.0 and p.iloc[0].device == "Tesla T4"
    assert len(load_neusight_predictions(root, "roofline")) == 1
    with pytest.raises(InputError, match="habitat"):
        load_neusight_predictions(root, "habitat")


def test_labels_shared_data():
    needs_shared()
    df = load_labels(SHARED)
    assert len(df) > 50
    assert {"NVIDIA A100-PCIE-40GB", "Tesla T4", "AMD Instinct MI100"} <= set(df.device)
    assert set(df["mode"]) == {"inf", "train"} and df["fusion"].any()
    assert (df.e2e_ms > 0).all()
    assert np.allclose(df.e2e_ms, df.fw_ms + df.bw_ms, rtol=1e-6)
    assert (df.loc[df["mode"] == "inf", "bw_ms"] == 0).all()
    row = df[(df.model == "gpt2_large") & (df.seq == 1024) & (df.batch == 4) & df.fusion].iloc[0]
    assert row.device == "NVIDIA A100-PCIE-40GB"
    pred = load_neusight_predictions(SHARED)
    assert len(pred) > 50 and (pred.e2e_ms > 0).all()


def test_layer_graph_shared_data():
    needs_shared()
    g = load_layer_graph(SHARED / "neusight" / "label" / "Tesla_T4" / "bert_large-inf-512-8.csv")
    assert g.attrs["format"] == "fx" and {"op", "target", "Name", "input_shapes", "output_shape", "latency",
                                           "fw_latency", "bw_latency", "dtype"} <= set(g.columns)
    assert all(isinstance(s, list) for s in g.input_shapes)
    assert g.input_shapes.iloc[1] == [[8, 512]]
    o = load_layer_graph(SHARED / "neusight" / "results" / "opgraph" / "bert_large-inf-512-8.csv")
    assert o.attrs["format"] == "opgraph" and all(isinstance(s, list) for s in o.input_shapes)


# ---------------------------------------------------------------------------------------------------
# Vidur compute
# ---------------------------------------------------------------------------------------------------

_VIDUR_OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
              "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")


def _fake_vidur(root: Path, rows: list[dict]) -> Path:
    recs = []
    for r in rows:
        rec = {}
        for i, op in enumerate(_VIDUR_OPS):
            for st in ("min", "max", "mean", "median", "std"):
                rec[f"time_stats.{op}.{st}"] = {"median": 0.1 * (i + 1), "min": 0.05}.get(st, 0.2)
        rec.update(r)
        recs.append(rec)
    f = root / "vidur" / "data" / "profiling" / "compute" / "a100" / "meta-llama" / "Meta-Llama-3-8B" / "mlp.csv"
    f.parent.mkdir(parents=True)
    pd.DataFrame(recs).to_csv(f, index=False)
    return f


def test_vidur_mapping_synthetic(tmp_path):
    cfg = dict(n_head=32, n_kv_head=8, n_embd=4096, n_expanded_embd=14336, vocab_size=128256, use_gated_mlp=True)
    f = _fake_vidur(tmp_path, [{**cfg, "num_tokens": 512, "num_tensor_parallel_workers": 2}])
    for root in (tmp_path, tmp_path / "vidur", tmp_path / "vidur" / "data" / "profiling" / "compute"):
        assert vidur_compute_root(root) == tmp_path / "vidur" / "data" / "profiling" / "compute"
    df = load_vidur_compute(tmp_path, with_meta=True)
    assert load_vidur_compute.last_skipped == {"emb": 1, "attn_rope": 1}
    assert len(df) == 8 and set(df.device) == {VIDUR_DEVICES["a100"]} and set(df.dtype) == {"fp16"}
    assert set(df.source) == {str(f)} and set(df.timing) == {"kernel"}  # a profiler's kernel durations
    by = df.set_index("vidur_op")
    hd = 4096 // 32
    exp = {  # (op, B, M, N, K, H)
        "attn_pre_proj": ("linear", 1, 512, 4096, (32 + 2 * 8) * hd / 2, None),
        "attn_post_proj": ("linear", 1, 512, 2048, 4096, None),
        "mlp_up_proj": ("linear", 1, 512, 4096, 14336 * 2 / 2, None),
        "mlp_down_proj": ("linear", 1, 512, 7168, 4096, None),
        "input_layernorm": ("ln", 512, None, None, None, 4096),
        "post_attention_layernorm": ("ln", 512, None, None, None, 4096),
        "mlp_act": ("gelu", 512, None, None, None, 7168),
        "add": ("add", 512, None, None, None, 4096),
    }
    for vop, (op, B, M, N, K, H) in exp.items():
        r = by.loc[vop]
        assert r.op == op and r.B == B and r.tp == 2
        for name, want in (("M", M), ("N", N), ("K", K), ("H", H)):
            assert np.isnan(r[name]) if want is None else r[name] == want, (vop, name)
    # latency is the median statistic
    assert by.loc["input_layernorm", "latency_ms"] == pytest.approx(0.2)
    assert by.loc["add", "latency_ms"] == pytest.approx(1.0)
    plain = load_vidur_compute(tmp_path)
    assert list(plain.columns) == list(COLUMNS)
    validate(plain)
    with pytest.raises(InputError):
        load_vidur_compute(tmp_path, devices=["a40"])


def test_vidur_bad_row_dropped_with_line(tmp_path):
    cfg = dict(n_head=32, n_kv_head=32, n_embd=2560, n_expanded_embd=10240, vocab_size=1, use_gated_mlp=False)
    f = _fake_vidur(tmp_path, [{**cfg, "num_tokens": 8, "num_tensor_parallel_workers": 1},
                               {**cfg, "num_tokens": 16, "num_tensor_parallel_workers": 1}])
    d = pd.read_csv(f)
    d.loc[1, "time_stats.add.median"] = -1.0
    d.to_csv(f, index=False)
    df = load_vidur_compute(tmp_path)
    assert len(df) == 15
    assert len(load_vidur_compute.last_report) == 1 and f"{f}:3:" in load_vidur_compute.last_report[0]
    mlp_up = df[(df.op == "linear") & (df.N == 2560) & (df.K == 10240)]
    assert len(mlp_up) == 2  # not gated: K = n_expanded_embd


def test_vidur_shared_data():
    needs_shared()
    df = load_vidur_compute(SHARED)
    assert set(df.device) == {"NVIDIA A100-SXM4-80GB", "NVIDIA A40"}
    assert set(df.op) == {"linear", "ln", "gelu", "add"} and set(df.dtype) == {"fp16"}
    assert (df.latency_ms > 0).all() and not load_vidur_compute.last_report
    assert load_vidur_compute.last_skipped["emb"] > 0
    a40 = load_vidur_compute(SHARED / "vidur", devices=["NVIDIA A40"])
    assert set(a40.device) == {"NVIDIA A40"}


# ---------------------------------------------------------------------------------------------------
# hybridperf data summary
# ---------------------------------------------------------------------------------------------------

def _data_app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root():  # keep `data` a sub-command even with a single group
        pass

    data_cli.register(app)
    return app


def test_data_summary_tiny_csv(tmp_path):
    f = _write(tmp_path / "tiny.csv",
               "OPName,B,M,N,K,H,Latency,Device\n"
               "bmm,2,8,8,8,,0.01,Tesla T4\n"
               "linear,1,8,16,16,,0.02,Tesla T4\n"
               "add,4,,,,64,0.003,NVIDIA L4\n"
               "ln,4,,,,64,-1,NVIDIA L4\n"
               "softmax,4,,,,64,0.004,NVIDIA L4\n")
    res = CliRunner().invoke(_data_app(), ["data", "summary", str(f)])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "Tesla T4" in out and "NVIDIA L4" in out and "total" in out
    assert "bad rows dropped: 1" in out and "tiny.csv:5:" in out
    counts = data_cli.count_table(data_cli.summarize(f)[0].table)
    assert counts.loc["Tesla T4", "total"] == 2 and counts.loc["NVIDIA L4", "elementwise"] == 1
    assert counts.loc["total", "total"] == 4


def test_data_summary_counts_aiconfigurator_tables(tmp_path):
    """aiconfigurator's systems folder is summarised per system and op family, with its dtypes."""
    folder = tmp_path / "aiconfigurator" / "systems" / "data" / "a100_sxm" / "gemm" / "trtllm" / "1.0"
    folder.mkdir(parents=True)
    pd.DataFrame({"framework": "TRTLLM", "version": "1.0", "device": "NVIDIA A100-SXM4-80GB", "op_name": "gemm",
                  "kernel_source": "torch_flow", "gemm_dtype": ["float16", "float16", "int8_wo"], "m": [1, 8, 8],
                  "n": 1024, "k": 1024, "latency": [0.01, 0.02, -1.0]}).to_parquet(folder / "gemm_perf.parquet")
    res = CliRunner().invoke(_data_app(), ["data", "summary", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "aiconfigurator kernel" in res.output and "a100_sxm" in res.output
    counts = data_cli.count_table(data_cli.summarize(tmp_path)[0].table)
    assert counts.loc["a100_sxm", "gemm"] == 2  # the row without a positive latency is not counted


def test_data_summary_missing_path_is_one_line_error(tmp_path):
    res = CliRunner().invoke(_data_app(), ["data", "summary", str(tmp_path / "nope")])
    assert res.exit_code != 0
    assert isinstance(res.exception, InputError) and "nope" in str(res.exception)
    with pytest.raises(InputError, match="neither"):
        data_cli.summarize(tmp_path)


def test_data_summary_main_exit_code(tmp_path, monkeypatch, capsys):
    from hybridperf.cli import app as app_mod

    monkeypatch.setattr("sys.argv", ["hybridperf", "data", "summary", str(tmp_path / "nope")])
    with pytest.raises(SystemExit) as e:
        app_mod.main()
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "nope" in err and "\n" not in err


def test_linear_batch_is_folded_into_rows():
    """Linear(N, K) over a (B, M, N) input is one GEMM of B*M rows: same work, same tiles and the same
    feature values (so no spurious out-of-range score) as the B = 1 row NeuSight's tables use."""
    from hybridperf.datasets.schema import canonicalize

    c = canonicalize(pd.DataFrame({"OPName": ["linear", "linear", "bmm"], "B": [8, 1, 8], "M": [100, 800, 100],
                                   "N": [1024, 1024, 64], "K": [4096, 4096, 64]}))
    assert list(c["B"]) == [1, 1, 8] and list(c["M"]) == [800, 800, 100]
    assert c.loc[0, "flops"] == c.loc[1, "flops"] and c.loc[0, "bytes"] == c.loc[1, "bytes"]


def test_neusight_kernels_carry_their_harness_host(tmp_path):
    """NeuSight's kernels were timed on its own hosts (PyTorch 2.1), whose per-call floor is not a
    current host's: the loaders say so, and a table without `host` means a current one."""
    from hybridperf.datasets.neusight import load_collect, load_test

    root = _fake_neusight(tmp_path)
    _write(root / "data" / "dataset" / "train" / "collect" / "add" / "p2.1.0" / "Tesla T4.csv",
           "OPName,B,H,Latency\nadd,4,1024,0.03\n")
    _write(root / "data" / "dataset" / "test" / "elem.csv", "OPName,B,H,Latency,Device\nadd,4,1024,0.03,Tesla T4\n")
    assert set(load_collect(root)["host"]) == set(load_test(root)["host"]) == {"neusight"}
    assert canonicalize(pd.DataFrame({"OPName": ["add"], "B": [4], "H": [8]}))["host"].tolist() == ["current"]
    with pytest.raises(InputError, match=r"k\.csv:3: unknown host 'laptop'"):
        canonicalize(pd.DataFrame({"OPName": ["add", "add"], "B": [4, 4], "H": [8, 8], "host": ["current", "laptop"]}),
                     source="k.csv")


def test_a_measured_grid_tags_its_test_shapes_and_keeps_the_asked_dtypes(tmp_path):
    """`load_measured_grid` reads what `hybridperf collect` wrote for grid_shapes.py's two lists."""
    from hybridperf.training.kernel_data import MODEL_SHAPES_TABLE, load_measured_grid

    grid = tmp_path / "h200" / "grid"
    grid.mkdir(parents=True)
    row = "OPName,B,M,N,K,H,Latency,Device,dtype\n"
    (grid / "train_bmm.csv").write_text(row + "bmm,2,64,64,64,,0.02,NVIDIA H200,float32\n"
                                        "bmm,2,64,64,64,,0.01,NVIDIA H200,float16\n")
    (grid / "test_rowwise.csv").write_text(row + "add,64,,,,1024,0.01,NVIDIA H200,float32\n")
    fp32 = load_measured_grid(tmp_path / "h200")
    assert sorted(zip(fp32["op"], fp32["table"])) == [("add", MODEL_SHAPES_TABLE), ("bmm", "collect")]
    assert list(load_measured_grid(tmp_path / "h200", splits=("train",), dtypes=("fp16",))["latency_ms"]) == [0.01]
    with pytest.raises(InputError, match="no grid"):
        load_measured_grid(tmp_path / "missing")


def test_linear_form_defaults_to_f_linear_and_rejects_unknown_forms():
    raw = pd.DataFrame({"OPName": ["linear", "linear", "bmm", "add"], "B": [1, 2, 4, 8], "M": [64, 64, 64, None],
                        "N": [32, 32, 32, None], "K": [16, 16, 16, None], "H": [None, None, None, 128],
                        "form": [None, " MM ", "mm_t", "linear"]})
    assert canonicalize(raw)["form"].tolist() == ["linear", "mm", "mm_t", ""]
    assert canonicalize(raw.drop(columns="form"))["form"].tolist() == ["linear", "linear", "", ""]
    with pytest.raises(InputError, match=r"in.csv:3: unknown linear form 'addmm'"):
        canonicalize(raw.assign(form=[None, "addmm", None, None]), source="in.csv")
    with pytest.raises(InputError, match=r"in.csv:4: unknown bmm form 'mm' \(expected one of empty, mm_t\)"):
        canonicalize(raw.assign(form=[None, None, "mm", None]), source="in.csv")
