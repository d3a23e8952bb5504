"""A GPU the catalog does not name, given as a JSON spec, works wherever a GPU is placed in a node: the
collective prior takes the node's architecture from the spec, not by looking its name up again."""
from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from hybridperf.cli.app import app
from hybridperf.devices import get_device

REPO = Path(__file__).resolve().parents[1]


def _my_gpu(tmp_path) -> Path:
    spec = {**get_device("NVIDIA B200").to_dict(), "name": "My Blackwell", "aliases": []}
    spec["peak_tflops"] = {k: v for k, v in spec["peak_tflops"].items() if k != "fp4_tc"}
    path = tmp_path / "my_gpu.json"
    path.write_text(json.dumps(spec))
    return path


def test_collective_on_a_json_gpu_prices_like_its_catalog_twin(tmp_path):
    args = ["predict-collective", "--collective", "all_reduce", "--bytes", "1048576", "--gpus", "8", "--json",
            "--device"]
    mine = CliRunner().invoke(app, [*args, str(_my_gpu(tmp_path))])
    assert mine.exit_code == 0, mine.output
    twin = CliRunner().invoke(app, [*args, "NVIDIA B200"])
    assert json.loads(mine.stdout.splitlines()[-1]) == json.loads(twin.stdout.splitlines()[-1])


def test_serving_on_a_json_blackwell_without_its_fp4_peak(tmp_path):
    from hybridperf.serving import predict_serving

    cfg = REPO / "examples" / "configs" / "llama3_8b.json"
    kw = dict(engine="vllm", isl=256, osl=32, concurrency=4, precision="fp4")
    mine_gpu = get_device(str(_my_gpu(tmp_path)))
    mine = predict_serving(str(cfg), mine_gpu, **kw)
    twin = predict_serving(str(cfg), get_device("NVIDIA B200"), **kw)
    assert mine.tpot.ms == twin.tpot.ms and mine.ttft.ms == twin.ttft.ms  # its fp4 rate: 2x its fp8 peak
    tp2 = predict_serving(str(cfg), mine_gpu, tp=2, **kw)  # a TP all-reduce on a node built from the spec
    assert 0 < tp2.tpot.lo_ms <= tp2.tpot.ms <= tp2.tpot.hi_ms
