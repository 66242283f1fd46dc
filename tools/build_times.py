"""A build report's figures per tutorial, as the README's "Build times" table (Markdown).

    python -m tools.build_times [REPORT]      default: tools/build_report.gpu.json

One row per tutorial of the report, in its order: the device and date of the run, its
seconds, host and GPU memory (what its page's footer shows) and seconds under
torch.profiler; then the total seconds. The README's table is this output for the
committed report (tests/test_build_times.py), so that it changes with the report and
nowhere else; the report is the shard planner's durations (tools/shard.py).
"""

import argparse
import sys
from pathlib import Path

from tools import gallery
from tools.shard import DEFAULT_REPORT

HEADER = (
    "| Tutorial | Device | Date | Seconds | Host memory (MB) | GPU memory (MB) "
    "| Under the profiler (s) |\n"
    "| --- | --- | --- | ---: | ---: | ---: | ---: |"
)


def _mib(value):
    return "not measured" if value is None else f"{value:,.0f}"


def table(records):
    """The Markdown table of ``records`` (tools.gallery.RunRecord), with a total row."""
    rows = [HEADER]
    for r in records:
        profiler = (
            "not measured"
            if r.profiler_seconds is None
            else f"{r.profiler_seconds:.1f}"
        )
        rows.append(
            f"| `{r.source}` | {r.device} | {r.date} | {r.seconds:.1f} | "
            f"{_mib(r.peak_memory_mib)} | {_mib(r.gpu_peak_memory_mib)} | {profiler} |"
        )
    total = sum(r.seconds for r in records)
    rows.append(f"| all {len(records)} | | | {total:.1f} | | | |")
    return "\n".join(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tools.build_times", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "report", nargs="?", default=DEFAULT_REPORT, help="a build_report.json"
    )
    args = parser.parse_args(argv)
    records = gallery.read_report(Path(args.report))
    if not records:
        print(f"build_times: no run records in {args.report}", file=sys.stderr)
        return 2
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
