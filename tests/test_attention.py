"""Fused attention: the prior's physics, the attention-implementation registry, --attn/--amp through predict-model."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from hybridperf.cli.app import app
from hybridperf.devices import get_device
from hybridperf.errors import InputError, SpecError
from hybridperf.graphs import build_graph, predict_model
from hybridperf.graphs.attention import IMPLEMENTATIONS, NO_SDPA
from hybridperf.graphs.parallel import predict_parallel
from hybridperf.predictor import Predictor
from hybridperf.residual_models.collectives import CollectiveModel
from hybridperf.priors import attention as A

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "configs"
H100, A100, B200 = (get_device(n) for n in ("h100_sxm", "a100_sxm", "b200_sxm"))
PRIOR = Predictor.prior_only()
LLAMA = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 4096}
GPT2 = {"model_type": "gpt2", "n_embd": 256, "n_head": 4, "n_layer": 2, "vocab_size": 1000, "n_positions": 2048}


def test_causal_tiles_cost_about_half_and_short_prefills_fill_a_tile():
    full = A.computed_pairs(4096, 4096, False, 0, 128, 128)
    causal = A.computed_pairs(4096, 4096, True, 0, 128, 128)
    assert 0.5 < causal / full < 0.55
    assert A.computed_pairs(16, 16, True, 0, 128, 128) == 128 * 128  # one padded tile
    assert A.computed_pairs(8192, 8192, True, 1024, 128, 128) < 0.35 * A.computed_pairs(8192, 8192, True, 0, 128, 128)


def test_prefill_scales_with_work_and_hardware():
    t1, t4 = (A.context_attention_ms(b, 4096, 32, 8, 128, H100) for b in (1, 4))
    assert 3.0 < t4 / t1 < 4.5
    assert A.context_attention_ms(4, 4096, 32, 8, 128, B200) < t4 < A.context_attention_ms(4, 4096, 32, 8, 128, A100)
    assert A.context_attention_ms(4, 4096, 32, 8, 128, H100, causal=False) > 1.6 * t4
    assert A.context_attention_ms(4, 4096, 32, 8, 128, H100, window=512) < 0.5 * t4


def test_decode_is_bound_by_the_kv_cache_read():
    short, long = (A.generation_attention_ms(64, kv, 32, 8, 128, H100) for kv in (2048, 16384))
    assert 5.0 < long / short < 8.5
    fp8 = A.generation_attention_ms(64, 16384, 32, 8, 128, H100, kv_dtype="fp8")
    assert 0.4 < fp8 / long < 0.65
    mha = A.generation_attention_ms(64, 16384, 32, 32, 128, H100)
    assert mha > 3.0 * long  # four times the key/value heads to read
    assert A.generation_attention_ms(64, 16384, 32, 8, 128, H100, window=1024) < 0.2 * long


def test_an_fp8_cache_decodes_at_its_familys_share_and_pays_its_time_per_call():
    """A family's fp8 cache streams at its fitted share of the family's bandwidth and adds a fixed time per call
    (small caches decode slower in fp8 than in bf16); a family with no fp8 fit takes the engines' median."""
    c = dataclasses.replace(A.CONSTANTS, decode_fp8_bw={"fa3": A.Fitted(0.5, "share", "t"),
                                                         "trtllm": A.Fitted(1.0, "share", "t")},
                            decode_fp8_ms={"fa3": A.Fitted(0.004, "ms", "t"), "trtllm": A.Fitted(0.0, "ms", "t")})

    def t(kv_len, kv_dtype, src="fa3", consts=c):
        return float(A.generation_attention_ms(128, kv_len, 32, 8, 128, H100, kv_dtype=kv_dtype, kernel_source=src,
                                               constants=consts))

    assert t(1 << 17, "fp8") / t(1 << 17, "bf16") == pytest.approx(1.0, rel=0.03)  # half the bytes at half the rate
    assert t(16, "fp8") - t(16, "bf16") == pytest.approx(0.004, rel=0.05)
    assert t(1 << 17, "fp8", "trtllm_mha") / t(1 << 17, "bf16", "trtllm_mha") == pytest.approx(0.5, rel=0.03)
    fa2 = t(1 << 17, "fp8", "flash_attention") / t(1 << 17, "bf16", "flash_attention")
    assert fa2 == pytest.approx(0.5 / 0.75, rel=0.03)  # the median of the fitted shares
    assert t(16, "int8") == pytest.approx(t(16, "fp8"))  # an int8 cache dequantizes as fp8's does
    bare = dataclasses.replace(c, decode_fp8_bw={}, decode_fp8_ms={})
    assert t(16, "fp8", "flash_attention", bare) <= t(16, "bf16", "flash_attention", bare)


def test_decode_never_gets_faster_as_the_kv_cache_grows():
    """A longer cache takes at least as long, across the split-KV kernel's chunk boundaries (a whole split count
    priced 257 keys 1.2x faster than 254 on H100: two chunks of 128 against one of 254)."""
    kv = np.arange(2, 4100)
    for dev in (H100, A100, B200):
        for batch, src in ((1, "vllm_flash_attn_fa3"), (4, "flashinfer"), (1, "torch_flow")):
            t = A.generation_attention_ms(batch, kv, 32, 8, 128, dev, kernel_source=src)
            assert np.all(np.diff(t) >= -1e-12 * t[1:]), (dev.name, batch, src)


def test_sdpa_backends_and_backward():
    fwd = A.sdpa_ms(4, 2048, 32, 8, 128, H100)
    bwd = A.sdpa_ms(4, 2048, 32, 8, 128, H100, backward=True)
    assert 2.0 * fwd < bwd < 5.0 * fwd
    assert A.sdpa_ms(4, 2048, 32, 32, 128, H100, "fp32", backend="efficient") > 2.0 * fwd
    assert A.sdpa_ms(4, 2048, 32, 8, 128, H100, causal=False, backend="efficient") > fwd  # masked: every tile
    dec = A.sdpa_ms(8, 1, 32, 8, 128, H100, kv_seq=4096, backend="decode")
    assert dec == pytest.approx(float(A.generation_attention_ms(8, 4096, 32, 8, 128, H100, kernel_source="sdpa")))
    # fp32 runs on a part's fp32 matrix cores where it has no TF32 (MI355X: CDNA4 dropped it), not its vector units
    mi355, mi325 = get_device("MI355X"), get_device("MI325X")
    assert A._fp32_rate(mi355) == mi355.peak("fp32", matrix=True) > mi355.peak("fp32")
    fp32 = [A.sdpa_ms(4, 2048, 32, 32, 128, d, "fp32", backend="efficient") for d in (mi355, mi325)]
    assert fp32[0] < 2.0 * fp32[1]  # 3.4x on its vector units


def test_constants_carry_provenance():
    c = A.CONSTANTS
    for f in (*c.efficiency.values(), *c.decode_bw.values(), c.sdpa_bwd_efficiency, c.decode_overhead_ms):
        assert f.value > 0 and f.unit and f.source and f.script.endswith(".py")
    assert "H100" in c.efficiency["sdpa"].source  # read off one GPU, and it says so


def _layer(t: pd.DataFrame, phase: str = "fw") -> pd.DataFrame:
    return t[(t["block"] == "layer") & (t["phase"] == phase)]


def test_sdpa_replaces_the_eager_span_with_one_fused_kernel():
    eager = build_graph(GPT2, 2, 16, "inf", "bf16", attn="eager").kernel_table()
    sdpa = build_graph(GPT2, 2, 16, "inf", "bf16", attn="sdpa").kernel_table()
    # transformers 5.24 (TorchDispatchMode, use_cache=False): GPT-2 25 -> 17 kernels per layer, and the two
    # torch.cat of the DynamicCache transformers builds by default
    assert (len(_layer(eager)), len(_layer(sdpa))) == (25, 19)
    lay = _layer(sdpa)
    fills = lay[lay["name"].str.startswith("attn.cache_fill")]  # each reads and writes 2 x 16 tokens x 256 in bf16
    assert list(fills["op"]) == ["misc:strided"] * 2 and (fills["nbytes"] == 2 * 2 * 16 * GPT2["n_embd"] * 2).all()
    assert (lay["op"] == "attention").sum() == 1 and not lay["op"].isin(["softmax", "bmm"]).any()
    assert lay.loc[lay["op"] == "attention", "attn"].str.startswith("flash").all()
    mha = {**LLAMA, "num_key_value_heads": 8}  # fp32 without grouped-query attention: the efficient backend
    llama = _layer(build_graph(mha, 2, 16, "inf", "fp32", attn="sdpa").kernel_table())
    assert len(llama) == 36 and llama["attn"].str.startswith("efficient").any()  # Llama: 42 -> 34, + 2 cache cats
    dec = build_graph(mha, 2, 16, "decode", "fp32", attn="sdpa").kernel_table()
    assert len(_layer(dec)) == 36 and dec["attn"].str.startswith("decode").any()  # decode: 42 (GQA) -> 36


def test_cache_fill_only_in_causal_lm_prefill_and_training():
    """Keys and values of the key/value heads (grouped-query: 2 of 8 heads here), fp32 keys under AMP (RoPE's),
    and in eager grouped-query attention too;
    none under gradient checkpointing or a config's use_cache=false (transformers turns the cache off), in a
    decode step (its own cache kernels) or in an encoder."""
    def fills(g):
        t = g.kernel_table()
        return t[t["name"].str.startswith("attn.cache_fill")]

    f = fills(build_graph(LLAMA, 2, 64, "train", "bf16", attn="sdpa"))
    assert list(f["name"]) == ["attn.cache_fill_k", "attn.cache_fill_v"] and (f["phase"] == "fw").all()
    assert (f["nbytes"] == 2 * 2 * 64 * 2 * 64 * 2).all()  # read + write, 128 tokens x 2 heads x 64, bf16
    amp = fills(build_graph(LLAMA, 2, 64, "inf", "fp32", attn="sdpa", amp=True)).set_index("name")["dtype"]
    assert (amp["attn.cache_fill_k"], amp["attn.cache_fill_v"]) == ("fp32", "bf16")
    assert fills(build_graph(LLAMA, 2, 64, "inf", "fp32", attn="sdpa")).shape[0] == 2  # math backend: eager span
    assert fills(build_graph(LLAMA, 2, 64, "inf", "bf16", attn="eager")).shape[0] == 2  # before repeat_kv's copies
    assert fills(build_graph(GPT2, 2, 64, "inf", "fp32", attn="eager")).empty  # multi-head: its k/v copies are them
    assert fills(build_graph(LLAMA, 2, 64, "train", "bf16", attn="sdpa", recompute=True)).empty
    assert fills(build_graph({**LLAMA, "use_cache": False}, 2, 64, "inf", "bf16", attn="sdpa")).empty
    assert fills(build_graph(LLAMA, 2, 64, "decode", "bf16", attn="sdpa")).empty
    bert = {"model_type": "bert", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
            "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 512}
    assert fills(build_graph(bert, 2, 64, "inf", "bf16", attn="sdpa")).empty


def test_sdpa_training_has_a_fused_backward_and_eager_is_unchanged():
    t = build_graph(LLAMA, 2, 64, "train", "bf16", attn="sdpa").kernel_table()
    assert (_layer(t, "bw")["op"] == "attention_bw").sum() == 1
    assert (_layer(t, "fw")["op"] == "attention_bw").sum() == 0
    eager_act = build_graph(LLAMA, 2, 1024, "train", "bf16", attn="eager").memory().activations
    assert build_graph(LLAMA, 2, 1024, "train", "bf16", attn="sdpa").memory().activations < 0.8 * eager_act
    assert build_graph(LLAMA, 2, 64, "train", "bf16").kernel_table().equals(
        build_graph(LLAMA, 2, 64, "train", "bf16", attn="eager").kernel_table())


def test_backends_follow_pytorch_and_transformers():
    gqa_fp32 = _layer(build_graph(LLAMA, 2, 64, "inf", "fp32", attn="sdpa").kernel_table())
    assert not (gqa_fp32["op"] == "attention").any()  # math backend: the eager kernels
    mha_fp32 = _layer(build_graph(GPT2, 2, 64, "inf", "fp32", attn="sdpa").kernel_table())
    assert mha_fp32.loc[mha_fp32["op"] == "attention", "attn"].str.startswith("efficient").all()
    windowed = {**LLAMA, "model_type": "mistral", "sliding_window": 32}
    w = _layer(build_graph(windowed, 2, 64, "inf", "bf16", attn="sdpa").kernel_table())
    assert w.loc[w["op"] == "attention", "attn"].str.contains("efficient.*causal=0").all()
    assert w["name"].str.contains("repeat").sum() == 2  # an explicit mask: transformers repeats k and v
    gemma2 = json.loads((CONFIGS / "gemma2_9b.json").read_text())
    assert gemma2["model_type"] in NO_SDPA
    assert build_graph(gemma2, 1, 64, "inf", "bf16", attn="sdpa").kernel_table().equals(
        build_graph(gemma2, 1, 64, "inf", "bf16", attn="eager").kernel_table())


def test_sdpa_is_faster_at_long_sequences_and_breakdown_shows_attention():
    cfg = CONFIGS / "llama3_8b.json"
    eager = predict_model(cfg, 1, 4096, "inf", H100, PRIOR, dtype="bf16", attn="eager")
    res = predict_model(cfg, 1, 4096, "inf", H100, PRIOR, dtype="bf16")
    assert res.ms < 0.9 * eager.ms
    assert res.lo_ms <= res.ms <= res.hi_ms
    bd = res.breakdown().set_index("group")
    assert "attention" in bd.index and "softmax" not in bd.index


def test_amp_runs_gemms_in_bf16_with_fp32_weights():
    cfg = CONFIGS / "llama3_8b.json"
    kw = {"predictor": PRIOR, "attn": "sdpa"}
    bf16 = predict_model(cfg, 1, 1024, "train", H100, dtype="bf16", **kw)
    amp = predict_model(cfg, 1, 1024, "train", H100, amp=True, **kw)
    fp32 = predict_model(cfg, 1, 1024, "train", H100, dtype="fp32", **kw)
    assert bf16.ms < amp.ms < fp32.ms
    assert amp.graph.memory().weights == pytest.approx(fp32.graph.memory().weights)
    t = amp.kernels
    assert (t["name"].str.endswith(".w_cast") & (t["phase"] == "fw")).sum() > 0
    assert (t.loc[t["op"] == "ln", "dtype"] == "fp32").all() if (t["op"] == "ln").any() else True
    assert (t.loc[t["phase"] == "acc", "dtype"] == "fp32").all()
    with pytest.raises(InputError, match="fp32"):
        build_graph(cfg, 1, 64, "train", "bf16", amp=True)
    # CPU autocast trace of a Llama layer with SDPA (transformers 5.24, use_cache=False): 48 kernels, 14 of them
    # casts; transformers' default cache adds its two torch.cat
    lay = _layer(build_graph(LLAMA, 2, 16, "inf", "fp32", attn="sdpa", amp=True).kernel_table())
    assert len(lay) == 50 and (lay["op"] == "misc:cast").sum() == 14


def test_tensor_parallel_shards_the_fused_kernel():
    kw = {"predictor": PRIOR, "collective_model": CollectiveModel.prior_only(), "dtype": "bf16"}
    r = predict_parallel(LLAMA, 4, 64, "train", "DGX-H100", tp=2, attn="sdpa", **kw)
    att = r.prediction.kernels
    att = att[att["op"] == "attention"]
    assert len(att) and (att["H"] == 4).all() and att["attn"].str.contains("kvh=1").all()
    eager = predict_parallel(LLAMA, 4, 1024, "train", "DGX-H100", tp=2, **kw)
    sdpa = predict_parallel(LLAMA, 4, 1024, "train", "DGX-H100", tp=2, attn="sdpa", **kw)
    assert sdpa.memory.activations < eager.memory.activations


def test_cli_attn_and_amp(tmp_path):
    runner = CliRunner()
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(LLAMA))
    base = ["predict-model", "--config", str(cfg), "--batch", "2", "--seq", "128", "--device", "H100", "--json",
            "--prior-only"]
    outs = {}
    for extra in ([], ["--attn", "eager"], ["--amp", "--mode", "train"], ["--dtype", "bf16"]):
        r = runner.invoke(app, base + extra)
        assert r.exit_code == 0, r.output
        outs[" ".join(extra)] = json.loads(r.stdout.strip().splitlines()[-1])
    assert all(v["lo_ms"] <= v["e2e_ms"] <= v["hi_ms"] for v in outs.values())
    bad = runner.invoke(app, base + ["--attn", "flash"])
    assert bad.exit_code != 0 and isinstance(bad.exception, InputError) and "eager, sdpa" in str(bad.exception)


def test_predict_kernels_prices_an_attention_row(tmp_path):
    src = tmp_path / "k.csv"
    pd.DataFrame({"OPName": ["attention", "attention_bw"], "B": [4, 4], "M": [1024, 1024], "N": [1024, 1024],
                  "K": [128, 128], "H": [32, 32], "dtype": ["bf16", "bf16"]}).to_csv(src, index=False)
    out = tmp_path / "o.csv"
    r = CliRunner().invoke(app, ["predict-kernels", str(src), "--device", "H100", "--output", str(out)])
    assert r.exit_code == 0, r.output
    o = pd.read_csv(out)
    assert (o["pred_lo_ms"] <= o["pred_ms"]).all() and (o["pred_ms"] <= o["pred_hi_ms"]).all()
    assert o["pred_ms"].iloc[1] > 2.0 * o["pred_ms"].iloc[0]


def test_registry_names():
    assert set(IMPLEMENTATIONS) == {"eager", "sdpa"}


def test_modern_models_scores_a_runs_csv(tmp_path):
    from experiments.models import modern_models

    (tmp_path / "llama.json").write_text(json.dumps(LLAMA))
    runs = pd.DataFrame({"config": ["llama.json"] * 3, "layers": [2, 2, ""], "batch": [2, 4, 8], "seq": [128, 256, 512],
                         "mode": ["inf", "train", "decode"], "dtype": ["bf16", "fp32", "bf16"],
                         "attn": ["sdpa", "sdpa", "eager"], "amp": [False, True, False],
                         "measured_ms": [1.0, 5.0, 2.0]})
    runs.to_csv(tmp_path / "runs.csv", index=False)
    out = tmp_path / "r.md"
    modern_models.main([str(tmp_path / "runs.csv"), "--device", "NVIDIA H200", "--prior-only", "--out", str(out)])
    text = out.read_text()
    assert "coverage_pct" in text and "| all" in text
    scored = modern_models.score(runs, tmp_path, CONFIGS, "NVIDIA H200", PRIOR)
    assert np.isfinite(scored["pred_ms"]).all() and (scored["lo_ms"] <= scored["pred_ms"]).all()
    assert bool(scored.loc[1, "amp"]) and scored.loc[1, "dtype"] == "fp32"
    summ = modern_models.summary(scored)
    assert summ.iloc[-1]["runs"] == 3 and 0 <= summ.iloc[-1]["coverage_pct"] <= 100


def test_modern_models_leaves_untimed_runs_out(tmp_path):
    """A run that ran out of memory has no time: it is left out, not scored as an interval miss; a run measured
    twice counts once, at the mean of its times; a CSV with no time at all is a one-line error."""
    from experiments.models import modern_models

    (tmp_path / "llama.json").write_text(json.dumps(LLAMA))
    runs = pd.DataFrame({"config": ["llama.json"] * 3, "layers": [2, 2, 2], "batch": [2, 2, 4], "seq": [128, 128, 256],
                         "mode": ["inf", "inf", "train"], "dtype": ["bf16", "bf16", "fp32"], "attn": ["sdpa"] * 3,
                         "amp": [False, False, True], "measured_ms": [1.0, 3.0, None],
                         "note": ["", "", "out of memory"]})
    runs.to_csv(tmp_path / "runs.csv", index=False)
    out = tmp_path / "r.md"
    modern_models.main([str(tmp_path / "runs.csv"), "--device", "NVIDIA H200", "--prior-only", "--out", str(out)])
    assert "3 rows, 1 runs" in out.read_text()
    scored = modern_models.score(runs, tmp_path, CONFIGS, "NVIDIA H200", PRIOR)
    assert len(scored) == 1 and scored.loc[0, "measured_ms"] == 2.0
    assert modern_models.summary(scored).iloc[-1]["runs"] == 1
    with pytest.raises(SystemExit, match="^error: no run"):
        modern_models.score(runs.assign(measured_ms=None), tmp_path, CONFIGS, "NVIDIA H200", PRIOR)
    with pytest.raises(SystemExit, match="^error: the runs CSV has no measured_ms"):
        modern_models.score(runs.drop(columns="measured_ms"), tmp_path, CONFIGS, "NVIDIA H200", PRIOR)


def test_measure_modern_models_argument():
    from experiments.gpu.measure_modern import MODELS, parse_models

    assert parse_models("") == list(MODELS)
    assert parse_models("phi3_mini, gpt_oss_20b:8") == [("phi3_mini", None), ("gpt_oss_20b", 8)]
    assert parse_models("mixtral_8x7b") == [("mixtral_8x7b", dict(MODELS)["mixtral_8x7b"])]
    with pytest.raises(SystemExit, match="error: no config"):
        parse_models("no_such_model")


def test_short_gqa_prefill_packs_query_heads_into_one_tile():
    """128 one-token prefills, 64 query heads over 2 KV heads: packed, 256 CTAs (2 waves on an H100) instead of
    8,192 (63 waves); a long prefill and PyTorch SDPA keep one CTA per query head, SDPA's short (16-row) tiles each
    paying 16/128 of its full tile's wave latency."""
    dev = get_device("NVIDIA H100 80GB HBM3")
    c = A.CONSTANTS
    t = float(A.context_attention_ms(128, 1, 64, 2, 64, dev, kernel_source="fa3"))
    waves = 2  # 256 CTAs over 132 SMs
    assert t == pytest.approx(c.context_overhead_ms.value + waves * c.context_wave_ms.value, rel=0.05)
    per_head = float(A.context_attention_ms(128, 1, 64, 64, 64, dev, kernel_source="fa3"))  # MHA: nothing to pack
    assert per_head > 10 * t
    sdpa = float(A.context_attention_ms(128, 1, 64, 2, 64, dev))
    assert t < sdpa < per_head
    assert sdpa - c.context_overhead_ms.value < 63 * c.sdpa_wave_ms.value / 2  # not 63 full tiles' wave latency
    long = [float(A.context_attention_ms(1, 4096, 32, kv, 128, dev, kernel_source="fa3")) for kv in (8, 32)]
    assert long[0] == pytest.approx(long[1], rel=0.02)  # the same pairs: no packed layout for a long prefill


def test_decode_wave_latency_scales_with_the_sm_clock():
    h100 = get_device("NVIDIA H100 80GB HBM3")
    slow = dataclasses.replace(h100, boost_clock_mhz=h100.boost_clock_mhz / 2)
    # latency-bound: many tiny CTAs (one key each), so the waves set the time
    t = [float(A.generation_attention_ms(4096, 1, 8, 8, 64, d, kernel_source="trtllm")) for d in (h100, slow)]
    over = A.CONSTANTS.decode_overhead_ms.value
    assert (t[1] - over) == pytest.approx(2 * (t[0] - over), rel=0.05)


def test_blackwell_ultra_doubles_the_softmax_exponential_rate():
    b200, b300 = get_device("B200"), get_device("B300")
    per_sm_clock = [A.exp_rate(d) / (d.num_sms * d.boost_clock_mhz * 1e6) for d in (b200, b300)]
    assert per_sm_clock == [16.0, 32.0]
    # an exponential-bound prefill (fp8, head_dim 64) runs faster on the faster SFUs alone
    same_but_sfu = dataclasses.replace(b200, sfu_exp_per_sm_clock=32.0)
    t = [float(A.context_attention_ms(4, 8192, 32, 8, 64, d, dtype="fp8", kv_dtype="fp8", kernel_source="trtllm"))
         for d in (b200, same_but_sfu)]
    assert t[1] < 0.9 * t[0]


def test_sm120_blackwell_runs_mma_sync_kernels_at_its_full_tensor_rate():
    pro = get_device("rtx_pro_6000_server")
    assert (pro.arch, pro.kernel_arch, get_device("B200").kernel_arch) == ("blackwell", "ada", "blackwell")
    assert A.generation(pro, "fa2").isa_fraction == 1.0  # no wgmma/tcgen05 to fall short of
    as_datacenter = dataclasses.replace(pro, tensor_isa="")
    assert A.generation(as_datacenter, "fa2").isa_fraction == 0.5
    # a compute-bound FlashAttention-2 prefill is priced at the whole mma.sync rate, not half of it
    t = [float(A.context_attention_ms(8, 8192, 32, 8, 128, d, kernel_source="vllm_flash_attn"))
         for d in (pro, as_datacenter)]
    assert t[0] < 0.7 * t[1]
    with pytest.raises(SpecError, match="tensor_isa"):
        dataclasses.replace(pro, tensor_isa="hmma")


def test_tensorrt_llm_decode_of_a_large_query_group_falls_back_to_one_kv_pass_per_query_head():
    def t(heads, src):
        return float(A.generation_attention_ms(64, 8192, heads, 1, 128, H100, kernel_source=src))
    # XQA packs up to 32 query heads of a KV head: the KV cache is read once
    assert t(32, "torch_flow") < 2.0 * t(8, "torch_flow")
    # beyond, masked MHA runs one CTA per (sequence, query head), each streaming its head's keys and values:
    # twice the heads, twice the waves of CTAs and twice the time
    assert t(64, "torch_flow") > 10.0 * t(32, "torch_flow")
    assert t(128, "torch_flow") == pytest.approx(2 * t(64, "torch_flow"), rel=0.05)
    # each CTA is a dependent chain in SM cycles: a fixed start plus its keys at a rate per CTA, so a GPU of the
    # same SMs at twice the clock takes half the time, whatever its memory bandwidth
    fast = dataclasses.replace(H100, boost_clock_mhz=2 * H100.boost_clock_mhz, mem_bw_gbs=H100.mem_bw_gbs / 2)
    assert float(A.mmha_ms(64, 64, 8192, 128, fast)) == pytest.approx(float(A.mmha_ms(64, 64, 8192, 128, H100)) / 2)
    c = A.CONSTANTS
    start = c.mmha_cta_kcycles.value * 1e3 / (H100.boost_clock_mhz * 1e3)  # ms per wave at no keys
    assert float(A.mmha_ms(H100.num_sms * A.DECODE_CTAS_PER_SM, 1, 0, 128, H100)) == pytest.approx(start)
    # few sequences leave SMs idle: multi-block mode splits each head's cache over more CTAs, so one sequence takes
    # well under one CTA's whole chain; once the sequences fill the SMs, per sequence the time is flat
    chain = start + 8192 * 128 * 4.0 / c.mmha_bytes_per_cycle.value / (H100.boost_clock_mhz * 1e3)
    assert float(A.mmha_ms(1, 64, 8192, 128, H100)) < 0.5 * chain

    def per_seq(batch):
        return float(A.generation_attention_ms(batch, 8192, 64, 1, 128, H100, kernel_source="torch_flow")) / batch
    assert per_seq(1) > 1.5 * per_seq(64) and per_seq(64) == pytest.approx(per_seq(256), rel=0.05)
    # other engines' decode kernels (FlashInfer, TensorRT-LLM's FMHA in SGLang) keep one pass, as does an
    # attention TensorRT-LLM decodes in a kernel of its own (MLA, DeepSeek-V4)
    assert t(64, "trtllm_mha") < 3.0 * t(32, "trtllm_mha")
    own = [float(A.generation_attention_ms(64, 8192, h, 1, 128, H100, kernel_source="torch_flow", xqa_fallback=False))
           for h in (32, 64)]
    assert own[1] < 3.0 * own[0]


def test_phi3_sliding_window_masks_sdpa_and_caps_the_cache():
    """Phi-3 slides every layer's window when its config sets one, as Mistral does: past the window
    transformers hands SDPA an explicit mask (every tile computed, the efficient backend) and a decode step
    attends to the window only."""
    from hybridperf.graphs.attention import explicit_mask
    from hybridperf.graphs.config import config_from_dict, kv_length

    phi3 = {**LLAMA, "model_type": "phi3", "sliding_window": 255}
    cfg = config_from_dict(phi3, source="test")
    assert cfg.sliding_window == 255 and kv_length(cfg, 1024) == 255 and kv_length(cfg, 100) == 101
    assert explicit_mask(cfg, {"S_kv": 255}) and not explicit_mask(cfg, {"S_kv": 254})
    no_window = config_from_dict({**phi3, "sliding_window": None}, source="test")
    assert no_window.sliding_window == 0 and kv_length(no_window, 1024) == 1025
    assert config_from_dict({**LLAMA, "model_type": "phi3"}, source="test").sliding_window == 0  # HF: None
    assert config_from_dict({**LLAMA, "model_type": "mistral"}, source="test").sliding_window == 4096  # HF's default
    specs = {s: set(build_graph(cfg, 2, s, dtype="bf16", attn="sdpa").kernel_table().query("op == 'attention'")["attn"])
             for s in (254, 255)}
    assert specs[254] == {"flash;kvh=2;vd=64;causal=1"} and specs[255] == {"efficient;kvh=2;vd=64;causal=0"}
    prefill = build_graph(cfg, 2, 255, dtype="bf16", attn="sdpa").kernel_table()["name"]
    decode = build_graph(cfg, 2, 1024, mode="decode", dtype="bf16", attn="sdpa").kernel_table()["name"]
    assert prefill.str.endswith("repeat_k").any()  # a masked prefill repeats k and v; a decode step packs q instead
    assert not decode.str.endswith("repeat_k").any() and decode.str.startswith("setup_").any()  # the mask is built


def test_rotate_half_concatenates_slices_unvectorised():
    """rotate_half's torch.cat joins two slices of each head (and Phi-3's its rotated and passed parts): PyTorch's
    strided concatenation, not the vectorised copy of contiguous inputs."""
    t = build_graph(LLAMA, 2, 64, dtype="bf16", attn="sdpa").kernel_table().set_index("name")
    assert t.loc["q_rope_cat", "op"] == t.loc["k_rope_cat", "op"] == "misc:strided"
    phi3 = build_graph({**LLAMA, "model_type": "phi3", "partial_rotary_factor": 0.5}, 2, 64, dtype="bf16",
                       attn="sdpa").kernel_table()
    assert set(phi3.loc[phi3["name"].str.endswith("rope_pass"), "op"]) == {"misc:strided"}


def test_decode_on_cudnn_first_gpus_builds_one_plan_per_growing_attention_shape():
    """PyTorch runs cuDNN attention first on compute capability 9.0 and 10.0 only, and cuDNN builds a plan per new
    key length: a half-precision SDPA decode step there pays one build per distinct shape whose keys grow, none
    for a full sliding window (its length is fixed), none in fp32, eager or inference, none once cached."""
    from hybridperf.graphs.attention import CUDNN_PLAN_MS, cudnn_plan_builds
    from hybridperf.graphs.compose import predict_kernels_of

    def builds(cfg, seq, device, mode="decode", dtype="bf16", attn="sdpa"):
        graph = build_graph(cfg, 2, seq, mode=mode, dtype=dtype, attn=attn)
        return cudnn_plan_builds(predict_kernels_of(graph, device, PRIOR), device)

    assert [get_device(n).compute_capability for n in ("H100", "B200", "B300", "A100-SXM4-80GB")] == \
        ["9.0", "10.0", "10.3", "8.0"]
    assert builds(LLAMA, 512, H100) == builds(LLAMA, 512, B200) == 1
    assert builds(LLAMA, 512, A100) == builds(LLAMA, 512, get_device("B300")) == 0
    assert builds(LLAMA, 512, H100, dtype="fp32") == builds(LLAMA, 512, H100, attn="eager") == 0
    assert builds(LLAMA, 512, H100, mode="inf") == 0
    phi3 = {**LLAMA, "model_type": "phi3", "sliding_window": 255}
    assert builds(phi3, 100, H100) == 1 and builds(phi3, 1024, H100) == 0
    gemma3 = json.loads((CONFIGS / "gemma3_4b.json").read_text())
    assert builds(gemma3, 4096, H100) == 1  # its global layers grow; the sliding ones keep their window
    kw = dict(mode="decode", device=H100, predictor=PRIOR, dtype="bf16")
    built, cached = (predict_model(LLAMA, 2, 512, cudnn_plans=p, **kw) for p in ("build", "cached"))
    assert built.plan_ms == CUDNN_PLAN_MS and cached.plan_ms == 0.0
    assert built.ms == pytest.approx(cached.ms + CUDNN_PLAN_MS) and built.lo_ms <= built.ms <= built.hi_ms
    assert built.lo_ms < cached.ms + CUDNN_PLAN_MS and "cudnn_plans" in set(built.breakdown()["group"])
    assert predict_model(LLAMA, 2, 512, device=A100, predictor=PRIOR, mode="decode", dtype="bf16").plan_ms == 0.0
    with pytest.raises(InputError, match="build, cached"):
        predict_model(LLAMA, 2, 512, cudnn_plans="sometimes", **kw)


def test_cli_cudnn_plans(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(LLAMA))
    base = ["predict-model", "--config", str(cfg), "--batch", "2", "--seq", "128", "--mode", "decode", "--dtype",
            "bf16", "--device", "H100", "--json", "--prior-only"]
    runner = CliRunner()
    built, cached = (runner.invoke(app, base + extra) for extra in ([], ["--cudnn-plans", "cached"]))
    assert built.exit_code == cached.exit_code == 0, built.output
    assert "cuDNN plan building" in built.stderr and "cuDNN plan" not in cached.stderr
    e2e = [json.loads(r.stdout.strip().splitlines()[-1])["e2e_ms"] for r in (built, cached)]
    assert e2e[0] > e2e[1] + 30.0
    bad = runner.invoke(app, base + ["--cudnn-plans", "never"])
    assert bad.exit_code != 0 and "build, cached" in str(bad.exception)


def test_modern_models_prices_plans_only_for_a_grown_cache():
    from experiments.models.modern_models import cudnn_plans

    assert cudnn_plans({"cache": "grown"}) == "build"
    assert cudnn_plans({"cache": "grown", "cudnn_plans": "cached"}) == "cached"
    assert cudnn_plans({"cache": "cropped"}) == cudnn_plans({}) == "cached"


def test_a_cuda_graph_step_has_no_host_and_a_decode_step_writes_a_static_cache():
    """--launch graph composes the kernels without their host: each costs its device time, at least its op class's
    profiler-timed floor, plus the replay's gap; a decode step then writes one token per layer in place instead of
    concatenating the cache, and builds no cuDNN plan."""
    from hybridperf.graphs.compose import GRAPH_GAP_MS, graph_launch_ms, predict_kernels_of
    from hybridperf.priors.launch import KERNEL_FLOOR_MS

    kw = dict(mode="decode", dtype="bf16", attn="sdpa")
    eager, graph = (build_graph(LLAMA, 8, 1024, launch=launch, **kw) for launch in ("eager", "graph"))
    cache = lambda g: g.kernel_table().set_index("name").loc["attn.cache_k"]  # noqa: E731
    assert cache(eager)["nbytes"] == pytest.approx(cache(graph)["nbytes"] * 1025)
    assert graph.launch == "graph" and eager.launch == "eager"
    tab = predict_kernels_of(graph, H100, PRIOR)
    t = graph_launch_ms(tab)
    assert (t >= KERNEL_FLOOR_MS["elementwise"] + GRAPH_GAP_MS - 1e-12).all()
    p_eager = predict_model(LLAMA, 8, 1024, device=H100, predictor=PRIOR, **kw)
    p_graph = predict_model(LLAMA, 8, 1024, device=H100, predictor=PRIOR, launch="graph", **kw)
    assert p_graph.plan_ms == 0.0 and p_graph.lo_ms <= p_graph.ms <= p_graph.hi_ms
    assert p_graph.ms == pytest.approx(float(np.sum(t * tab["count"].to_numpy())))
    assert p_graph.ms < p_eager.ms - p_eager.plan_ms  # no host dispatch
    with pytest.raises(InputError, match="eager, graph"):
        build_graph(LLAMA, 8, 1024, launch="compiled", **kw)
    r = CliRunner().invoke(app, ["predict-model", "--config", str(CONFIGS / "qwen3_0_6b.json"), "--batch", "4",
                                 "--seq", "256", "--mode", "decode", "--dtype", "bf16", "--device", "H100",
                                 "--prior-only", "--launch", "graph", "--json"])
    assert r.exit_code == 0 and "one CUDA graph" in r.stderr, r.output
    bad = CliRunner().invoke(app, ["predict-model", "--config", str(CONFIGS / "qwen3_0_6b.json"), "--batch", "4",
                                   "--seq", "256", "--device", "H100", "--launch", "graph", "--tp", "2"])
    assert bad.exit_code != 0 and "--launch graph" in str(bad.exception)


def test_static_cache_adds_its_position_kernels_and_masks_the_buffer():
    from hybridperf.graphs.decode import STATIC_CACHE_KERNELS

    kw = dict(mode="decode", dtype="bf16", attn="sdpa")
    eager, graph = (build_graph(LLAMA, 8, 1024, launch=launch, **kw).kernel_table() for launch in ("eager", "graph"))
    layers = LLAMA["num_hidden_layers"]
    per_layer = lambda t: int(t.loc[t["block"] == "layer", "count"].sum())  # noqa: E731
    assert per_layer(graph) - per_layer(eager) == len(STATIC_CACHE_KERNELS) * layers
    assert set(graph.loc[graph["op"] == "attention", "attn"]) == {"decode;kvh=2;vd=64;causal=0"}  # masked
    assert set(eager.loc[eager["op"] == "attention", "attn"]) == {"decode;kvh=2;vd=64;causal=1"}


def test_a_cropped_cache_concatenates_through_the_strided_kernel():
    """A DynamicCache cropped back between decode steps is a strided view: each layer's cache concatenation runs
    PyTorch's unvectorised kernel (`misc:strided`), slower than the contiguous copy; a strided cache belongs to an
    eager decode step only."""
    from hybridperf.graphs.compose import graph_launch_ms, predict_kernels_of

    kw = dict(mode="decode", dtype="bf16", attn="sdpa")
    graphs = {c: build_graph(LLAMA, 32, 2048, cache=c, **kw) for c in ("contiguous", "strided")}
    tabs = {c: g.kernel_table().set_index("name") for c, g in graphs.items()}
    assert tabs["contiguous"].loc["attn.cache_k", "op"] == "misc:copy"
    assert tabs["strided"].loc[["attn.cache_k", "attn.cache_v"], "op"].tolist() == ["misc:strided"] * 2
    dev = {c: float(np.sum(graph_launch_ms(t) * t["count"].to_numpy()))
           for c, t in ((c, predict_kernels_of(g, H100, PRIOR)) for c, g in graphs.items())}
    assert dev["strided"] > dev["contiguous"]
    with pytest.raises(InputError, match="contiguous, strided"):
        build_graph(LLAMA, 8, 1024, cache="paged", **kw)
    for bad in (dict(kw, mode="inf"), dict(kw, launch="graph")):
        with pytest.raises(InputError, match="eager decode step"):
            build_graph(LLAMA, 8, 1024, cache="strided", **bad)


def test_gemma3_sliding_layers_are_masked_from_window_keys_on():
    """transformers masks a sliding layer once its keys reach the window, also when the cache still holds them all
    (seq = window - 1): the sliding layers split off then, masked; the global ones stay unmasked."""
    gemma3 = json.loads((CONFIGS / "gemma3_4b.json").read_text())
    window = gemma3.get("text_config", gemma3)["sliding_window"]

    def specs(seq):
        t = build_graph(gemma3, 1, seq, mode="decode", dtype="bf16", attn="sdpa").kernel_table()
        return dict(zip(t.loc[t["op"] == "attention", "block"], t.loc[t["op"] == "attention", "attn"]))

    assert set(specs(window - 2)) == {"layer"} and specs(window - 2)["layer"].endswith("causal=1")
    for seq in (window - 1, window):
        s = specs(seq)
        assert s["layer"].endswith("causal=1") and s["sliding_layer"].endswith("causal=0")


def test_a_boolean_window_mask_is_converted_on_every_sdpa_call():
    """SDPA turns transformers' boolean window mask into an additive one each call: two fills and a `where` over
    (batch, queries, keys) in Gemma 3's sliding layers (H100 op profile: one `where` and two fills a masked
    layer), none in its global layers, in an unmasked call, for T5's additive bias or over a static cache."""
    from hybridperf.graphs.compose import predict_kernels_of

    gemma3 = json.loads((CONFIGS / "gemma3_4b.json").read_text())
    window = gemma3.get("text_config", gemma3)["sliding_window"]
    conversion = ["attn.mask_zero", "attn.mask_inf", "attn.mask_bias"]
    for mode, seq in (("inf", window), ("decode", window)):
        t = build_graph(gemma3, 2, seq, mode=mode, dtype="bf16", attn="sdpa").kernel_table()
        sliding = t[t["block"] == "sliding_layer"]
        assert sliding.loc[sliding["name"].str.startswith("attn.mask"), "name"].tolist() == conversion
        assert not t.loc[t["block"] == "layer", "name"].str.startswith("attn.mask").any()
    olmo3 = {"model_type": "olmo3", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 100, "num_hidden_layers": 4, "sliding_window": 16}
    o = build_graph(olmo3, 2, 16, dtype="bf16", attn="sdpa").kernel_table()  # three sliding layers to one full
    masked = o[o["name"] == "attn.mask_bias"]
    assert set(masked["block"]) == {"sliding_layer"} and int(masked["count"].sum()) == 3
    short = build_graph(gemma3, 2, window // 2, dtype="bf16", attn="sdpa").kernel_table()
    assert not short["name"].str.startswith("attn.mask").any()
    static = build_graph(gemma3, 2, window, mode="decode", dtype="bf16", attn="sdpa", launch="graph").kernel_table()
    assert not static["name"].str.startswith("attn.mask").any()
    t5 = build_graph({"model_type": "t5", "d_model": 64, "d_kv": 16, "d_ff": 128, "num_heads": 4, "num_layers": 2,
                      "vocab_size": 100}, 2, 64, dtype="bf16", attn="sdpa")
    assert not t5.kernel_table()["name"].str.startswith("attn.mask").any()
    # the where reads the bools and writes the half-precision bias: 16.8M elements, about 40 us on an H100
    four = predict_kernels_of(build_graph(gemma3, 4, 2048, dtype="bf16", attn="sdpa"), H100, PRIOR)
    where = four[four["name"] == "attn.mask_bias"]
    assert float(where["nbytes"].iloc[0]) == 4 * 2048 * 2048 * 3
    assert 0.02 < float(where["pred_ms"].iloc[0]) < 0.08


def test_compare_and_measured_runs_know_the_cudnn_plans(tmp_path):
    from hybridperf.graphs.compare import compare_devices
    from hybridperf.graphs.measured_runs import calibrate_from_runs, read_runs

    kw = dict(mode="decode", predictor=PRIOR, dtype="bf16")
    built = compare_devices(LLAMA, 2, 512, ["H100", "A100-SXM4-80GB"], **kw).set_index("device")
    cached = compare_devices(LLAMA, 2, 512, ["H100", "A100-SXM4-80GB"], cudnn_plans="cached", **kw).set_index("device")
    assert built.loc[H100.name, "plan_ms"] > 0 and cached.loc[H100.name, "plan_ms"] == 0
    assert built.loc[A100.name, "e2e_ms"] == pytest.approx(cached.loc[A100.name, "e2e_ms"])
    cfg = tmp_path / "llama.json"
    cfg.write_text(json.dumps(LLAMA))
    pred = predict_model(LLAMA, 2, 512, device=H100, **kw)
    runs = tmp_path / "runs.csv"
    pd.DataFrame({"config": ["llama.json"] * 2, "batch": [2, 2], "seq": [512, 512], "mode": ["decode"] * 2,
                  "dtype": ["bf16"] * 2, "attn": ["sdpa"] * 2, "cudnn_plans": ["build", "cached"],
                  "latency_ms": [pred.ms, pred.ms - pred.plan_ms]}).to_csv(runs, index=False)
    cal = calibrate_from_runs(read_runs(runs), H100, PRIOR)
    again = predict_model(LLAMA, 2, 512, device=H100, calibration=cal, **kw)
    assert again.ms == pytest.approx(pred.ms, rel=0.05)  # the plan is not counted twice
    pd.read_csv(runs).assign(latency_ms=1.0).to_csv(runs, index=False)
    with pytest.raises(InputError, match="cudnn_plans = cached"):
        calibrate_from_runs(read_runs(runs), H100, PRIOR)
    bad = pd.read_csv(runs).assign(cudnn_plans="sometimes")
    bad.to_csv(runs, index=False)
    with pytest.raises(InputError, match="runs.csv:2: unknown cuDNN plan mode"):
        read_runs(runs)


def test_unfitted_family_takes_its_kin_then_the_engines_median():
    """A fold without the H100 never fits FA3: its prefill efficiency is FA2's (same algorithm, the ISA is
    modelled apart); FA4 and every decode share fall back to the engines' median, SDPA's entries left out."""
    fit = {"fa2": A.Fitted(0.7, "share", "t"), "trtllm": A.Fitted(0.5, "share", "t"),
           "flashinfer": A.Fitted(0.4, "share", "t"), "sdpa": A.Fitted(0.95, "share", "t")}
    c = dataclasses.replace(A.CONSTANTS, efficiency=fit, decode_bw=fit)
    assert c.eff("fa3") == pytest.approx(0.7)
    assert c.eff("fa4") == pytest.approx(0.5)
    assert c.bw("fa3") == pytest.approx(0.5)
    slow = dataclasses.replace(c, efficiency={**fit, "fa2": A.Fitted(0.35, "share", "t")})
    args = (4, 4096, 32, 8, 128, H100)
    assert A.context_attention_ms(*args, kernel_source="fa3", constants=slow) \
        > 1.5 * A.context_attention_ms(*args, kernel_source="fa3", constants=c)


def test_a_sliding_window_prefill_reads_only_its_band_of_a_long_prefix():
    """A chunk after a long prefix through a sliding window reads the keys of its band, not the whole prefix:
    a prefix of 1M keys costs what one of a few windows does."""
    kw = dict(window=4096, kernel_source="fa3")
    near, far = (float(A.context_attention_ms(1, 2048, 32, 8, 128, H100, prefix=p, **kw)) for p in (16384, 1 << 20))
    assert far == pytest.approx(near, rel=0.01)
    assert float(A.context_attention_ms(1, 2048, 32, 8, 128, H100, prefix=1 << 20, kernel_source="fa3")) > 10 * far
