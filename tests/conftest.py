"""One build of the site per test run, shared by every test that reads it.

The build goes through ``make html`` (the README's command) with this interpreter, so the
tests exercise the same entry point a reader uses. Its output (``BUILDDIR``) goes to this
session's temporary folder (pytest's, which keeps the last three sessions'), never into
the checkout; the compile cache and sphinx-gallery's generated galleries and checksums
are the project's own, as for ``make html``: a second ``make test`` re-executes nothing
that did not change. ``TEST_SITE=path/to/html`` makes the tests read a site built
elsewhere (a GPU build, say) instead of building one; ``make test`` never sets it.

The build starts in the background before the tests are collected (when they may read the
site; it stops if none does), and the tests that do not read the site run first, while it
executes the tutorials, at a lower priority (``os.nice``): a build leaves part of a 2-core
CPU idle (a gallery's last tutorial runs alone, Sphinx writes the pages on one core), and
they fill it without slowing the build.
The tests that read the site come last (``built_site`` waits for the build).
The notebook tests' kernels start as soon as the site is built and run in the background
while the other tests read the site: the browser tests leave much of the CPU idle,
waiting on Chromium. Each notebook test then waits for its own kernel run.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import nbclient
import nbformat
import pytest

from tools import gallery

ROOT = Path(__file__).resolve().parents[1]
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


def given_site():
    """The site named by ``TEST_SITE`` (built elsewhere), or None: this session builds one."""
    site = os.environ.get("TEST_SITE")
    return Path(site).resolve() if site else None


def site_builddir(config):
    """This session's BUILDDIR: a folder of pytest's temporary one, never the checkout."""
    if "builddir" not in BUILD:
        BUILD["builddir"] = config._tmp_path_factory.mktemp("build", numbered=False)
    return BUILD["builddir"]


def start_build(config):
    """Start ``make html`` of the test site in the background (once per session), and lower
    this process's priority: the build is the longest path, and what runs beside it (the
    tests, and the processes they start) yields the CPU to it. A process may only raise its
    own niceness, so the build, started first, keeps the default."""
    if "proc" in BUILD or given_site():
        return
    # JOBS at a time: the tests check what the pages compute, not their timings. One at a
    # time where a GPU is present, so that no two tutorials size their work to the same memory.
    jobs = 1 if shutil.which("nvidia-smi") else JOBS
    cmd = make_command("html", f"BUILDDIR={site_builddir(config)}", f"JOBS={jobs}")
    output = tempfile.TemporaryFile("w+")
    # A process group of its own: stop_build ends make and what make started.
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    BUILD.update(proc=proc, output=output, cmd=cmd)
    os.nice(10)


def stop_build():
    proc = BUILD.pop("proc", None)
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()


def may_read_site(config):
    """Whether the tests asked for may include one that reads the site: a folder of tests,
    or a test file that names ``built_site`` (-k and -m are not known yet)."""
    for arg in config.args:
        path = Path(arg.split("::")[0])
        if path.is_dir() or (
            path.suffix == ".py"
            and path.is_file()
            and "built_site" in path.read_text(encoding="utf-8")
        ):
            return True
    return False


def pytest_collection(session):
    """The build starts before the tests are collected (collecting imports torch, among
    others) when they may read the site; pytest_collection_modifyitems stops it when none
    was selected."""
    if not session.config.option.collectonly and may_read_site(session.config):
        start_build(session.config)


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(session, config, items):
    """Tests that read the built site run last, the build running in the background
    meanwhile; without such a test, no build."""
    site = [item for item in items if "built_site" in getattr(item, "fixturenames", ())]
    if site:
        items[:] = [item for item in items if item not in site] + site
        if not config.option.collectonly:
            start_build(config)  # a no-op when pytest_collection started it
    else:
        stop_build()


# Set where the suite runs as on CI: .ci/run sets TESTS_STRICT=1, GitHub sets CI. There a
# tool the suite needs (Chromium, axe-core) must be installed, and a file the session adds
# to the checkout fails it; elsewhere the first skips and the second is a warning (a
# developer may be editing or building in the checkout meanwhile).
STRICT = ("TESTS_STRICT", "CI")


def strict():
    """The variable that makes this session strict (STRICT), or None."""
    return next((name for name in STRICT if os.environ.get(name)), None)


# What a build writes into the checkout, as `make html` does (all git-ignored), and the
# caches of the tools themselves. Any other file a test session adds to the checkout is a
# test writing outside its temporary folder.
BUILD_OUTPUTS = {
    ".git",
    ".venv",
    ".verify",
    "wheelhouse",
    ".cache",
    ".tmp",
    ".pytest_cache",
    ".ruff_cache",
    "recipes",
    "intermediate",
    "sg_execution_times.rst",
    "tests/node_modules",
}


def checkout_files(root=ROOT):
    """The files under ``root`` but the build's own outputs (BUILD_OUTPUTS, __pycache__,
    and the report folder a tutorial writes beside itself, <gallery source>/<stem>_report)."""
    found = set()
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root)
        dirs[:] = [
            d
            for d in dirs
            if (rel / d).as_posix() not in BUILD_OUTPUTS
            and d != "__pycache__"
            and not (str(rel) in GALLERIES and d.endswith("_report"))
        ]
        found.update(
            (rel / f).as_posix()
            for f in files
            if (rel / f).as_posix() not in BUILD_OUTPUTS
        )
    return found


CHECKOUT = {}


def pytest_sessionstart(session):
    CHECKOUT["before"] = checkout_files()


# The reasons this session's tests were skipped for: (test, reason).
SKIPS = []


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        SKIPS.append((report.nodeid, str(reason).removeprefix("Skipped: ")))


def named_skip_reasons(readme):
    """The skip reasons the README names: the quoted phrases of its "Skips" item (in the
    section "Tests")."""
    section = readme.split("\n## Tests\n", 1)[-1].split("\n## ", 1)[0]
    item = section.split("**Skips.**", 1)[-1].split("\n- **", 1)[0]
    return re.findall(r'"([^"]+)"', " ".join(item.split()))


def unnamed_skips(skips, named):
    """The (test, reason) of ``skips`` whose reason contains none of the ``named``."""
    return [(test, why) for test, why in skips if not any(n in why for n in named)]


def pytest_sessionfinish(session):
    """An interrupted session stops the build and the notebook runs not yet started. A
    session fails that skipped a test for a reason the README does not name, or, where it
    is strict, that added a file to the checkout (elsewhere a warning names the file)."""
    stop_build()
    for run in NOTEBOOK_RUNS.values():
        run.cancel()
    if session.config.option.collectonly or "before" not in CHECKOUT:
        return
    errors, warnings = [], []
    added = sorted(checkout_files() - CHECKOUT["before"])
    if added:
        (errors if strict() else warnings).append(
            f"{len(added)} file(s) appeared in the checkout during the tests, which write "
            f"only under a temporary folder: {', '.join(added[:10])}"
        )
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for test, why in unnamed_skips(SKIPS, named_skip_reasons(readme)):
        errors.append(f"{test} skipped for a reason README.md does not name: {why}")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        for line in [f"ERROR: {e}" for e in errors] + [
            f"WARNING: {w}" for w in warnings
        ]:
            reporter.write_line(line, red=line.startswith("ERROR"))
    if errors:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def built_site(request, tmp_path_factory):
    """Wait for the build of the whole site (every tutorial executed), start the selected
    notebooks' kernel runs; return (html dir, build output)."""
    site = given_site()
    if site is not None:
        assert (site / "index.html").is_file(), f"TEST_SITE={site}: no index.html there"
        output = ""
    else:
        start_build(request.config)  # a no-op when collection started it
        BUILD["proc"].wait()
        BUILD["output"].seek(0)
        output = BUILD["output"].read()
        if BUILD["proc"].returncode != 0:
            fail_make(BUILD["cmd"], BUILD["proc"].returncode, output)
        site = site_builddir(request.config) / "html"
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


# Notebooks that check timed known answers (the measuring recipe: a 2 ms delay must show
# as a 2 ms Python part) run alone, before the other site tests start: beside the browser
# tests, on a 2-core machine, its steps' spread reached 100 ms and the check failed (in
# two of three runs, 2026-11-28). Every other notebook runs in the background, as below.
QUIET = {Path("recipes_source/measuring.py")}


def start_notebooks(session, site, tmp_path_factory):
    selected = [
        item.callspec.params["source"]
        for item in session.items
        if item.originalname == "test_notebook_runs"
    ]
    pool = ThreadPoolExecutor(max_workers=JOBS)
    quiet_first = sorted(selected, key=lambda s: s not in QUIET)
    for source in quiet_first:
        workdir = tmp_path_factory.mktemp(source.stem)
        NOTEBOOK_RUNS[source] = pool.submit(run_notebook, site, source, workdir)
        if source in QUIET:
            wait([NOTEBOOK_RUNS[source]])  # alone: nothing else runs meanwhile
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
