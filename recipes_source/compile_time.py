"""
.. _compile_time:

Cutting compile time: caches, portable cache artifacts, regional compilation
============================================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * Where the first call of a compiled model spends its time (Dynamo, AOTAutograd,
         Inductor, kernel compilation), read from PyTorch's own compile timers
       * What Inductor's on-disk caches (FX graph, AOTAutograd, Triton) save on a second
         compilation, proved with their hit and miss counters
       * How to carry a compile cache to a fresh process or another machine with
         ``torch.compiler.save_cache_artifacts`` and ``load_cache_artifacts``
       * How compiling the repeated block instead of the whole model (regional compilation)
         cuts the cold compile time, and what it costs at run time
       * Why changing input shapes recompiles, how to see it in the logs, and how
         ``mark_dynamic`` avoids it

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
# The first call of a ``torch.compile``-d model is slow: before it runs anything, PyTorch
# traces the Python code, transforms the graph, generates kernels and compiles them. Every
# later call reuses that work. This recipe first measures where the first call's time goes,
# then tries four ways to spend less of it: the on-disk caches that a second compilation of
# the same graph reads, cache artifacts that carry those caches to a fresh process,
# compiling only the block that a model repeats, and avoiding recompilations when shapes
# change.
#
# A figure called *cold* on this page is measured from an empty compile cache that the page
# creates itself, and the page checks that no cached graph was found during it. The site that
# built this page keeps a warm compile cache on purpose, so without that precaution a rebuild
# would report the cache's speed, not the compiler's.
#
# Setup
# -----
#
# The model is a stack of standard transformer encoder layers. On a GPU it is big enough for
# compile time to matter; on a CPU it is much smaller, because Inductor compiles C++ there and
# this page compiles several times.

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.utils.benchmark as benchmark
from tabulate import tabulate
from torch._dynamo.utils import counters

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    free_gib = torch.cuda.mem_get_info()[0] / 2**30
    # The weights take well under 1 GB; a smaller batch where little memory is free.
    WIDTH, HEADS, LAYERS, SEQ = 1024, 16, 8, 512
    BATCH = 8 if free_gib > 8 else 2
else:
    device_name = f"CPU, {torch.get_num_threads()} threads"
    WIDTH, HEADS, LAYERS, SEQ, BATCH = 32, 4, 3, 32, 4
    print("No CUDA GPU found: running on the CPU with a smaller model.")

print(f"torch {torch.__version__} on {device} ({device_name})")
print(
    f"{LAYERS} encoder layers, width {WIDTH}, {HEADS} heads; "
    f"input batch {BATCH} x sequence {SEQ}"
)

# %%
# ``make_model`` builds the model from a fixed seed. ``dropout=0.0`` makes the output
# deterministic, and the model stays in training mode: in evaluation mode and without
# gradients, ``nn.TransformerEncoderLayer`` switches to a fused inference kernel in eager
# mode, and this recipe wants eager and compiled code to run the same operations. Every
# forward pass on this page runs under ``torch.no_grad()``, so only the forward graph is
# compiled.
#
# The code of the model is kept in a string because a fresh Python process, started later in
# this recipe, has to build exactly the same model: the page runs the string here and writes
# it into that process's script.

MODEL_CODE = """
import torch


def make_model(width, heads, layers, device):
    torch.manual_seed(0)
    blocks = [
        torch.nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        for _ in range(layers)
    ]
    return torch.nn.Sequential(*blocks).to(device)
"""
namespace = {}
exec(MODEL_CODE, namespace)
make_model = namespace["make_model"]

model = make_model(WIDTH, HEADS, LAYERS, device)
x = torch.randn(BATCH, SEQ, WIDTH, device=device)
n_params = sum(p.numel() for p in model.parameters())
print(f"{n_params / 1e6:.2f} M parameters")

# %%
# An empty compile cache
# ----------------------
#
# Inductor keeps its caches under ``TORCHINDUCTOR_CACHE_DIR`` and Triton under
# ``TRITON_CACHE_DIR``; Inductor reads both environment variables each time it needs them.
# ``torch._inductor.utils.fresh_cache`` points both at a new temporary folder for the length
# of a ``with`` block and clears Inductor's in-memory caches on entry (PyTorch 2.9 has it;
# older releases call it ``fresh_inductor_cache``). ``torch._dynamo.reset()`` drops the code
# that Dynamo has already compiled in this process.
#
# ``torch._dynamo.utils.counters`` holds the counters that Dynamo, AOTAutograd and Inductor
# increment, among them the hits and misses of the FX graph cache and of the AOTAutograd
# cache. ``cache_counts`` reads the four that matter here.

fresh_cache = getattr(torch._inductor.utils, "fresh_cache", None)
if fresh_cache is None:
    fresh_cache = torch._inductor.utils.fresh_inductor_cache
    print("This PyTorch has fresh_inductor_cache (the older name of fresh_cache).")


def cache_counts():
    return {
        "fx_hit": counters["inductor"]["fxgraph_cache_hit"],
        "fx_miss": counters["inductor"]["fxgraph_cache_miss"],
        "aot_hit": counters["aot_autograd"]["autograd_cache_hit"],
        "aot_miss": counters["aot_autograd"]["autograd_cache_miss"],
    }


def first_call(fn, *args):
    """Seconds of wall time for one call, the device work included."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        fn(*args)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def compared(new, old):
    """How a duration compares with another, in words chosen from the two values."""
    if abs(new / old - 1) < 0.1:
        return "about as long, within 10%"
    if new < old:
        return f"{old / new:.1f}x shorter"
    return f"{new / old:.1f}x longer"


# %%
# The first compilation in a Python process also pays once for things that have nothing to do
# with the model: importing Inductor's modules, starting the pool of worker processes that
# compile kernels in parallel, hashing PyTorch's own source for the cache keys. A tiny
# function compiled first takes those costs, so that the figures below belong to the model.

with fresh_cache():
    torch._dynamo.reset()
    first_call(torch.compile(lambda t: torch.relu(t) + 1), x)
torch._dynamo.reset()

# %%
# Where the first call's time goes
# --------------------------------
#
# Dynamo, AOTAutograd and Inductor wrap each stage of a compilation in a timer
# (``torch._dynamo.utils.dynamo_timed``), keyed by the name of the function it times.
# ``torch._dynamo.utils.compile_times(repr="csv", aggregate=True)`` returns every key with
# the seconds it accumulated since the last ``torch._dynamo.reset()``. The stages nest, and
# subtracting each one from the one around it gives the time of each phase:
#
# * ``_compile.compile_inner`` is all of it. What is not inside the backend call is
#   **Dynamo**: it runs the model's Python bytecode symbolically, records the tensor
#   operations into an FX graph and builds the *guards*, the checks that decide whether a
#   later call may reuse the result.
# * ``OutputGraph.call_user_compiler`` is the call to the backend. Its part outside Inductor
#   is **AOTAutograd**: it runs the graph on fake tensors, removes in-place operations and
#   views (functionalization), decomposes ``torch.*`` calls into ATen operations and, when
#   gradients are needed, splits a forward and a backward graph. The AOTAutograd cache is
#   looked up here.
# * ``compile_fx_inner`` is **Inductor** on one graph. Before code generation it runs graph
#   passes (pattern matching), lowers every ATen operation to its loop-level IR and decides
#   which operations to fuse into one kernel. The FX graph cache is looked up here.
# * ``GraphLowering.compile_to_module`` is **code generation and kernel compilation**: it
#   writes the Triton kernels (GPU) or C++ kernels (CPU) and the Python code that calls them,
#   hands each kernel to the compiler (Triton, or the C++ compiler) in parallel workers, and
#   loads the result. ``async_compile.wait`` is the part of it in which the main process
#   only waits for those workers.
#
# ``phase_times`` makes that table from the timers; a timer that this PyTorch version does not
# record is reported as missing rather than guessed.

TIMERS = {
    "total": "_compile.compile_inner",
    "backend": "OutputGraph.call_user_compiler",
    "inductor": "compile_fx_inner",
    "codegen": "GraphLowering.compile_to_module",
    "wait": "async_compile.wait",
}


def cxx_runs():
    """How many times the C++ compiler ran (CPU kernels) since the last reset."""
    return len(torch._dynamo.utils.compilation_time_metrics.get("compile_file", []))


def phase_times():
    names, values = torch._dynamo.utils.compile_times(repr="csv", aggregate=True)
    seconds = dict(zip(names, (float(v) for v in values)))
    found = {key: seconds.get(name, 0.0) for key, name in TIMERS.items()}
    missing = [name for name in TIMERS.values() if name not in seconds]
    return found, missing


def phase_rows(t):
    rows = [
        ["Dynamo: trace bytecode, build guards", t["total"] - t["backend"]],
        ["AOTAutograd: functionalize, decompose", t["backend"] - t["inductor"]],
        ["Inductor: passes, lowering, fusion", t["inductor"] - t["codegen"]],
        ["Inductor: code gen + kernel compile", t["codegen"]],
        ["in code gen: waiting for kernel workers", t["wait"]],
    ]
    rows.append(["total (_compile.compile_inner)", t["total"]])
    return rows


# %%
# Cold, then warm
# ---------------
#
# Inside one ``fresh_cache()`` block, the model is compiled twice. The first compilation
# finds the cache empty, which the page asserts. Then ``torch._dynamo.reset()`` throws away
# everything compiled in memory, and the second compilation starts again from Dynamo, but
# finds the AOTAutograd and FX graph entries that the first one wrote to the (same,
# temporary) cache folder. On a GPU, the Triton kernels come back from the cache too: Inductor
# bundles them with the FX graph entry and Triton keeps its own cache.
#
# ``fullgraph=True`` makes a graph break an error, so the whole model is one graph and the
# counters count one lookup per compilation.

first_s = {}
with fresh_cache():
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, fullgraph=True)
    first_s["cold"] = first_call(compiled, x)
    cold_counts = cache_counts()
    cold_phases, missing = phase_times()
    cold_cxx = cxx_runs()
    assert cold_counts["fx_hit"] == 0 and cold_counts["aot_hit"] == 0, cold_counts

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, fullgraph=True)
    first_s["warm"] = first_call(compiled, x)
    warm_counts = cache_counts()
    warm_phases, _ = phase_times()

if missing:
    print(f"timers this PyTorch does not record: {', '.join(missing)}")
print(f"cold cache: {cold_counts}")
print(f"warm cache: {warm_counts}")
print(f"{device_name}, torch {torch.__version__}, first call of the whole model")
print(
    tabulate(
        [
            [name, cold, warm]
            for (name, cold), (_, warm) in zip(
                phase_rows(cold_phases), phase_rows(warm_phases)
            )
        ]
        + [["first call, measured around it", first_s["cold"], first_s["warm"]]],
        headers=["phase", "cold (s)", "warm (s)"],
        tablefmt="github",
        floatfmt="8.2f",
    )
)

# %%
# The printed reading below is chosen from the numbers above.

dynamo_cold = cold_phases["total"] - cold_phases["backend"]
below_dynamo = cold_phases["backend"]
biggest = max(phase_rows(cold_phases)[:4], key=lambda row: row[1])
print(
    f"Cold, the largest phase is '{biggest[0].strip()}' "
    f"({biggest[1] / max(cold_phases['total'], 1e-9):.0%} of the compilation)."
)
if warm_counts["fx_hit"] + warm_counts["aot_hit"] > 0:
    saved_s = below_dynamo - warm_phases["backend"]
    print(
        f"Warm, the caches answered the backend call: it took "
        f"{warm_phases['backend']:.2f} s instead of {below_dynamo:.2f} s "
        f"({saved_s:.2f} s saved). Dynamo still traced the model: "
        f"{warm_phases['total'] - warm_phases['backend']:.2f} s warm, "
        f"{dynamo_cold:.2f} s cold."
    )
else:
    print("Warm, no cache entry was found: the second compilation redid everything.")

# %%
# When the caches hit, a compilation skips AOTAutograd and Inductor but not Dynamo: the
# on-disk caches are keyed by the graph that Dynamo produces, so Dynamo has to produce it
# first. (Whether the
# AOTAutograd cache or the FX graph cache answered depends on the version: when the
# AOTAutograd cache hits, it loads the FX graph entry itself, and the counters show both.)
# The key covers the graph, the input shapes and strides, the PyTorch and Triton versions, the
# Inductor configuration and, on a GPU, the device model: change any of them and the lookup
# misses.
#
# A warm compilation in the *same* process is also helped by what that process already has in
# memory (kernel libraries already loaded, compile workers already started). The next section
# measures warm in a process that has nothing.
#
# Moving a cache to another process or machine
# --------------------------------------------
#
# A fresh container, a new CI runner or a second node of a cluster starts with an empty cache
# folder. ``torch.compiler.save_cache_artifacts()`` returns ``(bytes, CacheInfo)`` with every
# cache entry that this process created or read while compiling (or ``None`` if there is
# none); ``torch.compiler.load_cache_artifacts(bytes)`` writes them into the cache folder of
# the process that calls it, before it compiles anything, and returns a ``CacheInfo`` that
# lists what was loaded. Both exist since PyTorch 2.7. The bytes can be stored anywhere (a
# file, a bucket, a database); they only help a machine with the same PyTorch and Triton
# versions and, for a GPU, the same GPU model.
#
# The page writes a small script that builds the model from ``MODEL_CODE`` and times its
# first compiled call, and runs it twice with ``sys.executable``, each time in a new process
# with its own, new, empty cache folder:
#
# 1. *fresh process, cold*: compiles from nothing and saves the artifacts to a file;
# 2. *fresh process, artifacts*: loads that file first, then compiles.

work_dir = Path(tempfile.mkdtemp(prefix="compile_time_"))
script = work_dir / "first_call.py"
script.write_text(
    MODEL_CODE
    + textwrap.dedent(
        """
        import json, sys, time
        from torch._dynamo.utils import counters

        mode, artifacts, device = sys.argv[1], sys.argv[2], sys.argv[3]
        width, heads, layers, batch, seq = map(int, sys.argv[4:9])
        result = {}
        if mode == "load":
            start = time.perf_counter()
            info = torch.compiler.load_cache_artifacts(open(artifacts, "rb").read())
            result["load_s"] = time.perf_counter() - start
            result["loaded"] = {
                "inductor": len(info.inductor_artifacts),
                "aot_autograd": len(info.aot_autograd_artifacts),
            }
        model = make_model(width, heads, layers, device)
        x = torch.randn(batch, seq, width, device=device)
        compiled = torch.compile(model, fullgraph=True)
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            compiled(x)
        if device == "cuda":
            torch.cuda.synchronize()
        result["first_call_s"] = time.perf_counter() - start
        result["fx_hit"] = counters["inductor"]["fxgraph_cache_hit"]
        result["fx_miss"] = counters["inductor"]["fxgraph_cache_miss"]
        result["aot_hit"] = counters["aot_autograd"]["autograd_cache_hit"]
        result["aot_miss"] = counters["aot_autograd"]["autograd_cache_miss"]
        # one entry per run of the C++ compiler (CPU kernels)
        metrics = torch._dynamo.utils.compilation_time_metrics
        result["cxx_runs"] = len(metrics.get("compile_file", []))
        if mode == "save":
            data, info = torch.compiler.save_cache_artifacts()
            open(artifacts, "wb").write(data)
            result["saved_bytes"] = len(data)
        print("RESULT " + json.dumps(result))
        """
    )
)


def fresh_process(mode):
    cache = Path(tempfile.mkdtemp(dir=work_dir, prefix="cache_"))
    env = dict(
        os.environ,
        TORCHINDUCTOR_CACHE_DIR=str(cache),
        TRITON_CACHE_DIR=str(cache / "triton"),
    )
    args = [mode, str(work_dir / "artifacts.bin"), device]
    args += [str(n) for n in (WIDTH, HEADS, LAYERS, BATCH, SEQ)]
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"the fresh process failed:\n{done.stderr[-3000:]}")
    line = next(s for s in done.stdout.splitlines() if s.startswith("RESULT "))
    return {"process_s": wall, **json.loads(line[len("RESULT ") :])}


saved = fresh_process("save")
assert saved["fx_hit"] == 0 and saved["aot_hit"] == 0, saved
loaded = fresh_process("load")
shutil.rmtree(work_dir, ignore_errors=True)  # the script, the artifacts, both caches
first_s["fresh process, cold"] = saved["first_call_s"]
first_s["fresh process, artifacts"] = loaded["first_call_s"]

print(f"artifacts saved by the cold process: {saved['saved_bytes'] / 1e3:.0f} kB")
print(
    f"entries loaded: {loaded['loaded']} in {loaded['load_s']:.3f} s "
    "(before anything was compiled)"
)
print(
    tabulate(
        [
            [
                name,
                r["first_call_s"],
                r["process_s"],
                f"{r['fx_hit']}/{r['fx_miss']}",
                f"{r['aot_hit']}/{r['aot_miss']}",
            ]
            for name, r in [("cold", saved), ("artifacts loaded", loaded)]
        ],
        headers=[
            "fresh process",
            "first call (s)",
            "whole process (s)",
            "FX graph hit/miss",
            "AOTAutograd hit/miss",
        ],
        tablefmt="github",
        floatfmt="8.2f",
    )
)
if loaded["fx_hit"] + loaded["aot_hit"] > 0:
    print(
        f"With the artifacts, the fresh process's first call took "
        f"{loaded['first_call_s']:.2f} s instead of {saved['first_call_s']:.2f} s "
        f"({compared(loaded['first_call_s'], saved['first_call_s'])})."
    )
else:
    print(
        "The loaded artifacts were not used: the fresh process compiled from nothing."
    )
if device == "cpu":
    print(
        f"C++ compiler runs: {saved['cxx_runs']} in the cold process, "
        f"{loaded['cxx_runs']} in the process that loaded the artifacts."
    )
    if loaded["cxx_runs"] > 0:
        print(
            "The artifacts held the generated C++ source, not the compiled kernels: "
            "the second process compiled them again."
        )
else:
    bundled = torch._inductor.config.bundle_triton_into_fx_graph_cache
    print(f"Triton kernels bundled into the FX graph cache entries: {bundled}")

# %%
# The whole-process time also counts starting Python and importing PyTorch, which no cache
# shortens, and the first call of a fresh process includes the one-time costs that the
# in-process figures above kept out by compiling a tiny function first (importing Inductor,
# starting the compile workers and, on CPU, compiling small test programs that find out which
# vector instructions the processor has).
#
# What the artifacts contain depends on the device. On a GPU, Inductor bundles the compiled
# Triton kernels into each FX graph cache entry
# (``torch._inductor.config.bundle_triton_into_fx_graph_cache``, printed above), so a process
# that loads the artifacts need not compile any kernel. On a CPU an entry holds the generated
# C++ source, while the compiled shared libraries stay in the cache folder of the process that
# built them: the process that loads the artifacts skips AOTAutograd and Inductor, but loading
# the cached code runs the C++ compiler for each kernel again (counted above). The warm
# compilation in the same process did not pay that: the libraries were in its cache folder.
#
# In the second process the cache lookups hit although its cache folder was just as new as the
# first one's: ``load_cache_artifacts`` had filled it. In production the usual pattern is to
# compile once on a build machine (or on the first replica), save the artifacts
# next to the model's weights, and load them at start-up everywhere else.
#
# Regional compilation
# --------------------
#
# The caches make the *second* compilation cheap. The first one can be made cheaper by giving
# the compiler less to do. A transformer repeats the same block many times; compiled as one
# graph, every copy of the block is traced by Dynamo, passed through AOTAutograd and lowered
# and fused by Inductor, so those phases grow with the number of layers. Kernel compilation
# grows less: Inductor writes a kernel whose source is identical to one it already wrote only
# once per graph, and the kernel compilers' caches are keyed by the source too.
#
# Compiling each block instead (``layer.compile()``, which is ``torch.compile`` applied in
# place) compiles the block's ``forward`` once. The other layers run the same Python code with
# parameters of the same shapes, and Dynamo passes a built-in module's parameters to the
# graph as inputs instead of baking them in as constants, so the guards of the first layer's
# compiled code hold for every other layer and Dynamo reuses it. The counter
# ``unique_graphs`` counts the graphs that Dynamo compiled.
#
# The whole-model ``compiled`` from above is kept for the timings below, so this cell does
# not call ``torch._dynamo.reset()`` (which would make it compile again). It does not need to:
# Dynamo keeps compiled code per Python function, and the layers' ``forward`` has not been
# compiled on its own yet. The phase timers are read before and after and subtracted.

regional = make_model(WIDTH, HEADS, LAYERS, device)
with fresh_cache():
    counters.clear()
    before, _ = phase_times()
    cxx_before = cxx_runs()
    for layer in regional:
        layer.compile(fullgraph=True)
    first_s["regional, cold"] = first_call(regional, x)
    regional_counts = cache_counts()
    after, _ = phase_times()
    regional_phases = {key: after[key] - before[key] for key in after}
    regional_cxx = cxx_runs() - cxx_before
    graphs = counters["stats"]["unique_graphs"]
assert regional_counts["fx_hit"] == 0 and regional_counts["aot_hit"] == 0
print(f"regional, cold cache: {regional_counts}; graphs compiled: {graphs}")
print(
    f"first call: regional {first_s['regional, cold']:.2f} s, "
    f"whole model {first_s['cold']:.2f} s (both cold)"
)
print(
    f"Dynamo tracing: regional {regional_phases['total'] - regional_phases['backend']:.2f}"
    f" s, whole model {dynamo_cold:.2f} s"
)
if device == "cpu":
    print(f"C++ compiler runs: regional {regional_cxx}, whole model {cold_cxx}")
print(
    f"With {LAYERS} layers, the regional cold first call was "
    f"{compared(first_s['regional, cold'], first_s['cold'])} than the whole model's."
)

# %%
# Regional compilation gives up one thing: fusion *across* blocks. Each block is its own graph,
# so the end of one block and the start of the next run as separate kernels, and the Python
# code that loops over the layers runs between them in eager mode. For a large model this
# usually costs little, because nearly all the work is inside the blocks. Here are the
# steady-state times of the three versions. On CPU, ``torch.utils.benchmark.Timer`` is given
# the same number of threads that Inductor's C++ kernels use (its default is one thread); on
# GPU it synchronizes before reading the clock. The three versions take turns, several
# rounds each, so that a change in the machine's load affects all of them alike; the table
# reports the median over all timed blocks of runs.

ROUNDS = 5
versions = {
    "eager": model,
    "whole model compiled": compiled,
    "regional compiled": regional,
}
blocks = {name: [] for name in versions}
runs = dict.fromkeys(versions, 0)
with torch.no_grad():
    for fn in versions.values():
        fn(x)  # warm-up
    for _ in range(ROUNDS):
        for name, fn in versions.items():
            timer = benchmark.Timer(
                stmt="fn(x)",
                globals={"fn": fn, "x": x},
                num_threads=torch.get_num_threads(),
            )
            m = timer.blocked_autorange(min_run_time=0.2)
            blocks[name] += m.times
            runs[name] += len(m.times) * m.number_per_run
steady = {name: (float(np.median(t)), runs[name]) for name, t in blocks.items()}
print(f"{device_name}, torch {torch.__version__}, batch {BATCH} x seq {SEQ}")
print(
    tabulate(
        [[name, t * 1e3, n] for name, (t, n) in steady.items()],
        headers=["steady state", "median (ms)", "runs"],
        tablefmt="github",
        floatfmt="9.3f",
    )
)
whole_ms, regional_ms = (steady[k][0] * 1e3 for k in steady if k != "eager")
print(
    f"Per call, the regional version took {compared(regional_ms, whole_ms)} than the "
    f"whole-model graph; eager took {steady['eager'][0] * 1e3:.3f} ms."
)

# %%
# Same function
# -------------
#
# Speed aside, the compiled models must compute what the eager model computes. Different
# fusion changes the order of float32 operations, so the outputs differ in the last bits.
# Following PyTorch's own accuracy checker, the page runs a float64 copy of the model as the
# reference, prints the relative error of the eager and the compiled float32 outputs to it,
# and asserts that each compiled error is at most twice the eager error plus a tiny floor.

with torch.no_grad():
    out_eager = model(x)
    out_whole = compiled(x)
    out_regional = regional(x)
    reference = make_model(WIDTH, HEADS, LAYERS, device).double()(x.double())


def rel_error(out):
    return ((out.double() - reference).norm() / reference.norm()).item()


eager_err = rel_error(out_eager)
for name, out in [("whole model", out_whole), ("regional", out_regional)]:
    err = rel_error(out)
    print(f"relative error to float64: eager {eager_err:.2e}, {name} {err:.2e}")
    assert err <= 2 * eager_err + 1e-6, (name, err, eager_err)
    torch.testing.assert_close(out, out_eager, rtol=1e-4, atol=1e-4)
print("both compiled models match eager within float32 tolerance")

# %%
# What does not help: recompiling for every shape
# -----------------------------------------------
#
# A cache helps only when the same graph comes back. A compiled function whose input shapes
# keep changing (sequence lengths of a text model, the last short batch of an epoch) can
# compile again and again, and each recompilation is a full compilation. Dynamo's guards
# include the size of every input dimension. By default (``dynamic=None``), the first time a
# size changes Dynamo recompiles once with that dimension symbolic (*automatic dynamic*), and
# that graph then serves every size. With ``dynamic=False`` every new size is a new
# compilation, which is what the next cell shows on one block, with the recompile log on.
#
# ``torch._logging.set_logs(recompiles=True)`` (or ``TORCH_LOGS=recompiles`` in the
# environment) makes Dynamo log each recompilation and the guard that failed. The records go
# to Python's ``logging`` under ``torch._dynamo``; ``RecompileLog`` collects them so the page
# can print the lines that matter with file paths cut to their base name.

_PATH = re.compile(r"(?:/[^\s'\"():/]+)+/([^\s'\"():/]+\.py)")


class RecompileLog(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []
        self.logger = logging.getLogger("torch._dynamo")

    def emit(self, record):
        text = record.getMessage()
        if "Recompiling function" in text:
            self.lines += [_PATH.sub(r"\1", s.strip()) for s in text.splitlines()]

    def __enter__(self):
        torch._logging.set_logs(recompiles=True)
        self.saved = self.logger.handlers[:]
        self.logger.handlers = [self]
        return self

    def __exit__(self, *exc):
        self.logger.handlers = self.saved
        torch._logging.set_logs()


block = make_model(WIDTH, HEADS, 1, device)[0]
lengths = [SEQ, SEQ + SEQ // 2, 2 * SEQ]
inputs = [torch.randn(BATCH, n, WIDTH, device=device) for n in lengths]


def run_lengths(compiled_block, mark=False):
    torch._dynamo.reset()
    counters.clear()
    seconds = []
    for t in inputs:
        if mark:
            torch._dynamo.mark_dynamic(t, 1)
        seconds.append(first_call(compiled_block, t))
    assert cache_counts()["fx_hit"] == 0, cache_counts()
    return seconds, counters["stats"]["unique_graphs"]


with fresh_cache(), RecompileLog() as log:
    static_s, static_graphs = run_lengths(torch.compile(block, dynamic=False))
for line in log.lines:
    print("    " + line)

# %%
# Each record names the function being recompiled (the name depends on the version; on recent
# ones it is ``inner``, a small wrapper that ``torch.compile`` puts around the module's
# ``forward``), the guard that failed with the size it expected and the one it got, and,
# before the guard, which cached version failed it: ``0/0`` is frame 0, version 0 (the
# first compilation). With two cached versions, the second record lists a failure for each.
#
# ``torch._dynamo.mark_dynamic(t, 1)`` tells Dynamo before the first compilation that
# dimension 1 of ``t`` will vary, so the first compilation is already symbolic in it and the
# other lengths reuse it. It is the tool when you know which dimension varies;
# ``torch.compile(..., dynamic=True)`` makes every dimension symbolic, which can cost some
# speed, because kernels then cannot specialize on any size.

with fresh_cache(), RecompileLog() as log:
    dynamic_s, dynamic_graphs = run_lengths(torch.compile(block), mark=True)
print(f"recompile records with mark_dynamic: {len(log.lines)}")
print(
    tabulate(
        [[n, a, b] for n, a, b in zip(lengths, static_s, dynamic_s)],
        headers=["sequence length", "dynamic=False (s)", "mark_dynamic (s)"],
        tablefmt="github",
        floatfmt="8.3f",
    )
)
print(
    f"{len(lengths)} lengths cost {sum(static_s):.2f} s of calls with dynamic=False "
    f"({static_graphs} compilations) and {sum(dynamic_s):.2f} s with mark_dynamic "
    f"({dynamic_graphs} compilation{'s' if dynamic_graphs != 1 else ''})."
)

# %%
# Summary
# -------
#
# The table and the bar chart gather the first-call times measured above. *Cold* means an
# empty cache folder (asserted); *warm* means the cache folder written by the cold run of the
# same page, read after ``torch._dynamo.reset()``.

labels = {
    "cold": "whole model, cold",
    "warm": "whole model, warm (same process)",
    "fresh process, cold": "fresh process, cold",
    "fresh process, artifacts": "fresh process, artifacts loaded",
    "regional, cold": "regional, cold",
}
print(f"{device_name}, torch {torch.__version__}, {LAYERS} layers, width {WIDTH}")
print(
    tabulate(
        [[labels[k], v] for k, v in first_s.items()],
        headers=["first call", "seconds"],
        tablefmt="github",
        floatfmt="8.2f",
    )
)

fig, ax = plt.subplots(figsize=(8, 3.5))
bars = ax.barh([labels[k] for k in first_s], list(first_s.values()), color="tab:blue")
ax.bar_label(bars, fmt="%.1f s", padding=3)
ax.invert_yaxis()
ax.set_xlabel("first call (s): compilation plus one run")
ax.set_title(f"First call of a {LAYERS}-layer transformer ({device_name})")
ax.margins(x=0.15)
fig.tight_layout()
plt.show()

# %%
# Conclusion
# ----------
#
# A cold compilation passes through Dynamo, AOTAutograd, Inductor and the kernel compilers,
# and PyTorch's own timers show how long each took. Inductor's on-disk caches skip everything
# after Dynamo when the same graph comes back; Dynamo still traces the model every time.
# ``save_cache_artifacts`` and ``load_cache_artifacts`` carry those caches to a process or
# machine that starts empty (on a GPU with the compiled Triton kernels; on a CPU the C++
# kernels are compiled again there).
# Regional compilation shortens the cold compilation itself by compiling a repeated block
# once, at the price of fusion across blocks. Shapes that change without ``mark_dynamic`` (or
# automatic dynamic) recompile, and no cache makes that free: watch for it with
# ``TORCH_LOGS=recompiles``.
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
# * `torch._logging.set_logs <https://docs.pytorch.org/docs/stable/logging.html>`__

# sphinx_gallery_thumbnail_number = 1
