"""The validator passes a good site and names each kind of defect in a crafted one."""

import dataclasses
import json
import shutil
import subprocess
import sys

import nbformat
import pytest
from conftest import ROOT

from tools import gallery
from tools.validate import validate

GOOD_NOTEBOOK = nbformat.writes(
    nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
)

INDEX = """<html><body>
<div class="sd-card"><a class="sd-stretched-link" href="recipes/demo.html">Demo</a></div>
</body></html>"""

PAGE = """<html><body>
<section class="sphx-glr-example-title"><h1>Demo</h1>
<table class="verified-on"><tr><td>NVIDIA H100</td></tr></table>
<div class="highlight-Python notranslate"><pre>{code}</pre></div>
<div class="sphx-glr-script-out highlight-none"><pre>{output}</pre></div>
<div class="sphx-glr-download sphx-glr-download-jupyter"><a href="../_downloads/a/demo.ipynb">nb</a></div>
<div class="sphx-glr-download sphx-glr-download-python"><a href="../_downloads/b/demo.py">py</a></div>
</section></body></html>"""

GALLERY_INDEX = """<html><body><div class="sphx-glr-thumbnails"></div>
<div class="sphx-glr-download sphx-glr-download-python"><a href="../_downloads/c/recipes_python.zip">zip</a></div>
<div class="sphx-glr-download sphx-glr-download-jupyter"><a href="../_downloads/d/recipes_jupyter.zip">zip</a></div>
</body></html>"""


DEMO = '''"""
Demo
====

Prerequisites: PyTorch 2.9 or later.
"""

print("hi")
'''


def project_of(site):
    return site.parent / "project"


def make_record(root, **changes):
    """A passing build record of the demo's current source, with ``changes``."""
    record = gallery.RunRecord(
        source="recipes_source/demo.py",
        checksum=gallery.checksum(root / "recipes_source" / "demo.py"),
        passed=True,
        device="NVIDIA H100 80GB HBM3",
        torch="2.11.0+cu130",
        triton="3.5.0",
        python="3.12.3",
        date="2026-11-21",
        seconds=1.5,
        peak_memory_mib=12.0,
        peak_memory_kind="cuda",
        how="build",
    )
    return dataclasses.replace(record, **changes)


def make_site(tmp_path, code="print('hi')", output="hi", index=INDEX, records=None):
    """A built site in tmp_path/html, built from the project in tmp_path/project (a copy
    of conf.py and requirements.txt with one tutorial, recipes_source/demo.py)."""
    site, root = tmp_path / "html", tmp_path / "project"
    (root / "recipes_source").mkdir(parents=True)
    for name in ("conf.py", "requirements.txt"):
        shutil.copy(ROOT / name, root / name)
    (root / "recipes_source" / "demo.py").write_text(DEMO)
    site.mkdir()
    gallery.write_report(
        site / gallery.REPORT, [make_record(root)] if records is None else records
    )
    for rel, text in {
        "index.html": index,
        "recipes/index.html": GALLERY_INDEX,
        "recipes/demo.html": PAGE.format(code=code, output=output),
        "_downloads/a/demo.ipynb": GOOD_NOTEBOOK,
        "_downloads/b/demo.py": "print('hi')\n",
        "_downloads/c/recipes_python.zip": "zip",
        "_downloads/d/recipes_jupyter.zip": "zip",
    }.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    return site


def problems(site, **kwargs):
    return "\n".join(validate(site, source_root=project_of(site), **kwargs).problems)


def warnings(site):
    return "\n".join(validate(site, source_root=project_of(site)).warnings)


def test_good_site_passes(tmp_path):
    assert problems(make_site(tmp_path)) == ""


def test_tutorial_without_a_record_fails(tmp_path):
    assert "recipes_source/demo.py did not run" in problems(
        make_site(tmp_path, records=[])
    )


def test_tutorial_with_a_failing_record_fails(tmp_path):
    site = make_site(tmp_path)
    gallery.write_report(
        site / gallery.REPORT, [make_record(project_of(site), passed=False)]
    )
    assert "recipes_source/demo.py did not run" in problems(site)


def test_record_of_an_older_source_does_not_count(tmp_path):
    site = make_site(tmp_path)
    (project_of(site) / "recipes_source" / "demo.py").write_text(DEMO + "# edited\n")
    assert "recipes_source/demo.py did not run" in problems(site)


def test_no_record_allowed_outside_pattern(tmp_path):
    site = make_site(tmp_path, records=[])
    other = project_of(site) / "intermediate_source" / "other_tutorial.py"
    other.parent.mkdir()
    other.write_text(DEMO.replace("Demo\n====", "Other\n====="))
    assert problems(site, pattern="other_tutorial") == ""
    assert "recipes_source/demo.py did not run" in problems(site, pattern="demo")


@pytest.mark.parametrize(
    "pattern, found",
    [
        ("no_such_page", "PATTERN='no_such_page' matches no tutorial"),
        ("[", "PATTERN='[' is not a regular expression"),
    ],
)
def test_pattern_selecting_no_tutorial_fails_naming_them(tmp_path, pattern, found):
    """make html-one and a shard's build: a pattern that executed nothing fails."""
    reported = problems(make_site(tmp_path), pattern=pattern)
    assert f"--pattern: {found}" in reported
    assert reported.endswith("the tutorials are: demo")


def test_missing_table_fails(tmp_path):
    site = make_site(tmp_path)
    page = site / "recipes/demo.html"
    page.write_text(page.read_text().replace("verified-on", "other"))
    assert "no 'Verified on' table" in problems(site)


def commit(site, *records):
    gallery.save_records(records, project_of(site))


def test_stale_committed_record_is_a_warning_that_names_it(tmp_path):
    site = make_site(tmp_path)
    commit(site, make_record(project_of(site), checksum="0" * 32, torch="2.9.1"))
    assert problems(site) == ""
    found = warnings(site)
    assert "records/nvidia-h100-80gb-hbm3-torch-2.9.1.json: 1 stale record(s)" in found
    assert "recipes_source/demo.py" in found
    assert "(a site build on NVIDIA H100 80GB HBM3, then make records)" in found


def test_stale_report_counts_every_stale_record_and_says_how_to_refresh(tmp_path):
    site = make_site(tmp_path)
    root = project_of(site)
    cpu = dict(device="CPU (Some CPU)", torch="2.9.1+cu128", peak_memory_kind="rss")
    commit(
        site,
        make_record(root, checksum="0" * 32, how="script", **cpu),
        make_record(root, checksum="1" * 32, **cpu),  # a CPU build: another row
        make_record(root, how="script", torch="2.15.0+cpu", device="CPU (Some CPU)"),
    )
    found = [w for w in warnings(site).splitlines() if "stale" in w]
    assert found == [
        "records/cpu-torch-2.9.1+cu128.json: 2 stale record(s), of an older source "
        "(pages leave them out): recipes_source/demo.py; refresh them (make verify "
        "TORCH=2.9.1; a site build on CPU (Some CPU), then make records) or remove them"
    ]


def test_unverified_minimum_is_a_warning(tmp_path):
    site = make_site(tmp_path)
    assert "no passing record of its current source on PyTorch 2.9" in warnings(site)
    commit(site, make_record(project_of(site), torch="2.9.1"))
    assert "PyTorch 2.9" not in warnings(site)


def test_failure_at_or_above_the_stated_minimum_fails(tmp_path):
    site = make_site(tmp_path)
    commit(site, make_record(project_of(site), torch="2.15.0", passed=False))
    assert "says PyTorch 2.9 or later, but failed on PyTorch 2.15.0" in problems(site)


def test_failure_below_the_stated_minimum_or_on_a_nightly_passes(tmp_path):
    site = make_site(tmp_path)
    commit(
        site,
        make_record(project_of(site), torch="2.8.0", passed=False),
        make_record(project_of(site), torch="2.16.0.dev20261120+cpu", passed=False),
    )
    assert problems(site) == ""


def test_requirements_lower_bound_must_match_the_pages(tmp_path):
    site = make_site(tmp_path)
    demo = project_of(site) / "recipes_source" / "demo.py"
    demo.write_text(DEMO.replace("2.9", "2.10"))
    gallery.write_report(site / gallery.REPORT, [make_record(project_of(site))])
    assert "requirements.txt: its torch lower bound is not torch>=2.10" in problems(
        site
    )


TRACE = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: boom'


def test_unexpected_traceback_fails(tmp_path):
    found = problems(make_site(tmp_path, output=TRACE))
    assert "traceback" in found and "ValueError: boom" in found


def test_marked_traceback_passes(tmp_path):
    code = "# intended-traceback: shows what fullgraph=True raises\nraise ValueError('boom')"
    assert problems(make_site(tmp_path, code=code, output=TRACE)) == ""


@pytest.mark.parametrize("suffix", [".py", ".ipynb"])
def test_missing_download_fails(tmp_path, suffix):
    site = make_site(tmp_path)
    next((site / "_downloads").rglob(f"demo{suffix}")).unlink()
    assert f"the {suffix} download" in problems(site)


def test_invalid_notebook_fails(tmp_path):
    site = make_site(tmp_path)
    (site / "_downloads/a/demo.ipynb").write_text(json.dumps({"cells": "not a list"}))
    assert "not valid nbformat" in problems(site)


@pytest.mark.parametrize(
    "kind, path",
    [("python", "c/recipes_python.zip"), ("jupyter", "d/recipes_jupyter.zip")],
)
def test_missing_gallery_zip_fails(tmp_path, kind, path):
    site = make_site(tmp_path)
    (site / "_downloads" / path).unlink()
    assert f"recipes/index.html: the download-all {kind} zip is missing" in problems(
        site
    )


@pytest.mark.parametrize("kind, suffix", [("python", ".py"), ("jupyter", ".ipynb")])
def test_missing_download_link_fails(tmp_path, kind, suffix):
    site = make_site(tmp_path)
    page = site / "recipes/demo.html"
    page.write_text(page.read_text().replace(f"sphx-glr-download-{kind}", "other"))
    assert f"recipes/demo.html: no {suffix} download link" in problems(site)


def test_download_that_imports_the_core_without_carrying_it_fails(tmp_path):
    site = make_site(tmp_path)
    (site / "_downloads/b/demo.py").write_text("import measure\n")
    assert "the .py download imports measure but does not carry it" in problems(site)


def test_no_tutorial_pages_fails(tmp_path):
    site = make_site(tmp_path)
    page = site / "recipes/demo.html"
    page.write_text(page.read_text().replace("sphx-glr-example-title", "other"))
    assert "no tutorial pages found" in problems(site)


def test_page_without_its_tutorial_fails(tmp_path):
    site = make_site(tmp_path)
    (project_of(site) / "recipes_source" / "demo.py").unlink()
    assert "a gallery page, but no tutorial in project/ builds it" in problems(site)


def test_not_a_built_site_fails(tmp_path):
    site = make_site(tmp_path)
    (site / "index.html").unlink()
    assert "no index.html: is this a built site?" in problems(site)


@pytest.mark.parametrize(
    "leak",
    [
        "/home/ci/work/x.py",
        "/root/.cache/torch",
        "/tmp/torchinductor_root/ab.py",
        "/var/lib/x",
        "/usr/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py",
        "lib/python3.12/site-packages/x",
    ],
)
def test_machine_path_fails(tmp_path, leak):
    assert "build-machine path" in problems(
        make_site(tmp_path, output=f"compiled {leak}:12")
    )


def test_checkout_path_fails(tmp_path):
    output = f"{tmp_path / 'project'}/recipes_source/demo.py"
    assert "build-machine path" in problems(make_site(tmp_path, output=output))


def test_relative_paths_pass(tmp_path):
    assert (
        problems(
            make_site(
                tmp_path, output="recipes_source/demo.py:12 and eval_frame.py:300"
            )
        )
        == ""
    )


def test_card_to_missing_page_fails(tmp_path):
    index = (
        INDEX
        + '<div class="sd-card"><a class="sd-stretched-link" href="recipes/gone.html">Gone</a></div>'
    )
    assert "recipes/gone.html, which does not exist" in problems(
        make_site(tmp_path, index=index)
    )


def test_card_without_a_link_fails(tmp_path):
    index = INDEX + '<div class="sd-card"><p>A card that goes nowhere</p></div>'
    assert "card 'A card that goes nowhere' has no link" in problems(
        make_site(tmp_path, index=index)
    )


def test_tutorial_without_card_fails(tmp_path):
    assert "no card links to the tutorial recipes/demo.html" in problems(
        make_site(tmp_path, index="<html><body></body></html>")
    )


def test_cli_exit_status_and_message(tmp_path):
    bad = make_site(tmp_path, records=[])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.validate",
            str(bad),
            "--source-root",
            str(project_of(bad)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "recipes/demo.html: recipes_source/demo.py did not run" in proc.stderr
    assert "validate: warning: recipes_source/demo.py: no passing record" in proc.stderr


@pytest.mark.parametrize("kind", ["DeprecationWarning", "FutureWarning"])
def test_unexpected_warning_fails(tmp_path, kind):
    found = problems(make_site(tmp_path, output=f"x.py:3: {kind}: old API"))
    assert f"shows a {kind}" in found


def test_marked_warning_passes(tmp_path):
    code = "# intended-warning: this page shows the deprecation on purpose\nold_api()"
    assert (
        problems(
            make_site(tmp_path, code=code, output="x.py:3: FutureWarning: old API")
        )
        == ""
    )


def test_warning_printed_by_the_build_passes_when_marked(tmp_path):
    from sphinxext.reset import format_warning

    printed = format_warning(
        "old API", FutureWarning, "/usr/lib/python3.12/site-packages/torch/x.py", 7
    )
    assert printed == "x.py:7: FutureWarning: old API\n"
    code = "# intended-warning: shown on purpose\nold_api()"
    assert problems(make_site(tmp_path, code=code, output=printed)) == ""
