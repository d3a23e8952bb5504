"""What a latency means: the timing and host vocabulary every layer shares.

A measured (or predicted) kernel latency names how it was timed and, for a timed call, whose host it ran
on (docs/timing.md). The names live here, below the data schema and the priors, so that both can check
them; what each host costs is the priors' business (`hybridperf.priors.launch.HOST_FLOOR_SCALE`).
  * timing `call`:   CUDA events around one eager PyTorch call (NeuSight's harness, `hybridperf collect`);
  * timing `kernel`: the kernel's own duration as a profiler reports it (torch.profiler, Nsight, Vidur);
  * host `neusight`: the hosts of NeuSight's artifact (PyTorch 2.1);
  * host `current`:  a current server and PyTorch, the default.
"""
from __future__ import annotations

from hybridperf.errors import InputError

TIMINGS = ("call", "kernel")
HOSTS = ("neusight", "current")
DEFAULT_HOST = "current"


def check_timing(timing: str) -> str:
    """`timing` if it is one of TIMINGS, else a one-line InputError."""
    if timing not in TIMINGS:
        raise InputError(f"unknown timing {timing!r}: expected one of {', '.join(TIMINGS)}")
    return timing


def check_host(host: str) -> str:
    """`host` if it is one of HOSTS, else a one-line InputError."""
    if host not in HOSTS:
        raise InputError(f"unknown host {host!r}: expected one of {', '.join(HOSTS)}")
    return host
