"""A tutorial that raises fails the build, and the last lines name its file and line."""

from conftest import copy_build_machinery, make

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
    copy_build_machinery(project)
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
