"""Lint gates: ruff (lint and format) over all Python, sphinx-lint over the .rst sources,
codespell over the tutorials and the .rst sources.

Each test runs the tool's own command line, so a failure prints what to run by hand.
Settings live in ruff.toml and in the lists below; no generated folder is linted.
"""

import subprocess
import sys

import pytest
from conftest import GALLERIES, ROOT

RST_SOURCES = ["index.rst", *(f"{g}/GALLERY_HEADER.rst" for g in GALLERIES)]
PROSE = [*GALLERIES, "index.rst", "README.md"]


def run(*args):
    """Run a tool as `python -m ...` from the repository root; fail with its output."""
    proc = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True
    )
    if proc.returncode != 0:
        shown = " ".join(args)
        pytest.fail(f"`{shown}` failed:\n{proc.stdout}{proc.stderr}", pytrace=False)


def test_ruff_lint():
    run("ruff", "check", "--no-cache", "--output-format", "concise", ".")


def test_ruff_format():
    # Fix with `ruff format <file>`.
    run("ruff", "format", "--no-cache", "--check", "--diff", ".")


def test_rst_sources_exist():
    missing = [p for p in RST_SOURCES if not (ROOT / p).is_file()]
    assert not missing


def test_sphinx_lint():
    run("sphinxlint", *RST_SOURCES)


def test_codespell():
    # A false positive goes in a .codespellrc at the top level (codespell reads it):
    # [codespell] ignore-words-list = word1,word2
    # A tutorial's generated report folder (*_report, git-ignored) is tlparse's text, not ours.
    run("codespell_lib", "--skip", "*_report", *PROSE)
