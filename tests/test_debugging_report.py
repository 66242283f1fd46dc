"""The debugging tutorial's tlparse report and profiler trace are part of the built site,
and the page links them.

The page writes both into one folder beside itself; sphinxext/reports.py publishes it
(scrubbed of the build machine's paths) with a zip of it. The validator already rejects
machine paths on every HTML page of the site, the report's included; the trace is gzipped
JSON, so the test here checks it for them with the validator's own pattern.

The report is of one run: each of its compile ids belongs to one model of the page. A
compile id numbers frames from 0 again after ``torch._dynamo.reset()``, so a trace that
held two runs would file two models under one ``[0/0]``.
"""

import ast
import gzip
import json
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from bs4 import BeautifulSoup

from tools.validate import machine_path_pattern

ROOT = Path(__file__).resolve().parents[1]
PAGE = "intermediate/debugging_tutorial.html"
REPORT = "intermediate/debugging_tutorial_report/index.html"
TRACE = "intermediate/debugging_tutorial_report/profile_trace.json.gz"
SOURCE = ROOT / "intermediate_source" / "debugging_tutorial.py"
MAX_TRACE_BYTES = 5 * 10**6  # "under 5 MB": a download a reader opens in a browser tab


def linked_files(site, page):
    """The local files that the links of ``page`` point to."""
    soup = BeautifulSoup((site / page).read_text(encoding="utf-8"), "html.parser")
    for link in soup.select("article a[href], div[role=main] a[href], a[href]"):
        parts = urlsplit(link["href"])
        if not parts.scheme and parts.path:
            yield ((site / page).parent / unquote(parts.path)).resolve()


def compilations(report, source=SOURCE):
    """{compile id: [for each compilation under it, the page's class of the frame compiled]}.

    tlparse's ``raw.jsonl`` holds the trace's records: one ``dynamo_start`` per compilation
    (a restart ``[x/y_1]`` adds none), with the stack that led to it, the frame Dynamo
    compiled last. A frame of the page lies in a class: a model's ``forward``, or a resume
    function after one of its graph breaks. A library's frame (``Logger.debug``) has none.
    """
    text = (report / "raw.jsonl").read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    files = next(r["string_table"] for r in records if "string_table" in r)
    tree = ast.parse(source.read_text(encoding="utf-8"))
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    found = {}
    for record in records:
        if "dynamo_start" in record:
            frame = record["dynamo_start"]["stack"][-1]
            in_page = files[frame["filename"]].endswith(source.name)  # an index
            owner = [
                c.name for c in classes if c.lineno <= frame["line"] <= c.end_lineno
            ]
            compile_id = f"[{record['frame_id']}/{record['frame_compile_id']}]"
            found.setdefault(compile_id, []).append(owner[0] if in_page else None)
    return found


def check_one_model_per_compile_id(report, source=SOURCE):
    """Assert that every compile id of the report's compile directory is one compilation,
    and that the page's frames among them are all of one model; return that model."""
    directory = json.loads((report / "compile_directory.json").read_text("utf-8"))
    ids = {re.sub(r"_\d+\]$", "]", i) for i in directory if i != "[-/-]"}
    assert ids, f"{report}/compile_directory.json lists no compile ids"
    found = compilations(report, source)
    for compile_id in sorted(ids):  # none: an id that did not compile (limit hit)
        assert len(found.get(compile_id, [])) <= 1, (
            f"compile id {compile_id} of {report} holds the compilations of "
            f"{found[compile_id]}: trace each model run into a folder of its own"
        )
    models = {m for i in ids for m in found.get(i, [])} - {None}
    assert len(models) == 1, f"{report} shows the runs of {models}: one run per report"
    return models.pop()


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


def test_each_compile_id_of_the_report_belongs_to_one_model(built_site):
    site, _ = built_site
    report = (site / REPORT).parent
    assert (report / "compile_directory.json").is_file(), (
        f"{REPORT} has no compile directory"
    )
    check_one_model_per_compile_id(report)
