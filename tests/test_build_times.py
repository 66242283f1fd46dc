"""The README's build-times table is the committed GPU build report's, as
``python -m tools.build_times`` prints it: it changes with the report, and nowhere else."""

import dataclasses
import re
import subprocess
import sys

from conftest import ROOT

from tools import build_times, gallery
from tools.shard import DEFAULT_REPORT

BLOCK = re.compile(
    r"<!-- python -m tools.build_times: begin -->\n(.*?)\n"
    r"<!-- python -m tools.build_times: end -->",
    re.DOTALL,
)


def readme_table(text):
    found = BLOCK.findall(text)
    assert len(found) == 1, f"{len(found)} build-times tables in the README"
    return found[0]


def test_the_readme_shows_the_committed_reports_figures():
    records = gallery.read_report(ROOT / DEFAULT_REPORT)
    assert records, f"no records in {DEFAULT_REPORT}"
    assert readme_table((ROOT / "README.md").read_text(encoding="utf-8")) == (
        build_times.table(records)
    ), (
        f"README.md's build-times table is not {DEFAULT_REPORT}'s: put the output of "
        "`python -m tools.build_times` between its two markers"
    )


def test_the_table_check_can_fail():
    """A README whose table is of an older report (one run's seconds changed) fails."""
    records = gallery.read_report(ROOT / DEFAULT_REPORT)
    older = [dataclasses.replace(records[0], seconds=records[0].seconds + 10)]
    older += records[1:]
    readme = (
        "<!-- python -m tools.build_times: begin -->\n"
        f"{build_times.table(older)}\n"
        "<!-- python -m tools.build_times: end -->\n"
    )
    assert readme_table(readme) != build_times.table(records)
    total = sum(r.seconds for r in records)
    assert build_times.table(records).endswith(
        f"| all {len(records)} | | | {total:.1f} | | | |"
    )


def test_the_tool_prints_the_table_and_refuses_an_empty_report(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tools.build_times"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == build_times.table(
        gallery.read_report(ROOT / DEFAULT_REPORT)
    )
    empty = tmp_path / "build_report.json"
    empty.write_text('{"tutorials": []}')
    done = subprocess.run(
        [sys.executable, "-m", "tools.build_times", str(empty)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "no run records" in done.stderr
