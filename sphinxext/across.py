"""Each page's headline results across the machines that ran it, from the run records.

``measure.headline`` keeps a page's few headline results; the build (``sphinxext.record``)
and ``tools.verify`` store them in the run record with the host's speed and load before
and after the page (``tools.gallery.host_facts``). ``sphinxext.verified_on`` puts the table
of :func:`table` under each page's "Verified on" table, marking the run whose output the
page shows; the ``across-machines`` directive gathers every page's first headline into one
site page (``results.rst``).
"""

from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList

from tools import gallery

SLOWER = 1.3  # a host whose loop takes this many times the fastest run's is "slower"


def _cell(text):
    """Text for a list-table cell: a leading "+" or "-" would start a bullet list."""
    return "\\" + text if text[:1] in "+-*" else text


def _value(cell):
    value, unit = cell
    if unit == "x speed-up" and value < 1:  # kept so before "x slower" existed
        value, unit = 1 / value, "x slower"
    size = abs(value)
    text = (
        f"{value:,.0f}"
        if size >= 1000
        else f"{value:.1f}"
        if size >= 10
        else f"{value:.3g}"
    )
    return f"{text} {unit}".strip()


def host_note(record, fastest):
    """The host in words, and why its numbers may differ: slower, busy, or unsteady (its
    loop's two readings, before and after the page, differ by more than SLOWER)."""
    host = record.host
    if not host:
        return ""
    if not host.get("loop_ms"):  # the cores alone: the loop was not (well) measured
        return f"{host['cores']} cores"
    before, after = host["loop_ms"]
    speed = min(before, after)  # the host undisturbed, as near as two readings tell
    text = f"{host['cores']} cores, loop {speed:.0f} ms"
    notes = []
    if fastest and speed > SLOWER * fastest:
        notes.append(f"a slower host: {speed / fastest:.1f}x the fastest run's loop")
    load = host["load"][0]
    if load is not None and load > host["cores"]:
        notes.append(f"busy: load {load:.1f} on {host['cores']} cores")
    if max(before, after) > SLOWER * speed:
        notes.append(
            f"unsteady: loop {before:.0f} ms before the page, {after:.0f} after"
        )
    return text + ("; " + "; ".join(notes) if notes else "")


def table(records, own=None):
    """The reST of a page's table, or '' when no record keeps headline results."""
    kept = [r for r in records if r.headlines]
    if not kept:
        return ""
    labels = list(dict.fromkeys(k for r in kept for k in r.headlines))
    loops = [min(r.host["loop_ms"]) for r in kept if r.host and r.host.get("loop_ms")]
    fastest = min(loops) if loops else None
    lines = [
        ".. list-table:: Results across machines (the marked run is the one shown below)",
        "   :header-rows: 1",
        "   :class: across-machines",
        "",
        "   * - Run",
        "     - Host",
    ]
    lines += [f"     - {_cell(label)}" for label in labels]
    for r in kept:
        mark = " (shown below)" if own is not None and r == own else ""
        lines.append(
            f"   * - {r.device}, PyTorch {r.torch}, {r.run_as}, {r.date}{mark}"
        )
        lines.append(f"     - {host_note(r, fastest) or '-'}")
        lines += [
            f"     - {_value(r.headlines[k]) if k in r.headlines else '-'}"
            for k in labels
        ]
    return "\n".join(lines) + "\n"


def _column(record):
    if record.device.startswith("CPU"):
        return None  # the oldest and newest PyTorch are chosen apart
    return "2 GPUs" if record.device.startswith("2 x") else "1 GPU"


def summary_rows(srcdir):
    """One row per page, in reading order: its first headline result on one GPU, on two
    GPUs, and on a CPU with the oldest and the newest PyTorch of its current records."""
    from sphinxext.verified_on import shown_records

    rows = []
    for source in gallery.PAGES:
        tutorial = gallery.tutorial_of(source, srcdir)
        if tutorial is None:
            continue
        records = [r for r in shown_records(srcdir, tutorial) if r.headlines]
        label = next(iter(records[0].headlines)) if records else None
        cells = {}
        for r in records:
            if label in r.headlines and _column(r):
                cells[_column(r)] = f"{_value(r.headlines[label])} ({r.device})"
        cpu = sorted(
            (r for r in records if r.device.startswith("CPU") and label in r.headlines),
            key=lambda r: r.torch_release,
        )
        if cpu:
            cells["CPU, oldest PyTorch"] = (
                f"{_value(cpu[0].headlines[label])} ({cpu[0].torch})"
            )
            cells["CPU, newest PyTorch"] = (
                f"{_value(cpu[-1].headlines[label])} ({cpu[-1].torch})"
            )
        rows.append((tutorial.docname, label or "(no headline result yet)", cells))
    return rows


COLUMNS = ["1 GPU", "2 GPUs", "CPU, oldest PyTorch", "CPU, newest PyTorch"]


class AcrossMachines(Directive):
    def run(self):
        env = self.state.document.settings.env
        lines = [
            ".. list-table::",
            "   :header-rows: 1",
            "   :class: across-machines",
            "",
            "   * - Page",
            "     - Result",
        ]
        lines += [f"     - {c}" for c in COLUMNS]
        for docname, label, cells in summary_rows(env.srcdir):
            lines.append(f"   * - :doc:`/{docname}`")
            lines.append(f"     - {_cell(label)}")
            lines += [f"     - {cells.get(c, '-')}" for c in COLUMNS]
        node = nodes.container()
        self.state.nested_parse(StringList(lines), 0, node)
        for path in Path(env.srcdir, gallery.RECORDS).glob("*.json"):
            env.note_dependency(str(path))  # read again when a record changes
        return node.children


def setup(app):
    app.add_directive("across-machines", AcrossMachines)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
