"""`hybridperf predict-serving` (docs/serving.md) and the serving package: engines, scheduler, memory,
parallel splits, disaggregation, intervals, the `--rows` table, the simulator adapters and the sweep.
Small models made here; the silicon-sample check skips without ../shared/datasets."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from typer.testing import CliRunner

from conftest import assert_one_line_error, run_cli
from hybridperf.aic_kernels import unseen_arch_widen
from hybridperf.cli.app import app
from hybridperf.devices import get_device
from hybridperf.errors import InputError, ModelBundleError
from hybridperf.serving import Worker, predict_serving
from hybridperf.priors.collectives import DEFAULT_CONSTANTS
from hybridperf.residual_models.collectives import CollectiveModel
from hybridperf.serving.api import agg_components, default_models, node_for, setup_cost
from hybridperf.serving.adapters import IterationTimer, SGLangTimePredictor, TrtllmTimePredictor
from hybridperf.serving.arch import arch_from_dict
from hybridperf.serving.calibration import WORKERS_INFERRED, Calibration, EngineCalibration
from hybridperf.serving.comm import StageComm
from hybridperf.serving.cost import KernelModels, Parallel, kv_bytes_per_token, weight_bytes_per_gpu
from hybridperf.serving.engines import ENGINES, get_engine
from hybridperf.serving.rows import concurrency_of, predict_rows, row_request
from hybridperf.serving.sweep import best, plot, sweep

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "../shared/datasets/aiconfigurator"
runner = CliRunner()

LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
         "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256}
MOE = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4,
       "num_hidden_layers": 48, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
       "num_experts_per_tok": 8, "vocab_size": 151936, "head_dim": 128}
MLA = {"model_type": "kimi_k2", "hidden_size": 7168, "num_attention_heads": 64, "num_hidden_layers": 61,
       "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 384, "num_experts_per_tok": 8,
       "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "vocab_size": 163840, "kv_lora_rank": 512,
       "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}
WAVES = Calibration(engines={e: EngineCalibration(gpu_scale=1.5, eager_ms=0.02, graph_ms=0.005, ttft_ms=10.0,
                                                  wave_weight=1.0) for e in ENGINES},
                    log_quantiles={"ttft": (-0.4, 0.6), "tpot": (-0.2, 0.3)}, provenance="test")


def _check(res):
    d = res.to_json()
    for k in ("ttft", "tpot", "e2e"):
        assert 0 < d[f"{k}_lo_ms"] <= d[f"{k}_ms"] <= d[f"{k}_hi_ms"] < math.inf, (k, d)
    assert d["tokens_per_s"] > 0 and d["tokens_per_s_per_gpu"] > 0
    return d


def test_engines_registered_and_named():
    assert set(ENGINES) == {"vllm", "sglang", "trtllm"}
    assert get_engine("TensorRT-LLM").name == "trtllm"
    with pytest.raises(InputError):
        get_engine("tgi")
    assert get_engine("sglang").batched_tokens(180) > get_engine("sglang").batched_tokens(80)
    # vLLM's defaults: 8192 tokens and 1024 sequences from 70 GiB, except on A100s (2048 and 256, offline 8192)
    vllm = get_engine("vllm")
    assert vllm.limits(get_device("h100_sxm")) == (8192, 16384, 1024)
    assert vllm.limits(get_device("a100_sxm")) == vllm.limits(get_device("l40s")) == (2048, 8192, 256)
    # SGLang's CUDA graphs: up to 256 sequences below TP 4 on an 80 GB GPU, 32 on a 48 GB one, 512 on a B200
    sglang = get_engine("sglang")
    assert [sglang.graph_batch(get_device(d), tp) for d, tp in (("h100_sxm", 2), ("h100_sxm", 8), ("l40s", 1),
                                                                ("b200_sxm", 1))] == [256, 512, 32, 512]
    assert sglang.limits(get_device("l40s"))[0] == 4096 and vllm.graph_batch(get_device("l40s"), 1) == 512


def test_arch_families():
    a = arch_from_dict(LLAMA)
    assert a.kv_elems_per_token(1) == 2 * 128 * 8 * 32 and a.kv_elems_per_token(16) == 2 * 128 * 32  # replicated
    m = arch_from_dict(MOE)
    assert m.experts == 128 and m.topk == 8 and m.moe_layers == 48
    k = arch_from_dict(MLA)
    assert k.mla and k.experts == 384 and k.dense_layers == 1 and k.kv_elems_per_token(8) == 576 * 61
    assert 0.9e12 < sum(k.params().values()) < 1.1e12  # Kimi-K2: ~1T parameters
    with pytest.raises(InputError):
        arch_from_dict({"model_type": "t5", "d_model": 8})
    with pytest.raises(InputError, match="Llama-style decoder LLMs.*'gpt2' is not one"):
        arch_from_dict({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 100})
    # a gemma3 text config leans on Gemma3TextConfig's defaults, as transformers does (the shipped example has
    # no vocab_size)
    gemma3 = json.loads((REPO / "examples" / "configs" / "gemma3_4b.json").read_text())
    assert arch_from_dict(gemma3).vocab == 262_208


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_batch_and_concurrency_agree_on_one_wave(engine):
    """Offline generate of B requests and a closed loop of B requests that stays in lock-step waves are the
    same schedule when every prompt fits the token budget of both modes."""
    kw = dict(config=LLAMA, device="h100_sxm", engine=engine, isl=128, osl=64, calibration=WAVES)
    off = predict_serving(batch=8, **kw)
    loop = predict_serving(concurrency=8, **kw)
    # (the two modes tabulate GEMM time on different token grids: agreement to interpolation error)
    assert loop.ttft.ms == pytest.approx(off.ttft.ms, rel=1e-3)
    assert loop.tpot.ms == pytest.approx(off.tpot.ms, rel=1e-3)
    assert loop.tokens_per_s == pytest.approx(off.tokens_per_s, rel=0.05)


@pytest.mark.parametrize("mode", ["concurrency", "batch"])
def test_e2e_interval_sums_its_prefill_and_decode_bounds(mode):
    """A closed loop's e2e is TTFT + TPOT x (osl - 1), so its bounds are those parts' bounds summed, not the
    whole scaled by the wider of the two quantiles (a decode-bound e2e would take TTFT's wide upper one)."""
    res = predict_serving(config=LLAMA, device="h100_sxm", engine="vllm", isl=1024, osl=512, calibration=WAVES,
                          **{mode: 4})
    _check(res)
    if mode == "concurrency":
        for f in ("ms", "lo_ms", "hi_ms"):
            assert getattr(res.e2e, f) == pytest.approx(getattr(res.ttft, f) + 511 * getattr(res.tpot, f))
    # decode-bound: the bounds sit between the parts' and near TPOT's, well inside TTFT's wide upper one
    (lo_t, hi_t), (lo_d, hi_d) = WAVES.log_quantiles["ttft"], WAVES.log_quantiles["tpot"]
    assert math.exp(lo_t) < res.e2e.lo_ms / res.e2e.ms <= math.exp(lo_d)
    assert math.exp(hi_d) <= res.e2e.hi_ms / res.e2e.ms < math.exp(hi_d) * 1.05 < math.exp(hi_t)


def test_interval_widens_on_an_architecture_no_fit_saw():
    """A ROCm GPU runs kernels and engine builds none of the fits saw: its bands are `unseen_arch_widen` wider
    each side than an NVIDIA GPU's with the same quantiles."""
    kw = dict(config=LLAMA, engine="vllm", isl=1024, osl=128, concurrency=1, calibration=WAVES)
    nv, amd = (predict_serving(device=d, **kw) for d in ("h100_sxm", "AMD Instinct MI300X"))
    w = unseen_arch_widen(get_device("AMD Instinct MI300X").kernel_arch)
    assert w > 0 and unseen_arch_widen(get_device("h100_sxm").kernel_arch) == 0
    for k in ("ttft", "tpot"):
        a, b = getattr(nv, k), getattr(amd, k)
        assert math.log(b.hi_ms / b.lo_ms) == pytest.approx(math.log(a.hi_ms / a.lo_ms) + 2 * w)


def test_staggered_clients_prefill_one_request_at_a_time():
    """A closed loop on an engine whose clients drift apart (vLLM) prefills each new request on its own, so
    its steady-state TTFT is close to one request's prefill at any concurrency that fits; an engine whose
    requests keep their lock-step (SGLang) prefills the whole wave together."""
    kw = dict(device="h100_sxm", wk=Worker(Parallel(1, 1, 1, 1, 1), "bf16", "", 2), isl=1024, osl=256,
              closed_loop=True)
    arch = arch_from_dict(LLAMA)
    ttft = {(e, n): agg_components(arch, engine=e, inflight=n, **kw)["steady"]["ttft"][0]
            for e in ("vllm", "sglang") for n in (1, 16)}
    assert ttft[("vllm", 16)] < 2 * ttft[("vllm", 1)]
    assert ttft[("sglang", 16)] > 4 * ttft[("sglang", 1)]


def test_a_lock_step_engines_ttft_interval_reaches_its_drifted_loop():
    """SGLang's and TensorRT-LLM's closed loops are priced in lock-step, yet some measured runs sit where drifted
    clients would (silicon runs differing only in output length); their TTFT interval reaches down to that loop
    (`agg_components`' "drift"), the prediction unchanged, e2e's low bound with it. vLLM, priced drifted, and an
    offline batch keep the plain band."""
    steady = Calibration(engines={e: dataclasses.replace(c, wave_weight=0.0) for e, c in WAVES.engines.items()},
                         log_quantiles=WAVES.log_quantiles, provenance="test")
    kw = dict(config=LLAMA, device="h100_sxm", isl=1024, osl=256, calibration=steady)
    q = math.exp(WAVES.log_quantiles["ttft"][0])
    sg = predict_serving(engine="sglang", concurrency=16, **kw)
    _check(sg)
    assert sg.ttft.lo_ms < 0.5 * q * sg.ttft.ms
    assert sg.e2e.lo_ms == pytest.approx(sg.ttft.lo_ms + 255 * sg.tpot.lo_ms)
    for res in (predict_serving(engine="vllm", concurrency=16, **kw), predict_serving(engine="sglang", batch=16, **kw)):
        assert res.ttft.lo_ms == pytest.approx(q * res.ttft.ms)


def test_staggered_start_fits_the_cache_and_spreads_what_fits():
    """When the KV cache holds fewer requests than the concurrency, the staggered start admits as many as fit
    under the preempting engine's watermark, spread over the whole output, the least advanced last (the
    newest, which vLLM's preemption takes first); the rest wait."""
    from hybridperf.serving.scheduler import WATERMARK, Workload, _staggered
    w = Workload(isl=100, osl=2001, inflight=200, closed_loop=True, budget=8192, kv_capacity=70_000, max_running=1024,
                 graph_batch=512)
    running, waiting, used = _staggered(w, True, int(WATERMARK * w.kv_capacity), 0, (0.0, 0.0, 0.0))
    assert len(running) + len(waiting) == 200 and 0 < len(running) < 200
    assert used == sum(r.ctx for r in running) and used + WATERMARK * w.kv_capacity <= w.kv_capacity
    done = [w.osl - 1 - r.dec_left for r in running]
    assert done == sorted(done, reverse=True) and done[-1] == 0 and done[0] > 0.9 * (w.osl - 1) * (1 - 1 / len(done))


def test_serving_node_holds_a_tp_group_of_eight():
    """A GPU whose only catalog node is a profiled 4-GPU box (Vidur's A100 PCIe pairs) serves TP8 in the
    default node of 8 its spec sheet implies, not across two such boxes; NVSwitch nodes come first."""
    assert node_for(get_device("a100_pcie")).gpus_per_node == 8
    assert node_for(get_device("h100_sxm")).intra_topology == "nvswitch"
    assert node_for(get_device("gb200")).gpus_per_node == 72


@pytest.mark.parametrize("name", ["NVIDIA GB200", "NVIDIA GB300", "NVIDIA H100 80GB HBM3", "a100_pcie", "NVIDIA L40S",
                                  "NVIDIA A40", "NVIDIA A100-SXM4-80GB"])
def test_a_gpu_name_means_one_fabric_in_serving_collectives_and_training(name):
    """A bare GPU name is placed in the same node by serving, `predict-collective` and the training step: a
    GB200's NVL72 rack in all three, not a box of 8 over InfiniBand in two of them."""
    from hybridperf.devices.node_lookup import resolve_node
    from hybridperf.graphs.parallel_comm import resolve_parallel_device

    node, note = resolve_node(name)
    assert node == node_for(name) == node_for(get_device(name)) == resolve_parallel_device(name)[0]
    assert resolve_parallel_device(get_device(name))[0] == node and note.startswith("note: ")
    assert (node.gpus_per_node == 72) == name.startswith("NVIDIA GB")
    assert node.collective_timing == "graph"  # never one of Vidur's profiled clusters (a40_pairwise_nvlink, a100_dgx)


@pytest.mark.parametrize("name", ["NVIDIA H100 NVL", "NVIDIA H200 NVL"])
def test_an_nvl_card_sits_on_nvlink_bridges_not_a_switch(name):
    """H100 NVL and H200 NVL are PCIe cards joined in pairs (or fours) by NVLink bridges: a GPU name of theirs is
    placed in bridged pairs over PCIe, not in an NVSwitch node (a 1 GiB all-reduce on 8 was priced a switch's 7 ms)."""
    assert node_for(name).intra_topology == "nvlink_pairs"


@pytest.mark.parametrize("gpu", ["H20", "MI325X", "MI355X", "RTX PRO 6000", "GB300", "H100", "B200"])
@pytest.mark.parametrize("dtype", ["bfloat16", "fp8"])
def test_no_calibrated_prefill_gemm_beats_the_best_share_of_peak_measured(gpu, dtype):
    """The prefill scale (0.90) was fitted where the GEMM prior runs at 73-85% of peak (B200, H100); on a GPU
    whose power budget does not bind the prior reaches 92-100%, and the scale priced its GEMMs beyond the peak.
    The cap sits at the calibration's scale and above the fitted GPUs' priors, so the fit never sees it."""
    from hybridperf.priors.llm_gemm import GEMM_DTYPES, ROOFLINE, gemm_ms, spec_matrix_peak
    from hybridperf.serving.cost import GEMM_PEAK_SHARE, MATRIX_SHARE_CAP, _gemm

    scales = {e.prefill_scale for e in Calibration.load().engines.values()}
    assert all(abs(MATRIX_SHARE_CAP - GEMM_PEAK_SHARE * s) < 0.01 for s in scales), scales
    m, dev = 8192, get_device(gpu)
    peak = spec_matrix_peak(dev, GEMM_DTYPES[dtype][2])
    share = 2.0 * m ** 3 / (float(_gemm(m, m, m, dtype, dev)) * 1e-3) / peak
    assert share / max(scales) <= GEMM_PEAK_SHARE + 0.01
    for fitted in ("H100", "B200"):  # the cap leaves what the calibration was fitted on as it was
        uncapped = gemm_ms(m, m, m, dtype, get_device(fitted), constants=ROOFLINE, replayed=False)
        assert float(_gemm(m, m, m, dtype, get_device(fitted))) == pytest.approx(float(uncapped))


def test_a_gpu_with_more_bandwidth_and_the_same_math_never_serves_a_slower_first_token():
    """MI325X is an MI300X with more and faster HBM; a floor on the whole prefill scale (attention and
    elementwise work included) once priced its TTFT up to 5% slower (66 of 144 configurations)."""
    qwen32 = {"model_type": "qwen3", "hidden_size": 5120, "num_attention_heads": 64, "num_key_value_heads": 8,
              "num_hidden_layers": 64, "intermediate_size": 25600, "vocab_size": 151936, "head_dim": 128}
    kw = dict(config=qwen32, engine="sglang", isl=2048, osl=256, concurrency=64, tp=2, precision="fp8")
    strong, weak = (predict_serving(device=d, **kw).to_json()["ttft_ms"] for d in ("MI325X", "MI300X"))
    assert strong <= weak


def test_a_named_node_is_the_node_served_on():
    """A node's name keeps its fabric (a GPU alone is placed as above): H100 PCIe cards bridged in pairs
    all-reduce TP2 over NVLink, the 8-GPU PCIe box over PCIe; a DGX Spark is one GPU per node."""
    assert node_for("h100_pair_nvlink").intra_topology == "nvlink_pairs"
    assert node_for("H100 PCIe").intra_topology == "pcie" and node_for("gb10").gpus_per_node == 1
    kw = dict(config=LLAMA, engine="vllm", isl=1024, osl=128, concurrency=8, tp=2, calibration=WAVES)
    bridged, box = predict_serving(device="h100_pair_nvlink", **kw), predict_serving(device="H100 PCIe", **kw)
    assert bridged.tpot.ms < box.tpot.ms


def test_latency_grows_with_load_and_tp_helps():
    kw = dict(config=LLAMA, device="h100_sxm", engine="vllm", isl=1024, osl=256, calibration=WAVES)
    r1, r64 = predict_serving(concurrency=1, **kw), predict_serving(concurrency=64, **kw)
    _check(r1), _check(r64)
    assert r64.ttft.ms > r1.ttft.ms and r64.tpot.ms > r1.tpot.ms and r64.tokens_per_s > 4 * r1.tokens_per_s
    assert predict_serving(concurrency=1, tp=4, **kw).tpot.ms < r1.tpot.ms
    fp8 = predict_serving(concurrency=1, precision="fp8", **kw)
    assert fp8.tpot.ms < r1.tpot.ms


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_kv_capacity_queues_and_weights_must_fit(engine):
    """An 8B model in bf16 on a 24 GB GPU holds few requests of 8k tokens: more concurrency queues (TTFT
    jumps) instead of failing, whether the engine reserves whole requests or preempts; a 70B model does not
    fit at all."""
    kw = dict(config=LLAMA, device="L4", engine=engine, isl=8192, osl=256, calibration=WAVES)
    small, big = predict_serving(concurrency=1, **kw), predict_serving(concurrency=16, **kw)
    assert big.ttft.ms > 8 * small.ttft.ms
    big70 = {**LLAMA, "hidden_size": 8192, "num_hidden_layers": 80, "intermediate_size": 28672,
             "num_attention_heads": 64}
    with pytest.raises(InputError, match="weights need") as err:
        predict_serving(big70, "h100_sxm", "vllm", 128, 128, concurrency=1, calibration=WAVES)
    # the limit it names is the one it applies: 97% of memory less 1 GB, not the engine's default fraction
    stated = float(str(err.value).split("more than the ")[1].split(" GB")[0])
    assert stated == pytest.approx(get_device("h100_sxm").mem_bytes * 0.97 / 1e9 - 1.0, abs=0.06)


def test_moe_parallel_and_disagg():
    kw = dict(config=MLA, device="b200_sxm", isl=1024, osl=256, precision="fp4", calibration=WAVES)
    tp8 = _check(predict_serving(engine="trtllm", concurrency=32, tp=8, **kw))
    dep = _check(predict_serving(engine="trtllm", concurrency=32, tp=1, attention_dp=8, ep=8, **kw))
    assert tp8["tpot_ms"] != dep["tpot_ms"]
    w = Worker(Parallel(tp=1, adp=8, moe_ep=8), "fp4", "fp4", 1.0)
    dis = _check(predict_serving(engine="sglang", concurrency=64, disagg=(w, 1, w, 1), **kw))
    more = _check(predict_serving(engine="sglang", concurrency=64, disagg=(w, 2, w, 1), **kw))
    assert more["ttft_ms"] < dis["ttft_ms"]  # a second prefill worker halves the wave's prefill queue
    with pytest.raises(InputError, match="expert-TP 1 x --ep 16"):
        predict_serving(engine="vllm", concurrency=1, tp=8, ep=16, moe_tp=1, **kw)


def test_kernel_models_passed_in_price_attention_mla_and_collectives(config_dir):
    """`models` reaches every part it prices (an evaluation that holds a system out passes ones fitted without it):
    slower prefill or decode attention kernels lengthen a long prompt's TTFT or TPOT, slower MLA decode a Kimi
    decode step, slower links a TP-8 prefill (aggregated, on disaggregated workers, through `--rows`) and the
    attention-DP experts' all-to-all; None is the shipped set."""
    shipped = default_models()

    def slower(per_family: dict) -> dict:
        return {k: dataclasses.replace(v, value=v.value / 4) for k, v in per_family.items()}

    kw = dict(config=LLAMA, device="h100_sxm", engine="vllm", isl=8192, osl=64, concurrency=4, calibration=WAVES)
    base = predict_serving(**kw)
    assert predict_serving(**kw, models=shipped).ttft.ms == base.ttft.ms
    prefill = KernelModels(shipped.collectives, attention=dataclasses.replace(
        shipped.attention, efficiency=slower(shipped.attention.efficiency)))
    assert predict_serving(**kw, models=prefill).ttft.ms > 1.05 * base.ttft.ms
    decode = KernelModels(shipped.collectives, attention=dataclasses.replace(
        shipped.attention, decode_bw=slower(shipped.attention.decode_bw)))
    assert predict_serving(**kw, models=decode).tpot.ms > 1.05 * base.tpot.ms
    slow_mla = dataclasses.replace(shipped.mla, bw_share=dataclasses.replace(shipped.mla.bw_share, value=0.1))
    mla = dict(config=MLA, device="b200_sxm", engine="trtllm", isl=8192, osl=256, concurrency=32, tp=8,
               precision="fp4", calibration=WAVES)
    assert predict_serving(**mla, models=KernelModels(shipped.collectives, mla=slow_mla)).tpot.ms \
        > 1.05 * predict_serving(**mla).tpot.ms
    slow_links = KernelModels(CollectiveModel.prior_only(DEFAULT_CONSTANTS.updated(eff_nvlink=0.05)))
    tp8 = dict(kw, tp=8, engine="sglang")
    assert predict_serving(**tp8, models=slow_links).ttft.ms > 1.05 * predict_serving(**tp8).ttft.ms
    w = Worker(Parallel(tp=8), "bf16", "", 2.0)
    dis = dict(kw, disagg=(w, 1, w, 1))
    assert predict_serving(**dis, models=slow_links).ttft.ms > 1.05 * predict_serving(**dis).ttft.ms
    dep = dict(mla, tp=1, attention_dp=8, ep=8)
    assert predict_serving(**dep, models=slow_links).tpot.ms > 1.05 * predict_serving(**dep).tpot.ms
    row = pd.DataFrame([{"silicon_data_source": "x; silicon_concurrency=4", "system": "h100_sxm", "isl": 8192,
                         "osl": 64, "backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "mode": "agg",
                         "tp_size": 8, "precision": "bf16", "batch_size": 4}])
    assert predict_rows(row, config_dir, WAVES, slow_links).pred_ttft_ms.iloc[0] \
        > 1.05 * predict_rows(row, config_dir, WAVES).pred_ttft_ms.iloc[0]


@pytest.mark.parametrize("mode", [{"concurrency": 8}, {"batch": 8}])
def test_scale_multiplies_prefills_and_decode_steps_before_composing(mode):
    """`scale` (a calibration by measured runs) multiplies TTFT and TPOT with their intervals; end-to-end latency
    is linear in the two (in --batch mode the last request's queued prefills and its decode), throughput follows."""
    kw = dict(config=LLAMA, device="h100_sxm", engine="vllm", isl=2048, osl=128, calibration=WAVES, **mode)
    base, both = predict_serving(**kw), predict_serving(**kw, scale=(2.0, 2.0))
    first, decode = predict_serving(**kw, scale=(2.0, 1.0)), predict_serving(**kw, scale=(1.0, 2.0))
    assert (first.ttft.ms, first.ttft.lo_ms, first.ttft.hi_ms) == pytest.approx(
        (2 * base.ttft.ms, 2 * base.ttft.lo_ms, 2 * base.ttft.hi_ms))
    assert first.tpot == base.tpot and decode.tpot.ms == pytest.approx(2 * base.tpot.ms)
    assert both.e2e.ms == pytest.approx(2 * base.e2e.ms)
    assert first.e2e.ms + decode.e2e.ms == pytest.approx(3 * base.e2e.ms)
    assert first.e2e.ms > base.e2e.ms and decode.e2e.ms > base.e2e.ms
    assert both.tokens_per_s == pytest.approx(base.tokens_per_s / 2)
    assert both.tokens_per_s_per_gpu == pytest.approx(both.tokens_per_s / both.gpus)
    with pytest.raises(InputError, match="scale factors"):
        predict_serving(**kw, scale=(0.0, 1.0))


def test_per_head_products_run_as_one_batched_gemm(monkeypatch):
    """MLA's absorbed per-head products are one batched launch: 128 heads of a 32-token (32 x 128) @ (128 x 512)
    product cost about what one GEMM 128x as wide does, far less than 128 separate few-tile GEMMs, and no less
    than one head's; an MLA iteration prices them so."""
    import hybridperf.serving.cost as cost_mod

    b200 = get_device("b200_sxm")
    batched = float(cost_mod._bmm(128, 32, 512, 128, "bfloat16", b200))
    one = float(cost_mod._gemm(32, 512, 128, "bfloat16", b200))
    assert one <= batched < 128 * one / 5
    assert batched >= float(cost_mod._gemm(32, 128 * 512, 128, "bfloat16", b200))
    calls = []
    real = cost_mod._bmm
    monkeypatch.setattr(cost_mod, "_bmm", lambda batch, *a: calls.append(batch) or real(batch, *a))
    wk = Worker(Parallel(tp=8, moe_tp=8), "fp8", "fp8", 1.0)
    cost, _ = setup_cost(arch_from_dict(MLA), b200, get_engine("vllm"), wk, 8192, 8, 1024, 256)
    cost._token_ms(__import__("numpy").array([32.0]))
    assert calls and all(b == MLA["num_attention_heads"] / 8 for b in calls)


def test_attention_dp_dispatch_counts_distinct_expert_ranks():
    """Under attention-DP a token goes once to each EP rank holding one of its experts: top-8 over 8 ranks
    reaches 5.25 of them on average, top-2 1.875 (a flat two copies per token priced both alike), DeepSeek-V3's
    top-8 within 4 of 8 groups 4; an attention TP group scatters its tokens first, so each of its ranks sends
    half at TP 2; without attention-DP there is no dispatch."""
    import numpy as np

    from hybridperf.priors.moe_routing import expert_ranks

    assert expert_ranks(8, 8) == pytest.approx(5.2511, abs=1e-3)
    assert expert_ranks(8, 8, groups=8, topk_groups=4) == pytest.approx(4.0)
    assert expert_ranks(64, 8, groups=8, topk_groups=4) == pytest.approx(7.5)
    assert expert_ranks(8, 2, experts=8) == pytest.approx(2.0)  # two distinct experts, one per rank

    def comm(topk, tp=1, adp=8):
        arch = arch_from_dict({**MLA, "num_experts_per_tok": topk})
        wk = Worker(Parallel(tp=tp, adp=adp, moe_ep=8), "fp4", "fp4", 1.0)
        cost, _ = setup_cost(arch, get_device("b200_sxm"), get_engine("trtllm"), wk, 8192, 64, 1024, 256)
        return float(cost.comm.moe(np.array([64.0]))[0])

    assert comm(8) > comm(2) > 0
    assert comm(8, tp=2, adp=4) < comm(8)
    assert comm(8, tp=8, adp=1) == 0


def test_inferred_workers_take_their_stratum_interval(tmp_path):
    """A disaggregated run without its worker counts gets its stratum's quantiles, the rest the pooled ones;
    a calibration file naming a stratum the code does not know is refused."""
    wide = {"ttft": (-1.0, 2.0), "tpot": (-1.0, 0.7)}
    cal = dataclasses.replace(WAVES, stratum_quantiles={WORKERS_INFERRED: wide})
    kw = dict(config=MLA, device="b200_sxm", engine="sglang", isl=1024, osl=256, precision="fp4", concurrency=64,
              calibration=cal)
    w = Worker(Parallel(tp=1, adp=8, moe_ep=8), "fp4", "fp4", 1.0)
    given, guessed = predict_serving(disagg=(w, 1, w, 1), **kw), predict_serving(disagg=(w, 1, w, None), **kw)
    assert (given.stratum, guessed.stratum) == ("", WORKERS_INFERRED)
    assert given.tpot.hi_ms / given.tpot.ms == pytest.approx(math.exp(0.3))
    assert guessed.tpot.hi_ms / guessed.tpot.ms == pytest.approx(math.exp(0.7))
    assert Calibration.from_json(cal.to_json()) == cal
    bad = tmp_path / "cal.json"
    bad.write_text(json.dumps(cal.to_json() | {"stratum_quantiles": {"typo": wide}}))
    with pytest.raises(ModelBundleError, match="typo"):
        Calibration.load(bad)
    bad.write_text(json.dumps(cal.to_json() | {"stratum_quantiles": {WORKERS_INFERRED: {"tpot": (-1.0, 0.7)}}}))
    with pytest.raises(ModelBundleError, match="ttft"):
        Calibration.load(bad)
    old = {k: v for k, v in cal.to_json().items() if k != "stratum_quantiles"}  # a file from before strata
    bad.write_text(json.dumps(old))
    assert Calibration.load(bad).quantiles(WORKERS_INFERRED) == WAVES.log_quantiles


def test_a_gpu_without_bf16_units_serves_bf16_weights_in_fp16():
    """T4 and V100 have fp16 tensor cores only; the engines run a bf16 checkpoint there in fp16, not in fp32
    (priced in fp32, a T4's TTFT came out 2.5x its fp16 one)."""
    kw = dict(config=LLAMA, device="T4", engine="vllm", isl=512, osl=128, concurrency=8, tp=2, calibration=WAVES)
    bf16, fp16 = (predict_serving(precision=p, **kw).to_json() for p in ("bf16", "fp16"))
    assert bf16["ttft_ms"] == pytest.approx(fp16["ttft_ms"]) and bf16["tpot_ms"] == pytest.approx(fp16["tpot_ms"])


def test_bad_arguments():
    with pytest.raises(InputError):
        predict_serving(LLAMA, "h100_sxm", "vllm", 128, 128, batch=1, concurrency=1)
    with pytest.raises(InputError):
        predict_serving(LLAMA, "h100_sxm", "vllm", 0, 128, batch=1)
    with pytest.raises(InputError, match="osl must be at least 2"):
        predict_serving(LLAMA, "h100_sxm", "vllm", 128, 1, batch=1)
    with pytest.raises(InputError):
        predict_serving(LLAMA, "h100_sxm", "vllm", 128, 128, batch=1, precision="fp2")
    with pytest.raises(InputError):
        predict_serving(LLAMA, "h100_sxm", "vllm", 128, 128, batch=1, tp=3)
    for mode in ({"batch": 10 ** 6}, {"concurrency": 10 ** 8}):
        with pytest.raises(InputError, match="at most 16384"):
            predict_serving(LLAMA, "h100_sxm", "vllm", 128, 128, **mode)


@pytest.fixture
def config_dir(tmp_path) -> Path:
    d = tmp_path / "configs"
    d.mkdir()
    (d / "meta-llama--Meta-Llama-3.1-8B_config.json").write_text(json.dumps(LLAMA))
    (d / "moonshotai--Kimi-K2_config.json").write_text(json.dumps(MLA))
    return d


def test_rows_agg_disagg_and_refusals(config_dir):
    base = {"silicon_data_source": "x; silicon_concurrency=8", "system": "h100_sxm", "isl": 1024, "osl": 128,
            "pp_size": 1, "attention_dp_size": 1, "moe_tp_size": 1, "moe_ep_size": 1}
    rows = pd.DataFrame([
        {**base, "backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "mode": "agg", "tp_size": 1,
         "precision": "bf16", "batch_size": 8},
        {**base, "backend": "trtllm", "model_path": "moonshotai/Kimi-K2", "mode": "disagg", "system": "b200_sxm",
         "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4", "prefill_tp_size": 8, "prefill_moe_tp_size": 1,
         "prefill_moe_ep_size": 8, "decode_tp_size": 8, "decode_moe_ep_size": 8, "decode_num_workers": 1},
        {**base, "backend": "vllm", "model_path": "acme/Unknown-7B", "mode": "agg", "tp_size": 1},
        {**base, "backend": "trtllm", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "mode": "agg", "tp_size": 1,
         "gemm_quant_mode": "nvfp4_wo", "batch_size": 8},  # aiconfigurator's Hopper NVFP4 weight-only mode
        {**base, "backend": "trtllm", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "mode": "agg", "tp_size": 1,
         "gemm_quant_mode": "fp9", "batch_size": 8},
        {**base, "backend": "trtllm", "model_path": "moonshotai/Kimi-K2", "mode": "disagg", "system": "b200_sxm",
         "precision": "fp4", "prefill_tp_size": 8, "prefill_moe_ep_size": 8},  # no decode worker's sizes
        {**base, "backend": "trtllm", "model_path": "moonshotai/Kimi-K2", "mode": "disagg", "system": "b200_sxm",
         "precision": "fp4", "prefill_tp_size": 8, "prefill_moe_ep_size": 8, "decode_moe_tp_size": 0,
         "decode_moe_ep_size": 0},  # zeros there are "not given" too
    ])
    out = predict_rows(rows, config_dir, WAVES)
    assert out.reason.iloc[3] == "" and out.reason.iloc[4] == "unsupported gemm_quant_mode 'fp9'"
    for i in (5, 6):
        assert out.reason.iloc[i].startswith("a disaggregated row needs its decode worker's sizes: decode_tp_size")
    assert list(out.columns[: len(rows.columns)]) == list(rows.columns)
    assert out.reason.iloc[2].startswith("no config for acme/Unknown-7B")
    ok = out.iloc[[0, 1, 3]]
    assert (ok.reason == "").all()
    for m in ("ttft", "tpot"):
        assert ((ok[f"pred_{m}_lo_ms"] <= ok[f"pred_{m}_ms"]) & (ok[f"pred_{m}_ms"] <= ok[f"pred_{m}_hi_ms"])).all()
    assert math.isnan(out.pred_ttft_ms.iloc[2])


def test_row_whose_tp_column_holds_tp_times_ep_runs_on_one_node(config_dir):
    """tp_size 64 = TP 8 x EP 8 on an 8-GPU B200 node is one 8-GPU instance with whole experts, and so is vLLM's
    TP x EP written into the attention-DP and EP columns; a split that fits one node, and a product that
    does not match moe_tp x ep, are read as written."""
    row = {"silicon_data_source": "x; silicon_concurrency=32", "system": "b200_sxm", "isl": 1024, "osl": 128,
           "backend": "trtllm", "model_path": "moonshotai/Kimi-K2", "mode": "agg", "precision": "fp8",
           "batch_size": 32, "pp_size": 1, "attention_dp_size": 1}
    req = row_request({**row, "tp_size": 64, "moe_tp_size": 8, "moe_ep_size": 8}, config_dir)
    assert (req["tp"], req["attention_dp"], req["moe_tp"], req["ep"]) == (8, 1, 1, 8)
    req = row_request({**row, "tp_size": 1, "attention_dp_size": 16, "moe_tp_size": 4, "moe_ep_size": 4}, config_dir)
    assert (req["tp"], req["attention_dp"], req["moe_tp"], req["ep"]) == (1, 4, 1, 4)
    req = row_request({**row, "tp_size": 8, "moe_tp_size": 1, "moe_ep_size": 8}, config_dir)
    assert (req["tp"], req["moe_tp"], req["ep"]) == (8, 1, 8)
    req = row_request({**row, "tp_size": 16, "moe_tp_size": 1, "moe_ep_size": 16}, config_dir)
    assert (req["tp"], req["moe_tp"], req["ep"]) == (16, 1, 16)
    # vLLM's TP 4 with EP (`..._tp4_ep4_...`) written as attention-DP 4 and EP 16: one 4-GPU instance
    req = row_request({**row, "backend": "vllm", "tp_size": 4, "attention_dp_size": 4, "moe_tp_size": 1,
                       "moe_ep_size": 16}, config_dir)
    assert (req["tp"], req["attention_dp"], req["moe_tp"], req["ep"]) == (4, 1, 1, 4)
    req = row_request({**row, "tp_size": 2, "attention_dp_size": 4, "moe_tp_size": 1, "moe_ep_size": 8}, config_dir)
    assert (req["tp"], req["attention_dp"], req["ep"]) == (2, 4, 8)  # fits one node: as written
    # a GB200 NVL72 domain is 72 GPUs, but tp_size 64 = TP 8 x EP 8 there too
    req = row_request({**row, "system": "gb200", "tp_size": 64, "moe_tp_size": 8, "moe_ep_size": 8}, config_dir)
    assert (req["tp"], req["attention_dp"], req["moe_tp"], req["ep"]) == (8, 1, 1, 8)
    # pipeline stages across nodes are real: TP 8 x PP 2 with experts 2 x 4 stays as written
    req = row_request({**row, "tp_size": 8, "pp_size": 2, "moe_tp_size": 2, "moe_ep_size": 4}, config_dir)
    assert (req["tp"], req["pp"], req["moe_tp"], req["ep"]) == (8, 2, 2, 4)
    # experts split finer than the EP (moe_tp 2 < ep 8), or no moe_tp_size column: read as written
    req = row_request({**row, "tp_size": 16, "moe_tp_size": 2, "moe_ep_size": 8}, config_dir)
    assert (req["tp"], req["moe_tp"], req["ep"]) == (16, 2, 8)
    req = row_request({**row, "tp_size": 16, "moe_ep_size": 2}, config_dir)
    assert (req["tp"], req["moe_tp"], req["ep"]) == (16, 8, 2)
    for blank in (0, ""):  # a zero or empty moe_tp_size is no moe_tp_size: no TP x EP rewrite
        req = row_request({**row, "tp_size": 64, "moe_tp_size": blank, "moe_ep_size": 8}, config_dir)
        assert (req["tp"], req["moe_tp"], req["ep"]) == (64, 8, 8)


def test_row_concurrency_beyond_one_instance_is_spread_over_instances():
    src = "x; silicon_concurrency={}"
    agg = {"mode": "agg", "batch_size": 13, "attention_dp_size": 1}
    assert concurrency_of({**agg, "silicon_data_source": src.format(416)}) == 13  # 32 instances of 13
    assert concurrency_of({**agg, "silicon_data_source": src.format(16)}) == 16  # not a multiple: one instance
    assert concurrency_of({**agg, "silicon_data_source": src.format(20)}) == 20
    assert concurrency_of({**agg, "silicon_data_source": src.format(13)}) == 13
    assert concurrency_of({**agg, "attention_dp_size": 4, "silicon_data_source": src.format(104)}) == 52
    assert concurrency_of(agg) == 13
    disagg = {"mode": "disagg", "decode_batch_size": 8, "decode_num_workers": 2, "silicon_data_source": src.format(64)}
    assert concurrency_of(disagg) == 64  # disaggregated workers share one benchmark


def test_cli_json_and_rows(config_dir, tmp_path, monkeypatch, capsys):
    cfg = config_dir / "meta-llama--Meta-Llama-3.1-8B_config.json"
    r = runner.invoke(app, ["predict-serving", "--config", str(cfg), "--device", "h100_sxm", "--engine", "sglang",
                            "--isl", "512", "--osl", "128", "--concurrency", "16", "--tp", "2", "--precision", "fp8",
                            "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output.strip().splitlines()[-1])
    assert set(d) == {f"{k}_{s}" for k in ("ttft", "tpot", "e2e") for s in ("ms", "lo_ms", "hi_ms")} | {
        "tokens_per_s", "tokens_per_s_per_gpu"}
    rows = tmp_path / "runs.csv"
    pd.DataFrame([{"backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B", "system": "h100_sxm", "mode": "agg",
                   "isl": 256, "osl": 64, "tp_size": 1, "batch_size": 4}]).to_csv(rows, index=False)
    out = tmp_path / "out.csv"
    r = runner.invoke(app, ["predict-serving", "--rows", str(rows), "--configs", str(config_dir), "--output", str(out)])
    assert r.exit_code == 0, r.output
    assert pd.read_csv(out).pred_tpot_ms.iloc[0] > 0
    # one run calibrated by a run of its deployment measured at twice its predicted TTFT: TTFT x 2 ** (1/2)
    one = ["predict-serving", "--config", str(cfg), "--device", "h100_sxm", "--engine", "vllm", "--isl", "256",
           "--osl", "64", "--concurrency", "4", "--json"]
    plain = json.loads(runner.invoke(app, one).output.strip().splitlines()[-1])
    measured = tmp_path / "measured.csv"
    m = pd.read_csv(out).assign(silicon_ttft_ms=lambda d: 2 * d.pred_ttft_ms, silicon_tpot_ms=lambda d: d.pred_tpot_ms)
    m.to_csv(measured, index=False)
    r = runner.invoke(app, [*one, "--calibration", str(measured)])
    assert r.exit_code == 0, r.output
    cal = json.loads(r.output.strip().splitlines()[-1])
    assert cal["ttft_ms"] == pytest.approx(plain["ttft_ms"] * 2 ** 0.5, rel=1e-3)
    assert cal["tpot_ms"] == pytest.approx(plain["tpot_ms"], rel=1e-3) and cal["e2e_ms"] > plain["e2e_ms"]
    for args in (["--config", str(cfg), "--device", "h100_sxm", "--engine", "tgi", "--isl", "8", "--osl", "8",
                  "--batch", "1"],
                 ["--config", str(cfg), "--device", "nosuchgpu", "--engine", "vllm", "--isl", "8", "--osl", "8",
                  "--batch", "1"],
                 ["--rows", str(rows)],
                 ["--config", str(cfg), "--device", "h100_sxm", "--engine", "vllm", "--isl", "8", "--osl", "8",
                  "--batch", "1", "--moe-precision", "fp8"],  # a dense model has no experts to quantize
                 ["--config", str(cfg), "--device", "h100_sxm", "--engine", "vllm", "--isl", "8", "--osl", "8",
                  "--concurrency", "100000000"]):  # refused at once, not simulated for minutes
        assert_one_line_error(*run_cli(monkeypatch, capsys, ["predict-serving", *args]))
    # a MoE's experts in 4 bits under bf16 attention (gpt-oss' MXFP4): faster decode than all-bf16
    moe = tmp_path / "moe.json"
    moe.write_text(json.dumps(MOE))
    moe_run = ["predict-serving", "--config", str(moe), "--device", "h100_sxm", "--engine", "vllm", "--isl", "256",
               "--osl", "64", "--concurrency", "4", "--json"]
    tpot = [json.loads(runner.invoke(app, [*moe_run, *extra]).output.strip().splitlines()[-1])["tpot_ms"]
            for extra in ((), ("--moe-precision", "int4"))]
    assert tpot[1] < tpot[0]


def test_simulator_adapters():
    timer = IterationTimer(LLAMA, "h100_sxm", "sglang", calibration=WAVES)
    sg = SGLangTimePredictor(timer)
    req = lambda e, p: SimpleNamespace(extend_length=e, past_kv_length=p)  # noqa: E731
    prefill = SimpleNamespace(reqs=[req(1024, 0), req(512, 512)], is_decode=lambda: False)
    decode = SimpleNamespace(reqs=[req(1, 1000)] * 32, is_decode=lambda: True)
    long_decode = SimpleNamespace(reqs=[req(1, 8000)] * 32, is_decode=lambda: True)
    tp, td = sg.predict_infer_time(prefill), sg.predict_infer_time(decode)
    assert 0 < td < tp < 1.0 and sg.predict_infer_time(long_decode) > td
    assert sg.predict_infer_time(SimpleNamespace(reqs=[], is_decode=lambda: True)) == 0.0
    tr = TrtllmTimePredictor(IterationTimer(LLAMA, "h100_sxm", "trtllm", calibration=WAVES))
    mixed = SimpleNamespace(context_requests=[SimpleNamespace(context_chunk_size=2048, context_current_position=0)],
                            generation_requests=[SimpleNamespace(past_kv_length=700)] * 16)
    gen = SimpleNamespace(context_requests=[], generation_requests=[SimpleNamespace(past_kv_length=700)] * 16)
    assert tr.predict(mixed) > tr.predict(gen) > 0


def test_sweep_picks_sla_point(tmp_path):
    pts = sweep(LLAMA, ["h100_sxm", "b200_sxm"], "vllm", 1024, 256, tps=(1, 2), concurrencies=(1, 16, 64),
                tpot_sla_ms=15.0, calibration=WAVES)
    assert len(pts) == 12
    b = best(pts)
    assert b is not None and b.meets_sla and b.tpot_hi_ms <= 15.0
    assert all(p.tokens_per_s_per_gpu <= b.tokens_per_s_per_gpu for p in pts if p.meets_sla)
    plot(pts, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 0


@pytest.mark.skipif(not (DATA / "systems/silicon_sample.csv").is_file(),
                    reason="needs ../shared/datasets/aiconfigurator")
def test_silicon_sample_rows_predicted():
    """(Speed is measured by experiments/serving/serving_silicon.py, not here.)"""
    df = pd.read_csv(DATA / "systems/silicon_sample.csv")
    df = df[df.system.isin(["h100_sxm", "b200_sxm"])].sample(40, random_state=0)
    out = predict_rows(df, DATA / "model_configs")
    assert (out.reason == "").mean() >= 0.9


def test_more_families_map_onto_their_layer_structure():
    base = {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2,
            "head_dim": 64, "vocab_size": 1000}
    maverick = arch_from_dict({**base, "model_type": "llama4_text", "intermediate_size": 256,
                               "intermediate_size_mlp": 1024, "num_local_experts": 16, "num_experts_per_tok": 1,
                               "interleave_moe_layer_step": 2})
    assert (maverick.moe_layers, maverick.dense_layers) == (4, 4)
    assert (maverick.experts, maverick.topk, maverick.expert_ffn, maverick.shared_ffn, maverick.ffn) == \
        (16, 1, 256, 256, 1024)
    k3 = arch_from_dict({**MLA, "model_type": "kimi_linear", "num_experts": 16, "num_experts_per_token": 2,
                         "num_shared_experts": 1, "routed_expert_hidden_size": 96, "first_k_dense_replace": 1,
                         "linear_attn_config": {"kda_layers": [1, 2, 3], "num_heads": 4, "head_dim": 32}})
    assert k3.mla and (k3.linear_layers, k3.kv_layers, k3.experts, k3.topk, k3.moe_latent) == \
        (3, MLA["num_hidden_layers"] - 3, 16, 2, 96)
    dsa = arch_from_dict({**MLA, "model_type": "deepseek_v32", "index_topk": 2048})
    assert dsa.mla and dsa.max_keys == 2048
    hybrid = arch_from_dict({**base, "model_type": "qwen3_5_text", "intermediate_size": 1024,
                             "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
                             + ["full_attention"]})
    assert (hybrid.experts, hybrid.linear_layers, hybrid.kv_layers) == (0, 6, 2)
    m3 = arch_from_dict({"model_type": "minimax_m3_vl", "text_config": {
        **base, "intermediate_size": 256, "dense_intermediate_size": 1024, "shared_intermediate_size": 256,
        "n_shared_experts": 1, "num_local_experts": 16, "num_experts_per_tok": 2, "moe_layer_freq": [0, 0] + [1] * 6,
        "sparse_attention_config": {"use_sparse_attention": True, "sparse_topk_blocks": 4, "sparse_block_size": 64,
                                    "sparse_local_block": 1}}})
    assert (m3.family, m3.dense_layers, m3.moe_layers, m3.ffn, m3.expert_ffn, m3.shared_ffn, m3.max_keys) == \
        ("minimax_m3", 2, 6, 1024, 256, 256, 5 * 64)
    g4 = arch_from_dict({**base, "model_type": "gemma4_text", "intermediate_size": 512, "sliding_window": 256,
                         "layer_types": ["sliding_attention"] * 3 + ["full_attention"] + ["sliding_attention"] * 3
                         + ["full_attention"], "num_global_key_value_heads": 1, "global_head_dim": 128,
                         "attention_k_eq_v": True, "enable_moe_block": True, "num_experts": 16, "top_k_experts": 2,
                         "moe_intermediate_size": 128})
    assert (g4.sliding_layers, g4.full_layers, g4.shared_ffn, g4.expert_ffn, g4.dense_layers) == (6, 2, 512, 128, 0)
    # full layers cache one tensor of 1 head x 128 per token; sliding ones k and v of 2 heads x 64 for their window
    assert g4.kv_elems_per_token(1) == 2 * 1 * 128 and g4.window_elems(1) == 6 * 2 * 2 * 64 * 256
    r = predict_serving(g4, "h100_sxm", "vllm", 2048, 64, concurrency=4, calibration=WAVES)
    assert 0 < r.tpot.lo_ms <= r.tpot.ms <= r.tpot.hi_ms
    moe = {"hidden_size": 512, "num_attention_heads": 8, "vocab_size": 1000, "intermediate_size": 1024,
           "n_routed_experts": 16, "num_experts_per_tok": 2, "moe_intermediate_size": 128, "sliding_window": 64}
    v2 = arch_from_dict({**moe, "model_type": "mimo_v2_flash", "num_hidden_layers": 4, "num_key_value_heads": 1,
                         "head_dim": 96, "v_head_dim": 64, "swa_num_key_value_heads": 2, "swa_head_dim": 96,
                         "swa_v_head_dim": 64, "hybrid_layer_pattern": [0, 1, 1, 0], "moe_layer_freq": [0, 1, 1, 1]})
    assert (v2.full_layers, v2.sliding_layers, v2.dense_layers, v2.moe_layers) == (2, 2, 1, 3)
    # keys 96 and values 64 wide: full layers cache 1 KV head per token, sliding ones 2 over their window
    assert v2.kv_elems_per_token(1) == 2 * (96 + 64) * 1 and v2.window_elems(1) == 2 * (96 + 64) * 2 * 64
    step = arch_from_dict({**moe, "model_type": "step3p7", "num_hidden_layers": 4, "num_key_value_heads": 2,
                           "head_dim": 64, "first_k_dense_replace": 1, "share_expert_dim": 128, "n_shared_experts": 1,
                           "layer_types": ["full_attention"] + ["sliding_attention"] * 3})
    assert (step.full_layers, step.sliding_layers, step.dense_layers, step.shared_ffn) == (1, 3, 1, 128)
    mimo = arch_from_dict({**base, "model_type": "mimo", "intermediate_size": 1024})
    assert mimo.experts == 0 and mimo.dense_layers == 8


def test_nemotron_hybrids_map_block_by_block():
    nemo = {"model_type": "nemotron_h", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 64, "vocab_size": 1000, "intermediate_size": 512, "mlp_hidden_act": "relu2",
            "mamba_num_heads": 8, "mamba_head_dim": 32, "n_groups": 2, "ssm_state_size": 16,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
            "moe_shared_expert_intermediate_size": 256, "moe_latent_size": 64}
    a = arch_from_dict({**nemo, "num_hidden_layers": 6, "hybrid_override_pattern": "ME*EM-"})
    assert (a.linear_layers, a.kv_layers, a.moe_layers, a.dense_layers) == (2, 1, 2, 1)
    assert a.sublayer_share == 0.5 and not a.gated_mlp and a.mlp_mats == 2
    # Mamba-2 state per sequence: heads x head_dim x state, fp32, per mixer layer
    assert a.linear_state_bytes(1) == 2 * 8 * 32 * 16 * 4.0
    p = a.params()
    assert p["experts"] == 2 * 64 * 128 * 8 * 2  # two matrices per expert, in the 64-wide latent space
    newer = arch_from_dict({**nemo, "layers_block_type": ["mamba", "moe", "attention", "moe", "mamba", "mlp"]})
    assert newer == a
    with pytest.raises(InputError, match="one block kind"):
        arch_from_dict({**nemo, "num_hidden_layers": 3, "hybrid_override_pattern": "MX*"})
    r = predict_serving(a, "h100_sxm", "vllm", 512, 64, concurrency=4, calibration=WAVES)
    assert 0 < r.ttft.lo_ms <= r.ttft.ms <= r.ttft.hi_ms and 0 < r.tpot.ms
    nas = arch_from_dict({"model_type": "nemotron-nas", "hidden_size": 384, "num_attention_heads": 6,
                          "vocab_size": 1000, "num_hidden_layers": 3, "block_configs": [
                              {"attention": {"n_heads_in_group": 3}, "ffn": {"ffn_mult": 2.0}},
                              {"attention": {"no_op": True}, "ffn": {"ffn_mult": 1.0}},
                              {"attention": {"n_heads_in_group": 3}, "ffn": {"no_op": True}}]})
    assert (nas.kv_layers, nas.dense_layers, nas.kv_heads, nas.ffn) == (2, 2, 2, (512 + 256) // 2)


def test_deepseek_v4_compressed_attention():
    v4 = arch_from_dict({"model_type": "deepseek_v4", "hidden_size": 512, "num_hidden_layers": 4, "vocab_size": 1000,
                         "num_attention_heads": 8, "head_dim": 128, "q_lora_rank": 256, "o_groups": 2,
                         "o_lora_rank": 128, "index_n_heads": 4, "index_head_dim": 32, "index_topk": 64,
                         "sliding_window": 16, "hc_mult": 4, "compress_ratios": [0, 4, 128, 4, 0],
                         "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
                         "n_shared_experts": 1})
    c = v4.compressed
    assert c.ratios == (0, 4, 128, 4) and v4.experts == 8 and v4.shared_ffn == 256
    # per token: two CSA layers' entry and index key every 4 tokens, one HCA entry every 128 (fp8)
    assert c.kv_bytes_per_token(1.0) == pytest.approx(2 * (128 + 32 + 4) / 4 + 128 / 128)
    # a decode query reads each layer's window, the indexer's top-k on CSA layers and every HCA entry
    read = sum(float(c.layer_entries(r, 10_000)) for r in c.ratios)
    assert read == pytest.approx(4 * 16 + 2 * 64 + 10_000 / 128)
    assert sum(float(c.layer_entries(r, 32768)) for r in c.ratios) < 0.1 * 4 * 32768  # a full-attention MQA's reads
    h100 = get_device("h100_sxm")
    step = [c.decode_ms(8 * ctx, 8, 8, h100, "fp8", None) for ctx in (2048, 32768)]
    assert 0 < step[0] < step[1] < 10 * step[0]  # 16x the context: the indexer's scan grows with it, the reads less
    r = predict_serving(v4, "h100_sxm", "sglang", 8192, 64, concurrency=8, calibration=WAVES)
    assert 0 < r.tpot.lo_ms <= r.tpot.ms <= r.tpot.hi_ms
    # TensorRT-LLM decodes it in its own kernel: 64 query heads over one entry take no XQA fallback
    wide = [c.decode_ms(8 * 32768, 8, h, h100, "fp8", "torch_flow") for h in (32, 64)]
    assert wide[1] < 2.5 * wide[0]


def test_dsa_indexer_scores_every_cached_key(monkeypatch):
    """GLM-5 / DeepSeek-V3.2: sparse attention reads at most `index_topk` keys per query, but the lightning
    indexer reads every cached key's FP8 index key on every layer, so decode keeps growing past the top-k
    and each token caches its index key beside the latent."""
    cfg = {**MLA, "model_type": "glm_moe_dsa", "index_topk": 2048, "index_n_heads": 32, "index_head_dim": 128}
    dsa = arch_from_dict(cfg)
    plain = arch_from_dict({k: v for k, v in cfg.items() if k not in ("index_n_heads", "index_head_dim")})
    assert dsa.max_keys == plain.max_keys == 2048 and (dsa.index_heads, dsa.index_dim) == (32, 128)
    assert plain.index_heads == 0 and plain.index_bytes_per_token() == 0  # no indexer given: none priced
    with pytest.raises(InputError, match="index_head_dim"):
        arch_from_dict({k: v for k, v in cfg.items() if k != "index_head_dim"})
    par = Parallel(8, 1, 1, 8, 1)
    assert kv_bytes_per_token(dsa, par, 1.0) == pytest.approx(kv_bytes_per_token(plain, par, 1.0) + 132 * 61)
    # its projections are whole on every TP rank
    grown = weight_bytes_per_gpu(dsa, par, "fp8", "fp8") - weight_bytes_per_gpu(plain, par, "fp8", "fp8")
    assert grown == pytest.approx(dsa.params()["index"] * 1.0) and grown > 0
    b200 = get_device("b200_sxm")
    costs = [setup_cost(a, b200, get_engine("sglang"), Worker(par, "fp8", "fp8", 1.0), 4096, 8, 4096, 64)[0]
             for a in (dsa, plain)]
    dsa_cost = costs[0]
    short, long = (dsa_cost.decode_attn_ms(8 * ctx, 8) for ctx in (4096, 65536))
    # 16x the context: the sparse attention's top-k per query stays; the index scan of every cached key and the
    # top-k selection over its scores grow
    assert long - short > dsa_cost._index_ms * 8 * (65536 - 4096) > 0
    # verifying a draft token: each query of a sequence picks and attends its own top-k, free while the CTAs fit
    # in one wave over the SMs (8 sequences), not beyond (96)
    one, two = (dsa_cost.decode_attn_ms(8 * 4096, 8, queries=q) for q in (1, 2))
    assert one == two
    one, two = (dsa_cost.decode_attn_ms(96 * 4096, 96, queries=q) for q in (1, 2))
    assert one < two < 2 * one
    assert dsa_cost.prefill_attn_ms(4096, 65536) > 0 and costs[1].prefill_attn_ms(4096, 65536) > 0
    # a prefill's rows past top-k keys select theirs: none within top-k, more with a longer prefix
    picks = [dsa_cost._topk_ms(1, 1024, p) for p in (1024, 2048, 4096, 65536)]
    assert picks[0] == 0 and 0 < picks[1] < picks[2] < picks[3]
    charged = dsa_cost.prefill_attn_ms(1024, 4096)
    dsa_cost._prefill_cache.clear()
    monkeypatch.setattr(dsa_cost, "_topk_ms", lambda *a: 0.0)
    assert charged - dsa_cost.prefill_attn_ms(1024, 4096) == pytest.approx(picks[2] / par.pp)
    # a decode step verifying a draft token attends and selects for two queries a sequence (`decode_step_ms`)
    from hybridperf.serving.cost import Speculation
    spec = setup_cost(dsa, b200, get_engine("sglang"), Worker(par, "fp8", "fp8", 1.0, Speculation(1, 0.5)), 4096, 96,
                      4096, 64)[0]
    n, keys = 96, 96 * 4096
    parts = spec.tokens_ms(2 * n) + spec.sample_ms(2 * n) + spec.decode_attn_ms(keys, n, 2) + spec.draft_ms(n, keys)
    assert spec.decode_step_ms(n, keys) == pytest.approx(parts)
    assert spec.decode_attn_ms(keys, n, 2) > spec.decode_attn_ms(keys, n, 1)


def test_speculative_decoding_speeds_memory_bound_decode():
    from hybridperf.serving.cost import Speculation

    assert Speculation(3, 0.5).tokens_per_step == 1 + 0.5 + 0.25 + 0.125 and Speculation().tokens_per_step == 1
    kw = dict(config=LLAMA, device="h100_sxm", engine="vllm", isl=512, osl=128, calibration=WAVES)
    plain = predict_serving(**kw, concurrency=1)
    spec = predict_serving(**kw, concurrency=1, spec_tokens=3, acceptance=0.8)
    assert spec.tpot.ms < 0.6 * plain.tpot.ms and spec.ttft.ms == pytest.approx(plain.ttft.ms, rel=0.05)
    # a rejected draft only costs: at acceptance near 0 speculation is slower than none
    assert predict_serving(**kw, concurrency=1, spec_tokens=3, acceptance=0.01).tpot.ms > plain.tpot.ms
    for bad in ({"spec_tokens": -1}, {"spec_tokens": 2, "acceptance": 1.0}):
        with pytest.raises(InputError):
            predict_serving(**kw, concurrency=1, **bad)
    # a cache just large enough for one request: the last speculative step may overfill it, never loop
    from hybridperf.serving.scheduler import Workload, simulate
    from hybridperf.serving.api import Worker, setup_cost
    from hybridperf.serving.cost import Speculation as Spec
    cost, _ = setup_cost(arch_from_dict(LLAMA), get_device("h100_sxm"), get_engine("vllm"),
                         Worker(Parallel(), spec=Spec(3, 0.9)), 2048, 1, 512, 128)
    done = simulate(cost, get_engine("vllm"), Workload(512, 128, 1, True, 2048, 512 + 128 + 3, 8, 512))
    assert len(done) == 2


class _FlatCost:
    """A step cost of plain arithmetic, for the scheduler's bookkeeping alone."""

    def __init__(self, tokens: int, per_step: float, state: int = 0):
        from types import SimpleNamespace
        self.spec, self.state_tokens = SimpleNamespace(tokens=tokens, tokens_per_step=per_step), state

    def decode_step_ms(self, n, keys):
        return 0.3 + 0.01 * n + 1e-5 * keys

    def prefill_attn_ms(self, c, ctx):
        return 1e-6 * c * (ctx + c / 2)

    def prefill_linear_ms(self, lengths):
        return 0.001 * sum(lengths) + 0.05 * len(lengths)

    def decode_attn_ms(self, keys, n, q):
        return 1e-5 * keys * q

    def draft_ms(self, n, keys):
        return 0.01 * n

    def tokens_ms(self, t):
        return 0.0005 * t

    def sample_ms(self, s):
        return 0.001 * s


def test_fractional_speculative_tokens_leave_no_residue_in_the_cache():
    """Speculation advances a sequence by a fractional 1.9 tokens a step: the KV tokens held, summed over admissions,
    stretches and finishes, must not keep rounding residue that refuses a request the cache holds exactly (a cache of
    two requests then ran one: TTFT 18.8 -> 36.9 ms), nor cost a step more than the output needs."""
    from hybridperf.serving.scheduler import Workload, simulate

    cost, eng = _FlatCost(1, 1.9, state=50), get_engine("vllm")

    def total_ttft(cap):
        return sum(d[0][0] for d in simulate(cost, eng, Workload(64, 5, 33, True, 8192, cap, 1024, 4)))
    assert total_ttft(240) == pytest.approx(total_ttft(241))
    # 2 + 19 x 1.9 = 38.1 tokens: ceil(38 / 1.9) = 20 decode steps for 39 output tokens, not 21
    done = simulate(_FlatCost(1, 1.9), eng, Workload(16, 39, 1, False, 8192, 10 ** 6, 1024, 4))
    assert done[0][1][2] == 20


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_one_output_token_ends_at_its_prefill_in_every_loop(engine):
    """A request of one output token decodes nothing: a closed loop, staggered or not, is its prefills alone
    (a staggered start once found nothing to decode and called the cache too small)."""
    from dataclasses import replace

    from hybridperf.serving.api import Worker, setup_cost
    from hybridperf.serving.scheduler import Workload, simulate
    eng = get_engine(engine)
    cost, cap = setup_cost(arch_from_dict(LLAMA), get_device("h100_sxm"), eng, Worker(Parallel()), 8192, 64, 1024, 1)
    for e in (eng, replace(eng, staggered_clients=True)):
        done = simulate(cost, e, Workload(1024, 1, 64, True, 8192, cap, 1024, 512), measured=32)
        assert len(done) >= 32 and all(d[1] == (0.0, 0.0, 0.0) and d[0][0] > 0 for d in done)


def test_engine_attention_kernels_per_gpu_generation():
    vllm, sglang, trt = get_engine("vllm"), get_engine("sglang"), get_engine("trtllm")
    assert trt.attention_sources("hopper") == trt.attention_sources("ampere") == ("torch_flow", "torch_flow")
    assert vllm.attention_sources("hopper") == ("vllm_flash_attn_fa3", "vllm_flash_attn_fa3")
    assert vllm.attention_sources("ada") == vllm.attention_sources("ampere")  # the nearest older entry
    assert sglang.attention_sources("blackwell_ultra") == ("trtllm_mha", "trtllm_mha")
    for arch in ("cdna3", "volta", "turing"):  # no table measured their kernels: PyTorch SDPA's constants
        assert vllm.attention_sources(arch) == ("", "")
    with pytest.raises(InputError, match="NVIDIA GPUs only"):
        predict_serving(LLAMA, "AMD Instinct MI300X", "trtllm", 1024, 128, concurrency=4)


def test_linear_attention_state_costs_time_and_cache_memory():
    base = {"model_type": "qwen3_5_text", "hidden_size": 2048, "num_hidden_layers": 8, "num_attention_heads": 16,
            "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 1000, "intermediate_size": 4096,
            "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "layer_types": ["linear_attention"] * 3 + ["full_attention"]
            + ["linear_attention"] * 3 + ["full_attention"]}
    a = arch_from_dict(base)
    assert a.linear_state_bytes(1) == 6 * 32 * 128 * 128 * 4.0
    from hybridperf.serving.api import setup_cost

    cost, cap = setup_cost(a, get_device("h100_sxm"), get_engine("vllm"), Worker(Parallel()), 8192, 8, 1024, 128)
    per_token = a.kv_elems_per_token(1) * 2.0
    assert cost.state_tokens == math.ceil(a.linear_state_bytes(1) / per_token) > 0
    d = cost.decode_attn_ms  # per sequence, not per step (above the attention kernels' floors)
    assert d(0, 64) - d(0, 32) == pytest.approx(16 * (d(0, 4) - d(0, 2))) and d(0, 4) > d(0, 2)


def test_monotone_mape_fit_is_the_best_non_decreasing_fit():
    from itertools import product

    import numpy as np

    from experiments.serving.serving_silicon import monotone_mape_fit

    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.integers(1, 5, 6)
        y = rng.uniform(1.0, 10.0, 6)
        fit = monotone_mape_fit(x, y)
        order = np.argsort(x, kind="stable")
        assert np.all(np.diff(fit[order]) >= 0) and all(len(set(fit[x == v])) == 1 for v in set(x))
        ux = np.unique(x)
        best = min(np.mean(np.abs(np.array(levels)[np.searchsorted(ux, x)] / y - 1))
                   for levels in product(np.unique(y), repeat=len(ux)) if np.all(np.diff(levels) >= 0))
        assert np.mean(np.abs(fit / y - 1)) == pytest.approx(best)  # L1 optima sit on data values


def test_every_kernel_of_an_iteration_takes_at_least_the_floor(monkeypatch):
    """A tiny model's iteration is its kernels' floors: four GEMMs, ELEMENTWISE_KERNELS and an activation per layer,
    at KERNEL_FLOOR_KCYCLES of the GPU's clock; a large batch's kernels are above their floors, which then change
    nothing."""
    from hybridperf.serving import cost as cost_module
    from hybridperf.serving.cost import ELEMENTWISE_KERNELS, kernel_floor_ms

    tiny = dict(LLAMA, hidden_size=64, num_attention_heads=2, num_key_value_heads=1, intermediate_size=128,
                num_hidden_layers=4, vocab_size=256)
    for gpu in ("h100_sxm", "b200_sxm"):
        device = get_device(gpu)
        cost, _ = setup_cost(arch_from_dict(tiny), device, get_engine("vllm"), Worker(Parallel()), 8192, 8, 128, 16)
        floor = 4.0 / device.boost_clock_mhz
        assert cost.tokens_ms(1) == pytest.approx(4 * (4 + ELEMENTWISE_KERNELS + 1) * floor, rel=1e-3)
        assert cost.decode_attn_ms(16, 1) == pytest.approx(4 * floor)  # one attention kernel per layer
    h100 = get_device("h100_sxm")
    big = [setup_cost(arch_from_dict(LLAMA), h100, get_engine("vllm"), Worker(Parallel()), 8192, 8, 128, 16)[0]]
    monkeypatch.setattr(cost_module, "KERNEL_FLOOR_KCYCLES", 0.0)
    assert kernel_floor_ms(h100) == 0.0
    big.append(setup_cost(arch_from_dict(LLAMA), h100, get_engine("vllm"), Worker(Parallel()), 8192, 8, 128, 16)[0])
    assert big[0].tokens_ms(4096) == pytest.approx(big[1].tokens_ms(4096), rel=1e-3)
    assert big[0].tokens_ms(1) > 1.05 * big[1].tokens_ms(1)  # ... which a single token's kernels are not


def test_a_waves_micro_batches_enter_the_pipeline_one_after_another():
    """An offline batch of pp prompts fills pp micro-batches, which enter the first stage one stage time apart:
    the k-th prompt's first token waits k more stage times (a mean of (pp - 1) / 2), the last finishes pp - 1
    later; one prompt, or one stage, has nothing to wait for, nor a closed loop's requests (they return
    staggered)."""
    kw = dict(config=LLAMA, device="h100_sxm", engine="vllm", isl=8192, osl=16, calibration=WAVES)
    one, four = (predict_serving(batch=b, pp=4, **kw) for b in (1, 4))
    stage = (one.ttft.ms - WAVES.engines["vllm"].ttft_ms) / 4  # a prompt's prefill on one stage (ms)
    assert four.ttft.ms - one.ttft.ms == pytest.approx(1.5 * stage, rel=0.05)
    assert four.e2e.ms - one.e2e.ms == pytest.approx(3 * stage, rel=0.05)
    assert four.tpot.ms == pytest.approx(one.tpot.ms, rel=1e-6)
    assert predict_serving(batch=4, pp=1, **kw).ttft.ms > four.ttft.ms  # one stage queues all four prefills
    assert predict_serving(concurrency=4, pp=4, **kw).ttft.ms < four.ttft.ms


def test_pipeline_stages_split_the_layers_and_run_the_lm_head_once():
    """An iteration's time is a stage's time x pp: the layers split over the stages, the LM head and sampler run
    on the last stage only, so pp stages of one step add up to the one-stage step and one hand-off of the hidden
    states and residual between them; a hand-off between nodes costs more than one within."""
    import numpy as np

    h100 = get_device("h100_sxm")

    def cost(pp, tp=1):
        return setup_cost(arch_from_dict(LLAMA), h100, get_engine("vllm"), Worker(Parallel(tp=tp, pp=pp)), 8192, 8,
                          128, 16)[0]

    one, two = cost(1), cost(2)
    assert 2 * two.sample_ms(8) == pytest.approx(one.sample_ms(8))
    hand_off = two.models.collectives.predict("send_recv", np.array([8 * LLAMA["hidden_size"] * 2.0 * 2]), 2, 2,
                                              two.node, timing="graph")["ms"][0]
    assert hand_off > 0
    assert 2 * two.decode_step_ms(8, 8 * 1024) == pytest.approx(one.decode_step_ms(8, 8 * 1024) + hand_off, rel=1e-6)
    n = np.array([512.0])
    assert cost(1, tp=8).comm.stage_send(n)[0] == 0
    # 8-GPU nodes: stages of 2 cross at the 4th hand-off only; of 8, at each; of 4 GPUs over 3 stages, at one;
    # a stage straddling a node boundary (3 GPUs: 0-2, 3-5, 6-8, 9-11) crosses where any GPU does
    assert [cost(pp, tp).comm.crossing_hand_offs() for pp, tp in ((8, 2), (2, 8), (3, 4), (4, 1))] == [1, 1, 1, 0]
    comm = cost(2, tp=4).comm
    assert StageComm(comm.arch, comm.node, "vllm", Parallel(tp=3, pp=4), None).crossing_hand_offs() == 2
    within = comm.stage_send(n)[0]
    across = StageComm(comm.arch, dataclasses.replace(comm.node, gpus_per_node=4), "vllm", comm.par,
                       comm.collectives).stage_send(n)[0]  # the same stages, one per 4-GPU node
    assert across > within > 0
