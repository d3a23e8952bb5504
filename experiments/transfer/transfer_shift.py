"""Few-shot transfer when the measured kernels come from another shape distribution than the scored ones.

`fewshot_curve.py` calibrates on kernels of a GPU's test table and scores the rest of that table. A user's
measured kernels may instead come from another list. Here, leave-one-GPU-out over NeuSight's five GPUs
(the per-fold bundles of `leave_one_gpu_out.py --save-bundles`), the k calibration kernels are drawn at
random from the held-out GPU's *collect* files (NeuSight's training shapes: median prior 0.04 ms,
against 0.7 ms in the test table, many launch-bound) and the predictor is scored on its whole *test*
table. The two files of one GPU were also measured in different sessions: the P4's collect-file
linears run up to 3.4x slower than its test-table ones (`results/noise_floor.md`, RESULTS.md section 2),
which no transfer can tell from a property of the GPU.

    python -m experiments.transfer.transfer_shift      # ~1 min; the bundles of leave_one_gpu_out.py --save-bundles
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from experiments.common import REPO, add_data_argument, add_out_argument

from hybridperf.datasets.neusight import load_collect, load_test, neusight_root  # noqa: E402
from hybridperf.predictor import Predictor  # noqa: E402
from hybridperf.priors.constants import fitted_constants  # noqa: E402
from hybridperf.transfer import adapt_predictor  # noqa: E402
from experiments.transfer.measured_transfer import class_scores

KS = (0, 4, 16, 64)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_argument(ap)
    ap.add_argument("--bundles", default=str(REPO / "experiments" / "out" / "logo_bundles"))
    add_out_argument(ap, "transfer_shift")
    ap.add_argument("--draws", type=int, default=5)
    args = ap.parse_args(argv)
    root = neusight_root(args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    test_all = load_test(root)
    rows = []
    for bdir in sorted(Path(args.bundles).iterdir()):
        device = bdir.name.replace("_", " ")
        if not (bdir / "kernels").exists():
            continue
        collect = load_collect(root, devices=[device])
        test = test_all[test_all["device"] == device].reset_index(drop=True)
        zero = Predictor.load(bdir / "kernels").with_constants(fitted_constants(device))
        rows += class_scores(zero, device, test, device=device, k=0, draw=0)
        for k in KS[1:]:
            for draw in range(args.draws):
                calib = collect.sample(n=k, random_state=draw).reset_index(drop=True)
                rows += class_scores(adapt_predictor(zero, calib, device), device, test, device=device, k=k,
                                    draw=draw)
        print(f"{device}: done", flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(out / "transfer_shift.csv", index=False)
    by_class = df.groupby(["k", "op_class"])["mape"].mean().unstack()
    by_gpu = df[df["op_class"] == "all"].groupby(["device", "k"])["mape"].mean().unstack()
    cov = df[df["op_class"] == "all"].groupby("k")["coverage_pct"].mean()
    lines = ["# Transfer from another shape distribution (NeuSight collect files -> test tables)", "",
             f"k kernels drawn at random from the held-out GPU's collect files ({args.draws} draws), the whole test "
             "table scored; every GPU held out of its bundle. Method: `experiments/transfer/transfer_shift.py`.", "",
             "MAPE %, mean over the five GPUs:", "", by_class.round(1).to_markdown(), "",
             "MAPE % per held-out GPU (all op classes):", "", by_gpu.round(1).to_markdown(), "",
             "90% coverage %, all op classes:", "", cov.round(1).rename("coverage %").to_frame().to_markdown(), ""]
    (out / "transfer_shift.md").write_text("\n".join(lines))
    print((out / "transfer_shift.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
