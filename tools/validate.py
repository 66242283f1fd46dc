"""Check a built site the way a reader would meet it.

    python -m tools.validate _build/html [--pattern REGEX] [--source-root DIR]

Reads every HTML page with an HTML parser and fails, naming the page and the reason, when:

* a tutorial did not run: the build report has no passing run record of its current
  source (tools.gallery.ran); or its page has no "Verified on" table;
* an output block shows a Python traceback that its code cell does not mark as
  intended (a comment containing ``intended-traceback``), or a DeprecationWarning or
  FutureWarning that it does not mark (``intended-warning``);
* a tutorial's .py or .ipynb download is missing, or the notebook is not valid nbformat;
  a gallery's download-all zip is missing;
* text on a page shows an absolute path of the build machine;
* a card on the landing page points to a page that does not exist, or a tutorial has no
  card;
* requirements.txt's lower bound on torch is not the lowest "PyTorch X.Y or later" that a
  tutorial states, or a committed record of a tutorial's current source failed on a
  PyTorch release at or above the X.Y it states;
* ``--pattern`` (make html-one, a shard's build) is not a regular expression or selects no
  tutorial (tools.shard.selected): a build that executed nothing must not pass.

It warns, without failing, about committed records (records/) of an older source (stale:
pages leave them out; each warning names the file, the sources and the command that makes
them again: ``make verify TORCH=...`` for a script run, a site build and ``make records`` for
a build's), about records of a "multi-gpu" tutorial that name one GPU (made before records
named the CPU path), and about a stated minimum that no passing record of the current
source confirms. A source edit cannot wait for the whole
matrix (old and new PyTorch, CPU and GPUs) to run again, so these do not fail the build.

Exit status 0 when the site is clean, 1 with one line per problem otherwise.
"""

import argparse
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
from bs4 import BeautifulSoup

from tools import gallery
from tools.shard import PlanError, selected

TRACEBACK = "Traceback (most recent call last)"
INTENDED = "intended-traceback"
WARNING = re.compile(r"\b(DeprecationWarning|FutureWarning)\b")
INTENDED_WARNING = "intended-warning"
PHYSICS = "Physics check failed"
MINIMUM = re.compile(r"PyTorch (\d+)\.(\d+)(?:\.\d+)? or (?:later|newer)")


def machine_path_pattern(source_root):
    """Absolute paths that reveal the build machine."""
    parts = [
        r"(?<![\w.~-])/(?:home|root|tmp|var|private|Users)/",
        r"/usr/(?:local/)?lib/python",
        r"site-packages",
        r"dist-packages",
    ]
    if source_root:
        parts.append(re.escape(str(Path(source_root).resolve())))
    return re.compile("|".join(parts))


@dataclass
class Report:
    problems: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    tutorials: int = 0

    def fail(self, page, reason):
        self.problems.append(f"{page}: {reason}")

    def warn(self, where, reason):
        self.warnings.append(f"{where}: {reason}")


def _visible_text(soup):
    for tag in soup(["script", "style", "noscript"]):
        tag.decompose()
    return soup.get_text("\n")


def _local_target(site, page, href):
    """The file an internal link points to, or None for external links."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    return (site / page).parent.joinpath(unquote(parts.path)).resolve()


def _check_outputs(soup, page, report):
    for out in soup.select("div.sphx-glr-script-out"):
        text = out.get_text()
        code = out.find_previous("div", class_=re.compile(r"^highlight-"))
        code_text = code.get_text() if code is not None else ""
        if TRACEBACK in text and INTENDED not in code_text:
            last = text.strip().splitlines()[-1][:120]
            report.fail(
                page,
                f"an output block shows a traceback not marked {INTENDED!r}: {last}",
            )
        for line in text.splitlines():
            if line.startswith(PHYSICS):  # the core's checks: a bug in the method
                report.fail(page, f"{line.strip()[:200]} (measure.py's physics checks)")
        warning = WARNING.search(text)
        if warning and INTENDED_WARNING not in code_text:
            line = next(ln for ln in text.splitlines() if warning.group(1) in ln)[:160]
            report.fail(
                page,
                f"an output block shows a {warning.group(1)} not marked {INTENDED_WARNING!r}: {line.strip()}",
            )


def _check_downloads(site, soup, page, report):
    for kind, suffix in (("python", ".py"), ("jupyter", ".ipynb")):
        link = soup.select_one(f"div.sphx-glr-download-{kind} a[href]")
        if link is None:
            report.fail(page, f"no {suffix} download link")
            continue
        target = _local_target(site, page, link["href"])
        if target is None or not target.is_file():
            report.fail(page, f"the {suffix} download {link['href']} is missing")
            continue
        text = target.read_text(encoding="utf-8")
        if suffix == ".ipynb":
            try:
                notebook = nbformat.reads(text, as_version=4)
                nbformat.validate(notebook)
            except Exception as exc:
                # Any reader or schema error means a broken download.
                report.fail(page, f"the notebook is not valid nbformat: {exc!s:.200}")
                continue
            text = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
        if gallery.imports_core(text) and gallery.CORE_CELL_MARK not in text:
            report.fail(
                page, f"the {suffix} download imports measure but does not carry it"
            )


def _check_tutorial(site, soup, page, report, must_run, tutorial, records, root):
    report.tutorials += 1
    if tutorial is None:
        report.fail(page, f"a gallery page, but no tutorial in {root.name}/ builds it")
    elif must_run:
        if not gallery.ran(tutorial, records, root):
            report.fail(
                page,
                f"{tutorial.source} did not run: {gallery.REPORT} has no passing record of its current source",
            )
        if soup.select_one("table.verified-on") is None:
            report.fail(page, "no 'Verified on' table under the title")
    _check_downloads(site, soup, page, report)


def _release(pair):
    return f"{pair[0]}.{pair[1]}"


def _refresh_hint(records):
    """How to refresh ``records`` (of one records/ file): the command that makes them again."""
    hints = []
    for r in records:
        if r.how == "script":
            hint = f"make verify TORCH={r.torch.split('+')[0]}"
        else:
            hint = f"a site build on {r.cpu_path_on or r.device}, then make records"
        if hint not in hints:
            hints.append(hint)
    return "; ".join(hints)


def check_records(root, report):
    """The committed records against the current sources, and the stated minimum PyTorch."""
    root = Path(root)
    committed = gallery.read_records(root)
    labels = {}
    for tutorial in gallery.tutorials(root):
        try:
            labels[tutorial.source] = gallery.runner_label(root / tutorial.source)
        except ValueError as exc:
            report.fail(tutorial.source, str(exc))
    for path, records in committed.items():
        where = path.relative_to(root).as_posix()
        stale = [r for r in records if not r.current(root)]
        if stale:
            report.warn(
                where,
                f"{len(stale)} stale record(s), of an older source (pages leave them out): "
                f"{', '.join(sorted({r.source for r in stale}))}; refresh them "
                f"({_refresh_hint(stale)}) or remove them",
            )
        misnamed = [
            r
            for r in records
            if r.current(root) and gallery.misnamed(r, labels.get(r.source))
        ]
        if misnamed:
            report.warn(
                where,
                f"{len(misnamed)} record(s) of a {gallery.MULTI_GPU} tutorial name one GPU, "
                "which that tutorial never runs on (made before records named the CPU path; "
                f"pages leave them out): {', '.join(sorted({r.source for r in misnamed}))}; "
                f"remove them (a site build on {gallery.MULTI_GPU_COUNT} GPUs, then make "
                "records, records the GPU path)",
            )
    current = [r for rs in committed.values() for r in rs if r.current(root)]
    stated = {}
    for tutorial in gallery.tutorials(root):
        source = tutorial.source
        match = MINIMUM.search((root / source).read_text(encoding="utf-8"))
        if match is None:
            continue  # tests/test_records.py requires the line of every real tutorial
        minimum = stated[source] = (int(match.group(1)), int(match.group(2)))
        mine = [r for r in current if r.source == source]
        for r in mine:
            # A nightly's failure is news for PyTorch or for us, not a false claim yet.
            if not r.passed and r.torch_release >= minimum and ".dev" not in r.torch:
                report.fail(
                    source,
                    f"says PyTorch {_release(minimum)} or later, but failed on PyTorch {r.torch}, "
                    f"{r.device} ({r.date}); fix it or raise the stated minimum",
                )
        passing = sorted(r.torch_release for r in mine if r.passed)
        if minimum not in passing:
            report.warn(
                source,
                f"no passing record of its current source on PyTorch {_release(minimum)}, "
                f"its stated minimum (make verify TORCH={_release(minimum)}.x)",
            )
        elif passing[0] < minimum:
            report.warn(
                source,
                f"passed on PyTorch {_release(passing[0])}, older than its stated minimum",
            )
    if stated and (root / "requirements.txt").is_file():
        try:
            bound = tuple(int(p) for p in gallery.minimum("torch", root).split(".")[:2])
        except ValueError:
            bound = None
        lowest = min(stated.values())
        if bound != lowest:
            report.fail(
                "requirements.txt",
                f"its torch lower bound is not torch>={_release(lowest)}, the lowest "
                "version a tutorial states; make them agree",
            )


def _check_index(site, tutorials, report):
    index = site / "index.html"
    if not index.is_file():
        report.fail("index.html", "missing")
        return
    soup = BeautifulSoup(index.read_text(encoding="utf-8"), "html.parser")
    linked = set()
    for card in soup.select("div.sd-card"):
        link = card.select_one("a.sd-stretched-link[href], a[href]")
        title = card.get_text(" ", strip=True)[:60]
        if link is None:
            report.fail("index.html", f"card '{title}' has no link")
            continue
        target = _local_target(site, "index.html", link["href"])
        if target is None:
            continue
        if not target.is_file():
            report.fail(
                "index.html",
                f"card '{title}' points to {link['href']}, which does not exist",
            )
        linked.add(target)
    for page in tutorials:
        if (site / page).resolve() not in linked:
            report.fail("index.html", f"no card links to the tutorial {page}")


def _check_gallery_zips(site, report):
    for gallery_index in site.glob("*/index.html"):
        soup = BeautifulSoup(gallery_index.read_text(encoding="utf-8"), "html.parser")
        page = gallery_index.relative_to(site).as_posix()
        if soup.select_one("div.sphx-glr-thumbnails") is None:
            continue
        for kind in ("python", "jupyter"):
            link = soup.select_one(f"div.sphx-glr-download-{kind} a[href]")
            target = link and _local_target(site, page, link["href"])
            if not target or not target.is_file():
                report.fail(page, f"the download-all {kind} zip is missing")


def validate(site, pattern=None, source_root=None):
    """Validate the site under ``site`` built from ``source_root``; return a Report."""
    site = Path(site)
    root = Path(source_root or os.getcwd()).resolve()
    report = Report()
    if not (site / "index.html").is_file():
        report.fail(str(site), "no index.html: is this a built site?")
        return report
    paths = machine_path_pattern(root)
    records = gallery.read_report(site / gallery.REPORT)
    by_page = {t.page: t for t in gallery.tutorials(root)}
    chosen = set(by_page)  # the pages whose tutorial must have run
    if pattern is not None:
        try:
            chosen = {t.page for t in selected(pattern, root)}
        except PlanError as exc:
            report.fail("--pattern", str(exc))
            chosen = set()
    tutorials = []
    for html in sorted(site.rglob("*.html")):
        page = html.relative_to(site).as_posix()
        if page.startswith(("_", "genindex", "search")):
            continue
        soup = BeautifulSoup(html.read_text(encoding="utf-8"), "html.parser")
        if soup.select_one(".sphx-glr-example-title") is not None:
            tutorials.append(page)
            must_run = page in chosen
            tutorial = by_page.get(page)
            _check_tutorial(site, soup, page, report, must_run, tutorial, records, root)
        _check_outputs(soup, page, report)
        for match in sorted({m.group(0) for m in paths.finditer(_visible_text(soup))}):
            report.fail(page, f"shows a build-machine path: {match!r}")
    if not tutorials:
        report.fail(str(site), "no tutorial pages found")
    _check_index(site, tutorials, report)
    _check_gallery_zips(site, report)
    check_records(root, report)
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tools.validate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("site", help="the built site, e.g. _build/html")
    parser.add_argument(
        "--pattern",
        help="only tutorials whose page path matches this regex must have executed (make html-one)",
    )
    parser.add_argument(
        "--source-root",
        default=os.getcwd(),
        help="the checkout, whose absolute path must not appear on pages (default: the current directory)",
    )
    args = parser.parse_args(argv)
    report = validate(args.site, args.pattern, args.source_root)
    for warning in report.warnings:
        print(f"validate: warning: {warning}", file=sys.stderr)
    for problem in report.problems:
        print(f"validate: {problem}", file=sys.stderr)
    if report.problems:
        print(
            f"validate: {len(report.problems)} problem(s) in {args.site}; fix the tutorial or page named above.",
            file=sys.stderr,
        )
        return 1
    print(f"validate: {report.tutorials} tutorial page(s) in {args.site} passed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
