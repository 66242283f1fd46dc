"""The "Verified on" line under each tutorial's title, and the build report.

Both come from the ``<gallery>/<stem>.verified.json`` records that ``sphinxext.reset``
writes when an example executes, so they always describe the build that ran the code. A
page whose example was not executed in this build or an earlier one gets no stamp.
"""

import json
import re
from pathlib import Path

REPORT_NAME = "build_report.json"

# The first title of a generated page: a text line underlined with "=".
_TITLE = re.compile(r"^(?P<title>[^\s].*)\n(?P<rule>=+)\n", re.MULTILINE)


def _record(app, docname):
    path = Path(app.srcdir) / f"{docname}.verified.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def stamp_text(record):
    return (
        f"Verified on {record['device']}, PyTorch {record['torch']}, {record['date']}."
    )


def _add_stamp(app, docname, source):
    gallery_dirs = app.config.sphinx_gallery_conf["gallery_dirs"]
    if docname.split("/", 1)[0] not in gallery_dirs:
        return
    record = _record(app, docname)
    if record is None:
        return
    match = _TITLE.search(source[0])
    if match is None:
        return
    stamp = f"\n.. rst-class:: verified-stamp\n\n{stamp_text(record)}\n\n"
    source[0] = source[0][: match.end()] + stamp + source[0][match.end() :]


def _write_report(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    conf = app.config.sphinx_gallery_conf
    records = []
    for gallery in conf["gallery_dirs"]:
        for path in sorted((Path(app.srcdir) / gallery).glob("*.verified.json")):
            records.append(json.loads(path.read_text()))
    report = {"tutorials": records}
    (Path(app.outdir) / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n")


def setup(app):
    app.connect("source-read", _add_stamp)
    app.connect("build-finished", _write_report)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
