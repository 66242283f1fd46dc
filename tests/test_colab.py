"""The downloadable notebooks work when opened on Colab or in a fresh Jupyter.

Static checks of the notebooks in the built site (no kernel): each asks Colab for a GPU
runtime, its first cell states the PyTorch it needs and installs every third-party package
the notebook imports, and its markdown cells hold markdown, not reST directives or roles
(sphinxext/notebooks.py). tests/test_notebooks.py runs notebooks on a real kernel.
"""

import ast
import json
import re
import shlex
import sys
from collections import defaultdict

import pytest
from conftest import ROOT, tutorial_sources
from sphinx_gallery import notebook

from sphinxext.notebooks import COLAB_METADATA, page_titles, rst_for_notebook
from tools import gallery

SOURCES = tutorial_sources()
# Where an import name is not the name pip installs it by. PyTorch's own CUDA wheels bring
# triton; Jupyter brings IPython.
PIP_NAMES = {
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "yaml": "pyyaml",
    "cv2": "opencv-python",
    "bs4": "beautifulsoup4",
    "skimage": "scikit-image",
    "triton": "torch",
    "functorch": "torch",
    "IPython": None,
}


def notebook_of(site, source):
    (path,) = (site / "_downloads").rglob(f"{source.stem}.ipynb")
    return json.loads(path.read_text(encoding="utf-8"))


def cells(notebook, kind):
    return ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == kind]


def code_cells(notebook):
    return cells(notebook, "code")


# reST left in markdown: a directive (".. note::") or a role (":ref:`x`").
_DIRECTIVE = re.compile(r"^[ \t]*\.\. \w[\w-]*(?::[\w-]+)*::", re.MULTILINE)
_ROLE = re.compile(r":\w[\w-]*(?::[\w-]+)*:`")
# Code in markdown, which may show anything: fenced blocks, and inline code as reST writes
# it (``x``). A single backtick is left: it is part of every role.
_CODE = re.compile(r"^```.*?^```|``.+?``", re.MULTILINE | re.DOTALL)


def rest_left_in(markdown):
    """The reST directives and roles in ``markdown``, outside its code."""
    prose = _CODE.sub("", markdown)
    return [
        m.group(0).strip()
        for m in (*_DIRECTIVE.finditer(prose), *_ROLE.finditer(prose))
    ]


def imported_packages(code):
    """Top-level names of the third-party modules ``code`` imports (anywhere, nested
    imports included), as pip names."""
    # IPython magics and shell escapes are not Python.
    python = "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line
        for line in code.splitlines()
    )
    names = set()
    for node in ast.walk(ast.parse(python)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    third_party = names - set(sys.stdlib_module_names) - {"__future__"}
    packages = {
        PIP_NAMES.get(name, name.lower().replace("_", "-")) for name in third_party
    }
    return packages - {None}


def installed_by(cell):
    """The packages a ``%pip install`` cell names (options and version bounds dropped)."""
    packages = set()
    for line in cell.splitlines():
        words = shlex.split(line)
        if words[:2] in (["%pip", "install"], ["!pip", "install"]):
            for word in words[2:]:
                if not word.startswith("-"):
                    name = word.split(";")[0]
                    for mark in "<>=!~[":
                        name = name.split(mark)[0]
                    packages.add(name.strip().lower().replace("_", "-"))
    return packages


def test_imports_are_read_as_pip_names():
    code = "import numpy as np\nfrom PIL import Image\nimport os, json\n"
    code += "%matplotlib inline\nif True:\n    import triton.testing\nfrom . import x\n"
    assert imported_packages(code) == {"numpy", "pillow", "torch"}
    assert installed_by("# hi\n%pip install -q 'torch>=2.9' tabulate") == {
        "torch",
        "tabulate",
    }


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_notebook_asks_colab_for_a_gpu(built_site, source):
    site, _ = built_site
    metadata = notebook_of(site, source)["metadata"]
    for key, value in COLAB_METADATA.items():
        assert metadata.get(key) == value, key


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_first_cell_installs_every_third_party_import(built_site, source):
    site, _ = built_site
    first, *rest = code_cells(notebook_of(site, source))
    installed = installed_by(first)
    assert installed, f"the first code cell installs nothing:\n{first}"
    # the measurement core comes in a cell of its own (sphinxext/core.py), not from PyPI
    carried = {"measure"} if any(gallery.CORE_CELL_MARK in c for c in rest) else set()
    missing = set().union(*map(imported_packages, rest)) - installed - carried
    assert not missing, (
        f"{source.name} imports {sorted(missing)}, which the first notebook cell "
        "(conf.py: sphinx_gallery_conf['first_notebook_cell']) does not install"
    )


CARDS = """
Title
=====

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How to do it, see :ref:`foreach_map_recipe` and
         :ref:`the intro <torch_compile_tutorial>`
       * Why :func:`~torch.compile` helps

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later :bdg-info:`new`

.. note::

   A note, with a link `here <https://example.com>`__.

   .. code-block:: rst

      .. note:: shown as code, left alone
"""


def test_cards_notes_and_roles_become_markdown():
    titles = page_titles(ROOT)
    plain = rst_for_notebook(CARDS, titles)
    assert "**What you will learn**\n\n* How to do it, see *" in plain
    assert f"*{titles['foreach_map_recipe']}*" in plain
    assert "*the intro*" in plain and "``torch.compile``" in plain
    assert "**Prerequisites**\n\n* PyTorch 2.9 or later new" in plain
    assert "**Note:** A note" in plain
    assert "class-card" not in plain and "octicon" not in plain
    # Then through sphinx-gallery's own converter, as the build does (importing sphinxext
    # wrapped it in this process; the wrapper's inner function is sphinx-gallery's).
    rst2md = getattr(notebook.rst2md, "__wrapped__", notebook.rst2md)
    markdown = rst2md(plain, {}, ROOT, defaultdict(lambda: 1))
    assert "[here](https://example.com)." in markdown  # no "_" left after it
    assert "```rst\n.. note:: shown as code, left alone\n```" in markdown
    assert rest_left_in(markdown) == []
    # The detector finds what the converter removes.
    assert set(rest_left_in(CARDS)) == {
        ".. grid::", ".. grid-item-card::", ".. note::", ".. code-block::",
        ":octicon:`", ":ref:`", ":func:`", ":bdg-info:`",
    }  # fmt: skip


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_markdown_cells_hold_no_rest(built_site, source):
    site, _ = built_site
    markdown = cells(notebook_of(site, source), "markdown")
    left = {i: rest_left_in(cell) for i, cell in enumerate(markdown)}
    left = {i: found for i, found in left.items() if found}
    assert not left, (
        f"{source.name}: reST left in markdown cells (cell: found) {left}; "
        "sphinxext/notebooks.py converts directives and roles"
    )
    # The cards read as markdown.
    assert any(cell.count("**What you will learn**\n") for cell in markdown)
    assert any(cell.count("**Prerequisites**\n") for cell in markdown)


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_first_cell_states_and_installs_the_minimum_pytorch(built_site, source):
    site, _ = built_site
    first = code_cells(notebook_of(site, source))[0]
    torch = gallery.minimum("torch")
    assert f"PyTorch {torch} or later" in first
    assert f'"torch>={torch}"' in first
