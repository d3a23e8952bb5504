"""Few-shot transfer of the collective model: measured sizes correct the prediction by size
(`transfer.collectives`, `predict-collective --calibration`)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from test_bad_inputs import cli

from hybridperf.errors import InputError
from hybridperf.transfer.collectives import correction, log_ratios, measured_rows


def test_the_error_is_interpolated_in_log_size_and_held_flat_beyond():
    sizes, ratios = log_ratios([1024, 4096, 4096, 1 << 20], [2.0, 4.0, 8.0, 1.0], [1.0, 2.0, 2.0, 1.0])
    assert sizes.tolist() == [10, 12, 20]
    assert ratios == pytest.approx([math.log(2), math.log(np.sqrt(2 * 4)), 0.0])  # 4096: median of log 2 and log 4
    f = correction([512, 2048, 1 << 30], sizes, ratios)
    assert f[0] == pytest.approx(2.0) and f[2] == pytest.approx(1.0)  # flat beyond the measured sizes
    assert f[1] == pytest.approx(np.exp((math.log(2) + math.log(np.sqrt(8))) / 2))  # half-way in log2 size
    assert correction([1, 2], np.array([]), np.array([])).tolist() == [1.0, 1.0]
    with pytest.raises(InputError, match="positive"):
        log_ratios([1024], [0.0], [1.0])


def test_measured_rows_match_collective_and_shape():
    df = pd.DataFrame({"collective": ["allreduce", "all_reduce", "all_gather", "all_reduce"],
                       "bytes": [1024, 2048, 1024, 1024], "gpus": [8, 8, 8, 4], "gpus_per_node": [8, None, 8, 4],
                       "latency_ms": [0.01, 0.02, 0.01, 0.01]})
    assert measured_rows(df, "all_reduce", 8, 8).index.tolist() == [0, 1]
    node_size = df.assign(gpus_per_node=[8, None, 8, 8])  # the 4-rank row written with its node's size
    assert measured_rows(node_size, "all_reduce", 4, 4).index.tolist() == [3]
    with pytest.raises(InputError, match="latency_ms"):
        measured_rows(df.drop(columns="latency_ms"), "all_reduce", 8, 8)


def test_cli_calibrates_at_and_between_measured_sizes(tmp_path, monkeypatch, capsys):
    def predict(*extra):
        args = ["predict-collective", "--collective", "all_reduce", "--bytes", "4MiB", "--gpus", 8, "--device",
                "h100_sxm", "--json", *extra]
        code, out, err = cli(monkeypatch, capsys, args)
        assert code in (0, None), err
        return json.loads(out.strip().splitlines()[-1]), err

    plain, _ = predict()
    measured = tmp_path / "nccl.csv"
    pd.DataFrame({"collective": ["all_reduce"], "bytes": [4 * 2**20], "gpus": [8],
                  "latency_ms": [2 * plain["ms"]]}).to_csv(measured, index=False)
    fixed, err = predict("--calibration", measured)
    assert fixed["ms"] == pytest.approx(2 * plain["ms"], rel=1e-3)
    assert fixed["hi_ms"] / fixed["ms"] == pytest.approx(plain["hi_ms"] / plain["ms"], rel=1e-3)
    assert "calibrated by 1 measured size" in err


#: (measured CSV, words of the one-line error)
BAD_TABLES = [
    ("collective,bytes,gpus,latency_ms\nall_reduce,lots,8,0.1\n", "column bytes"),
    ("collective,bytes,gpus,latency_ms\nall_reduce,1024,8,fast\n", "latency_ms must be a number"),
    ("collective,bytes,gpus\nall_reduce,1024,8\n", "lacks column(s) latency_ms"),
    ("collective,bytes,gpus,gpus_per_node,latency_ms\nall_reduce,1024,8,eight,0.1\n", "column gpus_per_node"),
    ("collective,bytes,gpus,latency_ms\nbroadcast,1024,8,0.1\n", "column collective"),
    ("collective,bytes,gpus,latency_ms\nall_reduce,1024,8,1e300\n", "latency_ms in (0"),
    # a time in seconds or microseconds, not ms: no fabric makes an 8-GPU all-reduce take under a picosecond
    ("collective,bytes,gpus,latency_ms\nall_reduce,1048576,8,1e-9\n", "are the times in ms"),
    ("collective,bytes,gpus,latency_ms\nall_reduce,1048576,8,1e9\n", "over 100x from the model"),
]


@pytest.mark.parametrize("table,match", BAD_TABLES)
def test_cli_refuses_a_measured_table_it_cannot_read(table, match, tmp_path, monkeypatch, capsys):
    from test_bad_inputs import refused

    bad = tmp_path / "bad.csv"
    bad.write_text(table)
    refused(monkeypatch, capsys, ["predict-collective", "--collective", "all_reduce", "--bytes", "4MiB", "--gpus", 8,
                                  "--device", "h100_sxm", "--calibration", bad], match)


def test_cli_refuses_calibrating_an_engines_all_reduce(tmp_path, monkeypatch, capsys):
    from test_bad_inputs import refused

    good = tmp_path / "nccl.csv"
    good.write_text("collective,bytes,gpus,latency_ms\nall_reduce,1024,8,0.1\n")
    refused(monkeypatch, capsys, ["predict-collective", "--collective", "all_reduce", "--bytes", "4MiB", "--gpus", 8,
                                  "--device", "h100_sxm", "--calibration", good, "--impl", "vllm", "--timing", "graph"],
            "NCCL measurements")


def test_measured_rows_on_nvl72_match_the_ranks_per_host_as_written(tmp_path, monkeypatch, capsys):
    measured = tmp_path / "nvl72.csv"
    measured.write_text("collective,bytes,gpus,gpus_per_node,latency_ms\nall_reduce,4194304,16,4,0.2\n")
    code, out, err = cli(monkeypatch, capsys, ["predict-collective", "--collective", "all_reduce", "--bytes", "4MiB",
                                               "--gpus", 16, "--gpus-per-node", 4, "--device", "gb200_sxm",
                                               "--calibration", measured, "--json"])
    assert code in (0, None), err
    assert "calibrated by 1 measured size" in err
    assert json.loads(out.strip().splitlines()[-1])["ms"] == pytest.approx(0.2, rel=1e-3)
