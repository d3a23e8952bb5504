"""Which GPU, at which batch size? Sweep GPT-2-Large inference latency (bf16, SDPA attention, as transformers
runs it) over batch sizes on three GPUs.

    python examples/sweep_batch.py            # writes sweep_gpt2_large.csv and sweep_gpt2_large.png

Uses the shipped kernel models: no data download, no GPU. The shaded band is the 90% interval; the plot needs
matplotlib (`pip install matplotlib`), without which only the CSV is written.
"""
from pathlib import Path

import pandas as pd

from hybridperf.errors import InputError
from hybridperf.graphs import plot_latency_vs_batch, sweep

CONFIG = Path(__file__).with_name("configs") / "gpt2_large.json"
DEVICES = ("NVIDIA H100 80GB HBM3", "NVIDIA A100 80GB PCIe", "NVIDIA L4")

if __name__ == "__main__":
    df = pd.concat([sweep(CONFIG, batches=[1, 2, 4, 8, 16], seqs=[1024], mode="inf", device=d, dtype="bf16")
                    for d in DEVICES])
    df["ms_per_sequence"] = df["e2e_ms"] / df["batch"]
    print(df[["device", "batch", "e2e_ms", "lo_ms", "hi_ms", "ms_per_sequence"]].round(1).to_string(index=False))
    df.to_csv("sweep_gpt2_large.csv", index=False)
    try:
        plot_latency_vs_batch(df, "sweep_gpt2_large.png", title="GPT-2-Large inference, seq 1024 (bf16, SDPA)")
        print("wrote sweep_gpt2_large.csv and sweep_gpt2_large.png")
    except InputError as e:  # no matplotlib
        print(f"wrote sweep_gpt2_large.csv; no plot: {e}")
