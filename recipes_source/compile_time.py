"""
.. _compile_time:

Cutting compile time: caches, portable cache artifacts, regional compilation
============================================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * Where the first call of a compiled model spends its time, read from PyTorch's own
         compile timers
       * What Inductor's on-disk caches save on a second compilation, proved with their hit
         and miss counters
       * How to carry a compile cache to a fresh process with
         ``torch.compiler.save_cache_artifacts`` and ``load_cache_artifacts``, and when that
         process can do without Inductor's compile workers
       * How compiling the repeated block instead of the whole model (regional compilation)
         changes the cold compile time and the time per call

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later, with tabulate and matplotlib
       * A CUDA GPU of compute capability 7.5 or newer for the timings (current CUDA wheels
         need it); runs on CPU with smaller sizes
       * On CPU, Inductor needs a C++ compiler and the Python headers
"""

# %%
# Overview
# --------
#
# The first call of a ``torch.compile``-d model traces the Python code, transforms the graph,
# generates kernels and compiles them; later calls reuse that work. This recipe measures
# where that first call's time goes, then three ways to spend less of it: the on-disk caches
# that a second compilation reads, cache artifacts that carry them to a fresh process, and
# compiling only the block that the model repeats. A figure called *cold* is measured from
# an empty cache that the page makes itself, and the page asserts that it missed the cache
# and compiled at least one graph (the site's build keeps a warm cache on purpose).
#
# Setup
# -----
#
# The model is a stack of identical pre-norm transformer blocks. ``Block`` is defined here
# rather than taken from ``torch.nn``, as a real model's blocks are (the regional section
# says why that matters), and kept in a string, so that a fresh Python process started
# later builds exactly the same model.

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from statistics import median

# torch.profiler's tracing library (Kineto) prints notes on each start and stop, and on a
# machine without a GPU an error line about it; level 6 keeps its own log quiet.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
import matplotlib.pyplot as plt
import torch
import torch.utils.benchmark as benchmark
from tabulate import tabulate
from torch._dynamo.utils import counters
from torch._inductor.utils import fresh_cache
from torch.profiler import ProfilerActivity, profile

MODEL_CODE = """
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))

def make_model(width, heads, layers, device):
    torch.manual_seed(0)
    return nn.Sequential(*[Block(width, heads) for _ in range(layers)]).to(device)
"""
exec(MODEL_CODE, namespace := {})
make_model = namespace["make_model"]

device = "cuda" if torch.cuda.is_available() else "cpu"
# The page keeps PyTorch's default float32 matmul precision; Inductor's hint to turn on
# TF32 is about speed, not about compile time.
warnings.filterwarnings("ignore", message=".*(TensorFloat32|Profiler clears)")
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    WIDTH, HEADS, LAYERS, BATCH, SEQ = 1024, 16, 8, 8, 512
else:
    device_name = f"CPU, threads: {torch.get_num_threads()}"
    WIDTH, HEADS, LAYERS, BATCH, SEQ = 32, 4, 3, 4, 32  # no CUDA GPU: a smaller model
print(f"torch {torch.__version__} on {device} ({device_name})")
print(f"{LAYERS} blocks, width {WIDTH}, {HEADS} heads; input {BATCH} x {SEQ}")
if device == "cpu":
    print("On a CPU there is no separate device to be busy or idle: no GPU columns.")

model = make_model(WIDTH, HEADS, LAYERS, device)
x = torch.randn(BATCH, SEQ, WIDTH, device=device)
sync = torch.cuda.synchronize if device == "cuda" else lambda: None

# %%
# Helpers
# -------
#
# ``fresh_cache()`` points Inductor's and Triton's caches at a new temporary folder for the
# length of a ``with`` block, and ``torch._dynamo.reset()`` drops what Dynamo compiled in
# this process. ``compile_stats`` reads Dynamo's, AOTAutograd's and Inductor's counters
# (cache hits and misses, graphs compiled); ``assert_cold`` states what *cold* means.
#
# ``step_and_busy`` times a call in steady state. On a GPU it times ``steps`` back-to-back
# calls between two CUDA events (the median of five windows is the step time), then runs
# the same loop under ``torch.profiler`` and adds up the time in which at least one kernel
# ran: the GPU busy time. Busy for 85 % of the step or more, the step is bound by the GPU;
# below, the GPU idles for the rest, waiting for the CPU (Python, guards, launches). Both
# loops leave the L2 cache warm, unlike ``triton.testing.do_bench``, which flushes it
# before each call; a share a little above 100 % is noise between the two loops. On a CPU,
# ``torch.utils.benchmark.Timer`` times the call with the threads Inductor's kernels use.


def compile_stats():
    inductor, aot = counters["inductor"], counters["aot_autograd"]
    return {
        "fx hits": inductor["fxgraph_cache_hit"],
        "fx misses": inductor["fxgraph_cache_miss"],
        "aot hits": aot["autograd_cache_hit"],
        "graphs": counters["stats"]["unique_graphs"],
    }


def assert_cold(stats):
    assert stats["fx hits"] == 0 and stats["fx misses"] > 0, stats
    assert stats["aot hits"] == 0 and stats["graphs"] > 0, stats


@torch.no_grad()  # the page compiles and times inference
def step_and_busy(fn, steps):
    """[median step ms], and on a GPU also busy ms per step, busy % and the bound."""
    fn(x)  # compiles, if it has to, before anything is timed
    if device == "cpu":
        threads = torch.get_num_threads()  # as many as Inductor's C++ kernels use
        timer = benchmark.Timer("f(x)", globals={"f": fn, "x": x}, num_threads=threads)
        return [timer.blocked_autorange(min_run_time=0.5).median * 1e3]
    events = [torch.cuda.Event(enable_timing=True) for _ in range(10)]
    for start, end in zip(events[::2], events[1::2]):  # 5 windows, no profiler
        start.record()
        for _ in range(steps):  # back-to-back calls
            fn(x)
        end.record()
    sync()
    windows = [a.elapsed_time(b) / steps for a, b in zip(events[::2], events[1::2])]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:  # the same loop
        for _ in range(steps):
            fn(x)
        sync()
    kernels = [e.time_range for e in prof.events() if e.device_type.name == "CUDA"]
    assert kernels, "the profiler recorded no GPU work"
    busy, reach = 0.0, float("-inf")  # the union of the kernels' intervals, in us
    for span in sorted(kernels, key=lambda span: span.start):
        busy += max(0.0, span.end - max(span.start, reach))
        reach = max(reach, span.end)
    step, busy = median(windows), busy / steps / 1e3
    return [step, busy, 100 * busy / step, "GPU" if busy >= 0.85 * step else "CPU"]


def table(rows, headers, floatfmt=".2f"):
    print(tabulate(rows, headers=headers, tablefmt="github", floatfmt=floatfmt))


def bars(title, names, parts, unit):
    """One horizontal bar per name, split into parts: {label: a value per name}."""
    fig, ax = plt.subplots(figsize=(7, 1 + 0.45 * len(names)))
    left = [0.0] * len(names)
    for label, values in parts.items():
        ax.barh(names, values, left=left, label=label)
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.set(title=title, xlabel=unit, xlim=(0, 1.4 * max(left)))  # room for the legend
    ax.legend(loc="lower right")
    plt.show()


# %%
# Cold, then warm, in one process
# -------------------------------
#
# The page enters ``fresh_cache()`` here and leaves it at the end, so the rest of the page
# works in one cache folder of its own that starts empty. The model is compiled twice: the
# first compilation finds the cache empty; then ``torch._dynamo.reset()`` throws away
# everything compiled in memory, and the second starts again from Dynamo but finds the
# AOTAutograd and FX graph entries that the first one wrote.
#
# ``torch._dynamo.utils.compile_times`` returns the seconds spent in each timed stage since
# the last reset. The stages nest: ``_compile.compile_inner`` is all of it,
# ``OutputGraph.call_user_compiler`` the backend call inside it, and ``compile_fx_inner``
# Inductor inside that. Subtracting each from the one around it gives Dynamo's share
# (tracing the bytecode, building the *guards* that decide when compiled code may be
# reused), AOTAutograd's (functionalization, decomposition into ATen operations) and
# Inductor's (lowering, fusion, code generation and kernel compilation). A tiny function
# is compiled first, to pay once for importing Inductor and starting its compile workers.

STAGES = "_compile.compile_inner", "OutputGraph.call_user_compiler", "compile_fx_inner"


@torch.no_grad()
def compile_and_call(fn):
    """Seconds per stage and for the whole first call (device work included); counters."""
    torch._dynamo.reset()
    counters.clear()
    start = time.perf_counter()
    fn(x)
    sync()
    seconds = time.perf_counter() - start
    timed = dict(zip(*torch._dynamo.utils.compile_times(repr="csv", aggregate=True)))
    total, backend, inductor = (float(timed.get(name, 0)) for name in STAGES)
    phases = [total - backend, backend - inductor, inductor, total, seconds]
    return phases, compile_stats()


with fresh_cache():
    compile_and_call(torch.compile(lambda t: torch.relu(t) + 1))
page_cache = contextlib.ExitStack()  # one empty cache folder for the rest of the page
page_cache.enter_context(fresh_cache())
cold, cold_stats = compile_and_call(torch.compile(model, fullgraph=True))
warm, warm_stats = compile_and_call(torch.compile(model, fullgraph=True))
assert_cold(cold_stats)
assert warm_stats["fx hits"] + warm_stats["aot hits"] > 0, warm_stats

stages = ["Dynamo", "AOTAutograd", "Inductor", "compilation, all", "first call"]
print(f"{device_name}, torch {torch.__version__}, first call of the whole model")
table([[n, c, w] for n, c, w in zip(stages, cold, warm)], ["", "cold (s)", "warm (s)"])
table([["cold", *cold_stats.values()], ["warm", *warm_stats.values()]], cold_stats)

# %%
# Read the two tables together. Warm, the cache answered the backend call, so the AOTAutograd
# and Inductor rows shrink to the time it takes to load an entry; Dynamo still traces the
# model, because the caches are keyed by the graph that Dynamo produces. The key also covers
# the input shapes and strides, the PyTorch and Triton versions, the Inductor configuration
# and, on a GPU, the device model: change any of them and the lookup misses. (When the
# AOTAutograd cache hits it loads the FX graph entry itself, so both counters may show hits.)
#
# Moving a cache to a fresh process
# ---------------------------------
#
# A new container or CI runner starts with an empty cache folder.
# ``torch.compiler.save_cache_artifacts()`` returns ``(bytes, info)`` with every cache entry
# this process created or read while compiling; ``torch.compiler.load_cache_artifacts(bytes)``,
# called before compiling, writes them into the cache folder of the process that calls it.
# The bytes help only a machine with the same PyTorch and Triton versions and, for a GPU,
# the same GPU model. (``TORCHINDUCTOR_CACHE_DIR`` on a persistent volume keeps the caches
# between runs without any code; the artifacts are the portable form of the same entries.)
#
# A small script builds the model from ``MODEL_CODE`` and times its first compiled call. It
# runs in three new processes, each with a new, empty cache folder: one compiles and saves
# the artifacts; two load them first, with Inductor's default compile workers and with
# ``TORCHINDUCTOR_COMPILE_THREADS=1`` (explained below the table).

SCRIPT = """
import json, sys, time
from torch._dynamo.utils import counters
mode, path, device, *sizes = sys.argv[1:]
width, heads, layers, batch, seq = map(int, sizes)
if mode == "load":
    torch.compiler.load_cache_artifacts(open(path, "rb").read())
model = torch.compile(make_model(width, heads, layers, device), fullgraph=True)
x = torch.randn(batch, seq, width, device=device)
start = time.perf_counter()
with torch.no_grad():
    model(x).sum().item()  # .item() waits for the device
seconds = time.perf_counter() - start
if mode == "save":
    open(path, "wb").write(torch.compiler.save_cache_artifacts()[0])
fx = [counters["inductor"][f"fxgraph_cache_{k}"] for k in ("hit", "miss")]
threads = torch._inductor.config.compile_threads
print("RESULT", json.dumps([threads, seconds, *fx, time.time()]))
"""
work_dir = Path(tempfile.mkdtemp(prefix="compile_time_"))
(work_dir / "first_call.py").write_text(MODEL_CODE + SCRIPT)


def fresh_process(label, mode, **more):
    tmp = tempfile.mkdtemp(dir=work_dir)  # a new, empty cache for Inductor and Triton
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tmp, TRITON_CACHE_DIR=tmp, **more)
    args = [mode, "artifacts.bin", device, WIDTH, HEADS, LAYERS, BATCH, SEQ]
    cmd = [sys.executable, "first_call.py", *map(str, args)]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=work_dir, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    whole, ended = time.perf_counter() - start, time.time()
    threads, seconds, hits, misses, last = json.loads(done.stdout.split("RESULT ")[-1])
    # "exit" runs from the script's last line to the end of its process
    return [label, threads, seconds, ended - last, whole, hits, misses]


runs = [fresh_process("compile, save", "save"), fresh_process("load", "load")]
runs.append(fresh_process("load, 1 thread", "load", TORCHINDUCTOR_COMPILE_THREADS="1"))
assert runs[0][-2] == 0 and runs[0][-1] > 0, runs[0]  # the first one compiled cold
assert all(run[-2] > 0 and run[-1] == 0 for run in runs[1:]), runs  # loaded: all hits
assert runs[2][1] == 1, runs[2]  # and the last one compiled in its own process
headers = ["fresh process", "compile threads", "first call (s)", "exit (s)"]
table(runs, headers + ["whole (s)", "fx hits", "fx misses"])
parts = {"first call": [run[2] for run in runs], "exit": [run[3] for run in runs]}
parts["the rest"] = [run[4] - run[2] - run[3] for run in runs]
bars(f"Fresh processes, {device_name}", [run[0] for run in runs], parts, "seconds")

# %%
# "whole" runs from starting Python to the end of the process ("the rest" in the chart:
# imports, building the model, saving or loading the artifacts). "exit" runs from the
# script's last line to the end: Python's shutdown, in which an ``atexit`` handler of
# Inductor shuts down its compile workers and waits for them. Where Triton is installed,
# the first compilation in a process starts those workers in the background, one per CPU
# core up to 32 ("compile threads"), whether or not it will give them work, so a process
# that is done early may wait at exit for workers still starting up.
#
# A process that only loads has little work for them. On a GPU, Inductor bundles the
# compiled Triton kernels into each FX graph entry
# (``torch._inductor.config.bundle_triton_into_fx_graph_cache``), so no kernel is compiled
# again; on a CPU an entry holds the generated C++ source, which is compiled once more.
# ``TORCHINDUCTOR_COMPILE_THREADS=1`` in a process's environment makes Inductor compile in
# the process itself and start no workers, so none are waited for at exit. PyTorch reads
# it when ``torch._inductor.config`` is first imported, in 2.9 as in later releases. The
# last two rows show what it changes on this machine. Keep the workers in a process that
# will compile something new (a new input shape, a changed model, anything the artifacts
# do not hold): they compile its kernels in parallel. In production, compile once on a
# build machine, save the artifacts next to the model's weights, and load them at start-up
# everywhere else.
#
# Regional compilation
# --------------------
#
# The caches make the *second* compilation cheap; the first gets cheaper when the compiler
# has less to do. Compiled as one graph, every copy of the block is traced by Dynamo,
# passed through AOTAutograd and lowered by Inductor. ``layer.compile()`` compiles each
# block in place instead. The blocks run the same Python code with parameters of the same
# shapes, which Dynamo passes to the graph as inputs, so the guards of the first block's
# compiled code hold for every other block: one graph, whatever the number of layers.
#
# Both variants are measured the same way: ``torch._dynamo.reset()``, an empty cache, and the
# assertion that something compiled. That assertion is not a formality. ``Module.compile()``
# on a module whose ``forward`` lives in ``torch.nn`` (``nn.TransformerEncoderLayer``, say)
# gives Dynamo no frame it may compile in PyTorch releases before 2.14 (`issue 150915
# <https://github.com/pytorch/pytorch/issues/150915>`__): without ``fullgraph=True`` the
# block then runs eagerly without a word, and its first call looks fast because nothing was
# compiled. A block class of your own, like ``Block`` here, always has a frame to compile.

regional = make_model(WIDTH, HEADS, LAYERS, device)
for layer in regional:
    layer.compile(fullgraph=True)
with fresh_cache():
    regional_cold, regional_stats = compile_and_call(regional)  # a new, empty cache
assert_cold(regional_stats)
assert regional_stats["graphs"] == 1, regional_stats  # one graph serves every block

rows = [["whole model", cold[3], cold[4], cold_stats["graphs"]]]
rows.append(["regional", regional_cold[3], regional_cold[4], regional_stats["graphs"]])
table(rows, [f"{LAYERS} blocks, cold", "compilation (s)", "first call (s)", "graphs"])

# %%
# Regional compilation gives up fusion *across* blocks, and the loop over the blocks runs as
# ordinary Python between the compiled graphs. The steady-state table shows what that costs
# on this machine, and checks each variant against a float64 copy of the model. (The whole
# model compiles again here, warm: the cell above reset Dynamo, and the page's cache
# folder holds its entries.) A row whose step came out longer than the row before it gets
# a line with the change in the GPU's busy and idle time per step (more busy time: slower
# kernels; more idle time: a slower CPU side, such as Python, guards and launches). On a
# CPU, a profile of three calls of both rows splits the change in self CPU time into the
# operators both ran (attention and matrix products, which compiled code too leaves to
# ATen) and the rest: eager's other operators against Inductor's generated code and its
# guards. If the profile shows no slowdown, the line says so: the difference was noise.

compiled = torch.compile(model, fullgraph=True)
variants = {"eager": model, "whole model": compiled, "regional": regional}
with torch.no_grad():  # a float64 copy of the model is the reference
    ref = make_model(WIDTH, HEADS, LAYERS, device).double()(x.double())
    errors = [float((f(x) - ref).norm() / ref.norm()) for f in variants.values()]
assert max(errors) <= 3 * errors[0] + 1e-6, errors  # compiled within 3x eager's error
rows = [[name, *step_and_busy(f, steps=10)] for name, f in variants.items()]
print(f"{device_name}, torch {torch.__version__}, input {BATCH} x {SEQ}, medians")
headers = ["steady state", "step (ms)", "GPU busy (ms)", "busy %", "bound"]
headers = headers[: len(rows[0])] + ["error vs float64"]
table([row + [error] for row, error in zip(rows, errors)], headers, ".3g")
for before, row in zip(rows, rows[1:]):  # each row slower than the one before it
    if row[1] <= before[1]:
        continue
    if device == "cuda":  # the change in GPU busy and idle time per step
        idle = row[1] - row[2] - (before[1] - before[2])
        deltas = {"GPU busy": row[2] - before[2], "GPU idle": idle}
    else:  # the change in self CPU time per call, from a profile of 3 calls of each
        ops = []  # self CPU microseconds by operator
        for name in (before[0], row[0]):
            with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(3):
                    variants[name](x)
            ops.append({e.key: e.self_cpu_time_total for e in prof.key_averages()})
        both = sum(ops[1][k] - ops[0][k] for k in ops[0].keys() & ops[1].keys()) / 3e3
        rest = (sum(ops[1].values()) - sum(ops[0].values())) / 3e3 - both
        deltas = {"CPU in operators both ran": both, "CPU in the rest": rest}
    changes = ", ".join(f"{k} {v:+.3f} ms" for k, v in deltas.items())
    noise = "" if sum(deltas.values()) > 0 else " (not in the profile: noise)"
    print(f"{row[0]}: {row[1] / before[1]:.2f}x {before[0]}'s step{noise}: {changes}")
parts = {"step": [row[1] for row in rows]}
if device == "cuda":
    parts = {"GPU busy": [row[2] for row in rows]}
    parts["GPU idle"] = [max(0, row[1] - row[2]) for row in rows]
bars(f"Steady state, {device_name}", [row[0] for row in rows], parts, "ms per step")
page_cache.close()  # back to the usual cache folder
shutil.rmtree(work_dir, ignore_errors=True)  # the script, the artifacts, the caches

# %%
# Conclusion
# ----------
#
# A cold compilation passes through Dynamo, AOTAutograd and Inductor, and PyTorch's own
# timers show how long each took. Inductor's on-disk caches skip everything after Dynamo
# when the same graph comes back, and ``save_cache_artifacts`` / ``load_cache_artifacts``
# carry them to a process that starts empty, which needs no compile workers if it only
# loads. Regional compilation compiles a repeated block once, at the price of fusion across
# blocks; assert that a cold measurement compiled something, or a block that silently runs
# eagerly will look like a fast compiler.
#
# Further reading
# ---------------
#
# * `Compile time caching in torch.compile
#   <https://docs.pytorch.org/tutorials/recipes/torch_compile_caching_tutorial.html>`__
# * `torch.compiler.save_cache_artifacts
#   <https://docs.pytorch.org/docs/stable/generated/torch.compiler.save_cache_artifacts.html>`__
# * `Reducing torch.compile cold start compilation time with regional compilation
#   <https://docs.pytorch.org/tutorials/recipes/regional_compilation.html>`__
# * `Dynamic shapes <https://docs.pytorch.org/docs/stable/torch.compiler_dynamic_shapes.html>`__

# sphinx_gallery_thumbnail_number = 1
