"""
.. _compile_time:

Cutting compile time: caches, portable cache artifacts, regional compilation
============================================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * Where a fresh process spends its time, from importing torch to its exit, part by
         part: timestamps in the process, PyTorch's own compile timers, the C++ compiler's
         runs, and a timer on each handler that runs at exit
       * What Inductor's on-disk caches save in a new process, proved with their hit and
         miss counters
       * How to carry a compile cache to a fresh process with
         ``torch.compiler.save_cache_artifacts`` and ``load_cache_artifacts``, and what
         Inductor's compile workers cost such a process at its exit
       * How compiling the repeated block instead of the whole model (regional compilation)
         changes the cold compile time and the time per call

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later, with tabulate and matplotlib
       * A CUDA GPU of compute capability 7.5 or newer for the timings (current CUDA wheels
         need it); runs on CPU with smaller sizes
       * On CPU, Inductor needs a C++ compiler and the Python headers (the page stops at
         its first cell without one); on Linux the page times the compiler apart from the
         rest of Inductor. A 2-core CPU runs it in 2.5-5 minutes (the longer on a busy
         machine), with about 1 GB of memory
"""

# %%
# Overview
# --------
#
# The first call of a ``torch.compile``-d model traces the Python code, transforms the graph,
# generates kernels and compiles them; later calls reuse that work. This recipe takes a
# fresh process's start apart, from launching Python to its exit, then shows two ways to
# spend less of it: cache artifacts that carry the compiler's caches to a new process, and
# compiling only the block that the model repeats. A figure called *cold* comes from an
# empty cache that the page makes, and the page asserts that it missed the cache and
# compiled at least one graph (the site's build keeps a warm cache on purpose).
#
# Setup
# -----
#
# The model is a stack of identical pre-norm transformer blocks. ``Block`` is defined here
# rather than taken from ``torch.nn``, as a real model's blocks are (the regional section
# says why that matters), and kept in a string, so that the fresh Python processes started
# later build exactly the same model.

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

# torch.profiler's tracing library (Kineto) prints notes on each start and stop, and on a
# machine without a GPU an error line about it; level 6 keeps its own log quiet.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
import matplotlib.pyplot as plt
import torch
from tabulate import tabulate

import measure

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
measure.require(cxx=device == "cpu")  # Inductor compiles C++ for a CPU: else one line
watch = measure.watch_cxx() if device == "cpu" else None  # logs C++ runs (Linux)
# The page keeps PyTorch's default float32 matmul precision; Inductor's hint to turn on
# TF32 is about speed, not about compile time.
warnings.filterwarnings("ignore", message=".*TensorFloat32")
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    WIDTH, HEADS, LAYERS, BATCH, SEQ = 1024, 16, 8, 8, 512
else:
    device_name = f"CPU, threads: {torch.get_num_threads()}"
    WIDTH, HEADS, LAYERS, BATCH, SEQ = 32, 4, 2, 4, 32  # no CUDA GPU: a smaller model
# On a CPU, the fresh processes below skip Inductor's tests of the vector instructions
SKIP = {"TORCHINDUCTOR_VEC_ISA_OK": "1"} if device == "cpu" else {}  # (see there)
print(f"torch {torch.__version__} on {device_name}; {LAYERS} blocks, width {WIDTH}")
model = make_model(WIDTH, HEADS, LAYERS, device)
x = torch.randn(BATCH, SEQ, WIDTH, device=device)

# %%
# A fresh process, taken apart
# ----------------------------
#
# A small script builds the model from ``MODEL_CODE``, compiles it and calls it once, in
# a new process with a new, empty cache folder. Three columns run it three ways:
# ``compile, save`` compiles and saves cache artifacts (below); ``load`` loads them
# first; ``regional`` compiles each block on its own (regional compilation, further
# down). A machine's speed drifts while a page runs (other work on
# the host, clock and cache states), so one process per column would compare moments as
# much as columns. The page runs every column once in each of three rounds, in an order
# that turns by one column a round (the first round starts with the save whose artifacts
# the loads read), and compares two columns round by round, as :ref:`measuring_recipe`
# pairs the timing windows of two steps. The script takes a timestamp after each part of
# its life.
# It imports Dynamo and Inductor explicitly, each after a stamp of its own, so that
# neither one-time import is counted as ``import torch`` or as compiling (importing
# ``torch._dynamo`` also imports SymPy and, where it is installed, Triton).
# ``torch._dynamo.utils.compile_times`` splits the first call into nested
# stages: ``_compile.compile_inner`` is all of the compilation,
# ``OutputGraph.call_user_compiler`` the backend call inside it, and ``compile_fx_inner``
# Inductor inside that. Subtracting each from the one around it gives Dynamo's share
# (tracing the bytecode, building the *guards* that decide when compiled code may be
# reused), AOTAutograd's (functionalization, decomposition into ATen operations) and
# Inductor's (lowering, fusion, code generation and kernel compilation). When
# AOTAutograd's cache hits, it loads Inductor's compiled graph itself, outside
# ``compile_fx_inner``; its timer ``AOTAutogradCache.inductor_load`` is counted as
# Inductor's too.
#
# The C++ compiler is Inductor's own part on a CPU: Inductor writes each kernel as C++
# and builds it into a library. On a CPU, ``measure.watch_cxx()`` (first cell) makes
# Inductor call the compiler through a small wrapper that logs the start and end of each
# run, and names the wrapper in ``CXX``, which the new processes inherit, with their
# compile workers. The seconds in which at least one compiler ran during the first call
# are the row "Inductor: C++ compiler"; "Inductor: the rest" is lowering, fusion, code
# generation and loading. On a GPU, where Inductor writes Triton kernels, and off Linux,
# the page does not time the compiler: the row is left out and the rest includes it.
#
# The script also times every handler that Python runs at exit: before importing torch
# it wraps ``atexit.register`` and ``threading._register_atexit`` (where
# ``concurrent.futures`` registers its own), so each handler registered later reports its
# name and duration.
#
# ``torch.compiler.save_cache_artifacts()`` returns ``(bytes, info)`` with every cache
# entry this process created or read while compiling;
# ``torch.compiler.load_cache_artifacts(bytes)``, called before compiling, writes them into
# the cache folder of the process that calls it. They help only a machine with the same
# PyTorch and Triton versions and, for a GPU, the same GPU model.
# (``TORCHINDUCTOR_CACHE_DIR`` on a persistent volume keeps the same entries between runs
# without any code.)

STAGES = "_compile.compile_inner", "OutputGraph.call_user_compiler", "compile_fx_inner"
STAGES += ("AOTAutogradCache.inductor_load",)  # Inductor's part of a cache hit
PRELUDE = """
import atexit, json, sys, threading, time
T, EXIT = [("start", time.time())], []
atexit.register(lambda: print("EXIT", json.dumps([T, EXIT])))  # runs last
def timed(register):  # wraps each exit handler registered from now on
    def wrap(fn, *args, **kwargs):
        def run():
            start = time.time()
            fn(*args, **kwargs)
            EXIT.append([getattr(fn, "__qualname__", repr(fn)), time.time() - start])
        register(run)
        return fn
    return wrap
atexit.register, threading._register_atexit = timed(atexit.register), timed(threading._register_atexit)
"""
SCRIPT = """
mode, path, device = sys.argv[1:]  # mode: compile (and save), load or regional
width, heads, layers, batch, seq = SIZES
T.append(("import torch", time.time()))  # MODEL_CODE imported it
from torch._dynamo.utils import counters, compile_times
T.append(("import Dynamo", time.time()))
model = make_model(width, heads, layers, device)  # on a GPU, creates the CUDA context
if mode == "regional":  # compile each block in place
    for block in model: block.compile(fullgraph=True)
else:
    model = torch.compile(model, fullgraph=True)
x = torch.randn(batch, seq, width, device=device)
T.append(("CUDA init, build the model", time.time()))
if mode == "load": torch.compiler.load_cache_artifacts(open(path, "rb").read())
T.append(("load artifacts", time.time()))
import torch._inductor.compile_fx  # Inductor's one-time import
T.append(("import Inductor", time.time()))
with torch.no_grad():
    model(x).sum().item()  # .item() waits for the device
T.append(("first call", time.time()))
if mode == "compile": open(path, "wb").write(torch.compiler.save_cache_artifacts()[0])
c, stages = counters, dict(zip(*compile_times(repr="csv", aggregate=True)))
info = [torch._inductor.config.compile_threads, c["inductor"]["fxgraph_cache_hit"]]
info += [c["inductor"]["fxgraph_cache_miss"], c["aot_autograd"]["autograd_cache_hit"]]
print("RESULT", json.dumps([*info, c["stats"]["unique_graphs"], [float(stages.get(k, 0)) for k in STAGES]]))
T.append(("save artifacts, read the counters", time.time()))
"""
work_dir = tempfile.mkdtemp(prefix="compile_time_")
with open(os.path.join(work_dir, "first_call.py"), "w") as script:
    sizes = [WIDTH, HEADS, LAYERS, BATCH, SEQ]
    script.write(PRELUDE + MODEL_CODE + f"STAGES, SIZES = {STAGES!r}, {sizes}" + SCRIPT)


def fresh_process(label):
    """A column's process: seconds in each part of its life, in order; its counters
    (info: compile threads, fx hits, fx misses, aot hits, graphs) and whole seconds."""
    mode, tmp = label.split(",")[0], tempfile.mkdtemp(dir=work_dir)  # an empty cache
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tmp, TRITON_CACHE_DIR=tmp, **SKIP)
    cmd = [sys.executable, "first_call.py", mode, "artifacts.bin", device]
    launched = time.time()
    done = subprocess.run(cmd, cwd=work_dir, env=env, capture_output=True, text=True)
    ended = time.time()
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {line.split(" ")[0]: line for line in done.stdout.splitlines()}
    *info, (total, call, ind, hit) = json.loads(lines["RESULT"][7:])
    _, h, m, a, g = info  # cold: misses only, something compiled; a load: hits only
    assert h > 0 == m if mode == "load" else h == a == 0 < m and g > 0, (mode, info)
    assert g == 1 or mode != "regional", info  # regional: one graph for every block
    stamps, handlers = json.loads(lines["EXIT"][5:])
    parts = {"Python start-up": stamps[0][1] - launched}
    for (_, before), (name, now) in zip(stamps, stamps[1:]):
        if name == "first call":  # split by PyTorch's compile timers and the C++ log
            cxx = watch.seconds(before, now) if watch else 0.0  # else: in the rest
            assert cxx <= ind + hit + 0.1, (cxx, ind, hit)  # it runs inside Inductor
            parts["Dynamo"], parts["AOTAutograd"] = total - call, call - ind - hit
            parts["Inductor: the rest"] = ind + hit - cxx
            parts.update({"Inductor: C++ compiler": cxx} if watch else {})
            now, name = now - total, "first run (rest of the call)"
        parts[name] = now - before
    for name, seconds in handlers:  # Python's exit, handler by handler
        key = f"exit: {name}" if seconds >= 0.05 else "exit: other handlers"
        parts[key] = parts.get(key, 0.0) + seconds
    rest = ended - stamps[-1][1] - sum(s for _, s in handlers)
    parts["exit: joining threads, interpreter teardown"] = rest
    return parts, [*info, ended - launched]


ROUNDS, labels = 3, ["compile, save", "load", "regional"]
runs = {label: [] for label in labels}
for r in range(ROUNDS):  # the order turns by one column a round; the first is a save
    for label in labels[r:] + labels[:r]:
        runs[label].append(fresh_process(label))
names = list(dict.fromkeys(k for v in runs.values() for parts, _ in v for k in parts))
# A Row per column, in seconds: the whole process by round (the windows that the core's
# ratio pairs), the parts' medians (what its moved compares); spread, profiled: unused
R = measure.Results()
for label, v in runs.items():
    whole, parts = [info[-1] for _, info in v], [p for p, _ in v]
    mid = {k: statistics.median(p.get(k, 0.0) for p in parts) for k in names}
    R[label] = measure.Row(label, statistics.median(whole), 0, whole, 0, parts=mid)


def cell(values):  # the median over the rounds and, in brackets, highest - lowest
    return f"{statistics.median(values):.2f} ({max(values) - min(values):.2f})"


rows = [[k, *(cell([p.get(k, 0) for p, _ in runs[c]]) for c in labels)] for k in names]
more = ["compile threads", "fx hits", "fx misses", "aot hits", "graphs"]
rows += [[k, *(str(runs[c][0][1][n]) for c in labels)] for n, k in enumerate(more)]
rows.append(["whole process", *(cell(R[c].windows) for c in labels)])
print(f"{device_name}, torch {torch.__version__}: seconds, median of {ROUNDS} rounds")
print(tabulate(rows, ["part", *labels], "github", disable_numparse=True))
for c, p in ((c, R[c].parts) for c in labels):
    top = ", ".join(f"{k} {p[k]:.2f} s" for k in sorted(p, key=p.get)[:-4:-1])
    print(f"{c}, largest parts: {top}")
    measure.headline(f"fresh process, {c}", R[c].ms, "s")
KIND = "", ("Dynamo", "AOTAutograd", "Inductor"), "exit", "exit: shutdown"


def versus(a, b):
    """Column a against column b: the whole process, paired by round (the core's ratio),
    then the changes of the parts' medians: compiling, the exit, the rest."""
    mid, lo, hi, _ = R.ratio(a, b)
    won = sum(x < y for x, y in zip(R[a].windows, R[b].windows))
    d = [sum(v for k, v in R.moved(a, b).items() if k.startswith(w)) for w in KIND]
    head = f"{a} against {b}: {R[b].ms:.2f} -> {R[a].ms:.2f} s, {mid:.2f}x"
    print(f"{head} (paired by round {lo:.2f}-{hi:.2f}x, shorter in {won} of {ROUNDS})")
    ex = f"exit {d[2]:+.2f} s, of which the compile workers' shutdown {d[3]:+.2f} s"
    print(f"  compiling {d[1]:+.2f} s; {ex}; the rest {d[0] - d[1] - d[2]:+.2f} s")


versus("load", "compile, save")  # what the artifacts save
versus("regional", "compile, save")  # both from an empty cache
fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
big = [k for k in names if max(R[c].parts[k] for c in labels) >= 0.2]
for n, k in enumerate(big):  # the parts' medians, those of 0.2 s or more, end to end
    left = [sum(R[c].parts[j] for j in big[:n]) for c in labels]
    values = [R[c].parts[k] for c in labels]
    ax.barh(labels, values, left=left, label=k, color=plt.cm.tab20(n % 20))
ax.set(title=f"Fresh processes, {device_name}", xlabel="seconds, medians")
ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize="small")
plt.show()

# %%
# Each cell is a part's median over the rounds and, in brackets, its spread (the highest
# less the lowest). The parts follow each other, so together they are the whole process;
# a column's medians, each taken on its own, add up to about its median whole. "Python
# start-up" runs from launching the process to the script's first line, "exit" from its
# last line to the end of the process. At exit, Python runs the handlers registered with
# ``threading._register_atexit``, joins the threads still running, runs the ``atexit``
# handlers (last registered first) and tears the interpreter down (clears every module
# and frees, with the garbage collector, the objects they held); the page times each
# handler, and the last row of the exit is the rest of it. Inductor's handler,
# ``shutdown_compile_workers``, shuts down each compile-worker pool and waits for it. On a
# GPU, ``compile_fx`` wakes that pool (one worker per CPU core, up to 32) as soon as an
# input is on the GPU, before AOTAutograd looks up its cache, so a process that only loads
# starts the workers too.
#
# Under the table, a line per column names its largest parts. Each comparison after it
# reads one column against another: the median of the rounds' ratios of their whole
# processes, the range of those ratios and in how many rounds the first column was
# shorter; then the change in the parts' medians, in three groups: compiling (Dynamo,
# AOTAutograd and Inductor), the exit (the parts named "exit: ...", with
# ``shutdown_compile_workers`` named apart) and the rest, work that every column does
# alike but for loading or saving the artifacts (imports, building the model, the first
# run). The comparisons show what the artifacts save (the process that loaded them
# against the one that compiled and saved them) and regional against whole-model
# compilation, both from an empty cache. The exit's group says whether seconds saved in
# compiling came back at exit: ``shutdown_compile_workers`` waits for the pool that
# Dynamo's ``inductor`` backend starts on its first call wherever Triton is installed (a
# process that only loads calls it too).
#
# The ``load`` column found every entry in the artifacts (fx misses: 0), so Inductor
# skips lowering and code generation; Dynamo still traces the model in each new process,
# because the caches are keyed by the graph that Dynamo produces. The key also covers the
# input shapes and strides, the PyTorch and Triton versions, the Inductor configuration
# and, on a GPU, the device model: change any of them and the lookup misses. What a
# loading process still compiles depends on the device. On a GPU, Inductor bundles the
# compiled Triton kernels into each FX graph entry
# (``torch._inductor.config.bundle_triton_into_fx_graph_cache``). On a CPU, an entry
# holds the generated C++ source, and the libraries built from it stay in the cache folder
# that built them, so a process with a new folder runs the C++ compiler again, artifacts
# or not (a cache folder kept between runs keeps the libraries). Before its first kernel
# in a new folder, Inductor on a CPU also tests which vector instructions the compiler
# can build and the machine can run, by compiling and loading a small program for each
# instruction set that the CPU lists. ``TORCHINDUCTOR_VEC_ISA_OK=1`` skips those tests
# and trusts the CPU's list (a few smaller checks still run); the page sets it in its
# fresh CPU processes (``SKIP``, first cell) to keep its run short, so their C++ compiler
# row is mostly the model's own kernels. Leave it unset where the compiler may be older
# than the CPU: an instruction set it cannot build then fails the compile. The
# precompiled header that every kernel includes is built once per machine, in Inductor's
# default folder (``torchinductor_<user>`` in the temporary directory), which
# ``TORCHINDUCTOR_CACHE_DIR`` does not move. Compile workers build kernels in parallel,
# and a pool costs its start and its shutdown; ``TORCHINDUCTOR_COMPILE_THREADS=1``, read
# when ``torch._inductor.config`` is first imported, compiles in the process itself.
# To ship compiled code that needs no tracing at all in the serving process, export the
# model and compile it ahead of time into a package (:ref:`export_aoti_tutorial`).
#
# Regional compilation
# --------------------
#
# The caches make the *second* compilation cheaper; the first gets cheaper when the compiler
# has less to do. Compiled as one graph, every copy of the block is traced by Dynamo,
# passed through AOTAutograd and lowered by Inductor. ``block.compile()`` compiles each
# block in place instead (the ``regional`` column). The blocks run the same Python code
# with parameters of the same shapes, which Dynamo passes to the graph as inputs, so the
# guards of the first block's compiled code hold for every other block: one graph (the
# ``graphs`` row), whatever the number of layers.
#
# Both columns start from an empty cache and assert that something compiled. That
# assertion is not a formality. ``Module.compile()`` on a module whose ``forward`` lives in
# ``torch.nn`` (``nn.TransformerEncoderLayer``, say) gives Dynamo no frame it may compile in
# PyTorch releases before 2.14 (`issue 150915
# <https://github.com/pytorch/pytorch/issues/150915>`__): without ``fullgraph=True`` the
# block then runs eagerly without a word, and its first call looks fast because nothing was
# compiled. A block class of your own, like ``Block`` here, always has a frame to compile.

# %%
# Regional compilation gives up fusion *across* blocks, and the loop over the blocks runs
# as ordinary Python between the compiled graphs. The steady-state table times the three
# variants in this process, interleaved, after checking each against a float64 copy of
# the model; the compiled variants compile before the timing starts, and the timing
# asserts that nothing compiles while it runs. Timings come from the site's measurement core
# (:ref:`measuring_recipe` explains it). Each line under the table compares a row with the
# row above it: a tie when the interval of the paired ratio holds 1.00x, otherwise the
# parts of the step that moved most (on a GPU, kernel time by family and the time the GPU
# waited; on a CPU, the main thread's time by family, in which ``compiled code`` is the
# compiled graphs' own kernels).

variants = {"eager": model, "whole model": torch.compile(model, fullgraph=True)}
variants["regional"] = make_model(WIDTH, HEADS, LAYERS, device)
for block in variants["regional"]:
    block.compile(fullgraph=True)
with torch.no_grad():  # a float64 copy of the model is the reference
    exact = make_model(WIDTH, HEADS, LAYERS, device).double()(x.double())
    errors = [float((f(x) - exact).norm() / exact.norm()) for f in variants.values()]
    assert max(errors) <= 3 * errors[0] + 1e-6, errors  # within 3x eager's error
    res = measure.compare({k: lambda f=f: f(x) for k, f in variants.items()}, device)
rows = [[name, *res.cells(name), error] for name, error in zip(res, errors)]
print(f"{device_name}, torch {torch.__version__}, input {BATCH} x {SEQ}")
headers = ["steady state", *res.headers(), "error vs float64"]
print(tabulate(rows, headers, "github", ["", *res.formats(), ".2e"]))
print(res.versus("whole model", "eager"))
print(res.versus("regional", "whole model"))
shutil.rmtree(work_dir, ignore_errors=True)  # the script, the artifacts, the caches

# %%
# Conclusion
# ----------
#
# A fresh process spends its start in parts that can be measured one by one: importing
# torch, building the model, Dynamo, AOTAutograd, Inductor, the first run and the exit;
# PyTorch's own timers split the compilation. Cache artifacts carry Inductor's and
# AOTAutograd's entries to a process that starts empty: it skips lowering and code
# generation, but on a CPU it still runs the C++ compiler, since the compiled libraries
# stay in the folder that built them, and it pays for the compile workers' pool at its
# exit. Regional compilation compiles a repeated block once,
# at the price of fusion across blocks; assert that a cold measurement compiled
# something, or a block that silently runs eagerly will look like a fast compiler.
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
# * :ref:`export_aoti_tutorial`: compiling a model ahead of time into a package.

# sphinx_gallery_thumbnail_number = 1
