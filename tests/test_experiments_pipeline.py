"""`python -m experiments run`: steps run after the steps they read from, a step whose inputs are missing is
skipped with its reason, and a finished step's results land in results/ under their committed names."""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest

from experiments.__main__ import main
from experiments.common import RESULTS
from experiments.pipeline import STEPS, PipelineError, Step, ordered, run, select

FAKE = '''
import sys
from pathlib import Path
out = Path(sys.argv[sys.argv.index("--out") + 1])
out.mkdir(parents=True, exist_ok=True)
(out / "table.md").write_text("| a |\\n|---|\\n| " + sys.argv[sys.argv.index("--data") + 1] + " |\\n")
'''


def test_a_step_runs_after_the_step_it_reads_from_and_a_cycle_is_an_error():
    first, second = Step("uses", "m", after=("makes",)), Step("makes", "m")
    assert [s.name for s in ordered([first, second])] == ["makes", "uses"]
    with pytest.raises(PipelineError, match="cycle"):
        ordered([Step("a", "m", after=("b",)), Step("b", "m", after=("a",))])


def test_select_names_unknown_steps_and_quick_leaves_out_long_ones():
    with pytest.raises(PipelineError, match="unknown step nope; steps: .*noise_floor"):
        select(STEPS, ["nope"])
    quick = select(STEPS, quick=True)
    assert "noise_floor" in [s.name for s in quick] and "leave_one_gpu_out" not in [s.name for s in quick]
    # --only keeps the dependency order, whatever order the names come in
    assert [s.name for s in select(STEPS, ["fewshot_curve", "leave_one_gpu_out"])] == ["leave_one_gpu_out",
                                                                                       "fewshot_curve"]


def test_fake_step_runs_as_a_module_and_its_result_is_copied_under_its_committed_name(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "fake_step.py").write_text(FAKE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "pkg"))
    data, scratch, results = tmp_path / "data", tmp_path / "out", tmp_path / "results"
    step = Step("fake", "fake_step", ("--data", "{data}", "--out", "{out}"), results=(("table.md", "fake.md"),),
                datasets=("neusight",))
    (skipped,) = run([step], data, scratch, results, gpu=False, torch=False)
    assert skipped.status == "skipped" and "no neusight dataset" in skipped.detail
    assert not results.exists()
    (data / "neusight").mkdir(parents=True)
    (done,) = run([step], data, scratch, results, gpu=False, torch=False)
    assert done.status == "ok", done.detail
    assert str(data) in (results / "fake.md").read_text()


def test_a_step_whose_input_step_failed_is_skipped_with_the_reason(tmp_path):
    made = []

    def runner(cmd, log):
        made.append(cmd[2])
        if cmd[2] == "maker_ok":
            (tmp_path / "bundles").mkdir()
        return 1 if cmd[2] == "maker_fails" else 0

    def steps(maker):
        return [Step("reader", "reader", after=("maker",), reads=("bundles",)), Step("maker", maker),
                Step("on_gpu", "on_gpu", gpu=True)]

    outcomes = run(ordered(steps("maker_fails")), tmp_path, tmp_path, tmp_path / "r", gpu=False, torch=True,
                   runner=runner)
    assert [(o.step, o.status) for o in outcomes] == [("maker", "failed"), ("reader", "skipped"),
                                                      ("on_gpu", "skipped")]
    assert "bundles" in outcomes[1].detail and "maker" in outcomes[1].detail
    assert "GPU" in outcomes[2].detail and made == ["maker_fails"]
    outcomes = run(ordered(steps("maker_ok")), tmp_path, tmp_path, tmp_path / "r", gpu=False, torch=True,
                   runner=runner)
    assert [o.status for o in outcomes] == ["ok", "ok", "skipped"] and made[-2:] == ["maker_ok", "reader"]


def test_a_step_that_does_not_write_its_result_failed(tmp_path):
    step = Step("quiet", "quiet", results=(("report.md", "quiet.md"),))
    (o,) = run([step], tmp_path, tmp_path, tmp_path / "r", gpu=False, torch=False, runner=lambda cmd, log: 0)
    assert o.status == "failed" and "report.md" in o.detail


def test_registry_modules_exist_and_every_committed_result_has_one_step():
    names = [s.name for s in STEPS]
    assert len(names) == len(set(names))
    for s in STEPS:
        assert importlib.util.find_spec(s.module) is not None, s.module
        assert set(s.after) <= set(names), s.name
    written = [dst for s in STEPS for _, dst in s.results]
    assert len(written) == len(set(written))
    committed = {p.name for p in RESULTS.iterdir() if p.suffix in {".md", ".png", ".csv"}}
    assert committed == set(written), ("register a step in experiments/pipeline.py for each results/ file",
                                       sorted(committed ^ set(written)))


def test_cli_lists_the_steps_and_answers_an_unknown_one_in_one_line(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # one table row per line
    assert main(["run", "--list", "--only", "noise_floor", "--data", str(Path("/nonexistent"))]) == 0
    out = capsys.readouterr().out
    assert "noise_floor" in out and "no neusight dataset" in out
    assert main(["run", "--only", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown step nope") and len(err.strip().splitlines()) == 1


def test_every_step_module_imports():
    """A renamed or removed hybridperf name breaks a step at import; catch it here, not hours into a run."""
    for module in sorted({s.module for s in STEPS}):
        importlib.import_module(module)
