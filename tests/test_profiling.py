"""sphinxext.profiling: the seconds a page spends under torch.profiler, for its run record
(the pages' profiler helper must cost at most a few seconds a page; no site build here)."""

import time

from torch.profiler import ProfilerActivity, profile, record_function

from sphinxext import profiling


def profiled_steps(seconds):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("step"):
            time.sleep(seconds)
    prof.key_averages()  # reads prof.events() inside: counted once
    return prof


def test_counts_the_profiled_block_and_reading_its_events_once():
    profiling.start_example()
    profiling.start_example()  # a second page in the same process: wrapped once
    time.sleep(0.05)  # outside the profiler: not counted
    start = time.perf_counter()
    profiled_steps(0.1)
    wall = time.perf_counter() - start
    got = profiling.example_seconds()
    assert 0.1 <= got <= wall + 1e-3, (got, wall)


def test_each_page_starts_from_zero():
    profiling.start_example()
    profiled_steps(0.02)
    assert profiling.example_seconds() >= 0.02
    profiling.start_example()
    assert profiling.example_seconds() == 0.0
