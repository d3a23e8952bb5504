"""The optimizer step: multi_tensor_apply launches, streamed bytes, memory, and the composition."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import assert_one_line_error, run_cli

from hybridperf.devices import get_device
from hybridperf.errors import InputError
from hybridperf.graphs import build_graph, predict_model
from hybridperf.graphs.optimizer import (CHUNK, LARGE_ARGS, MTA_STREAM_EFFICIENCY, OPTIMIZERS, SMALL_ARGS,
                                         launch_sizes, optimizer_kernels, optimizer_spec, param_numels,
                                         uses_large_kernel_args)
from hybridperf.graphs.parallel import predict_parallel
from hybridperf.ops import op_work
from hybridperf.predictor import Predictor

GPT2 = {"model_type": "gpt2", "n_embd": 256, "n_head": 4, "n_layer": 2, "vocab_size": 1000, "n_positions": 512,
        "activation_function": "gelu_new"}


def test_one_launch_until_blocks_or_tensors_run_out():
    # 4 KB arguments, depth 1: 320 blocks of 65,536 elements, 110 tensors per launch
    assert launch_sizes([3 * CHUNK + 5], 1, large_args=False) == [3 * CHUNK + 5]
    assert launch_sizes([400 * CHUNK], 1, large_args=False) == [320 * CHUNK, 80 * CHUNK]
    assert launch_sizes([10] * 200, 1, large_args=False) == [1100, 900]
    # a tensor cut by the block limit continues in the next launch, which then holds one more tensor
    sizes = launch_sizes([319 * CHUNK, 2 * CHUNK, 7], 1, large_args=False)
    assert sizes == [320 * CHUNK, CHUNK + 7]
    # 32 KB arguments take 7x as much
    assert launch_sizes([10] * 800, 1, large_args=True) == [7700, 300]
    assert LARGE_ARGS["blocks"] == 7 * SMALL_ARGS["blocks"]


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
@pytest.mark.parametrize("large", [False, True])
def test_launches_cover_every_element_once(depth, large):
    rng = np.random.default_rng(depth)
    numels = [int(n) for n in rng.integers(1, 5_000_000, size=300)] + [0, 0]
    sizes = launch_sizes(numels, depth, large_args=large)
    assert sum(sizes) == sum(numels)
    assert max(sizes) <= (LARGE_ARGS if large else SMALL_ARGS)["blocks"] * CHUNK


def test_kernel_args_limit_by_architecture():
    assert uses_large_kernel_args("nvidia", "hopper") and uses_large_kernel_args("nvidia", "volta")
    assert not uses_large_kernel_args("nvidia", "pascal") and not uses_large_kernel_args("amd", "cdna2")


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_kernels_stream_what_the_spec_says(name):
    numels = [1000, 4096 * 300, 7, 2_000_000]
    spec = optimizer_spec(name)
    streamed = 0.0
    for k in optimizer_kernels(numels, name, "nvidia", "ampere"):
        _, nbytes = op_work(k["op"], k["B"], 0, 0, 0, k["H"])
        streamed += (float(nbytes) + k["extra_nbytes"]) * k["count"]
    params = sum(numels)
    want = sum(op.streams * (len(numels) if op.steps else params) for op in spec.ops) * 4.0
    want /= MTA_STREAM_EFFICIENCY  # the slower multi-tensor kernel is charged as more bytes
    # launches are rounded up to whole rows of 4096 elements
    assert want <= streamed <= want * 1.01 + 64 * 4096 * 4 * len(spec.ops) / MTA_STREAM_EFFICIENCY


def test_unknown_optimizer_and_inference_are_refused():
    with pytest.raises(InputError, match="unknown optimizer"):
        optimizer_spec("lion")
    with pytest.raises(InputError, match="training"):
        build_graph(GPT2, 2, 128, "inf", optimizer="adam")


def test_param_numels_counts_the_model_once():
    g = build_graph(GPT2, 2, 128, "train")
    h, V, L = 256, 1000, 2
    per_layer = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h)
    want = V * h + 512 * h + L * per_layer + 2 * h  # tied LM head: the table only
    assert sum(param_numels(g)) == want
    assert abs(g.memory().weights - want * 4 / 1e9) < 1e-12


def test_optimizer_state_in_memory():
    plain = build_graph(GPT2, 2, 128, "train").memory()
    adam = build_graph(GPT2, 2, 128, "train", optimizer="adam").memory()
    sgd = build_graph(GPT2, 2, 128, "train", optimizer="sgd").memory()
    assert sgd.total == pytest.approx(plain.total)
    assert adam.optimizer == pytest.approx(2 * plain.weights)
    assert adam.total == pytest.approx(plain.total + 2 * plain.weights)


def test_step_time_adds_to_e2e_and_scales_with_the_streams():
    dev = get_device("NVIDIA A100-SXM4-80GB")
    pred = Predictor.prior_only()
    base = predict_model(GPT2, 2, 128, "train", dev, pred, attn="eager")
    out = {}
    for name in ("sgd", "adam", "adam-fused"):
        r = predict_model(GPT2, 2, 128, "train", dev, pred, optimizer=name, attn="eager")
        d = r.to_dict()
        assert set(d) == {"e2e_ms", "lo_ms", "hi_ms", "fw_ms", "bw_ms", "opt_ms"}
        assert (d["fw_ms"], d["bw_ms"]) == (base.fw_ms, base.bw_ms)
        assert d["e2e_ms"] == pytest.approx(d["fw_ms"] + d["bw_ms"] + d["opt_ms"])
        assert d["lo_ms"] <= d["e2e_ms"] <= d["hi_ms"]
        assert "opt" in r.breakdown().columns
        out[name] = d["opt_ms"]
    assert 0 < out["sgd"] < out["adam-fused"] < out["adam"]
    assert set(base.to_dict()) == {"e2e_ms", "lo_ms", "hi_ms", "fw_ms", "bw_ms"}


def test_large_model_step_is_bandwidth_bound():
    """Adam on 2.7B parameters streams 72 bytes each: within 25% of that at the multi-tensor kernel's
    share of the spec bandwidth."""
    cfg = {"model_type": "gpt2", "n_embd": 2560, "n_head": 32, "n_layer": 32, "vocab_size": 50257,
           "n_positions": 2048, "activation_function": "gelu_new"}
    dev = get_device("NVIDIA H100 80GB HBM3")
    r = predict_model(cfg, 1, 128, "train", dev, Predictor.prior_only(), optimizer="adam", attn="eager")
    params = sum(param_numels(r.graph))
    ideal_ms = 72.0 * params / (MTA_STREAM_EFFICIENCY * dev.mem_bw_gbs * 1e9) * 1e3
    assert ideal_ms < r.opt_ms < 1.25 * ideal_ms / 0.8


def test_parallel_step_matches_one_gpu_and_shards_the_step():
    pred = Predictor.prior_only()
    single = predict_model(GPT2, 4, 128, "train", "NVIDIA A100-SXM4-80GB", pred, optimizer="adam", attn="eager")
    one = predict_parallel(GPT2, 4, 128, "train", "DGX-A100", predictor=pred, optimizer="adam")
    assert one.result["opt_ms"] == single.opt_ms
    assert one.ms == pytest.approx(single.ms)
    assert one.memory.total == pytest.approx(single.graph.memory().total)
    # a step wide enough that its optimizer kernels outlast the host's dispatch: sharded, they shrink
    wide = {**GPT2, "n_embd": 1024, "n_head": 16}
    wide_one = predict_model(wide, 4, 128, "train", "NVIDIA A100-SXM4-80GB", pred, optimizer="adam", attn="eager")
    tp2 = predict_parallel(wide, 4, 128, "train", "DGX-A100", tp=2, predictor=pred, optimizer="adam")
    assert tp2.result["opt_ms"] < wide_one.opt_ms
    pp2 = predict_parallel(wide, 4, 128, "train", "DGX-A100", pp=2, predictor=pred, optimizer="adam")
    assert pp2.result["opt_ms"] < wide_one.opt_ms
    assert pp2.ms == pytest.approx(pp2.result["fw_ms"] + pp2.result["bw_ms"] + pp2.result["opt_ms"])
    assert "optimizer step" in set(pp2.components()["component"])


def test_cli_optimizer(monkeypatch, capsys, tmp_path):
    from typer.testing import CliRunner

    from hybridperf.cli.app import app

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(GPT2))
    base = ["predict-model", "--config", str(cfg), "--batch", "2", "--seq", "128", "--device", "A100-SXM", "--json",
            "--prior-only"]
    r = CliRunner().invoke(app, [*base, "--mode", "train", "--optimizer", "adamw", "--breakdown"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["opt_ms"] > 0
    assert out["e2e_ms"] == pytest.approx(out["fw_ms"] + out["bw_ms"] + out["opt_ms"], abs=1e-3)
    for bad, msg in ((["--mode", "inf", "--optimizer", "adam"], "--mode train"),
                     (["--mode", "train", "--optimizer", "lion"], "unknown optimizer")):
        code, err = run_cli(monkeypatch, capsys, [*base, *bad])
        assert_one_line_error(code, err)
        assert msg in err


def test_recorded_torch_ops_match_the_spec():
    """The foreach ops torch.optim dispatches for one step (step >= 2) are the spec's, in order."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._schema.name.split("::")[-1]
            if name.startswith(("_foreach_", "_fused_")):
                first = args[0]
                self.ops.append((name, all(t.dim() == 0 for t in first)))
            return func(*args, **(kwargs or {}))

    makers = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, foreach=True),
              "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True),
              "adam": lambda p: torch.optim.Adam(p, foreach=True),
              "adamw": lambda p: torch.optim.AdamW(p, foreach=True),
              "adam-fused": lambda p: torch.optim.Adam(p, fused=True)}
    torch.manual_seed(0)
    for name, make in makers.items():
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
        opt = make(model.parameters())
        for _ in range(2):
            model(torch.randn(3, 8)).sum().backward()
            rec = Record()
            with rec:
                opt.step()
            opt.zero_grad()
        spec = optimizer_spec(name)
        # non-fused optimizers count steps on the host (no kernel on a GPU): drop that op
        recorded = [n for n, on_steps in rec.ops if not on_steps or any(op.steps for op in spec.ops)]
        assert recorded == [op.aten for op in spec.ops], name
