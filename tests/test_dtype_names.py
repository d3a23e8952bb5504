"""Dtypes are spelled one way in what users read (fp16, not float16), and every spelling still parses."""
import pytest

from hybridperf.devices import DTYPE_BYTES, dtype_key
from hybridperf.errors import HybridperfError


@pytest.mark.parametrize("alias, key", [("float16", "fp16"), ("torch.bfloat16", "bf16"), ("FP32", "fp32")])
def test_every_spelling_parses_to_the_short_name(alias, key):
    assert dtype_key(alias) == key


def test_the_unknown_dtype_error_lists_the_short_names_only():
    with pytest.raises(HybridperfError) as e:
        dtype_key("fp13")
    listed = str(e.value).split("expected one of ", 1)[1].split(" (", 1)[0]
    assert listed.split(", ") == list(DTYPE_BYTES)
