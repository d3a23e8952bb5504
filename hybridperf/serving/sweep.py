"""Which GPU, TP and concurrency meet an SLA at the best tokens/s per GPU: a grid of `predict_serving`
calls, in-process or one Ray task per point (`executor="ray"`, the `ray` extra) when the grid outgrows
one machine."""
from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass

from hybridperf.devices import find_node, get_device
from hybridperf.errors import HybridperfError, InputError
from hybridperf.serving.api import check_run, predict_serving
from hybridperf.serving.engines import get_engine
from hybridperf.serving.load import as_arch

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class SweepPoint:
    device: str
    tp: int
    concurrency: int
    ttft_ms: float
    tpot_ms: float
    ttft_lo_ms: float
    ttft_hi_ms: float
    tpot_lo_ms: float
    tpot_hi_ms: float
    tokens_per_s_per_gpu: float
    meets_sla: bool
    reason: str = ""


def sweep(config, devices, engine: str, isl: int, osl: int, tps=(1, 2, 4, 8), concurrencies=(1, 4, 16, 64, 256),
          precision: str = "bf16", ttft_sla_ms: float = float("inf"), tpot_sla_ms: float = float("inf"),
          conservative: bool = True, executor: str = "local", **kw) -> list[SweepPoint]:
    """Every (device, tp, concurrency); a point meets the SLA when its TTFT and TPOT (their 95% bounds when
    `conservative`) are within the limits. What the whole grid shares (model, devices, engine, lengths,
    precision, limits) is checked first, so a bad argument is one error; a configuration that does not fit
    carries its reason. `executor`: "local" (this process) or "ray" (the cluster `RAY_ADDRESS` names,
    else a Ray started here; its nodes need hybridperf installed, the model and devices travel parsed)."""
    if executor not in EXECUTORS:
        raise InputError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    arch = as_arch(config)
    get_engine(engine)
    check_run(arch, isl, osl, precision)
    for name, v in (("TTFT", ttft_sla_ms), ("TPOT", tpot_sla_ms)):
        if not (isinstance(v, (int, float)) and v > 0):  # NaN fails too
            raise InputError(f"the {name} limit (--{name.lower()}-sla-ms) must be a positive number of ms, got {v!r}")
    specs = [(str(dev), _placed(dev)) for dev in devices]
    if not specs:
        raise InputError("no device to sweep")
    grid = [(name, spec, int(tp), int(c)) for name, spec in specs for tp in tps for c in concurrencies]
    args = dict(arch=arch, engine=engine, isl=isl, osl=osl, precision=precision, ttft_sla_ms=ttft_sla_ms,
                tpot_sla_ms=tpot_sla_ms, conservative=conservative, kw=kw)
    return _on_ray(grid, args) if executor == "ray" else [_point(point, **args) for point in grid]


def _placed(device):
    """What a grid point runs on: a catalog node's name as given (its fabric: `api.node_for`), else the parsed GPU
    (a JSON spec travels to Ray workers parsed)."""
    gpu = get_device(device)  # one error for an unknown name, before the grid
    return str(device) if find_node(str(device)) is not None else gpu


def _point(point: tuple, arch, engine, isl, osl, precision, ttft_sla_ms, tpot_sla_ms, conservative, kw) -> SweepPoint:
    name, spec, tp, c = point
    try:
        r = predict_serving(arch, spec, engine, isl, osl, concurrency=c, tp=tp, precision=precision, **kw)
    except HybridperfError as e:
        return SweepPoint(name, tp, c, *(math.nan,) * 7, False, str(e))
    t = r.ttft.hi_ms if conservative else r.ttft.ms
    d = r.tpot.hi_ms if conservative else r.tpot.ms
    return SweepPoint(name, tp, c, r.ttft.ms, r.tpot.ms, r.ttft.lo_ms, r.ttft.hi_ms, r.tpot.lo_ms, r.tpot.hi_ms,
                      r.tokens_per_s_per_gpu, t <= ttft_sla_ms and d <= tpot_sla_ms)


def _on_ray(grid: list, args: dict) -> list[SweepPoint]:
    """One Ray task per grid point, results in grid order; a Ray started here is shut down after."""
    try:
        import ray  # noqa: PLC0415  (optional extra)
    except ImportError:
        raise InputError("the ray executor needs Ray: pip install 'hybridperf[ray]'") from None
    started = not ray.is_initialized()
    if started:
        ray.init(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        task = ray.remote(_point)
        return ray.get([task.remote(point, **args) for point in grid])
    finally:
        if started:
            ray.shutdown()


def why_none_fit(points: list[SweepPoint]) -> str:
    """The most common reason the grid's configurations did not fit, for an error message."""
    reasons = Counter(p.reason for p in points if p.reason)
    if not reasons:
        return ""
    reason, n = reasons.most_common(1)[0]
    return f"{n} of {len(points)} points: {reason}"


def best(points: list[SweepPoint]) -> SweepPoint | None:
    """The SLA-meeting point with the most tokens/s per GPU."""
    ok = [p for p in points if p.meets_sla]
    return max(ok, key=lambda p: p.tokens_per_s_per_gpu) if ok else None


def plot(points: list[SweepPoint], path, title: str = "") -> None:
    """Tokens/s per GPU against TPOT, one line per (device, tp); SLA-meeting points filled."""
    from hybridperf.graphs.plot import pyplot, save_figure

    plt = pyplot(headless=True)
    fig, ax = plt.subplots(figsize=(7, 5))
    groups: dict = {}
    for p in points:
        if not p.reason:
            groups.setdefault((p.device, p.tp), []).append(p)
    for (dev, tp), ps in sorted(groups.items()):
        ps = sorted(ps, key=lambda p: p.concurrency)
        line, = ax.plot([p.tpot_ms for p in ps], [p.tokens_per_s_per_gpu for p in ps], "-", label=f"{dev} tp{tp}")
        for p in ps:
            ax.plot(p.tpot_ms, p.tokens_per_s_per_gpu, "o", color=line.get_color(),
                    fillstyle="full" if p.meets_sla else "none")
    ax.set(xscale="log", xlabel="TPOT (ms)", ylabel="output tokens/s per GPU",
           title=title or "serving sweep (filled: meets SLA)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
