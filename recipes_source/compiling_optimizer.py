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

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later, any OS
       * A CUDA GPU of compute capability 7.5 or newer for the timings (current CUDA
         wheels need it), with sizes chosen from its free memory (the largest, 1,049 M
         parameters, peaks at about 45 GiB); runs on CPU with smaller sizes
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

import matplotlib.pyplot as plt
import torch
from tabulate import tabulate
from torch._dynamo.utils import counters

import measure

Adam = functools.partial(torch.optim.Adam, lr=1e-3)
device = "cuda" if torch.cuda.is_available() else "cpu"
measure.require(cxx=device == "cpu", triton=device == "cuda")  # what Inductor needs
watch = measure.watch_cxx() if device == "cpu" else None  # logs the C++ compiler's runs
if device == "cuda":
    LAYERS = 10
    free_bytes, _ = torch.cuda.mem_get_info()
    # the peak (see the benchmark): 44 bytes per parameter and the roofline's 2 GiB copy
    WIDTHS = [
        w
        for w in [1024, 2048, 4096, 10240]
        if LAYERS * w * w * 44 + 2**31 < 0.8 * free_bytes
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
# called ``opt.step()``. The first call compiles. ``measure.cold_compile`` times it from
# an empty cache (Inductor gets a new cache folder; the cache must miss and never hit) and
# reads how much of it was compiling (Dynamo, AOTAutograd and Inductor). The first
# compilation in a process also pays for what later ones reuse: Inductor's modules and
# compile workers and, on a CPU, small C++ programs that test which vector instructions
# the compiler and the processor support (kept in the cache, empty here) and the
# preprocessing of the header that every kernel includes. A one-operation function is
# compiled first, and its time printed apart. On a CPU every compilation runs the C++
# compiler; ``measure.watch_cxx()`` (first cell) logs each of its runs, so the lines
# give its seconds apart.

params = make_params(WIDTHS[0])
opt = Adam(params, foreach=True)
compiled_step = torch.compile(opt.step)

one = torch.ones(8, device=device)
start_up = measure.cold_compile(torch.compile(lambda t: t + 1), one, device=device)
# hide a one-time note that the profiler label inside ``step`` is not compiled
torch._logging.set_logs(dynamo=logging.ERROR)
cold = measure.cold_compile(compiled_step, device=device)  # compiles, takes a step
torch._logging.set_logs()
for what, c in [("t + 1, the process's first compile", start_up), ("opt.step", cold)]:
    cxx = "" if c.cxx is None else f" (the C++ compiler ran {c.cxx:.2f} s)"
    print(f"first call of {what}: {c.seconds:.2f} s, of which compiling", end=" ")
    print(f"{c.compiling:.2f} s{cxx}")
breaks = sum(counters["graph_break"].values())
capturable = opt.param_groups[0]["capturable"]
print(f"opt.step: graphs {cold.graphs}, breaks {breaks}, capturable: {capturable}")

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
# time, so new gradients must be written into the existing ``.grad`` tensors. The graph
# holds no reference to that memory: if the optimizer that owns the state were freed,
# the allocator would count its memory as free while replays still wrote there. The
# function ``cuda_graph`` returns therefore keeps ``step``, and with it the optimizer.


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

    def replay():
        graph.replay()

    replay.step = step  # keeps the optimizer, and the memory the graph writes, alive
    return replay


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
# The benchmark
# -------------
#
# Timings come from the site's measurement core (:ref:`measuring_recipe` explains it).
# The **roofline** is the time the step's 28 bytes per parameter would take at the speed
# of a large on-device copy (bytes read plus written per ms). ``measure.compare(...,
# roofline_bytes=28 * n)`` times that copy as one more variant in the same interleaved
# windows as the steps, so both see the machine in the same state. Each row is checked
# against it: a GPU cannot be busy for less time than moving the step's bytes at copy
# speed takes.
#
# Every variant steps the same parameters with its own optimizer state, except the two
# compiled rows: the CUDA graph records the "compiled" row's own step, so one compiled
# ``Adam.step`` exists and no call checks the guards of another optimizer's compiled
# code. On a GPU, ``fused=True`` (with ``capturable=True``) is also
# recorded in a CUDA graph, so that fused and compiled meet under the same conditions.
# "x fused" is a variant's speed relative to ``fused=True`` under the same conditions.
# ``torch._dynamo.reset()`` before each size drops the previous size's compiled step.
#
# On a GPU, the largest size holds at its peak eleven float32 values per parameter, 44
# bytes: the parameter, its gradient, the two moments of each of the four optimizers,
# and the square roots of the second moments that eager ``foreach`` computes into new
# tensors during its step; the roofline's copy adds its own 2 GiB. A line under the
# table prints the peak that PyTorch's allocator saw.


def make_steps(ps):
    steps = {
        "eager foreach": Adam(ps, foreach=True).step,
        "eager fused": Adam(ps, fused=True).step,
        "compiled": torch.compile(Adam(ps, foreach=True).step),
    }
    if device == "cuda":
        fused = Adam(ps, fused=True, capturable=True)
        steps["fused + CUDA graph"] = cuda_graph(fused.step)
        steps["compiled + CUDA graph"] = cuda_graph(steps["compiled"])
    return steps


refs = {"compiled": ["eager foreach", "eager fused"]}
if device == "cuda":
    refs["compiled + CUDA graph"] = ["fused + CUDA graph"]  # graph against graph
rows, shares, results = [], {}, {}
for width in WIDTHS:
    torch._dynamo.reset()
    params = make_params(width)
    n = sum(p.numel() for p in params)
    steps = make_steps(params)  # compare's warm-up compiles and creates the state
    res = measure.compare(steps, device, roofline_bytes=28 * n)
    results[f"{n / 1e6:.1f} M params"] = res
    for name, row in res.items():
        fused = res["fused + CUDA graph" if "graph" in name else "eager fused"]
        pct = 100 * res.roofline_ms / row.ms
        shares.setdefault(name, []).append((n / 1e6, pct))
        rows.append([f"{n / 1e6:.1f}", name, *res.cells(name), pct, fused.ms / row.ms])
    del params, steps

print(f"Adam, float32, {device_name}")
headers = ["params (M)", "variant", *res.headers(), "% of copy roofline", "x fused"]
fused = "fused + CUDA graph" if device == "cuda" else "eager fused"
for kind, name in (("compiled", label), ("fused", fused)):
    measure.headline(f"{kind}, % of copy roofline (largest)", shares[name][-1][1], "%")
print(tabulate(rows, headers, "github", ["", "", *res.formats(), ".1f", ".2f"]))
for i, (size, res) in enumerate(results.items()):
    best = min(res, key=lambda k: res[k].ms)
    bound = "" if res[best].bound is None else f", {res[best].bound}-bound"
    print(
        f"{size}: lowest median {best}, {shares[best][i][1]:.0f} % of copy roofline"
        f"{bound}; copy {res.bytes_per_ms / 1e6:.0f} GB/s in the same windows"
    )
    print(f"{size}: {res.against('compiled')}")
    for name, candidates in refs.items():
        ref = min(candidates, key=lambda c: res[c].ms)
        _, lo, hi, _ = res.ratio(name, ref)
        noise = max(res[name].spread, res[ref].spread)
        print(res.versus(name, ref, f"{size}, "))
        if not lo <= 1 <= hi:  # parts were named: the rows' noise may hide small ones
            print(f"    parts under {noise:.3f} ms (the rows' spread) may be noise")
if device == "cuda":  # all that was allocated at once, at the largest size
    peak, copy = torch.cuda.max_memory_allocated(), res.bytes_per_ms * res.copy.ms
    values = (peak - copy) / (4 * n)  # float32 values per parameter
    print(f"peak GPU memory: {peak / 2**20:,.0f} MiB: the roofline's copy, ", end="")
    print(f"{copy / 2**20:,.0f} MiB, + {values:.2f} float32 values per parameter")

# %%
# The chart draws the roofline column: how close each variant came to moving its bytes
# at the copy's speed, for every size.

fig, ax = plt.subplots(figsize=(8, 3.5))
for name, points in shares.items():
    ax.plot(*zip(*points), "o-", label=name)
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
#   passes where one would do; ``fused=True`` and the compiled step make one. Above 100 %
#   means the copy kernel is not the fastest way the device moves memory: on a CPU, for
#   example, a copy may read the memory it overwrites (a read its byte count leaves out),
#   while Adam writes over memory it has just read.
# * **busy %** and **bound** (GPU only): kernel time over the unprofiled step; below 85 %
#   the GPU waited for the CPU for the rest of the step. **CUDA graph** rows launch the
#   whole step at once, so comparing them compares the kernels.
# * Under the table, for each size, one line sorts every variant into faster than, tied
#   with and slower than the compiled step (by their paired intervals); the next lines
#   compare the compiled row with the faster eager reference, and the compiled CUDA
#   graph with the fused one, and name the parts that moved. The compiled step's CPU
#   work shows up as ``guards`` (checking the compiled code's guards before each call),
#   ``compiled-code entry`` (running a compiled frame), ``compiled code`` (the generated
#   code: on a CPU, its C++ kernels too) and ``kernel launches``. A part is an average
#   over a few profiled steps: one smaller than the two rows' spread (printed under
#   the comparison) could be the noise of the windows, and the page reads nothing into it.
#
# On a GPU, where the two CUDA-graph rows differ, the gap may sit inside the kernels
# (their own speed) or between them (launches, waiting). ``fused=True`` runs ATen's
# ``multi_tensor_apply``, which cuts every tensor into chunks of 65,536 elements and
# launches kernels of at most 320 blocks of 512 threads each, so its launches grow with
# the model; Inductor generates a kernel per group of parameters, with a grid sized to
# the data. The lines below count each row's kernels per step and the share of copy
# speed reached inside them, size by size, then read them.

if device == "cuda":
    inside = {}
    for size, res in results.items():
        for name, fam in (
            ("fused + CUDA graph", "optimizer"),
            (label, "compiled kernels"),
        ):
            r, ms = res[name], res[name].parts.get("GPU: " + fam, 0.0)
            inside.setdefault(name, []).append(
                (r.kernels.get(fam, 0), res.roofline_ms / ms)
            )
            print(
                f"{size}, {name}: {r.kernels.get(fam, 0):.0f} kernels per step ({fam}), "
                f"{ms:.3f} ms in them: {100 * res.roofline_ms / ms:.0f} % of copy speed"
            )
    for name, seen in inside.items():
        (k0, _), (k1, _), shares_in = seen[0], seen[-1], [100 * s for _, s in seen]
        print(
            f"{name}: {k0:.0f} -> {k1:.0f} kernels per step from the smallest size to the "
            f"largest; inside them {min(shares_in):.0f}-{max(shares_in):.0f} % of copy speed"
        )

# %%
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
# and ``fused=True`` under the same conditions; on a GPU, the busy share shows whether a
# step waits for the CPU, and each comparison names the parts of the step that moved.
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
