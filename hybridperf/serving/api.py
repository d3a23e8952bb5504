"""`predict_serving`: TTFT, TPOT, end-to-end latency and throughput of an LLM served by vLLM, SGLang or
TensorRT-LLM, aggregated (one instance prefills and decodes) or disaggregated (prefill and decode workers
with the KV cache sent between them), with a central 90% interval."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from hybridperf.devices import DeviceSpec, NodeSpec, find_node, get_device
from hybridperf.devices.node_lookup import gpu_node
from hybridperf.errors import InputError
from hybridperf.graphs.config import check_positions
from hybridperf.serving.arch import Arch
from hybridperf.serving.calibration import WORKERS_INFERRED, Calibration
from hybridperf.serving.cost import (KV_DTYPE_BYTES, PRECISIONS, KernelModels, Parallel, Speculation, StepCost,
                                     check_weights_fit, default_kv_dtype, kv_bytes_per_token)
from hybridperf.serving.engines import EngineDefaults, get_engine
from hybridperf.serving.scheduler import Workload, simulate

#: requests simulated per closed-loop run beyond warm-up: enough for a steady mean, few enough for speed
MEASURED_CAP = 256
#: one-way latency of a KV transfer between disaggregated workers (NIXL/UCX over RDMA), ms
KV_TRANSFER_LATENCY_MS = 1.0
#: the largest batch or concurrency `predict_serving` simulates (silicon_sample.csv's largest run: 10,860): the
#: schedule's cost grows with it (a closed loop of 16,384 requests takes ~3 s per call on a shared 2-core machine)
MAX_REQUESTS = 16384


@dataclass(frozen=True)
class Latency:
    ms: float
    lo_ms: float
    hi_ms: float


@dataclass(frozen=True)
class ServingResult:
    ttft: Latency
    tpot: Latency
    e2e: Latency
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    gpus: int
    stratum: str = ""  # the run's interval stratum (`calibration.STRATA`, "" none): its own quantiles where calibrated

    def to_json(self) -> dict:
        out = {}
        for k in ("ttft", "tpot", "e2e"):
            lat = getattr(self, k)
            out.update({f"{k}_ms": lat.ms, f"{k}_lo_ms": lat.lo_ms, f"{k}_hi_ms": lat.hi_ms})
        out.update(tokens_per_s=self.tokens_per_s, tokens_per_s_per_gpu=self.tokens_per_s_per_gpu)
        return out


@dataclass(frozen=True)
class Worker:
    """One engine instance: its parallel split and precision."""

    par: Parallel
    precision: str = "bf16"
    moe_precision: str = ""
    kv_bytes: float | None = None  # bytes per cached element; None: `default_kv_dtype` of the precision
    spec: Speculation = Speculation()

    @property
    def cache_bytes(self) -> float:
        if self.kv_bytes is not None:
            return self.kv_bytes
        return KV_DTYPE_BYTES[default_kv_dtype(self.precision)]


def node_for(device: DeviceSpec | str) -> NodeSpec:
    """The node a serving instance of `device` runs on: the node a name names (`4xA40-PCIe`, `gb10`, a system
    id), else the node a bare GPU is placed in wherever the project needs one (`devices.node_lookup.gpu_node`)."""
    if isinstance(device, str):
        named = find_node(device)
        if named is not None:
            return named
        device = get_device(device)
    return gpu_node(device)[0]


@lru_cache(maxsize=1)
def _collectives():
    """The project's collective model (prior x ONNX residual); its prior alone when the exported bundle is
    missing or from another format, so that serving never depends on that bundle being present."""
    from hybridperf.errors import ModelBundleError
    from hybridperf.residual_models.collectives import CollectiveModel

    try:
        return CollectiveModel.load()
    except (ModelBundleError, OSError):
        return CollectiveModel.prior_only()


def default_models() -> KernelModels:
    """The shipped collective model and attention, MLA decode and sparse (DSA) MLA constants."""
    return KernelModels(_collectives())


def setup_cost(arch: Arch, device: DeviceSpec | str, eng: EngineDefaults, wk: Worker, budget: int, inflight: int, isl,
               osl, models: KernelModels | None = None):
    """The iteration cost model of one worker on `device` (a GPU or a node's name, `node_for`) and its KV
    capacity (tokens per rank); InputError when the split is invalid, the weights do not fit or one request's
    KV cache does not. `models`: the shipped ones (`default_models`) when None."""
    node = node_for(device)
    device = get_device(device)
    wk.par.check(arch)
    if eng.nvidia_only and device.vendor != "nvidia":
        raise InputError(f"{eng.name} runs on NVIDIA GPUs only, not on {device.name}")
    moe_prec = wk.moe_precision or wk.precision
    for p in (wk.precision, moe_prec):
        if p not in PRECISIONS:
            raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {p!r}")
    free = check_weights_fit(arch, wk.par, wk.precision, moe_prec, device, eng)
    cap = int(free / kv_bytes_per_token(arch, wk.par, wk.cache_bytes) / max(eng.block_size, 1)) * max(eng.block_size, 1)
    max_tokens = budget + min(inflight, eng.limits(device)[2]) + 1
    wk.spec.check()
    cost = StepCost(arch, device, node, eng, wk.par, wk.precision, moe_prec, wk.cache_bytes,
                    models or default_models(), max_tokens, wk.spec)
    if cap < isl + osl + wk.spec.tokens + cost.state_tokens:
        raise InputError(f"the KV cache holds {cap} tokens per GPU, fewer than one request's {isl + osl}"
                         + (f" plus its recurrent state ({cost.state_tokens} tokens' worth)" if cost.state_tokens else ""))
    return cost, cap


def _mean(xs):
    return tuple(sum(x[i] for x in xs) / len(xs) for i in range(3))


def agg_components(arch: Arch, device, engine: str, wk: Worker, isl: int, osl: int, inflight: int,
                   closed_loop: bool, budget: int | None = None, models: KernelModels | None = None) -> dict:
    """Schedule one aggregated instance: per-request means of the (gpu_ms, eager layer launches, graph layer
    launches) of TTFT, of the decode phase and of e2e, for all requests starting at once ("wave", with
    "last_ttft"/"last_decode": the request that finishes last) and, in a closed loop, for its steady state
    ("steady"; `scheduler.simulate`) and, on an engine priced in lock-step, for the same loop with its clients
    drifted apart ("drift": some of its measured runs sit there, `predict_serving` lets TTFT's interval reach it)."""
    eng = get_engine(engine)
    gpu = get_device(device)
    par = wk.par
    per_rank = max(1, math.ceil(inflight / par.adp / par.pp))
    serving_tokens, offline_tokens, max_running = eng.limits(gpu)
    if budget is None:
        budget = serving_tokens if closed_loop else offline_tokens
    cost, cap = setup_cost(arch, device, eng, wk, budget, per_rank, isl, osl, models)
    common = dict(isl=isl, osl=osl, inflight=per_rank, budget=budget, kv_capacity=cap, max_running=max_running,
                  graph_batch=eng.graph_batch(gpu, par.tp))
    # each iteration crosses every stage (GPU ms x pp) and launches every layer's kernels (x layers; a block
    # of one sublayer, as Nemotron-H's, counts half)
    layers = arch.layers * arch.sublayer_share
    scale = lambda c: (c[0] * par.pp, c[1] * layers, c[2] * layers)  # noqa: E731

    def means(done: list) -> dict:
        return {k: scale(_mean([d[i] for d in done])) for i, k in enumerate(("ttft", "decode", "e2e"))}

    wave = simulate(cost, eng, Workload(closed_loop=False, **common))
    out = {"gpus": par.gpus, "wave": means(wave)}
    last = max(wave, key=lambda d: d[2][0])  # the request that finishes last (offline e2e)
    out["wave"]["last_ttft"], out["wave"]["last_decode"] = scale(last[0]), scale(last[1])
    micro = math.ceil(inflight / par.adp / per_rank)  # micro-batches in flight, at most pp
    if micro > 1 and not closed_loop:
        # an offline batch's micro-batches enter the first stage one stage time apart (a closed loop's requests
        # come back as staggered as they finished: they do not wait again)
        first = min((d[0] for d in wave), key=lambda c: c[0])  # the first prefill, over its iterations
        iters = math.ceil(isl / max(budget, 1))
        step = (first[0] / iters, first[1] / iters * layers / par.pp, first[2] / iters * layers / par.pp)
        w = out["wave"]
        for key, k in (("ttft", (micro - 1) / 2), ("e2e", (micro - 1) / 2), ("last_ttft", micro - 1)):
            w[key] = tuple(a + k * b for a, b in zip(w[key], step))
    if closed_loop:
        m = min(2 * per_rank, MEASURED_CAP)
        out["steady"] = means(simulate(cost, eng, Workload(closed_loop=True, **common), measured=m))
        if not eng.staggered_clients:
            drifted = replace(eng, staggered_clients=True)
            out["drift"] = means(simulate(cost, drifted, Workload(closed_loop=True, **common), measured=m))
    return out


def blend(c: dict, key: str, wave_weight: float) -> tuple:
    """A closed loop at fixed ISL/OSL sits between lock-step waves (everyone finishes together and
    re-arrives together) and its steady state (the lock-step of a common start kept, or, on an engine whose
    clients drift apart, requests spread over their output); `wave_weight` (calibrated) says where."""
    if "steady" not in c:
        return c["wave"][key]
    return tuple(wave_weight * w + (1 - wave_weight) * s for w, s in zip(c["wave"][key], c["steady"][key]))


def _positive_ints(**named) -> None:
    """InputError naming the first value that is not a positive integer."""
    for name, v in named.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise InputError(f"{name.replace('_', '-')} must be a positive integer, got {v!r}")


def check_run(arch: Arch, isl, osl, precision: str) -> None:
    """A run's prompt and output lengths and weight precision; InputError naming the bad one. A request longer
    than the model's positions is refused, as the engines refuse it (vLLM's max_model_len)."""
    _positive_ints(isl=isl, osl=osl)
    if osl < 2:
        raise InputError("osl must be at least 2 (TPOT is the time between output tokens)")
    check_positions(isl + osl, arch.max_positions, "isl + osl")
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


def predict_serving(config, device, engine: str, isl: int, osl: int, *, batch: int | None = None,
                    concurrency: int | None = None, tp: int = 1, pp: int = 1, ep: int = 1, attention_dp: int = 1,
                    moe_tp: int | None = None, precision: str = "bf16", moe_precision: str = "",
                    kv_dtype: str = "", calibration: Calibration | None = None,
                    disagg: tuple | None = None, spec_tokens: int = 0, acceptance: float = 0.7,
                    models: KernelModels | None = None, scale: tuple = (1.0, 1.0)) -> ServingResult:
    """Predict one serving run. `config`: a HF config path/dict or an `Arch`; `batch` (offline
    generate, all requests at once) or `concurrency` (closed loop). MoE: experts split `ep` ways, the
    rest of the tensor-parallel group inside each expert (`moe_tp`). `disagg`: (prefill Worker, prefill
    workers, decode Worker, decode workers), overriding the single instance. `spec_tokens`: speculative
    decoding (MTP or a draft head) proposing that many tokens per step, each accepted with probability
    `acceptance` (`cost.Speculation`). `models`: the kernel and collective models (`cost.KernelModels`), the
    shipped ones when None. `scale`: factors on every prefill's and every decode step's time (a calibration by
    measured runs, `serving.measured.pooled_offset`), before end-to-end latency and throughput are composed."""
    from hybridperf.aic_kernels import unseen_arch_widen  # noqa: PLC0415  (pandas; kept out of import time)
    from hybridperf.serving.load import as_arch  # noqa: PLC0415  (reads configs; kept out of import time)

    arch = as_arch(config)
    _positive_ints(tp=tp, pp=pp, ep=ep, attention_dp=attention_dp)
    if (batch is None) == (concurrency is None):
        raise InputError("give exactly one of --batch and --concurrency")
    n = batch if batch is not None else concurrency
    check_run(arch, isl, osl, precision)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InputError(f"batch/concurrency must be a positive integer, got {n!r}")
    if n > MAX_REQUESTS:
        raise InputError(f"batch/concurrency must be at most {MAX_REQUESTS}, got {n}")
    if not spec_tokens and acceptance != Speculation.acceptance:  # a rate given for drafts that are never made
        raise InputError(f"--acceptance {acceptance} applies only with --spec-tokens > 0 (speculative decoding)")
    if not all(isinstance(f, (int, float)) and 0 < f < math.inf for f in scale):
        raise InputError(f"scale factors must be positive and finite, got {scale!r}")
    f_ttft, f_tpot = scale
    cal = calibration or Calibration.load()
    gpu = get_device(device)
    ec = cal.engine(get_engine(engine).name)
    kvb = KV_DTYPE_BYTES.get(kv_dtype or default_kv_dtype(precision))
    if kvb is None:
        raise InputError(f"kv dtype must be bf16, fp16 or fp8, got {kv_dtype!r}")
    ttft_floor = math.inf  # a TTFT the run may take instead (`_result`)
    if disagg is not None:
        if spec_tokens:
            raise InputError("speculative decoding is not modelled for disaggregated workers")
        ttft, tpot, gpus = _disagg(arch, device, engine, disagg, isl, osl, n, ec, models)
        ttft, tpot = ttft * f_ttft, tpot * f_tpot
        e2e = (ttft, tpot * (osl - 1))
        stratum = WORKERS_INFERRED if not disagg[3] else ""  # the decode batch per worker is a guess
    else:
        stratum = ""
        if moe_tp is None:
            moe_tp = max(tp * attention_dp // ep, 1)
        wk = Worker(Parallel(tp=tp, pp=pp, adp=attention_dp, moe_tp=moe_tp, moe_ep=ep), precision,
                    moe_precision, kvb, Speculation(spec_tokens, acceptance))
        c = agg_components(arch, device, engine, wk, isl, osl, n, closed_loop=concurrency is not None, models=models)
        ttft = ec.time_ms(blend(c, "ttft", ec.wave_weight), ttft=True) * f_ttft
        if "drift" in c:
            ttft_floor = ec.time_ms(blend({**c, "steady": c["drift"]}, "ttft", ec.wave_weight), ttft=True) * f_ttft
        tpot = ec.time_ms(blend(c, "decode", ec.wave_weight)) / max(osl - 1, 1) * f_tpot
        if concurrency is not None:
            e2e = (ttft, tpot * (osl - 1))
        else:  # the last request to finish: its prefill, queued behind the others', then its decode
            e2e = (ec.time_ms(c["wave"]["last_ttft"], ttft=True) * f_ttft,
                   ec.time_ms(c["wave"]["last_decode"]) * f_tpot)
        gpus = c["gpus"]
    tps = n * osl / sum(e2e) * 1e3  # closed loop: each request's e2e; offline: until the last one finishes
    return _result(ttft, tpot, e2e, tps, gpus, cal, stratum, unseen_arch_widen(gpu.kernel_arch), ttft_floor)


#: decode sequences one attention rank of a disaggregated decode worker holds when a run does not say how
#: many decode workers it used. Read off silicon_sample.csv's disagg rows: H100's and B200's rows each,
#: scored alone, come closer with 32-64 than with 256 (TPOT MAPE 42% vs 45% on H100, 57% vs 65% on B200)
DECODE_BATCH_PER_RANK = 64


def _disagg(arch, device, engine, spec, isl, osl, concurrency, ec, models=None):
    """Prefill and decode workers under a closed loop at fixed ISL/OSL: the requests stay in waves (a
    wave decodes together and finishes together), so each wave's prefills arrive at once and queue on
    the prefill ranks. TTFT is the wave's mean prefill completion plus the KV transfer; TPOT the decode
    step of a worker holding its share of the wave (its closed loop as `agg_components` schedules it: spread
    over the output on an engine whose clients drift apart), with `isl` keys already cached per request. Worker
    counts left out (None) follow from the decode batch limit and from matching the prefill throughput
    to the decode throughput."""
    pw, n_p, dw, n_d = spec
    dev = get_device(device)
    eng = get_engine(engine)
    if not n_d:
        n_d = max(1, math.ceil(concurrency / (dw.par.adp * DECODE_BATCH_PER_RANK)))
    per_rank = max(1, math.ceil(concurrency / n_d / dw.par.adp))
    d = agg_components(arch, device, engine, dw, 1, osl, per_rank * dw.par.adp, closed_loop=True, models=models)
    tpot = (ec.time_ms(blend(d, "decode", ec.wave_weight)) / max(osl - 1, 1)) + ec.gpu_scale * _decode_keys_ms(
        arch, device, engine, dw, isl, osl, per_rank, models)
    serving_tokens = eng.limits(dev)[0]
    if not n_p:
        burst = max(1, serving_tokens // isl) * pw.par.adp
        full = agg_components(arch, device, engine, pw, isl, 1, burst, closed_loop=False, models=models)
        rate = burst / ec.time_ms(full["wave"]["last_ttft"], ttft=True)  # requests per ms of one prefill worker
        n_p = max(1, math.ceil(concurrency / max(osl - 1, 1) / tpot / rate))
    per_worker = max(1, math.ceil(concurrency / n_p))
    pf = agg_components(arch, device, engine, pw, isl, 1, per_worker, closed_loop=False,
                        budget=serving_tokens, models=models)
    node = node_for(device)
    kv_total = kv_bytes_per_token(arch, Parallel(), dw.cache_bytes) * isl
    xfer = KV_TRANSFER_LATENCY_MS + kv_total / (node.inter_bw_gbs * 1e9 * min(pw.par.gpus, dw.par.gpus)) * 1e3
    ttft = ec.time_ms(pf["wave"]["ttft"], ttft=True) + xfer
    return ttft, tpot, n_p * pw.par.gpus + n_d * dw.par.gpus


def _decode_keys_ms(arch, device, engine, wk, isl, osl, per_rank, models=None):
    eng = get_engine(engine)
    cost, _ = setup_cost(arch, device, eng, wk, 1, per_rank, isl, osl, models)
    # the isl keys only, over the keys the decode phase reads at its mean step (osl / 2 a sequence): its per-sequence
    # state reads and the attention kernels' floors are in the decode phase already
    own = per_rank * osl / 2.0
    return (cost.decode_attn_ms(own + per_rank * isl, per_rank) - cost.decode_attn_ms(own, per_rank)) * wk.par.pp


def _result(ttft, tpot, e2e: tuple, tps, gpus, cal: Calibration, stratum: str, widen: float = 0.0,
            ttft_floor: float = math.inf) -> ServingResult:
    """The typed result, each latency with its 90% interval from the calibration's quantiles, `widen` (log) wider
    each side on a GPU whose architecture no serving or kernel fit saw (`aic_kernels.unseen_arch_widen`: no ROCm
    run is in silicon_sample.csv). `e2e`: its (prefill, decode) parts, whose interval is the sum of the parts'
    bounds, TTFT's and TPOT's errors taken to move together: on silicon_sample.csv's runs, held out, that covers
    e2e 89.7% (the wider of the two quantiles on the whole: 98.0%, twice as wide). `ttft_floor`: a TTFT the run
    may take instead (its loop drifted apart): the low bound is taken from the lesser of the two (held out, TTFT
    coverage 84.6 -> 89.3%, SGLang and TensorRT-LLM on B200 82 / 72 -> 93 / 87%; the median band 6.9 -> 9.4x wide)."""
    q = cal.quantiles(stratum)

    def lat(v, metric, floor=math.inf):
        lo, hi = q[metric]
        low = min(v, floor) * math.exp(min(lo, 0.0) - widen)
        return Latency(v, low, v * math.exp(max(hi, 0.0) + widen))

    parts = (lat(e2e[0], "ttft", ttft_floor), lat(e2e[1], "tpot"))
    return ServingResult(ttft=lat(ttft, "ttft", ttft_floor), tpot=lat(tpot, "tpot"),
                         e2e=Latency(*(sum(getattr(x, f) for x in parts) for f in ("ms", "lo_ms", "hi_ms"))),
                         tokens_per_s=tps, tokens_per_s_per_gpu=tps / gpus, gpus=gpus, stratum=stratum)
