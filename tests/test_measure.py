"""The measurement core (measure.py) against answers known in advance, on the CPU, and the
block that carries it into every download. The GPU's known answers run in the recipe
recipes_source/measuring.py on every GPU build."""

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT
from test_validator import make_site, problems

import measure
from tools import gallery


def event(name, start, end, thread=1):
    return SimpleNamespace(
        name=name, thread=thread, time_range=SimpleNamespace(start=start, end=end)
    )


def test_union_counts_overlap_once_and_lists_the_gaps():
    assert measure._union([(0, 2), (1, 3), (5, 6)]) == (4, [(3, 5)])


def test_nested_events_split_into_their_own_time():
    # a range 0-10 holding an operator 2-6, which holds a launch 3-4; then Python
    events = [
        event("Optimizer.step#Adam.step", 0, 10),
        event("aten::mm", 2, 6),
        event("cudaLaunchKernel", 3, 4),
    ]
    timeline = measure._self_segments(events)[1]
    assert timeline[1] == [
        (0, 2, "optimizer"),
        (2, 3, "matmul"),
        (3, 4, "kernel launches"),
        (4, 6, "matmul"),
        (6, 10, "optimizer"),
    ]
    parts = {}
    measure._charge(timeline, -2, 12, parts)  # 4 ms with no event: Python
    assert parts == {
        "optimizer": 6,
        "matmul": 3,
        "kernel launches": 1,
        measure.PYTHON: 4,
    }


@pytest.mark.parametrize(
    "name, family",
    [
        ("FSDP::post_backward_rs_wait (layers.0)", "communication"),
        ("FSDP::all_gather (layers.0)", "communication"),
        ("FSDP::post_backward_reduce", "communication"),
        ("FSDP::all_gather_copy_out (layers.0)", "FSDP2 hooks"),
        ("FSDP::pre_forward (layers.0)", "FSDP2 hooks"),
        # an AOTInductor package records no operators; pages name its call
        ("AOTInductor package, single-threaded", "compiled code"),
        ("CompiledFxGraph", "compiled code"),
        ("aten::_foreach_copy_", "copies"),  # not the optimizer's, whatever calls it
        ("aten::_foreach_add_", "optimizer"),
    ],
)
def test_fsdp2_ranges_named_after_a_collective_are_communication(name, family):
    assert measure._family(name, measure.CPU_FAMILIES, measure.PYTHON) == family


@pytest.mark.parametrize(
    "name, family",
    [
        ("triton_per_fused_add_mean_mul_pow_rsqrt_0", "compiled kernels"),
        ("add_rmsnorm_fwd_kernel", "hand-written kernels"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)",
            "eager elementwise",
        ),
        (
            "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)",
            "eager elementwise",
        ),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "matmul"),
        (
            "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>(Flash_fwd_params)",
            "attention",
        ),
        ("Memcpy DtoD (Device -> Device)", "copies"),
        (  # torch._foreach_copy_, as CUDA graphs copy their inputs into place
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<"
            "at::native::(anonymous namespace)::TensorListMetadata<2>, "
            "at::native::(anonymous namespace)::CopyFunctor<float, float, float, 2, 1, 1>>",
            "copies",
        ),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<"
            "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>",
            "optimizer",
        ),
        (
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "communication",
        ),
    ],
)
def test_kernels_fall_into_their_families(name, family):
    assert measure._family(name, measure.KERNEL_FAMILIES, "other kernels") == family


def test_paired_ratio_and_its_interval():
    results = measure.Results()
    base = [1.0, 1.1, 0.9, 1.0, 1.2, 1.0, 0.95, 1.05, 1.0]
    for name, factor in [("a", 1.0), ("b", 1.5)]:
        windows = [w * factor for w in base]
        results[name] = measure.Row(name, 1.0 * factor, 0.1, windows, 1.0 * factor)
    mid, lo, hi, conf = results.ratio("b", "a")
    assert (mid, lo, hi) == pytest.approx((1.5, 1.5, 1.5))
    assert conf == pytest.approx(1 - 2 * 10 / 512)  # 9 rounds: 2nd to 8th of 9
    assert [measure._digits(x) for x in (0.9996, 1.0, 1.004, 0.87)] == [
        "0.9996",
        "1.00",
        "1.004",
        "0.87",
    ]
    results["c"] = measure.Row("c", 1.0, 0.1, [1.0, 1.1, 0.9] * 3, 1.0)
    assert "a tie" in results.versus("c", "a")


def test_few_windows_give_the_extremes_with_their_own_confidence():
    res = measure.Results()
    for name, w in (("a", [1.0, 2.0, 3.0]), ("b", [1.0, 1.0, 1.0])):
        res[name] = measure.Row(name, 1.0, 0.0, w, 1.0)
    assert res.ratio("a", "b") == (2.0, 1.0, 3.0, 0.75)  # 1 - 2 / 2**3


def test_a_gap_whose_largest_parts_cancel_is_read_by_direction():
    """When one kind of work replaced another, the largest parts cover a small share of the
    gap: the line then counts every part on the side it moved to, and the sides add up."""
    small = {f"small part {i}": 0.04 for i in range(10)}  # 0.4 ms, spread thin

    def results(compiled):
        out = measure.Results()
        eager = {"eager operators": 3.2, "copies": 1.3, "matmul": 1.0, **small}
        for name, parts in [("eager", eager), ("compiled", compiled)]:
            ms = sum(parts.values())
            windows = [ms * (1 + 0.001 * i) for i in range(9)]
            out[name] = measure.Row(name, ms, 0.01, windows, ms, parts=parts)
        return out.versus("compiled", "eager")

    line = results({"compiled code": 3.5, "Python": 1.0, "matmul": 1.0})
    assert "Parts by the way they moved: those that grew +4.500 ms" in line
    assert "those that shrank -4.900 ms (eager operators -3.200, copies -1.300" in line
    assert line.endswith("together 100 % of the gap")
    line = results({"eager operators": 3.2, "copies": 1.3, "matmul": 0.4})
    assert "Parts that moved most: matmul -0.600 ms; small part 0 -0.040 ms" in line


def test_medians_that_disagree_with_their_pairs_are_named():
    """A slow stretch of the machine that hit one variant's windows more than the other's
    moves its median but not the paired ratio: the line says the two disagree."""
    results = measure.Results()
    base = [1.0] * 9
    results["a"] = measure.Row("a", 1.0, 0.1, base, 1.0, parts={"x": 1.0})
    results["b"] = measure.Row("b", 1.4, 0.1, [1.05] * 9, 1.4, parts={"x": 1.4})
    line = results.versus("b", "a")
    assert "the medians' ratio, 1.40x, is outside the paired interval" in line
    results["b"].ms = 1.05
    assert "outside the paired" not in results.versus("b", "a")


def test_a_row_profiled_faster_than_it_was_timed_is_called_unsteady(capsys):
    row = measure.Row("r", ms=1.0, spread=0.0, windows=[1.0], profiled_ms=0.8)
    assert row.check() == []  # not physics: the machine changed speed
    out = capsys.readouterr().out
    assert "Unsteady, r: its profiled steps ran faster" in out
    assert "its parts mix two states" in out  # a CPU row has no busy share to name
    row.check()  # a page that checks a row again: said once
    assert capsys.readouterr().out == ""
    assert measure.Row(**vars(row)).said_unsteady  # a row sent between processes
    gpu = measure.Row(
        "g", ms=1.0, spread=0.0, windows=[1.0], profiled_ms=0.8, busy_ms=0.5
    )
    gpu.check()
    assert "its busy share and parts mix two states" in capsys.readouterr().out
    row.profiled_ms = 1.2
    row.check()
    assert capsys.readouterr().out == ""


def test_physics_checks_report_a_busy_share_above_100_and_below_the_roofline(capsys):
    row = measure.Row("r", ms=1.0, spread=0.0, windows=[1.0], profiled_ms=1.0)
    row.busy_ms = 1.2
    assert len(row.check(roofline_ms=1.5)) == 2
    assert capsys.readouterr().out.count("Physics check failed, r:") == 2
    measure.PHYSICS_FAILURES.clear()


def spin(ms):
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def test_parts_add_up_to_each_step():
    """What holds on a machine of any load (this test runs beside the site's build, at a
    lower priority, where a 0.1 ms product can read 5 ms): parts that add up to the step.
    The timed known answers run in recipes_source/measuring.py, in the build."""
    x = torch.randn(128, 128)
    results = measure.compare(
        {"short": lambda: (spin(1.0), x @ x), "long": lambda: (spin(3.0), x @ x)},
        "cpu",
        rounds=5,
    )
    for row in results.values():
        assert sum(row.parts.values()) == pytest.approx(row.ms)
        assert row.busy is None and row.ms > 0 and len(row.windows) == 5
    assert {measure.PYTHON, "matmul"} <= set(results["long"].parts)
    assert "long vs short:" in results.versus("long", "short")
    assert not measure.PHYSICS_FAILURES


def test_a_roofline_in_bytes_times_the_copy_in_the_same_windows(monkeypatch):
    """The copy that gives the roofline is a variant of the same rotation, kept out of
    the rows; the roofline is the bytes at the copy's own measured speed."""
    monkeypatch.setattr(measure, "PROFILE_ROUNDS", 1)
    x = torch.randn(64, 64)
    res = measure.compare(
        {"mm": lambda: x @ x}, "cpu", rounds=3, roofline_bytes=10 * 2**20
    )
    assert list(res) == ["mm"] and len(res.copy.windows) == 3
    assert res.bytes_per_ms == pytest.approx(2 * 128 * 2**20 / res.copy.ms)
    assert res.roofline_ms == pytest.approx(10 * 2**20 / res.bytes_per_ms)
    with pytest.raises(AssertionError, match="one roofline"):
        measure.compare({"mm": lambda: x @ x}, "cpu", roofline_ms=1, roofline_bytes=1)


def test_a_download_runs_with_no_file_of_the_project_beside_it(tmp_path):
    script = (
        '"""Title\n=====\n"""\n\nimport inspect\n\nimport measure\n\n'
        "print(measure.compare.__name__, len(inspect.getsource(measure)))\n"
    )
    (tmp_path / "page.py").write_text(gallery.download_script(script))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "page.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    core = (ROOT / gallery.CORE).read_text(encoding="utf-8")
    assert out.stdout.split() == ["compare", str(len(core))]  # its source, for workers
    text = (tmp_path / "page.py").read_text()
    assert text.startswith('"""Title') and gallery.download_script(text) == text


def test_a_notebook_gets_the_core_after_its_install_cell_and_title():
    cells = [
        {"cell_type": "code", "source": "%pip install torch"},
        {"cell_type": "markdown", "source": "# Title"},
        {"cell_type": "code", "source": "import measure"},
    ]
    notebook = gallery.download_notebook({"cells": cells})
    assert gallery.CORE_CELL_MARK in notebook["cells"][2]["source"]
    assert notebook["cells"][3]["source"] == "import measure"
    assert json.dumps(notebook)  # still plain JSON


def test_validator_fails_a_page_with_a_physics_failure(tmp_path):
    output = "Physics check failed, add: busy 130 % is above 100 %"
    assert "physics checks" in problems(make_site(tmp_path, output=output))


def test_every_tutorial_measures_with_the_core():
    for t in gallery.tutorials(ROOT):
        text = (ROOT / t.source).read_text(encoding="utf-8")
        assert gallery.imports_core(text), t.source
        assert "def step_and_busy" not in text and "def attribute" not in text, t.source


def test_a_page_that_cannot_run_here_stops_with_one_line():
    code = "import measure; measure.require(linux=True, gpus=99); print('ran on')"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 1 and "ran on" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert lines == ["This page needs 99 CUDA GPUs (found 0)."], done.stderr


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the wrapper is Linux's"
)
def test_the_cxx_watch_counts_the_compilers_runs_and_nothing_else():
    watch = measure.watch_cxx()
    assert watch is not None and os.environ["CXX"] == str(watch.path)
    start = time.time()
    subprocess.run([watch.path, "--version"], check=True, capture_output=True)
    wall = time.time() - start  # what the run took, however loaded the machine
    time.sleep(0.2)  # a pause in which the compiler does not run
    ran = watch.seconds(start, time.time())
    assert 0.0 < ran <= wall + 0.01, (ran, wall)
    assert watch.seconds(start - 10, start) == 0.0
    measure.unwatch_cxx()  # what the site's build does between pages
    assert measure._CXX is None and os.environ.get("CXX") != str(watch.path)
