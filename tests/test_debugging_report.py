"""The debugging tutorial's tlparse report is part of the built site, and the page links it.

The page writes the report beside itself; sphinxext/reports.py publishes it (scrubbed of
the build machine's paths) with a zip of it. The validator already rejects machine paths on
every HTML page of the site, the report's included.
"""

from urllib.parse import unquote, urlsplit

from bs4 import BeautifulSoup

PAGE = "intermediate/debugging_tutorial.html"
REPORT = "intermediate/debugging_tutorial_report/index.html"


def linked_files(site, page):
    """The local files that the links of ``page`` point to."""
    soup = BeautifulSoup((site / page).read_text(encoding="utf-8"), "html.parser")
    for link in soup.select("article a[href], div[role=main] a[href], a[href]"):
        parts = urlsplit(link["href"])
        if not parts.scheme and parts.path:
            yield ((site / page).parent / unquote(parts.path)).resolve()


def test_the_report_is_published_and_linked(built_site):
    site, _ = built_site
    report = site / REPORT
    assert report.is_file(), f"{REPORT} is missing from the built site"
    assert "Stack trie" in report.read_text(encoding="utf-8")
    targets = set(linked_files(site, PAGE))
    assert report.resolve() in targets, f"{PAGE} does not link {REPORT}"
    archive = (site / "intermediate" / "debugging_tutorial_report.zip").resolve()
    assert archive in targets and archive.is_file()
