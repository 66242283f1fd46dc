"""The validator passes a good site and names each kind of defect in a crafted one."""

import json
import subprocess
import sys

import nbformat
import pytest
from conftest import ROOT

from tools.validate import validate

GOOD_NOTEBOOK = nbformat.writes(
    nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
)

INDEX = """<html><body>
<div class="sd-card"><a class="sd-stretched-link" href="recipes/demo.html">Demo</a></div>
</body></html>"""

PAGE = """<html><body>
<section class="sphx-glr-example-title"><h1>Demo</h1>
<p class="verified-stamp">Verified on NVIDIA H100, PyTorch 2.11.0, 2026-11-21.</p>
<div class="highlight-Python notranslate"><pre>{code}</pre></div>
<div class="sphx-glr-script-out highlight-none"><pre>{output}</pre></div>
<p class="sphx-glr-timing"><strong>Total running time of the script:</strong> ({minutes} minutes {seconds} seconds)</p>
<div class="sphx-glr-download sphx-glr-download-jupyter"><a href="../_downloads/a/demo.ipynb">nb</a></div>
<div class="sphx-glr-download sphx-glr-download-python"><a href="../_downloads/b/demo.py">py</a></div>
</section></body></html>"""

GALLERY_INDEX = """<html><body><div class="sphx-glr-thumbnails"></div>
<div class="sphx-glr-download sphx-glr-download-python"><a href="../_downloads/c/recipes_python.zip">zip</a></div>
<div class="sphx-glr-download sphx-glr-download-jupyter"><a href="../_downloads/d/recipes_jupyter.zip">zip</a></div>
</body></html>"""


def make_site(
    tmp_path, code="print('hi')", output="hi", minutes=0, seconds="1.500", index=INDEX
):
    site = tmp_path / "html"
    for rel, text in {
        "index.html": index,
        "recipes/index.html": GALLERY_INDEX,
        "recipes/demo.html": PAGE.format(
            code=code, output=output, minutes=minutes, seconds=seconds
        ),
        "_downloads/a/demo.ipynb": GOOD_NOTEBOOK,
        "_downloads/b/demo.py": "print('hi')\n",
        "_downloads/c/recipes_python.zip": "zip",
        "_downloads/d/recipes_jupyter.zip": "zip",
    }.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    return site


def problems(site, **kwargs):
    return "\n".join(validate(site, source_root=str(ROOT), **kwargs).problems)


def test_good_site_passes(tmp_path):
    assert problems(make_site(tmp_path)) == ""


def test_zero_run_time_fails(tmp_path):
    assert "run time is zero" in problems(make_site(tmp_path, seconds="0.000"))


def test_zero_run_time_allowed_outside_pattern(tmp_path):
    assert problems(make_site(tmp_path, seconds="0.000"), pattern="intermediate/") == ""


def test_missing_stamp_fails(tmp_path):
    site = make_site(tmp_path)
    page = site / "recipes/demo.html"
    page.write_text(page.read_text().replace("verified-stamp", "other"))
    assert "'Verified on' stamp" in problems(site)


def test_stamp_must_name_required_device(tmp_path):
    assert "does not name 'NVIDIA'" not in problems(
        make_site(tmp_path), require_device="NVIDIA"
    )
    assert "does not name 'AMD'" in problems(make_site(tmp_path), require_device="AMD")


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


def test_missing_gallery_zip_fails(tmp_path):
    site = make_site(tmp_path)
    (site / "_downloads/c/recipes_python.zip").unlink()
    assert "download-all python zip is missing" in problems(site)


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
    assert "build-machine path" in problems(
        make_site(tmp_path, output=f"{ROOT}/recipes_source/demo.py")
    )


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


def test_tutorial_without_card_fails(tmp_path):
    assert "no card links to the tutorial recipes/demo.html" in problems(
        make_site(tmp_path, index="<html><body></body></html>")
    )


def test_cli_exit_status_and_message(tmp_path):
    bad = make_site(tmp_path, seconds="0.000")
    proc = subprocess.run(
        [sys.executable, "-m", "tools.validate", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "recipes/demo.html: recorded run time is zero" in proc.stderr


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
