"""One build of the site per test run, shared by every test that reads it.

The build goes through ``make html`` (the README's command) with this interpreter, so the
tests exercise the same entry point a reader uses. The compile cache and sphinx-gallery's
checksum cache are the project's own: a second ``make test`` re-executes nothing that
did not change.

The build starts in the background as soon as the tests are collected, and the tests that
do not read the site run first, while it executes the tutorials, at a lower priority
(``os.nice``): a build leaves part of a 2-core CPU idle (a gallery's last tutorial runs
alone, Sphinx writes the pages on one core), and they fill it without slowing the build.
The tests that read the site come last (``built_site`` waits for the build).
The notebook tests' kernels start as soon as the site is built and run in the background
while the other tests read the site: the browser tests leave much of the CPU idle,
waiting on Chromium. Each notebook test then waits for its own kernel run.
"""

import os
import shutil
import subprocess
import sys
import tempfile
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


def make_command(*args):
    """``make`` with this interpreter: the command line."""
    return ["make", f"PYTHON={sys.executable}", *args]


def fail_make(cmd, returncode, output):
    """Fail the test with the command, its exit status and the end of its output."""
    tail = "\n".join(output.splitlines()[-60:])
    pytest.fail(f"{' '.join(cmd)} exited {returncode}:\n{tail}")


def make(*args, cwd=ROOT, env=None, check=True):
    """Run ``make`` with this interpreter; return the CompletedProcess (output captured)."""
    cmd = make_command(*args)
    proc = subprocess.run(
        cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True
    )
    if check and proc.returncode != 0:
        fail_make(cmd, proc.returncode, proc.stdout + proc.stderr)
    return proc


# The build of the site, started in the background when the tests are collected.
BUILD = {}


def start_build():
    """Start ``make html`` of the test site in the background (once per session)."""
    if BUILD:
        return
    # JOBS at a time: the tests check what the pages compute, not their timings. One at a
    # time where a GPU is present, so that no two tutorials size their work to the same memory.
    jobs = 1 if shutil.which("nvidia-smi") else JOBS
    cmd = make_command("html", f"BUILDDIR={TEST_BUILDDIR}", f"JOBS={jobs}")
    output = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, text=True
    )
    BUILD.update(proc=proc, output=output, cmd=cmd)


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(session, config, items):
    """Tests that read the built site run last; the build starts now, in the background."""
    site = [item for item in items if "built_site" in getattr(item, "fixturenames", ())]
    if site:
        items[:] = [item for item in items if item not in site] + site
        if not config.option.collectonly:
            start_build()
            # The build is the longest path: what runs beside it (these tests, and the
            # processes they start) yields the CPU to it. A process may only raise its own
            # niceness, so the build, started first, keeps the default.
            os.nice(10)


def pytest_sessionfinish(session):
    """An interrupted session stops the build and the notebook runs not yet started."""
    proc = BUILD.get("proc")
    if proc is not None and proc.poll() is None:
        proc.terminate()
    for run in NOTEBOOK_RUNS.values():
        run.cancel()


@pytest.fixture(scope="session")
def built_site(request, tmp_path_factory):
    """Wait for the build of the whole site (every tutorial executed), start the selected
    notebooks' kernel runs; return (html dir, build output)."""
    start_build()  # a no-op when collection started it
    BUILD["proc"].wait()
    BUILD["output"].seek(0)
    output = BUILD["output"].read()
    if BUILD["proc"].returncode != 0:
        fail_make(BUILD["cmd"], BUILD["proc"].returncode, output)
    site = ROOT / TEST_BUILDDIR / "html"
    start_notebooks(request.session, site, tmp_path_factory)
    return site, output


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


@pytest.fixture(scope="session")
def notebook_runs(built_site):
    """{source: future of its executed notebook} for the notebook tests selected, started
    as soon as the site is built (by ``built_site``), JOBS at a time."""
    return NOTEBOOK_RUNS


# The notebook runs of the selected notebook tests, started by ``built_site``.
NOTEBOOK_RUNS = {}


def start_notebooks(session, site, tmp_path_factory):
    selected = [
        item.callspec.params["source"]
        for item in session.items
        if item.originalname == "test_notebook_runs"
    ]
    if selected:
        pool = ThreadPoolExecutor(max_workers=JOBS)
        for source in selected:
            workdir = tmp_path_factory.mktemp(source.stem)
            NOTEBOOK_RUNS[source] = pool.submit(run_notebook, site, source, workdir)
        pool.shutdown(wait=False)  # the threads finish the queued runs


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
        "measure.py",
    ):
        shutil.copy(ROOT / name, dest / name)
    for name in ("sphinxext", "tools", "_static", "_templates"):
        shutil.copytree(
            ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    for folder in GALLERIES:
        (dest / folder).mkdir()
        shutil.copy(ROOT / folder / "GALLERY_HEADER.rst", dest / folder)
