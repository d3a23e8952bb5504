"""Which GPU, TP and concurrency serve Llama-3.1-70B (fp8, vLLM, 1024 in / 256 out) within TTFT <= 1 s and
TPOT <= 30 ms (upper ends of the 90% intervals) at the most tokens/s per GPU. Writes
experiments/results/serving_sweep.{md,png}.

    python -m experiments.serving.serving_sweep
"""
from __future__ import annotations

import time

from experiments.common import DATA, RESULTS
from hybridperf.serving.sweep import best, plot, sweep

CONFIG = DATA / "aiconfigurator/model_configs/meta-llama--Meta-Llama-3.1-70B_config.json"
DEVICES = ("A100-SXM4-80GB", "h100_sxm", "b200_sxm")


def main() -> None:
    import argparse

    from pathlib import Path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS), help="folder for serving_sweep.md/.png (default results/)")
    OUT = Path(ap.parse_args().out) / "serving_sweep"
    t0 = time.time()
    pts = sweep(CONFIG, DEVICES, "vllm", 1024, 256, tps=(1, 2, 4, 8), concurrencies=(1, 8, 32, 128, 512),
                precision="fp8", ttft_sla_ms=1000, tpot_sla_ms=30)
    dt = time.time() - t0
    b = best(pts)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    plot(pts, OUT.with_suffix(".png"), "Llama-3.1-70B fp8, vLLM, 1024/256 (filled: TTFT<=1 s, TPOT<=30 ms)")
    lines = ["# Serving sweep: GPU, TP and concurrency for an SLA", "",
             "Reproduce: `python -m experiments.serving.serving_sweep` (predictions only, no measurement; "
             "the SLA is checked on the upper ends of the 90% intervals).", "",
             f"{len(pts)} points in {dt:.1f} s. Best: {b.device} tp{b.tp} at concurrency {b.concurrency}: "
             f"{b.tokens_per_s_per_gpu:.0f} tokens/s per GPU, TTFT {b.ttft_ms:.0f} ms, TPOT {b.tpot_ms:.1f} ms."
             if b else f"{len(pts)} points in {dt:.1f} s; none meets the SLA.", "",
             "| device | tp | concurrency | TTFT ms | TPOT ms | tokens/s/GPU | meets SLA | reason |",
             "|---|---|---|---|---|---|---|---|"]
    for p in pts:
        lines.append(f"| {p.device} | {p.tp} | {p.concurrency} | {p.ttft_ms:.0f} | {p.tpot_ms:.1f} | "
                     f"{p.tokens_per_s_per_gpu:.0f} | {'yes' if p.meets_sla else 'no'} | {p.reason[:60]} |")
    lines += ["", "![sweep](serving_sweep.png)"]
    OUT.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:5]))


if __name__ == "__main__":
    main()
