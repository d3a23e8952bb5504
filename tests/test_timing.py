"""The timing and host vocabulary (hybridperf.timing) and the priors that price it agree."""
import pytest

from hybridperf.errors import InputError
from hybridperf.priors.launch import HOST_FLOOR_SCALE, launch_floor_ms
from hybridperf.timing import HOSTS, TIMINGS, check_host, check_timing


def test_every_host_has_a_floor_and_no_more():
    assert set(HOST_FLOOR_SCALE) == set(HOSTS)
    for host in HOSTS:
        assert launch_floor_ms("linear", "call", host) > 0


@pytest.mark.parametrize("check, bad", [(check_timing, "wall"), (check_host, "laptop")])
def test_unknown_names_are_one_line_errors(check, bad):
    with pytest.raises(InputError, match="expected one of"):
        check(bad)
    assert check_timing(TIMINGS[0]) == TIMINGS[0]
