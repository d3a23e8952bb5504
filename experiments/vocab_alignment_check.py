"""Does an unaligned vocabulary cost what the prior says? GPT-2-Large with its 50,257 tokens against the
same model padded to 50,264 (a multiple of 8), in half precision, measured and predicted.

The two models differ only in the LM head's output columns (and the embedding's rows), so the measured
difference is the price of the unaligned head (`hybridperf.priors.gemm.UNALIGNED_MATRIX_SLOWDOWN`,
chosen on the H200's kernels) and the predicted difference is what the prior charges for it. Timed as
`gpu_check.py` times models (CUDA events around one pass, mean of the fastest 5 of 10 after 3 warm-ups;
random weights, eager attention).

    python experiments/vocab_alignment_check.py --out DIR          # on the GPU machine, about a minute
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_check import _config, _hf_model, _model_prediction, time_model  # noqa: E402

RUNS = [(4, 1024, "inf", "bf16"), (4, 1024, "inf", "fp16"), (1, 1024, "train", "bf16")]
VOCABS = (50257, 50264)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
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


if __name__ == "__main__":
    raise SystemExit(main())
