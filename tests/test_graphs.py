"""Kernel enumeration and composition of whole-model latency (hybridperf.graphs)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybridperf.devices import DTYPE_BYTES
from hybridperf.errors import InputError
from hybridperf.graphs import build_graph, layer_gemms, load_config, plot_latency_vs_batch, predict_model, sweep
from hybridperf.graphs.compose import LOOP_LAUNCH_MS, kernel_requests
from hybridperf.predictor import Predictor

HERE = Path(__file__).resolve().parent
TINY = HERE / "data" / "tiny_gpt2_config.json"
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
NEUSIGHT = DATA / "neusight"
CONFIGS = NEUSIGHT / "data" / "DLmodel_configs"
needs_data = pytest.mark.skipif(not NEUSIGHT.is_dir(), reason=f"shared datasets not found at {DATA}")
PRIOR = Predictor.prior_only()
DEV = "NVIDIA H100 80GB HBM3"


def _cfg(**kw):
    d = json.loads(TINY.read_text())
    d.update(kw)
    return d


def test_tiny_gpt2_layer_gemms_match_hand_count():
    B, S, h, V = 2, 128, 256, 1000
    g = layer_gemms(TINY, B, S, "inf")
    tok = B * S
    expect = sorted([2 * tok * h * 3 * h, 2 * tok * h * h, 2 * tok * h * 4 * h, 2 * tok * 4 * h * h,
                     2 * (B * 4) * S * (h // 4) * S, 2 * (B * 4) * S * S * (h // 4)])
    assert sorted(g["flops"]) == expect
    t = build_graph(TINY, B, S, "inf").kernel_table()
    head = t[t["block"] == "head"]
    assert ((head["op"] == "linear") & (head["K"] == V)).any()


def test_train_backward_has_two_gemms_per_forward_gemm_with_same_flops():
    t = build_graph(TINY, 2, 64, "train").kernel_table()
    gem = t[t["op"].isin(["linear", "bmm"])].copy()
    gem["flops"] = 2.0 * gem["B"] * gem["M"] * gem["N"] * gem["K"]
    fw = gem[gem["phase"] == "fw"].groupby("block")["flops"].sum()
    bw = gem[gem["phase"] == "bw"].groupby("block")["flops"].sum()
    for blk in fw.index:
        assert bw[blk] == pytest.approx(2 * fw[blk])
    assert (t["phase"] == "acc").any()  # gradient accumulation
    assert "loss" in set(t["block"])


def test_predict_model_prior_only_contract_and_scaling():
    p1 = predict_model(TINY, 1, 128, "inf", DEV, predictor=PRIOR, attn="eager")
    r1 = p1.to_dict()
    assert set(r1) == {"e2e_ms", "lo_ms", "hi_ms", "fw_ms", "bw_ms"}
    assert (p1.ms, p1.lo_ms, p1.hi_ms) == (r1["e2e_ms"], r1["lo_ms"], r1["hi_ms"])
    assert r1["bw_ms"] == 0 and r1["lo_ms"] <= r1["e2e_ms"] <= r1["hi_ms"]
    assert r1["e2e_ms"] == pytest.approx(r1["fw_ms"])
    r8 = predict_model(TINY, 8, 128, "inf", DEV, predictor=PRIOR, attn="eager").to_dict()
    assert r8["e2e_ms"] > r1["e2e_ms"]
    rt = predict_model(TINY, 8, 128, "train", DEV, predictor=PRIOR, attn="eager").to_dict()
    assert rt["bw_ms"] > rt["fw_ms"] > 0
    assert rt["e2e_ms"] == pytest.approx(rt["fw_ms"] + rt["bw_ms"])
    # deterministic
    assert predict_model(TINY, 8, 128, "train", DEV, predictor=PRIOR, attn="eager").to_dict() == rt


def test_more_layers_cost_more_and_breakdown_sums():
    a = predict_model(_cfg(n_layer=2), 4, 128, "inf", DEV, PRIOR, attn="eager")
    b = predict_model(_cfg(n_layer=4), 4, 128, "inf", DEV, PRIOR, attn="eager")
    assert b.ms > a.ms
    bd = b.breakdown()
    assert bd["total"].sum() == pytest.approx(b.ms, rel=1e-9)
    assert bd["share"].sum() == pytest.approx(1.0)


def test_composition_drops_harness_floor_and_adds_gap():
    from hybridperf.devices import get_device
    from hybridperf.graphs.compose import HARNESS_HOST, compose, in_model_ms
    from hybridperf.priors.launch import launch_floor_ms

    g = build_graph(TINY, 2, 128, "train")
    cal = {"prior": {"scale": 1.0, "gap_ms": 0.004, "cpu_ms": 0.0}}
    dev = get_device(DEV)
    mp = compose(g, dev, PRIOR, calibration=cal)
    k = mp.kernels
    misc = k["op"].str.startswith("misc:")
    assert (k.loc[misc, "floor_ms"] == 0).all()
    assert (k.loc[k["op"] == "linear", "floor_ms"] == launch_floor_ms("linear", "call", HARNESS_HOST)).all()
    expect = (np.maximum(k["pred_ms"] - k["floor_ms"], 0) + 0.004) * k["count"]
    assert np.allclose(k["total_ms"], expect)
    assert mp.ms == pytest.approx(float(expect.sum()))
    # correction=False: the plain NeuSight-style sum of isolated-kernel predictions
    raw = compose(g, dev, PRIOR, correction=False, calibration=cal)
    assert raw.ms == pytest.approx(float((k["pred_ms"] * k["count"]).sum()))
    assert raw.ms > mp.ms
    # a per-kernel lower bound (eager dispatch) and a scale
    t = in_model_ms([0.01, 1.0], [0.026, 0.056], scale=2.0, gap_ms=0.002, cpu_ms=0.015)
    assert t == pytest.approx([0.015, 2 * 0.944 + 0.002])
    # kernels a C++ loop launches (the grouped-GEMM fallback) pay their device time only, or the C++ launch
    t = in_model_ms([0.01, 1.0], [0.026, 0.056], scale=2.0, gap_ms=0.002, cpu_ms=0.015, looped=[True, True])
    assert t == pytest.approx([LOOP_LAUNCH_MS, 2 * 0.944])


FAMILIES = [
    ("bert", {"model_type": "bert", "hidden_size": 128, "num_attention_heads": 2, "num_hidden_layers": 2,
              "intermediate_size": 512, "vocab_size": 500, "hidden_act": "gelu", "max_position_embeddings": 512}),
    ("opt", {"model_type": "opt", "hidden_size": 128, "num_attention_heads": 2, "num_hidden_layers": 2,
             "ffn_dim": 512, "vocab_size": 500, "activation_function": "relu", "max_position_embeddings": 512}),
    ("gpt_neo", {"model_type": "gpt_neo", "hidden_size": 128, "num_heads": 2, "num_layers": 2, "vocab_size": 500,
                 "activation_function": "gelu_new", "max_position_embeddings": 512}),
    ("llama", {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
               "num_hidden_layers": 2, "intermediate_size": 344, "vocab_size": 500, "hidden_act": "silu"}),
    ("qwen2", {"model_type": "qwen2", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
               "num_hidden_layers": 2, "intermediate_size": 344, "vocab_size": 500, "tie_word_embeddings": True}),
    ("switch", {"model_type": "switch_transformers", "d_model": 128, "d_ff": 512, "d_kv": 32, "num_heads": 4,
                "num_layers": 4, "num_decoder_layers": 4, "num_experts": 4, "expert_capacity": 16,
                "vocab_size": 500, "dense_act_fn": "relu", "encoder_sparse_step": 2, "decoder_sparse_step": 2}),
]


@pytest.mark.parametrize("family,cfg", FAMILIES)
def test_families_predict(family, cfg):
    for mode in ("inf", "train"):
        r = predict_model(cfg, 2, 64, mode, DEV, predictor=PRIOR, attn="eager")
        assert np.isfinite(r.ms) and r.ms > 0


def test_switch_expert_tokens_capped_per_sequence():
    cfg = {"model_type": "switch_transformers", "d_model": 128, "d_ff": 512, "d_kv": 32, "num_heads": 4,
           "num_layers": 2, "num_decoder_layers": 2, "num_experts": 4, "expert_capacity": 16, "vocab_size": 500}
    t = build_graph(cfg, 3, 256, "inf").kernel_table()
    wi = t[t["name"].str.contains(r"\.e0\.wi")]
    assert set(wi["M"]) == {3 * 16}


def test_switch_position_bias_gradient_is_summed_over_each_stack():
    """Every layer of a stack adds the same (B, n, S, S) position bias to its scores; autograd sums its
    gradient over the layers (layers - 1 adds per stack), in the backward only."""
    cfg = {"model_type": "switch_transformers", "d_model": 128, "d_ff": 512, "d_kv": 32, "num_heads": 4,
           "num_layers": 3, "num_decoder_layers": 5, "num_experts": 4, "expert_capacity": 16, "vocab_size": 500}
    B, S, n = 2, 64, 4
    for mode, enc, dec in (("inf", 0, 0), ("train", 2, 4)):
        t = build_graph(cfg, B, S, mode).kernel_table()
        sums = t[t["name"].str.contains("position_bias.grad_sum")]
        assert (sums["block"] == "encoder_embeddings").sum() == enc
        assert (sums["block"] == "decoder_embeddings").sum() == dec
        assert set(zip(sums["B"], sums["H"])) <= {(B * n * S, S)}


LLAMA = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2,
         "num_hidden_layers": 3, "intermediate_size": 688, "vocab_size": 1000, "hidden_act": "silu"}


def test_llama_layer_gemms_match_hand_count():
    """Grouped-query attention: k/v projections are kv_heads * head_dim wide; SwiGLU has three GEMMs."""
    B, S, h, f, hd, kv = 2, 64, 256, 688, 32, 2
    tok = B * S
    g = layer_gemms(LLAMA, B, S, "inf")
    expect = sorted([2 * tok * h * h, 2 * tok * h * kv * hd, 2 * tok * h * kv * hd, 2 * tok * h * h,
                     2 * tok * h * f, 2 * tok * h * f, 2 * tok * f * h,
                     2 * (B * 8) * S * hd * S, 2 * (B * 8) * S * S * hd])
    assert sorted(g["flops"]) == expect
    t = build_graph(LLAMA, B, S, "train").kernel_table()
    assert not t["name"].str.contains("dropout").any()  # attention_dropout = 0 launches nothing
    # repeat_kv materialises K and V at the full head count (torch.matmul's copies without GQA)
    kv = t[t["name"] == "attn.k_copy"]
    assert len(kv) == 1 and kv["nbytes"].iloc[0] == 2 * tok * 8 * hd * 4


@pytest.mark.parametrize("family,cfg", [*FAMILIES, ("gpt2", None)])
def test_attention_layout_copies_per_layer(family, cfg):
    """torch.matmul on head-split views copies Q, K and V, and the merged heads are copied back: four
    layout copies per attention in the forward and four in the backward (TorchDispatchMode counts on HF
    eager layers, see `attention_core`); the decoder of an encoder-decoder has two attentions."""
    t = build_graph(cfg or _cfg(), 2, 64, "train").kernel_table()
    attn = t[t["name"].str.contains(r"attn\.")]
    fw_copies = set(attn.loc[(attn["phase"] == "fw") & (attn["op"] == "misc:copy"), "name"])
    copies = attn[attn["name"].str.removesuffix(".bw").isin(fw_copies) & (attn["op"] == "misc:copy")]
    for phase in ("fw", "bw"):
        got = copies[copies["phase"] == phase].groupby("block")["name"].apply(
            lambda s: sorted(n.removesuffix(".bw").rsplit(".", 1)[-1] for n in s))
        assert len(got)
        for block, names in got.items():
            n_attn = 2 if block.startswith("decoder") else 1
            assert names == sorted(["q_copy", "k_copy", "v_copy", "merge_heads"] * n_attn), (block, phase)


#: adds in one layer's backward from tensors several forward ops read (TorchDispatchMode on HF eager
#: layers, transformers 5.23: BERT 4, GPT-2 4, GPT-Neo 6, OPT 4, Llama 11)
GRAD_SUMS = {"bert": 4, "gpt2": 4, "gpt_neo": 6, "opt": 4, "llama": 11}


@pytest.mark.parametrize("family,cfg", [(f, c) for f, c in [*FAMILIES, ("gpt2", None)] if f in GRAD_SUMS])
def test_backward_sums_gradients_of_tensors_read_twice(family, cfg):
    """A tensor read by n forward ops gets n - 1 gradient adds in the backward, and nothing in the forward."""
    cfg = dict(cfg or _cfg(), num_key_value_heads=cfg.get("num_attention_heads")) if family == "llama" else cfg or _cfg()
    train = build_graph(cfg, 2, 64, "train").kernel_table()
    layer = train[train["block"] == "layer"]
    assert (layer.loc[layer["phase"] == "bw", "op"] == "add").sum() == GRAD_SUMS[family]
    assert not train.loc[train["phase"] == "fw", "name"].str.contains("grad_sum").any()
    assert not build_graph(cfg, 2, 64, "inf").kernel_table()["name"].str.contains("grad_sum").any()


def test_llama_tensor_parallel_shards_kv_and_checks_divisibility():
    from hybridperf.graphs.parallel import parallel_graph

    t = parallel_graph(LLAMA, 2, 64, "train", tp=2).kernel_table()
    fw = t[t["phase"] == "fw"].set_index("name")
    assert fw.loc["k_proj", "K"] == 2 * 32 // 2 and fw.loc["q_proj", "K"] == 256 // 2
    assert fw.loc["o_proj", "N"] == 256 // 2 and fw.loc["down_proj", "N"] == 688 // 2
    with pytest.raises(InputError, match="key/value heads"):
        parallel_graph({**LLAMA, "num_key_value_heads": 1}, 2, 64, "train", tp=2)


@pytest.mark.parametrize("bad", [
    {"model_type": "llama", "hidden_size": 8},
    {**LLAMA, "num_key_value_heads": 3},
    {"model_type": "mamba", "hidden_size": 64, "vocab_size": 10},
    {"n_embd": 64},
    {"model_type": "gpt2", "n_embd": 64, "n_head": 3, "n_layer": 1, "vocab_size": 10},
    {"model_type": "gpt2", "n_embd": -64, "n_head": 4, "n_layer": 1, "vocab_size": 10},
    [1, 2],
])
def test_bad_configs_raise_input_error(bad):
    with pytest.raises(InputError):
        predict_model(bad, 1, 16, "inf", DEV, predictor=PRIOR, attn="eager")


@pytest.mark.parametrize("b,s,mode", [(0, 16, "inf"), (1, 0, "inf"), (1, 16, "eval"), (1, 100000, "inf")])
def test_bad_arguments_raise_input_error(b, s, mode):
    with pytest.raises(InputError):
        build_graph(TINY, b, s, mode)


def test_malformed_and_missing_config_files(tmp_path):
    p = tmp_path / "c.json"
    p.write_text("{not json")
    with pytest.raises(InputError):
        load_config(p)
    with pytest.raises(InputError):
        load_config(tmp_path / "missing.json")


def test_sweep_and_plot(tmp_path):
    df = sweep(TINY, [1, 2, 4], [64, 128], "inf", DEV, predictor=PRIOR, attn="eager")
    assert len(df) == 6 and {"batch", "seq", "e2e_ms", "lo_ms", "hi_ms"} <= set(df.columns)
    for _, g in df.groupby("seq"):
        assert g.sort_values("batch")["e2e_ms"].is_monotonic_increasing
    pytest.importorskip("matplotlib")
    out = tmp_path / "lat.png"
    plot_latency_vs_batch(df, out)
    assert out.stat().st_size > 0


def test_prediction_path_imports_no_training_libs():
    import subprocess
    import sys

    code = ("import sys; from hybridperf.graphs import predict_model; from hybridperf.predictor import Predictor; "
            f"predict_model({str(TINY)!r}, 2, 64, 'train', 'H100', predictor=Predictor.prior_only(), attn='eager'); "
            "bad=[m for m in ('torch','xgboost','sklearn') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------------------------
# against NeuSight's traced graphs
# ---------------------------------------------------------------------------------------------------

TRACED = [("Tesla_T4", "gpt2_large-inf-1024-4"), ("Tesla_V100-PCIE-32GB", "bert_large-train-512-2"),
          ("Tesla_V100-PCIE-32GB", "opt_13-inf-2048-2"), ("Tesla_V100-PCIE-32GB", "gpt3_xl-inf-2048-2"),
          ("AMD_Instinct_MI210", "gpt3_27-inf-2048-8"), ("AMD_Instinct_MI210", "bert_large-inf-512-16")]


@needs_data
@pytest.mark.parametrize("gpu,run", TRACED)
def test_layer_gemm_flops_match_traced_graph(gpu, run):
    from hybridperf.graphs.trace import traced_layer_gemm_flops

    path = NEUSIGHT / "label" / gpu / f"{run}.csv"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    model, mode, seq, batch = run.split("-")[:4]
    traced = traced_layer_gemm_flops(pd.read_csv(path))
    ours = sorted(layer_gemms(CONFIGS / f"{model}.json", int(batch), int(seq), "inf")["flops"])
    assert len(traced) == len(ours)
    np.testing.assert_allclose(traced, ours, rtol=1e-9)


@needs_data
def test_switch_gemms_match_opgraph():
    """Every GEMM shape of the Switch-XL op graph (NeuSight notation) appears in our enumeration."""
    import ast

    og = pd.read_csv(NEUSIGHT / "results" / "opgraph" / "switchxl4-inf-512-2.csv")
    traced = {}
    for ops in og["FwOps"]:
        for name, shape in ast.literal_eval(ops):
            if name in ("Linear", "BMM"):
                f = 2.0 * float(np.prod(shape))
                traced[f] = traced.get(f, 0) + 1
    t = build_graph(CONFIGS / "switchxl4.json", 2, 512, "inf").kernel_table()
    gem = t[t["op"].isin(["linear", "bmm"])]
    ours = {}
    for r in gem.itertuples():
        f = 2.0 * r.B * r.M * r.N * r.K
        ours[f] = ours.get(f, 0) + r.count
    assert sum(traced.values()) == sum(ours.values())
    assert sum(k * v for k, v in traced.items()) == pytest.approx(sum(k * v for k, v in ours.items()), rel=1e-9)


@needs_data
def test_switch_score_bias_add_reads_two_score_tensors():
    """T5 attention's `scores += position_bias` adds two full (B, n, S, S) tensors (the bias holds the
    relative buckets plus the mask): NeuSight's trace has it as VECadd, once per attention."""
    import ast

    og = pd.read_csv(NEUSIGHT / "results" / "opgraph" / "switchxl4-inf-512-2.csv")
    scores = (2, 32, 512, 512)
    traced = sum(1 for ops, ins in zip(og["FwOps"], og["InputShapes"])
                 if [o[0] for o in ast.literal_eval(ops)] == ["VECadd"] and ast.literal_eval(ins) == [scores, scores])
    t = build_graph(CONFIGS / "switchxl4.json", 2, 512, "inf").kernel_table()
    ours = t[(t["op"] == "add") & (t["B"] == 2 * 32 * 512) & (t["H"] == 512)]["count"].sum()
    assert traced == ours == 72


def _opgraph_runs():
    """Single-GPU eager op graphs of the artifact (fused and parallel variants excluded; Switch has its
    own test, since its layer names do not follow the one-layer-span layout)."""
    if not NEUSIGHT.is_dir():
        return []
    return [f.stem for f in sorted((NEUSIGHT / "results" / "opgraph").glob("*.csv"))
            if not any(t in f.stem for t in ("fusion", "dp4", "tp4", "pp4", "switch"))]


@needs_data
@pytest.mark.parametrize("run", _opgraph_runs() or ["(no data)"])
def test_model_gemm_flops_match_traced_opgraph(run):
    """Forward GEMM FLOPs of the whole model (layer span x layers + embeddings and head) equal the traced
    graph's, so no head is missing or extra (BERT inference runs a classifier, not the MLM decoder)."""
    import ast

    from hybridperf.graphs.trace import layer_span

    model, mode, seq, batch = run.split("-")[:4]
    og = pd.read_csv(NEUSIGHT / "results" / "opgraph" / f"{run}.csv")
    lo, hi = layer_span(og)
    layers = load_config(CONFIGS / f"{model}.json").layers
    traced = sum(2.0 * float(np.prod(shape)) * (layers if lo <= i < hi else 1)
                 for i, ops in enumerate(og["FwOps"]) for op, shape in ast.literal_eval(ops) if op in ("Linear", "BMM"))
    t = build_graph(CONFIGS / f"{model}.json", int(batch), int(seq), mode).kernel_table()
    t = t[t["op"].isin(["linear", "bmm"]) & (t["phase"] == "fw")]
    ours = float((2.0 * t["B"] * t["M"] * t["N"] * t["K"] * t["count"]).sum())
    assert ours == pytest.approx(traced, rel=1e-9)


def _fused_runs():
    if not NEUSIGHT.is_dir():
        return []
    return [f.stem for f in sorted((NEUSIGHT / "results" / "opgraph").glob("*-fusion.csv"))]


def _traced_layer_kernels(og: pd.DataFrame) -> dict:
    """Kernel-launching nodes of layer 0 of a traced fused graph, counted per op group."""
    import ast

    names = og["Name"].astype(str)
    first = names.str.contains(r"(?:^|_)(?:h|layer)_0_").to_numpy().nonzero()[0][0]
    end = names.str.contains(r"(?:^|_)(?:h|layer)_1_").to_numpy().nonzero()[0][0]
    counts: dict = {}
    for op_name, ops in zip(og["OpName"][first:end], og["FwOps"][first:end]):
        kinds = [k for k, _ in ast.literal_eval(ops)]
        if not kinds or op_name == "getitem":  # getitem: a Python-side index, no kernel
            continue
        if "Linear" in kinds or "BMM" in kinds:
            group = "gemm"
        elif "VECsoftmax" in kinds:
            group = "softmax"
        elif "VECln" in kinds:
            group = "layernorm"
        elif op_name == "contiguous":
            group = "memory"
        else:
            group = "elementwise"
        counts[group] = counts.get(group, 0) + 1
    return counts


@needs_data
@pytest.mark.parametrize("run", _fused_runs() or ["(no data)"])
def test_fused_layer_matches_traced_fusion_graph(run):
    """`fused=True` launches per layer the kernels NeuSight's traced fused graphs record: BERT folds scale
    + mask into softmax and each residual add into its LayerNorm; GPT-2 fuses its eight-kernel GELU and
    keeps `where` and the pre-LN residual adds apart."""
    model, mode, seq, batch = run.split("-")[:4]
    traced = _traced_layer_kernels(pd.read_csv(NEUSIGHT / "results" / "opgraph" / f"{run}.csv"))
    t = build_graph(CONFIGS / f"{model}.json", int(batch), int(seq), mode, fused=True).kernel_table()
    t = t[t["block"] == "layer"]
    # a traced matmul node holds the copies of its operands (`attention_core`): not nodes of their own
    nodes = t[~t["name"].str.contains(r"\.[qkv]_copy$")]
    ours = nodes["group"].replace({"linear": "gemm", "bmm": "gemm"}).value_counts().to_dict()
    assert ours == traced
    eager = build_graph(CONFIGS / f"{model}.json", int(batch), int(seq), mode).kernel_table()
    gemm = lambda x: x[x["op"].isin(["linear", "bmm"])][["name", "B", "M", "N", "K", "count"]].reset_index(drop=True)  # noqa: E731
    pd.testing.assert_frame_equal(gemm(t), gemm(eager[eager["block"] == "layer"]))


def test_fuse_pointwise_rules():
    """Unit rules of the fusion pass on a hand-built block."""
    from hybridperf.graphs.fusion import fuse_pointwise
    from hybridperf.graphs.primitives import linear, ln, vec

    ks = [linear("fc", 8, 4, 16), vec("g0", "mulu", 8, 16), vec("g1", "add", 8, 16, tag="internal"),
          vec("g2", "tanh", 8, 16), linear("proj", 8, 16, 4), vec("res", "add", 8, 4, tag="residual"),
          ln("ln", 8, 4), vec("s", "divu", 8, 4), vec("w", "addu", 8, 4, tag="where"), vec("sm", "softmax", 8, 4),
          vec("a", "add", 8, 4), ln("ln2", 8, 4)]
    out = fuse_pointwise(ks)
    assert [k["name"] for k in out] == ["fc", "g0+g1+g2", "proj", "res", "ln", "s", "w", "sm", "a+ln2"]
    gelu, add_ln = out[1], out[-1]
    assert gelu["op"] == "mulu" and gelu["extra_nbytes"] == 0  # one input: reads x, writes y
    assert add_ln["op"] == "ln" and add_ln["extra_nbytes"] == 8 * 4 * 4 and add_ln["params"] == 8  # + residual read


def test_fused_inference_is_faster_and_training_refused():
    eager = predict_model(TINY, 4, 128, "inf", DEV, predictor=PRIOR, attn="eager")
    fused = predict_model(TINY, 4, 128, "inf", DEV, predictor=PRIOR, fused=True, attn="eager")
    assert 0 < fused.ms < eager.ms
    with pytest.raises(InputError, match="inference only"):
        build_graph(TINY, 4, 128, "train", fused=True)


@needs_data
@pytest.mark.parametrize("name", ["bert_large", "gpt2_med", "gpt2_large", "gpt2_xl", "gpt3_xl", "gpt3_27",
                                  "gpt3_67", "gpt3_13", "opt", "opt_13", "switchxl4"])
def test_all_artifact_configs_predict(name):
    r = predict_model(CONFIGS / f"{name}.json", 1, 512, "train", "A100-40GB", predictor=PRIOR, attn="eager")
    assert r.ms > 0 and r.bw_ms > 0


def test_half_precision_graph_halves_bytes_and_uses_tensor_cores():
    """--dtype bf16/fp16: every float tensor in that dtype, GEMMs on tensor cores (not autocast)."""
    big = {"model_type": "gpt2", "n_embd": 1024, "n_head": 16, "n_layer": 4, "vocab_size": 50257, "n_positions": 1024}
    f32 = build_graph(big, 2, 64, "inf").kernel_table()
    b16 = build_graph(big, 2, 64, "inf", dtype="bfloat16").kernel_table()
    assert set(f32["dtype"]) == {"fp32"} and set(b16["dtype"]) == {"bf16"}  # GPT-2 upcasts nothing
    misc = f32["op"].str.startswith("misc:")
    np.testing.assert_allclose(b16.loc[misc, "nbytes"], f32.loc[misc, "nbytes"] / 2)
    r32 = predict_model(big, 8, 1024, "inf", DEV, predictor=PRIOR, attn="eager")
    r16 = predict_model(big, 8, 1024, "inf", DEV, predictor=PRIOR, dtype="fp16", attn="eager")
    assert r16.ms < 0.5 * r32.ms  # H100: ~15x the fp32 rate on tensor cores, half the bytes
    with pytest.raises(InputError, match="model dtype"):
        build_graph(LLAMA, 2, 64, "inf", dtype="int8")


def _layer_fw(dtype, mode="inf"):
    t = build_graph(LLAMA, 2, 64, mode, dtype=dtype).kernel_table()
    return t[(t["block"] == "layer") & (t["phase"] == "fw")]


def test_half_precision_llama_runs_norms_and_softmax_in_fp32():
    """HF's eager Llama upcasts: LlamaRMSNorm casts x to fp32, computes pow/mean/mul there and casts
    back; attention takes softmax(dtype=float32) and casts back. TorchDispatchMode on a bf16
    LlamaForCausalLM layer (transformers 5.23) records six `_to_copy` casts per layer: two per RMSNorm,
    one before (bf16; fp16 is read by the softmax itself on CUDA) and one after the softmax."""
    casts = {d: int((_layer_fw(d)["op"] == "misc:cast").sum()) for d in ("fp32", "fp16", "bf16")}
    assert casts == {"fp32": 0, "fp16": 5, "bf16": 6}
    b16 = _layer_fw("bf16")
    upcast = b16[b16["dtype"] == "fp32"]
    assert set(upcast["name"]) >= {"input_norm.pow", "input_norm.mul", "post_norm.pow", "attn.softmax"}
    assert "input_norm.weight" not in set(upcast["name"])  # the weight multiply is back in bf16
    cast = b16[b16["name"] == "input_norm.to_fp32"].iloc[0]
    assert cast["nbytes"] == 2 * 64 * LLAMA["hidden_size"] * (2 + 4)  # reads bf16, writes fp32
    # the causal LM loss upcasts the logits (HF ForCausalLMLoss); its backward casts the gradient back
    t = build_graph(LLAMA, 2, 64, "train", dtype="bf16").kernel_table()
    loss = t[t["block"] == "loss"]
    assert set(loss.loc[loss["op"] == "softmax", "dtype"]) == {"fp32"}
    # pow and mul read the fp32 copy of x: the sum of their gradients is fp32 as well
    assert set(t.loc[t["name"].str.startswith("input_norm.x.grad_sum"), "dtype"]) == {"fp32"}
    assert set(loss.loc[loss["op"] == "misc:cast", "phase"]) == {"fw", "bw"}
    # compiled: the casts fold into the fused kernels, whose tensors are bf16
    fused = build_graph(LLAMA, 2, 64, "inf", dtype="bf16", fused=True).kernel_table()
    assert not (fused["op"] == "misc:cast").any()
    assert set(fused.loc[fused["name"].str.contains("softmax"), "dtype"]) == {"bf16"}


def test_opt_350m_projects_its_narrow_embeddings_and_normalises_after_the_adds():
    """OPT-350m embeds in 512 (`word_embed_proj_dim`) and projects in and out of its 1024-wide layers, and
    is post-LN (`do_layer_norm_before=False`, no final LayerNorm). TorchDispatchMode on HF eager OPT
    (transformers 5.23), OPT-350m's layout against the default one: +2 mm and -1 LayerNorm in a forward
    (inference and decode), +6 mm and -1 LayerNorm forward and backward in training; the parameters
    match `OPTForCausalLM.parameters()` (106,368 and 107,136 for these configs)."""
    from hybridperf.graphs.optimizer import param_numels

    base = {"model_type": "opt", "hidden_size": 64, "ffn_dim": 128, "num_attention_heads": 4, "vocab_size": 100,
            "max_position_embeddings": 512, "num_hidden_layers": 2}
    small = {**base, "word_embed_proj_dim": 32, "do_layer_norm_before": False}
    for mode, extra in (("inf", 1), ("train", 4), ("decode", 1)):
        assert len(build_graph(small, 2, 8, mode).kernel_table()) - len(build_graph(base, 2, 8, mode).kernel_table()) \
            == extra, mode
    t = build_graph(small, 2, 8, "inf").kernel_table().set_index("name")
    assert (t.loc["project_in", ["N", "K"]].tolist(), t.loc["project_out", ["N", "K"]].tolist()) == ([32, 64], [64, 32])
    assert t.loc["lm_head", "N"] == 32 and "final_layer_norm" not in t.index
    layer = list(t[t["block"] == "layer"].index)
    assert layer.index("self_attn_ln") > layer.index("resid_add1") and layer[-1] == "final_ln"
    assert sum(param_numels(build_graph(base, 2, 8, "train"))) == 106_368
    assert sum(param_numels(build_graph(small, 2, 8, "train"))) == 107_136


#: a small llama-shaped config in each llama-like family's keys, without the key/value cache, as the traces ran
LLAMA_SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
               "head_dim": 16, "vocab_size": 100, "max_position_embeddings": 512, "num_hidden_layers": 2,
               "use_cache": False}


def _per_layer_and_outside(cfg, mode, dtype="fp32", layers_key="num_hidden_layers"):
    n = [int(build_graph({**cfg, layers_key: k}, 2, 8, mode, dtype=dtype).kernel_table()["count"].sum())
         for k in (2, 3)]
    return n[1] - n[0], n[0] - 2 * (n[1] - n[0])


@pytest.mark.parametrize("family,fp32,bf16,train", [("llama", 42, 48, 131), ("qwen3", 54, 64, 173),
                                                     ("gemma", 44, 52, 133), ("gemma2", 61, 75, 183),
                                                     ("gemma3_text", 72, 92, 221), ("phi3", 40, 46, 132),
                                                     ("granite", 44, 50, 135), ("olmo2", 54, 66, 173),
                                                     ("olmo3", 54, 66, 173)])
def test_llama_like_layers_launch_what_hf_eager_launches(family, fp32, bf16, train):
    """Kernels per layer of one forward, and of a training step whose backward accumulates into an existing
    `.grad` (NeuSight's timed steps), as TorchDispatchMode counts them on HF eager models (transformers
    5.23, `use_cache=False`; `experiments/gpu/graph_trace.py`): Qwen3 adds an RMSNorm over each head of q and
    k (6 kernels each, 5 more in bf16: two casts, as Llama's), Gemma a (1 + weight) add per norm (and in
    bf16 a cast of the weight, the multiply running in fp32), Gemma 2 two more norms per layer (on the
    attention's and the MLP's outputs) and the scores' soft-cap (x / c, tanh, * c), Gemma 3 the two norms
    and Qwen3's per-head q/k norms. Each RMSNorm's backward launches 14 kernels (its two broadcast products
    sum their broadcast operand's gradient, rsqrt's backward is three per-row kernels). Phi-3 fuses q/k/v
    and gate/up (two GEMMs fewer, three fewer gradient accumulations), adds a torch.cat per RoPE'd
    projection, and needs no layout copy of q (nor of k without grouped-query) in the forward; in the
    backward q's and k's gradients are laid back by copies of their own, and its normed inputs have one
    reader each (no gradient sums). Granite scales each sublayer's output before its residual add (one
    multiply each, and one more in the backward). OLMo 2 norms each sublayer's output instead of its input and
    the whole q and k projections, and in bf16 runs RoPE in fp32 (cast back per projection); OLMo 3's sliding
    layers launch what OLMo 2's do.
    RoPE's slices send their gradients back through ATen's slice_backward (a zero fill and a copy each,
    counted as two kernels by the trace)."""
    cfg = {"model_type": family, **LLAMA_SMALL}
    assert _per_layer_and_outside(cfg, "inf")[0] == fp32
    assert _per_layer_and_outside(cfg, "inf", "bf16")[0] == bf16
    assert _per_layer_and_outside(cfg, "train")[0] == train


@pytest.mark.parametrize("nope,inf,inf_bf16,decode,train,train_bf16", [(False, 42, 48, 42, 131, 143),
                                                                       (True, 32, 38, 32, 103, 115)])
def test_smollm3_runs_llamas_layer_and_drops_rope_in_its_nope_layers(nope, inf, inf_bf16, decode, train, train_bf16):
    """SmolLM3 is Llama's layer; its NoPE layers (every fourth by default) skip RoPE on q and k: 10 kernels fewer
    forward, 28 with their backward (TorchDispatchMode on transformers 5.24, eager; `graph_trace.py`)."""
    cfg = {"model_type": "smollm3", **LLAMA_SMALL, "pad_token_id": 0, **({"no_rope_layer_interval": 1} if nope else {})}
    assert (_per_layer_and_outside(cfg, "inf")[0], _per_layer_and_outside(cfg, "inf", "bf16")[0]) == (inf, inf_bf16)
    assert _per_layer_and_outside(cfg, "decode")[0] == decode
    assert (_per_layer_and_outside(cfg, "train")[0], _per_layer_and_outside(cfg, "train", "bf16")[0]) \
        == (train, train_bf16)
    released = build_graph({**cfg, "no_rope_layer_interval": 4, "num_hidden_layers": 36}, 1, 8, "inf")
    assert [(b.name, b.count) for b in released.blocks if b.kind == "layer"] == [("layer", 27), ("nope_layer", 9)]
    for bad in ({"no_rope_layers": [1, 2]}, {"no_rope_layers": [1]}, {"use_sliding_window": True, "sliding_window": 4}):
        with pytest.raises(InputError, match="no_rope_layers|sliding"):
            build_graph({**cfg, **bad}, 1, 8, "inf")
    assert build_graph({**cfg, "use_sliding_window": True, "sliding_window": None}, 1, 8, "inf").blocks  # no window
    assert load_config({**cfg}).tied_embeddings  # SmolLM3Config ties by default


def test_ministral3_scales_its_queries_by_position_in_every_layer():
    """Ministral 3 is Mistral's layer and Llama 4's query scale, recomputed per layer from the position ids: 7
    kernels more in fp32 (8 in bf16: a cast), one more in the backward (TorchDispatchMode, transformers 5.24)."""
    cfg = {"model_type": "ministral3", **LLAMA_SMALL}
    mistral = {"model_type": "mistral", **LLAMA_SMALL, "sliding_window": None}
    for mode, extra in (("inf", 7), ("decode", 7), ("train", 8)):
        assert _per_layer_and_outside(cfg, mode)[0] == _per_layer_and_outside(mistral, mode)[0] + extra
        assert _per_layer_and_outside(cfg, mode, "bf16")[0] == _per_layer_and_outside(mistral, mode, "bf16")[0] \
            + extra + 1
    assert _per_layer_and_outside(cfg, "train", "bf16")[0] == 152
    wrapped = load_config({"model_type": "mistral3", "text_config": {**cfg, "num_hidden_layers": 4}})
    assert wrapped.family == "ministral3" and wrapped.layers == 4
    assert load_config({**cfg, "sliding_window": 4}).every_layer_slides  # as Mistral's, when a window is set


def test_gemma2_and_gemma3_add_sandwich_norms_soft_caps_and_sliding_layers():
    """Gemma 2 soft-caps its scores and logits, Gemma 3 normalises q and k per head (with Gemma's (1 + w));
    both build a sliding-window mask (23 kernels in a forward, 15 more in a decode step), and Gemma 3 a
    second rotary table once both layer types are present. A decode step's sliding layers attend to their
    window; the key/value cache of those layers holds it only."""
    g2 = {"model_type": "gemma2", **LLAMA_SMALL}
    t = build_graph(g2, 2, 8, "inf").kernel_table().set_index("name")
    assert t.loc["attn.softcap_tanh", ["B", "H"]].tolist() == [2 * 4 * 8, 8]
    assert t.loc["logit_softcap_tanh", ["B", "H"]].tolist() == [16, 100]
    assert {"post_attn_norm.weight", "post_ffw_norm.weight"} <= set(t.index)
    assert _per_layer_and_outside(g2, "inf")[1] - _per_layer_and_outside({**g2, "model_type": "gemma"}, "inf")[1] \
        == 23 + 3
    # null soft-caps (Gemma 3's defaults) launch nothing
    off = build_graph({**g2, "attn_logit_softcapping": None, "final_logit_softcapping": None}, 2, 8, "inf")
    assert t["count"].sum() - off.kernel_table()["count"].sum() == 2 * 3 + 3
    g3 = {"model_type": "gemma3_text", **LLAMA_SMALL}
    t3 = build_graph(g3, 2, 8, "inf").kernel_table().set_index("name")
    assert t3.loc["q_norm.one_plus_weight", "op"] == "misc:mask" and "attn.softcap_tanh" not in t3.index
    assert load_config(g3).layer_types == ("sliding_attention",) * 2
    both = {**g3, "num_hidden_layers": 6}
    assert load_config(both).layer_types[-1] == "full_attention"
    kernels = [build_graph(c, 2, 8, "inf").kernel_table()["count"].sum() for c in (both, g3)]
    assert kernels[0] - kernels[1] == 4 * 72 + 7  # four more layers and the second (local) rotary table
    # a decode step past the window: the sliding layers' keys stop at the window, the full layers' do not
    mixed = {**g3, "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4}
    d = build_graph(mixed, 2, 8, "decode").kernel_table()
    qk = d[d["name"] == "attn.qk"].set_index("block")
    assert (qk.loc["sliding_layer", "K"], qk.loc["layer", "K"]) == (4, 9)
    full = {**mixed, "layer_types": ["full_attention"] * 2}
    cache, cache_full = (build_graph(c, 2, 8, "decode").memory().activations for c in (mixed, full))
    assert cache < cache_full
    # the multimodal wrapper reads as its language model, with Gemma3TextConfig's defaults
    mm = load_config({"model_type": "gemma3", "text_config": {"hidden_size": 2560, "num_hidden_layers": 34,
                                                              "intermediate_size": 10240, "sliding_window": 1024}})
    assert (mm.family, mm.vocab, mm.heads, mm.head_dim, mm.layer_types.count("full_attention")) == \
        ("gemma3_text", 262_208, 8, 256, 5)
    assert mm.tied_embeddings
    # tensor parallel: the scores' soft-cap splits with the heads, the logits' with the vocabulary
    from hybridperf.graphs.parallel import parallel_graph

    tp = parallel_graph(g2, 2, 8, "train", tp=2).kernel_table().set_index("name")
    assert (tp.loc["attn.softcap_tanh", "B"], tp.loc["logit_softcap_tanh", "H"]) == (4 * 8, 50)


@pytest.mark.parametrize("bad,needle", [({"layer_types": ["sliding_attention"]}, "layer_types"),
                                        ({"layer_types": ["local", "global"]}, "layer_types"),
                                        ({"sliding_window": 0}, "sliding_window"),
                                        ({"attn_logit_softcapping": -1.0}, "attn_logit_softcapping"),
                                        ({"model_type": "gemma3"}, "text_config")])
def test_gemma2_and_gemma3_configs_are_checked(bad, needle):
    with pytest.raises(InputError, match=needle):
        load_config({"model_type": "gemma2", **LLAMA_SMALL, **bad})


def test_qwen3_norms_each_head_and_gemma_ties_and_scales():
    t = build_graph({"model_type": "qwen3", **LLAMA_SMALL}, 2, 8, "inf").kernel_table().set_index("name")
    assert (t.loc["q_norm.pow", ["B", "H"]].tolist(), t.loc["k_norm.pow", ["B", "H"]].tolist()) == ([64, 16], [32, 16])
    g = load_config({"model_type": "gemma", **LLAMA_SMALL})
    assert g.tied_embeddings and not load_config({"model_type": "llama", **LLAMA_SMALL}).tied_embeddings
    t = build_graph(g, 2, 8, "inf", dtype="bf16").kernel_table().set_index("name")
    assert t.loc["embed_scale", "op"] == "mulu" and t.loc["input_norm.weight", "dtype"] == "fp32"
    # under tensor parallelism Qwen3's per-head norms split with the heads
    from hybridperf.graphs.parallel import parallel_graph

    fw = parallel_graph({"model_type": "qwen3", **LLAMA_SMALL}, 2, 8, "train", tp=2).kernel_table().set_index("name")
    assert fw.loc["q_norm.pow", "B"] == 32


def test_phi3_fuses_its_projections_and_rotates_part_of_each_head():
    mha = {"model_type": "phi3", **LLAMA_SMALL, "num_key_value_heads": 4, "partial_rotary_factor": 0.5}
    t = build_graph(mha, 2, 8, "train").kernel_table()
    fw = t[t["phase"] == "fw"].set_index("name")
    assert fw.loc["qkv_proj", "K"] == 3 * 64 and fw.loc["gate_up_proj", "K"] == 2 * 128
    assert fw.loc["q_rope_cos", "H"] == 4 * 8  # the first half of each 16-wide head
    copies = set(fw.index[fw["op"] == "misc:copy"])
    assert {"attn.v_copy", "attn.merge_heads"} <= copies and not {"attn.q_copy", "attn.k_copy"} & copies
    # the fused outputs' gradients: q, k and v's summed (two adds), gate and up's concatenated (one copy)
    bw = set(t.loc[t["phase"] == "bw", "name"])
    assert {"qkv_out.grad_sum0", "qkv_out.grad_sum1", "gate_up_out.grad_cat"} <= bw
    # forward 39 kernels per layer with multi-head attention (TorchDispatchMode), decode checked in decode_trace
    assert _per_layer_and_outside(mha, "inf")[0] == 39
    from hybridperf.graphs.parallel import parallel_graph

    sharded = parallel_graph(mha, 2, 8, "train", tp=2).kernel_table().set_index("name")
    assert sharded.loc["qkv_proj", "K"] == 3 * 64 // 2
    assert sharded.loc["qkv_out.grad_sum0", "H"] == 3 * 64 // 2
    assert sharded.loc["gate_up_out.grad_cat", "nbytes"] == t.set_index("name").loc["gate_up_out.grad_cat", "nbytes"] / 2


NEOX = {"model_type": "gpt_neox", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "vocab_size": 100, "max_position_embeddings": 512, "num_hidden_layers": 2}


def test_gpt_neox_runs_attention_and_mlp_in_parallel_with_partial_rope():
    """TorchDispatchMode on HF eager GPTNeoXForCausalLM (transformers 5.23): 28 kernels per layer in a forward
    (30 in bf16: the softmax's casts), with or without the parallel residual and at any rotary_pct; 94 in a
    training step that accumulates into `.grad` (12 of them gradient accumulations, 16 the zero fills and
    copies of the backward of RoPE's slices), as the graph."""
    for extra in ({}, {"use_parallel_residual": False}, {"rotary_pct": 1.0}):
        assert _per_layer_and_outside({**NEOX, **extra}, "inf")[0] == 28
    assert _per_layer_and_outside(NEOX, "inf", "bf16")[0] == 30
    assert _per_layer_and_outside(NEOX, "train")[0] == 94
    fw = build_graph(NEOX, 2, 8, "inf").kernel_table().set_index("name")
    assert fw.loc["q_rope_cos", "H"] == 4 * 4  # rotary_pct 0.25 of each 16-wide head
    assert fw.loc["query_key_value", "K"] == 3 * 64 and fw.loc["embed_out", "K"] == 100
    assert not load_config(NEOX).tied_embeddings
    from hybridperf.graphs.optimizer import param_numels

    assert sum(param_numels(build_graph(NEOX, 2, 8, "train"))) == 79_872  # GPTNeoXForCausalLM.parameters()


T5_SMALL = {"model_type": "t5", "d_model": 64, "d_kv": 16, "d_ff": 128, "num_heads": 4, "vocab_size": 100,
            "num_layers": 2}


def test_t5_is_switch_without_experts_and_gates_its_ffn():
    """TorchDispatchMode on HF eager T5ForConditionalGeneration (transformers 5.23): T5 v1.0 (ReLU) runs
    Switch's dense blocks. v1.1's gated-gelu adds 18 kernels per encoder + decoder layer pair in
    inference (wi_1, gelu_new's eight kernels for ReLU's one and the gate multiply, twice) and 50 in a
    training step that accumulates into `.grad`; its untied LM head drops the d_model ** -0.5 scale (one
    kernel, two in training). Traced totals with 2 + 2 layers, gated minus ReLU: 35 (inference) and 98
    (training). The graph adds the same."""
    dense_switch = {**T5_SMALL, "model_type": "switch_transformers", "num_experts": 4, "encoder_sparse_step": 0,
                    "decoder_sparse_step": 0}
    gated = {**T5_SMALL, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}

    def n(cfg, layers, mode):
        g = build_graph({**cfg, "num_layers": layers, "num_decoder_layers": layers}, 2, 8, mode)
        return int(g.kernel_table()["count"].sum())

    for mode, per_pair, total in (("inf", 18, 35), ("train", 50, 98)):
        assert n(T5_SMALL, 2, mode) == n(dense_switch, 2, mode)
        assert n(gated, 3, mode) - n(gated, 2, mode) - (n(T5_SMALL, 3, mode) - n(T5_SMALL, 2, mode)) == per_pair
        assert n(gated, 2, mode) - n(T5_SMALL, 2, mode) == total, mode
    cfg = load_config(gated)
    assert cfg.gated_ffn and cfg.activation == "gelu_new" and not cfg.tied_embeddings
    assert "tied_scale" not in set(build_graph({**gated, "num_layers": 2}, 2, 8, "inf").kernel_table()["name"])


ROBERTA = {"model_type": "roberta", "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
           "vocab_size": 100, "num_hidden_layers": 2, "max_position_embeddings": 514, "pad_token_id": 1}


def test_roberta_runs_berts_layers_with_its_own_positions_and_heads():
    """TorchDispatchMode (transformers 5.23): RoBERTa's layers launch BERT's kernels (19 per layer in
    inference, 66 in training); its position ids add 8 tiny kernels; RobertaForMaskedLM trains without
    BERT's pooler and NSP head; 514 position rows hold 512 tokens."""
    bert = {**ROBERTA, "model_type": "bert", "max_position_embeddings": 512}
    for mode in ("inf", "train"):
        layer = lambda c: (build_graph({**c, "num_hidden_layers": 3}, 2, 8, mode).kernel_table()["count"].sum()  # noqa: E731
                           - build_graph(c, 2, 8, mode).kernel_table()["count"].sum())
        assert layer(ROBERTA) == layer(bert)
    inf = build_graph(ROBERTA, 2, 8, "inf").kernel_table()
    assert len(inf) - len(build_graph(bert, 2, 8, "inf").kernel_table()) == 8
    train = set(build_graph(ROBERTA, 2, 8, "train").kernel_table()["name"])
    assert "decoder" in train and not {"pooler", "seq_relationship"} & train
    assert load_config(ROBERTA).max_positions == 512
    build_graph(ROBERTA, 1, 512, "inf")
    with pytest.raises(InputError, match="maximum of 512"):
        build_graph(ROBERTA, 1, 513, "inf")
    assert load_config({**ROBERTA, "model_type": "xlm-roberta"}).family == "xlm_roberta"


def test_half_precision_opt_and_gpt_neo_upcast_their_attention():
    """TorchDispatchMode on bf16 OPT and GPT-Neo layers (transformers 5.23): OPT takes
    softmax(dtype=float32) and casts back, as Llama does; GPT-Neo casts q and k to fp32 before QK^T, so
    their layout copies, the QK^T bmm, the mask and the softmax run in fp32, and the probabilities are
    cast back before the AV bmm."""
    opt = {"model_type": "opt", "hidden_size": 64, "ffn_dim": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
           "vocab_size": 100, "max_position_embeddings": 512, "word_embed_proj_dim": 64}
    neo = {"model_type": "gpt_neo", "hidden_size": 64, "num_layers": 2, "num_heads": 4, "vocab_size": 100,
           "max_position_embeddings": 512, "attention_types": [[["global", "local"], 1]], "intermediate_size": 256}

    def attn(cfg, dtype):
        t = build_graph(cfg, 2, 8, "inf", dtype=dtype).kernel_table()
        t = t[(t["block"] == "layer") & t["name"].str.startswith("attn.")]
        return dict(zip(t["name"], t["dtype"]))

    assert [n for n, d in attn(opt, "bf16").items() if d == "fp32"] == ["attn.softmax"]
    assert "attn.softmax_in" in attn(opt, "bf16") and "attn.softmax_in" not in attn(opt, "fp16")
    b16 = attn(neo, "bf16")
    assert [n for n, d in b16.items() if d == "fp32"] == ["attn.q_copy", "attn.k_copy", "attn.qk", "attn.mask0",
                                                          "attn.softmax"]
    assert b16["attn.av"] == "bf16" and attn(neo, "fp16")["attn.qk"] == "fp32"
    assert "attn.q_to_fp32" in attn(neo, "fp16")  # explicit .to(float32): fp16 is cast as well
    assert set(attn(neo, "fp32").values()) == {"fp32"} and "attn.q_to_fp32" not in attn(neo, "fp32")


def test_half_precision_tensor_parallel_collectives_halve():
    from hybridperf.graphs.parallel import predict_parallel

    kw = dict(device="DGX-H100", tp=2, predictor=PRIOR)
    c32 = predict_parallel(LLAMA, 8, 64, "train", **kw)
    c16 = predict_parallel(LLAMA, 8, 64, "train", dtype="bf16", **kw)
    assert c16.result["tp_comm_ms"] < c32.result["tp_comm_ms"]


@pytest.mark.parametrize("dtype,kernels", [("fp32", 265), ("bf16", 317)])
def test_olmo3_with_both_layer_types_builds_a_rotary_table_for_each(dtype, kernels):
    """A 4-layer OLMo 3 as released (three sliding layers, then a full one; window 4 < the 8 cached tokens): one
    decode step launches what TorchDispatchMode counts on transformers 5.24, the second rotary table included."""
    cfg = {**LLAMA_SMALL, "model_type": "olmo3", "num_hidden_layers": 4, "sliding_window": 4, "use_cache": True,
           "layer_types": ["sliding_attention"] * 3 + ["full_attention"]}
    assert int(build_graph(cfg, 2, 8, "decode", dtype=dtype).kernel_table()["count"].sum()) == kernels


def test_saved_activations_match_the_cpu_autograd_counts():
    """The per-family formula reproduces the saved-tensor bytes counted with autograd hooks on the CPU
    (experiments/models/activation_memory.py, shipped as experiments/data/activation_memory.csv)."""
    from hybridperf.graphs.memory import saved_activation_bytes

    counts = pd.read_csv(Path(__file__).resolve().parents[1] / "experiments" / "data" / "activation_memory.csv")
    assert set(counts["family"]) == {"bert", "gpt2", "gpt_neo", "gpt_neox", "llama", "opt", "qwen3", "gemma", "gemma2",
                                     "gemma3_text", "olmo2"}
    assert set(counts["dtype"]) == {"fp32", "bf16"}
    for r in counts.itertuples():
        for layers, measured in ((2, r.saved_2_layers), (4, r.saved_4_layers)):
            est = saved_activation_bytes(r.family, r.hidden, r.ffn, r.heads, r.vocab, layers, r.batch, r.seq,
                                         dtype_bytes=DTYPE_BYTES[r.dtype], max_positions=r.max_positions)
            assert est == pytest.approx(measured, rel=0.08), (r.family, r.dtype, layers)


def test_training_memory_grows_with_batch_and_quadratically_with_seq():
    from hybridperf.graphs.memory import saved_activation_bytes

    a = saved_activation_bytes("gpt2", 1024, 4096, 16, 50257, 24, 1, 1024)
    assert saved_activation_bytes("gpt2", 1024, 4096, 16, 50257, 24, 2, 1024) == pytest.approx(2 * a)
    assert saved_activation_bytes("gpt2", 1024, 4096, 16, 50257, 24, 1, 2048) > 2 * a
    # in 16 bits the layers keep half the bytes, but the loss keeps its fp32 log-probabilities (HF's upcast)
    half = saved_activation_bytes("gpt2", 1024, 4096, 16, 50257, 24, 1, 1024, dtype_bytes=2)
    assert a / 2 < half < 0.6 * a
    # families outside the count borrow the closest counted block
    assert saved_activation_bytes("mistral", 1024, 4096, 16, 32000, 24, 1, 1024) == \
        saved_activation_bytes("llama", 1024, 4096, 16, 32000, 24, 1, 1024)


def test_linear_forms_follow_the_module_that_launches_them():
    """Only nn.Linear with a bias is F.linear's `linear` form: GPT-2's Conv1D addmm, bias-free
    projections and every dX are `mm`, every dW `mm_t`; the kernel requests carry the form to the prior."""
    def forms(cfg, mode="train"):
        t = build_graph(cfg, 2, 64, mode).kernel_table()
        lin = t[t["op"] == "linear"]
        return {(n, p): f for n, p, f in zip(lin["name"], lin["phase"], lin["form"])}

    gpt2 = forms(TINY)
    assert {gpt2[(n, "fw")] for n in ("c_attn", "attn_proj", "c_fc", "mlp_proj", "lm_head")} == {"mm"}
    neo = forms(dict(FAMILIES)["gpt_neo"])
    assert neo[("q_proj", "fw")] == "mm" and neo[("attn_proj", "fw")] == neo[("c_fc", "fw")] == "linear"
    bert = forms(dict(FAMILIES)["bert"])
    assert {f for (n, p), f in bert.items() if p == "fw" and "query" in n} == {"linear"}
    backward = {n: f for (n, p), f in {**gpt2, **neo, **bert}.items() if p == "bw"}
    assert {f for n, f in backward.items() if n.endswith(".dX")} == {"mm"}
    assert {f for n, f in backward.items() if n.endswith(".dW")} == {"mm_t"}
    assert set(backward) == {n for n in backward if n.endswith((".dX", ".dW"))}
    _, req = kernel_requests(build_graph(dict(FAMILIES)["bert"], 2, 64, "inf").kernel_table())
    assert set(req.loc[req["OPName"] == "linear", "form"]) == {"linear"}


def test_python_api_takes_the_configs_dtype_as_the_cli_does(tmp_path):
    """Without a dtype, `ModelRequest`, `predict_model` and `build_graph(dtype=None)` build the model in the dtype
    its config names (transformers 5's `from_config`), fp32 where it names none, as `predict-model` does."""
    from hybridperf.graphs import ModelRequest

    raw = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
           "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512}
    plain, bf16 = tmp_path / "plain.json", tmp_path / "bf16.json"
    plain.write_text(json.dumps(raw))
    bf16.write_text(json.dumps({**raw, "torch_dtype": "bfloat16"}))
    assert ModelRequest(str(bf16), 1, 64).graph().dtype == "bf16"
    assert ModelRequest(str(plain), 1, 64).graph().dtype == "fp32"
    amp = ModelRequest(str(bf16), 1, 64, amp=True).graph()  # fp32 weights under autocast, as --amp alone
    assert amp.memory().total == ModelRequest(str(bf16), 1, 64, dtype="fp32", amp=True).graph().memory().total
    assert build_graph(load_config(str(bf16)), 1, 64, dtype=None).dtype == "bf16"
    wrapped = tmp_path / "gemma3.json"  # a multimodal wrapper names the dtype at its top level only
    wrapped.write_text(json.dumps({"model_type": "gemma3", "torch_dtype": "bfloat16", "text_config": {
        "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_hidden_layers": 2,
        "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000}}))
    assert ModelRequest(str(wrapped), 1, 64).graph().dtype == "bf16"
    dev = "NVIDIA H100 80GB HBM3"
    given = predict_model(str(bf16), 1, 64, device=dev, dtype="bf16").ms
    assert predict_model(str(bf16), 1, 64, device=dev).ms == given
