"""requirements-docs.txt is enough to build without executing (CI's merge job installs
only it), and constraints-docs.txt pins all of it."""

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, copy_build_machinery, make

from tools import wheelhouse
from tools.constraints import _canonical, closure, top_level
from tools.shard import NOTHING
from tools.wheelhouse import requirements_without_torch

# Import names of requirements.txt's packages, where they differ from the package's name.
IMPORT_NAMES = {"beautifulsoup4": "bs4"}
TUTORIAL = '''"""
A tutorial
==========

Imports PyTorch, which building without executing never runs.
"""

# %%
import torch

print(torch.ones(2))
'''


def pins():
    lines = (ROOT / "constraints-docs.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def test_constraints_pin_every_docs_package_and_its_dependencies():
    pinned = pins()
    missing = sorted(set(closure(top_level())) - set(pinned))
    assert not missing, (
        f"not in constraints-docs.txt: {missing}; run "
        "`python -m tools.constraints > constraints-docs.txt`"
    )
    assert not {"torch", "numpy", "matplotlib"} & set(pinned)


def test_wheelhouse_reads_the_docs_requirements_too():
    names = {_canonical(line.split(">")[0]) for line in requirements_without_torch()}
    assert {_canonical(name) for name in top_level()} <= names
    assert not names & {"torch", "torchvision", "triton"}


def test_building_without_executing_needs_only_the_docs_requirements(tmp_path):
    """Every package requirements.txt adds (PyTorch, matplotlib...) is made unimportable;
    `make html-noplot` and the merge's build (nothing matches the gallery pattern) pass."""
    docs = {_canonical(name) for name in top_level()}
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    for name in top_level(ROOT / "requirements.txt"):
        if _canonical(name) not in docs:
            module = IMPORT_NAMES.get(name, name).replace("-", "_")
            (blocked / f"{module}.py").write_text(
                f"raise ImportError('{module}: not in requirements-docs.txt')\n"
            )
    assert (blocked / "torch.py").is_file()
    project = tmp_path / "site"
    copy_build_machinery(project)
    (project / "recipes_source" / "tutorial.py").write_text(TUTORIAL)
    (project / "index.rst").write_text(
        "Test\n====\n\n.. toctree::\n\n   recipes/index\n   intermediate/index\n"
    )
    env = {"PYTHONPATH": str(blocked)}
    make("html-noplot", cwd=project, env=env)
    # What tools.merge runs once it has laid the shards' pages in.
    merge_env = {**os.environ, **env, "GALLERY_PATTERN": NOTHING}
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going"]
    proc = subprocess.run(
        [*cmd, ".", "_build/merged", "-c", "."],
        cwd=project,
        env=merge_env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    probe = "import tools.merge, tools.validate, sphinxext.reset, sphinxext.memory"
    subprocess.run(
        [sys.executable, "-c", probe], cwd=project, env=merge_env, check=True
    )
    assert Path(project / "_build" / "merged" / "recipes" / "tutorial.html").is_file()


def test_wheelhouse_downloads_the_pinned_versions(monkeypatch):
    calls = []
    monkeypatch.setattr(wheelhouse.subprocess, "call", lambda cmd: calls.append(cmd))
    wheelhouse.main(["--dest", "unused"])
    (cmd,) = calls
    assert cmd[cmd.index("-c") + 1] == str(ROOT / "constraints-docs.txt")
