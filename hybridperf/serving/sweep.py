"""Which GPU, TP and concurrency meet an SLA at the best tokens/s per GPU: a grid of `predict_serving`
calls, in-process."""
from __future__ import annotations

from dataclasses import dataclass

from hybridperf.errors import HybridperfError
from hybridperf.serving.api import predict_serving


@dataclass(frozen=True)
class SweepPoint:
    device: str
    tp: int
    concurrency: int
    ttft_ms: float
    tpot_ms: float
    ttft_hi_ms: float
    tpot_hi_ms: float
    tokens_per_s_per_gpu: float
    meets_sla: bool
    reason: str = ""


def sweep(config, devices, engine: str, isl: int, osl: int, tps=(1, 2, 4, 8), concurrencies=(1, 4, 16, 64, 256),
          precision: str = "bf16", ttft_sla_ms: float = float("inf"), tpot_sla_ms: float = float("inf"),
          conservative: bool = True, **kw) -> list[SweepPoint]:
    """Every (device, tp, concurrency); a point meets the SLA when its TTFT and TPOT (their 95% bounds when
    `conservative`) are within the limits. Configurations that do not fit carry their reason."""
    out = []
    for dev in devices:
        for tp in tps:
            for c in concurrencies:
                try:
                    r = predict_serving(config, dev, engine, isl, osl, concurrency=c, tp=tp, precision=precision, **kw)
                except HybridperfError as e:
                    out.append(SweepPoint(str(dev), tp, c, *(float("nan"),) * 5, False, str(e)))
                    continue
                t = r.ttft.hi_ms if conservative else r.ttft.ms
                d = r.tpot.hi_ms if conservative else r.tpot.ms
                out.append(SweepPoint(str(dev), tp, c, r.ttft.ms, r.tpot.ms, r.ttft.hi_ms, r.tpot.hi_ms,
                                      r.tokens_per_s_per_gpu, t <= ttft_sla_ms and d <= tpot_sla_ms))
    return out


def best(points: list[SweepPoint]) -> SweepPoint | None:
    """The SLA-meeting point with the most tokens/s per GPU."""
    ok = [p for p in points if p.meets_sla]
    return max(ok, key=lambda p: p.tokens_per_s_per_gpu) if ok else None


def plot(points: list[SweepPoint], path, title: str = "") -> None:
    """Tokens/s per GPU against TPOT, one line per (device, tp); SLA-meeting points filled."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig.savefig(path, dpi=110)
    plt.close(fig)
