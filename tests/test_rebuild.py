"""A second build with no change executes nothing (sphinx-gallery's checksum cache), and
new run records reach the pages without executing anything."""

import dataclasses

from conftest import TEST_BUILDDIR, copy_build_machinery, make, page_of

from tools import gallery


def test_unchanged_rebuild_executes_nothing(built_site):
    proc = make("html", f"BUILDDIR={TEST_BUILDDIR}")
    assert "successfully executed 0 out of" in proc.stdout


def test_new_committed_records_reach_the_page_without_executing(tmp_path):
    """A rebuild reads a page again when its table would change, executing nothing; a
    record of an older source leaves the table and the validator names it."""
    project = tmp_path / "site"
    copy_build_machinery(project)
    cards = ""
    for source in ("recipes_source/tiny.py", "intermediate_source/tiny_tutorial.py"):
        (project / source).write_text(
            '"""\nTiny\n====\n\nA tiny example.\n"""\n\n# %%\nprint("tiny ran")\n'
        )
        doc = page_of(source).removesuffix(".html")
        cards += f"   .. grid-item-card:: {doc}\n      :link: {doc}\n      :link-type: doc\n\n      Tiny.\n\n"
    (project / "index.rst").write_text(
        f"Test\n====\n\n.. grid:: 2\n\n{cards}"
        ".. toctree::\n   :hidden:\n\n   recipes/index\n   intermediate/index\n"
    )
    make("html", cwd=project)
    page = project / "_build" / "html" / "recipes" / "tiny.html"
    report = gallery.read_report(project / "_build" / "html" / gallery.REPORT)
    own = {r.source: r for r in report}["recipes_source/tiny.py"]
    assert own.passed and own.how == "build" and own.device in page.read_text()

    committed = dataclasses.replace(own, device="Test Device 9000", torch="2.9.1")
    gallery.save_records([committed], project)
    proc = make("html", cwd=project)
    assert "successfully executed 0 out of" in proc.stdout
    assert "Test Device 9000" in page.read_text()

    stale = dataclasses.replace(committed, checksum="0" * 32)
    (path,) = gallery.save_records([stale], project)
    proc = make("html", cwd=project)
    assert "Test Device 9000" not in page.read_text()
    assert f"{path.relative_to(project)}: 1 stale record(s)" in proc.stderr
    assert "recipes_source/tiny.py" in proc.stderr
