"""The experiments as one pipeline: each script is a step that declares what it needs (datasets, another
step's output, a GPU, torch), roughly how long it runs on 2 CPU cores, and which of its files are the
committed results. `python -m experiments run` runs the steps in dependency order, each as
`python -m <module>` writing to experiments/out/<step>, and copies its results into experiments/results/
under the names RESULTS.md cites, so `git diff experiments/results` shows what a change moved."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from experiments.common import MEASURED, OUT, REPO, RESULTS


class PipelineError(ValueError):
    """A registry or a request the pipeline cannot run (an unknown step, a dependency cycle)."""


@dataclass(frozen=True)
class Step:
    """One experiment script and what running it takes. `args` may hold `{data}` (the datasets folder),
    `{out}` (this step's folder under experiments/out) and `{scratch}` (experiments/out itself)."""
    name: str
    module: str
    args: tuple[str, ...] = ()
    #: (file under {out}, its name in experiments/results/)
    results: tuple[tuple[str, str], ...] = ()
    #: folders below --data that must exist
    datasets: tuple[str, ...] = ()
    #: steps whose output this one reads, and that output's paths relative to experiments/out
    after: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    gpu: bool = False
    torch: bool = False
    minutes: float = 1.0

    @property
    def needs(self) -> str:
        """What the step needs, in words (for `--list`)."""
        parts = [f"{d} data" for d in self.datasets] + [f"{r} ({', '.join(self.after)})" for r in self.reads]
        parts += ["a GPU"] * self.gpu + ["torch + transformers"] * self.torch
        return ", ".join(parts) or "-"


#: steps longer than this many minutes (on 2 CPU cores) are left out by --quick
QUICK_MINUTES = 5.0
_H200 = str(MEASURED / "h200")


def _k(name, script, *args, **kw) -> Step:
    return Step(name, f"experiments.kernels.{script}", args, **kw)


def _t(name, script, *args, **kw) -> Step:
    return Step(name, f"experiments.transfer.{script}", args, **kw)


def _m(name, script, *args, **kw) -> Step:
    return Step(name, f"experiments.models.{script}", args, **kw)


def _g(name, script, *args, **kw) -> Step:
    return Step(name, f"experiments.gpu.{script}", args, **kw)


_NS, _VID = ("neusight",), ("vidur",)
_LOGO = dict(after=("leave_one_gpu_out",), reads=("logo_bundles",))
_VIDUR_LOGO = dict(after=("leave_one_gpu_out_vidur",), reads=("vidur_bundles",))

#: every experiment that RESULTS.md cites (and the GPU measurements behind experiments/data/measured)
STEPS: tuple[Step, ...] = (
    _k("priors_report", "priors_report", "--data", "{data}", "--out", "{out}", datasets=_NS + _VID, minutes=3,
       results=(("priors_report.md", "priors_report.md"), ("priors_report.png", "priors_report.png"))),
    _k("noise_floor", "noise_floor", "--data", "{data}", "--out", "{out}", datasets=_NS, minutes=0.5,
       results=(("noise_floor.md", "noise_floor.md"), ("noise_floor.png", "noise_floor.png"))),
    _k("public_gemm_check", "public_gemm_check", "--out", "{out}", minutes=0.5,
       results=(("public_gemm_check.md", "public_gemm_check.md"), ("public_gemm_check.png", "public_gemm_check.png"))),
    _k("vidur_token_blocks", "vidur_token_blocks", "--data", "{data}", "--out", "{out}", datasets=_VID, minutes=0.5,
       results=(("report.md", "vidur_token_blocks.md"),)),
    _k("leave_one_gpu_out", "leave_one_gpu_out", "--data", "{data}", "--out", "{out}",
       "--save-bundles", "{scratch}/logo_bundles", datasets=_NS, minutes=15,
       results=(("neusight_mape.md", "neusight_mape.md"), ("neusight_mape.png", "neusight_mape.png"))),
    _k("leave_one_gpu_out_vidur", "leave_one_gpu_out", "--vidur", "--data", "{data}", "--out", "{out}",
       "--save-bundles", "{scratch}/vidur_bundles", datasets=_VID, minutes=3,
       results=(("vidur_mape.md", "vidur_mape.md"), ("vidur_mape.png", "vidur_mape.png"))),
    _k("leave_one_gpu_out_shipped", "leave_one_gpu_out", "--with-vidur", "--measured", _H200,
       "--measured-dtypes", "fp32,fp16", "--data", "{data}", "--out", "{out}",
       "--save-bundles", "{scratch}/logo_bundles_vr", datasets=_NS + _VID, minutes=10,
       results=(("neusight_vidur_h200_mape.md", "neusight_vidur_h200_mape.md"),
                ("neusight_vidur_h200_mape.png", "neusight_vidur_h200_mape.png"))),
    _k("training_gpu_bias", "training_gpu_bias", "--models", "--data", "{data}", "--out", "{out}/report.md",
       datasets=_NS, minutes=3, results=(("report.md", "training_gpu_bias.md"),)),
    _k("single_gpu_bundles", "single_gpu_bundles", "--data", "{data}", "--out", "{out}", datasets=_NS, minutes=6,
       results=(("report.md", "single_gpu_bundles.md"),)),
    _k("decode_gemm_check", "decode_gemm_check", "--data", "{data}/vidur", "--bundles", "{scratch}/logo_bundles_vr",
       "--out", "{out}", datasets=_VID, after=("leave_one_gpu_out_shipped",), reads=("logo_bundles_vr",), minutes=1),
    _t("fewshot_curve", "fewshot_curve", "--data", "{data}", "--bundles", "{scratch}/logo_bundles", "--out", "{out}",
       "--heldout-csv", "{scratch}/leave_one_gpu_out/neusight_heldout_predictions.csv", datasets=_NS, minutes=15,
       results=(("neusight_fewshot.md", "neusight_fewshot.md"), ("neusight_fewshot.png", "neusight_fewshot.png")),
       **_LOGO),
    _t("fewshot_curve_vidur", "fewshot_curve", "--vidur", "--data", "{data}", "--bundles", "{scratch}/vidur_bundles",
       "--out", "{out}", datasets=_VID, minutes=5,
       results=(("vidur_fewshot.md", "vidur_fewshot.md"), ("vidur_fewshot.png", "vidur_fewshot.png")), **_VIDUR_LOGO),
    _t("class_budget", "class_budget", "--data", "{data}", "--bundles", "{scratch}/logo_bundles", "--out", "{out}",
       datasets=_NS, minutes=10, results=(("neusight_class_budget.md", "neusight_class_budget.md"),), **_LOGO),
    _t("class_budget_vidur", "class_budget", "--vidur", "--data", "{data}", "--bundles", "{scratch}/vidur_bundles",
       "--out", "{out}", datasets=_VID, minutes=5, results=(("vidur_class_budget.md", "vidur_class_budget.md"),),
       **_VIDUR_LOGO),
    _t("transfer_shift", "transfer_shift", "--data", "{data}", "--bundles", "{scratch}/logo_bundles", "--out", "{out}",
       datasets=_NS, minutes=1, results=(("transfer_shift.md", "transfer_shift.md"),), **_LOGO),
    _t("cross_dtype_transfer", "cross_dtype_transfer", "--h200-bundle", "{scratch}/logo_bundles/Tesla_P4/kernels",
       minutes=3, **_LOGO),
    _t("measured_transfer", "measured_transfer", "--out", "{out}/report.md", minutes=2,
       results=(("report.md", "measured_transfer.md"),)),
    _m("model_latency", "model_latency", "--data", "{data}", "--bundles", "{scratch}/logo_bundles",
       "--transfer-k", "16", "--out", "{out}", datasets=_NS, minutes=20,
       results=(("report.md", "model_latency.md"), ("model_latency.png", "model_latency.png")), **_LOGO),
    _m("label_oracle", "label_oracle", "--data", "{data}", "--out", "{out}", datasets=_NS, minutes=1,
       results=(("report.md", "label_oracle.md"),)),
    _m("run_calibration", "run_calibration", "--data", "{data}", "--out", "{out}", datasets=_NS, minutes=1,
       results=(("report.md", "run_calibration.md"), ("run_calibration.png", "run_calibration.png"))),
    _k("aiconfigurator_kernels", "aiconfigurator_kernels", "--data", "{data}", "--out",
       "{out}/aiconfigurator_kernels.md", datasets=("aiconfigurator",), minutes=4,
       results=(("aiconfigurator_kernels.md", "aiconfigurator_kernels.md"),
                ("aiconfigurator_kernels.png", "aiconfigurator_kernels.png"))),
    _k("aic_noise_floor", "aic_noise_floor", "--data", "{data}", "--out", "{out}", datasets=("aiconfigurator",),
       minutes=3, results=(("aic_noise_floor.md", "aic_noise_floor.md"),)),
    _k("spec_monotone", "spec_monotone", "--data", "{data}", "--out", "{out}/spec_monotone.md",
       datasets=("aiconfigurator",), minutes=0.5, results=(("spec_monotone.md", "spec_monotone.md"),)),
    _t("aic_fewshot", "aic_fewshot", "--data", "{data}", "--out", "{out}/aic_fewshot.md", "--bundles", "{out}/bundles",
       datasets=("aiconfigurator",), minutes=6,
       results=(("aic_fewshot.md", "aic_fewshot.md"), ("aic_fewshot.png", "aic_fewshot.png"))),
    _k("h200_modern_kernels", "modern_kernels", "--gpu", "h200", "--out", "{out}", minutes=0.5,
       results=(("h200_modern_kernels.md", "h200_modern_kernels.md"),)),
    _k("h100_modern_kernels", "modern_kernels", "--gpu", "h100", "--out", "{out}", minutes=0.5,
       results=(("h100_modern_kernels.md", "h100_modern_kernels.md"),)),
    _t("h100_collected", "h100_collected", "--data", "{data}", "--bundle", "{out}/bundle", "--out",
       "{out}/h100_collected.md", datasets=("aiconfigurator",), minutes=2,
       results=(("h100_collected.md", "h100_collected.md"),)),
    _t("collected_pair", "collected_pair", "--out", "{out}/collected_pair.md", minutes=0.2,
       results=(("collected_pair.md", "collected_pair.md"),)),
    _k("attention_prior", "attention_prior", "--data", "{data}", "--out", "{out}/attention_prior.md",
       datasets=("aiconfigurator",), minutes=5,
       results=(("attention_prior.md", "attention_prior.md"), ("attention_prior.png", "attention_prior.png"))),
    _k("mla_decode", "mla_decode", "--data", "{data}", "--out", "{out}/mla_decode.md", datasets=("aiconfigurator",),
       minutes=0.5, results=(("mla_decode.md", "mla_decode.md"), ("mla_decode.png", "mla_decode.png"))),
    _k("dsa_attention", "dsa_attention", "--data", "{data}", "--out", "{out}/dsa_attention.md",
       datasets=("aiconfigurator",), minutes=0.2, results=(("dsa_attention.md", "dsa_attention.md"),)),
    _k("dsv4_attention", "dsv4_attention", "--data", "{data}", "--out", "{out}/dsv4_attention.md",
       datasets=("aiconfigurator",), minutes=0.5, results=(("dsv4_attention.md", "dsv4_attention.md"),)),
    _k("gdn_kernels", "gdn_kernels", "--data", "{data}", "--out", "{out}/gdn_kernels.md",
       datasets=("aiconfigurator",), minutes=1, results=(("gdn_kernels.md", "gdn_kernels.md"),)),
    _k("msa_decode", "msa_decode", "--data", "{data}", "--out", "{out}/msa_decode.md",
       datasets=("aiconfigurator",), minutes=0.2, results=(("msa_decode.md", "msa_decode.md"),)),
    _m("modern_models", "modern_models", _H200 + "/modern/models.csv", "--device", "NVIDIA H200",
       "--out", "{out}/modern_models.md", minutes=1, results=(("modern_models.md", "modern_models.md"),)),
    _m("modern_models_h100", "modern_models", str(MEASURED / "h100") + "/modern/models.csv", "--device",
       "NVIDIA H100 80GB HBM3", "--out", "{out}/modern_models_h100.md", minutes=1,
       results=(("modern_models_h100.md", "modern_models_h100.md"),)),
    *[_m(f"modern_models_h100_{tag}", "modern_models", str(MEASURED / "h100") + f"/{csv}", "--device",
         "NVIDIA H100 80GB HBM3", "--out", f"{{out}}/modern_models_h100_{tag}.md", minutes=1,
         results=((f"modern_models_h100_{tag}.md", f"modern_models_h100_{tag}.md"),))
      for tag, csv in (("lease2", "modern/models_second_lease.csv"), ("tf517", "moe_transformers/models_tf517.csv"),
                       ("tf524", "moe_transformers/models_tf524.csv"), ("families", "families/models.csv"),
                       ("generate", "generate_decode/models.csv"), ("families_2", "families_2/models.csv"))],
    *[_m(f"graph_decode_{gpu}", "modern_models", str(MEASURED / gpu) + "/generate_decode/graph_decode.csv", "--device",
         name, "--note", "graph", "--launch", "graph", "--out", f"{{out}}/graph_decode_{gpu}.md", minutes=0.5,
         results=((f"graph_decode_{gpu}.md", f"graph_decode_{gpu}.md"),))
      for gpu, name in (("h100", "NVIDIA H100 80GB HBM3"), ("h200", "NVIDIA H200"))],
    _m("graph_decode_h100_families_2", "modern_models", str(MEASURED / "h100") + "/families_2/graph_decode.csv",
       "--device", "NVIDIA H100 80GB HBM3", "--note", "graph", "--launch", "graph", "--out",
       "{out}/graph_decode_h100_families_2.md", minutes=0.5,
       results=(("graph_decode_h100_families_2.md", "graph_decode_h100_families_2.md"),)),
    _m("modern_models_h200_families", "modern_models", _H200 + "/families/models.csv", "--device", "NVIDIA H200",
       "--out", "{out}/modern_models_h200_families.md", minutes=1,
       results=(("modern_models_h200_families.md", "modern_models_h200_families.md"),)),
    _m("graph_decode_h200_families", "modern_models", _H200 + "/families/graph_decode.csv", "--device", "NVIDIA H200",
       "--note", "graph", "--launch", "graph", "--out", "{out}/graph_decode_h200_families.md", minutes=0.5,
       results=(("graph_decode_h200_families.md", "graph_decode_h200_families.md"),)),
    _m("modern_models_h200_generate", "modern_models", _H200 + "/generate_decode/models.csv", "--device", "NVIDIA H200",
       "--out", "{out}/modern_models_h200_generate.md", minutes=0.5,
       results=(("modern_models_h200_generate.md", "modern_models_h200_generate.md"),)),
    *[_m(f"device_time_{tag}", "device_time", str(MEASURED / csv), "--device", gpu, "--out",
         f"{{out}}/device_time_{tag}.md", minutes=1, results=((f"device_time_{tag}.md", f"device_time_{tag}.md"),))
      for tag, csv, gpu in (("h100_families", "h100/families/kernel_sums.csv", "NVIDIA H100 80GB HBM3"),
                            ("h100_generate", "h100/generate_decode/kernel_sums.csv", "NVIDIA H100 80GB HBM3"),
                            ("h100_families_2", "h100/families_2/kernel_sums.csv", "NVIDIA H100 80GB HBM3"),
                            ("h200", "h200/modern/models_device_time.csv", "NVIDIA H200"),
                            ("h200_families", "h200/families/kernel_sums.csv", "NVIDIA H200"))],
    _m("gpu_pair", "gpu_pair", str(MEASURED / "h100") + "/modern/models.csv", "NVIDIA H100 80GB HBM3",
       _H200 + "/modern/models.csv", "NVIDIA H200", "--out", "{out}/gpu_pair.md", minutes=1,
       results=(("gpu_pair.md", "gpu_pair.md"),)),
    _m("cudnn_plan_hosts", "cudnn_plan_hosts", "--out", "{out}/cudnn_plan_hosts.md", minutes=0.5,
       results=(("cudnn_plan_hosts.md", "cudnn_plan_hosts.md"),)),
    _m("host_floor", "host_floor", "--out", "{out}/host_floor.md", minutes=14,
       results=(("host_floor.md", "host_floor.md"),)),
    _m("moe_host", "moe_host", "--out", "{out}/moe_host.md", minutes=0.5, results=(("moe_host.md", "moe_host.md"),)),
    Step("serving_silicon", "experiments.serving.serving_silicon", ("--out", "{out}"), datasets=("aiconfigurator",),
         minutes=4, results=(("serving_silicon.md", "serving_silicon.md"), ("serving_silicon.png", "serving_silicon.png"))),
    Step("serving_sweep", "experiments.serving.serving_sweep", ("--out", "{out}"), datasets=("aiconfigurator",),
         minutes=1, results=(("serving_sweep.md", "serving_sweep.md"), ("serving_sweep.png", "serving_sweep.png"))),
    _m("multi_gpu_example", "multi_gpu_example", "--data", "{data}", "--out", "{out}", datasets=_NS, minutes=1,
       results=(("report.md", "multi_gpu.md"),)),
    _m("activation_memory", "activation_memory", "--out", "{out}/activation_memory.csv", torch=True, minutes=1),
    Step("collectives_nvswitch", "experiments.collectives.collectives_nvswitch",
         ("--data", "{data}", "--out", "{out}"), datasets=_VID + ("aiconfigurator",), minutes=12,
         results=(("collectives_nvswitch.md", "collectives_nvswitch.md"),
                  ("collectives_nvswitch.png", "collectives_nvswitch.png"))),
    _g("graph_trace", "graph_trace", "--out", "{out}/graph_trace.csv", torch=True, minutes=1,
       results=(("graph_trace.csv", "graph_trace.csv"),)),
    _g("decode_trace", "decode_trace", torch=True, minutes=0.5),
    _g("grid_shapes", "grid_shapes", "--data", "{data}", "--out", "{out}", datasets=_NS, minutes=0.5),
    _g("gpu_check", "gpu_check", "--out", "{out}", gpu=True, minutes=10),
    _g("kernel_trace", "kernel_trace", "--out", "{out}/kernel_trace.csv", gpu=True, minutes=2),
    _g("model_profile", "model_profile", "--out", "{out}", gpu=True, minutes=5),
    _g("measure_modern", "measure_modern", "--out", "{out}", gpu=True, minutes=8),
    _g("sdpa_collect", "sdpa_collect", "--out", "{out}/kernels.csv", gpu=True, minutes=3),
    _g("vocab_alignment_check", "vocab_alignment_check", "--out", "{out}", gpu=True, minutes=1),
    _g("moe_profile", "moe_profile", "--out", "{out}", gpu=True, minutes=1),
    _g("sdpa_backends", "sdpa_backends", "--out", "{out}", gpu=True, minutes=3),
    _g("host_probe", "host_probe", "--out", "{out}", gpu=True, minutes=3),
)


def ordered(steps: Sequence[Step]) -> list[Step]:
    """The steps with every one after the steps it reads from (registry order otherwise)."""
    names = {s.name for s in steps}
    done: list[Step] = []
    placed: set[str] = set()
    pending = list(steps)
    while pending:
        ready = next((s for s in pending if all(a in placed or a not in names for a in s.after)), None)
        if ready is None:
            raise PipelineError("steps depend on each other in a cycle: " + ", ".join(s.name for s in pending))
        done.append(ready)
        placed.add(ready.name)
        pending.remove(ready)
    return done


def select(steps: Sequence[Step], only: Iterable[str] | None = None, quick: bool = False) -> list[Step]:
    """The steps a run covers: `only` names some (an unknown name is an error), `quick` drops long ones."""
    if only:
        known = {s.name for s in steps}
        unknown = [n for n in only if n not in known]
        if unknown:
            raise PipelineError(f"unknown step {', '.join(unknown)}; steps: {', '.join(sorted(known))}")
        steps = [s for s in steps if s.name in set(only)]
    return [s for s in ordered(steps) if not quick or s.minutes <= QUICK_MINUTES]


def has_gpu() -> bool:
    """Whether an NVIDIA GPU is visible (without importing torch)."""
    return shutil.which("nvidia-smi") is not None and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode == 0


def has_torch() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def skip_reason(step: Step, data: Path, scratch: Path, gpu: bool, torch: bool) -> str | None:
    """Why the step cannot run here and now, in one line, or None when it can."""
    if step.gpu and not gpu:
        return "needs a GPU (run it on a GPU machine)"
    if step.torch and not torch:
        return "needs torch and transformers"
    for d in step.datasets:
        if not (data / d).is_dir():
            return f"no {d} dataset under {data}"
    for r in step.reads:
        if not (scratch / r).exists():
            return f"no {_shown(scratch / r)} yet (written by {', '.join(step.after)})"
    return None


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def command(step: Step, data: Path, scratch: Path) -> list[str]:
    """The step's command line."""
    fill = {"data": str(data), "out": str(scratch / step.name), "scratch": str(scratch)}
    return [sys.executable, "-m", step.module, *(a.format(**fill) for a in step.args)]


def execute(cmd: list[str], log: Path) -> int:
    """Run one step from the repository root (the experiments package first on the path), output to `log`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    with log.open("w") as f:
        return subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT).returncode


@dataclass(frozen=True)
class Outcome:
    step: str
    status: str  # "ok", "skipped" or "failed"
    detail: str


def run(steps: Sequence[Step], data: Path, scratch: Path = OUT, results: Path = RESULTS,
        gpu: bool | None = None, torch: bool | None = None,
        report: Callable[[Outcome], None] = lambda o: None,
        runner: Callable[[list[str], Path], int] = execute) -> list[Outcome]:
    """Run `steps` in order: skip those whose inputs are missing (checked when their turn comes, so a
    step reads what an earlier one of the same run wrote), copy each finished step's results."""
    gpu = has_gpu() if gpu is None else gpu
    torch = has_torch() if torch is None else torch
    outcomes = []
    for step in steps:
        reason = skip_reason(step, data, scratch, gpu, torch)
        if reason is None:
            out = scratch / step.name
            out.mkdir(parents=True, exist_ok=True)
            log = out / "log.txt"
            rc = runner(command(step, data, scratch), log)
            missing = [src for src, _ in step.results if not (out / src).is_file()]
            if rc != 0 or missing:
                why = f"exit status {rc}" if rc else f"did not write {', '.join(missing)}"
                outcome = Outcome(step.name, "failed", f"{why}; see {log}")
            else:
                results.mkdir(parents=True, exist_ok=True)
                for src, dst in step.results:
                    shutil.copyfile(out / src, results / dst)
                wrote = ", ".join(dst for _, dst in step.results) or f"only {out}"
                outcome = Outcome(step.name, "ok", f"wrote {wrote}")
        else:
            outcome = Outcome(step.name, "skipped", reason)
        outcomes.append(outcome)
        report(outcome)
    return outcomes
