"""Sharded builds: the planner balances and partitions, and merged shards make the single site.

The merge tests build a small throw-away gallery (four examples that take a second each) in
temporary copies of the project, one per shard as on separate CI runners, rather than
executing the real tutorials again.
"""

import itertools
import json
import random
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from conftest import ROOT, copy_build_machinery, make, page_of, tutorial_sources

from tools import gallery
from tools.shard import (
    DEFAULT_REPORT,
    Job,
    PlanError,
    find_jobs,
    plan,
    read_durations,
    runner_label,
)
from tools.validate import validate

# --- the planner -------------------------------------------------------------------------


def shard_cli(*args, cwd=ROOT, check=True):
    proc = subprocess.run(
        [sys.executable, "-m", "tools.shard", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def loads(shards):
    return [s.seconds for s in shards]


def optimum(seconds, n):
    """The best possible longest shard, by trying every assignment (small inputs only)."""
    best = float("inf")
    for assignment in itertools.product(range(n), repeat=len(seconds)):
        load = [0.0] * n
        for s, shard in zip(seconds, assignment):
            load[shard] += s
        best = min(best, max(load))
    return best


def tutorials_of(seconds, labels=None):
    labels = labels or [None] * len(seconds)
    return [
        Job(
            source=f"recipes_source/t{i}.py",
            page=f"recipes/t{i}.html",
            seconds=s,
            label=lab,
        )
        for i, (s, lab) in enumerate(zip(seconds, labels))
    ]


SAMPLES = [
    [600, 420, 300, 240, 200, 90, 60, 45, 30],  # a few long tutorials, many recipes
    [100, 100, 100, 100, 100, 100, 100],  # equal: counts must differ by at most one
    [3, 3, 2, 2, 2],  # the classic case where greedy is not optimal
    [1000, 10, 10, 10, 10],  # one dominates
    [7.5, 61.2, 33.0, 12.9, 48.1, 5.0, 90.4, 27.3],
]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("seconds", SAMPLES, ids=lambda s: f"{len(s)}-items")
def test_plan_is_within_the_optimum_plus_the_longest_item(seconds, n):
    shards = plan(tutorials_of(seconds), n)
    assert len(shards) == n
    assert sorted(t.seconds for s in shards for t in s.tutorials) == sorted(seconds)
    best = optimum(seconds, n)
    assert max(loads(shards)) <= best + max(seconds) + 1e-9
    # Longest-first does better still: at most 4/3 of the optimum.
    assert max(loads(shards)) <= 4 / 3 * best + 1e-9


def test_plan_is_balanced_on_random_durations():
    rng = random.Random(0)
    for _ in range(200):
        seconds = [
            round(rng.lognormvariate(4, 1), 1) for _ in range(rng.randint(1, 40))
        ]
        n = rng.randint(1, 8)
        longest = max(loads(plan(tutorials_of(seconds), n)))
        # The optimum is at least the average load, so this is stricter than optimum + longest.
        assert longest <= sum(seconds) / n + max(seconds) + 1e-9


def test_equal_durations_spread_evenly():
    shards = plan(tutorials_of([60.0] * 7), 3)
    assert sorted(len(s.tutorials) for s in shards) == [2, 2, 3]


def test_required_runner_label_gets_its_own_shard():
    seconds = [300, 200, 100, 100, 50]
    labels = [None, "multi-gpu", None, None, None]
    shards = plan(tutorials_of(seconds, labels), 3)
    multi = [s for s in shards if s.label == "multi-gpu"]
    assert len(multi) == 1
    assert "recipes_source/t1.py" in [t.source for t in multi[0].tutorials]
    for s in shards:
        if s.label is None:
            assert all(t.label is None for t in s.tutorials)


def test_too_few_shards_for_the_labels_is_an_error():
    with pytest.raises(PlanError, match="at least 2 shards"):
        plan(tutorials_of([1, 2, 3], [None, "a", "b"]), 1)


def test_shards_with_no_work_match_nothing():
    shards = plan(tutorials_of([5, 5]), 4)
    empty = [s for s in shards if not s.tutorials]
    assert len(empty) == 2
    for s in empty:
        assert not re.search(s.pattern(), "recipes_source/t0.py")


# --- the CLI on the real gallery ----------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3])
def test_shard_patterns_partition_the_gallery(n):
    sources = [str(s) for s in tutorial_sources()]
    pages = [page_of(s) for s in tutorial_sources()]
    patterns = [
        shard_cli("--shard", f"{i}/{n}", "--pattern").stdout.strip()
        for i in range(1, n + 1)
    ]
    listed = [shard_cli("--shard", f"{i}/{n}").stdout.split() for i in range(1, n + 1)]
    assert sorted(itertools.chain(*listed)) == sorted(sources)
    for source, page in zip(sources, pages):
        # sphinx-gallery matches the source's full path, the validator the page's path.
        owners = [i for i, p in enumerate(patterns) if re.search(p, f"{ROOT}/{source}")]
        assert len(owners) == 1, (source, patterns)
        assert [i for i, p in enumerate(patterns) if re.search(p, page)] == owners
        assert source in listed[owners[0]]


def test_plan_and_matrix_output():
    printed = shard_cli("-n", "2").stdout
    for source in tutorial_sources():
        assert printed.count(str(source)) == 1
    matrix = json.loads(
        shard_cli("-n", "2", "--matrix", "--default-label", "my-gpu").stdout
    )
    assert {e["shard"] for e in matrix["include"]} <= {"1/2", "2/2"}
    # Shards without a required label run on the default runner; labelled ones on theirs.
    labels = {job.label for job in find_jobs(ROOT, {})} - {None}
    runners = [e["runner"] for e in matrix["include"]]
    assert "my-gpu" in runners
    assert set(runners) <= {"my-gpu", *labels}


# The tutorial that needs two GPUs; its label comes from its own source, as CI reads it.
MULTI_GPU_SOURCE = "intermediate_source/distributed_compile_tutorial.py"


def test_distributed_tutorial_asks_for_a_multi_gpu_runner():
    assert runner_label(ROOT / MULTI_GPU_SOURCE) == "multi-gpu"


@pytest.mark.parametrize("n", [1, 2, 3])
def test_real_plan_sends_the_multi_gpu_tutorial_to_a_multi_gpu_shard(n):
    label = runner_label(ROOT / MULTI_GPU_SOURCE)
    jobs = find_jobs(ROOT, read_durations(ROOT / DEFAULT_REPORT))
    shards = plan(jobs, n)
    (owner,) = [
        s for s in shards if MULTI_GPU_SOURCE in [t.source for t in s.tutorials]
    ]
    assert owner.label == label
    assert sum(s.label == label for s in shards) >= 1
    for s in shards:
        if s.label is None:
            assert all(t.label is None for t in s.tutorials), s.name
    # The CLI agrees: the matrix names the runner, and that shard's pattern selects the
    # tutorial for sphinx-gallery (source path) and for the validator (page path).
    matrix = json.loads(shard_cli("-n", str(n), "--matrix").stdout)
    (entry,) = [e for e in matrix["include"] if e["index"] == owner.index]
    assert entry["runner"] == label
    pattern = shard_cli("--shard", owner.name, "--pattern").stdout.strip()
    assert re.search(pattern, f"{ROOT}/{MULTI_GPU_SOURCE}")
    assert re.search(pattern, page_of(Path(MULTI_GPU_SOURCE)))


def test_bad_shard_is_refused():
    proc = shard_cli("--shard", "3/2", "--pattern", check=False)
    assert proc.returncode == 2
    assert "between 1 and N" in proc.stderr


def one_line_naming(output, stems):
    """The one line a refused pattern prints (make's own 'make: ***' line aside), which
    names every tutorial; no traceback."""
    lines = [ln for ln in output.splitlines() if not ln.startswith("make: ***")]
    assert len(lines) == 1 and "Traceback" not in output, output
    names = lines[0].split("the tutorials are: ")[1].split(", ")
    assert names == sorted(stems), lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "pattern, reason",
    [("no_such_page", "matches no tutorial"), ("[", "is not a regular expression")],
)
def test_a_pattern_that_selects_nothing_is_refused_in_one_line(pattern, reason):
    proc = shard_cli("--match", pattern, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    line = one_line_naming(proc.stderr, [s.stem for s in tutorial_sources()])
    assert line.startswith(f"PATTERN={pattern!r} {reason}")


def test_match_lists_what_a_pattern_executes():
    assert shard_cli("--match", "foreach").stdout == (
        "PATTERN='foreach' selects: recipes_source/foreach_map.py\n"
    )
    # sphinx-gallery searches the source's path, the validator the page's: either selects.
    assert "intermediate_source/" in shard_cli("--match", "intermediate/").stdout
    assert "recipes_source/" in shard_cli("--match", "_source/.*map").stdout


def test_a_shard_with_no_tutorial_is_refused_in_one_line(tmp_path):
    project = small_project(tmp_path / "project")
    empty = [s.index for s in plan(find_jobs(project, DURATIONS), 5) if not s.tutorials]
    assert empty, "five shards for four tutorials: one has none"
    for i in range(1, 6):
        proc = shard_cli("--shard", f"{i}/5", "--pattern", cwd=project, check=False)
        if i in empty:
            assert proc.returncode == 2
            line = one_line_naming(proc.stderr, [Path(s).stem for s in EXAMPLES])
            assert line.startswith(f"shard: shard {i}/5 has no tutorial"), line
        else:
            assert proc.returncode == 0 and proc.stdout.startswith("(?:^|/)")


def test_make_html_one_refuses_a_pattern_that_selects_nothing(tmp_path):
    """`make html-one`: a pattern that is not a regex or matches no tutorial stops before
    Sphinx starts, in one line naming the tutorials (tests/test_rebuild.py builds with a
    good one)."""
    project = small_project(tmp_path / "project")
    stems = [Path(s).stem for s in EXAMPLES]
    for pattern in ("no_such_page", "["):
        proc = make("html-one", f"PATTERN={pattern}", cwd=project, check=False)
        assert proc.returncode != 0
        one_line_naming(proc.stdout + proc.stderr, stems)
        assert not (project / "_build").exists(), "Sphinx ran"


# --- building shards and merging them -----------------------------------------------------

EXAMPLES = {
    "recipes_source/alpha.py": (
        "Alpha",
        "import matplotlib.pyplot as plt\n\nplt.plot([0, 1, 2], [0, 1, 4])\nplt.show()\nprint('alpha ran')\n",
    ),
    "recipes_source/beta.py": ("Beta", "print('beta ran', sum(range(10)))\n"),
    "intermediate_source/gamma_tutorial.py": (
        "Gamma",
        "print('gamma ran')\n# sphinx_gallery_runner_label = \"multi-gpu\"\n",
    ),
    "intermediate_source/delta_tutorial.py": (
        "Delta",
        "import matplotlib.pyplot as plt\n\nplt.bar([1, 2], [3, 1])\nplt.show()\nprint('delta ran')\n",
    ),
}
# Durations for the planner: shard 1 (runner gpu) gets alpha and delta, shard 2 (runner
# multi-gpu, which gamma requires) beta and gamma.
DURATIONS = {
    "recipes_source/alpha.py": 30,
    "recipes_source/beta.py": 20,
    "intermediate_source/gamma_tutorial.py": 15,
    "intermediate_source/delta_tutorial.py": 10,
}
PLAN = {
    1: {"recipes/alpha.html", "intermediate/delta_tutorial.html"},
    2: {"recipes/beta.html", "intermediate/gamma_tutorial.html"},
}


def small_project(path):
    """A copy of the project's build machinery with a four-example gallery."""
    copy_build_machinery(path)
    cards = []
    for source, (title, code) in EXAMPLES.items():
        (path / source).write_text(
            f'"""\n{title}\n{"=" * len(title)}\n\nA tiny example.\n"""\n\n# %%\n{code}'
        )
        doc = page_of(Path(source)).removesuffix(".html")
        cards.append(
            f"   .. grid-item-card:: {title}\n      :link: {doc}\n      :link-type: doc\n\n      {title}.\n"
        )
    (path / "index.rst").write_text(
        "Test\n====\n\n.. grid:: 2\n\n"
        + "\n".join(cards)
        + "\n.. toctree::\n   :hidden:\n\n   recipes/index\n   intermediate/index\n"
    )
    report = {"tutorials": [{"source": s, "seconds": t} for s, t in DURATIONS.items()]}
    (path / "tools" / "build_report.gpu.json").write_text(json.dumps(report))
    return path


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """Two shards built on 'separate runners', a merge of them, and a single build to compare."""
    base = tmp_path_factory.mktemp("sharded")

    def build(name, *args):
        project = small_project(base / name)
        make("html", *args, cwd=project)
        return project

    # Three independent builds, run side by side as on separate runners.
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = [pool.submit(build, f"runner-{i}", f"SHARD={i}/2") for i in (1, 2)]
        runs.append(pool.submit(build, "single"))
        runner_1, runner_2, single = (run.result() for run in runs)
    shards = [runner_1 / "_build" / "shard", runner_2 / "_build" / "shard"]
    merged = small_project(base / "merge")
    proc = make("merge", f"SHARDS={shards[0]} {shards[1]}", cwd=merged)
    return {
        "shards": shards,
        "single": single / "_build" / "html",
        "merged": merged / "_build" / "html",
        "merge_output": proc.stdout + proc.stderr,
        "base": base,
    }


def files(site):
    return {
        p.relative_to(site).as_posix()
        for p in site.rglob("*")
        if p.is_file() and ".doctrees" not in p.parts
    }


def test_small_gallery_plan_is_as_expected(sharded):
    project = sharded["base"] / "single"
    for i, pages in PLAN.items():
        pattern = shard_cli(
            "--shard", f"{i}/2", "--pattern", cwd=project
        ).stdout.strip()
        assert {
            p for p in (page_of(Path(s)) for s in EXAMPLES) if re.search(pattern, p)
        } == pages


def test_small_gallery_plan_puts_gamma_on_its_runner(sharded):
    project = sharded["base"] / "single"
    printed = shard_cli("-n", "2", cwd=project).stdout
    assert "(requires multi-gpu)" in printed
    matrix = json.loads(shard_cli("-n", "2", "--matrix", cwd=project).stdout)
    assert [(e["shard"], e["runner"]) for e in matrix["include"]] == [
        ("1/2", "gpu"),
        ("2/2", "multi-gpu"),
    ]


def test_runner_label_comment_stays_off_the_page_and_notebook(sharded):
    site = sharded["merged"]
    assert "gamma ran" in (site / "intermediate" / "gamma_tutorial.html").read_text()
    (notebook,) = (site / "_downloads").rglob("gamma_tutorial.ipynb")
    for text in (
        (site / "intermediate" / "gamma_tutorial.html").read_text(),
        notebook.read_text(),
    ):
        assert "sphinx_gallery_runner_label" not in text


def test_each_shard_executed_only_its_own_pages(sharded):
    project = sharded["base"] / "single"
    for i, shard in enumerate(sharded["shards"], start=1):
        executed = set()
        for t in gallery.tutorials(project):
            record = t.generated(shard).with_suffix(gallery.RECORD_SUFFIX)
            if record.is_file() and gallery.ran(
                t, [gallery.read_record(record)], project
            ):
                executed.add(t.page)
        assert executed == PLAN[i]


def test_merged_site_has_exactly_the_files_of_a_single_build(sharded):
    assert files(sharded["merged"]) == files(sharded["single"])


# What differs from one run of a tutorial to the next: its run time, as sphinx-gallery's
# footer, the "Verified on" table and the execution-times tables show it, and the memory
# it measured (its footer, the execution-times tables). Every other character of a merged
# page, every other number included, is a single build's.
RUN_TIME = re.compile(r"\(\d+ minutes \d+\.\d+ seconds\)")
_RUN_FIGURES = [
    (RUN_TIME, "(RUN TIME)"),
    (re.compile(r"\b\d\d:\d\d\.\d\d\d\b"), "RUN TIME"),  # execution times: mm:ss.fff
    (re.compile(r"<td><p>\d+ s</p></td>"), "<td><p>RUN TIME</p></td>"),  # Verified on
    (re.compile(r"\| \d+ s \|"), "| RUN TIME |"),  # Verified on, Markdown
    (re.compile(r"(Estimated memory usage:\S*\s+)\d+ MB"), r"\1MEMORY"),
]
# The execution-times tables' memory column, after a time masked above, and their rows'
# stripes (the slowest row comes first).
_TIMES_MEMORY = [
    (re.compile(r'class="row-(?:even|odd)"'), 'class="row"'),
    (re.compile(r"^<td><p>\d+\.\d</p></td>$", re.M), "<td><p>MEMORY</p></td>"),
    (re.compile(r"^(\s+- )\d+\.\d$", re.M), r"\1MEMORY"),
    (re.compile(r"(\| RUN TIME \| )\d+\.\d( \|)"), r"\1MEMORY\2"),
]


def without_run_figures(text, times_table=False):
    for pattern, mask in _RUN_FIGURES + (_TIMES_MEMORY if times_table else []):
        text = pattern.sub(mask, text)
    return text


def page_differences(merged, single, times_table=False):
    """The lines of two versions of a page that differ once the run's own figures are
    masked (in any order: the execution-times tables list the slowest first)."""
    a, b = (
        sorted(without_run_figures(t, times_table).splitlines())
        for t in (merged, single)
    )
    return sorted(set(a) ^ set(b)) if a != b else []


def test_the_page_comparison_can_fail():
    """A changed number that is not a run's own figure is a difference; a run time is not."""
    single = (
        "<p>beta ran 45</p>\n<td><p>9 s</p></td>\n"
        "<strong>Total running time of the script:</strong> (0 minutes 0.900 seconds)</p>\n"
        "<p><strong>Estimated memory usage:</strong>  12 MB</p>"
    )
    runs_again = (
        single.replace("9 s", "13 s")
        .replace("0.900", "1.957")
        .replace("12 MB", "14 MB")
    )
    assert page_differences(runs_again, single) == []
    wrong = runs_again.replace("beta ran 45", "beta ran 46")
    assert page_differences(wrong, single) == [
        "<p>beta ran 45</p>",
        "<p>beta ran 46</p>",
    ]
    times = "<td><p>00:02.117</p></td>\n<td><p>0.6</p></td>\n<td><p>2</p></td>"
    faster = times.replace("02.117", "01.500").replace("0.6", "0.0")
    assert page_differences(faster, times, times_table=True) == []
    assert page_differences(faster.replace("<p>2<", "<p>3<"), times, True)


def test_merged_pages_are_a_single_builds_but_for_run_times(sharded):
    site, single = sharded["merged"], sharded["single"]
    pages = sorted(p for p in files(single) if p.endswith((".html", ".md", ".txt")))
    assert len(pages) > 10, pages
    for page in pages:
        differences = page_differences(
            (site / page).read_text(),
            (single / page).read_text(),
            times_table="sg_execution_times" in page or page == "llms-full.txt",
        )
        assert differences == [], f"{page}: {differences[:6]}"


def test_merged_pages_show_the_run_of_the_shard_that_ran_them(sharded):
    """The run's own figures on a merged page are those of the shard that executed it: its
    run time and memory as its generated page has them, and its record's seconds."""
    site = sharded["merged"]
    project = sharded["base"] / "single"
    checked = 0
    for i, shard in enumerate(sharded["shards"], start=1):
        for t in gallery.tutorials(project):
            if t.page not in PLAN[i]:
                continue
            generated = (shard / t.gallery / f"{t.stem}.rst").read_text()
            page = (site / t.page).read_text()
            (run_time,) = RUN_TIME.findall(generated)
            assert RUN_TIME.findall(page) == [run_time], t.page
            (memory,) = re.findall(r"Estimated memory usage:\*\*\s+(\d+ MB)", generated)
            assert re.findall(r"Estimated memory usage:</strong>\s+(\d+ MB)", page) == [
                memory
            ], t.page
            record = gallery.read_record(
                t.generated(shard).with_suffix(gallery.RECORD_SUFFIX)
            )
            assert f"<td><p>{record.seconds:.0f} s</p></td>" in page, t.page
            checked += 1
    assert checked == len(EXAMPLES)


def test_merged_site_passes_the_validator_and_every_page_ran_once(sharded):
    site = sharded["merged"]
    assert validate(site, source_root=sharded["base"] / "merge").problems == []
    report = json.loads((site / "build_report.json").read_text())
    assert sorted(r["source"] for r in report["tutorials"]) == sorted(EXAMPLES)
    for source in EXAMPLES:
        page = page_of(Path(source))
        soup = BeautifulSoup((site / page).read_text(), "html.parser")
        assert soup.select_one("table.verified-on") is not None, page
        stem = page.split("/")[1].removesuffix(".html")
        assert f"{stem.split('_')[0]} ran" in soup.get_text(), page
        for suffix in (".py", ".ipynb", ".zip"):
            assert list((site / "_downloads").rglob(f"{stem}{suffix}")), (
                f"{stem}{suffix}"
            )
    for zip_name in (
        "recipes_python.zip",
        "recipes_jupyter.zip",
        "intermediate_python.zip",
        "intermediate_jupyter.zip",
    ):
        assert list((site / "_downloads").rglob(zip_name)), zip_name
    for i, pages in PLAN.items():
        for page in pages:
            source = next(s for s in EXAMPLES if page_of(Path(s)) == page)
            assert re.search(
                rf"{re.escape(source)}\s+from \S*runner-{i}/", sharded["merge_output"]
            )


def test_merged_plots_and_thumbnails_come_from_the_shard_that_ran_them(sharded):
    site, single = sharded["merged"], sharded["single"]
    for image in ("sphx_glr_alpha_001.png", "sphx_glr_delta_tutorial_001.png"):
        assert (site / "_images" / image).is_file()
    for thumb in ("sphx_glr_alpha_thumb.png", "sphx_glr_delta_tutorial_thumb.png"):
        assert (site / "_images" / thumb).read_bytes() == (
            single / "_images" / thumb
        ).read_bytes()


def test_merge_fails_when_a_page_was_executed_by_no_shard(sharded, tmp_path):
    project = small_project(tmp_path / "merge")
    proc = make("merge", f"SHARDS={sharded['shards'][0]}", cwd=project, check=False)
    assert proc.returncode != 0
    assert "recipes_source/beta.py: no shard executed it" in proc.stderr
    assert not (project / "_build" / "html").exists()


def test_merge_fails_when_a_page_was_executed_twice(sharded, tmp_path):
    twin = tmp_path / "shard-1-again"
    shutil.copytree(sharded["shards"][0], twin)
    project = small_project(tmp_path / "merge")
    proc = make(
        "merge",
        f"SHARDS={sharded['shards'][0]} {sharded['shards'][1]} {twin}",
        cwd=project,
        check=False,
    )
    assert proc.returncode != 0
    assert "recipes_source/alpha.py: executed twice" in proc.stderr
