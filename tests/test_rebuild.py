"""A second build with no change executes nothing (sphinx-gallery's checksum cache)."""

from conftest import TEST_BUILDDIR, make


def test_unchanged_rebuild_executes_nothing(built_site):
    proc = make("html", f"BUILDDIR={TEST_BUILDDIR}")
    assert "successfully executed 0 out of" in proc.stdout
