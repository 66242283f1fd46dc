"""The distributed page's measuring and reading helpers, on the CPU, without torchrun and
without a build: the functions are taken from the page's source, as a reader sees them.

``measure`` must work without CUDA and count nested profiler ranges once; the table and
the explanation lines must leave out the GPU columns on a CPU and, on GPUs, split a step
into compute kernels, exposed communication and GPU idle time.
"""

import ast
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.profiler import record_function

PAGE = Path(__file__).parents[1] / "intermediate_source/distributed_compile_tutorial.py"


def page_namespace(**globals_):
    """The page's imports and its top-level functions, run in a fresh namespace."""
    tree = ast.parse(PAGE.read_text(encoding="utf-8"))
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef)
    module = ast.Module([n for n in tree.body if isinstance(n, keep)], [])
    namespace = dict(globals_)
    exec(compile(module, str(PAGE), "exec"), namespace)
    namespace.update(globals_)
    return namespace


def test_measure_on_cpu_counts_nested_ranges_once():
    def step():
        with record_function("FSDP::pre_forward (blocks.0)"):
            with record_function("FSDP::all_gather (blocks.0)"):
                time.sleep(0.02)
        with record_function("Optimizer.step#SGD.step"):
            time.sleep(0.01)

    out = page_namespace()["measure"](step, torch.device("cpu"), 2)
    assert set(out) == {"step", "spread", "guards", "hooks", "opt", "profiled_s"}
    assert 0 < out["profiled_s"] < 30
    assert out["guards"] == 0
    # Nested FSDP:: ranges count once: about 20 ms per step, not 40.
    assert 19 <= out["hooks"] < 35, out
    assert 9 <= out["opt"] < 25, out
    assert out["step"] >= 29


class FakeProfile:
    """Stands in for torch.profiler.profile: a CUDA profile with two compute kernels,
    an NCCL kernel that overlaps the first, and an annotation spanning them; a CPU
    profile with nested FSDP2 ranges, a guard check and an optimizer step (in us)."""

    def __init__(self, activities):
        (self.activity,) = activities

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def events(self):
        def event(name, start, end, device="CPU", annotation=False):
            kind = SimpleNamespace(name=device)
            span = SimpleNamespace(start=start, end=end)
            return SimpleNamespace(
                name=name,
                device_type=kind,
                time_range=span,
                is_user_annotation=annotation,
            )

        if self.activity.name == "CUDA":
            return [
                event("sm90_gemm", 0, 100, "CUDA"),
                event("ncclDevKernel_AllReduce_Sum_f32", 50, 150, "CUDA"),
                event("triton_poi_fused_add", 200, 300, "CUDA"),
                event("FSDP::pre_forward (blocks.0)", 0, 400, "CUDA", annotation=True),
                event("cudaLaunchKernel", 0, 5),
            ]
        return [
            event("FSDP::pre_forward (blocks.0)", 0, 100),
            event("FSDP::all_gather (blocks.0)", 20, 50),
            event("TorchDynamo Cache Lookup", 110, 120),
            event("Optimizer.step#SGD.step", 200, 250),
            event("aten::mm", 0, 300),
        ]


def test_measure_splits_kernels_into_compute_and_exposed_communication(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)
    ns = page_namespace(profile=FakeProfile)
    out = ns["measure"](lambda: None, torch.device("cuda", 0), 1)
    skip = ("step", "spread", "profiled_s")
    got = {k: round(v * 1e3) for k, v in out.items() if k not in skip}
    # Busy: the union [0, 150] + [200, 300]; compute [0, 100] + [200, 300]; the NCCL
    # kernel runs alone for 50 us; the annotation and the CPU-side launch do not count.
    assert got == dict(busy=250, exposed=50, guards=10, hooks=100, opt=50)


def rows(gpu, grad_err=1e-6):
    cpu_times = dict(guards=0.0, hooks=0.0, opt=0.4, spread=0.1, dynamo=1, compiled=1)
    cpu_times.update(grad_err=grad_err, grad_worst="w")
    eager = dict(variant="eager", step=10.0, losses=[2.0], **cpu_times)
    compiled = dict(eager, variant="compiled", step=12.0, guards=0.2)
    if gpu:
        eager.update(busy=9.0, exposed=1.0)
        compiled.update(busy=9.5, exposed=3.0)  # compute 6.5 vs 8.0, exposed 3 vs 1
    return [eager, compiled]


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_table_and_lines(gpu, capsys):
    ns = page_namespace(
        gpu=gpu,
        where="2 x GPU, NCCL" if gpu else "CPU, gloo",
        cfg=dict(dtype="float32", steps=2),
        ref_losses=[2.0],
        TOLERANCE={"float32": (1e-4, 1e-4)},
    )
    table = ns["check_and_tabulate"](rows(gpu))
    ns["explain"](table, [(1, 0)])
    out = " ".join(capsys.readouterr().out.split())  # the lines are wrapped
    assert ("busy %" in out) == gpu and ("exposed comm" in out) == gpu
    assert ("no GPU columns" in out) != gpu
    assert "1.20x the step" in out and "guard checks 0.20 vs 0.00" in out
    if gpu:
        assert "most of the difference: exposed communication (+2.0 ms)" in out
        assert "79% busy, bound by the CPU" in out  # 9.5 of 12 ms
    if gpu:
        assert "Spread in rows bound by the CPU: 0.1 to 0.1 ms." in out
    with pytest.raises(AssertionError, match="eager: w off by"):
        ns["check_and_tabulate"](rows(gpu, grad_err=1.0))
