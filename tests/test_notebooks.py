"""Every notebook the site offers for download runs, top to bottom, on a real Jupyter kernel.

The notebooks are the ones in the built site (``_downloads/``), the files a reader gets.
Each runs with nbclient on an ipykernel kernel, on the CPU, in an empty working directory,
as a reader's fresh Jupyter would: the first cell's ``%pip install`` included (everything
is installed already, so it is quick). Two kernels run at a time: one tutorial leaves much
of a 2-core CPU idle, and on one like CI's two tutorials side by side took 35 s where one
after the other took 59 s (compiling_optimizer and foreach_map, PyTorch 2.14.1,
2026-11-25). The runs of the selected notebooks start right after the build, in the
background (``conftest.notebook_runs``, ``conftest.JOBS`` at a time), and each test waits
for its own; the measuring recipe's, which checks timed known answers, runs alone first
(``conftest.QUIET``).

The build has already executed every tutorial's code once; what a kernel run adds is the
notebook form (the generated cells, the install cell, the core's cell, a fresh kernel in an
empty folder), which is the same machinery for every tutorial of either gallery. So the
default suite runs the quickest notebook (by the committed CPU run records,
tools/gallery.py; the smallest file where none exists: the measuring recipe, 5 s as a
script), and the rest are marked ``slow``: ``make test-all`` (GitHub's test workflow) runs
them all. (It ran the quickest of each gallery until 2026-11-28: the intermediate one added
about 45 s of CPU to ``make test`` and nothing the first did not cover.) ``make test``
(and CI's .ci/run) checks every notebook's code against its script instead
(``test_notebook_holds_the_scripts_code``): what the build ran, read from the script by a
route of its own (``ast`` and ``tokenize``), not by the sphinx-gallery splitter that made
the notebook.
"""

import ast
import io
import re
import tokenize

import nbclient
import nbformat
import pytest
from conftest import ROOT, tutorial_sources

from tools import gallery

SOURCES = tutorial_sources()


def quickest(sources):
    """The tutorial whose current source ran fastest on a CPU as a script."""
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
    # Without a record, the file size stands in for the run time (after every recorded one).
    return min(
        sources,
        key=lambda source: (
            str(source) not in seconds,
            seconds.get(str(source), 0),
            (ROOT / source).stat().st_size,
        ),
    )


QUICK = quickest(SOURCES)
NOTEBOOKS = [
    pytest.param(s, id=str(s), marks=() if s == QUICK else pytest.mark.slow)
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


# A block separator: a comment "# %%" (or a line of 20 and more "#") at a line's start.
SEPARATOR = re.compile(r"# ?%%|#{20,}")


def script_code_blocks(path):
    """The code blocks of a tutorial script, read on their own: the docstring's end from
    ``ast``; the separators from ``tokenize``, as comments at column 0 (so a "# %%" in a
    string is not one); under each separator, its text (the comment lines right below it),
    then its code. Each block as ``code_lines``; empty blocks left out."""
    text = path.read_text(encoding="utf-8")
    first = ast.parse(text).body[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant), (
        f"{path}: no docstring"
    )
    separators = [
        token.start[0]
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type == tokenize.COMMENT
        and token.start[1] == 0
        and SEPARATOR.match(token.string)
    ]
    lines = text.splitlines()
    bounds = [first.end_lineno, *separators, len(lines) + 1]  # 1-based line numbers
    blocks = []
    for i, (after, before) in enumerate(zip(bounds, bounds[1:])):
        block = lines[after : before - 1]
        if i > 0:  # below a separator: its text first
            while block and block[0].startswith("#"):
                block = block[1:]
        blocks.append(code_lines("\n".join(block)))
    return [block for block in blocks if block]


def notebook_problems(notebook, source):
    """A notebook against its script: its first code cell is the install cell
    (tools.gallery.first_notebook_cell), the second the measurement core's
    (sphinxext/core.py), and the others are the script's code blocks, in order; no cell
    after the core's reads ``__file__`` (a kernel has none)."""
    cells = [c.source for c in notebook.cells if c.cell_type == "code"]
    if len(cells) < 3:
        return [f"{len(cells)} code cells"]
    problems = []
    if cells[0].strip() != gallery.first_notebook_cell(ROOT).strip():
        problems.append(
            f"the first code cell is not the install cell: {cells[0][:80]!r}"
        )
    if cells[1] != gallery.core_block(ROOT):
        problems.append(f"the second code cell is not the core's: {cells[1][:80]!r}")
    found = [code_lines(c) for c in cells[2:] if code_lines(c)]
    expected = script_code_blocks(source)
    if found != expected:
        at = next(
            (i for i, (a, b) in enumerate(zip(found, expected)) if a != b),
            min(len(found), len(expected)),
        )
        problems.append(
            f"{len(found)} code cells after the core's, {len(expected)} code blocks in "
            f"the script; the first difference at block {at + 1}"
        )
    if any("__file__" in line for cell in found for line in cell):
        problems.append("a cell reads __file__")
    return problems


SCRIPT = '''"""
Title
=====

A "# %%" in the docstring is not a separator.
"""

import torch

# %%
# Text under a separator.
#
# More text.

x = torch.ones(2)  # a comment stays
s = """
# %% inside a string: not a separator
"""

# %%
# sphinx_gallery_thumbnail_number = 1
print(x)
'''


def crafted_notebook(*code):
    """A notebook as the site builds one: the install cell, the title's markdown, the
    core's cell, then ``code``."""
    v4 = nbformat.v4
    return v4.new_notebook(
        cells=[
            v4.new_code_cell(gallery.first_notebook_cell(ROOT)),
            v4.new_markdown_cell("# Title"),
            v4.new_code_cell(gallery.core_block(ROOT)),
            *(v4.new_code_cell(c) for c in code),
        ]
    )


def test_the_notebook_check_can_fail(tmp_path):
    source = tmp_path / "page.py"
    source.write_text(SCRIPT)
    blocks = [
        "import torch",
        'x = torch.ones(2)  # a comment stays\ns = """\n# %% inside a string: not a separator\n"""',
        "print(x)",
    ]
    assert script_code_blocks(source) == [code_lines(b) for b in blocks]
    assert notebook_problems(crafted_notebook(*blocks), source) == []

    dropped = crafted_notebook(*blocks)
    dropped.cells = dropped.cells[
        1:
    ]  # the install cell is gone: the core's comes first
    assert "not the install cell" in notebook_problems(dropped, source)[0]
    no_core = crafted_notebook(*blocks)
    no_core.cells[2].source = "import measure"
    assert "not the core's" in notebook_problems(no_core, source)[0]
    changed = crafted_notebook(blocks[0], blocks[1].replace("ones", "zeros"), blocks[2])
    assert notebook_problems(changed, source) == [
        "3 code cells after the core's, 3 code blocks in the script; "
        "the first difference at block 2"
    ]
    lost = crafted_notebook(*blocks[:2])
    assert (
        "2 code cells after the core's, 3 code blocks"
        in notebook_problems(lost, source)[0]
    )
    reads_file = crafted_notebook(*blocks, "print(__file__)")
    assert "a cell reads __file__" in notebook_problems(reads_file, source)


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_notebook_holds_the_scripts_code(built_site, source):
    """Every notebook opens with the install cell and the core's cell, then holds the
    tutorial's code blocks, read from the script on their own (``script_code_blocks``);
    none reads ``__file__``. With the build's run of every script and the kernel run above,
    this covers every notebook in ``make test``; ``make test-all`` runs each on a kernel."""
    site, _ = built_site
    (path,) = sorted((site / "_downloads").rglob(f"{source.stem}.ipynb"))
    notebook = nbformat.read(path, as_version=4)
    problems = notebook_problems(notebook, ROOT / source)
    assert problems == [], "\n".join(problems)
