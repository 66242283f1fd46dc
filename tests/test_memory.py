"""sphinxext.memory: a page's footer and run record hold that page's own peak, never a
made-up 0, in the main process and in the workers of a parallel build (no site build here)."""

import math
import pickle
import subprocess
import sys
import time

import pytest
from sphinx.config import is_serializable

from sphinxext import memory

MIB = 2**20
RSS = memory.rss_kind()
needs_proc = pytest.mark.skipif(RSS is None, reason="no /proc/self/status here")


def allocate(mib, hold=0.0):
    """A code block that allocates and touches ``mib`` MiB, holds it, and frees it."""

    def block():
        data = b"x" * (mib * MIB)
        time.sleep(hold)
        return len(data)

    return block


def run_page(kind, *blocks):
    """Run ``blocks`` as sphinx-gallery runs a page's code blocks under show_memory: a no-op
    first, then each block; return each block's value as the footer counts it, and the
    page's peak as its run record holds it."""
    memory.start_example(kind)
    measure = memory.PeakMemory()
    start, _ = measure(lambda: None)
    values = []
    for block in blocks:
        value, _ = measure(block)
        values.append(value - start)
    return values, memory.example_peak_mib()


def kinds():
    found = []
    if memory.rss_kind() == "rss-peak":
        found.append("rss-peak")
    found.append("rss-sampled")  # the fallback, wherever /proc/self/status exists
    return found


@needs_proc
@pytest.mark.parametrize("kind", kinds())
def test_a_page_reads_its_own_peak_even_after_a_larger_one(kind):
    # Held 0.2 s: the sampling fallback reads every 20 ms.
    (big, small), page = run_page(kind, allocate(200, 0.2), allocate(50, 0.2))
    assert big >= 150, big
    # The growth of the process's lifetime peak would read 0 here.
    assert small >= 35, small
    assert page >= 150 and page == pytest.approx(max(big, small))
    assert memory.kind() == kind


def small_objects():
    """About 200 MiB in 1 kB pieces: from the C heap, which keeps what is freed."""
    pieces = [bytearray(1000) for _ in range(200_000)]
    return len(pieces)


@needs_proc
def test_a_page_reusing_the_heap_an_earlier_page_freed_still_counts():
    run_page(RSS, small_objects)
    (value,), page = run_page(RSS, small_objects)
    assert value >= 150 and page >= 150, value


@needs_proc
def test_a_page_counts_the_processes_it_started():
    """The multi-GPU page's CPU path runs its work in worker processes."""
    code = f"import time; data = b'x' * {200 * MIB}; time.sleep(0.5)"

    def block():
        subprocess.run([sys.executable, "-c", code], check=True)

    (value,), page = run_page(RSS, block)
    assert value >= 150, value
    assert page >= 150


@needs_proc
def test_a_page_with_no_work_reads_near_zero_not_more():
    (value,), page = run_page(RSS, lambda: None)
    assert 0 <= page < 20 and value < 20


def test_an_unmeasured_page_says_so():
    (value,), page = run_page(None, allocate(1))
    assert math.isnan(value) and page is None
    # sphinx-gallery's footer of that page, and its row on the execution-times page.
    footer = f"text\n\n**Estimated memory usage:** {math.nan: .0f} MB\n\n"
    source = [footer]
    memory._not_measured(None, "recipes/demo", source)
    assert source == ["text\n\n**Estimated memory usage:** not measured\n\n"]
    times = [f"   * - demo\n     - 00:01.000\n     - {math.nan:.1f} MB\n"]
    memory._not_measured(None, "sg_execution_times", times)
    assert "not measured" in times[0] and "nan" not in times[0]


def test_the_measure_pickles_for_parallel_builds():
    measure = memory.PeakMemory()
    assert is_serializable(measure)
    assert pickle.loads(pickle.dumps(measure)) == measure
    assert repr(measure) == "sphinxext.memory.PeakMemory()"


def _page_in_a_worker(mib):
    """A page in a joblib worker, as `make html JOBS=2` runs it."""
    values, page = run_page(memory.rss_kind(), allocate(mib, 0.2))
    return page


@needs_proc
def test_the_measure_works_in_joblib_workers():
    from joblib import Parallel, delayed

    pages = Parallel(n_jobs=2, backend="loky")(
        delayed(_page_in_a_worker)(mib) for mib in (200, 60)
    )
    assert pages[0] >= 150 and pages[1] >= 40, pages
