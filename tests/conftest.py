"""One build of the site per test run, shared by every test that reads it.

The build goes through ``make html`` (the README's command) with this interpreter, so the
tests exercise the same entry point a reader uses. The compile cache and sphinx-gallery's
checksum cache are the project's own: a second ``make test`` re-executes nothing that
did not change.

The notebook tests' kernels start as soon as the site is built, before the first test, and
run in the background while the other tests read the site: the browser tests leave much of
the CPU idle, waiting on Chromium. Each notebook test then waits for its own kernel run.
"""

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbclient
import nbformat
import pytest

from tools import gallery

ROOT = Path(__file__).resolve().parents[1]
TEST_BUILDDIR = "_build/test"
# Tutorials the test build executes at a time, and notebook kernels the notebook tests run
# at a time (tests/test_notebooks.py says why).
JOBS = 2

# Under `make test` these tell every make the tests start that it is a sub-make, which then
# prints "make[1]: ..." lines a reader's own `make html` never shows. Each build a test starts
# must look like the reader's.
for _name in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS"):
    os.environ.pop(_name, None)


def make(*args, cwd=ROOT, env=None, check=True):
    """Run ``make`` with this interpreter; return the CompletedProcess (output captured)."""
    cmd = ["make", f"PYTHON={sys.executable}", *args]
    proc = subprocess.run(
        cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True
    )
    if check and proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-60:])
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}:\n{tail}")
    return proc


@pytest.fixture(scope="session")
def built_site():
    """Build the whole site once, executing every tutorial; return (html dir, build output)."""
    # JOBS at a time: the tests check what the pages compute, not their timings. One at a
    # time where a GPU is present, so that no two tutorials size their work to the same memory.
    jobs = 1 if shutil.which("nvidia-smi") else JOBS
    proc = make("html", f"BUILDDIR={TEST_BUILDDIR}", f"JOBS={jobs}")
    return ROOT / TEST_BUILDDIR / "html", proc.stdout + proc.stderr


# Seconds one notebook cell may take; the slowest cells compile with torch.compile on CPU.
CELL_TIMEOUT = 900


def run_notebook(site, source, workdir):
    """Execute the site's notebook of ``source`` in ``workdir``; return it, executed."""
    found = sorted((site / "_downloads").rglob(f"{source.stem}.ipynb"))
    assert len(found) == 1, f"expected one {source.stem}.ipynb in _downloads: {found}"
    notebook = nbformat.read(found[0], as_version=4)
    # The kernel's environment: no GPU, and Jupyter's own plot backend (the build's
    # MPLBACKEND=Agg would make plt.show() warn in a notebook).
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    for name in ("MPLBACKEND", "GALLERY_PATTERN", "GALLERY_JOBS"):
        env.pop(name, None)
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute(env=env)
    return notebook


@pytest.fixture(scope="session", autouse=True)
def notebook_runs(request, tmp_path_factory):
    """{source: future of its executed notebook} for the notebook tests selected, started
    with the first test of the session (after the build), JOBS at a time."""
    selected = [
        item.callspec.params["source"]
        for item in request.session.items
        if item.originalname == "test_notebook_runs"
    ]
    if selected:
        try:
            site, _ = request.getfixturevalue("built_site")
        except pytest.fail.Exception:
            # The build failed: each test that reads the site, these included, reports it.
            selected = []
    if not selected:
        yield {}
        return
    pool = ThreadPoolExecutor(max_workers=JOBS)
    yield {
        source: pool.submit(
            run_notebook, site, source, tmp_path_factory.mktemp(source.stem)
        )
        for source in selected
    }
    pool.shutdown(cancel_futures=True)


# {examples folder: gallery folder}, as conf.py pairs them.
GALLERIES = gallery.GALLERIES


def tutorial_sources():
    return sorted(Path(t.source) for t in gallery.tutorials(ROOT))


def page_of(source):
    return f"{GALLERIES[Path(source).parts[0]]}/{Path(source).stem}.html"


def copy_build_machinery(dest):
    """A new project at ``dest`` with this one's build machinery and empty galleries.

    The caller adds the examples and an index.rst.
    """
    dest.mkdir()
    for name in (
        "conf.py",
        "Makefile",
        "requirements.txt",
        "requirements-docs.txt",
        "constraints-docs.txt",
    ):
        shutil.copy(ROOT / name, dest / name)
    for name in ("sphinxext", "tools", "_static", "_templates"):
        shutil.copytree(
            ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    for folder in GALLERIES:
        (dest / folder).mkdir()
        shutil.copy(ROOT / folder / "GALLERY_HEADER.rst", dest / folder)
