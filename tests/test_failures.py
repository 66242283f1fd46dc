"""A tutorial that raises fails the build, and the last lines name its file and line."""

import shutil

from conftest import ROOT, make

BROKEN = '''"""
Broken on purpose
=================

This example raises, to check that the build says where.
"""

# %%
x = 1

# %%
raise ValueError("deliberate failure for the test suite")
'''


def test_failing_tutorial_fails_the_build_and_names_it(tmp_path):
    project = tmp_path / "site"
    project.mkdir()
    for name in ("conf.py", "Makefile", "requirements.txt"):
        shutil.copy(ROOT / name, project / name)
    for name in ("sphinxext", "tools", "_static", "_templates"):
        shutil.copytree(
            ROOT / name, project / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    for gallery in ("recipes_source", "intermediate_source"):
        (project / gallery).mkdir()
        shutil.copy(ROOT / gallery / "GALLERY_HEADER.rst", project / gallery)
    (project / "recipes_source" / "broken.py").write_text(BROKEN)
    (project / "index.rst").write_text(
        "Test\n====\n\n.. toctree::\n\n   recipes/index\n   intermediate/index\n"
    )

    proc = make("html", cwd=project, check=False)

    assert proc.returncode != 0
    last_lines = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
    assert "recipes_source/broken.py" in last_lines
    assert "line 12" in last_lines
    assert "deliberate failure for the test suite" in last_lines
