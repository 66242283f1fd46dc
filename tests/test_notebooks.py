"""Every notebook the site offers for download runs, top to bottom, on a real Jupyter kernel.

The notebooks are the ones in the built site (``_downloads/``), the files a reader gets.
Each runs with nbclient on an ipykernel kernel, on the CPU, in an empty working directory,
as a reader's fresh Jupyter would: the first cell's ``%pip install`` included (everything
is installed already, so it is quick). Two kernels run at a time: one tutorial leaves much
of a 2-core CPU idle, and on one like CI's two tutorials side by side took 35 s where one
after the other took 59 s (compiling_optimizer and foreach_map, PyTorch 2.14.1,
2026-11-25). The runs of the selected notebooks start right after the build, in the
background (``conftest.notebook_runs``, ``conftest.JOBS`` at a time), and each test waits
for its own.

The build has already executed every tutorial's code once; what a kernel run adds is the
notebook form (the generated cells, the install cell, a fresh kernel in an empty folder),
which is the same machinery for every tutorial. So the default suite runs the quickest
notebook of each gallery (by the committed CPU run records, tools/gallery.py; the smallest
file where none exists), and the rest are marked ``slow``: ``make test-all`` (GitHub's
test workflow) runs them all. ``make test`` (and CI's .ci/run) checks every notebook's code
against its script instead (``test_notebook_holds_the_scripts_code``): what the build ran.
"""

import nbclient
import nbformat
import pytest
from conftest import ROOT, tutorial_sources
from sphinx_gallery.py_source_parser import split_code_and_text_blocks

from tools import gallery

SOURCES = tutorial_sources()


def quickest_of_each_gallery(sources):
    """Per gallery, the tutorial whose current source ran fastest on a CPU as a script."""
    seconds = {}
    for records in gallery.read_records(ROOT).values():
        for r in records:
            if (
                r.how == "script"
                and r.passed
                and r.device.startswith("CPU")
                and r.current(ROOT)
            ):
                seconds[r.source] = min(r.seconds, seconds.get(r.source, r.seconds))
    quickest = {}
    for source in sources:
        # Without a record, the file size stands in for the run time (after every recorded one).
        key = (
            str(source) not in seconds,
            seconds.get(str(source), 0),
            (ROOT / source).stat().st_size,
        )
        if source.parts[0] not in quickest or key < quickest[source.parts[0]][0]:
            quickest[source.parts[0]] = (key, source)
    return {source for _, source in quickest.values()}


QUICK = quickest_of_each_gallery(SOURCES)
NOTEBOOKS = [
    pytest.param(s, id=str(s), marks=() if s in QUICK else pytest.mark.slow)
    for s in SOURCES
]


@pytest.mark.parametrize("source", NOTEBOOKS)
def test_notebook_runs(built_site, notebook_runs, source):
    try:
        notebook = notebook_runs[source].result()
    except nbclient.exceptions.CellExecutionError as error:
        pytest.fail(f"{source.stem}.ipynb: a cell failed:\n{error}", pytrace=False)

    code_cells = [c for c in notebook.cells if c.cell_type == "code"]
    assert code_cells and all(c.execution_count for c in code_cells)


def code_lines(text):
    """A code block's lines, without blank lines and sphinx-gallery's config comments."""
    lines = (ln.rstrip() for ln in text.splitlines())
    return [
        ln for ln in lines if ln and not ln.lstrip().startswith("# sphinx_gallery_")
    ]


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_notebook_holds_the_scripts_code(built_site, source):
    """Every notebook's code cells after the install cell are the tutorial's code blocks,
    split as the build split them to execute them, and none reads ``__file__`` (a kernel
    has none). With the build's run of every script and the kernel runs above, this
    covers every notebook in ``make test``; ``make test-all`` runs each on a kernel."""
    site, _ = built_site
    (path,) = sorted((site / "_downloads").rglob(f"{source.stem}.ipynb"))
    notebook = nbformat.read(path, as_version=4)
    cells = [code_lines(c.source) for c in notebook.cells if c.cell_type == "code"]
    blocks = split_code_and_text_blocks(str(ROOT / source))[1]
    code = [code_lines(text) for label, text, _ in blocks if label == "code"]
    # after the install cell, the measurement core's cell (sphinxext/core.py), then the page
    assert gallery.CORE_CELL_MARK in "\n".join(cells[1])
    assert [c for c in cells[2:] if c] == [c for c in code if c]
    assert not any("__file__" in line for cell in cells[2:] for line in cell)
