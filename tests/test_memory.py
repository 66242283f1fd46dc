"""sphinxext.memory: a page's footer and run record hold that page's own peak, never a
made-up 0, in the main process and in the workers of a parallel build (no site build here;
tests/test_build.py compares every built page's footer with its run record)."""

import json
import math
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sphinx.config import is_serializable

from sphinxext import memory

MIB = 2**20
HOST = memory.host_kind()
needs_proc = pytest.mark.skipif(HOST is None, reason="no /proc here")


def allocate(mib, hold=0.0):
    """A code block that allocates and touches ``mib`` MiB, holds it, and frees it."""

    def block():
        data = b"x" * (mib * MIB)
        time.sleep(hold)
        return len(data)

    return block


def run_page(kind, *blocks, gpu=False):
    """Run ``blocks`` as sphinx-gallery runs a page's code blocks under show_memory: a no-op
    first, then each block; return each block's value as the footer counts it, and the
    page's peak as its run record holds it."""
    memory.start_example((kind, gpu))
    measure = memory.PeakMemory()
    start, _ = measure(lambda: None)
    values = []
    for block in blocks:
        value, _ = measure(block)
        values.append(value - start)
    return values, memory.example_peak_mib()


@needs_proc
@pytest.mark.parametrize("kind", ["pss", "rss-sampled"])
def test_a_page_reads_its_own_peak_even_after_a_larger_one(kind):
    if memory._process_mib(kind) is None:
        assert kind == "pss", "/proc/self/status has no VmRSS"
        pytest.skip("no /proc/self/smaps_rollup here (Linux before 4.14)")
    # In a fresh interpreter (see in_fresh_process), and held 1 s: the total is sampled
    # every 20 ms, less often when a sample takes long, as it does on a busy machine.
    (big, small), page = in_fresh_process(
        f"""
        from sphinxext import memory
        page({kind!r}, allocate(200, 1.0), allocate(50, 1.0))
        assert memory.kind() == {kind!r}
        assert memory.example_gpu_peak_mib() is None  # no GPU followed
        """
    )
    assert big >= 150, big
    # The growth of the process's lifetime peak would read 0 here.
    assert small >= 35, small
    assert page >= 150 and page == pytest.approx(max(big, small))


def small_objects():
    """About 200 MiB in 1 kB pieces: from the C heap, which keeps what is freed."""
    pieces = [bytearray(1000) for _ in range(200_000)]
    return len(pieces)


@needs_proc
def test_a_page_reusing_the_heap_an_earlier_page_freed_still_counts():
    run_page(HOST, small_objects)
    (value,), page = run_page(HOST, small_objects)
    assert value >= 150 and page >= 150, value


# The tests of pages that start processes, and those that time their samples, run in a
# fresh interpreter: in the suite, the test process has processes of its own (the site's
# build and notebook kernels started in the background, compile workers) that come and go
# while a test runs, and a page counts every process below it that it did not find
# running when it started; reading them also makes each sample slower.
# This file's run_page, imported there; ``page(...)`` prints what it returns.
FRESH = """
import json, os, subprocess, sys, time
sys.path[:0] = [{root!r}, {tests!r}]
from test_memory import MIB, allocate, run_page

def child(mib, hold=0.6):
    code = f"import time; data = b'x' * {{mib * MIB}}; time.sleep({{hold}})"
    return subprocess.Popen([sys.executable, "-c", code])

def page(kind, *blocks):
    print(json.dumps(run_page(kind, *blocks)))
"""


def in_fresh_process(body):
    """Run ``body`` after FRESH in a new interpreter; what its page(...) printed."""
    here = Path(__file__).parent
    code = FRESH.format(root=str(here.parent), tests=str(here)) + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


@needs_proc
def test_a_page_counts_the_processes_it_runs_at_the_same_moment():
    """The multi-GPU page's CPU path, the compile-time page: work in child processes. Two
    children alive together add up; two that run one after another do not."""
    (both, serial), page = in_fresh_process(
        f"""
        def together():
            kids = [child(150), child(150)]
            assert [kid.wait() for kid in kids] == [0, 0]

        def one_after_another():
            for _ in range(2):
                assert child(150).wait() == 0

        page({HOST!r}, together, one_after_another)
        """
    )
    assert both >= 280, both
    assert 130 <= serial < 230, serial
    assert page == pytest.approx(both)


@needs_proc
def test_memory_shared_with_a_child_counts_once():
    """A forked child shares its parent's pages: the resident sets of the two would count
    them twice, the proportional set sizes once."""
    if HOST != "pss":
        pytest.skip("no /proc/self/smaps_rollup here (Linux before 4.14)")
    (value,), _ = in_fresh_process(
        """
        def fork_and_hold():
            data = b"x" * (200 * MIB)
            pid = os.fork()
            if pid == 0:  # the child only holds the parent's pages
                time.sleep(0.6)
                os._exit(0)
            os.waitpid(pid, 0)
            return len(data)

        page("pss", fork_and_hold)
        """
    )
    assert 150 <= value < 300, value


@needs_proc
def test_the_measure_matches_the_kernels_peak_of_one_process():
    """Against what /usr/bin/time -v reports for a single process: its peak resident set."""
    (value,), _ = in_fresh_process(
        f"""
        def block():
            child(300, 0.5).wait()

        page({HOST!r}, block)
        """
    )
    assert 290 <= value < 360, value


@needs_proc
def test_a_page_with_no_work_reads_near_zero_not_more():
    (value,), page = in_fresh_process(f"page({HOST!r}, lambda: None)")
    assert 0 <= page < 20 and value < 20


def test_an_unmeasured_page_says_so():
    (value,), page = run_page(None, allocate(1))
    assert memory.example_gpu_peak_mib() is None
    assert math.isnan(value) and page is None
    # sphinx-gallery's footer of that page, and its row on the execution-times page.
    footer = f"text\n\n**Estimated memory usage:** {math.nan: .0f} MB\n\n"
    source = [footer]
    memory._footer(None, "recipes/demo", source)
    assert source == ["text\n\n**Estimated memory usage:** not measured\n\n"]
    times = [f"   * - demo\n     - 00:01.000\n     - {math.nan:.1f} MB\n"]
    memory._footer(None, "sg_execution_times", times)
    assert "not measured" in times[0] and "nan" not in times[0]


def test_the_measure_pickles_for_parallel_builds():
    measure = memory.PeakMemory()
    assert is_serializable(measure)
    assert pickle.loads(pickle.dumps(measure)) == measure
    assert repr(measure) == "sphinxext.memory.PeakMemory()"


def _page_in_a_worker(mib):
    """A page in a joblib worker, as `make html JOBS=2` runs it."""
    values, page = run_page(memory.host_kind(), allocate(mib, 1.0))
    return page


@needs_proc
def test_the_measure_works_in_joblib_workers():
    from joblib import Parallel, delayed

    pages = Parallel(n_jobs=2, backend="loky")(
        delayed(_page_in_a_worker)(mib) for mib in (200, 60)
    )
    assert pages[0] >= 150 and pages[1] >= 40, pages


@pytest.mark.parametrize(
    "device, gpu, shown",
    [
        ("NVIDIA H100 80GB HBM3", 2048.6, "2049 MB of GPU memory"),
        ("2 x NVIDIA H100 80GB HBM3", None, "GPU memory of its worker processes not"),
        ("CPU (Some CPU)", None, None),
    ],
)
def test_a_gpu_page_footer_shows_host_and_gpu_memory(tmp_path, device, gpu, shown):
    """On a GPU the footer gives both: host memory (sphinx-gallery's figure), then the
    CUDA allocator's peak from the page's run record; a multi-GPU page says its GPUs'
    memory is not measured; a CPU page shows the host figure alone."""
    from types import SimpleNamespace

    from tools import gallery

    (tmp_path / "recipes").mkdir()
    record = gallery.RunRecord(
        source="recipes_source/demo.py",
        checksum="0",
        passed=True,
        device=device,
        torch="2.11.0",
        triton=None,
        python="3.12.3",
        date="2026-11-26",
        seconds=1.0,
        peak_memory_mib=812.4,
        peak_memory_kind="pss",
        how="build",
        gpu_peak_memory_mib=gpu,
    )
    gallery.write_record(tmp_path / "recipes" / f"demo{gallery.RECORD_SUFFIX}", record)
    source = ["text\n\n**Estimated memory usage:**  812 MB\n\n"]
    memory._footer(SimpleNamespace(srcdir=str(tmp_path)), "recipes/demo", source)
    if shown is None:
        assert source == ["text\n\n**Estimated memory usage:**  812 MB\n\n"]
    else:
        assert f"812 MB of host memory, {shown}" in source[0]
