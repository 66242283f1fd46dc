"""The debugging tutorial's tlparse report and profiler trace are part of the built site,
and the page links them.

The page writes both into one folder beside itself; sphinxext/reports.py publishes it
(scrubbed of the build machine's paths) with a zip of it. The validator already rejects
machine paths on every HTML page of the site, the report's included; the trace is gzipped
JSON, so the test here checks it for them with the validator's own pattern.
"""

import gzip
import json
from pathlib import Path
from urllib.parse import unquote, urlsplit

from bs4 import BeautifulSoup

from tools.validate import machine_path_pattern

ROOT = Path(__file__).resolve().parents[1]
PAGE = "intermediate/debugging_tutorial.html"
REPORT = "intermediate/debugging_tutorial_report/index.html"
TRACE = "intermediate/debugging_tutorial_report/profile_trace.json.gz"
MAX_TRACE_BYTES = 5 * 10**6  # "under 5 MB": a download a reader opens in a browser tab


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


def test_the_profiler_trace_is_published_linked_and_a_chrome_trace(built_site):
    site, _ = built_site
    trace = site / TRACE
    assert trace.is_file(), f"{TRACE} is missing from the built site"
    size = trace.stat().st_size
    assert size < MAX_TRACE_BYTES, f"{TRACE} is {size / 1e6:.1f} MB, over 5 MB"
    assert trace.resolve() in set(linked_files(site, PAGE)), (
        f"{PAGE} does not link {TRACE}"
    )
    text = gzip.decompress(trace.read_bytes()).decode("utf-8")
    events = json.loads(text).get("traceEvents")
    assert isinstance(events, list) and events, f"{TRACE} has no traceEvents"
    assert any(e.get("name") == "training step" for e in events), (
        f"{TRACE} has no 'training step' range: is it the page's profile?"
    )
    found = machine_path_pattern(ROOT).search(text)
    assert not found, f"{TRACE} shows a build-machine path: {found.group(0)!r}"
