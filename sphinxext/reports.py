"""Publish the folder of files that a tutorial writes beside itself (a tlparse report, a
profiler trace).

A tutorial ``<gallery source>/<stem>.py`` may write a folder ``<stem>_report/`` into its
working directory, which sphinx-gallery sets to the tutorial's own folder. After the build
this copies it to ``<outdir>/<gallery>/<stem>_report/`` and zips it beside it as
``<stem>_report.zip``, so that the page links both, and any file in the folder, with plain
relative links. (The debugging tutorial puts its ``torch.profiler`` trace,
``profile_trace.json.gz``, in the folder with its tlparse report.)

On the way it goes through sphinx-gallery's generated folder (``<gallery>/<stem>_report/``),
which ``tools.merge`` carries from shard to merged site like every generated file of a
tutorial: a merged build executes nothing, so that copy is the only one it has. A build that
did not execute the tutorial publishes the copy an earlier build left there.

The report's files name the build machine's paths (stack frames in tlparse's pages and
logs, the temporary file a gzipped profiler trace was written through). Readers need the
frames, not the machine, and the validator rejects machine paths on every page of the site,
so text files, gzipped ones included, are scrubbed on the way: the checkout's path and
everything up to ``site-packages/`` are dropped, and any other absolute directory under a
user or temporary root is cut down to the file name.
"""

import gzip
import re
import shutil
from pathlib import Path

TEXT_SUFFIXES = {".html", ".txt", ".json", ".jsonl", ".log", ".py", ".js", ".css"}
_PACKAGES = re.compile(r"[^\s\"'<>()\[\]=]*(?:site|dist)-packages/")
_MACHINE_DIR = re.compile(
    r"(?<![\w.~:/-])/(?:home|root|tmp|var|private|Users|usr|opt|work|mnt|srv)/"
    r"(?:[^\s\"'<>/]+/)*"
)


def scrub(text, root):
    for prefix in {str(root), str(Path(root).resolve())}:
        text = text.replace(prefix.rstrip("/") + "/", "")
    return _MACHINE_DIR.sub("", _PACKAGES.sub("", text))


def _copy_scrubbed(src, dest, root):
    if dest.exists():
        shutil.rmtree(dest)
    for path in sorted(src.rglob("*")):
        target = dest / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.suffix in TEXT_SUFFIXES:
            target.parent.mkdir(parents=True, exist_ok=True)
            text = path.read_text(encoding="utf-8", errors="replace")
            target.write_text(scrub(text, root), encoding="utf-8")
        elif path.suffix == ".gz" and Path(path.stem).suffix in TEXT_SUFFIXES:
            target.parent.mkdir(parents=True, exist_ok=True)
            text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
            data = scrub(text, root).encode("utf-8")
            target.write_bytes(gzip.compress(data, mtime=0))  # mtime 0: same bytes
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def publish_reports(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    root = Path(app.srcdir)
    conf = app.config.sphinx_gallery_conf
    for examples, gallery in zip(conf["examples_dirs"], conf["gallery_dirs"]):
        for tutorial in sorted((root / examples).glob("*.py")):
            name = f"{tutorial.stem}_report"
            written, generated = root / examples / name, root / gallery / name
            if written.is_dir() and any(written.iterdir()):
                _copy_scrubbed(written, generated, root)
            if not (generated.is_dir() and any(generated.iterdir())):
                continue
            published = Path(app.outdir) / gallery / name
            if published.exists():
                shutil.rmtree(published)
            shutil.copytree(generated, published)
            shutil.make_archive(str(published), "zip", published.parent, name)


def setup(app):
    app.connect("build-finished", publish_reports)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
