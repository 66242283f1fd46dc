"""Record each example's run: the build's half of the run records (tools/gallery.py).

Named in conf.py in ``sphinx_gallery_conf["reset_modules"]``, after the resetter, so
that its clock starts on a clean state. After an example it writes
``<gallery>/<stem>.record.json`` beside the generated page; ``sphinxext.verified_on`` shows it
on the page and gathers the records into the build report.
"""

import time

from sphinxext import memory
from tools import gallery

_started = {}


def record_run(gallery_conf, fname, when):
    """Start the clock before an example; write its run record after it."""
    if when == "before":
        memory.start_example()
        _started[fname] = time.perf_counter()
        return
    seconds = time.perf_counter() - _started.pop(fname)
    for tutorial in gallery.tutorials(gallery_conf["src_dir"]):
        if tutorial.source.endswith(f"/{fname}"):
            break
    else:
        raise FileNotFoundError(
            f"{fname} is in none of {gallery_conf['examples_dirs']}"
        )
    page = tutorial.generated(gallery_conf["src_dir"])
    source = gallery.checksum(page.with_suffix(".py"))  # the copy that just ran
    # sphinx-gallery writes its checksum only after a run without an exception.
    md5 = page.with_suffix(".py.md5")
    passed = md5.is_file() and md5.read_text().strip() == source
    record = gallery.RunRecord(
        source=tutorial.source,
        checksum=source,
        passed=passed,
        **gallery.environment(),
        date=gallery.today(),
        seconds=round(seconds, 2),
        peak_memory_mib=round(memory.example_peak_mib(), 1),
        peak_memory_kind=memory.kind(),
        how="build",
    )
    gallery.write_record(page.with_suffix(gallery.RECORD_SUFFIX), record)
