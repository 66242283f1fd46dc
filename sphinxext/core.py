"""The measurement core in the build: downloads that carry it, pages that run again when
it changes.

**Downloads.**
Every tutorial measures with ``measure.py`` at the project root (``import measure``),
which the build finds on its path but a reader's machine does not have. After an HTML
build this rewrites every downloadable script and notebook of the site, and the zips that
hold them, so that ``import measure`` works with no other file beside it: a script gets
the core's block after its docstring, a notebook gets it as the cell after the install
cell (``tools.gallery.download_script`` and ``download_notebook``, which ``tools.verify``
uses too). A file that does not import the core, or carries it already, is left as it is.

**Reruns.** sphinx-gallery runs a tutorial again when its own source changes (its
checksum in ``<gallery>/<stem>.py.md5``), not when the core does. Before sphinx-gallery
starts, :func:`rerun_on_core_change` compares measure.py with the copy of its checksum the
last build kept (``<gallery>/measure.py.md5``); when they differ, it removes the checksums
of the tutorials that import the core, so that each of them runs again.
"""

import hashlib
import io
import json
import zipfile
from pathlib import Path

from tools import gallery


def _rewrite(name, data, root):
    if name.endswith(".py"):
        text = data.decode("utf-8")
        return gallery.download_script(text, root).encode("utf-8")
    if name.endswith(".ipynb"):
        notebook = gallery.download_notebook(json.loads(data), root)
        return (json.dumps(notebook, indent=1, ensure_ascii=False) + "\n").encode(
            "utf-8"
        )
    return data


def _rewrite_zip(path, root):
    out = io.BytesIO()
    with (
        zipfile.ZipFile(path) as old,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as new,
    ):
        for info in old.infolist():
            new.writestr(info, _rewrite(info.filename, old.read(info), root))
    path.write_bytes(out.getvalue())


def carry_core(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    root = Path(app.srcdir)
    for path in sorted((Path(app.outdir) / "_downloads").rglob("*")):
        if path.suffix in (".py", ".ipynb"):
            path.write_bytes(_rewrite(path.name, path.read_bytes(), root))
        elif path.suffix == ".zip":
            _rewrite_zip(path, root)


def rerun_on_core_change(app):
    root = Path(app.srcdir)
    if not (root / gallery.CORE).is_file():
        return  # a project without the core (the test suite's small ones)
    core = hashlib.md5((root / gallery.CORE).read_bytes()).hexdigest()
    for tutorial in gallery.tutorials(root):
        generated = tutorial.generated(root)
        stamp = generated.parent / f"{gallery.CORE}.md5"
        if stamp.is_file() and stamp.read_text().strip() == core:
            continue
        source = (root / tutorial.source).read_text(encoding="utf-8")
        if gallery.imports_core(source):
            generated.with_suffix(".py.md5").unlink(missing_ok=True)
    for folder in {t.generated(root).parent for t in gallery.tutorials(root)}:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{gallery.CORE}.md5").write_text(core + "\n")


def setup(app):
    # before sphinx-gallery's own builder-inited handler (priority 500), which executes
    app.connect("builder-inited", rerun_on_core_change, priority=400)
    app.connect("build-finished", carry_core)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
