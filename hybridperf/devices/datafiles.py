"""Reading the catalog's data files into the frozen `DeviceSpec` / `NodeSpec` dataclasses.

`hybridperf/devices/data/gpus/*.json` and `data/nodes/*.json` each hold a JSON array of objects, one
per GPU or node. An object's keys are the dataclass's field names; `source` (the public spec sheet the
numbers come from) is required, `notes` and every field with a default are optional. Files load in
name order and entries in file order, so the catalog's order (oldest generation first) is fixed: the
listing follows it, and so do ties in `get_device`'s choice among a GPU's boards.

The checks here are structural (a file that parses, known and present keys, values of the field's
JSON type, finite numbers, known peak keys); each failure is one line naming the file, the entry and
the field.
"""
from __future__ import annotations

import json
import math
from dataclasses import MISSING, fields
from importlib import resources
from pathlib import Path

from hybridperf.devices.spec import PEAK_KEYS
from hybridperf.errors import HybridperfError, UnknownDeviceError

#: keys a `peak_tflops` object may hold: PEAK_KEYS, plus `int8` (the DP4A rate of parts without int8
#: tensor cores)
ALLOWED_PEAKS = frozenset(PEAK_KEYS) | {"int8"}

_EXPECT = {"str": "a string", "int": "an integer", "float": "a number",
           "tuple[str, ...]": "a list of strings", "dict[str, float]": "an object of numbers"}


def data_dir(kind: str):
    """The packaged folder of `kind` ("gpus" or "nodes") data files."""
    return resources.files("hybridperf.devices").joinpath("data", kind)


def data_files(kind: str, root=None) -> list:
    """The JSON files of `kind` under `root` (default: the packaged data folder), in load order."""
    folder = data_dir(kind) if root is None else Path(root)
    if not folder.is_dir():
        raise UnknownDeviceError(f"catalog folder {folder} not found")
    return sorted((p for p in folder.iterdir() if p.name.endswith(".json")), key=lambda p: p.name)


def load_catalog(kind: str, cls, root=None) -> list:
    """Every entry of every `kind` file, as `cls` instances, in load order."""
    files = data_files(kind, root)
    if not files:
        raise UnknownDeviceError(f"no catalog files (*.json) in {data_dir(kind) if root is None else root}")
    return [entry for f in files for entry in load_file(f, cls)]


def _no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup is not None:
        raise ValueError(f"key {dup!r} appears twice in one object")
    return dict(pairs)


def load_file(path, cls) -> list:
    """The entries of one data file as `cls` instances; any fault raises a one-line UnknownDeviceError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise UnknownDeviceError(f"{path}: malformed JSON ({e.msg} at line {e.lineno})") from None
    except ValueError as e:
        raise UnknownDeviceError(f"{path}: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UnknownDeviceError(f"{path}: cannot read ({e})") from None
    if not isinstance(data, list):
        raise UnknownDeviceError(f"{path}: expected a JSON array of entries, got {type(data).__name__}")
    return [_entry(path, i, d, cls) for i, d in enumerate(data)]


def _entry(path, index: int, d, cls):
    where = f"{path}: entry {index}"
    if not isinstance(d, dict):
        raise UnknownDeviceError(f"{where}: expected an object, got {type(d).__name__}")
    if isinstance(d.get("name"), str):
        where = f"{path}: entry {d['name']!r}"
    spec_fields = {f.name: f for f in fields(cls)}
    unknown = sorted(set(d) - set(spec_fields))
    if unknown:
        raise UnknownDeviceError(f"{where}: unknown field {unknown[0]!r}")
    required = [n for n, f in spec_fields.items()
                if (f.default is MISSING and f.default_factory is MISSING) or n == "source"]
    missing = [n for n in required if n not in d]
    if missing:
        raise UnknownDeviceError(f"{where}: missing field {missing[0]!r}")
    for name, value in d.items():
        problem = _type_problem(name, value, _kind(spec_fields[name].type))
        if problem:
            raise UnknownDeviceError(f"{where}: field {name!r} {problem}")
    if not d["source"].strip():
        raise UnknownDeviceError(f"{where}: field 'source' is empty; name the spec sheet the numbers come from")
    values = dict(d)
    if "aliases" in values:
        values["aliases"] = tuple(values["aliases"])
    try:
        return cls(**values)
    except (TypeError, ValueError, HybridperfError) as e:  # whatever the dataclass itself rejects
        raise UnknownDeviceError(f"{where}: {e}") from None


def _kind(annotation) -> str:
    """A field's annotation as text ("float", "dict[str, float]"), whether or not it was stringified."""
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _type_problem(name: str, value, kind: str) -> str | None:
    """Why `value` does not fit a field annotated `kind`, or None."""
    checks = {
        "str": lambda v: isinstance(v, str),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": _is_number,
        "tuple[str, ...]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "dict[str, float]": lambda v: isinstance(v, dict) and all(_is_number(x) for x in v.values()),
    }
    ok = checks.get(kind)
    if ok is None:  # a field type this reader does not know: the dataclass gets the value as is
        return None
    if not ok(value):
        return f"must be {_EXPECT[kind]}, got {json.dumps(value)[:60]}"
    if name == "peak_tflops":
        bad = sorted(set(value) - ALLOWED_PEAKS)
        if bad:
            return f"has unknown peak key {bad[0]!r}; expected keys among {sorted(ALLOWED_PEAKS)}"
    return None
