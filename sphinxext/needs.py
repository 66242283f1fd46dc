"""What each page needs, from ``tools.gallery.PAGES``, with its newest CPU run's time and
memory from the run records: a line under each tutorial's title (placed there by
``sphinxext.verified_on``) and, on the home page, the ``page-needs`` directive on each card
(``.. page-needs:: intermediate/export_aoti_tutorial``).
"""

from docutils import nodes
from docutils.parsers.rst import Directive

from tools import gallery


def cpu_run(records):
    """The newest CPU run among ``records`` (oldest first), in words, or ''."""
    cpu = [r for r in records if r.device.startswith("CPU") and r.passed]
    if not cpu:
        return ""
    r = max(cpu, key=lambda r: (r.torch_release, r.date))
    memory = (
        f", {r.peak_memory_mib / 1024:.1f} GiB at peak" if r.peak_memory_mib else ""
    )
    return f" On a CPU ({r.device[5:-1] or 'CPU'}, PyTorch {r.torch}): {r.seconds:.0f} s{memory}."


def line(tutorial, records):
    """The page's needs and its newest CPU run, in one sentence or two."""
    needs = gallery.PAGES.get(tutorial.source)
    return f"Needs: {needs}." + cpu_run(records) if needs else ""


class PageNeeds(Directive):
    required_arguments = 1

    def run(self):
        from sphinxext.verified_on import shown_records

        env = self.state.document.settings.env
        tutorial = gallery.tutorial_of(self.arguments[0], env.srcdir)
        if tutorial is None:
            raise self.error(f"page-needs: no tutorial {self.arguments[0]!r}")
        text = line(tutorial, shown_records(env.srcdir, tutorial))
        return [nodes.paragraph(text, text, classes=["page-needs"])]


def setup(app):
    app.add_directive("page-needs", PageNeeds)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
