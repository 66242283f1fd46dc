"""The distributed page's measuring and reading helpers, on the CPU, without torchrun and
without a build: the functions are taken from the page's source, as a reader sees them.

``measure`` must work without CUDA, leave the garbage collector on, sort kernels into
NCCL and compute, and add up compute kernels by the range that launched them;
``run_variant`` must split exposed communication into transfer and waiting for the
other rank from both ranks' NCCL kernels; ``read`` must leave out the GPU columns on a
CPU, give each rank a verdict on GPUs, and ``attribute`` must call a gap slower only
beyond the spread and then name the parts of the profile that grew.
"""

import ast
import gc
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch.profiler import record_function

PAGE = Path(__file__).parents[1] / "intermediate_source/distributed_compile_tutorial.py"
CFG = dict(windows=5, steps=2, profiled=2)


def page_namespace(**globals_):
    """The page's imports, its top-level functions and the constants they read (the
    workers get the same from WORKER_HEADER), run in a fresh namespace."""
    tree = ast.parse(PAGE.read_text(encoding="utf-8"))
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef)
    names = {"MATMUL", "LAUNCHERS"}
    assigned = [n for n in tree.body if isinstance(n, ast.Assign)]
    # Assignments to those names, and to their items (`LAUNCHERS[key] = ...`).
    keep_nodes = [n for n in assigned if ast.unparse(n.targets).split("[")[0] in names]
    module = ast.Module(
        [n for n in tree.body if isinstance(n, keep) or n in keep_nodes], []
    )
    namespace = dict(globals_)
    exec(compile(module, str(PAGE), "exec"), namespace)
    namespace.update(globals_)
    return namespace


def test_union_counts_overlaps_once():
    union = page_namespace()["union"]
    assert union([(0, 10), (5, 15), (20, 30), (22, 25)]) == 25
    assert union([]) == 0


def test_measure_on_cpu():
    def step():
        with record_function("FSDP::pre_forward (blocks.0)"):
            time.sleep(0.01)

    out = page_namespace()["measure"](step, torch.device("cpu"), CFG)
    assert gc.isenabled()
    assert out["nccl"] == [] and out["compute"] == []
    assert out["step"] >= 10 and out["wall"] >= 10 and out["spread"] >= 0
    cpu_us, device_us = out["ops"]["FSDP::pre_forward (blocks.0)"]
    assert cpu_us >= 2 * 10e3 * 0.9 and device_us == 0  # two profiled steps
    assert 0 < out["profiled_s"] < 30


class FakeProfile:
    """Stands in for torch.profiler.profile: a compute kernel, an NCCL kernel, a GPU
    annotation, a CPU-side launch, and CPU operators with the kernels they launched
    under FSDP2's, the optimizer's and a compiled graph's ranges, in us."""

    def __init__(self, activities):
        self.activities = activities

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def key_averages(self):
        def average(key, cpu_us, device_us, device="CPU"):
            return SimpleNamespace(
                key=key,
                self_cpu_time_total=cpu_us,
                self_device_time_total=device_us,
                device_type=SimpleNamespace(name=device),
                is_user_annotation=False,
            )

        # The operator's device time repeats its kernel's: counted once, on the kernel.
        return [average("aten::mm", 5, 9), average("sm90_gemm", 0, 9, "CUDA")]

    def events(self):
        def event(name, start=0, end=0, device="CPU", annotation=False, **kwargs):
            return SimpleNamespace(
                name=name,
                device_type=SimpleNamespace(name=device),
                time_range=SimpleNamespace(start=start, end=end),
                is_user_annotation=annotation,
                kernels=[
                    SimpleNamespace(name=k, duration=us) for k, us in kwargs.items()
                ],
                cpu_parent=None,
            )

        fsdp = event("FSDP::all_gather_copy_out (blocks.0)")
        # The optimizer's range lists its operator's kernel again: counted once.
        opt = event("Optimizer.step#AdamW.step", multi_tensor_apply_kernel=60)
        graph = event("CompiledFunctionBackward")
        call = event("## Call CompiledFxGraph fabc ##")
        call.cpu_parent = graph
        launched = [  # operator, its range, its kernels (us)
            (event("aten::mm", sm90_gemm=100), None),
            (event("aten::add", elementwise_kernel=20), None),
            (event("aten::split_with_sizes_copy", split_copy=40), fsdp),
            (event("aten::_fused_adamw_", multi_tensor_apply_kernel=60), opt),
            (event("triton_poi_fused_add_0", triton_poi_fused_add_0=30), call),
            (event("nccl:all_gather", ncclDevKernel_AllGather=100), fsdp),
        ]
        for op, parent in launched:
            op.cpu_parent = parent
        # What the device ran: each launched kernel once (NCCL's and cuBLAS's below).
        ran = [(k.name, k.duration) for op, _ in launched[1:-1] for k in op.kernels]
        return [
            *(event(name, 200, 200 + us, "CUDA") for name, us in ran),
            event("sm90_gemm", 0, 100, "CUDA"),
            event("ncclDevKernel_AllGather_RING_LL", 50, 150, "CUDA"),
            event("FSDP::pre_forward (blocks.0)", 0, 400, "CUDA", annotation=True),
            event("cudaLaunchKernel", 0, 5),
            fsdp,
            opt,
            graph,
            call,
            *(op for op, _ in launched),
        ]


def test_measure_sorts_kernels(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *args: None)
    ns = page_namespace(profile=FakeProfile)
    out = ns["measure"](lambda: None, torch.device("cuda", 0), CFG)
    assert out["nccl"] == [("ncclDevKernel_AllGather_RING_LL", 50, 150)]
    assert out["compute"][-1] == ("sm90_gemm", 0, 100) and len(out["compute"]) == 5
    by = {k: round(v, 6) for k, v in out["by"].items() if v}  # ms per profiled step
    assert by == {
        "matmul and attention": 0.05,  # cuBLAS's kernel, by its name
        "eager operators": 0.01,  # no range of LAUNCHERS above aten::add
        "FSDP2's hooks": 0.02,  # the NCCL kernel is not counted here
        "optimizer step": 0.03,
        "compiled graphs": 0.015,  # found two levels up
    }
    assert out["ops"] == {"aten::mm": (5, 0), "sm90_gemm": (0, 9)}


@pytest.fixture
def one_process_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_run_variant_splits_exposed_communication(one_process_group, monkeypatch):
    """This rank's all-gather lasts 3 ms, the other rank's 1 ms: it waited 2 ms, all of
    them exposed; the reduce-scatter lasts 1 ms on both, and runs alone: transfer."""
    cfg = dict(width=16, heads=2, depth=2, vocab=32, seq=8, batch=2, world=2, check=1)
    cfg.update(lr=1e-3, bucket_mb=1, dtype="float32", profiled=1)
    kernels = dict(  # in us; NCCL out of name order, to be paired by name
        nccl=[
            ("ncclKernel_ReduceScatter", 5000, 6000),
            ("ncclKernel_AllGather", 0, 3000),
        ],
        compute=[("gemm", 2000, 5000)],
    )

    def fake_measure(step, dev, cfg):
        step()
        return dict(step=10.0, spread=1.0, wall=10.0, ops={}, profiled_s=0.0, **kernels)

    def fake_all_gather_object(every, mine):
        every[:] = [mine, [1000, 1000]]  # the other rank: AllGather, ReduceScatter

    monkeypatch.setattr(dist, "all_gather_object", fake_all_gather_object)
    ns = page_namespace(measure=fake_measure)
    ref_grads = {"head.weight": torch.ones(cfg["vocab"], cfg["width"])}
    out = ns["run_variant"]("DDP, eager", cfg, torch.device("cpu"), ref_grads)
    keys = ("busy", "compute", "wait", "transfer", "idle")
    got = {k: round(out[k], 6) for k in keys}
    assert got == dict(busy=6.0, compute=3.0, wait=2.0, transfer=1.0, idle=4.0)
    assert out["aligned"] and out["grad_worst"] == "head.weight"
    assert out["dynamo"] == 0 and out["compiled"] == 0


def rows(gpu, grad_err=1e-6):
    base = dict(losses=[2.0], grad_err=grad_err, grad_worst="w", dynamo=1, compiled=1)
    base.update(aligned=True, mem=1.0, wall=10.0, spread=0.1)
    ops = {"aten::mm": (100.0, 8000.0), "Optimizer.step": (50.0, 0.0)}
    out = {}
    for name, step, parts, ops_ in [
        ("eager", 10.0, (9.5, 0.2, 0.0, 0.3), ops),
        ("compiled", 12.0, (5.0, 0.0, 1.0, 4.0), {"aten::mm": (2100.0, 16000.0)}),
        ("faster", 8.0, (5.0, 3.0, 0.0, 2.0), ops),
    ]:
        r = dict(base, variant=name, step=step, ops=ops_)
        if gpu:
            r.update(zip(("compute", "transfer", "wait", "idle"), parts))
            r["busy"] = r["wall"] - r["idle"]
            r["by"] = {
                "matmul and attention": r["compute"] - 1.0,
                "optimizer step": 1.0,
            }
        out[name] = [dict(r, rank=0), dict(r, rank=1)]
    return out


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_read(gpu, capsys):
    ns = page_namespace(
        gpu=gpu,
        where="2 x GPU, NCCL" if gpu else "CPU, gloo",
        cfg=dict(dtype="float32", steps=2, windows=5, world=2, profiled=2),
        ref_losses=[2.0],
        loss_tol=1e-4,
        grad_tol=1e-4,
        rows=rows(gpu),
        flops=1e12,
        peak=1e15,
    )
    ns["read"](
        ["eager", "compiled", "faster"], [("compiled", "eager"), ("faster", "eager")]
    )
    out = capsys.readouterr().out
    assert ("MFU %" in out) == gpu and ("exposed transfer" in out) == gpu
    lines = [s for s in out.splitlines() if s.startswith("rank ")]
    assert len(lines) == 4
    slower, faster = lines[0], lines[2]
    assert "slower beyond the spread" in slower and "0.83x the speed" in slower
    assert "faster beyond the spread" in faster
    if gpu:
        row = ns["rows"]
        assert [row[n][0]["bound"] for n in row] == ["compute", "CPU", "communication"]
        # The kernel table: one row per launcher, "rank 0 / rank 1" per variant.
        kernels = next(s for s in out.splitlines() if s.startswith("| matmul and"))
        assert kernels.split("|")[2].strip() == "8.5 / 8.5"
        optimizer = next(s for s in out.splitlines() if s.startswith("| optimizer"))
        assert optimizer.split("|")[4].strip() == "1.0 / 1.0"
        assert row["eager"][0]["mfu"] == pytest.approx(
            10.0
        )  # 1e12 FLOP in 10 ms of 1e15
        # 77 % busy: the CPU side grew, aten::mm by 1 ms per step, half of the 2 ms gap
        assert (
            "Self CPU time" in slower
            and "aten::mm +1.000 ms: 50 % of the gap" in slower
        )
    else:
        assert "aten::mm +1.000 ms" in slower


def test_read_within_spread_and_failed_check(capsys):
    table = rows(False)
    for r in table["compiled"]:
        r.update(step=10.05)
    ns = page_namespace(
        gpu=False,
        where="CPU, gloo",
        cfg=dict(dtype="float32", steps=2, windows=5, world=2, profiled=2),
        ref_losses=[2.0],
        loss_tol=1e-4,
        grad_tol=1e-4,
        rows=table,
    )
    ns["read"](["eager", "compiled"], [("compiled", "eager")])
    lines = [s for s in capsys.readouterr().out.splitlines() if s.startswith("rank ")]
    assert all("within the spread" in s and "grew" not in s for s in lines), lines
    ns["rows"] = rows(False, grad_err=1.0)
    with pytest.raises(AssertionError, match="eager: w off"):
        ns["read"](["eager"], [])
