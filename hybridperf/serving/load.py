"""Model configs for serving: a path, a dict or an `Arch`; and the HF-id -> file resolution of `--rows`."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from hybridperf.errors import InputError
from hybridperf.jsonio import read_json_object
from hybridperf.serving.arch import Arch, arch_from_dict

#: checkpoints published under another organisation or name with the same architecture (the file a
#: CONFIG_DIR holds is tried after the exact `<org>--<name>_config.json`)
ORG_ALIASES = {"zhipuai": "zai-org", "meta-llama": "meta-llama"}


@lru_cache(maxsize=64)
def _load_path(path: str) -> Arch:
    return arch_from_dict(read_json_object(path), name=Path(path).name.removesuffix("_config.json"))


def as_arch(config) -> Arch:
    if isinstance(config, Arch):
        return config
    if isinstance(config, dict):
        return arch_from_dict(config)
    p = Path(str(config))
    if not p.is_file():
        raise InputError(f"config file not found: {p}")
    return _load_path(str(p.resolve()))


def resolve_config(model_path: str, config_dir: str | Path) -> Path:
    """`CONFIG_DIR/<org>--<name>_config.json` for HF id `org/name`; failing that the same architecture
    under a known alias: `-Instruct`/`-FP8`/`-NVFP4` variants, `Meta-Llama-` names, nvidia's re-quantised
    copies (`nvidia/X-NVFP4` -> X's organisation). InputError naming what was tried."""
    d = Path(config_dir)
    org, _, name = str(model_path).strip().partition("/")
    if not name:
        raise InputError(f"model_path {model_path!r} is not an HF id org/name")
    tried = []
    names = [name]
    base = re.sub(r"-(Instruct|NVFP4|FP8|FP4)$", "", name)
    names += [base, f"Meta-{base}", f"Meta-{name}"]
    orgs = [org, ORG_ALIASES.get(org, org)]
    for o in orgs:
        for n in names:
            p = d / f"{o}--{n}_config.json"
            tried.append(p.name)
            if p.is_file():
                return p
    # a re-quantised copy under another organisation: the one file whose name part matches
    hits = sorted(d.glob(f"*--{base}_config.json"))
    if hits:
        return hits[0]
    raise InputError(f"no config for {model_path} in {d} (tried {', '.join(dict.fromkeys(tried))})")
