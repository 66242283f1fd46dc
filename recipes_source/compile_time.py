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
         ``torch.compiler.save_cache_artifacts`` and ``load_cache_artifacts``, and when that
         process can do without Inductor's compile workers
       * How compiling the repeated block instead of the whole model (regional compilation)
         changes the cold compile time and the time per call

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later, with tabulate and matplotlib
       * A CUDA GPU of compute capability 7.5 or newer for the timings (current CUDA wheels
         need it); runs on CPU with smaller sizes
       * On CPU, Inductor needs a C++ compiler and the Python headers (the page stops at
         its first cell without one); on Linux the page times the compiler apart from the
         rest of Inductor. A 2-core CPU runs it in about 2 minutes with about 1 GB of memory
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
    WIDTH, HEADS, LAYERS, BATCH, SEQ = 32, 4, 3, 4, 32  # no CUDA GPU: a smaller model
print(f"torch {torch.__version__} on {device_name}; {LAYERS} blocks, width {WIDTH}")
model = make_model(WIDTH, HEADS, LAYERS, device)
x = torch.randn(BATCH, SEQ, WIDTH, device=device)

# %%
# A fresh process, taken apart
# ----------------------------
#
# A small script builds the model from ``MODEL_CODE``, compiles it and calls it once. It
# runs in four new processes, each with a new, empty cache folder: one compiles and saves
# cache artifacts (below); two load them first, with Inductor's default compile workers
# and with ``TORCHINDUCTOR_COMPILE_THREADS=1``, which makes Inductor compile in the process
# itself and start no workers; the last compiles each block on its own (regional
# compilation, further down). The script takes a timestamp after each part of its life.
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
atexit.register(lambda: print("EXIT", json.dumps([T, EXIT, time.time()])))  # runs last
def timed(register):  # wraps each exit handler registered from now on
    def wrap(fn, *args, **kwargs):
        def run():
            start = time.time()
            fn(*args, **kwargs)
            EXIT.append([getattr(fn, "__qualname__", repr(fn)), time.time() - start])
        register(run)
        return fn
    return wrap
atexit.register = timed(atexit.register)
threading._register_atexit = timed(threading._register_atexit)
"""
SCRIPT = """
mode, path, device = sys.argv[1:]
width, heads, layers, batch, seq = SIZES
T.append(("import torch", time.time()))  # MODEL_CODE imported it
from torch._dynamo.utils import counters, compile_times
T.append(("import Dynamo", time.time()))
torch.ones(1, device=device).sum().item()  # on a GPU, creates the CUDA context
T.append(("CUDA init", time.time()))
model = make_model(width, heads, layers, device)
if mode == "regional":  # compile each block in place
    for block in model: block.compile(fullgraph=True)
else:
    model = torch.compile(model, fullgraph=True)
x = torch.randn(batch, seq, width, device=device)
T.append(("build the model", time.time()))
if mode == "load": torch.compiler.load_cache_artifacts(open(path, "rb").read())
T.append(("load artifacts", time.time()))
import torch._inductor.compile_fx  # Inductor's one-time import
T.append(("import Inductor", time.time()))
with torch.no_grad():
    model(x).sum().item()  # .item() waits for the device
T.append(("first call", time.time()))
if mode == "save": open(path, "wb").write(torch.compiler.save_cache_artifacts()[0])
T.append(("save artifacts", time.time()))
fx = [counters["inductor"][f"fxgraph_cache_{k}"] for k in ("hit", "miss")]
info = [*fx, counters["aot_autograd"]["autograd_cache_hit"], counters["stats"]["unique_graphs"]]
stages = dict(zip(*compile_times(repr="csv", aggregate=True)))
threads = torch._inductor.config.compile_threads
print("RESULT", json.dumps([threads, *info, [float(stages.get(k, 0)) for k in STAGES]]))
T.append(("read the counters", time.time()))
"""
work_dir = tempfile.mkdtemp(prefix="compile_time_")
with open(os.path.join(work_dir, "first_call.py"), "w") as script:
    sizes = [WIDTH, HEADS, LAYERS, BATCH, SEQ]
    script.write(PRELUDE + MODEL_CODE + f"STAGES, SIZES = {STAGES!r}, {sizes}" + SCRIPT)


def fresh_process(mode, **more):
    """Seconds in each part of a fresh process's life, in order; counters; whole seconds."""
    tmp = tempfile.mkdtemp(dir=work_dir)  # a new, empty cache for Inductor and Triton
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tmp, TRITON_CACHE_DIR=tmp, **more)
    cmd = [sys.executable, "first_call.py", mode, "artifacts.bin", device]
    launched = time.time()
    done = subprocess.run(cmd, cwd=work_dir, env=env, capture_output=True, text=True)
    ended = time.time()
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {line.split(" ")[0]: line for line in done.stdout.splitlines()}
    *info, (total, call, ind, hit) = json.loads(lines["RESULT"][7:])
    stamps, handlers, handlers_done = json.loads(lines["EXIT"][5:])
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
    untimed = handlers_done - stamps[-1][1] - sum(s for _, s in handlers)
    parts["exit: joining threads, untimed"] = untimed
    parts["exit: interpreter teardown"] = ended - handlers_done
    return parts, [*info, ended - launched]


labels = ["compile, save", "load", "load, 1 thread", "regional"]
procs = [fresh_process("save"), fresh_process("load")]
procs.append(fresh_process("load", TORCHINDUCTOR_COMPILE_THREADS="1"))
procs.append(fresh_process("regional"))
(_, save), (_, load), (_, one), (_, regional) = procs
# info: compile threads, fx hits, fx misses, aot hits, graphs, seconds; cold: misses only
assert all(c[1] == c[3] == 0 < c[2] and c[4] > 0 for c in (save, regional)), procs
assert load[1] > 0 == load[2] and one[1] > 0 == one[2], procs  # loaded: all hits
assert one[0] == 1 and regional[4] == 1, procs  # one thread; one graph for all blocks
names = list(dict.fromkeys(k for parts, _ in procs for k in parts))  # in order
rows = [[k, *(parts.get(k, 0.0) for parts, _ in procs)] for k in names]
more = ["compile threads", "fx hits", "fx misses", "aot hits", "graphs", "whole (s)"]
rows += [[k, *column] for k, column in zip(more, zip(*(info for _, info in procs)))]
print(f"{device_name}, torch {torch.__version__}, fresh processes, seconds")
print(tabulate(rows, ["part", *labels], "github", ".2f"))
for label, (p, info) in zip(labels, procs):  # p: the column's parts
    top = ", ".join(f"{k} {p[k]:.2f} s" for k in sorted(p, key=p.get)[:-4:-1])
    print(f"{label}: {info[-1]:.2f} s in all; largest parts: {top}")
    measure.headline(f"fresh process, {label}", info[-1], "s")
COMPILING = ["Dynamo", "AOTAutograd", "Inductor: the rest", "Inductor: C++ compiler"]
kind = "", tuple(COMPILING), "exit: ", "import"  # in all, compiling, exit, imports
G = [[sum(v for k, v in p.items() if k.startswith(w)) for w in kind] for p, _ in procs]
i, s = sorted(g[3] for g in G), sorted(100 * g[3] / g[0] for g in G)
print(f"imports: {i[0]:.1f}-{i[-1]:.1f} s, {s[0]:.0f}-{s[-1]:.0f} % of each process")


def versus(a, b):
    """Column a read against column b: the compile's parts, then the two others that
    moved most from the first call on (the parts before it do the same work in each)."""
    (pa, ia), (pb, ib) = procs[labels.index(a)], procs[labels.index(b)]
    later = [k for k in names[names.index("Dynamo") :] if k not in COMPILING]
    change = {k: abs(pa.get(k, 0) - pb.get(k, 0)) for k in later}
    keys = [k for k in COMPILING if k in names] + sorted(change, key=change.get)[:-3:-1]
    moved = ", ".join(f"{k} {pb.get(k, 0):.2f} -> {pa.get(k, 0):.2f}" for k in keys)
    return f"{a} against {b}: {ib[-1]:.2f} -> {ia[-1]:.2f} s in all; {moved} s"


print(versus("load", "compile, save"))  # what the artifacts save, part by part
print(versus("load, 1 thread", "load"))  # compile workers in a process that loads
print(versus("regional", "compile, save"))  # both from an empty cache
d = {labels[c]: [f"{a - b:+.2f} s" for a, b in zip(G[c], G[0])] for c in (1, 3)}
said = [f"{c} {v[0]} in all, compiling {v[1]}, exit {v[2]}" for c, v in d.items()]
print("against compile, save:", "; ".join(said))  # where each saving went
fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
left = [0.0] * len(procs)
for k, (name, *values) in enumerate(rows[: len(names)]):  # parts of 0.2 s or more
    if max(values) >= 0.2:
        ax.barh(labels, values, left=left, label=name, color=plt.cm.tab20(k % 20))
        left = [a + b for a, b in zip(left, values)]
ax.set(title=f"Fresh processes, {device_name}", xlabel="seconds, parts >= 0.2 s")
ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize="small")
plt.show()

# %%
# The parts follow each other, so together they are the whole process. "Python start-up"
# runs from launching the process to the script's first line, "exit" from its last line
# to the end of the process. At exit, Python runs the handlers registered with
# ``threading._register_atexit``, joins the threads still running, runs the ``atexit``
# handlers (last registered first) and tears the interpreter down (clears every module
# and frees, with the garbage collector, the objects they held). Inductor's handler,
# ``shutdown_compile_workers``, shuts down each compile-worker pool and waits for it. On a
# GPU, ``compile_fx`` wakes that pool (one worker per CPU core, up to 32) as soon as an
# input is on the GPU, before AOTAutograd looks up its cache, so a process that only loads
# starts the workers too.
#
# Under the table, a line per column names its largest parts, and one line gives the
# imports' share of each process (the rows that start with "import"): work that every
# fresh process repeats before it compiles anything, cached or not. The three lines after
# it read one column against another: the compile's parts, then the two parts from the
# first call on that moved most (before it, every column does the same work but for
# loading the artifacts).
# They show what the artifacts save (the process that loaded them against the one that
# compiled and saved them), what compile workers cost or bring to a process that loads
# (one thread against the default), and regional against whole-model compilation, both
# from an empty cache. The last line sums where each change against ``compile, save``
# went: the whole process, its compiling (Dynamo, AOTAutograd and Inductor) and its exit
# (the parts named "exit: ..."). Seconds saved in compiling can come back at exit; the
# likely link is the compile-worker pool, which Inductor starts at the first compile and
# ``shutdown_compile_workers`` stops at exit, however little the process compiled.
#
# The two ``load`` columns found every entry in the artifacts (fx misses: 0), so Inductor
# skips lowering and code generation; Dynamo still traces the model in each new process,
# because the caches are keyed by the graph that Dynamo produces. The key also covers the
# input shapes and strides, the PyTorch and Triton versions, the Inductor configuration
# and, on a GPU, the device model: change any of them and the lookup misses. What a
# loading process still compiles depends on the device. On a GPU, Inductor bundles the
# compiled Triton kernels into each FX graph entry
# (``torch._inductor.config.bundle_triton_into_fx_graph_cache``). On a CPU, an entry
# holds the generated C++ source, and the libraries built from it stay in the cache folder
# that built them, so a process with a new folder runs the C++ compiler again, artifacts
# or not (a cache folder kept between runs keeps the libraries). On a CPU, each new
# folder also builds small test programs for the CPU's vector instructions, while the
# precompiled header that every kernel includes is built once per machine, in Inductor's
# default folder (``torchinductor_<user>`` in the temporary directory), which
# ``TORCHINDUCTOR_CACHE_DIR`` does not move. Compile workers build kernels in parallel,
# and a pool costs its start and its shutdown; PyTorch reads
# ``TORCHINDUCTOR_COMPILE_THREADS`` when ``torch._inductor.config`` is first imported.
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
# stay in the folder that built them; whether compile workers pay for themselves in such
# a process is measured, not assumed. Regional compilation compiles a repeated block once,
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
