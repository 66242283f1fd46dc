"""
.. _compiling_optimizer_recipe:

Compiling the optimizer step
============================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How to compile ``opt.step()`` with ``torch.compile``, and why the built-in
         optimizers break the graph on purpose
       * How to check that the compiled step computes the same update as the eager one
       * How to measure an optimizer step against the copy-bandwidth roofline, and how to
         compare it fairly with ``fused=True`` (CUDA graph against CUDA graph)
       * How to tell from ``torch.profiler`` whether a step keeps the GPU busy or waits
         for the CPU

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
       * A CUDA GPU of compute capability 7.5 or newer for the timings (current CUDA
         wheels need it); runs on CPU with smaller sizes
       * On CPU, Inductor needs a C++ compiler and the Python headers
"""

# %%
# Overview
# --------
#
# An optimizer step visits every parameter once and does little arithmetic on each. Adam
# in float32 reads the parameter, its gradient and its two moments (``exp_avg`` and
# ``exp_avg_sq``), and writes back the parameter and both moments: seven 4-byte accesses,
# **28 bytes per parameter**. The step is bound by memory traffic, and the best any
# implementation can do is to move those bytes once. PyTorch offers three ways to run it:
#
# * ``foreach=True``: a sequence of ``torch._foreach_*`` ops, each a separate pass over
#   memory;
# * ``fused=True``: a hand-written kernel that makes one pass;
# * ``torch.compile(opt.step)``: Inductor generates fused kernels from the Python code of
#   the ``foreach`` implementation, for any optimizer, including your own.
#
# The parameters below stand in for a stack of ``Linear(width, width)`` layers (a weight
# and a bias each) with random gradients: the optimizer does not care where they came
# from. On a GPU the largest width is chosen from the free memory.

import functools
import logging
import statistics
import time
import warnings

import matplotlib.pyplot as plt
import torch
from tabulate import tabulate
from torch._dynamo.utils import counters
from torch._inductor.utils import fresh_cache
from torch.profiler import ProfilerActivity, profile

# A note from torch.profiler about reusing a profiler: each one here runs once.
warnings.filterwarnings("ignore", message=".*Profiler clears events.*")

LR = 1e-3
device = "cuda" if torch.cuda.is_available() else "cpu"
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
if device == "cuda":
    LAYERS = 10
    free_bytes, _ = torch.cuda.mem_get_info()
    # at most 40 bytes per parameter: p, grad, one optimizer's state, eager temporaries
    WIDTHS = [
        w for w in [1024, 2048, 4096, 10240] if LAYERS * w * w * 40 < 0.8 * free_bytes
    ]
    device_name = torch.cuda.get_device_name()
else:
    LAYERS, WIDTHS = 4, [512, 1024, 2048]
    device_name = f"CPU, threads: {torch.get_num_threads()}"
print(
    f"{device_name}: {LAYERS} Linear layers of widths {WIDTHS}, torch {torch.__version__}"
)


def make_params(width, dtype=torch.float32):
    """Weights and biases of LAYERS Linear layers, with gradients (the same for any dtype)."""
    gen = torch.Generator(device=device).manual_seed(0)
    params = []
    for shape in [(width, width), (width,)] * LAYERS:
        p = torch.randn(shape, device=device, generator=gen).to(dtype)
        params.append(torch.nn.Parameter(p))
        params[-1].grad = torch.randn(shape, device=device, generator=gen).to(dtype)
    return params


# %%
# Compile the step
# ----------------
#
# Pass the bound method ``opt.step`` to ``torch.compile`` and call the result where you
# called ``opt.step()``. The first call compiles. To make its duration a *cold* compile
# time, it runs after ``torch._dynamo.reset()`` inside ``fresh_cache()``, which points
# Inductor at a new, empty cache; the cell asserts that the cache missed and never hit,
# and that graphs were compiled.

params = make_params(WIDTHS[0])
opt = torch.optim.Adam(params, lr=LR, foreach=True)
compiled_step = torch.compile(opt.step)

torch._dynamo.reset()
counters.clear()
# hide a one-time note that the profiler label inside ``step`` is not compiled
torch._logging.set_logs(dynamo=logging.ERROR)
with fresh_cache():
    t0 = time.perf_counter()
    compiled_step()  # compiles, then takes the first step
    if device == "cuda":
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
torch._logging.set_logs()
fx_cache = counters["inductor"]
assert fx_cache["fxgraph_cache_miss"] > 0 and fx_cache["fxgraph_cache_hit"] == 0
assert counters["stats"]["unique_graphs"] > 0
print(f"first call, cold: {compile_s:.1f} s")
print(
    f"graphs compiled: {counters['stats']['unique_graphs']}, "
    f"graph breaks: {sum(counters['graph_break'].values())}, "
    f"FX-graph cache misses: {fx_cache['fxgraph_cache_miss']}, hits: 0"
)
print(f"capturable after compiling: {opt.param_groups[0]['capturable']}")

# %%
# The graph break is deliberate. Most built-in optimizers (``Adam``, ``AdamW``, ``SGD``
# and others) wrap ``step`` in a decorator that calls ``torch._dynamo.graph_break()``
# around the update, and the break counted above is the one Dynamo took there. The update
# then compiles as a graph of its own with grad mode off, so AOTAutograd treats it as an
# inference graph and the parameters and state are updated in place, with no extra buffers
# or copies. Keep ``fullgraph=False`` (the default) when you compile ``opt.step``.
#
# On a GPU, ``torch.compile`` also switched the new optimizer to ``capturable=True`` before
# creating its state: the step counters live on the GPU and the kernels read them like any
# other tensor. It does so only when the state does not exist yet, so compile the step
# before the first eager ``opt.step()``.
#
# Record it in a CUDA graph
# -------------------------
#
# A capturable step can be recorded in a CUDA graph. ``cuda_graph`` warms the step up on a
# side stream (three real steps, as the CUDA graph notes recommend), records one call and
# returns its ``replay``: one call that launches every kernel of the step, with no Python,
# guards or launches per kernel. A replay reads and writes the same memory every time, so
# new gradients must be written into the existing ``.grad`` tensors, and a learning rate
# that changes must be a tensor (see :ref:`compiling_optimizer_lr_scheduler`).


def cuda_graph(step):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


if device == "cuda":
    compiled_step = cuda_graph(compiled_step)  # takes 3 more steps
taken = 4 if device == "cuda" else 1  # steps taken so far with the first gradients
label = "compiled + CUDA graph" if device == "cuda" else "compiled"

# %%
# Check it
# --------
#
# The compiled step must compute the same update as the eager one. An eager float32 Adam
# and a float64 Adam start from the same parameters, catch up with the steps the compiled
# copy has taken, and then all three take five steps with the same fresh gradients (on a
# GPU, the compiled copy by replaying its CUDA graph). Inductor fuses and reorders the
# arithmetic, so the compiled result may round differently, but its error against float64
# must be of the size of the eager one's.

eager_params = make_params(WIDTHS[0])
ref_params = make_params(WIDTHS[0], torch.float64)
eager_opt = torch.optim.Adam(eager_params, lr=LR, foreach=True)
ref_opt = torch.optim.Adam(ref_params, lr=LR, foreach=True)
for _ in range(taken):
    eager_opt.step()
    ref_opt.step()
for _ in range(5):
    for p, e, r in zip(params, eager_params, ref_params):
        g = torch.randn_like(p)
        for q in (p, e, r):
            q.grad.copy_(g)
    compiled_step()
    eager_opt.step()
    ref_opt.step()
errors = {
    name: max((p.double() - r).abs().max().item() for p, r in zip(ps, ref_params))
    for name, ps in [("eager", eager_params), (label, params)]
}
print(f"largest error against float64 Adam after {taken + 5} steps:")
print(tabulate(errors.items(), headers=["step", "error"], floatfmt=".2e"))
assert errors[label] <= 4 * errors["eager"] + 1e-6
del params, opt, compiled_step, eager_params, ref_params, eager_opt, ref_opt

# %%
# Measuring
# ---------
#
# ``step_and_busy`` times six windows of ``steps`` back-to-back calls (the first warms
# up) and returns the median time of one step and the windows' spread (IQR); it asserts
# that nothing was compiled meanwhile. On a GPU one more window runs under
# ``torch.profiler``: the union of the intervals in which a kernel ran, per step, is the
# GPU's **busy** time. At a busy share of 85 % or more the step is bound by the GPU;
# below, the GPU sat idle for the rest, waiting for the CPU (Python, guards, kernel
# launches). On a CPU there is no separate device to be busy or idle. ``explain_slower``
# prints one line per compiled variant slower than the fastest of its references (eager,
# or the rung below it), saying where the extra time went.
#
# The roofline is the time the step's 28 bytes per parameter would take at the device's
# copy bandwidth, measured by the same helper on a large copy (bytes read plus bytes
# written). Copy and steps alike run back to back with no cache flush between calls
# (unlike ``triton.testing.do_bench``, which flushes the GPU's L2 cache before each): on
# a GPU the working sets, hundreds of MB to GBs, dwarf the L2 cache, so that makes
# little difference.


def step_and_busy(step, steps=10):
    """Median step time, GPU busy time per step (None on a CPU) and spread, in ms."""
    count, windows, busy = counters["frames"]["total"], [], None
    for _ in range(6):  # windows of `steps` back-to-back calls, without the profiler
        sync()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        windows.append((time.perf_counter() - start) / steps * 1e3)
    if device == "cuda":  # one more window, profiled
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                step()
            sync()
        kernels = [e.time_range for e in prof.events() if e.device_type.name == "CUDA"]
        busy, reach = 0.0, float("-inf")  # the union: two streams' overlap counts once
        for span in sorted(kernels, key=lambda r: r.start):
            busy += max(0.0, span.end - max(span.start, reach))
            reach = max(reach, span.end)
        busy = busy / steps / 1e3  # time_range is in microseconds
    assert counters["frames"]["total"] == count, "compiled while timing"
    q1, _, q3 = statistics.quantiles(windows[1:], n=4)  # the first window warms up
    return statistics.median(windows[1:]), busy, q3 - q1


def explain_slower(label, times, refs):
    """Print where the extra time went, for each variant slower than its fastest ref."""
    slower = 0
    for name, candidates in refs.items():
        ref = min(candidates, key=lambda c: times[c][0])
        (t, busy, spread), (t0, busy0, spread0) = times[name], times[ref]
        if t <= t0:
            continue
        slower += 1
        if busy is None:  # on a CPU, the spread says whether the timings can be trusted
            why = f"spread (IQR) {spread:.3f} and {spread0:.3f} ms: " + (
                "steady, so it is the compiled step's own CPU work"
                if max(spread / t, spread0 / t0) < 0.1
                else "over 10 % of a step, other work on the machine disturbed them"
            )
        else:
            why = (
                f"GPU busy {busy:.3f} ms ({100 * busy / t:.0f} %) against {busy0:.3f} ms"
                f" ({100 * busy0 / t0:.0f} %): {busy - busy0:+.3f} ms of kernel time, "
                f"{t - busy - (t0 - busy0):+.3f} ms of GPU idle (waiting for the CPU)"
            )
        print(
            f"{label}, {name}: {t / t0:.2f}x the time of {ref} ({t:.3f} vs {t0:.3f} ms); {why}"
        )
    return slower


src = torch.rand(2**28 if device == "cuda" else 2**25, device=device)
dst = torch.empty_like(src)
copy = functools.partial(dst.copy_, src)
copy_ms, _, _ = step_and_busy(copy, steps=20 if device == "cuda" else 2)
bytes_per_ms = 2 * src.nbytes / copy_ms
print(
    f"copy bandwidth: {bytes_per_ms / 1e6:.0f} GB/s ({2 * src.nbytes / 2**20:.0f} MiB moved)"
)
del src, dst

# %%
# The benchmark
# -------------
#
# Every variant steps the same parameters, each with its own optimizer (so its own
# state), built just before it is timed and freed after. On a GPU, the hand-written
# ``fused=True`` step (with ``capturable=True``) and the compiled step are also recorded in
# CUDA graphs, so that they meet under the same conditions. "x fused" is the speed of a
# variant relative to ``fused=True`` under the same conditions: with CUDA graphs for the
# recorded variants, without for the others. ``torch._dynamo.reset()`` before each variant
# keeps one optimizer's compiled code from being checked against the next one.

variants = {
    "eager foreach": lambda ps: torch.optim.Adam(ps, lr=LR, foreach=True).step,
    "eager fused": lambda ps: torch.optim.Adam(ps, lr=LR, fused=True).step,
    "compiled": lambda ps: torch.compile(
        torch.optim.Adam(ps, lr=LR, foreach=True).step
    ),
}
refs = {"compiled": ["eager foreach", "eager fused"]}
if device == "cuda":
    variants["fused + CUDA graph"] = lambda ps: cuda_graph(
        torch.optim.Adam(ps, lr=LR, fused=True, capturable=True).step
    )
    variants["compiled + CUDA graph"] = lambda ps: cuda_graph(
        torch.compile(torch.optim.Adam(ps, lr=LR, foreach=True).step)
    )
    refs["compiled + CUDA graph"] = ["fused + CUDA graph", "compiled"]

rows, results = [], {}
for width in WIDTHS:
    params = make_params(width)
    n = sum(p.numel() for p in params)
    roofline_ms = 28 * n / bytes_per_ms
    steps = max(1, min(100, round(10 / roofline_ms)))  # windows of 10 ms or more
    times = results[f"{n / 1e6:.1f} M params"] = {}
    for name, make_step in variants.items():
        torch._dynamo.reset()
        step = make_step(params)
        step()  # compiles the compiled variants and creates the optimizer state
        times[name] = step_and_busy(step, steps)
        del step
    for name, (step_ms, busy, _) in times.items():
        fused_ms = times["fused + CUDA graph" if "graph" in name else "eager fused"][0]
        share = None if busy is None else 100 * busy / step_ms
        gpu = [] if busy is None else [busy, share, "GPU" if share >= 85 else "CPU"]
        row = [f"{n / 1e6:.1f}", name, step_ms, *gpu, 100 * roofline_ms / step_ms]
        rows.append(row + [fused_ms / step_ms])
    del params
    if device == "cuda":
        torch.cuda.empty_cache()

print(f"Adam, float32, {device_name}; median step times")
gpu = ["GPU busy (ms)", "busy %", "bound"] if device == "cuda" else []
headers = ["params (M)", "variant", "step (ms)", *gpu, "% of copy roofline", "x fused"]
fmt = ["", "", ".3f", *[".3f", ".0f", ""][: len(gpu)], ".1f", ".2f"]
print(tabulate(rows, headers, "github", fmt))
if device == "cpu":
    print("On a CPU there is no separate device to be busy or idle: no GPU columns.")
slower = sum(explain_slower(label, t, refs) for label, t in results.items())
print(f"compiled rows slower than their reference: {slower}")

# %%
# The chart draws the same numbers: for every size, each variant's step, split on a GPU
# into the time the GPU was busy and the time it sat idle.

fig, axes = plt.subplots(1, len(results), figsize=(10, 3), sharey=True)
for ax, (label, times) in zip(axes, results.items()):
    names = list(times)[::-1]
    busy = [times[k][1] or times[k][0] for k in names]  # on a CPU: the step time
    ax.barh(names, busy, label="GPU busy")
    if device == "cuda":
        idle = [times[k][0] - b for k, b in zip(names, busy)]
        ax.barh(names, idle, left=busy, label="GPU idle")
    ax.set(title=label, xlabel="ms per step")
if device == "cuda":
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1, 1))
fig.suptitle(f"Adam step, {device_name}: median times")
fig.tight_layout()
plt.show()

# %%
# Reading the table
# -----------------
#
# * **% of copy roofline**: 100 % would mean that the step moved its 28 bytes per
#   parameter as fast as the device copies memory. Eager ``foreach`` makes several
#   passes over memory where one would do; ``fused=True`` and the compiled step make
#   one. How tight a bound the copy is depends on the device. On a GPU, with working
#   sets far larger than its caches, it is close: near 100 %, a step moves memory
#   about as fast as the GPU can. On a CPU it is not: tensors that fit in the
#   last-level cache are reread from there on back-to-back calls, a copy may also
#   fetch the memory it overwrites (a read its byte count leaves out), and a few cores
#   keep more requests in flight on seven arrays than on two, so an eager fused step
#   can exceed 100 % by far.
# * **GPU busy**, **busy %** and **bound** (GPU only): a step whose GPU is busy less than
#   85 % of the time waits for the CPU for the rest. On every call, a compiled step checks
#   guards on every parameter, gradient and state tensor and launches its kernels; the
#   shorter the step, the more that weighs. A share a little above 100 % is noise.
# * **CUDA graph** rows remove that per-call work for both ``fused=True`` and the compiled
#   step, so comparing the two of them there compares the kernels.
# * The lines under the table say where a slower compiled row's extra time went. On a
#   GPU, extra *idle* time is CPU work (guards, launches) that a CUDA graph removes; extra
#   *busy* time is slower kernels. On a CPU, a steady slower row is the compiled step's own
#   work (see "On a CPU" below); an unsteady one is worth measuring again.
#
# Going further
# -------------
#
# **A recorded step in a training loop.** The graph replays fixed memory addresses, so the
# gradients must stay where they are (``zero_grad(set_to_none=False)``), and a learning
# rate that changes must live in a tensor (see :ref:`compiling_optimizer_lr_scheduler`):
#
# .. code-block:: python
#
#     step = torch.compile(opt.step)
#     loss_fn(model(x), y).backward()  # creates the .grad tensors
#     replay = cuda_graph(step)  # compiles; its warm-up calls are real steps
#     for x, y in loader:
#         opt.zero_grad(set_to_none=False)  # keep the .grad tensors in place
#         loss_fn(model(x), y).backward()
#         replay()  # instead of opt.step()
#
# ``torch.compile(opt.step, mode="reduce-overhead")`` records the graph for you but still
# runs the guards on every call; mark the gradients with ``mark_static_address`` first
# (``torch._dynamo``), or it copies every gradient into a buffer of its own on each call.
#
# **On a CPU.** The bias corrections ``1 - beta ** step`` depend only on the step, but the
# compiled step fuses them into the kernel that updates each parameter, where they run for
# every vector of elements; ``fused=True`` computes them once per parameter, and
# :ref:`foreach_map_recipe` once per step in your own fused update.
#
# Conclusion
# ----------
#
# Compiling ``opt.step()`` takes one line; the graph breaks that most built-in optimizers
# report are their own, so ``fullgraph`` stays ``False``. The compiled step matched the
# eager one against a float64 reference. The table measured it against the copy-bandwidth
# roofline and against ``fused=True`` under the same conditions; on a GPU, the busy share
# from the profiler shows whether a step waits for the CPU, and a CUDA graph removes that
# wait.
#
# Further reading
# ---------------
#
# * :ref:`compiling_optimizer_lr_scheduler`: changing the learning rate of a compiled step
#   without recompiling.
# * :ref:`foreach_map_recipe`: writing your own fused optimizer update with ``foreach_map``.
# * `torch.optim <https://docs.pytorch.org/docs/stable/optim.html>`__: the ``foreach``,
#   ``fused`` and ``capturable`` options.
# * `CUDA graphs <https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-graphs>`__ in
#   the PyTorch notes: capture, warm-up and memory pools.
# * `pytorch/pytorch#104053 <https://github.com/pytorch/pytorch/issues/104053>`__: the
#   tracking issue behind the optimizer's deliberate graph breaks.

# sphinx_gallery_thumbnail_number = 1
