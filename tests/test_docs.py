"""The docs stay in layers (issue 54): a short README whose set-up commands work, a reference in docs/
that its index lists in full, and a RESULTS.md of today's numbers rather than a work journal."""
from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pandas as pd

from hybridperf.cli.app import main

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
QUICK_START = 'hybridperf predict-kernels examples/kernels.csv --device "NVIDIA H100 80GB HBM3" --output predictions.csv'
INSTALL = "pip install ."
TESTS = 'pip install torch==2.13.0 && pip install -e ".[train,test,ray]" && python -m pytest -q'
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _paragraph_lengths(text: str) -> list[int]:
    return [len(block.splitlines()) for block in re.split(r"\n\s*\n", text) if block.strip()]


def test_readme_is_short_and_its_paragraphs_too():
    assert len(README.splitlines()) <= 150
    assert max(_paragraph_lengths(README)) <= 20


def test_readme_holds_the_three_set_up_commands():
    lines = {line.strip() for line in README.splitlines()}
    assert {INSTALL, QUICK_START, TESTS} <= lines


def test_quick_start_runs_on_the_shipped_models(tmp_path, monkeypatch):
    args = shlex.split(QUICK_START)
    args[args.index("examples/kernels.csv")] = str(REPO / "examples" / "kernels.csv")
    args[-1] = str(tmp_path / "predictions.csv")
    monkeypatch.setattr(sys, "argv", args)
    main()
    out = pd.read_csv(tmp_path / "predictions.csv")
    assert len(out) == len(pd.read_csv(REPO / "examples" / "kernels.csv"))
    assert ((out["pred_lo_ms"] > 0) & (out["pred_lo_ms"] <= out["pred_ms"]) & (out["pred_ms"] <= out["pred_hi_ms"])).all()


def test_quick_start_outputs_are_ignored_by_git():
    ignored = {line.strip().lstrip("/") for line in (REPO / ".gitignore").read_text().splitlines()}
    assert "predictions.csv" in ignored


def test_docs_index_lists_every_page_and_links_resolve():
    index = (REPO / "docs" / "index.md").read_text()
    listed = set(LINK.findall(index))
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"index.md"}
    assert pages <= listed, f"add to docs/index.md: {sorted(pages - listed)}"
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in LINK.findall(doc.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            path = (doc.parent / target).resolve()
            # a page the index declares may land from another branch; anything else must exist
            assert path.exists() or (path.parent == REPO / "docs" and path.name in listed), f"{doc.name}: {target}"


def test_results_hold_todays_numbers_not_a_journal():
    text = (REPO / "experiments" / "RESULTS.md").read_text()
    assert len(text.splitlines()) <= 600
    assert not re.search(r"\bsession \d+", text, re.IGNORECASE), "dated or numbered session entries belong in git"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text)
    for section in re.split(r"\n## ", text)[1:]:
        body = section.split("\n", 1)[1] if "\n" in section else ""
        if "|" in body:  # every table says how to reproduce it
            assert "python -m experiments" in body, section.splitlines()[0]
