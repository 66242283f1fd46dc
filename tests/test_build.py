"""The whole site builds with warnings as errors, and every page and download exists."""

import json

import pytest
from conftest import page_of, tutorial_sources

from tools.validate import validate

SOURCES = tutorial_sources()


def test_there_are_tutorials():
    assert SOURCES, "no tutorials in recipes_source/ or intermediate_source/"


def test_the_build_passes_the_validator(built_site):
    site, _ = built_site
    report = validate(site)
    assert report.problems == []
    assert report.tutorials == len(SOURCES)


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_page_and_downloads_exist(built_site, source):
    site, _ = built_site
    assert (site / page_of(source)).is_file()
    for suffix in (".py", ".ipynb", ".zip"):
        found = list((site / "_downloads").rglob(f"{source.stem}{suffix}"))
        assert found, f"no {source.stem}{suffix} in _downloads"


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_notebook_starts_with_install_cell(built_site, source):
    site, _ = built_site
    (notebook,) = (site / "_downloads").rglob(f"{source.stem}.ipynb")
    first_code = next(
        c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"
    )
    assert "%pip install" in "".join(first_code["source"])


def test_build_report_covers_every_tutorial(built_site):
    site, _ = built_site
    report = json.loads((site / "build_report.json").read_text())
    by_source = {t["source"]: t for t in report["tutorials"]}
    assert sorted(by_source) == sorted(str(s) for s in SOURCES)
    for record in by_source.values():
        assert record["seconds"] > 0
        assert record["peak_memory_mib"] >= 0
        for key in (
            "device",
            "torch",
            "triton",
            "python",
            "date",
            "page",
            "peak_memory_kind",
        ):
            assert key in record, key


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_page_carries_verified_stamp(built_site, source):
    site, _ = built_site
    html = (site / page_of(source)).read_text()
    assert 'class="verified-stamp' in html
    assert "Verified on " in html
