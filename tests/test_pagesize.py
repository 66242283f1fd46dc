"""Every tutorial stays within the house budget for its length (../shared/STYLE.md, "Lean
pages"): source lines, lines of code and functions, as tools.pagesize counts them."""

import pytest
from conftest import tutorial_sources

from tools import pagesize

SIZES = pagesize.sizes()


def test_counting_leaves_out_prose_and_docstrings(tmp_path):
    path = tmp_path / "page.py"
    path.write_text(
        '"""Title\n\nprose\n"""\n\n# %%\n# prose\nx = 1\n\n\ndef f():\n    """Doc."""\n    return (\n        x\n    )\n'
    )
    size = pagesize.measure(path)
    assert (size.lines, size.code, size.functions) == (15, 5, 1)


def test_every_tutorial_is_sized():
    """The parametrization below covers every tutorial (pytest.ini makes an empty one an
    error at collection)."""
    assert sorted(s.source for s in SIZES) == sorted(map(str, tutorial_sources()))


@pytest.mark.parametrize("size", SIZES, ids=[s.source for s in SIZES])
def test_tutorial_fits_its_budget(size):
    lines, code, functions = size.budget()
    assert size.lines <= lines, (
        f"{size.source}: {size.lines} source lines, budget {lines}"
    )
    assert size.code <= code, f"{size.source}: {size.code} lines of code, budget {code}"
    assert size.functions <= functions, (
        f"{size.source}: {size.functions} functions, budget {functions}"
    )
