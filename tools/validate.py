"""Check a built site the way a reader would meet it.

    python -m tools.validate _build/html [--pattern REGEX] [--require-device TEXT]

Reads every HTML page with an HTML parser and fails, naming the page and the reason, when:

* a tutorial page records a run time of zero (it did not execute), or has no
  "Verified on" stamp;
* an output block shows a Python traceback that its code cell does not mark as
  intended (a comment containing ``intended-traceback``), or a DeprecationWarning or
  FutureWarning that it does not mark (``intended-warning``);
* a tutorial's .py or .ipynb download is missing, or the notebook is not valid nbformat;
  a gallery's download-all zip is missing;
* text on a page shows an absolute path of the build machine;
* a card on the landing page points to a page that does not exist, or a tutorial has no
  card.

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

TRACEBACK = "Traceback (most recent call last)"
INTENDED = "intended-traceback"
WARNING = re.compile(r"\b(DeprecationWarning|FutureWarning)\b")
INTENDED_WARNING = "intended-warning"
_TIMING = re.compile(r"\((\d+) minutes? ([\d.]+) seconds?\)")


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
    tutorials: int = 0

    def fail(self, page, reason):
        self.problems.append(f"{page}: {reason}")


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


def _run_seconds(soup):
    timing = soup.select_one("p.sphx-glr-timing")
    if timing is None:
        return None
    match = _TIMING.search(timing.get_text(" "))
    if match is None:
        return None
    return int(match.group(1)) * 60 + float(match.group(2))


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
        if suffix == ".ipynb":
            try:
                nbformat.validate(nbformat.read(target, as_version=4))
            except Exception as exc:
                # Any reader or schema error means a broken download.
                report.fail(page, f"the notebook is not valid nbformat: {exc!s:.200}")


def _check_tutorial(site, soup, page, report, must_run):
    report.tutorials += 1
    seconds = _run_seconds(soup)
    if must_run:
        if seconds is None:
            report.fail(page, "no recorded run time (sphx-glr-timing)")
        elif seconds <= 0:
            report.fail(page, "recorded run time is zero: the tutorial did not execute")
        if soup.select_one("p.verified-stamp") is None:
            report.fail(page, "no 'Verified on' stamp under the title")
    _check_downloads(site, soup, page, report)


def _check_stamp_device(soup, page, report, require_device):
    stamp = soup.select_one("p.verified-stamp")
    if stamp is not None and require_device not in stamp.get_text():
        report.fail(
            page,
            f"stamp does not name {require_device!r}: {stamp.get_text(' ', strip=True)}",
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


def validate(site, pattern=None, require_device=None, source_root=None):
    """Validate the site under ``site``; return a Report."""
    site = Path(site)
    report = Report()
    if not (site / "index.html").is_file():
        report.fail(str(site), "no index.html: is this a built site?")
        return report
    paths = machine_path_pattern(source_root)
    tutorials = []
    for html in sorted(site.rglob("*.html")):
        page = html.relative_to(site).as_posix()
        if page.startswith(("_", "genindex", "search")):
            continue
        soup = BeautifulSoup(html.read_text(encoding="utf-8"), "html.parser")
        if soup.select_one(".sphx-glr-example-title") is not None:
            tutorials.append(page)
            must_run = pattern is None or re.search(pattern, page) is not None
            _check_tutorial(site, soup, page, report, must_run)
            if require_device:
                _check_stamp_device(soup, page, report, require_device)
        _check_outputs(soup, page, report)
        for match in sorted({m.group(0) for m in paths.finditer(_visible_text(soup))}):
            report.fail(page, f"shows a build-machine path: {match!r}")
    if not tutorials:
        report.fail(str(site), "no tutorial pages found")
    _check_index(site, tutorials, report)
    _check_gallery_zips(site, report)
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
        "--require-device", help="every stamp must name this device, e.g. 'NVIDIA'"
    )
    parser.add_argument(
        "--source-root",
        default=os.getcwd(),
        help="the checkout, whose absolute path must not appear on pages (default: the current directory)",
    )
    args = parser.parse_args(argv)
    report = validate(args.site, args.pattern, args.require_device, args.source_root)
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
