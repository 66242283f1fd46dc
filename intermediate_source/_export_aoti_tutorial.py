# Not executed by the site yet (the leading underscore keeps sphinx-gallery away): on an
# H100 with PyTorch 2.11 its AOTInductor package process died with signal 11 before its
# first result, twice (issue 35). The CPU path runs; see the closing note of 2026-11-25.
"""
.. _export_aoti_tutorial:

From torch.compile to a deployable artifact: torch.export and AOTInductor
=========================================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How ``torch.export`` captures a model as one graph with a dynamic batch size, and
         how to read the ``ExportedProgram`` it returns
       * Why export rejects a Python branch on a tensor's value, and how ``torch.cond``
         fixes it
       * How AOTInductor compiles the exported program into a ``.pt2`` package that a fresh
         process loads and runs without the model's Python code
       * How long a fresh process takes to its first result with ``torch.compile`` from an
         empty cache, with portable cache artifacts, and with the package, and how fast
         each one runs afterwards
       * What a package is bound to: the PyTorch that built it, the device, the exported
         ranges

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later, with tabulate and matplotlib
       * :ref:`compile_time`, which teaches Inductor's caches and portable cache artifacts
       * A CUDA GPU of compute capability 7.5 or newer for the timings (current CUDA wheels
         need it); runs on CPU with smaller sizes. On a CPU, Inductor and AOTInductor need
         a C++ compiler and the Python headers (``python3-dev`` or similar)
"""

# %%
# Two ways to compile
# -------------------
#
# ``torch.compile`` compiles *just in time*: in every new process, the first call traces
# the model's Python code with Dynamo and compiles the graph it finds (or loads it from
# Inductor's cache), and every later call checks the *guards* that say whether the compiled
# code still applies. The serving process needs the model's Python source and pays for the
# first compilation at each start.
#
# ``torch.export`` and AOTInductor compile *ahead of time*. ``torch.export.export`` traces
# ``forward`` once into an ``ExportedProgram``: one graph of ATen operations with the
# weights beside it and no Python left in it. ``torch._inductor.aoti_compile_and_package``
# hands that graph to Inductor, which generates the kernels and a C++ *wrapper* that calls
# them in order, compiles both into a shared library, and zips it with the weights into a
# ``.pt2`` file. A server loads that file with ``torch._inductor.aoti_load_package`` in
# Python (or ``AOTIModelPackageLoader`` in C++) and calls it: no tracing, no guards, no
# compiler at start-up. In exchange, export accepts less Python than ``torch.compile``,
# and the package serves only the shapes, the device and the PyTorch it was built for.
#
# This page exports a small transformer, packages it, and measures both paths where they
# matter for a server: in fresh processes, from start to first result, then in steady
# state.
#
# Setup
# -----
#
# The model's code is kept in a string, as in :ref:`compile_time`: the fresh processes
# started later import it from a file, except the one that loads the package, which does
# not need it.

import contextlib
import io
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from collections import Counter
from pathlib import Path

# On a machine with CUDA's compiler but no GPU, PyTorch warns "No CUDA runtime is found"
# when it looks for CUDA's headers; a CPU build of this page has no use for them.
logging.getLogger("torch.utils.cpp_extension").addFilter(
    lambda record: "No CUDA runtime" not in record.getMessage()
)

import matplotlib.pyplot as plt
import torch
from tabulate import tabulate
from torch import nn
from torch._dynamo.utils import counters
from torch.profiler import ProfilerActivity, profile
from torch.utils import benchmark

MODEL_CODE = """
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):  # x: (batch, sequence, width)
        qkv = self.qkv(self.norm1(x)).unflatten(-1, (3, self.heads, -1))
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (batch, heads, seq, dim)
        attn = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
        x = x + self.out(attn)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Encoder(nn.Module):
    def __init__(self, width, heads, layers, classes=10):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(layers)])
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.blocks(x).mean(dim=1))


def make_model(width, heads, layers, device):
    torch.manual_seed(0)
    return Encoder(width, heads, layers).to(device).eval()
"""
namespace = {}
exec(MODEL_CODE, namespace)
make_model = namespace["make_model"]

device = "cuda" if torch.cuda.is_available() else "cpu"
# The page keeps PyTorch's default float32 matmul precision.
warnings.filterwarnings("ignore", message=".*(TensorFloat32|Profiler clears)")
# Packaging calls a pytree API that recent releases deprecate: not this lesson's code.
warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    WIDTH, HEADS, LAYERS, SEQ, BATCH, MAX_BATCH, STEPS = 768, 12, 2, 256, 16, 64, 50
else:
    device_name = f"CPU, {torch.get_num_threads()} threads"
    WIDTH, HEADS, LAYERS, SEQ, BATCH, MAX_BATCH, STEPS = 32, 4, 2, 16, 4, 64, None
    print("No CUDA GPU found: running on the CPU with a smaller model.")
print(f"torch {torch.__version__} on {device} ({device_name})")
print(f"{LAYERS} blocks, width {WIDTH}, {HEADS} heads; input {BATCH} x {SEQ} x {WIDTH}")

model = make_model(WIDTH, HEADS, LAYERS, device)
x = torch.randn(BATCH, SEQ, WIDTH, device=device)
work = tempfile.TemporaryDirectory(prefix="export_aoti_")  # packages, caches, scripts
work_dir = Path(work.name)
(work_dir / "model.py").write_text(MODEL_CODE)
torch.save(x.cpu(), work_dir / "input.pt")  # every process runs the same input

# %%
# Helpers
# -------
#
# ``step_and_busy`` times a call in steady state. On a GPU it measures two things over the
# same loop of back-to-back calls (the L2 cache is not flushed between them): the **step
# time**, from CUDA events without the profiler, and the **GPU busy time**, the union of
# the kernels' intervals that ``torch.profiler`` records, so that overlapping kernels
# count once. Busy time over step time is the busy share: at 85 % or more the step is
# bound by the GPU; below that, the GPU idles for the rest of the step, waiting for the CPU
# (Python, guards, kernel launches). On a CPU there is no separate device to be busy or
# idle: ``torch.utils.benchmark.Timer`` gives the step time with the threads that
# Inductor's code uses, and the GPU columns are left out of the tables.
#
# ``explain_slower`` is the page's one reading of its tables: for every row slower than
# the row it is compared with, it prints by how much and how each measured part changed.
# ``rel_error`` compares an output with a float64 run of the same model.


def step_and_busy(step):
    """Median step time and GPU busy time per step (None on a CPU), in ms."""
    if device == "cpu":
        timer = benchmark.Timer(
            "step()", globals={"step": step}, num_threads=torch.get_num_threads()
        )
        return timer.blocked_autorange(min_run_time=0.5).median * 1e3, None
    windows = []
    for _ in range(5):  # CUDA events around STEPS back-to-back calls, no profiler
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        for _ in range(STEPS):
            step()
        end.record()
        end.synchronize()
        windows.append(start.elapsed_time(end) / STEPS)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:  # the same loop, profiled
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
    spans = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
    )
    busy, reach = 0.0, float("-inf")
    for s, e in spans:  # the union of the kernels' intervals, in microseconds
        if e > reach:
            busy += e - max(s, reach)
            reach = e
    return statistics.median(windows), busy / STEPS / 1e3


def explain_slower(rows, headers, against_previous=False):
    """One line per row slower (column 1) than eager (row 0) or than the row before."""
    lines = []
    for i, row in enumerate(rows[1:], 1):
        base = rows[i - 1] if against_previous else rows[0]
        diffs = [
            f"{name} {row[j] - base[j]:+.3g}"
            for j, name in enumerate(headers[2:], 2)
            if isinstance(row[j], float) and isinstance(base[j], float)
        ]
        bound = f", bound by the {row[-1]}" if headers[-1] == "bound" else ""
        if row[1] > base[1]:
            lines.append(
                f"{row[0]} is {row[1] / base[1]:.2f}x {base[0]} in {headers[1]}"
            )
            lines[-1] += f"{bound}; differences from {base[0]}: {', '.join(diffs)}"
    print("\n".join(lines) or "No row is slower than the row it is compared with.")


PATH = re.compile(r"(?<![\w.])/\S*/")  # a file path up to its file name


def table(rows, headers, floatfmt):
    print(tabulate(rows, headers, tablefmt="github", floatfmt=floatfmt))


def rel_error(out, reference):
    return ((out.double().cpu() - reference).norm() / reference.norm()).item()


# %%
# Exporting with a dynamic batch
# ------------------------------
#
# ``torch.export.export(model, args)`` runs ``forward`` once on the example inputs and
# records every operation. By default each size of the example becomes a constant of the
# graph. ``dynamic_shapes`` says which sizes may vary: here dimension 0 of ``x`` is a
# ``torch.export.Dim`` named ``batch``, from 2 to ``MAX_BATCH``, and the sequence length
# and width stay fixed. Why not from 1: Inductor, like Dynamo, compiles a dynamic size for
# the values 2 and up and treats 0 and 1 as special cases, so a package whose range
# starts at 1 still rejects a batch of 1 once it checks its inputs (the last section
# shows that check). A server pads a single request to 2, or builds a second package.

batch = torch.export.Dim("batch", min=2, max=MAX_BATCH)
exported = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
signature = exported.graph_signature
ops = Counter(str(n.target) for n in exported.graph.nodes)
ops = {op: k for op, k in ops.most_common() if op.startswith("aten.")}
print(f"graph inputs: {len(signature.parameters)} parameters, ", end="")
print(f"{len(signature.buffers)} buffers, user inputs {signature.user_inputs}")
print(f"user outputs: {signature.user_outputs}")
print(f"range constraints: {exported.range_constraints}")
print(f"{sum(ops.values())} ATen calls; most frequent: {list(ops.items())[:3]}")
with torch.no_grad():
    torch.testing.assert_close(exported.module()(x), model(x))

# %%
# The *graph signature* lists what the graph takes and returns. Export lifts every
# parameter (and buffer) of the model to an input of the graph, named after it, so the
# graph itself is a pure function; the one *user* input is ``x``, and the output is the
# head's result. In the graph, ``x``'s first size is a symbol (``s77`` or similar), and the
# *range constraints* bound it: the batch range of the ``Dim``. Every operation is an ATen operator
# (``aten.linear``, ``aten.scaled_dot_product_attention``, views of the heads), and
# ``exported.module()`` turns the program back into a callable module, checked above
# against the model. If the model's
# code narrows the range (a reshape that needs an even batch, say), export raises an
# error that says so instead of returning a program that is wrong for some sizes.
#
# When export fails: a branch on a tensor's value
# ------------------------------------------------
#
# ``torch.compile`` meets unsupported Python with a graph break and runs that piece
# eagerly. Export has no such fallback: the whole of ``forward`` must become one graph. The
# failure that users meet most is a Python ``if`` on a tensor's value. This wrapper scales
# an input down when its largest entry exceeds a limit:


class Rescaled(nn.Module):
    def __init__(self, net, limit=3.0):
        super().__init__()
        self.net, self.limit = net, limit

    def forward(self, x):
        peak = x.abs().amax()
        # a Python branch on a tensor's value
        if peak > self.limit:
            x = x * (self.limit / peak)
        return self.net(x)


printed = io.StringIO()
shapes_log = logging.getLogger("torch.fx.experimental.symbolic_shapes")
level = shapes_log.level
shapes_log.setLevel(logging.ERROR)  # its warning adds nothing to the error
try:
    with contextlib.redirect_stderr(printed):  # export prints its partial graph here
        torch.export.export(Rescaled(model), (x,), dynamic_shapes={"x": {0: batch}})
    raise AssertionError("export accepted a data-dependent branch")
except Exception as error:  # GuardOnDataDependentSymNode on PyTorch 2.9 to 2.14
    print(f"{type(error).__name__}: {str(error).splitlines()[0]}")
    assert "data-dependent" in str(error), error
finally:
    shapes_log.setLevel(level)
graph = [ln.strip() for ln in printed.getvalue().splitlines() if ln.strip()]
for line in [ln for ln in graph if "code:" in ln or "aten.item" in ln][-2:]:
    print(f"  partial graph: {PATH.sub('', line)}")

# %%
# Read it from the bottom. Export traces with *fake* tensors, which have shapes but no
# values. To run the ``if``, Python asked for the truth of ``peak > self.limit``; export
# turned that into ``.item()`` of a boolean tensor, the last line of the graph it had
# traced so far, whose result it cannot know: a new *unbacked* symbol ``u0``. The branch
# needs ``Eq(u0, 1)`` ("is the condition true?") decided at trace time, and that is what
# "could not guard on data-dependent expression" means (the parentheses after it are
# details of the symbolic-shapes machinery). The line above it names the line of
# ``forward`` that asked.
#
# The fix is to keep both branches in the graph. ``torch.cond(pred, true_fn, false_fn,
# operands)`` records both functions as subgraphs and picks one at run time. The branches
# take the same operands, return tensors of the same shapes and dtypes, and must not
# return an input as it is (hence ``clone``). When a branch-free expression exists it is
# simpler still: here ``x * torch.clamp(self.limit / peak, max=1.0)`` computes the same
# without a branch. ``torch.cond`` is for branches that do different work.


class RescaledCond(Rescaled):
    def forward(self, x):
        peak = x.abs().amax()
        x = torch.cond(
            peak > self.limit,
            lambda t, p: t * (self.limit / p),
            lambda t, p: t.clone(),
            (x, peak),
        )
        return self.net(x)


fixed = torch.export.export(RescaledCond(model), (x,), dynamic_shapes={"x": {0: batch}})
conds = [n for n in fixed.graph.nodes if n.target is torch.ops.higher_order.cond]
print(f"exported: {len(conds)} cond node, branches {conds[0].args[1:3]}")
with torch.no_grad():
    for t in [x, 0.01 * x]:  # x takes the first branch, 0.01 * x the other
        torch.testing.assert_close(fixed.module()(t), Rescaled(model)(t))

# %%
# The exported program gives the same results as the Python ``if`` on both sides of the
# limit. The rest of the page packages the plain model.
#
# Compiling the package with AOTInductor
# --------------------------------------
#
# ``aoti_compile_and_package`` compiles the exported program and writes the package.
# ``inductor_configs`` takes Inductor's options; ``aot_inductor.metadata`` stores strings
# of your own in the package, here the PyTorch version that built it, which the package
# does not otherwise record. (How long the build takes depends on what Inductor's cache
# of this machine already holds, so the page does not report it; the fresh processes below
# measure compilation from an empty cache.)

package = work_dir / "encoder.pt2"
torch._inductor.aoti_compile_and_package(
    exported,
    package_path=str(package),
    inductor_configs={"aot_inductor.metadata": {"built_with": torch.__version__}},
)
with zipfile.ZipFile(package) as archive:
    names = archive.namelist()
kinds = Counter(Path(name).suffix for name in names if Path(name).suffix)
print(f"{package.name}: {package.stat().st_size / 1e6:.1f} MB, {len(names)} files")
print(f"files with a suffix, by kind: {dict(kinds)}")

# %%
# The package is a zip archive. ``.cpp`` files are the generated wrapper and kernels
# (kept for reading and debugging), ``.so`` the compiled library, ``.json`` its metadata;
# the weights are stored inside the library or as separate files, and a GPU package also
# holds its compiled kernels (``.cubin``). On a CPU AOTInductor generates C++ with OpenMP
# for every kernel and compiles it with the machine's C++ compiler; on a GPU the kernels
# are Triton, compiled to GPU code, and only the wrapper is C++.
#
# Start to first result, in fresh processes
# -----------------------------------------
#
# A server cares about the time from starting a process to its first answer. The page
# writes a small script and runs it three times, each in a new Python process with a new,
# empty Inductor cache folder:
#
# 1. ``torch.compile`` from an empty cache; after its first result the process saves
#    portable cache artifacts with ``torch.compiler.save_cache_artifacts``.
# 2. ``torch.compile`` after ``torch.compiler.load_cache_artifacts`` of those bytes.
# 3. The package: ``aoti_load_package``, then a call. This process never imports the
#    model's code, and it checks the PyTorch version stored in the package against its
#    own.
#
# Each writes its output to a file for the accuracy check below. Both ``torch.compile``
# processes mark the batch dimension dynamic (``torch._dynamo.mark_dynamic``), so all
# three paths compile the same dynamic-batch model.
#
# Inductor compiles kernels in a pool of worker processes, which it starts the first time
# it compiles, and at exit Python waits for those workers to stop. A process that will
# compile nothing new can set ``TORCHINDUCTOR_COMPILE_THREADS=1``: Inductor then compiles
# in the process itself and starts no pool. The first process keeps the default, since it
# compiles everything, and the package process sets 1. The second one depends on the
# device: on a GPU the artifacts hold the compiled Triton kernels, so it sets 1; on a CPU
# they hold the generated C++ source, which the process compiles again, so it keeps the
# default. None of them checks its inputs; a fourth process, in the last section, does.

SCRIPT = """
import json, sys, torch

imported = time.perf_counter() - STARTED
mode, device = sys.argv[1:3]
x = torch.load("input.pt").to(device)
start = time.perf_counter()
if mode in ("package", "bounds"):
    run = torch._inductor.aoti_load_package("encoder.pt2")
    assert run.get_metadata()["built_with"] == torch.__version__
else:
    from model import make_model  # only the torch.compile processes need the code
    if mode == "artifacts":
        torch.compiler.load_cache_artifacts(open("artifacts.bin", "rb").read())
    run = torch.compile(make_model(*map(int, sys.argv[3:]), device))
    torch._dynamo.mark_dynamic(x, 0)
loading = time.perf_counter() - start
start = time.perf_counter()
with torch.no_grad():
    out = run(x).cpu()  # .cpu() waits for the device
first_call, result_at = time.perf_counter() - start, time.time()
torch.save(out, mode + ".pt")
notes = {"workers": torch._inductor.config.compile_threads}
if mode == "compile":
    open("artifacts.bin", "wb").write(torch.compiler.save_cache_artifacts()[0])
if mode == "bounds":  # one batch below the exported range, one above
    for size in [1, int(sys.argv[3]) + 1]:
        try:
            run(torch.randn(size, *x.shape[1:], device=device))
        except RuntimeError as error:
            notes.setdefault("raised", []).append(type(error).__name__)
fx = torch._dynamo.utils.counters["inductor"]
notes.update(hits=fx["fxgraph_cache_hit"], misses=fx["fxgraph_cache_miss"])
print("RESULT", json.dumps([imported, loading, first_call, result_at, notes, time.time()]))
"""
(work_dir / "fresh.py").write_text(
    "import time\nSTARTED = time.perf_counter()\n" + SCRIPT
)


def fresh_process(mode, workers, *args):
    cache = tempfile.mkdtemp(dir=work_dir)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
    env.update(TRITON_CACHE_DIR=os.path.join(cache, "triton"), TMPDIR=cache)
    if mode == "bounds":  # the package checks its inputs: see the last section
        env["AOTI_RUNTIME_CHECK_INPUTS"] = "1"
    env.pop("TORCHINDUCTOR_COMPILE_THREADS", None)  # the default, unless told
    env.update({"TORCHINDUCTOR_COMPILE_THREADS": str(workers)} if workers else {})
    command = [sys.executable, "fresh.py", mode, device, *map(str, args)]
    started = time.time()
    done = subprocess.run(
        command, cwd=work_dir, env=env, capture_output=True, text=True
    )
    ended = time.time()
    tail = [PATH.sub("", (done.stdout + done.stderr)[-3000:])]
    assert done.returncode == 0 or mode == "bounds", (done.returncode, tail)
    if done.returncode:  # the bounds section shows how it ended
        return None, {"exit code": done.returncode, "raised": [], "printed": tail}
    imported, loading, first, result_at, notes, last = json.loads(
        done.stdout.split("RESULT ")[-1]
    )
    notes["printed"] = [ln for ln in done.stderr.splitlines() if ln.startswith("Error")]
    return [result_at - started, imported, loading, first, ended - last], notes


paths = {
    "torch.compile, empty cache": fresh_process("compile", None, WIDTH, HEADS, LAYERS),
    "with cache artifacts": fresh_process(
        "artifacts", 1 if device == "cuda" else None, WIDTH, HEADS, LAYERS
    ),
    "AOTInductor package": fresh_process("package", 1, MAX_BATCH),
}
(_, cold), (_, loaded_notes), (_, package_notes) = paths.values()
assert cold["hits"] == 0 and cold["misses"] > 0 and loaded_notes["hits"] > 0, paths
assert package_notes["hits"] + package_notes["misses"] == 0, package_notes
start_rows = [
    [name, *times, notes["workers"], f"{notes['hits']}/{notes['misses']}"]
    for name, (times, notes) in paths.items()
]
start_headers = ["fresh process", "start to result (s)", "import torch (s)", "load (s)"]
start_headers += ["first call (s)", "exit (s)", "compile workers", "FX hits/misses"]
print(f"{device_name}, torch {torch.__version__}, one process each")
table(start_rows, start_headers, ".2f")
explain_slower(start_rows, start_headers[:6], against_previous=True)

# %%
# "start to result" runs from launching Python to the moment the first output is on the
# host. The next columns are its main parts, timed inside the process. "import torch" is
# ``import torch`` alone. "load" is everything before the first call: for
# ``torch.compile``, importing the model's code, building the model and wrapping it (which
# imports Dynamo and Inductor), plus loading the artifacts in the second process; for the
# package, importing Inductor, opening the zip and loading the library and the weights.
# "first call" is, for ``torch.compile``, Dynamo's tracing and the compilation or the
# cache lookups, then the run; for the package, the run alone. What remains is Python's
# own start, reading the input and, on a GPU, creating the CUDA context. "exit" runs from
# the script's last line to the end of the process, after the result, but a job that
# starts a process per request pays it too. "compile workers" is the number of workers
# Inductor would start (1: no pool), and the last column counts FX graph cache hits and
# misses: the first process found nothing, the second found the loaded entries, and the
# package process never looked. A line under the table names, for any path slower than
# the one before it, how each part changed.
#
# The chart shows the same rows, each part in its own colour, with the exit after the
# result.

fig, ax = plt.subplots(figsize=(8, 3))
rows = start_rows[::-1]  # barh draws from the bottom up
parts = {name: [r[j] for r in rows] for j, name in [(2, "import torch"), (3, "load")]}
parts["first call"] = [r[4] for r in rows]
parts["other"] = [r[1] - r[2] - r[3] - r[4] for r in rows]
parts["exit"] = [r[5] for r in rows]
left = [0.0] * len(rows)
for k, (part, widths) in enumerate(parts.items()):
    color = "0.85" if part == "exit" else f"C{k}"
    ax.barh([r[0] for r in rows], widths, left=left, color=color, label=part)
    left = [a + b for a, b in zip(left, widths)]
ax.set_xlabel(f"seconds from process start ({device_name})")
ax.set_title("Fresh process: start to first result, then exit")
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=5, fontsize=8)
fig.tight_layout()
plt.show()

# %%
# Steady state
# ------------
#
# Once running, what does each path cost per call? The page loads the package into this
# process and compiles the model here with ``torch.compile``, its batch marked dynamic as
# in the fresh processes. The site that builds this page keeps a warm compile cache, so
# this compilation is not timed. Each variant is timed at the page's batch and at a batch
# of 2, the smallest in the exported range, and ``measure`` asserts that Dynamo compiled
# nothing new while it timed: one dynamic-batch graph serves both sizes.

torch._dynamo.mark_dynamic(x, 0)
compiled = torch.compile(model)
loaded = torch._inductor.aoti_load_package(str(package))
print(f"package metadata: {loaded.get_metadata()}")
variants = {"eager": model, "torch.compile": compiled, "AOTInductor package": loaded}


@torch.no_grad()
def measure(name, fn):
    for _ in range(3):
        fn(x), fn(x[:2])  # warm-up; torch.compile compiles here
    frames = counters["frames"]["total"]
    step, busy = step_and_busy(lambda: fn(x))
    two, _ = step_and_busy(lambda: fn(x[:2]))
    assert counters["frames"]["total"] == frames, f"{name}: compiled while timed"
    if busy is None:
        return [name, step, two]
    share = 100 * busy / step
    return [name, step, two, busy, share, "GPU" if share >= 85 else "CPU"]


steady_rows = [measure(name, fn) for name, fn in variants.items()]
steady_headers = ["steady state", f"batch {BATCH} (ms)", "batch 2 (ms)"]
if device == "cuda":
    steady_headers += ["GPU busy (ms)", "busy %", "bound"]
else:
    print("On a CPU there is no device to be busy or idle: no GPU columns below.")
print(f"{device_name}, torch {torch.__version__}, medians, back-to-back calls")
table(steady_rows, steady_headers, ".3f")
explain_slower(steady_rows, steady_headers)

# %%
# Read a slower row's line with the mechanisms in mind. Compiled code fuses operations, so
# it runs fewer kernels, and each call of ``torch.compile``-d code passes through its Python
# wrapper and guard checks first. The package runs the same kind of generated kernels from
# a C++ wrapper, with no guards; its Python entry point only flattens the inputs and
# outputs. On a GPU a change in the busy time is a change in the kernels themselves, and a
# change in the rest of the step is CPU time (Python, guards, launches) that the GPU waits
# through; the bound column says which dominates. A change at a batch of 2, where each
# call has the least work, is mostly a change in the fixed cost of a call. On a CPU the
# step is all CPU time, kernels and per-call costs together, and the batch-2 column is the
# clue that separates them.

fig, ax = plt.subplots(figsize=(7, 2.8))
names = [row[0] for row in steady_rows][::-1]
steps = [row[1] for row in steady_rows][::-1]
if device == "cuda":
    busy = [row[3] for row in steady_rows][::-1]
    ax.barh(names, busy, color="C0", label="GPU busy")
    idle = [max(s - b, 0) for s, b in zip(steps, busy)]
    ax.barh(names, idle, left=busy, color="0.75", label="GPU idle")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, fontsize=8)
else:
    ax.barh(names, steps, color="C0")
ax.set_xlabel(f"ms per call, batch {BATCH} ({device_name})")
ax.set_title("Steady state")
fig.tight_layout()
plt.show()

# %%
# Same function
# -------------
#
# Every path must compute what the model computes, up to the order of float32 operations.
# The reference is a float64 copy of the model; each output, including the three written
# by the fresh processes, must stay within a small multiple of eager's error plus a floor.

with torch.no_grad():
    reference = make_model(WIDTH, HEADS, LAYERS, device).double()(x.double()).cpu()
    outputs = {name: fn(x) for name, fn in variants.items()}
for mode, name in zip(["compile", "artifacts", "package"], paths):
    outputs[f"fresh process: {name}"] = torch.load(work_dir / f"{mode}.pt")
errors = {name: rel_error(out, reference) for name, out in outputs.items()}
table(errors.items(), ["output", "error vs float64"], ".2e")
for name, err in errors.items():
    assert err <= 3 * errors["eager"] + 1e-6, (name, err, errors["eager"])

# %%
# What a package is bound to
# --------------------------
#
# A ``.pt2`` file is compiled code, so it serves only what it was compiled for.
#
# **The exported ranges.** The batch may take any size from 2 to ``MAX_BATCH``; the
# sequence length, the width and the dtype are fixed. Out of range, the compiled code is
# not known to be right, and by default the package does not check its inputs at all.
# With ``AOTI_RUNTIME_CHECK_INPUTS=1`` in the environment of the loading process, the
# wrapper checks each input's sizes, dtype and device against the exported program
# before it runs anything. A fresh process with it set loads the package, runs it once
# as above, then calls it with a batch of 1 and with a batch of ``MAX_BATCH + 1``. It
# prints the exceptions it caught, and the reasons the wrapper wrote to its standard error
# (or, had the process died instead, its exit code and last lines):

_, bounds = fresh_process("bounds", 1, MAX_BATCH)
print(f"exceptions raised: {bounds['raised']}, exit code {bounds.get('exit code', 0)}")
for line in bounds["printed"]:
    print(f"  {line}")
assert bounds.get("exit code") or len(bounds["raised"]) == 2, bounds

# %%
# Each line names the input (``input_handles[0]``, the first one), the dimension, the bound
# and the size it got. The lower bound is 2, as exported. The exception carries the same
# text in recent releases; in PyTorch 2.9 its text only says that the call into the model
# failed, so look for the reason in the standard error (a server's log).
#
# **The device.** The metadata printed above names the device the package was compiled
# for (``AOTI_DEVICE_KEY``; recent releases also record the CPU's instruction set or the
# GPU's compute capability). GPU kernels are compiled for the GPU's architecture: a
# package built on one GPU model may fail to load on another (`issue 153697
# <https://github.com/pytorch/pytorch/issues/153697>`__), so build on the model you serve
# on. A CPU package likewise uses the instruction set of the machine that built it.
#
# **The PyTorch that built it.** The generated code calls into PyTorch's C++ library, so
# the loading PyTorch must provide what it calls. A package built by one release has
# failed to load in the next (`issue 123745
# <https://github.com/pytorch/pytorch/issues/123745>`__: a library built by 2.3 missed a
# symbol in 2.4). Since PyTorch 2.6 AOTInductor generates code against a stable C
# interface by default, meant to keep older packages loading in later releases, though
# no firm promise is made (`issue 186143
# <https://github.com/pytorch/pytorch/issues/186143>`__); an older PyTorch loading a
# newer package is not expected to work. The package does not record the version: this
# page stored it as metadata, and the loading process checked it. Rebuild the package
# when you upgrade PyTorch, and keep the exported program (``torch.export.save``) to
# rebuild from.
#
# The CPU path is the same code: on a machine without a GPU this page exports, packages and
# loads a CPU package at smaller sizes, and the package calls C++ kernels with OpenMP
# instead of Triton ones.
#
# Which path to choose
# --------------------
#
# ``torch.compile`` with cache artifacts keeps the flexibility of Python: graph breaks
# run eagerly, a new shape recompiles instead of failing, and training works. The serving
# process still needs the model's code, Dynamo and the matching compile cache, and it
# still traces the model at each start. A package needs none of these and can be served
# from C++, at the price of a model that exports as one graph, inputs within the exported
# ranges, and one build per device and PyTorch version. Which one starts sooner and runs
# faster on your model is what the two tables measure; rerun them on your own machine.
# (The documentation of PyTorch 2.13 and later describes a third, experimental path,
# `torch.compile(...).aot_compile()
# <https://docs.pytorch.org/docs/main/user_guide/torch_compiler/torch.compiler_aot_compile.html>`__,
# which saves a compiled function for later processes and stays in Python; this page,
# which runs on 2.9, does not use it.)
#
# Conclusion
# ----------
#
# ``torch.export`` captures a whole ``forward`` as one graph with declared dynamic sizes,
# and refuses what it cannot capture, such as a Python branch on a tensor's value, which
# ``torch.cond`` or a branch-free rewrite fixes. AOTInductor compiles the exported program
# into a ``.pt2`` package that a fresh process loads and runs without the model's code,
# without tracing and without a compiler; the fresh-process table measures what that saves
# at start-up against ``torch.compile`` with an empty cache and with cache artifacts, and the
# steady-state table what each path costs per call. The package serves only the exported
# ranges, the device it was built for and the PyTorch that built it: turn on its input
# checks, record the version, and rebuild when either changes.
#
# Further reading
# ---------------
#
# * :ref:`compile_time`: Inductor's caches and portable cache artifacts
# * `torch.export <https://docs.pytorch.org/docs/stable/export.html>`__
# * `AOTInductor: ahead-of-time compilation for torch.export-ed models
#   <https://docs.pytorch.org/docs/stable/torch.compiler_aot_inductor.html>`__
# * `Control flow: torch.cond
#   <https://docs.pytorch.org/docs/stable/cond.html>`__
# * `Draft export, for debugging data-dependent errors
#   <https://docs.pytorch.org/docs/stable/draft_export.html>`__

del variants, loaded  # a loaded package keeps its unpacked files until released
work.cleanup()  # the package, the scripts, the caches and the outputs

# sphinx_gallery_thumbnail_number = 1
