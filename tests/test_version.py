"""`hybridperf --version` prints the one version the package and its metadata share (pyproject reads it)."""
import sys
from pathlib import Path

import pytest

import hybridperf
from hybridperf.cli.app import main


def test_version_prints_the_package_version(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["hybridperf", "--version"])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    assert code in (0, None)
    assert capsys.readouterr().out.strip() == f"hybridperf {hybridperf.__version__}"


def test_pyproject_takes_its_version_from_the_package():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert "version" in meta["project"]["dynamic"] and "version" not in meta["project"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hybridperf.__version__"}
