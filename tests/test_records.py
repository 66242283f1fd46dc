"""The gallery model and the run records: checksums, the "Verified on" table, the stated
minimum PyTorch, a serializable configuration, and tools.verify on a tiny tutorial."""

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from conftest import ROOT, copy_build_machinery
from docutils.core import publish_parts
from sphinx.config import Config, is_serializable
from sphinx_gallery.utils import get_md5sum

from sphinxext import verified_on
from sphinxext.verified_on import shown_records, table
from tools import gallery
from tools.validate import MINIMUM, Report, check_records


def test_checksum_is_the_one_sphinx_gallery_keeps(tmp_path):
    sources = [ROOT / t.source for t in gallery.tutorials(ROOT)]
    odd = tmp_path / "odd.py"
    # CRLF line ends, a UTF-8 character and a byte that is not UTF-8.
    odd.write_bytes(b"# na\xc3\xafve\r\nx = '\xff'\r\n")
    for path in [*sources, odd]:
        assert gallery.checksum(path) == get_md5sum(path, mode="t"), path


def test_every_configuration_value_is_serializable():
    raw = Config.read(str(ROOT))._raw_config
    values = {
        k: v
        for k, v in raw.items()
        if not k.startswith("__") and not isinstance(v, types.ModuleType)
    }
    assert "sphinx_gallery_conf" in values
    bad = [k for k, v in values.items() if not is_serializable(v)]
    assert bad == [], f"conf.py values Sphinx cannot pickle: {bad}"
    # Equal from one build to the next, so Sphinx sees no configuration change.
    again = Config.read(str(ROOT))._raw_config["sphinx_gallery_conf"]
    assert again == values["sphinx_gallery_conf"]


def test_conf_takes_the_gallery_facts_from_tools_gallery():
    conf = Config.read(str(ROOT))._raw_config["sphinx_gallery_conf"]
    folders = dict(zip(conf["examples_dirs"], conf["gallery_dirs"]))
    assert folders == gallery.GALLERIES
    assert conf["ignore_pattern"] == gallery.IGNORE_PATTERN
    first = conf["first_notebook_cell"]
    assert f"PyTorch {gallery.minimum('torch')} or later" in first
    for requirement in ("torch>=", "torchvision>=", "numpy>=", "matplotlib>="):
        assert f'"{requirement}' in first
    assert "triton" not in first  # PyTorch's own wheels bring it


def test_every_tutorial_states_its_minimum_and_requirements_agree():
    for t in gallery.tutorials(ROOT):
        assert MINIMUM.search((ROOT / t.source).read_text()), (
            f"{t.source}: no 'PyTorch X.Y or later' line in its prerequisites"
        )
    report = Report()
    check_records(ROOT, report)
    assert report.problems == []


# --- the "Verified on" table ---------------------------------------------------------------

DEMO = '"""\nDemo\n====\n\nPyTorch 2.9 or later.\n"""\n\nprint("hi")\n'


def record(root, **changes):
    base = gallery.RunRecord(
        source="recipes_source/demo.py",
        checksum=gallery.checksum(root / "recipes_source" / "demo.py"),
        passed=True,
        device="CPU (Some CPU)",
        torch="2.9.1+cpu",
        triton=None,
        python="3.12.3",
        date="2026-11-20",
        seconds=12.3,
        peak_memory_mib=900.0,
        peak_memory_kind="rss",
        how="script",
    )
    return dataclasses.replace(base, **changes)


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    (root / "recipes_source").mkdir(parents=True)
    (root / "recipes").mkdir()
    (root / "conf.py").write_text((ROOT / "conf.py").read_text())
    (root / "recipes_source" / "demo.py").write_text(DEMO)
    return root


def test_table_renders_current_records_and_leaves_stale_ones_out(project):
    (demo,) = gallery.tutorials(project)
    old = record(project, checksum="0" * 32, torch="2.8.0+cpu", date="2026-01-01")
    newest = record(project, torch="2.15.0+cpu", passed=False, seconds=61)
    gallery.save_records([record(project), old], project)
    gallery.save_records([newest], project)
    own = record(
        project,
        device="NVIDIA H200",
        torch="2.11.0+cu130",
        how="build",
        peak_memory_kind="cuda",
    )
    gallery.write_record(
        demo.generated(project).with_suffix(gallery.RECORD_SUFFIX), own
    )

    shown = shown_records(project, demo)
    assert shown == [own, record(project), newest]
    html = publish_parts(table(shown), writer_name="html")["body"]
    assert 'class="verified-on' in html and "Verified on" in html
    rows = html.split("<tr")[2:]  # after the header row
    assert [
        "NVIDIA H200" in rows[0],
        "2.9.1+cpu" in rows[1],
        "2.15.0+cpu" in rows[2],
    ] == [True] * 3
    assert "site build" in rows[0] and "script" in rows[1]
    assert "failed" in rows[2] and "61 s" in rows[2]
    assert "2.8.0" not in html and "2026-01-01" not in html


def test_a_newer_run_replaces_the_older_in_its_environment(project):
    gallery.save_records([record(project, date="2026-01-01")], project)
    (path,) = gallery.save_records([record(project, date="2026-02-02")], project)
    assert path.name == "cpu-torch-2.9.1+cpu.json"
    (only,) = gallery.read_report(path)
    assert only.date == "2026-02-02"


# --- tools.verify ----------------------------------------------------------------------------

TINY = '''"""
Tiny
====

PyTorch 2.9 or later.
"""

# %%
import os
import re
import tempfile

import matplotlib.pyplot as plt
import torch

x = torch.arange(4.0)
assert torch.equal(torch.compile(lambda t: t * 2, backend="eager")(x), x * 2)
plt.plot(x.numpy())
plt.show()
assert os.path.realpath(tempfile.gettempdir()) == os.path.realpath(os.getcwd())
print("tiny ran on", torch.__version__)
'''
BROKEN = '"""\nBroken\n======\n"""\n\nraise ValueError("broken on purpose")\n'


def verify(project, *args):
    return subprocess.run(
        [sys.executable, "-m", "tools.verify", "--python", sys.executable, *args],
        cwd=project,
        capture_output=True,
        text=True,
    )


def test_verify_runs_a_tiny_tutorial_as_a_script_and_records_it(tmp_path):
    import torch

    project = tmp_path / "site"
    copy_build_machinery(project)
    (project / "recipes_source" / "tiny.py").write_text(TINY)
    (project / "recipes_source" / "broken.py").write_text(BROKEN)

    proc = verify(project, "--pattern", "tiny")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed" in proc.stdout and "recipes_source/tiny.py" in proc.stdout
    (path,) = (project / "records").glob("*.json")
    (rec,) = gallery.read_report(path)
    assert rec.source == "recipes_source/tiny.py" and rec.passed and rec.how == "script"
    assert rec.checksum == gallery.checksum(project / "recipes_source" / "tiny.py")
    assert rec.torch == torch.__version__ and rec.device.startswith("CPU")
    assert rec.seconds > 0 and rec.peak_memory_mib > 0
    assert path.name == f"cpu-torch-{torch.__version__}.json".lower()

    proc = verify(project, "--pattern", "broken")
    assert proc.returncode == 1
    assert "FAILED" in proc.stdout and "ValueError: broken on purpose" in proc.stdout
    by_source = {r.source: r for r in gallery.read_report(path)}
    assert by_source["recipes_source/broken.py"].passed is False
    assert by_source["recipes_source/tiny.py"].passed is True


def test_a_readers_venv_gets_what_the_tutorials_import_besides_torch():
    from tools.verify import reader_requirements

    names = [re.match(r"[\w.-]+", r).group(0) for r in reader_requirements(ROOT)]
    assert "numpy" in names and "matplotlib" in names
    assert not {"torch", "torchvision", "triton", "sphinx"} & set(names)


def test_verify_exports_a_builds_records(tmp_path, project):
    site = tmp_path / "html"
    site.mkdir()
    built = record(
        project, device="NVIDIA H100 80GB HBM3", torch="2.11.0+cu130", how="build"
    )
    gallery.write_report(site / gallery.REPORT, [built])
    proc = subprocess.run(
        [sys.executable, "-m", "tools.verify", "--from-build", str(site)],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    path = project / "records" / "nvidia-h100-80gb-hbm3-torch-2.11.0+cu130.json"
    assert json.loads(path.read_text())["tutorials"] == [built.to_dict()]


def test_venv_installs_the_asked_torch_past_the_machines_pip_config(
    tmp_path, monkeypatch
):
    """The pip commands tools.verify runs (pip itself is not run here)."""
    from tools import verify as v

    calls = []
    monkeypatch.setattr(v, "_pip", lambda python, args, log: calls.append(args))
    # `python -m venv DIR` only makes DIR here.
    monkeypatch.setattr(
        v.subprocess, "run", lambda cmd, **k: Path(cmd[-1]).mkdir(parents=True)
    )
    (tmp_path / "requirements.txt").write_text((ROOT / "requirements.txt").read_text())
    args = argparse.Namespace(
        torch="2.9.1", torchvision=None, index_url=None, find_links=["wheels"]
    )
    python = v.make_venv(tmp_path, args)
    assert python == tmp_path / ".verify" / "venv-torch-2.9.1" / "bin" / "python"
    torch_call, rest_call = calls
    assert "torch==2.9.1" in torch_call and "torchvision" in torch_call
    assert "--find-links" in torch_call and "--find-links" in rest_call
    assert "--no-index" in torch_call and "--no-index" not in rest_call
    assert not any(a.startswith("torch") for a in rest_call)
    # The second run finds the venv ready and installs nothing.
    v.make_venv(tmp_path, args)
    assert len(calls) == 2

    calls.clear()
    args.torch, args.index_url = (
        "nightly",
        "https://download.pytorch.org/whl/nightly/cpu",
    )
    v.make_venv(tmp_path, args)
    torch_call, rest_call = calls
    assert torch_call[:2] == ["--upgrade", "--index-url"] and "--pre" in torch_call
    assert "--index-url" not in rest_call


def test_pip_ignores_the_machines_pip_config(tmp_path, monkeypatch):
    from tools import verify as v

    seen = {}

    def run(cmd, env, **kwargs):
        seen.update(env=env, cmd=cmd)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(v.subprocess, "run", run)
    v._pip("python", ["torch==2.9.1"], tmp_path / "log")
    assert seen["env"]["PIP_CONFIG_FILE"] == os.devnull
    assert seen["cmd"][-1] == "torch==2.9.1"


# --- one row per device, PyTorch and way of running ------------------------------------------

H100 = "NVIDIA H100 80GB HBM3"


def test_table_folds_repeated_rows_into_the_newest(project):
    """The committed record of an earlier build on the same machine and this build's own
    run: the same device, PyTorch, date and "site build"; the page shows this build's."""
    (demo,) = gallery.tutorials(project)
    gpu = dict(device=H100, torch="2.11.0+cu130", how="build", peak_memory_kind="cuda")
    committed = record(project, date="2026-11-25", seconds=80, **gpu)
    script = record(project, date="2026-11-24")
    gallery.save_records([committed, script], project)
    own = record(project, date="2026-11-25", seconds=83, **gpu)
    gallery.write_record(
        demo.generated(project).with_suffix(gallery.RECORD_SUFFIX), own
    )
    assert shown_records(project, demo) == [own, script]
    html = publish_parts(table(shown_records(project, demo)), writer_name="html")
    assert html["body"].count(H100) == 1 and "83 s" in html["body"]

    # An own record older than the committed one (a page this build did not execute).
    newer = record(project, date="2026-11-26", seconds=79, **gpu)
    gallery.save_records([newer], project)
    verified_on._committed.clear()  # a new build reads records/ again
    assert shown_records(project, demo) == [newer, script]


def test_a_file_of_records_keeps_one_per_tutorial_and_row(project):
    build = record(project, how="build", peak_memory_kind="rss-peak")
    old_script = record(project, date="2026-01-01")
    (path,) = gallery.save_records([build, old_script], project)
    gallery.save_records([record(project)], project)  # the newer script run
    assert sorted(gallery.read_report(path), key=lambda r: r.how) == [
        build,
        record(project),
    ]


GPU_MACHINE = {
    "cpu": "CPU (Some CPU)",
    "gpu": H100,
    "gpus": 1,
    "nccl": True,
    "torch": "2.11.0+cu130",
    "triton": "3.6.0",
    "python": "3.12.3",
}


def test_the_device_a_run_names():
    one, two = GPU_MACHINE, {**GPU_MACHINE, "gpus": 2}
    cpu = {**GPU_MACHINE, "gpu": None, "gpus": 0, "nccl": False}
    multi = gallery.MULTI_GPU
    named = {
        "1-GPU site build": gallery.environment(None, one),
        "2-GPU build of the multi-gpu page": gallery.environment(multi, two),
        "1-GPU build of the multi-gpu page": gallery.environment(multi, one),
        "CPU build of the multi-gpu page": gallery.environment(multi, cpu),
        "CPU build": gallery.environment(None, cpu),
        "2-GPU build of another page": gallery.environment(None, two),
        "2 GPUs, no NCCL": gallery.environment(multi, {**two, "nccl": False}),
    }
    assert {k: (v["device"], v["cpu_path_on"]) for k, v in named.items()} == {
        "1-GPU site build": (H100, None),
        "2-GPU build of the multi-gpu page": (f"2 x {H100}", None),
        "1-GPU build of the multi-gpu page": ("CPU (Some CPU)", f"1 x {H100}"),
        "CPU build of the multi-gpu page": ("CPU (Some CPU)", None),
        "CPU build": ("CPU (Some CPU)", None),
        "2-GPU build of another page": (H100, None),
        "2 GPUs, no NCCL": ("CPU (Some CPU)", f"2 x {H100}"),
    }
    assert named["1-GPU site build"]["torch"] == "2.11.0+cu130"


def test_machine_reads_the_gpus_torch_sees(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: H100)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    facts = gallery.machine()
    assert (facts["gpu"], facts["gpus"], facts["nccl"]) == (H100, 1, True)
    env = gallery.environment(gallery.MULTI_GPU)
    assert env["device"].startswith("CPU") and env["cpu_path_on"] == f"1 x {H100}"


MULTI = (
    '"""\nMulti\n=====\n\nPyTorch 2.9 or later.\n"""\n\nprint("ran")\n'
    '# sphinx_gallery_runner_label = "multi-gpu"\n'
)


def test_a_cpu_path_run_on_a_gpu_machine_is_recorded_and_shown_as_the_cpu(
    project, monkeypatch
):
    """The build's record (sphinxext.record) of a multi-gpu page on a one-GPU machine,
    and the row the page shows for it."""
    from sphinxext import memory
    from sphinxext import record as build_record

    (project / "recipes_source" / "demo.py").write_text(MULTI)
    (demo,) = gallery.tutorials(project)
    monkeypatch.setattr(gallery, "machine", lambda: GPU_MACHINE)
    conf = {"src_dir": str(project), "examples_dirs": ["recipes_source"]}
    build_record.record_run(conf, "demo.py", "before")
    memory.PeakMemory()(lambda: None)  # sphinx-gallery's first call, then a block
    memory.PeakMemory()(lambda: b"x" * 2**20)
    page = demo.generated(project)
    page.with_suffix(".py").write_text(MULTI)
    page.with_suffix(".py.md5").write_text(gallery.checksum(page.with_suffix(".py")))
    build_record.record_run(conf, "demo.py", "after")

    own = gallery.read_record(page.with_suffix(gallery.RECORD_SUFFIX))
    assert own.passed and own.device == "CPU (Some CPU)"
    assert own.cpu_path_on == f"1 x {H100}"
    assert own.environment == "cpu-torch-2.11.0+cu130"
    # Its memory is the host's (the CPU path); the idle GPU's allocator is not followed.
    assert own.peak_memory_kind == memory.host_kind()
    assert own.gpu_peak_memory_mib is None
    assert own.run_as == "site build (CPU path; the machine has 1 GPU)"

    # A record of the kind made before the label, naming the one GPU, is left out.
    old = dataclasses.replace(own, device=H100, cpu_path_on=None, date="2026-11-20")
    gallery.save_records([old], project)
    verified_on._committed.clear()
    (row,) = shown_records(project, demo)
    assert row == own
    body = publish_parts(table([row]), writer_name="html")["body"]
    assert H100 not in body and "CPU path; the machine has 1 GPU" in body
    report = Report()
    check_records(project, report)
    assert "name one GPU" in "\n".join(report.warnings)


def test_verify_labels_a_cpu_path_run_as_the_build_does(tmp_path, monkeypatch):
    """tools.verify asks the same rule (tools.gallery.environment) for each tutorial."""
    from tools import verify as v

    project = tmp_path / "site"
    copy_build_machinery(project)
    (project / "recipes_source" / "multi.py").write_text(MULTI)
    (tutorial,) = gallery.tutorials(project)
    logs = tmp_path / "logs"
    logs.mkdir()
    runs = {
        n: v.run_one(
            sys.executable, project, tutorial, {**GPU_MACHINE, "gpus": n}, 60, logs
        )
        for n in (1, 2)
    }
    assert runs[1].passed and runs[1].how == "script"
    assert (runs[1].device, runs[1].cpu_path_on) == ("CPU (Some CPU)", f"1 x {H100}")
    assert runs[1].run_as == "script (CPU path; the machine has 1 GPU)"
    assert (runs[2].device, runs[2].cpu_path_on) == (f"2 x {H100}", None)
    assert runs[2].environment == "2-x-nvidia-h100-80gb-hbm3-torch-2.11.0+cu130"
