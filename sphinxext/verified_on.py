"""The "Verified on" table under each tutorial's title, and the build report.

Above the table, the page's needs (``sphinxext.needs``). The table lists the runs of
the page's current source: the committed records
(``records/*.json``, written by ``python -m tools.verify``) whose checksum matches the
source, and this build's own record (``<gallery>/<stem>.record.json``, written by
``sphinxext.record``). Records of an older source are left out; the validator names them.

One row per device (with its GPU count: "2 x NVIDIA H100 80GB HBM3"), PyTorch and way of
running (tools.gallery.RunRecord.row), the newest: a build on a machine whose runs are also
committed (``make records`` after an earlier build there) would otherwise show the same
device, PyTorch, date and "site build" twice, differing only in run time. On the same date,
this build's own run wins. A run that took a page's CPU path on a GPU machine is a CPU row
("site build (CPU path; the machine has 1 GPU)").

The build report (``build_report.json`` in the built site) gathers the build's records.
Setting up this extension also sets up ``sphinxext.memory`` (footers of unmeasured pages).
"""

import re
from pathlib import Path

from sphinxext.across import table as across_table
from sphinxext.needs import line
from tools import gallery

# The first title of a generated page: a text line underlined with "=".
_TITLE = re.compile(r"^(?P<title>[^\s].*)\n(?P<rule>=+)\n", re.MULTILINE)
_committed = {}  # srcdir -> the committed records, read once per build


def shown_records(srcdir, tutorial):
    """The records the page of ``tutorial`` shows, in table order."""
    srcdir = Path(srcdir)
    if srcdir not in _committed:
        _committed[srcdir] = [
            r for rs in gallery.read_records(srcdir).values() for r in rs
        ]
    candidates = [(r, False) for r in _committed[srcdir]]
    own = tutorial.generated(srcdir).with_suffix(gallery.RECORD_SUFFIX)
    if own.is_file():
        candidates.append((gallery.read_record(own), True))
    current = tutorial.checksum(srcdir)
    label = gallery.runner_label(srcdir / tutorial.source)
    return fold(
        r
        for r, _ in sorted(candidates, key=lambda c: (c[0].date, c[1]))
        if r.source == tutorial.source
        and r.checksum == current
        and not gallery.misnamed(r, label)
    )


def fold(records):
    """One record per table row (device, PyTorch, way of running): the last of each in
    ``records``, which come oldest first; in table order."""
    newest = {r.row: r for r in records}
    return sorted(
        newest.values(),
        key=lambda r: (
            r.device.startswith("CPU"),
            r.device,
            [int(n) for n in re.findall(r"\d+", r.torch)],
            r.date,
            r.run_as,
        ),
    )


def table(records):
    """The reST of the table."""
    rows = [("Device", "PyTorch", "Date", "Run as", "Run time", "Result")]
    for r in records:
        rows.append(
            (
                r.device,
                r.torch,
                r.date,
                r.run_as,
                f"{r.seconds:.0f} s",
                "passed" if r.passed else "failed",
            )
        )
    lines = [
        ".. list-table:: Verified on",
        "   :header-rows: 1",
        "   :class: verified-on",
        "",
    ]
    for row in rows:
        lines.append(f"   * - {row[0]}")
        lines += [f"     - {cell}" for cell in row[1:]]
    return "\n".join(lines) + "\n"


def _tutorial(app, docname):
    if docname.split("/", 1)[0] not in app.config.sphinx_gallery_conf["gallery_dirs"]:
        return None
    return gallery.tutorial_of(docname, app.srcdir)


def _add_table(app, docname, source):
    tutorial = _tutorial(app, docname)
    if tutorial is None:
        return
    records = shown_records(app.srcdir, tutorial)
    if not hasattr(app.env, "verified_on"):
        app.env.verified_on = {}
    app.env.verified_on[docname] = records
    match = _TITLE.search(source[0])
    needs = line(tutorial, records)
    if not (records or needs) or match is None:
        return
    own = tutorial.generated(app.srcdir).with_suffix(gallery.RECORD_SUFFIX)
    own = gallery.read_record(own) if own.is_file() else None
    across = across_table(records, own)
    text = "\n" + (f"{needs}\n\n" if needs else "")
    text += (table(records) if records else "") + (f"\n{across}" if across else "")
    text += "\n"
    source[0] = source[0][: match.end()] + text + source[0][match.end() :]


def _outdated(app, env, added, changed, removed):
    """Pages whose table would change (new records, say) are read again."""
    _committed.clear()
    stale = []
    for docname, records in getattr(env, "verified_on", {}).items():
        if docname in removed or docname in changed:
            continue
        tutorial = _tutorial(app, docname)
        if tutorial is not None and shown_records(app.srcdir, tutorial) != records:
            stale.append(docname)
    return stale


def _merge(app, env, docnames, other):
    if not hasattr(env, "verified_on"):
        env.verified_on = {}
    env.verified_on.update(getattr(other, "verified_on", {}))


def _write_report(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    records = [
        gallery.read_record(path)
        for gallery_dir in gallery.GALLERIES.values()
        for path in sorted(
            (Path(app.srcdir) / gallery_dir).glob(f"*{gallery.RECORD_SUFFIX}")
        )
    ]
    gallery.write_report(Path(app.outdir) / gallery.REPORT, records)


def setup(app):
    app.setup_extension("sphinxext.memory")
    app.setup_extension("sphinxext.needs")
    app.setup_extension("sphinxext.across")
    app.connect("source-read", _add_table)
    app.connect("env-get-outdated", _outdated)
    app.connect("env-merge-info", _merge)
    app.connect("build-finished", _write_report)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
