"""A failing tutorial fails the build, and the build's last lines say which and where.

One small project, built once: a tutorial with a short failure, one with a long failure
(thousands of lines on stderr, a deep traceback and a message of many kilobytes, like an
Inductor C++ compile error), and one that passes and reports the temp folder it sees.
"""

import subprocess
import sys

import pytest
from conftest import copy_build_machinery

SHORT = '''"""
Short failure
=============

Raises at once.
"""

# %%
x = 1

# %%
raise ValueError("deliberate failure for the test suite")
'''

LONG = '''"""
Long failure
============

Prints pages to stderr, then raises deep in a helper with a huge message.
"""

# %%
import sys


def compile_kernel(depth):
    if depth:
        return compile_kernel(depth - 1)
    for i in range(3000):
        print(f"kernel.cpp:{i}: error: no match for operator {i}", file=sys.stderr)
    log = "\\n".join(f"compiler output line {i} " + "x" * 60 for i in range(2000))
    raise RuntimeError("C++ compile error " + "y" * 5000 + "\\n" + log)


# %%
compile_kernel(40)
'''

ENVIRONMENT = '''"""
Environment
===========

Reports the temp folder this build's examples and Inductor use.
"""

# %%
import tempfile

from torch._inductor.codecache import _HEADER_DIR

print("TEMP=" + tempfile.gettempdir())
print("HEADERS=" + _HEADER_DIR)
'''


def build_html(project):
    """`make html` in ``project``: its exit status and output lines, stdout and stderr in one
    stream (in the order a terminal shows them), without make's own last word
    ("make: *** [Makefile:NN: html] Error 2"), which follows the build's."""
    proc = subprocess.run(
        ["make", f"PYTHON={sys.executable}", "html"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = proc.stdout.splitlines()
    while lines and lines[-1].startswith("make: ***"):
        lines.pop()
    return proc.returncode, lines


@pytest.fixture(scope="module")
def failed_build(tmp_path_factory):
    project = tmp_path_factory.mktemp("failures") / "site"
    copy_build_machinery(project)
    (project / "recipes_source" / "short_failure.py").write_text(SHORT)
    (project / "recipes_source" / "environment.py").write_text(ENVIRONMENT)
    (project / "intermediate_source" / "long_failure.py").write_text(LONG)
    (project / "index.rst").write_text(
        "Test\n====\n\n.. toctree::\n\n   recipes/index\n   intermediate/index\n"
    )
    returncode, lines = build_html(project)
    return project, returncode, lines


def test_failing_tutorials_fail_the_build(failed_build):
    _, returncode, lines = failed_build
    assert returncode != 0, "\n".join(lines[-40:])
    assert len(lines) > 3000, "the long failure's stderr is not in the build output"


def test_last_lines_name_file_line_exception_and_message(failed_build):
    _, _, lines = failed_build
    long, short = lines[-2:]  # in path order
    assert not lines[-3].startswith("Tutorial failed"), "reported twice"
    assert long.startswith(
        "Tutorial failed: intermediate_source/long_failure.py, line 18: "
        "RuntimeError: C++ compile error yyyy"
    )
    assert long.endswith("y...") and len(long) < 400
    assert short == (
        "Tutorial failed: recipes_source/short_failure.py, line 12: "
        "ValueError: deliberate failure for the test suite"
    )


def test_junit_report_lists_every_executed_tutorial(failed_build):
    project, _, _ = failed_build
    junit = (project / "_build" / "test-results" / "sphinx-gallery.xml").read_text()
    assert 'failures="2"' in junit and 'tests="3"' in junit


def test_each_checkout_builds_in_its_own_temp_folder(failed_build):
    """Inductor's precompiled headers live under the temp folder; two checkouts building
    at once must not share it (make gives each checkout its own .tmp/)."""
    project, _, _ = failed_build
    page = (project / "_build" / "html" / "recipes" / "environment.html").read_text()
    own = str(project / ".tmp")
    assert f"TEMP={own}" in page
    assert f"HEADERS={own}/torchinductor_" in page


FAILING_CXX = """#!/usr/bin/env bash
# A C++ compiler that answers --version like g++ and fails every compile with pages of errors.
if [[ "$*" == *--version* ]]; then exec g++ "$@"; fi
for i in $(seq 1 2000); do echo "kernel.cpp:$i:5: error: no match for operator ($i)" >&2; done
exit 1
"""

INDUCTOR_FAILURE = '''"""
Inductor failure
================

torch.compile on the CPU with a C++ compiler that fails.
"""

# %%
import torch
import torch._inductor.config as config

config.cpp.cxx = (None, {cxx!r})


def helper(x):
    return torch.compile(lambda t: (t.sin() + 1).relu())(x)


helper(torch.randn(8))
'''


@pytest.mark.slow
def test_an_inductor_compile_error_ends_the_build_with_one_line(tmp_path):
    """The real thing: Inductor's C++ compile error, thousands of lines of compiler output."""
    cxx = tmp_path / "failing-g++"
    cxx.write_text(FAILING_CXX)
    cxx.chmod(0o755)
    project = tmp_path / "site"
    copy_build_machinery(project)
    source = INDUCTOR_FAILURE.format(cxx=str(cxx))
    (project / "recipes_source" / "inductor_failure.py").write_text(source)
    (project / "index.rst").write_text(
        "Test\n====\n\n.. toctree::\n\n   recipes/index\n   intermediate/index\n"
    )
    returncode, lines = build_html(project)
    assert returncode != 0
    # torch 2.14 says "torch._inductor.exc.InductorError: CppCompileError: C++ compile
    # error"; the wrapper around CppCompileError has changed between releases.
    last = lines[-1]
    assert last.startswith(
        "Tutorial failed: recipes_source/inductor_failure.py, line 16: "
    ), "\n".join(lines[-30:])
    assert last.endswith("C++ compile error") and len(last) < 200, last
