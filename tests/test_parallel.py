"""Data/tensor/pipeline-parallel step time (hybridperf.graphs.parallel) and `predict-model --dp/--tp/--pp`."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from hybridperf.cli.app import app
from hybridperf.devices import get_node
from hybridperf.errors import InputError
from hybridperf.graphs import build_graph, predict_model
from hybridperf.graphs.memory import layer_saved_bytes, outside_saved_bytes
from hybridperf.graphs.parallel import block_params, default_microbatches, parallel_graph, predict_parallel, rank_layout
from hybridperf.predictor import Predictor
from hybridperf.residual_models.collectives import CollectiveModel

HERE = Path(__file__).resolve().parent
TINY = HERE / "data" / "tiny_gpt2_config.json"  # h=256, 4 heads, 2 layers, V=1000
NEUSIGHT = HERE.parents[1] / "shared" / "datasets" / "neusight"
CONFIGS = NEUSIGHT / "data" / "DLmodel_configs"
OPGRAPH = NEUSIGHT / "results" / "opgraph"
needs_data = pytest.mark.skipif(not NEUSIGHT.is_dir(), reason=f"shared datasets not found at {NEUSIGHT}")
PRIOR = Predictor.prior_only()
CPRIOR = CollectiveModel.prior_only()
CONTRACT = ("e2e_ms", "lo_ms", "hi_ms", "fw_ms", "bw_ms")
EXTRA = ("compute_ms", "comm_ms", "bubble_ms", "tp_comm_ms", "dp_comm_ms", "pp_comm_ms", "gpus")


def _pp(config=TINY, batch=8, seq=128, mode="train", device="DGX-H100", **kw):
    """The contract's dict of `predict_parallel` with the analytical priors."""
    kw.setdefault("predictor", PRIOR)
    kw.setdefault("collective_model", CPRIOR)
    return predict_parallel(config, batch, seq, mode, device, **kw).to_dict()


# ---------------------------------------------------------------------------------------------------
# one GPU: identical to the single-GPU path
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["train", "inf"])
@pytest.mark.parametrize("device", ["DGX-A100", "NVIDIA H100 80GB HBM3", "NVIDIA L4"])
def test_single_gpu_is_identical(mode, device):
    ref = predict_model(TINY, 4, 128, mode, device, predictor=PRIOR, attn="eager").to_dict()
    out = _pp(batch=4, mode=mode, device=device)
    for k in CONTRACT:
        assert out[k] == ref[k], k
    assert out["gpus"] == 1 and out["microbatches"] == 1
    assert out["comm_ms"] == out["bubble_ms"] == 0.0
    assert out["compute_ms"] == ref["e2e_ms"]


def test_cli_dp_tp_pp_1_identical_to_plain():
    runner = CliRunner()
    base = ["predict-model", "--config", str(TINY), "--batch", "4", "--seq", "128", "--mode", "train",
            "--device", "DGX-A100", "--json", "--prior-only"]
    r0 = runner.invoke(app, base)
    r1 = runner.invoke(app, [*base, "--dp", "1", "--tp", "1", "--pp", "1"])
    assert r0.exit_code == 0 and r1.exit_code == 0, r1.output
    a = json.loads(r0.stdout.strip().splitlines()[-1])
    b = json.loads(r1.stdout.strip().splitlines()[-1])
    assert set(a) == set(CONTRACT)  # the plain path keeps the contract's exact keys
    assert set(CONTRACT) | set(EXTRA) <= set(b)
    assert all(a[k] == b[k] for k in CONTRACT)


def test_per_gpu_memory_shrinks_with_sharding_and_stage_0_holds_most_micro_batches():
    def mem(**kw):
        return predict_parallel(TINY, 8, 128, "train", "DGX-H100", predictor=PRIOR, collective_model=CPRIOR, **kw)

    one = mem().memory
    assert one == build_graph(TINY, 8, 128, "train").memory()
    assert mem(dp=2).memory == build_graph(TINY, 4, 128, "train").memory()  # half the sequences per GPU
    tp2 = mem(tp=2).memory
    assert tp2.weights < one.weights and tp2.activations < one.activations
    pp2 = mem(pp=2, microbatches=4)
    assert pp2.memory.total == pytest.approx(pp2.stages["mem_gb"].max()) and pp2.memory.total < one.total
    # 1F1B: stage 0 keeps two micro-batches of its one layer in flight, stage 1 one, plus the logits
    layer = layer_saved_bytes("gpt2", 256, 1024, 4, 2, 128) / 1e9
    acts = pp2.stages["mem_gb"] - pp2.stages["params"] * 2 * 4 / 1e9
    assert acts[0] == pytest.approx(2 * layer)
    assert acts[1] == pytest.approx(layer + outside_saved_bytes("gpt2", 256, 1000, 2, 128) / 1e9)


def test_cli_parallel_run_that_does_not_fit_warns():
    big = ["predict-model", "--config", str(TINY), "--batch", "4096", "--seq", "512", "--mode", "train",
           "--device", "DGX-A100", "--dp", "2", "--json", "--prior-only", "--attn", "eager"]  # scores kept
    r = CliRunner().invoke(app, big)
    assert r.exit_code == 0, r.output
    assert "fullest GPU" in r.stderr and "would not fit" in r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["mem_gb_per_gpu"] > 80


# ---------------------------------------------------------------------------------------------------
# the decomposition
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(dp=2), dict(tp=2), dict(pp=2), dict(dp=2, tp=2, pp=2),
                                dict(pp=2, microbatches=8), dict(dp=2, overlap=False)])
def test_components_add_up(kw):
    r = _pp(**kw)
    assert r["e2e_ms"] == pytest.approx(r["fw_ms"] + r["bw_ms"], rel=1e-12)
    assert r["e2e_ms"] == pytest.approx(r["compute_ms"] + r["comm_ms"] + r["bubble_ms"], rel=1e-9)
    assert r["comm_ms"] == pytest.approx(r["tp_comm_ms"] + r["dp_comm_ms"] + r["pp_comm_ms"], rel=1e-9)
    assert r["lo_ms"] <= r["e2e_ms"] <= r["hi_ms"]
    assert r["gpus"] == kw.get("dp", 1) * kw.get("tp", 1) * kw.get("pp", 1)
    assert all(r[k] >= 0 for k in EXTRA)


def test_dp_splits_the_global_batch():
    one = predict_model(TINY, 2, 128, "train", "DGX-H100", predictor=PRIOR, attn="eager")
    r = _pp(batch=8, dp=4, overlap=False)
    assert r["compute_ms"] == pytest.approx(one.ms, rel=1e-12)
    assert r["dp_comm_ms"] > 0 and r["tp_comm_ms"] == r["pp_comm_ms"] == r["bubble_ms"] == 0


def test_dp_allreduce_is_the_whole_gradient_and_overlap_hides_most_of_it():
    g = build_graph(TINY, 2, 128, "train")
    n_params = sum(block_params(g, b, 1) * b.count for b in g.blocks)
    h, V, L = 256, 1000, 2
    assert n_params == V * h + 512 * h + L * (12 * h * h + 13 * h) + 2 * h  # tied LM head counted once
    full = CPRIOR.predict("all_reduce", [n_params * 4], 4, 4, get_node("DGX-H100"))["ms"][0]
    no = _pp(batch=8, dp=4, overlap=False)
    assert no["dp_comm_ms"] == pytest.approx(full, rel=1e-12)
    yes = _pp(batch=8, dp=4, overlap=True)
    assert 0 <= yes["dp_comm_ms"] <= no["dp_comm_ms"] * (1 + 1e-9)  # 7 MB: one 25 MiB bucket, all exposed
    small = _pp(batch=8, dp=4, overlap=True, bucket_mb=2)
    assert 0 < small["dp_comm_ms"] < no["dp_comm_ms"]  # buckets overlap the backward; the last one is exposed
    big = _pp(batch=256, seq=512, dp=4, overlap=True, bucket_mb=2)
    assert 0 < big["dp_comm_ms"] <= small["dp_comm_ms"] * (1 + 1e-9)  # a longer backward hides more


def test_tp_collective_count_and_size():
    node = get_node("DGX-A100")
    B, S, h, L = 8, 128, 256, 2
    ar = lambda n: CPRIOR.predict("all_reduce", [n], 4, 4, node)["ms"][0]  # noqa: E731
    r = _pp(batch=B, seq=S, tp=4, device="DGX-A100")
    expect = (4 * L + 2) * ar(B * S * h * 4) + 3 * ar(B * S * 4)
    assert r["tp_comm_ms"] == pytest.approx(expect, rel=1e-9)
    ri = _pp(batch=B, seq=S, tp=4, device="DGX-A100", mode="inf")
    ag = CPRIOR.predict("all_gather", [4 * B * S * 250 * 4], 4, 4, node)["ms"][0]  # NCCL size: the gathered logits
    assert ri["bw_ms"] == 0 and ri["tp_comm_ms"] == pytest.approx((2 * L + 1) * ar(B * S * h * 4) + ag, rel=1e-9)


def test_tp_kernels_are_megatron_shards():
    B, S, h, f, V, tp = 2, 64, 256, 1024, 1000, 4
    full = build_graph(TINY, B, S, "train")
    g = parallel_graph(TINY, B, S, "train", tp)
    k = {x["name"]: x for b in g.blocks for x in b.kernels}
    tok = B * S
    assert (k["c_attn"]["M"], k["c_attn"]["N"], k["c_attn"]["K"]) == (tok, h, 3 * h // tp)
    assert (k["attn_proj"]["N"], k["attn_proj"]["K"]) == (h // tp, h)
    assert (k["c_fc"]["N"], k["c_fc"]["K"]) == (h, f // tp)
    assert (k["mlp_proj"]["N"], k["mlp_proj"]["K"]) == (f // tp, h)
    assert k["attn.qk"]["B"] == B * 4 // tp and k["attn.softmax"]["B"] == B * 4 * S // tp
    assert k["mlp.gelu_0"]["H"] == f // tp
    assert k["ln_1"]["H"] == h and k["resid_add1"]["H"] == h  # replicated
    assert k["lm_head"]["K"] == V // tp and k["log_softmax"]["H"] == V // tp
    # GEMM FLOPs of a layer are exactly 1/tp of the full layer's
    fl = lambda gr: sum(2.0 * x["B"] * x["M"] * x["N"] * x["K"] for b in gr.blocks if b.kind == "layer"  # noqa
                        for x in b.kernels if x["op"] in ("linear", "bmm"))
    assert fl(g) == pytest.approx(fl(full) / tp)


def test_granite_scales_each_ranks_slice_of_the_logits():
    cfg = {"model_type": "granite", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
           "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 512}
    t = parallel_graph(cfg, 2, 64, "train", 4).kernel_table().set_index("name")
    assert t.loc["logits_scaling", "H"] == t.loc["logits_scaling.bw", "H"] == 1000 // 4
    assert t.loc["resid_scale1", "H"] == 64  # the residual stream is replicated


def test_pipeline_formula_and_bubble():
    d = predict_parallel(TINY, 16, 128, "train", "DGX-H100", pp=2, microbatches=4, predictor=PRIOR,
                         collective_model=CPRIOR)
    st, r, m = d.stages, d.to_dict(), 4
    assert (d.ms, d.lo_ms, d.hi_ms) == (r["e2e_ms"], r["lo_ms"], r["hi_ms"])
    t = (st["fw_ms"] + st["bw_ms"] + st["tp_fw_ms"] + st["tp_bw_ms"]).to_numpy()
    assert r["compute_ms"] + r["bubble_ms"] == pytest.approx(t.sum() + (m - 1) * t.max(), rel=1e-9)
    assert r["bubble_ms"] == pytest.approx(t.sum() - t.max(), rel=1e-9)
    assert r["pp_comm_ms"] > 0
    # more micro-batches: smaller bubble fraction; default M = pp
    fr = [(lambda x: x["bubble_ms"] / (x["compute_ms"] + x["bubble_ms"]))(_pp(batch=16, pp=2, microbatches=mm))
          for mm in (1, 2, 4, 8, 16)]
    assert all(a > b for a, b in zip(fr, fr[1:]))
    assert _pp(batch=16, pp=2)["microbatches"] == 2
    assert default_microbatches(6, 4) == 3 and default_microbatches(16, 1) == 1


def test_pipeline_with_one_microbatch_gains_nothing():
    one = predict_model(TINY, 8, 128, "train", "DGX-H100", predictor=PRIOR, attn="eager")
    r = _pp(batch=8, pp=2, microbatches=1)
    assert r["compute_ms"] + r["bubble_ms"] == pytest.approx(one.ms, rel=1e-9)


def test_multi_node_layout():
    lay = rank_layout(dp=2, tp=2, pp=4, gpn=8)
    assert lay["gpus"] == 16 and lay["nodes"] == 2
    assert lay["tp"] == (2, 2) and lay["dp"] == (2, 2)
    assert lay["pp_cross"] == [False, True, False]
    lay = rank_layout(dp=16, tp=1, pp=1, gpn=8)
    assert lay["dp"] == (16, 8)
    lay = rank_layout(dp=2, tp=8, pp=1, gpn=8)
    assert lay["dp"] == (2, 1) and lay["tp"] == (8, 8)
    one = _pp(batch=16, dp=8, device="DGX-H100")
    two = _pp(batch=16, dp=16, device="DGX-H100", overlap=False)
    assert one["nodes"] == 1 and two["nodes"] == 2 and two["gpus"] == 16


def test_gpu_name_gets_a_default_node():
    r = _pp(dp=2, device="NVIDIA H100 80GB HBM3")
    assert r["gpus"] == 2 and r["dp_comm_ms"] >= 0


@pytest.mark.parametrize("kw", [
    dict(dp=0), dict(tp=-1), dict(pp=0), dict(dp=3),  # batch 8 not divisible by 3
    dict(tp=3),  # 4 heads
    dict(tp=8),  # 8 does not divide 4 heads
    dict(pp=3),  # 2 layers
    dict(pp=2, microbatches=3), dict(microbatches=0), dict(dp=1.5), dict(mode="eval", dp=2),
])
def test_bad_input_raises(kw):
    with pytest.raises(InputError):
        _pp(**kw)


@needs_data
def test_switch_supports_dp_only():
    with pytest.raises(InputError):
        _pp(CONFIGS / "switchxl4.json", batch=2, seq=128, tp=2)
    r = _pp(CONFIGS / "switchxl4.json", batch=2, seq=128, dp=2)
    assert r["dp_comm_ms"] > 0


@pytest.mark.parametrize("args", [("--dp", "0"), ("--tp", "3"), ("--pp", "3"), ("--dp", "3"),
                                  ("--pp", "2", "--microbatches", "3"), ("--bucket-mb", "0"),
                                  ("--tp", "3", "--device", "H100")])  # a bare GPU's node note waits for the checks
def test_cli_bad_input_one_line_error(args):
    r = subprocess.run([sys.executable, "-m", "hybridperf", "predict-model", "--config", str(TINY), "--batch", "8",
                        "--seq", "64", "--mode", "train", "--device", "DGX-A100", "--json", "--prior-only", *args],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:"), r.stderr


def test_cli_breakdown_and_human_output():
    runner = CliRunner()
    base = ["predict-model", "--config", str(TINY), "--batch", "8", "--seq", "64", "--mode", "train",
            "--device", "DGX-H100", "--prior-only", "--dp", "2", "--tp", "2", "--pp", "2", "--breakdown"]
    r = runner.invoke(app, base)
    assert r.exit_code == 0, r.output
    assert "bubble" in r.stdout and "e2e" in r.stdout
    r = runner.invoke(app, [*base, "--json", "--no-overlap"])
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["gpus"] == 8 and out["dp_comm_ms"] > 0


def test_prediction_path_imports_no_training_libs():
    code = ("import sys; from hybridperf.graphs.parallel import predict_parallel; "
            "from hybridperf.predictor import Predictor; "
            f"predict_parallel({str(TINY)!r}, 8, 64, 'train', 'DGX-H100', 2, 2, 2, predictor=Predictor.prior_only()); "
            "bad=[m for m in ('torch','xgboost','sklearn') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@needs_data
def test_2p7b_parallel_cli():
    r = subprocess.run([sys.executable, "-m", "hybridperf", "predict-model", "--config", str(CONFIGS / "gpt3_27.json"),
                        "--batch", "16", "--seq", "2048", "--mode", "train", "--device", "DGX-H100",
                        "--dp", "2", "--tp", "2", "--pp", "4", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["gpus"] == 16 and out["nodes"] == 2


# ---------------------------------------------------------------------------------------------------
# against NeuSight's traced per-GPU op graphs (Megatron-LM runs)
# ---------------------------------------------------------------------------------------------------

def _traced_layer_gemms(path: Path):
    """(linear (M,N,K) list, bmm FLOPs list) of traced layer 0, plus the LM head and allreduce rows."""
    from hybridperf.datasets.labels import load_layer_graph
    from hybridperf.graphs.trace import layer_span

    df = load_layer_graph(path)
    a, b = layer_span(df)
    lin, bmm, head, ar = [], [], None, []
    for i, r in enumerate(df.itertuples()):
        ops = r.fw_ops if isinstance(r.fw_ops, (list, tuple)) else ast.literal_eval(str(r.fw_ops))
        for name, shape in ops:
            if name == "Linear":
                if r.Name == "lm_head":
                    head = tuple(shape)
                elif a <= i < b:
                    lin.append(tuple(shape))
            elif name == "BMM" and a <= i < b:
                bmm.append(2.0 * float(np.prod(shape)))
            elif name == "ALLREDUCE" and a <= i < b:
                ar.append(int(shape[0]))
    return sorted(lin), sorted(bmm), head, ar


def _our_layer_gemms(g):
    lay = [b for b in g.blocks if b.kind == "layer"][0]
    lin = sorted((k["M"], k["N"], k["K"]) for k in lay.kernels if k["op"] == "linear")
    bmm = sorted(2.0 * k["B"] * k["M"] * k["N"] * k["K"] for k in lay.kernels if k["op"] == "bmm")
    head = [k for b in g.blocks for k in b.kernels if k["name"] == "lm_head"][0]
    return lin, bmm, (head["M"], head["N"], head["K"])


# (opgraph, model, global batch, seq, dp, tp, pp, microbatches)
OPGRAPHS = [("gpt2_large-train-1024-16-tp4", "gpt2_large", 16, 1024, 1, 4, 1, 1),
            ("gpt3_xl-train-2048-4-tp4", "gpt3_xl", 4, 2048, 1, 4, 1, 1),
            ("gpt2_large-train-1024-16-dp4", "gpt2_large", 16, 1024, 4, 1, 1, 1),
            ("gpt2_large-train-1024-16-pp4_1", "gpt2_large", 16, 1024, 1, 1, 4, 1),
            ("gpt3_xl-train-2048-4-pp4_4", "gpt3_xl", 4, 2048, 1, 1, 4, 4)]


@needs_data
@pytest.mark.parametrize("run,model,B,S,dp,tp,pp,m", OPGRAPHS)
def test_per_gpu_gemm_shapes_match_neusight_opgraph(run, model, B, S, dp, tp, pp, m):
    path = OPGRAPH / f"{run}.csv"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    t_lin, t_bmm, t_head, t_ar = _traced_layer_gemms(path)
    g = parallel_graph(CONFIGS / f"{model}.json", B // (dp * m), S, "train", tp)
    lin, bmm, head = _our_layer_gemms(g)
    assert lin == t_lin  # every per-GPU linear of a layer, exact (M, N, K)
    np.testing.assert_allclose(bmm, t_bmm, rtol=1e-12)  # NeuSight transposes one tp BMM's shape; FLOPs agree
    assert head[:2] == t_head[:2] and abs(head[2] - t_head[2]) <= 1  # ceil(V/tp) vs their floor(V/tp)
    if tp > 1:  # two forward all-reduces per layer of the activation (elements)
        h = 1280 if model == "gpt2_large" else 3072
        assert t_ar == [B // (dp * m) * S * h] * 2


def test_pipeline_stages_spread_each_layer_block_evenly():
    """Layer blocks that pp does not divide (SmolLM3's 27 RoPE and 9 NoPE layers at pp 2, Gemma 3's sliding and
    global ones) are spread so that every stage holds L / pp layers."""
    from hybridperf.graphs.parallel import stage_layers
    from hybridperf.graphs.primitives import Block

    blocks = [Block("layer", 27), Block("nope_layer", 9)]
    assert stage_layers(blocks, 2) == [[14, 4], [13, 5]]
    shares = stage_layers([Block("a", 29), Block("b", 5), Block("c", 2)], 4)
    assert [sum(s) for s in shares] == [9, 9, 9, 9] and [sum(col) for col in zip(*shares)] == [29, 5, 2]
    assert stage_layers([Block("layer", 8)], 4) == [[2], [2], [2], [2]]
