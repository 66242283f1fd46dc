"""A rebuild with no source changed executes nothing (sphinx-gallery's checksum cache, and
sphinxext/core.py's stamp of the measurement core for pages that import it), and new run
records reach the pages without executing anything.

On a small project, not the site: a second build of the whole site (the suite did one
until 2026-11-28) checked the same cache with the same code for every page, and cost a
Sphinx pass over every page and a validator run after the build, on the suite's longest
path."""

import dataclasses
import re

from conftest import copy_build_machinery, make, page_of

from tools import gallery

# sphinx-gallery's summary at the end of a build (gen_gallery.summarize_failing_examples).
SUMMARY = re.compile(
    r"successfully executed (\d+) out of (\d+) files? subselected by:.*?"
    r"after excluding (\d+) files? that had previously been run",
    re.DOTALL,
)


def executed_nothing(output, tutorials):
    """Why a rebuild's output does not show ``tutorials`` tutorials all skipped by their
    checksums and none executed; None when it does. "0 out of 0" alone is not enough: a
    build that found no tutorial says that too."""
    found = SUMMARY.findall(output)
    if len(found) != 1:
        return f"{len(found)} sphinx-gallery summaries in the output, not one"
    executed, selected, skipped = map(int, found[0])
    if (executed, selected, skipped) != (0, 0, tutorials):
        return (
            f"executed {executed} out of {selected}, {skipped} skipped by their "
            f"checksums; expected 0 out of 0 and all {tutorials} skipped"
        )
    return None


def summary(executed, selected, skipped):
    return (
        f"Sphinx-Gallery successfully executed {executed} out of {selected} files "
        "subselected by:\n\n    gallery_conf[\"filename_pattern\"] = '\\\\.py$'\n"
        f"\nafter excluding {skipped} files that had previously been run (based on MD5).\n"
    )


def test_the_rebuild_check_can_fail():
    assert executed_nothing(summary(0, 0, 13), 13) is None
    assert "all 13 skipped" in executed_nothing(summary(0, 0, 0), 13)  # found nothing
    assert "executed 1 out of 1" in executed_nothing(summary(1, 1, 12), 13)
    assert "0 sphinx-gallery summaries" in executed_nothing("build succeeded.", 13)


def test_a_rebuild_executes_nothing_and_new_records_reach_the_page(tmp_path):
    """A rebuild with no source changed executes nothing, the pages that import the core
    included, yet reads a page again when its table would change; a record of an older
    source leaves the table and the validator names it."""
    project = tmp_path / "site"
    copy_build_machinery(project)
    cards = ""
    for source, code in (
        ("recipes_source/tiny.py", 'print("tiny ran")'),
        ("intermediate_source/tiny_tutorial.py", 'import measure\n\nprint("tiny ran")'),
    ):
        (project / source).write_text(
            f'"""\nTiny\n====\n\nA tiny example.\n"""\n\n# %%\n{code}\n'
        )
        doc = page_of(source).removesuffix(".html")
        cards += f"   .. grid-item-card:: {doc}\n      :link: {doc}\n      :link-type: doc\n\n      Tiny.\n\n"
    (project / "index.rst").write_text(
        f"Test\n====\n\n.. grid:: 2\n\n{cards}"
        ".. toctree::\n   :hidden:\n\n   recipes/index\n   intermediate/index\n"
    )
    proc = make("html", cwd=project)
    assert SUMMARY.findall(proc.stdout) == [("2", "2", "0")]
    # sphinxext/core.py's stamp: the core the page that imports it ran with.
    assert (project / "intermediate" / "measure.py.md5").is_file()
    page = project / "_build" / "html" / "recipes" / "tiny.html"
    report = gallery.read_report(project / "_build" / "html" / gallery.REPORT)
    own = {r.source: r for r in report}["recipes_source/tiny.py"]
    assert own.passed and own.how == "build" and own.device in page.read_text()

    # Through `make html-one` (its pattern, Sphinx and the validator; tests/test_shard.py
    # has the patterns it refuses): the page that imports the core is selected, and skipped.
    committed = dataclasses.replace(own, device="Test Device 9000", torch="2.9.1")
    gallery.save_records([committed], project)
    proc = make("html-one", "PATTERN=tiny_tutorial", cwd=project)
    assert executed_nothing(proc.stdout, 1) is None, proc.stdout[-2000:]
    assert "Built; executed the tutorials matching 'tiny_tutorial'" in proc.stdout
    assert "Test Device 9000" in page.read_text()

    stale = dataclasses.replace(committed, checksum="0" * 32)
    (path,) = gallery.save_records([stale], project)
    proc = make("html", cwd=project)
    assert executed_nothing(proc.stdout, 2) is None, proc.stdout[-2000:]
    assert "Test Device 9000" not in page.read_text()
    assert f"{path.relative_to(project)}: 1 stale record(s)" in proc.stderr
    assert "recipes_source/tiny.py" in proc.stderr
