"""Spread the gallery over N builders: longest tutorial first onto the least-loaded shard.

    python -m tools.shard -n 3                     print the plan
    python -m tools.shard --shard 2/3              list shard 2's tutorials
    python -m tools.shard --shard 2/3 --pattern    the regex that executes only shard 2 (make html SHARD=2/3)
    python -m tools.shard -n 3 --matrix --default-label gpu    the GitHub Actions matrix, as JSON
    python -m tools.shard --match REGEX            the tutorials GALLERY_PATTERN=REGEX executes (make html-one)

How long a tutorial takes comes from a build report (``build_report.json``: one record per
tutorial with "source" and "seconds"); by default the committed report of the GPU build,
tools/build_report.gpu.json. Tutorials it does not list count the median of the report
(60 s without one).

A tutorial that needs a particular runner (several GPUs, say) names its label in a
sphinx-gallery config comment inside a code cell (below a line of code, like
``sphinx_gallery_thumbnail_number``), which sphinx-gallery strips from the page and notebook:

    # sphinx_gallery_runner_label = "multi-gpu"

Each label gets its own shards (at least one; more when its tutorials take a larger share of
the time); the other shards run on the default runner. Tutorials without a label go wherever
the load is least, labelled shards included.

The same plan comes out on every machine for the same sources, report and N: the shard
jobs of a CI run each compute it again and agree.

A pattern that selects no tutorial (a shard with none, ``--match`` with a name that is not a
tutorial's, or a pattern that is not a regular expression) is an error, in one line that
names the tutorials: a build that executed nothing would otherwise pass.
"""

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tools import gallery

DEFAULT_REPORT = "tools/build_report.gpu.json"
FALLBACK_SECONDS = 60.0
# Matches nothing: the pattern of a shard with no tutorials (an empty GALLERY_PATTERN would
# mean "all" to conf.py).
NOTHING = "(?!)"


class PlanError(Exception):
    """The plan cannot be made as asked; the message says why."""


@dataclass(frozen=True)
class Job:
    """A tutorial to run: its source and page (tools.gallery), duration and runner."""

    source: str  # "recipes_source/foreach_map.py", as in the build report
    page: str  # "recipes/foreach_map.html", as the validator names pages
    seconds: float
    label: str | None = None  # the runner label it requires; None: any runner


@dataclass
class Shard:
    index: int  # 1-based, as in SHARD=i/N
    count: int
    label: str | None  # None: the default runner
    tutorials: list = field(default_factory=list)

    @property
    def seconds(self):
        return sum(t.seconds for t in self.tutorials)

    @property
    def name(self):
        return f"{self.index}/{self.count}"

    def pattern(self):
        """One regex for GALLERY_PATTERN and for the validator's --pattern.

        sphinx-gallery matches it against the source's path, the validator against the page's,
        so each tutorial appears as both, anchored at a path separator.
        """
        if not self.tutorials:
            return NOTHING
        names = []
        for t in sorted(self.tutorials, key=lambda t: t.source):
            names += [re.escape(t.source), re.escape(t.page)]
        return "(?:^|/)(?:" + "|".join(names) + ")$"


# --- the project: which tutorials, and how long each takes ------------------------------


def read_durations(report):
    """{source: seconds} from a build report; {} when the file does not exist."""
    return {r.source: float(r.seconds) for r in gallery.read_report(report)}


def default_seconds(durations):
    return statistics.median(durations.values()) if durations else FALLBACK_SECONDS


def runner_label(source_file):
    """The runner label a tutorial asks for (tools.gallery.runner_label), or None."""
    try:
        return gallery.runner_label(source_file)
    except ValueError as exc:
        raise PlanError(str(exc)) from None


def find_jobs(root, durations):
    """Every tutorial sphinx-gallery would build, with its duration and runner label."""
    default = default_seconds(durations)
    return [
        Job(
            source=t.source,
            page=t.page,
            seconds=durations.get(t.source, default),
            label=runner_label(Path(root) / t.source),
        )
        for t in gallery.tutorials(root)
    ]


# --- the plan ---------------------------------------------------------------------------


def plan(tutorials, n):
    """Assign ``tutorials`` to ``n`` shards; return the list of Shard.

    Longest processing time first: each tutorial, longest first, goes to the least-loaded
    shard that can run it. Without labels the longest shard is then at most the optimum plus
    the longest single tutorial (and at most 4/3 of the optimum).
    """
    if n < 1:
        raise PlanError(f"the number of shards must be at least 1, got {n}")
    labels = sorted({t.label for t in tutorials if t.label})
    if len(labels) > n:
        raise PlanError(
            f"{len(labels)} runner labels are required ({', '.join(labels)}), "
            f"so at least {len(labels)} shards are needed; got {n}"
        )
    total = sum(t.seconds for t in tutorials)
    counts = {}
    for label in labels:
        load = sum(t.seconds for t in tutorials if t.label == label)
        counts[label] = max(1, round(n * load / total)) if total > 0 else 1
    while sum(counts.values()) > n:  # rounding up several labels can overshoot
        largest = max((c, lab) for lab, c in counts.items() if c > 1)[1]
        counts[largest] -= 1
    shard_labels = [None] * (n - sum(counts.values()))
    for label in labels:
        shard_labels += [label] * counts[label]
    shards = [
        Shard(index=i + 1, count=n, label=lab) for i, lab in enumerate(shard_labels)
    ]

    for t in sorted(tutorials, key=lambda t: (-t.seconds, t.source)):
        fits = [s for s in shards if t.label is None or s.label == t.label]
        min(fits, key=lambda s: (s.seconds, s.index)).tutorials.append(t)
    for s in shards:
        s.tutorials.sort(key=lambda t: (-t.seconds, t.source))
    return shards


def selected(pattern, root="."):
    """The tutorials that ``GALLERY_PATTERN=pattern`` selects: those whose source's absolute
    path (what sphinx-gallery searches, conf.py's filename_pattern) or page path (what the
    validator's --pattern searches) the regex matches. PlanError, naming the tutorials, when
    it is not a regular expression or selects none."""
    tutorials = gallery.tutorials(root)
    names = ", ".join(sorted(Path(t.source).stem for t in tutorials)) or "none"
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise PlanError(
            f"PATTERN={pattern!r} is not a regular expression ({exc}); "
            f"the tutorials are: {names}"
        ) from None
    chosen = [
        t
        for t in tutorials
        if regex.search(str((Path(root) / t.source).resolve())) or regex.search(t.page)
    ]
    if not chosen:
        raise PlanError(
            f"PATTERN={pattern!r} matches no tutorial; the tutorials are: {names}"
        )
    return chosen


def parse_shard(text):
    """'2/3' -> (2, 3)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if match is None:
        raise PlanError(f"a shard is written i/N, e.g. 1/2; got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if not 1 <= index <= count:
        raise PlanError(f"shard {text}: i must be between 1 and N")
    return index, count


# --- output -----------------------------------------------------------------------------


def format_plan(shards, default_label, note):
    runner_width = max(len(s.label or default_label) for s in shards)
    lines = [note]
    for s in shards:
        runner = s.label or default_label
        lines.append(
            f"shard {s.name:>5}  runner {runner:<{runner_width}}  {s.seconds:8.1f} s  {len(s.tutorials)} tutorial(s)"
        )
        for t in s.tutorials:
            required = f"  (requires {t.label})" if t.label else ""
            lines.append(f"    {t.seconds:8.1f} s  {t.source}{required}")
    return "\n".join(lines)


def matrix(shards, default_label):
    """A GitHub Actions matrix: one entry per shard that has work."""
    return {
        "include": [
            {
                "shard": s.name,
                "index": s.index,
                "runner": s.label or default_label,
                "seconds": round(s.seconds, 1),
            }
            for s in shards
            if s.tutorials
        ]
    }


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tools.shard",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "-n", "--shards", type=int, help="the number of shards N (or give --shard i/N)"
    )
    parser.add_argument(
        "--shard",
        help="one shard, i/N: print its tutorials (or its regex with --pattern)",
    )
    parser.add_argument(
        "--pattern",
        action="store_true",
        help="with --shard: print the shard's regex only",
    )
    parser.add_argument(
        "--matrix",
        action="store_true",
        help="print the plan as a GitHub Actions matrix (JSON)",
    )
    parser.add_argument(
        "--match",
        metavar="REGEX",
        help="list the tutorials GALLERY_PATTERN=REGEX executes; exit 2 if none",
    )
    parser.add_argument(
        "--report",
        default=DEFAULT_REPORT,
        help=f"build report with the durations (default: {DEFAULT_REPORT})",
    )
    parser.add_argument(
        "--default-label",
        default="gpu",
        help="runner label of shards with no required label (default: gpu)",
    )
    args = parser.parse_args(argv)

    if args.match is not None:
        try:
            chosen = selected(args.match)
        except PlanError as exc:
            print(exc, file=sys.stderr)
            return 2
        print(f"PATTERN={args.match!r} selects: {', '.join(t.source for t in chosen)}")
        return 0
    try:
        index = None
        if args.shard:
            index, count = parse_shard(args.shard)
            if args.shards is not None and args.shards != count:
                raise PlanError(f"--shard {args.shard} and -n {args.shards} disagree")
        elif args.shards is not None:
            count = args.shards
        else:
            raise PlanError(
                "give the number of shards (-n N) or one shard (--shard i/N)"
            )
        if args.pattern and index is None:
            raise PlanError("--pattern needs --shard i/N")
        durations = read_durations(args.report)
        tutorials = find_jobs(".", durations)
        shards = plan(tutorials, count)
        if index is not None and not shards[index - 1].tutorials:
            names = ", ".join(sorted(Path(t.source).stem for t in tutorials)) or "none"
            raise PlanError(
                f"shard {args.shard} has no tutorial ({len(tutorials)} tutorial(s) on "
                f"{count} shards); the tutorials are: {names}"
            )
    except PlanError as exc:
        print(f"shard: {exc}", file=sys.stderr)
        return 2

    if index is not None:
        shard = shards[index - 1]
        if args.pattern:
            print(shard.pattern())
        else:
            for t in shard.tutorials:
                print(t.source)
        return 0
    if args.matrix:
        print(json.dumps(matrix(shards, args.default_label), separators=(",", ":")))
        return 0
    unknown = sum(1 for t in tutorials if t.source not in durations)
    source = args.report if durations else f"{args.report} (not found)"
    note = (
        f"{len(tutorials)} tutorial(s) on {count} shard(s); durations from {source}, "
        f"{unknown} at the default {default_seconds(durations):.1f} s"
    )
    print(format_plan(shards, args.default_label, note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
