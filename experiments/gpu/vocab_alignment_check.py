"""Does an unaligned vocabulary cost what the prior says? GPT-2-Large with its 50,257 tokens against the
same model padded to 50,264 (a multiple of 8), in half precision, measured and predicted.

The two models differ only in the LM head's output columns (and the embedding's rows), so the measured
difference is the price of the unaligned head (`hybridperf.priors.gemm.UNALIGNED_MATRIX_SLOWDOWN`,
chosen on the H200's kernels) and the predicted difference is what the prior charges for it. Timed as
`gpu_check.py` times models (CUDA events around one pass, mean of the fastest 5 of 10 after 3 warm-ups;
random weights, eager attention).

    python -m experiments.gpu.vocab_alignment_check --out DIR          # on the GPU machine, about a minute
    python -m experiments.gpu.vocab_alignment_check --from experiments/data/measured/h100/vocab_alignment
                                                   # re-predict saved measurements with the current prior
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


from experiments.gpu.gpu_check import _config, _hf_model, _model_prediction, time_model

RUNS = [(4, 1024, "inf", "bf16"), (4, 1024, "inf", "fp16"), (1, 1024, "train", "bf16")]
VOCABS = (50257, 50264)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="where to write vocab_alignment.csv (a GPU run)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--from", dest="saved", type=Path, default=None,
                    help="a folder with a saved vocab_alignment.csv: predict its runs again, measure nothing")
    args = ap.parse_args(argv)
    if args.saved is not None:
        return repredict(args.saved / "vocab_alignment.csv")
    if args.out is None:
        ap.error("--out is needed to measure (or --from to re-predict)")
    import torch

    target = torch.cuda.get_device_name().strip()
    rows = []
    for batch, seq, mode, dtype in RUNS:
        for vocab in VOCABS:
            cfg = {**_config("gpt2_large.json"), "vocab_size": vocab}
            model = _hf_model("gpt2", cfg, mode, dtype, False, torch, args.device)
            ms = time_model(torch, model, "gpt2", batch, seq, mode, args.device)
            row = {"model": "gpt2_large", "vocab": vocab, "batch": batch, "seq": seq, "mode": mode, "dtype": dtype,
                   "recompute": False, "measured_ms": ms}
            rows.append(_model_prediction(row, cfg, target))
            print(rows[-1], flush=True)
            del model
            torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(args.out / "vocab_alignment.csv", index=False)
    return 0


def repredict(path: Path) -> int:
    """Print the saved runs of `path` with the current prior's prediction, and the head's price both ways."""
    saved = pd.read_csv(path)
    target = (path.parent / "env.txt").read_text().splitlines()[1].split(",")[0].strip()  # nvidia-smi's csv
    keys = ("model", "vocab", "batch", "seq", "mode", "dtype", "recompute", "measured_ms")
    rows = [_model_prediction({k: r[k] for k in keys}, {**_config("gpt2_large.json"), "vocab_size": int(r["vocab"])}, target)
            for r in saved.to_dict("records")]
    out = pd.DataFrame(rows)
    print(out[["vocab", "batch", "mode", "dtype", "measured_ms", "pred_ms", "err_pct"]].round(2).to_string(index=False))
    price = out.pivot_table(index=["mode", "dtype"], columns="vocab", values=["measured_ms", "pred_ms"])
    for (mode, dtype), r in price.iterrows():
        print(f"{mode} {dtype}: the unaligned head costs {-r['measured_ms'].diff().iloc[-1]:+.2f} ms measured, "
              f"{-r['pred_ms'].diff().iloc[-1]:+.2f} ms predicted")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
