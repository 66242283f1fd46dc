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
       * How to take a slower step apart with ``torch.profiler``: what grew, in ms per step

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
# in float32 reads the parameter, its gradient and its two moments, and writes back the
# parameter and both moments: seven 4-byte accesses, **28 bytes per parameter**. The best
# any implementation can do is to move those bytes once. PyTorch offers three ways:
#
# * ``foreach=True``: a sequence of ``torch._foreach_*`` ops, each a pass over memory;
# * ``fused=True``: a hand-written kernel that makes one pass;
# * ``torch.compile(opt.step)``: Inductor generates fused kernels from the Python code of
#   the ``foreach`` implementation, for any optimizer, including your own.
#
# The parameters stand in for a stack of ``Linear(width, width)`` layers with random
# gradients. On a GPU the largest width is chosen from the free memory.

import functools
import logging
import statistics
import time
import warnings

import matplotlib.pyplot as plt
import torch
from tabulate import tabulate
from torch._dynamo.utils import compile_times, counters
from torch._inductor.utils import fresh_cache
from torch.profiler import ProfilerActivity, profile

# A note from torch.profiler about reusing a profiler: each one here runs once.
warnings.filterwarnings("ignore", message=".*Profiler clears events.*")

Adam = functools.partial(torch.optim.Adam, lr=1e-3)
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
print(f"{device_name}: {LAYERS} layers, widths {WIDTHS}, torch {torch.__version__}")


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
# called ``opt.step()``. The first call compiles. ``first_call`` times it from an empty
# cache (``fresh_cache()`` points Inductor at a new folder; the cache must miss and never
# hit) and reads how much of it was compiling (``compile_times``: Dynamo, AOTAutograd and
# Inductor). The first compilation in a process also imports Inductor and starts its
# compile workers, once: a one-operation function is compiled first to pay for that, and
# its time is printed apart.


def first_call(fn, *args):
    """Seconds of fn's first call and of compiling in it, from an empty cache."""
    torch._dynamo.reset()
    counters.clear()
    with fresh_cache():
        start = time.perf_counter()
        fn(*args)
        sync()
        seconds = time.perf_counter() - start
    cache = counters["inductor"]
    assert cache["fxgraph_cache_miss"] > 0 and cache["fxgraph_cache_hit"] == 0, cache
    timed = dict(zip(*compile_times(repr="csv", aggregate=True)))
    return seconds, float(timed["_compile.compile_inner"])


params = make_params(WIDTHS[0])
opt = Adam(params, foreach=True)
compiled_step = torch.compile(opt.step)

start_up = first_call(torch.compile(lambda t: t + 1), torch.ones(8, device=device))
# hide a one-time note that the profiler label inside ``step`` is not compiled
torch._logging.set_logs(dynamo=logging.ERROR)
cold = first_call(compiled_step)  # compiles, then takes the first step
torch._logging.set_logs()
assert counters["stats"]["unique_graphs"] > 0
print(f"first call of t + 1, to pay for Inductor's start-up: {start_up[0]:.2f} s")
print(
    f"first call of opt.step: {cold[0]:.2f} s, of which compiling: {cold[1]:.2f} s; "
    f"graphs: {counters['stats']['unique_graphs']}, graph breaks: "
    f"{sum(counters['graph_break'].values())}, capturable: {opt.param_groups[0]['capturable']}"
)

# %%
# The graph break is deliberate. Most built-in optimizers wrap ``step`` in a decorator
# that calls ``torch._dynamo.graph_break()`` around the update, so the update compiles as
# a graph of its own with grad mode off: AOTAutograd treats it as an inference graph, and
# the parameters and state are updated in place, with no extra buffers or copies. Keep
# ``fullgraph=False`` (the default) when you compile ``opt.step``.
#
# On a GPU, ``torch.compile`` also switched the new optimizer to ``capturable=True``
# before creating its state (only if the state does not exist yet, so compile before the
# first eager ``opt.step()``): the step counters live on the GPU.
#
# Record it in a CUDA graph
# -------------------------
#
# A capturable step can be recorded in a CUDA graph. ``cuda_graph`` warms the step up on
# a side stream (three real steps, as the CUDA graph notes recommend), records one call
# and returns its ``replay``: one call that launches every kernel of the step, with no
# Python, guards or launches per kernel. A replay reads and writes the same memory every
# time, so new gradients must be written into the existing ``.grad`` tensors.


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
# An eager float32 Adam and a float64 Adam start from the same parameters, catch up with
# the steps the compiled copy has taken, and then all three take five steps with the same
# fresh gradients. Inductor fuses and reorders the arithmetic, so the compiled result may
# round differently, but its error against float64 must be of the size of the eager one's.

eager_params, ref_params = make_params(WIDTHS[0]), make_params(WIDTHS[0], torch.float64)
eager_opt, ref_opt = Adam(eager_params, foreach=True), Adam(ref_params, foreach=True)
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
# ``step_and_busy`` times six windows of ``steps`` back-to-back calls, at least three and
# about 10 ms or more (the first window warms up), and returns the median time of one step and
# the windows' spread (IQR); it asserts that nothing was compiled meanwhile. Then up to ten
# more calls run under ``torch.profiler``, and it keeps each operator's and range's self
# time per step: CPU time, and on a GPU, kernel time. On a GPU, the union of the intervals
# in which a kernel ran over that profiled loop's own wall time is the **busy** share: at
# 85 % or more the step is bound by the GPU; below, the GPU waited for the CPU.
#
# ``attribute`` compares a row with its reference. A gap within either row's spread is
# just that; a larger one is taken apart: the parts whose time per step grew most (kernel
# time if the slower row keeps the GPU busy, CPU time otherwise), and how much of the gap
# they cover.
#
# The roofline is the time the step's 28 bytes per parameter would take at the copy
# bandwidth that the same helper measures on a large copy (bytes read plus written).


def step_and_busy(step, steps):
    """(median ms per step, spread ms, busy % or None) and self ms per step by part."""
    count, windows, calls = counters["frames"]["total"], [], min(steps, 10)
    for _ in range(6):
        sync()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        windows.append((time.perf_counter() - start) / steps * 1e3)
    kinds = [ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * (device == "cuda")
    with profile(activities=kinds) as prof:
        start = time.perf_counter()
        for _ in range(calls):
            step()
        sync()
        wall_us = (time.perf_counter() - start) * 1e6  # time_range is in microseconds
    assert counters["frames"]["total"] == count, "compiled while timing"
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    spans = [e.time_range for e in kernels if not e.is_user_annotation]  # no CPU ranges
    busy, reach, parts = 0.0, 0.0, {True: {}, False: {}}
    for span in sorted(
        spans, key=lambda r: r.start
    ):  # two streams' overlap counts once
        busy += max(0.0, span.end - max(span.start, reach))
        reach = max(reach, span.end)
    for e in prof.key_averages():
        gpu = e.device_type.name != "CPU" and not e.is_user_annotation  # kernels
        us = e.self_device_time_total if gpu else e.self_cpu_time_total
        side = parts[gpu]  # kernel time on the GPU, self CPU time on the CPU
        side[e.key] = side.get(e.key, 0.0) + us / 1e3 / calls
    q1, median, q3 = statistics.quantiles(windows[1:], n=4)  # the first warms up
    return (median, q3 - q1, 100 * busy / wall_us if device == "cuda" else None), parts


def attribute(label, name, ref, times, parts):
    """Print whether `name` is slower than `ref` beyond both spreads and, if so, what grew."""
    (t, spread, busy), (t0, spread0, busy0) = times[name], times[ref]
    gap = t - t0
    head = f"{label}, {name} vs {ref}: {t:.3f} vs {t0:.3f} ms ({gap:+.3f} ms)"
    if abs(gap) <= max(spread, spread0):
        return print(f"{head}, within the spread ({spread:.3f} and {spread0:.3f} ms)")
    if gap < 0:
        return print(f"{head}, faster beyond the spread")
    gpu = busy is not None and (t * busy - t0 * busy0) / 100 / gap >= 0.5
    mine, theirs = parts[name][gpu], parts[ref][gpu]
    diff = sorted(
        ((ms - theirs.get(k, 0.0), k) for k, ms in mine.items()), reverse=True
    )
    grew = [(k, ms) for ms, k in diff[:3] if ms > 0]
    covered = sum(ms for _, ms in grew)
    named = "; ".join(f"{k[:48]} {ms:+.3f} ms" for k, ms in grew)
    print(
        f"{head}, slower beyond the spread. {'GPU kernel' if gpu else 'Self CPU'} time per"
        f" step that grew most: {named}: {100 * covered / gap:.0f} % of the gap; "
        f"the rest, {gap - covered:+.3f} ms net, over the other parts and the time outside every part"
    )


src = torch.rand(2**28 if device == "cuda" else 2**25, device=device)
dst = torch.empty_like(src)
(copy_ms, copy_spread, _), _ = step_and_busy(functools.partial(dst.copy_, src), 20)
bytes_per_ms = 2 * src.nbytes / copy_ms
print(
    f"copy: {bytes_per_ms / 1e6:.0f} GB/s; {copy_ms:.3f} ms, spread {copy_spread:.3f} ms"
)
del src, dst

# %%
# The benchmark
# -------------
#
# Every variant steps the same parameters with its own optimizer state, built just before
# it is timed. On a GPU, ``fused=True`` (with ``capturable=True``) and the compiled step
# are also recorded in CUDA graphs, so that they meet under the same conditions. "x fused"
# is a variant's speed relative to ``fused=True`` under the same conditions.
# ``torch._dynamo.reset()`` before each variant keeps one optimizer's compiled code from
# being checked against the next one.

variants = {
    "eager foreach": lambda ps: Adam(ps, foreach=True).step,
    "eager fused": lambda ps: Adam(ps, fused=True).step,
    "compiled": lambda ps: torch.compile(Adam(ps, foreach=True).step),
}
refs = {"compiled": ["eager foreach", "eager fused"]}
if device == "cuda":
    variants["fused + CUDA graph"] = lambda ps: cuda_graph(
        Adam(ps, fused=True, capturable=True).step
    )
    variants["compiled + CUDA graph"] = lambda ps: cuda_graph(variants["compiled"](ps))
    refs["compiled + CUDA graph"] = ["fused + CUDA graph", "compiled"]

rows, results = [], {}
for width in WIDTHS:
    params = make_params(width)
    n = sum(p.numel() for p in params)
    roofline_ms = 28 * n / bytes_per_ms
    steps = max(3, min(100, round(10 / roofline_ms)))
    times, parts = {}, {}
    results[f"{n / 1e6:.1f} M params"] = times, parts
    for name, make_step in variants.items():
        torch._dynamo.reset()
        step = make_step(params)
        step()  # compiles the compiled variants and creates the optimizer state
        times[name], parts[name] = step_and_busy(step, steps)
        del step
    for name, (step_ms, spread, busy) in times.items():
        fused_ms = times["fused + CUDA graph" if "graph" in name else "eager fused"][0]
        pct = 100 * roofline_ms / step_ms  # known to within both spreads:
        tol = pct * (copy_spread / copy_ms + spread / step_ms)
        vs = "within" if abs(pct - 100) <= tol else "above" if pct > 100 else "below"
        gpu = [] if busy is None else [busy, "GPU" if busy >= 85 else "CPU"]
        row = [f"{n / 1e6:.1f}", name, step_ms, spread, *gpu, pct, vs]
        rows.append(row + [fused_ms / step_ms])
    del params

print(f"Adam, float32, {device_name}; median step times, spread = IQR of the windows")
gpu = ["busy %", "bound"] if device == "cuda" else []
headers = ["params (M)", "variant", "step (ms)", "spread (ms)", *gpu]
headers += ["% of copy roofline", "vs 100 %", "x fused"]
fmt = ["", "", ".3f", ".3f", *[".0f", ""][: len(gpu)], ".1f", "", ".2f"]
print(tabulate(rows, headers, "github", fmt))
where = {w: [row[-2] for row in rows].count(w) for w in ["within", "above", "below"]}
print("rows by their share of the copy roofline, against 100 % and the spreads:", where)
for size, (times, parts) in results.items():
    for name, candidates in refs.items():
        ref = min(candidates, key=lambda c: times[c][0])
        attribute(size, name, ref, times, parts)

# %%
# The chart draws the roofline column: how close each variant came to moving its bytes
# at the copy's speed, for every size.

fig, ax = plt.subplots(figsize=(8, 3.5))
for name in variants:
    ax.plot(
        *zip(*[(float(r[0]), r[-3]) for r in rows if r[1] == name]), "o-", label=name
    )
ax.axhline(100, color="gray", linestyle="--")
ax.set(xscale="log", xlabel="parameters (M)", ylabel="% of copy roofline")
ax.set_title(f"Adam step, {device_name}")
ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
fig.tight_layout()
plt.show()

# %%
# Reading the table
# -----------------
#
# * **% of copy roofline**: 100 % would mean that the step moved its 28 bytes per
#   parameter as fast as ``dst.copy_(src)`` moves memory. Eager ``foreach`` makes several
#   passes where one would do; ``fused=True`` and the compiled step make one. Both the
#   copy and the step carry a spread: **vs 100 %** says "within" when 100 % lies within
#   them (at the roofline, as far as these timings tell). "Above" means the copy kernel
#   is not the fastest way the device moves memory: on a CPU, for example, a copy may
#   read the memory it overwrites (a read its byte count leaves out), while Adam writes
#   over memory it has just read.
# * **busy %** and **bound** (GPU only): over the profiled loop; below 85 % the GPU waited
#   for the CPU for the rest of the step. **CUDA graph** rows launch the whole step at
#   once, so comparing them compares the kernels.
# * The lines under the table take a slower row apart. The profiler's names for the
#   compiled step's CPU work: ``TorchDynamo Cache Lookup`` (checking the guards of the
#   compiled code), ``Torch-Compiled Region`` (running a compiled frame),
#   ``## Call CompiledFxGraph ... ##`` (the generated code: on a CPU, its C++ kernels too)
#   and ``cudaLaunchKernel`` or ``cuLaunchKernel`` (launching a kernel).
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
# **On a CPU** the optimizer is not capturable, and the compiled C++ kernel recomputes the
# bias corrections ``1 - beta ** step`` for every vector of elements it updates;
# ``fused=True`` computes them once per parameter, and :ref:`foreach_map_recipe` once per
# step in your own fused update.
#
# Conclusion
# ----------
#
# Compiling ``opt.step()`` takes one line; the graph breaks that most built-in optimizers
# report are their own, so ``fullgraph`` stays ``False``. The compiled step matched the
# eager one against a float64 reference. The table measured it against the copy roofline
# and ``fused=True`` under the same conditions, each time with its spread; on a GPU, the
# busy share shows whether a step waits for the CPU, and a slower row is taken apart into
# the parts that grew.
#
# Further reading
# ---------------
#
# * :ref:`compiling_optimizer_lr_scheduler`: changing the learning rate of a compiled step
#   without recompiling.
# * :ref:`foreach_map_recipe`: writing your own fused optimizer update with ``foreach_map``.
# * :ref:`triton_custom_op_tutorial`: a hand-written Triton kernel as an operator, measured
#   against the kernel Inductor generates.
# * `torch.optim <https://docs.pytorch.org/docs/stable/optim.html>`__: the ``foreach``,
#   ``fused`` and ``capturable`` options.
# * `CUDA graphs <https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-graphs>`__ in
#   the PyTorch notes: capture, warm-up and memory pools.
# * `pytorch/pytorch#104053 <https://github.com/pytorch/pytorch/issues/104053>`__: the
#   tracking issue behind the optimizer's deliberate graph breaks.

# sphinx_gallery_thumbnail_number = 1
