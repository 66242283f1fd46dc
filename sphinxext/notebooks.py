"""The downloadable notebooks: Colab's GPU runtime, and markdown a reader can read.

**Colab metadata.** Every tutorial times its work on a CUDA GPU (and falls back to the CPU
with smaller sizes), so each notebook asks Colab for a GPU runtime when it is opened there:
the notebook-level keys Colab itself writes when a notebook is saved with a GPU runtime,
``"accelerator": "GPU"`` and ``"colab": {"gpuType": "T4"}`` (the free tier's GPU). Jupyter
and other front ends ignore them.

**Markdown cells.** sphinx-gallery turns each text block's reST into markdown with its own
``rst2md``, which knows headings, math, images and code blocks, and leaves most other
directives and roles as raw text: the "What you will learn" and "Prerequisites" cards
(sphinx-design's ``grid``/``grid-item-card``, ``:octicon:`` icons) and ``:ref:`` links would
show as markup. :func:`rst_for_notebook` rewrites those into plain reST first:

* a directive with a title (a card, ``.. admonition:: Title``) becomes a bold line, then its
  content, dedented; a layout directive (``grid``) leaves only its content; an admonition
  (``.. note::``) becomes "**Note:** ..."; options (``:class-card:``) are dropped;
* icons (``:octicon:``) are dropped; ``:ref:``/``:doc:`` become the title of the page they
  name (a tutorial's label or path) or their own text, in italics; code roles (``:func:``)
  become code; any other role leaves its text.

sphinx-gallery has no setting for either, so this wraps two functions of
``sphinx_gallery.notebook``: ``jupyter_notebook_skeleton`` (which starts every notebook) and
``rst2md`` (which ``fill_notebook`` calls for each text block; with the ``pypandoc`` option,
which this site leaves off, pandoc converts instead). A sphinx-gallery release that renames
either fails the build here; tests/test_colab.py checks the built notebooks. Importing the
``sphinxext`` package installs the wrappers (``sphinxext/__init__.py``), in Sphinx's process
and in sphinx-gallery's parallel workers (``make html JOBS=2``), which never run ``setup``.
"""

import copy
import functools
import re
import textwrap
from pathlib import Path

from sphinx.errors import ExtensionError

from tools import gallery

COLAB_METADATA = {
    "accelerator": "GPU",
    "colab": {"gpuType": "T4", "provenance": []},
}

# Converted by sphinx-gallery's rst2md itself.
RST2MD_DIRECTIVES = {"code-block", "math", "image", "contents"}
# Only their content is kept.
LAYOUT_DIRECTIVES = {"grid", "grid-item", "container", "rst-class", "tab-set", "only"}
# Nothing of them is kept: they mean nothing outside the site.
DROPPED_DIRECTIVES = {"toctree", "index", "highlight", "meta", "minigallery"}
# Admonitions, and the words that introduce their content.
ADMONITIONS = {
    "note": "Note",
    "warning": "Warning",
    "tip": "Tip",
    "hint": "Hint",
    "important": "Important",
    "caution": "Caution",
    "attention": "Attention",
    "danger": "Danger",
    "error": "Error",
    "seealso": "See also",
    "versionadded": "New in version",
    "versionchanged": "Changed in version",
    "deprecated": "Deprecated since version",
}
# Admonitions whose argument is a version, not the first line of their content.
VERSIONED = {"versionadded", "versionchanged", "deprecated"}
DROPPED_ROLES = {"octicon", "fa", "fas", "far", "fab", "icon"}
LINK_ROLES = {"ref", "doc", "any", "numref"}
CODE_ROLES = {
    "code", "func", "meth", "class", "attr", "mod", "obj", "data", "exc", "const",
    "samp", "file", "kbd", "command", "program", "envvar", "option",
}  # fmt: skip

_DIRECTIVE = re.compile(
    r"^(?P<indent>[ \t]*)\.\. (?P<name>\w[\w-]*(?::[\w-]+)*)::(?P<arg>.*)$"
)
_OPTION = re.compile(r"^:[\w-]+:(\s|$)")
_ROLE = re.compile(r":(?P<name>\w[\w-]*(?::[\w-]+)*):`(?P<text>[^`]*)`")
_TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.DOTALL)
_LABEL = re.compile(r"^\.\. _(?P<label>[\w-]+):[ \t]*$", re.MULTILINE)
_HEADING = re.compile(
    r"^(?P<title>\S.*)\n([=\-~^\"'`#*+:.])\2{2,}[ \t]*$", re.MULTILINE
)


def page_titles(src_dir):
    """{label or docname: title} of every tutorial: what ``:ref:`` and ``:doc:`` name."""
    titles = {}
    for t in gallery.tutorials(src_dir):
        text = (Path(src_dir) / t.source).read_text(encoding="utf-8")
        first = _HEADING.search(text)
        if first is None:
            continue
        titles[t.docname] = titles[t.stem] = first["title"].strip()
        for label in _LABEL.finditer(text):
            heading = _HEADING.search(text, label.end())
            if heading:
                titles[label["label"]] = heading["title"].strip()
    return titles


def _role(match, titles):
    name = match["name"].split(":")[-1]  # py:func -> func
    text = match["text"]
    if name in DROPPED_ROLES:
        return ""
    if name == "math":
        return match[0]  # rst2md writes it as $...$
    titled = _TITLED.match(text)
    if titled and titled["title"]:
        shown, target = titled["title"], titled["target"]
    else:
        shown, target = text, text
    if name in LINK_ROLES:
        key = target.strip().lstrip("/").removesuffix(".html")
        if not titled:
            shown = titles.get(key, titles.get(Path(key).name, shown))
        return f"*{shown}*"  # the site's page of that title (notebooks have no links to it)
    if name in CODE_ROLES:
        return f"``{shown.lstrip('~!')}``"
    return shown


def _directive(name, arg, body):
    """The lines that stand for one directive, from its argument and converted content."""
    if name in ADMONITIONS:
        version, _, first = arg.partition(" ") if name in VERSIONED else ("", "", arg)
        lead = f"{ADMONITIONS[name]} {version}".strip()
        body = [first, *body] if first else body
    elif name == "admonition":
        lead = arg
    while body and not body[0].strip():
        body = body[1:]
    if name in DROPPED_DIRECTIVES or (name == "raw" and arg != "html"):
        return []
    if name in LAYOUT_DIRECTIVES or name == "raw":
        return body
    if name in ADMONITIONS or name == "admonition":
        # A paragraph continues on the lead's line; a list or a block starts below it.
        if body and not re.match(r"(\*|-|\+|\d+\.|\.\.|#)\s", body[0]):
            return [f"**{lead}:** {body[0]}", *body[1:]]
        return [f"**{lead}:**", "", *body]
    # Any other directive (a card, a dropdown, a topic): its argument is a title.
    return [f"**{arg}**", "", *body] if arg else body


def _directives(lines):
    out, i = [], 0
    while i < len(lines):
        match = _DIRECTIVE.match(lines[i])
        if match is None:
            out.append(lines[i])
            i += 1
            continue
        indent = len(match["indent"])
        end = i + 1
        while end < len(lines) and (
            not lines[end].strip()
            or len(lines[end]) - len(lines[end].lstrip()) > indent
        ):
            end += 1
        while end > i + 1 and not lines[end - 1].strip():
            end -= 1  # blank lines after the block are not part of it
        if match["name"] in RST2MD_DIRECTIVES:
            out += lines[i:end]
            i = end
            continue
        block = textwrap.dedent("\n".join(lines[i + 1 : end])).split("\n")
        options = 0
        while options < len(block) and _OPTION.match(block[options]):
            options += 1
        body = _directives(block[options:])
        name = match["name"].split(":")[-1]
        for line in _directive(name, match["arg"].strip(), body):
            out.append(match["indent"] + line if line.strip() else "")
        i = end
    return out


def rst_for_notebook(text, titles=None):
    """``text`` (reST) with the directives and roles rst2md does not know written as plain
    reST, which it then turns into markdown. ``titles``: :func:`page_titles`."""
    text = _ROLE.sub(lambda m: _role(m, titles or {}), text.expandtabs())
    # An anonymous link (`text <url>`__) as a named one, which rst2md turns into markdown.
    text = re.sub(r"(`[^`]*<[^`<>]+>`_)_", r"\1", text)
    lines = [line.rstrip() for line in _directives(text.split("\n"))]
    return "\n".join(lines)


def _with_colab_metadata(skeleton):
    @functools.wraps(skeleton)
    def wrapper(*args, **kwargs):
        notebook = skeleton(*args, **kwargs)
        for key, value in COLAB_METADATA.items():
            notebook["metadata"].setdefault(key, copy.deepcopy(value))
        return notebook

    return wrapper


def _with_plain_rst(rst2md):
    titles = functools.lru_cache(maxsize=None)(page_titles)

    @functools.wraps(rst2md)
    def wrapper(text, gallery_conf, *args, **kwargs):
        plain = rst_for_notebook(text, titles(str(gallery_conf["src_dir"])))
        return rst2md(plain, gallery_conf, *args, **kwargs)

    return wrapper


def _wrap(module, name, wrap):
    original = getattr(module, name, None)
    if original is None:
        raise ExtensionError(
            f"sphinxext.notebooks: {module.__name__}.{name} is gone (a new sphinx-gallery?); "
            "update sphinxext/notebooks.py"
        )
    if not getattr(original, "wrapped_by_sphinxext_notebooks", False):
        wrapper = wrap(original)
        wrapper.wrapped_by_sphinxext_notebooks = True
        setattr(module, name, wrapper)


def install():
    """Wrap sphinx-gallery's notebook writer in this process (once; later calls do nothing)."""
    from sphinx_gallery import notebook

    _wrap(notebook, "jupyter_notebook_skeleton", _with_colab_metadata)
    _wrap(notebook, "rst2md", _with_plain_rst)


def setup(app):
    return {"parallel_read_safe": True, "parallel_write_safe": True}
