"""What `make html` leaves beside the pages: the build report.

The validator that `make html` runs already checks every page, download and "Verified
on" stamp (the build fails otherwise), so nothing here repeats it.
"""

import json

from conftest import tutorial_sources

SOURCES = tutorial_sources()


def test_there_are_tutorials():
    assert SOURCES, "no tutorials in recipes_source/ or intermediate_source/"


def test_build_report_covers_every_tutorial(built_site):
    site, _ = built_site
    report = json.loads((site / "build_report.json").read_text())
    by_source = {t["source"]: t for t in report["tutorials"]}
    assert sorted(by_source) == sorted(str(s) for s in SOURCES)
    for record in by_source.values():
        assert record["passed"] is True
        assert record["seconds"] > 0
        assert record["peak_memory_mib"] >= 0
        for key in (
            "device",
            "torch",
            "triton",
            "python",
            "date",
            "checksum",
            "passed",
            "peak_memory_kind",
        ):
            assert key in record, key
