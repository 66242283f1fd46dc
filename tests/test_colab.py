"""The downloadable notebooks work when opened on Colab or in a fresh Jupyter.

Static checks of the notebooks in the built site (no kernel): each asks Colab for a GPU
runtime, and its first cell installs every third-party package the notebook imports.
tests/test_notebooks.py runs notebooks on a real kernel.
"""

import ast
import json
import shlex
import sys

import pytest
from conftest import tutorial_sources

from sphinxext.colab import COLAB_METADATA

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


def code_cells(notebook):
    return ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]


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
    missing = set().union(*map(imported_packages, rest)) - installed
    assert not missing, (
        f"{source.name} imports {sorted(missing)}, which the first notebook cell "
        "(conf.py: sphinx_gallery_conf['first_notebook_cell']) does not install"
    )
