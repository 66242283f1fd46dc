"""Record each example's run: the build's half of the run records (tools/gallery.py).

Named in conf.py in ``sphinx_gallery_conf["reset_modules"]``, after the resetter, so
that its clock starts on a clean state. Before an example it works out the device the page
runs on (tools.gallery.environment: a "multi-gpu" page on two GPUs, or on the CPU where the
machine has fewer) and tells ``sphinxext.memory`` what to measure; after it, it writes
``<gallery>/<stem>.record.json`` beside the generated page; ``sphinxext.verified_on`` shows it
on the page and gathers the records into the build report.
"""

import json
import os
import sys
import time
from pathlib import Path

from sphinxext import memory, profiling
from tools import gallery

HEADLINES_FILE = "MEASURE_HEADLINES"  # measure.HEADLINES_FILE: where headline() writes
_started = {}  # fname -> (clock, environment, runner label)


def _tutorial(gallery_conf, fname):
    for tutorial in gallery.tutorials(gallery_conf["src_dir"]):
        if tutorial.source.endswith(f"/{fname}"):
            return tutorial
    raise FileNotFoundError(f"{fname} is in none of {gallery_conf['examples_dirs']}")


def page_headlines(gallery_conf, tutorial):
    """Where the page's headline results are written while it runs."""
    page = tutorial.generated(gallery_conf["src_dir"])
    return page.with_suffix(".headlines.json")


def record_run(gallery_conf, fname, when):
    """Start the clock before an example; write its run record after it."""
    tutorial = _tutorial(gallery_conf, fname)
    if when == "before":
        label = gallery.runner_label(Path(gallery_conf["src_dir"]) / tutorial.source)
        facts = gallery.machine()
        env = gallery.environment(label, facts)
        memory.start_example(memory.kind_for(gallery.run_device(facts, label)["gpus"]))
        profiling.start_example()
        headlines = page_headlines(gallery_conf, tutorial)
        headlines.unlink(missing_ok=True)
        os.environ[HEADLINES_FILE] = str(headlines)
        if "measure" in sys.modules:  # the core of the page before: its results are its
            sys.modules["measure"].HEADLINES.clear()
        host = gallery.host_facts()
        _started[fname] = (time.perf_counter(), env, label, host)
        return
    start, env, label, host = _started.pop(fname)
    seconds = time.perf_counter() - start
    host = gallery.host_record(host, gallery.host_facts())
    os.environ.pop(HEADLINES_FILE, None)
    headlines = page_headlines(gallery_conf, tutorial)
    headlines = json.loads(headlines.read_text()) if headlines.is_file() else None
    page = tutorial.generated(gallery_conf["src_dir"])
    source = gallery.checksum(page.with_suffix(".py"))  # the copy that just ran
    # sphinx-gallery writes its checksum only after a run without an exception.
    md5 = page.with_suffix(".py.md5")
    passed = md5.is_file() and md5.read_text().strip() == source
    peak = memory.example_peak_mib()
    gpu_peak = memory.example_gpu_peak_mib()
    record = gallery.RunRecord(
        source=tutorial.source,
        checksum=source,
        passed=passed,
        **env,
        date=gallery.today(),
        seconds=round(seconds, 2),
        peak_memory_mib=None if peak is None else round(peak, 1),
        peak_memory_kind=None if peak is None else memory.kind(),
        gpu_peak_memory_mib=None if gpu_peak is None else round(gpu_peak, 1),
        how="build",
        headlines=headlines,
        host=host,
        # A multi-GPU page profiles inside the worker processes it starts: not seen here.
        profiler_seconds=None
        if label == gallery.MULTI_GPU
        else round(profiling.example_seconds(), 2),
    )
    gallery.write_record(page.with_suffix(gallery.RECORD_SUFFIX), record)
