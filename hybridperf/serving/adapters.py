"""hybridperf as the forward-time model inside real schedulers' simulators.

Both simulators run the engine's own scheduler with the GPU mocked out and ask a pluggable predictor how
long each scheduled batch takes:

- SGLang's simulator (`tools/sglang-simulator`, hisim): `InferTimePredictor.predict_infer_time(batch)`
  returns seconds; `batch.reqs` holds requests with `extend_length` (new tokens this pass; older
  versions call it `input_length`) and `past_kv_length` (tokens already cached), `batch.is_decode()`
  says whether it is a decode pass.
- TensorRT-LLM's simulation mode (`trtllm-bench --sim`, `tensorrt_llm.llmapi.sim_config`): an
  `InferTimePredictor.predict(batch)` over a `SimBatch` of `context_requests` (a chunk of
  `context_chunk_size` new tokens at `context_current_position`) and `generation_requests` (one token
  each against `past_kv_length` cached ones); returns seconds.

The attribute names are read leniently (the alternatives above), so fake batch objects and either
simulator's real ones work; neither package is imported.
"""
from __future__ import annotations

from hybridperf.devices import get_device
from hybridperf.serving.api import Worker, setup_cost
from hybridperf.serving.calibration import Calibration
from hybridperf.serving.cost import Parallel
from hybridperf.serving.engines import get_engine
from hybridperf.serving.load import as_arch


def _attr(obj, *names, default=0):
    for n in names:
        v = getattr(obj, n, None)
        if v is not None:
            return v() if callable(v) else v
    return default


class IterationTimer:
    """Calibrated time (ms) of one engine iteration on one GPU: prefill chunks and decoding sequences."""

    def __init__(self, config, device, engine: str, worker: Worker | None = None,
                 calibration: Calibration | None = None, max_tokens: int = 16384):
        self.arch = as_arch(config)
        self.device = get_device(device)
        self.engine = get_engine(engine)
        self.worker = worker or Worker(Parallel())
        self.cost, _ = setup_cost(self.arch, device, self.engine, self.worker, max_tokens, 1024, 1, 1)
        self.cal = (calibration or Calibration.load()).engine(self.engine.name)

    def iteration_ms(self, prefills=(), decode_kv=()) -> float:
        """`prefills`: (new tokens, cached prefix) per prefilling request; `decode_kv`: cached tokens per
        decoding sequence."""
        c, pp = self.cost, self.worker.par.pp
        n_dec = len(decode_kv)
        chunks = sum(int(n) for n, _ in prefills)
        gpu = c.tokens_ms(chunks + n_dec) + c.sample_ms(max(len(prefills) + n_dec, 1))
        gpu += sum(c.prefill_attn_ms(int(n), int(p)) for n, p in prefills if n > 0)
        gpu += c.prefill_linear_ms([int(n) for n, _ in prefills if n > 0])
        if n_dec:
            gpu += c.decode_attn_ms(float(sum(decode_kv)), n_dec)
        graph = not prefills and n_dec <= self.engine.graph_batch(self.device, self.worker.par.tp)
        layers = self.arch.layers * self.arch.sublayer_share
        comps = (gpu * pp, 0.0 if graph else layers, layers if graph else 0.0)
        return self.cal.time_ms(comps)


class SGLangTimePredictor:
    """SGLang simulator predictor: `predict_infer_time(batch)` in seconds."""

    def __init__(self, timer: IterationTimer):
        self.timer = timer

    def predict_infer_time(self, batch) -> float:
        reqs = list(_attr(batch, "reqs", default=[]) or [])
        if not reqs:
            return 0.0
        decode = bool(_attr(batch, "is_decode", default=False))
        if decode:
            kv = [int(_attr(r, "past_kv_length", "seq_len")) for r in reqs]
            return self.timer.iteration_ms(decode_kv=kv) / 1e3
        pre = [(int(_attr(r, "extend_length", "input_length", default=1)), int(_attr(r, "past_kv_length")))
               for r in reqs]
        return self.timer.iteration_ms(prefills=pre) / 1e3


class TrtllmTimePredictor:
    """TensorRT-LLM simulation-mode predictor: `predict(SimBatch)` in seconds."""

    def __init__(self, timer: IterationTimer):
        self.timer = timer

    def predict(self, batch) -> float:
        ctx = list(_attr(batch, "context_requests", default=[]) or [])
        gen = list(_attr(batch, "generation_requests", default=[]) or [])
        pre = [(int(_attr(r, "context_chunk_size", "num_context_tokens", "input_length", default=1)),
                int(_attr(r, "context_current_position", "past_kv_length"))) for r in ctx]
        kv = [int(_attr(r, "past_kv_length", "seq_len", "num_tokens")) for r in gen]
        if not pre and not kv:
            return 0.0
        return self.timer.iteration_ms(prefills=pre, decode_kv=kv) / 1e3
