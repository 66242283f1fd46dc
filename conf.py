"""Sphinx configuration for the torch.compile tutorials site.

Declarative settings only. Behaviour lives in ``sphinxext/`` and is named here by dotted
string (sphinx-gallery resolves those names itself, which keeps the configuration
picklable for its parallel mode); show_memory takes an object, whose class gives it a fixed
repr and equality.
"""

import os
import sys

import pytorch_sphinx_theme2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sphinx.config  # noqa: E402

from sphinxext import memory  # noqa: E402
from tools import gallery  # noqa: E402

project = "Learn torch.compile"
author = "torch.compile tutorials team"
copyright = "2026, torch.compile tutorials team"

extensions = [
    "sphinx_gallery.gen_gallery",
    "sphinx_design",
    "sphinx_copybutton",
    "sphinxext.verified_on",
    "sphinxext.failures",
    "sphinxext.notebooks",
    "sphinxext.reports",
    "sphinxext.core",
]

exclude_patterns = [
    "_build",
    ".venv",
    ".cache",
    ".tmp",
    ".verify",
    "wheelhouse",
    "README.md",
    "recipes_source",
    "intermediate_source",
    "**/*.ipynb",
    "**/*.md5",
    "**/*.codeobj.json",
    "tests",
    "tools",
    "records",
]

sphinx_gallery_conf = {
    # The folders and the ignore pattern are tools/gallery.py's, which the tools share.
    "examples_dirs": list(gallery.GALLERIES),
    "gallery_dirs": list(gallery.GALLERIES.values()),
    # `make html-one PATTERN=...` executes only the tutorials whose path matches.
    "filename_pattern": os.environ.get("GALLERY_PATTERN") or r"\.py$",
    # `make html JOBS=2` executes two tutorials of a gallery at a time. One by default:
    # tutorials side by side share the machine, and so would their printed timings.
    "parallel": int(os.environ.get("GALLERY_JOBS") or 1),
    "ignore_pattern": gallery.IGNORE_PATTERN,
    "within_subsection_order": "sphinxext.order.ReadingOrder",
    # The recorder comes last: its clock starts after the reset.
    "reset_modules": (
        "matplotlib",
        "sphinxext.reset.reset_compiler_state",
        "sphinxext.record.record_run",
    ),
    "reset_modules_order": "both",
    # sphinx-gallery takes a callable object here, not a dotted name.
    "show_memory": memory.PeakMemory(),
    "download_all_examples": True,
    "remove_config_comments": True,
    # States the PyTorch the page needs and installs requirements.txt's tutorial packages.
    "first_notebook_cell": gallery.first_notebook_cell(),
    "promote_jupyter_magic": True,
    "write_computation_times": True,
    "min_reported_time": 0,
    # One <testcase> per executed tutorial, for CI's test report (beside the html folder).
    "junit": os.path.join("..", "test-results", "sphinx-gallery.xml"),
}
# Sphinx pickles the configuration; from Sphinx 7.3 an unpicklable value fails a -W build.
assert sphinx.config.is_serializable(sphinx_gallery_conf), (
    "sphinx_gallery_conf: use names or objects"
)

html_theme = "pytorch_sphinx_theme2"
html_theme_path = [pytorch_sphinx_theme2.get_html_theme_path()]
templates_path = [
    "_templates",
    os.path.join(pytorch_sphinx_theme2.get_html_theme_path(), "templates"),
]
html_static_path = ["_static"]
html_css_files = ["site.css"]
html_title = "Learn torch.compile"
html_context = {
    "theme_variables": pytorch_sphinx_theme2.get_theme_variables(),
    "display_github": False,
    "default_mode": "auto",
}
html_theme_options = {
    "navbar_start": ["navbar-logo"],
    "navbar_center": ["navbar-nav"],
    "navbar_end": ["search-field-custom", "theme-switcher"],
    "use_edit_page_button": False,
    "show_lf_header": False,
    "show_lf_footer": False,
    "article_header_end": [],
    "article_footer_items": [],
    "secondary_sidebar_items": ["page-toc"],
    "show_pytorch_org_link": False,
    "logo": {"text": "Learn torch.compile"},
}
html_show_sourcelink = False
