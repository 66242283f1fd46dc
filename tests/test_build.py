"""What `make html` leaves beside the pages: the build report, and what a reader sees that
the validator does not judge: on a CPU, no table column of dashes only and a true memory
footer; on the index, no placeholder thumbnail.

The validator that `make html` runs already checks every page, download and "Verified
on" stamp (the build fails otherwise), so nothing here repeats it. The tests of the
parsers and detectors used here build nothing.
"""

import json
import re
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, tutorial_sources

from tools import gallery

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
        # None only where not measured (the multi-GPU path's memory is in its workers).
        if record["peak_memory_kind"] is None:
            assert record["peak_memory_mib"] is None
        else:
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
            "cpu_path_on",
            "profiler_seconds",
        ):
            assert key in record, key
        # Seconds under torch.profiler, in the build process; a multi-GPU page's workers
        # profile in processes of their own.
        if gallery.runner_label(ROOT / record["source"]) == gallery.MULTI_GPU:
            assert record["profiler_seconds"] is None
        else:
            assert record["profiler_seconds"] >= 0


# --- what a reader sees on a CPU build and on the index (issues 37 and 32) ------------------

DASH = "-"
_GITHUB_RULE = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+$")
_SIMPLE_RULE = re.compile(r"^-+(?: {2,}-+)+ *$")


def text_tables(text):
    """The tables tabulate printed into an output block, in its "github" and "simple"
    formats (the ones the tutorials use): each a list of rows of cells, header first."""
    lines = text.splitlines()
    tables = []
    for i, line in enumerate(lines):
        if i == 0:
            continue
        if _GITHUB_RULE.match(line.strip()):
            rows = [lines[i - 1]]
            for row in lines[i + 1 :]:
                if not row.strip().startswith("|"):
                    break
                rows.append(row)
            tables.append(
                [[c.strip() for c in r.strip()[1:-1].split("|")] for r in rows]
            )
        elif _SIMPLE_RULE.match(line):
            starts = [m.start() for m in re.finditer(r"-+", line)]
            rows = [lines[i - 1]]
            for row in lines[i + 1 :]:
                # tabulate pads every column but the last: a shorter line is not a row.
                if len(row) <= starts[-1] or _SIMPLE_RULE.match(row):
                    break
                rows.append(row)
            ends = starts[1:] + [None]
            tables.append(
                [[r[a:b].strip() for a, b in zip(starts, ends)] for r in rows]
            )
    return tables


def html_tables(soup):
    return [
        [
            [c.get_text(" ", strip=True) for c in tr.find_all(["td", "th"])]
            for tr in t("tr")
        ]
        for t in soup("table")
    ]


def all_dash_columns(table):
    """The headers of the columns in which every cell below the header is "-"."""
    header, body = table[0], table[1:]
    if not body:
        return []
    return [
        header[j] if j < len(header) else f"column {j + 1}"
        for j in range(max(len(r) for r in body))
        if all(j < len(r) and r[j] == DASH for r in body)
    ]


def test_table_parser_finds_an_all_dash_column():
    from tabulate import tabulate

    rows = [["eager", 1.5, None], ["compiled", 1.25, None]]
    for fmt in ("github", "simple"):
        text = "before\n" + tabulate(
            rows, ["variant", "ms", "bound"], fmt, missingval="-"
        )
        (table,) = text_tables(text + "\nafter\n")
        assert all_dash_columns(table) == ["bound"], fmt
        assert table[2][0] == "compiled"


def test_a_cpu_page_has_no_column_of_dashes(built_site):
    """On the CPU a table leaves out the columns only a GPU fills (issue 37)."""
    from bs4 import BeautifulSoup

    site, _ = built_site
    report = json.loads((site / "build_report.json").read_text())
    cpu_pages = [
        f"{gallery.tutorial_of(r['source'], ROOT).page}"
        for r in report["tutorials"]
        if r["device"].startswith("CPU")
    ]
    if not cpu_pages:
        pytest.skip("no page of this build ran on the CPU")
    printed, bad = 0, []
    for page in cpu_pages:
        soup = BeautifulSoup((site / page).read_text(encoding="utf-8"), "html.parser")
        tables = []
        for out in soup.select("div.sphx-glr-script-out pre"):
            tables += text_tables(out.get_text())
        printed += len(tables)
        for table in tables + html_tables(soup):
            if cols := all_dash_columns(table):
                bad.append(f"{page}: {', '.join(cols)}")
    assert printed > 0, "no printed table found on the CPU pages: is the parser broken?"
    assert bad == [], "columns holding only '-' on the CPU:\n" + "\n".join(bad)


# A printed line that calls a row slower either says the gap is within the spread of the
# timings or names at least one measured part that grew, in ms (issue 41).
SLOWER = re.compile(r"\bslower\b", re.IGNORECASE)
WITHIN = re.compile(r"within the spread", re.IGNORECASE)
PART = re.compile(r"[A-Za-z_:#\]\)][^;:]*?\s[+-]\d+\.\d+ ms")


def slower_lines_without_a_cause(text):
    return [
        line.strip()
        for line in text.splitlines()
        if SLOWER.search(line) and not WITHIN.search(line) and not PART.search(line)
    ]


def test_the_slower_line_rule_can_fail():
    ok = (
        "compiled vs eager: 0.443 vs 0.128 ms (+0.315 ms), slower beyond the spread. "
        "Self CPU time per step that grew most: TorchDynamo Cache Lookup +0.120 ms; "
        "Torch-Compiled Region +0.090 ms: 67 % of the gap"
    )
    inside = "compiled vs eager: 1.02 vs 1.00 ms (+0.020 ms), within the spread"
    bad = "compiled: 1.40x slower than eager; disturbed by other work"
    assert slower_lines_without_a_cause("\n".join([ok, inside, bad])) == [bad]


def test_every_slower_line_is_within_the_spread_or_takes_the_gap_apart(built_site):
    """Every page's output, on whatever device the build ran: a line that calls a row slower
    says "within the spread" or names a measured part in ms (issue 41)."""
    from bs4 import BeautifulSoup

    site, _ = built_site
    bad = []
    for source in SOURCES:
        page = site / gallery.tutorial_of(str(source), ROOT).page
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        for out in soup.select("div.sphx-glr-script-out pre"):
            bad += [
                f"{source}: {line}"
                for line in slower_lines_without_a_cause(out.get_text())
            ]
    assert bad == [], "slower lines with no spread and no measured part:\n" + "\n".join(
        bad
    )


# The footer sphinx-gallery writes under a page (show_memory), as the HTML has it.
FOOTER = re.compile(r"Estimated memory usage:</strong>(.*?)</p>", re.DOTALL)


def expected_footer(record):
    """What a page's memory footer says, from its run record (sphinxext/memory.py)."""
    if record.peak_memory_kind is None:
        return None
    host = f"{record.peak_memory_mib:.0f} MB"
    if record.gpu_peak_memory_mib is not None:
        return (
            f"{host} of host memory, {record.gpu_peak_memory_mib:.0f} MB of GPU memory"
        )
    if re.match(r"\d+ x ", record.device):
        return f"{host} of host memory, GPU memory of its worker processes not measured"
    return host


def footer_problems(site, records):
    """Each record's page against it: the footer shows the record's figures (host memory
    within the record's rounding to 0.1 MB, GPU memory as the record has it), or says
    "not measured" where the record has none; a measured page holds its own peak, at
    least 1 MB (never a made-up 0, issue 36); a CPU page has no GPU figure."""
    problems = []
    for r in records:
        page = site / gallery.tutorial_of(r.source, ROOT).page
        shown = [
            " ".join(f.split())
            for f in FOOTER.findall(page.read_text(encoding="utf-8"))
        ]
        if len(shown) != 1:
            problems.append(f"{r.source}: {len(shown)} memory footers on its page")
            continue
        (shown,) = shown
        expected = expected_footer(r)
        if expected is None:
            if shown != "not measured":
                problems.append(
                    f"{r.source}: not measured, but the page shows {shown!r}"
                )
            continue
        if r.peak_memory_kind not in ("pss", "rss-sampled"):
            problems.append(f"{r.source}: a build record of kind {r.peak_memory_kind}")
        if r.peak_memory_mib < 1:
            problems.append(f"{r.source}: {r.peak_memory_mib} MB, below 1 MB")
        if r.device.startswith("CPU") and r.gpu_peak_memory_mib is not None:
            problems.append(f"{r.source}: a CPU page with a GPU figure")
        host = re.match(r"(\d+) MB", shown)
        if host is None or abs(int(host.group(1)) - r.peak_memory_mib) > 0.55:
            problems.append(
                f"{r.source}: the page shows {shown!r}, its record {expected!r}"
            )
        elif shown.removeprefix(host.group(0)) != expected.removeprefix(
            f"{r.peak_memory_mib:.0f} MB"
        ):
            problems.append(
                f"{r.source}: the page shows {shown!r}, its record {expected!r}"
            )
    return problems


def test_the_footer_check_can_fail(tmp_path):
    """A footer that is not its record's figure, a made-up 0, a missing GPU figure."""
    from dataclasses import replace

    (tmp_path / "recipes").mkdir()
    page = tmp_path / "recipes" / "measuring.html"
    record = gallery.RunRecord(
        source="recipes_source/measuring.py",
        checksum="0",
        passed=True,
        device="CPU (Some CPU)",
        torch="2.14.1",
        triton=None,
        python="3.11.2",
        date="2026-11-28",
        seconds=5.0,
        peak_memory_mib=812.4,
        peak_memory_kind="pss",
        how="build",
    )
    gpu = replace(record, device="NVIDIA H100 80GB HBM3", gpu_peak_memory_mib=2048.6)
    multi = replace(record, device="2 x NVIDIA H100 80GB HBM3")
    unmeasured = replace(record, peak_memory_mib=None, peak_memory_kind=None)

    def problems(footer, record):
        page.write_text(f"<p><strong>Estimated memory usage:</strong>  {footer}</p>")
        return footer_problems(tmp_path, [record])

    assert problems("812 MB", record) == []
    assert problems("813 MB", replace(record, peak_memory_mib=812.5)) == []
    assert "its record '812 MB'" in problems("500 MB", record)[0]
    assert "below 1 MB" in problems("0 MB", replace(record, peak_memory_mib=0.2))[0]
    assert problems("not measured", unmeasured) == []
    assert "not measured, but" in problems("0 MB", unmeasured)[0]
    both = "812 MB of host memory, 2049 MB of GPU memory"
    assert problems(both, gpu) == []
    assert problems("812 MB", gpu)  # the GPU figure is missing
    assert problems(both.replace("2049", "2000"), gpu)
    assert (
        "a CPU page with a GPU figure"
        in problems(both, replace(gpu, device="CPU (x)"))[0]
    )
    workers = "812 MB of host memory, GPU memory of its worker processes not measured"
    assert problems(workers, multi) == []
    page.write_text("<p>no footer</p>")
    assert footer_problems(tmp_path, [record]) == [
        "recipes_source/measuring.py: 0 memory footers on its page"
    ]


def test_every_page_shows_the_memory_its_run_record_holds(built_site):
    """Every tutorial's footer against its record in this build's report, on whatever
    device the build ran (issue 36: never a made-up 0 MB)."""
    site, _ = built_site
    records = gallery.read_report(site / gallery.REPORT)
    assert sorted(r.source for r in records) == sorted(str(s) for s in SOURCES)
    problems = footer_problems(site, records)
    assert problems == [], "\n".join(problems)


def placeholder_pixels():
    """sphinx-gallery's placeholder thumbnail as it writes it for a page with no figure:
    its no_image.png scaled to the configured thumbnail size."""
    import sphinx_gallery
    from PIL import Image
    from sphinx.config import Config
    from sphinx_gallery.gen_gallery import DEFAULT_GALLERY_CONF
    from sphinx_gallery.utils import scale_image

    conf = Config.read(str(ROOT))._raw_config["sphinx_gallery_conf"]
    size = conf.get("thumbnail_size", DEFAULT_GALLERY_CONF["thumbnail_size"])
    stock = Path(sphinx_gallery.__file__).parent / "_static" / "no_image.png"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "placeholder.png"
        scale_image(stock, out, *size)
        with Image.open(out) as image:
            return image.convert("RGBA").tobytes()


def is_placeholder(path, placeholder):
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGBA").tobytes() == placeholder


def test_placeholder_detector_knows_sphinx_gallerys_placeholder(tmp_path):
    """What sphinx-gallery's save_thumbnail writes for a page without a figure is detected;
    a page's own figure is not."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sphinx_gallery.gen_gallery import DEFAULT_GALLERY_CONF
    from sphinx_gallery.gen_rst import save_thumbnail

    conf = {**DEFAULT_GALLERY_CONF, "src_dir": str(tmp_path)}
    placeholder = placeholder_pixels()
    images = tmp_path / "images"
    images.mkdir()
    save_thumbnail(
        images / "sphx_glr_none_{0:03}.png", tmp_path / "none.py", {}, {}, conf
    )
    assert is_placeholder(images / "thumb" / "sphx_glr_none_thumb.png", placeholder)

    plt.plot([0, 1], [1, 0])
    plt.savefig(images / "sphx_glr_fig_001.png")
    plt.close("all")
    save_thumbnail(
        images / "sphx_glr_fig_{0:03}.png", tmp_path / "fig.py", {}, {}, conf
    )
    assert not is_placeholder(images / "thumb" / "sphx_glr_fig_thumb.png", placeholder)


def test_no_card_shows_the_placeholder_thumbnail(built_site):
    """Every card on the index shows its page's chart (issue 32)."""
    from bs4 import BeautifulSoup

    site, _ = built_site
    soup = BeautifulSoup(
        (site / "index.html").read_text(encoding="utf-8"), "html.parser"
    )
    thumbs = [
        img["src"]
        for card in soup.select("div.sd-card")
        for img in card.select("img[src]")
        if "_thumb" in img["src"]
    ]
    assert len(thumbs) == len(SOURCES), thumbs
    placeholder = placeholder_pixels()
    shown = [src for src in thumbs if is_placeholder(site / src, placeholder)]
    assert shown == [], (
        f"cards showing sphinx-gallery's placeholder (the page made no figure, or its "
        f"sphinx_gallery_thumbnail_number names none): {shown}"
    )
