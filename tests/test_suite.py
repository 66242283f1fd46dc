"""The suite's own rules, each shown failing on a broken test: a misspelt marker is an
error (--strict-markers), an expected failure that passes fails the run (xfail_strict), a
parametrization over nothing is an error at collection (empty_parameter_set_mark), and a
session that writes a file into the checkout or skips a test for a reason the README does
not name fails (conftest.checkout_files, conftest.unnamed_skips)."""

import subprocess
import sys

from conftest import (
    BUILD_OUTPUTS,
    ROOT,
    checkout_files,
    named_skip_reasons,
    unnamed_skips,
)

BROKEN_TESTS = {
    "test_marker.py": "import pytest\n\n\n@pytest.mark.slwo\ndef test_typo():\n    pass\n",
    "test_xpass.py": (
        "import pytest\n\n\n@pytest.mark.xfail(reason='known bug')\n"
        "def test_fixed_long_ago():\n    pass\n"
    ),
    "test_empty.py": (
        "import pytest\n\n\n@pytest.mark.parametrize('page', [])\n"
        "def test_each_page(page):\n    pass\n"
    ),
}


def test_the_suites_settings_fail_broken_tests(tmp_path):
    for name, text in BROKEN_TESTS.items():
        (tmp_path / name).write_text(text)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ROOT / "pytest.ini"),
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            "--continue-on-collection-errors",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "'slwo' not found in `markers` configuration option" in out, out
    assert "[XPASS(strict)] known bug" in out, out
    assert "Empty parameter set in 'test_each_page'" in out, out


def test_the_checkout_guard_names_a_file_a_test_wrote(tmp_path):
    root = tmp_path / "checkout"
    for path in ("tools/x.py", "recipes_source/a.py", ".venv/bin/python"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("")
    before = checkout_files(root)
    assert before == {"tools/x.py", "recipes_source/a.py"}
    # What a build writes is its own: generated galleries, caches, a tutorial's report.
    for path in (
        "recipes/a.rst",
        ".cache/inductor/k.py",
        "tools/__pycache__/x.pyc",
        "recipes_source/a_report/index.html",
        "sg_execution_times.rst",
    ):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("")
    assert checkout_files(root) == before
    for path in ("test-artifacts/browser/index.png", "_build/test/html/index.html"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("")
    assert checkout_files(root) - before == {
        "test-artifacts/browser/index.png",
        "_build/test/html/index.html",
    }
    assert "_build" not in BUILD_OUTPUTS


def test_a_skip_for_a_reason_the_readme_does_not_name_fails():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = named_skip_reasons(readme)
    assert "Debian's chromium is not installed" in named, named
    assert "no page of this build ran on the CPU" in named, named
    skips = [
        (
            "tests/test_browser.py::test_index",
            "Debian's chromium is not installed (apt-get)",
        ),
        ("tests/test_x.py::test_y", "the network is down"),
    ]
    assert unnamed_skips(skips, named) == [skips[1]]
