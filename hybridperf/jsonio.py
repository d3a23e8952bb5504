"""Reading user-supplied JSON (configs, device specs, manifests) with one-line errors."""
from __future__ import annotations

import json
from pathlib import Path

from hybridperf.errors import HybridperfError, InputError


def read_json_object(path: str | Path, error: type[HybridperfError] = InputError) -> dict:
    """Parse a JSON file that must hold an object; any problem raises `error` naming the file."""
    p = Path(path)
    try:
        with open(p, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as e:
        raise error(f"{p}: malformed JSON ({e.msg} at line {e.lineno})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{p}: cannot read ({e})") from None
    if not isinstance(data, dict):
        raise error(f"{p}: expected a JSON object, got {type(data).__name__}")
    return data
