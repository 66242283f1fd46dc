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
         ``torch.compiler.save_cache_artifacts`` and ``load_cache_artifacts``
       * How compiling the repeated block instead of the whole model (regional compilation)
         changes the cold compile time and the time per call

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
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
# that a second compilation reads, cache artifacts that carry those caches to a fresh
# process, and compiling only the block that the model repeats.
#
# A figure called *cold* is measured from an empty cache that the page makes itself, and the
# page asserts that the compilation missed the cache and compiled at least one graph. The
# site that built this page keeps a warm cache on purpose, so nothing else would be cold.
#
# Setup
# -----
#
# The model is a stack of identical pre-norm transformer blocks. ``Block`` is defined here
# rather than taken from ``torch.nn``, as a real model's blocks are; the regional section
# explains why that matters. The code is kept in a string because a fresh Python process,
# started later, must build exactly the same model.

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

import torch
import torch.utils.benchmark as benchmark
from tabulate import tabulate
from torch._dynamo.utils import counters

MODEL_CODE = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def make_model(width, heads, layers, device):
    torch.manual_seed(0)
    return nn.Sequential(*[Block(width, heads) for _ in range(layers)]).to(device)
"""
namespace = {}
exec(MODEL_CODE, namespace)
make_model = namespace["make_model"]

device = "cuda" if torch.cuda.is_available() else "cpu"
# The page keeps PyTorch's default float32 matmul precision; Inductor's hint to turn on
# TF32 is about speed, not about compile time.
warnings.filterwarnings("ignore", message=".*TensorFloat32 tensor cores.*")
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    WIDTH, HEADS, LAYERS, BATCH, SEQ = 1024, 16, 8, 8, 512
else:
    device_name = f"CPU, {torch.get_num_threads()} threads"
    WIDTH, HEADS, LAYERS, BATCH, SEQ = 32, 4, 3, 4, 32
    print("No CUDA GPU found: running on the CPU with a smaller model.")
print(f"torch {torch.__version__} on {device} ({device_name})")
print(f"{LAYERS} blocks, width {WIDTH}, {HEADS} heads; input {BATCH} x {SEQ}")

model = make_model(WIDTH, HEADS, LAYERS, device)
x = torch.randn(BATCH, SEQ, WIDTH, device=device)

# %%
# Helpers
# -------
#
# ``fresh_cache()`` points Inductor's and Triton's caches at a new temporary folder for the
# length of a ``with`` block (older releases call it ``fresh_inductor_cache``), and
# ``torch._dynamo.reset()`` drops what Dynamo compiled in this process. ``compile_stats``
# reads the counters that Dynamo, AOTAutograd and Inductor keep in
# ``torch._dynamo.utils.counters``: FX graph cache and AOTAutograd cache hits and misses, and
# the number of graphs Dynamo compiled. ``assert_cold`` states what *cold* means.
#
# ``step_ms`` times a call in steady state. On a GPU, ``triton.testing.do_bench`` gives the
# median device time from CUDA events, and the time for the CPU to *issue* one call is
# measured beside it (clock read around the call without synchronizing): issue time close
# to step time means the step is bound by the CPU (Python, kernel launches), well below
# means bound by the GPU. On a CPU, ``torch.utils.benchmark.Timer`` runs with the threads
# that Inductor's kernels use; there the issue time is the step time (``-`` in the tables).

fresh_cache = getattr(torch._inductor.utils, "fresh_cache", None)
fresh_cache = fresh_cache or torch._inductor.utils.fresh_inductor_cache


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
def first_call(fn):
    """Seconds for one call, the device work included."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn(x)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


@torch.no_grad()
def step_ms(fn):
    """(median step time, median issue time or None) in milliseconds."""
    fn(x)  # compiles, if it has to, before anything is timed
    if device == "cpu":
        timer = benchmark.Timer(
            "fn(x)", globals={"fn": fn, "x": x}, num_threads=torch.get_num_threads()
        )
        return timer.blocked_autorange(min_run_time=1.0).median * 1e3, None
    from triton.testing import do_bench

    step = do_bench(lambda: fn(x), return_mode="median")
    issue = []
    for _ in range(30):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn(x)
        issue.append((time.perf_counter() - start) * 1e3)
        torch.cuda.synchronize()
    return step, median(issue)


def bound_by(step, issue):
    return "-" if issue is None else ("CPU" if issue > 0.8 * step else "GPU")


def table(rows, headers, floatfmt=".2f"):
    print(tabulate(rows, headers=headers, tablefmt="github", floatfmt=floatfmt))


# %%
# Cold, then warm, in one process
# -------------------------------
#
# The page enters ``fresh_cache()`` here and leaves it at the end, so the rest of the page
# works in one cache folder of its own that starts empty. The model is compiled twice. The
# first compilation finds the cache empty. Then ``torch._dynamo.reset()`` throws away
# everything compiled in memory, and the second compilation starts again from Dynamo, but
# finds the AOTAutograd and FX graph entries that the first one wrote.
#
# Dynamo, AOTAutograd and Inductor time each stage of a compilation, and
# ``torch._dynamo.utils.compile_times`` returns the seconds per stage since the last reset.
# The stages nest: ``_compile.compile_inner`` is all of it, ``OutputGraph.call_user_compiler``
# the backend call inside it, and ``compile_fx_inner`` Inductor inside that. Subtracting each
# from the one around it gives Dynamo's share (tracing the bytecode, building the *guards*
# that decide when compiled code may be reused), AOTAutograd's (functionalization and
# decomposition into ATen operations) and Inductor's (lowering, fusion, code generation and
# kernel compilation).
#
# A tiny function is compiled first: the first compilation in a process also pays once for
# importing Inductor and starting its compile workers, which have nothing to do with the
# model.

STAGES = [
    "_compile.compile_inner",
    "OutputGraph.call_user_compiler",
    "compile_fx_inner",
]


def compile_and_call(fn):
    torch._dynamo.reset()
    counters.clear()
    seconds = first_call(fn)
    names, values = torch._dynamo.utils.compile_times(repr="csv", aggregate=True)
    timed = dict(zip(names, map(float, values)))
    total, backend, inductor = (timed.get(name, 0.0) for name in STAGES)
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
# the same GPU model.
#
# The page writes a small script that builds the model from ``MODEL_CODE`` and times its
# first compiled call, and runs it twice, each time in a new process with a new, empty cache
# folder: first compiling from nothing and saving the artifacts, then loading them first.

SCRIPT = """
import json, sys
from torch._dynamo.utils import counters

imported = time.perf_counter() - STARTED  # MODEL_CODE imported torch

mode, path, device = sys.argv[1:4]
width, heads, layers, batch, seq = map(int, sys.argv[4:])
start = time.perf_counter()
if mode == "load":
    torch.compiler.load_cache_artifacts(open(path, "rb").read())
loading = time.perf_counter() - start
model = torch.compile(make_model(width, heads, layers, device), fullgraph=True)
x = torch.randn(batch, seq, width, device=device)
start = time.perf_counter()
with torch.no_grad():
    model(x).sum().item()  # .item() waits for the device
seconds = time.perf_counter() - start
start = time.perf_counter()
if mode == "save":
    open(path, "wb").write(torch.compiler.save_cache_artifacts()[0])
artifacts = loading + time.perf_counter() - start  # the save or the load
fx = counters["inductor"]
hits, misses = fx["fxgraph_cache_hit"], fx["fxgraph_cache_miss"]
print("RESULT", json.dumps([imported, artifacts, seconds, hits, misses, time.time()]))
"""
work_dir = Path(tempfile.mkdtemp(prefix="compile_time_"))
HEAD = "import time\nSTARTED = time.perf_counter()\n"
(work_dir / "first_call.py").write_text(HEAD + MODEL_CODE + SCRIPT)


def fresh_process(mode):
    cache = tempfile.mkdtemp(dir=work_dir)
    env = dict(
        os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=cache + "/triton"
    )
    args = [mode, "artifacts.bin", device, WIDTH, HEADS, LAYERS, BATCH, SEQ]
    command = [sys.executable, "first_call.py", *map(str, args)]
    start = time.perf_counter()
    done = subprocess.run(
        command, cwd=work_dir, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    whole, ended = time.perf_counter() - start, time.time()
    result = json.loads(done.stdout.split("RESULT ")[-1])
    exiting = ended - result.pop()  # from the script's last line to the process's end
    return [mode, *result[:3], exiting, whole, *result[3:]]


saved, loaded = fresh_process("save"), fresh_process("load")
assert saved[6] == 0 and saved[7] > 0, saved  # the first process compiled cold
assert loaded[6] > 0, loaded  # the second one found the loaded entries
print(f"artifacts: {(work_dir / 'artifacts.bin').stat().st_size / 1e3:.0f} kB")
headers = ["fresh process", "imports (s)", "save or load (s)", "first call (s)"]
headers += ["exit (s)", "whole process (s)", "fx hits", "fx misses"]
table([saved, loaded], headers)

# %%
# "imports" is the time the new process took to import PyTorch and Dynamo, and "save or
# load" the call to ``save_cache_artifacts`` (after the first call) or to
# ``load_cache_artifacts`` (before it). "exit" runs from the script's last line to the end
# of its process: Python's shutdown, in which an ``atexit`` handler of Inductor stops its
# compile-worker processes and waits for them to exit. Inductor starts those workers in the
# background when it first compiles, so a process that finishes its work early may wait at
# exit for workers still starting up. "whole process" counts everything from starting
# Python to its end; no cache shortens the imports or the exit. What an
# artifact holds depends on the device: on a GPU, Inductor bundles the compiled Triton
# kernels into each FX graph entry
# (``torch._inductor.config.bundle_triton_into_fx_graph_cache``), so the second process
# need not compile any kernel; on a CPU an entry holds the generated C++ source, and
# loading it runs the C++ compiler again. In production, compile once on a build machine,
# save the artifacts next to the model's weights and load them at start-up everywhere
# else.
#
# Regional compilation
# --------------------
#
# The caches make the *second* compilation cheap. The first can be made cheaper by giving
# the compiler less to do. Compiled as one graph, every copy of the block is traced by
# Dynamo, passed through AOTAutograd and lowered by Inductor. ``layer.compile()`` compiles
# each block in place instead. The blocks run the same Python code with parameters of the
# same shapes, and Dynamo passes parameters to the graph as inputs rather than baking them
# in, so the guards of the first block's compiled code hold for every other block and Dynamo
# reuses it: one graph, whatever the number of layers.
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
print(f"{device_name}, {LAYERS} blocks, both cold")
table(rows, ["compiled", "compilation (s)", "first call (s)", "graphs"])

# %%
# Regional compilation gives up fusion *across* blocks, and the loop over the blocks runs as
# ordinary Python between the compiled graphs. The steady-state table shows what that costs
# on this machine. (The whole-model version compiles again here, since the cell above reset
# Dynamo; the page's cache folder holds its entries, so that compilation is warm.)

compiled = torch.compile(model, fullgraph=True)
rows = []
for name, fn in [("eager", model), ("whole model", compiled), ("regional", regional)]:
    step, issue = step_ms(fn)
    issue_text = "-" if issue is None else f"{issue:.3f}"
    rows.append([name, step, issue_text, bound_by(step, issue)])
print(f"{device_name}, torch {torch.__version__}, input {BATCH} x {SEQ}, medians")
table(rows, ["steady state", "step (ms)", "issue (ms)", "bound by"], ".3f")

# %%
# Same function
# -------------
#
# The compiled models must compute what the eager model computes, up to the order of float32
# operations. A float64 copy of the model is the reference; each compiled error must stay
# within a small multiple of the eager error plus a floor.

torch.set_grad_enabled(False)
reference = make_model(WIDTH, HEADS, LAYERS, device).double()(x.double())


def rel_error(out):
    return ((out.double() - reference).norm() / reference.norm()).item()


eager_err = rel_error(model(x))
for name, fn in [("whole model", compiled), ("regional", regional)]:
    err = rel_error(fn(x))
    print(f"relative error to float64: eager {eager_err:.2e}, {name} {err:.2e}")
    assert err <= 3 * eager_err + 1e-6, (name, err, eager_err)
torch.set_grad_enabled(True)
page_cache.close()  # back to the usual cache folder
shutil.rmtree(work_dir, ignore_errors=True)  # the script, the artifacts, both caches

# %%
# Going further
# -------------
#
# * **Changing shapes.** A cache helps only when the same graph comes back. Dynamo guards the
#   size of every input dimension; by default the first change of a size recompiles once with
#   that dimension symbolic (*automatic dynamic*). ``torch._dynamo.mark_dynamic(x, 1)`` makes
#   the first compilation symbolic in dimension 1 already, and ``TORCH_LOGS=recompiles``
#   names the guard behind every recompilation.
# * **Mega-cache alternatives.** ``TORCHINDUCTOR_CACHE_DIR`` on a shared or persistent
#   volume keeps the caches between runs without any code; the artifacts above are the
#   portable form of the same entries.
#
# Conclusion
# ----------
#
# A cold compilation passes through Dynamo, AOTAutograd and Inductor, and PyTorch's own
# timers show how long each took. Inductor's on-disk caches skip everything after Dynamo
# when the same graph comes back, and ``save_cache_artifacts`` / ``load_cache_artifacts``
# carry those entries to a process that starts empty. Regional compilation compiles a
# repeated block once, at the price of fusion across blocks; assert that a cold measurement
# compiled something, or a block that silently runs eagerly will look like a fast compiler.
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
