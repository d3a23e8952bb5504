"""Integer columns a blank cell made float are integers again on the way out (issue 54 item 7)."""
import sys

import numpy as np
import pandas as pd

from hybridperf.cli.app import main
from hybridperf.csvio import integers_restored


def test_only_whole_float_columns_with_blanks_become_integers():
    df = pd.DataFrame({"M": [512.0, np.nan], "ms": [0.5, np.nan], "full": [2.0, 3.0], "op": ["bmm", "ln"]})
    out = integers_restored(df)
    assert str(out["M"].dtype) == "Int64" and out["M"].iloc[0] == 512 and out["M"].isna().iloc[1]
    assert out["ms"].dtype == np.float64 and out["full"].dtype == np.float64 and out["op"].equals(df["op"])
    assert df["M"].dtype == np.float64  # the input is left alone


def test_predict_kernels_writes_input_shapes_as_integers(tmp_path, monkeypatch):
    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text("OPName,B,M,N,K,H\nbmm,4,128,64,256,\nsoftmax,64,,,,1024\n")
    monkeypatch.setattr(sys, "argv", ["hybridperf", "predict-kernels", str(src), "--device", "NVIDIA L4",
                                      "--output", str(dst), "--prior-only"])
    main()
    lines = dst.read_text().splitlines()
    assert lines[1].startswith("bmm,4,128,64,256,,") and lines[2].startswith("softmax,64,,,,1024,")
