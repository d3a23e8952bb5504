"""The few numbers serving reads off measured runs, with where they came from.

Per engine: scales on the priors' GPU time (kernels below roofline) before and after the first token,
the launch/host time per layer of an eager and of a CUDA-graph iteration, a per-request constant in TTFT
(HTTP, tokenizer, detokenizer, first scheduler pass) and how close a closed loop stays to lock-step waves
(`api.blend`); per metric: the 5% and 95% quantiles of log(measured / predicted), which make the central
90% interval, with quantiles of their own for a stratum of runs that spreads differently (`STRATA`).
`experiments/serving/serving_silicon.py` fits them on some systems' rows of aiconfigurator's
silicon_sample.csv and writes `calibration.json` for the CLI: engine constants from all systems, interval
quantiles from the leave-one-system-out residuals (the spread on a GPU the fit has not seen); its held-out
scores fit on every system but the one scored and pass that `Calibration` explicitly.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hybridperf.errors import ModelBundleError

DEFAULT_PATH = Path(__file__).with_name("calibration.json")
#: interval strata with quantiles of their own: a disaggregated run whose worker counts were not given (the
#: decode batch per worker, and with it TPOT, is a guess; silicon_sample.csv's rows so are 2-3x as spread
#: in TPOT as the rest)
WORKERS_INFERRED = "disagg_workers_inferred"
STRATA = (WORKERS_INFERRED,)


@dataclass(frozen=True)
class EngineCalibration:
    gpu_scale: float = 1.0  # decode phase (memory-bound kernels)
    eager_ms: float = 0.0
    graph_ms: float = 0.0
    ttft_ms: float = 0.0
    wave_weight: float = 0.5
    prefill_scale: float = 1.0  # up to the first token (compute-bound kernels)

    def time_ms(self, comps: tuple, ttft: bool = False) -> float:
        """Calibrated ms of (gpu_ms, eager layer launches, graph layer launches); `ttft`: a time to first
        token (prefill scale and the per-request constant)."""
        gpu, eager, graph = comps
        scale = self.prefill_scale if ttft else self.gpu_scale
        return scale * gpu + self.eager_ms * eager + self.graph_ms * graph + (self.ttft_ms if ttft else 0)


@dataclass(frozen=True)
class Calibration:
    engines: dict = field(default_factory=dict)  # engine name -> EngineCalibration
    # metric ("ttft", "tpot") -> (q05, q95) of log(measured / predicted)
    log_quantiles: dict = field(default_factory=lambda: {"ttft": (-0.5, 0.5), "tpot": (-0.3, 0.3)})
    provenance: str = "uncalibrated physics"
    stratum_quantiles: dict = field(default_factory=dict)  # stratum of STRATA -> its own log_quantiles

    def engine(self, name: str) -> EngineCalibration:
        return self.engines.get(name, EngineCalibration())

    def quantiles(self, stratum: str = "") -> dict:
        """(q05, q95) per metric of runs of `stratum` ("" or one without quantiles of its own: all runs)."""
        return self.stratum_quantiles.get(stratum, self.log_quantiles)

    def to_json(self) -> dict:
        return {"engines": {k: asdict(v) for k, v in self.engines.items()}, "log_quantiles": _lists(self.log_quantiles),
                "stratum_quantiles": {k: _lists(v) for k, v in self.stratum_quantiles.items()},
                "provenance": self.provenance}

    @classmethod
    def from_json(cls, d: dict) -> "Calibration":
        strata = d.get("stratum_quantiles", {})
        unknown = set(strata) - set(STRATA)
        if unknown:
            raise KeyError(f"unknown interval strata {sorted(unknown)}")
        for k, v in strata.items():
            if set(v) != set(d["log_quantiles"]):
                raise KeyError(f"interval stratum {k} has quantiles for {sorted(v)}, not {sorted(d['log_quantiles'])}")
        return cls(engines={k: EngineCalibration(**v) for k, v in d["engines"].items()},
                   log_quantiles=_tuples(d["log_quantiles"]), provenance=d["provenance"],
                   stratum_quantiles={k: _tuples(v) for k, v in strata.items()})

    @classmethod
    def load(cls, path: str | Path = DEFAULT_PATH) -> "Calibration":
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ModelBundleError(f"serving calibration {path} unreadable: {e}") from None

    def save(self, path: str | Path = DEFAULT_PATH) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")


def _lists(q: dict) -> dict:
    return {k: list(v) for k, v in q.items()}


def _tuples(q: dict) -> dict:
    return {k: tuple(v) for k, v in q.items()}
