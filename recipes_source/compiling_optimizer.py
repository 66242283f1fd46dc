"""
.. _compiling_optimizer_recipe:

Compiling the optimizer step
============================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How to compile ``opt.step()`` with ``torch.compile``, and why the optimizer
         breaks the graph on purpose
       * How to check, step by step, that a compiled optimizer matches the eager one
       * How to measure an optimizer step against the memory-bandwidth roofline
       * Why a compiled step can lose to ``fused=True`` on a small model, and how to
         remove the per-call overhead that causes it

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
       * A CUDA GPU of compute capability 7.0 or newer for the timings; runs on CPU with smaller sizes
"""

# %%
# Why the optimizer step is worth compiling
# -----------------------------------------
#
# The optimizer step runs once per training iteration and visits every parameter of the
# model, yet it does almost no arithmetic on each one. Take Adam in float32: for every
# parameter it reads the parameter, its gradient and the two running moments
# (``exp_avg`` and ``exp_avg_sq``), and writes back the parameter and both moments. That
# is seven 4-byte accesses, **28 bytes per parameter**, or 28 GB per step for a model of
# one billion parameters. A dozen floating-point operations per 28 bytes is far too little
# to keep the arithmetic units busy, so the step is *memory-bound*: the best any
# implementation can do is move those bytes once, at the speed the memory allows. That
# lower bound is the *roofline* this recipe measures against.
#
# PyTorch offers three ways to run the same Adam update:
#
# * ``foreach=True`` (the default on GPUs): a sequence of ``torch._foreach_*`` calls. Each
#   call handles all tensors at once, but it is still a separate pass over memory, so the
#   step moves several times the 28-byte minimum.
# * ``fused=True``: a hand-written kernel that does the whole update in one pass.
# * ``torch.compile(opt.step)``: the compiler traces the Python code of the ``foreach``
#   implementation, and Inductor generates fused kernels from it. It needs no hand-written
#   kernel, so it also works for optimizers that have none, including your own.
#
# This recipe compiles ``opt.step()``, checks the result against eager mode, measures the
# three against the roofline from about ten million to about a billion parameters, and then
# deals with the case where the compiled step is *slower* than ``fused=True``: small models,
# where the cost of calling the step outweighs the cost of running it.
#
# Setup
# -----
#
# The parameters stand in for a stack of ``Linear(width, width)`` layers, each with a weight
# and a bias. The gradients are random: an optimizer does not care where they came from.
# On a GPU the widths give about 10 million to about 1 billion parameters; on a CPU the
# stack is shorter and narrower so that the page runs in a couple of minutes.

import logging
import re
import statistics
import time

import matplotlib.pyplot as plt
import torch
import torch.utils.benchmark as benchmark
from tabulate import tabulate

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    LAYERS, WIDTHS = 10, [1024, 2048, 4096, 10240]
    device_name = torch.cuda.get_device_name()
else:
    LAYERS, WIDTHS = 4, [512, 1024, 2048]
    device_name = f"CPU, {torch.get_num_threads()} threads"
    print("No CUDA GPU found: running on the CPU with smaller sizes.")

LR = 1e-3
# Adam reads p, grad, exp_avg, exp_avg_sq and writes p, exp_avg, exp_avg_sq: 7 x 4 bytes
ADAM_BYTES_PER_PARAM = 28


def n_params(width):
    return LAYERS * (width * width + width)


def make_params(width, seed=0):
    """LAYERS weight and bias parameters with random gradients, on ``device``."""
    gen = torch.Generator(device=device).manual_seed(seed)
    params = []
    for _ in range(LAYERS):
        for shape in [(width, width), (width,)]:
            p = torch.nn.Parameter(torch.randn(shape, device=device, generator=gen))
            p.grad = torch.randn(shape, device=device, generator=gen)
            params.append(p)
    return params


print(f"device: {device} ({device_name}), torch {torch.__version__}")
print(f"stack of {LAYERS} Linear layers, widths {WIDTHS}")
print("parameters: " + ", ".join(f"{n_params(w) / 1e6:.1f}M" for w in WIDTHS))

# %%
# Compiling ``opt.step()``
# ------------------------
#
# Compiling the step takes one line: pass the bound method to ``torch.compile`` and call the
# result where you used to call ``opt.step()``. We build two optimizers over identical copies
# of the smallest parameter set, one left eager and one compiled, and ask the compiler to
# print every graph break it meets during the first call.
#
# ``torch.compile`` writes its logs through Python's ``logging`` module. The small handler
# below prints the graph-break records to standard output, shortened to their location (file
# name and line) and their reason, and keeps them away from the default handler.


class PrintGraphBreaks(logging.Handler):
    def emit(self, record):
        lines = record.getMessage().splitlines()
        where = re.sub(r"\S*/", "", lines[0])  # keep "file.py:line", drop the directory
        reason = next((s for s in lines[1:] if "Call to" in s), "")
        print(f"{where}: {reason.split('Reason:')[-1].strip()}")


def graph_break_loggers():
    names = list(logging.root.manager.loggerDict)
    return [logging.getLogger(n) for n in names if n.endswith("__graph_breaks")]


import torch._dynamo  # creates the compiler's loggers

# dynamo=logging.ERROR hides a one-time warning that the profiler annotation inside
# ``step`` is ignored while compiling; it says nothing about the lesson.
torch._logging.set_logs(dynamo=logging.ERROR, graph_breaks=True)
handler = PrintGraphBreaks()
for logger in graph_break_loggers():
    logger.propagate = False
    logger.addHandler(handler)

params_eager = make_params(WIDTHS[0])
params_compiled = make_params(WIDTHS[0])
opt_eager = torch.optim.Adam(params_eager, lr=LR, foreach=True)
opt_compiled = torch.optim.Adam(params_compiled, lr=LR, foreach=True)
compiled_step = torch.compile(opt_compiled.step)

t0 = time.perf_counter()
compiled_step()
print(f"first call of the compiled step (compiles): {time.perf_counter() - t0:6.1f} s")
opt_eager.step()

for logger in graph_break_loggers():
    logger.removeHandler(handler)
torch._logging.set_logs()  # back to the defaults

# %%
# The graph break comes from ``torch/optim/optimizer.py`` itself, not from anything we
# wrote. Every built-in optimizer's ``step`` is wrapped by a decorator that sets the grad
# mode (off, unless the optimizer is ``differentiable``) and calls
# ``torch._dynamo.graph_break()`` right before and right after the update; depending on the
# PyTorch version the log lists one or both. The comment next to those calls gives the
# reason: the break makes the update a graph of its own that runs with grad mode off, so
# the compiler sees an *inference* graph, in which the in-place updates of the parameters
# and the state stay in place. Without the break, AOTAutograd would treat the update as part
# of a training graph, write the new values into fresh buffers and copy them back
# afterwards: an extra allocation and an extra pass over every parameter.
#
# The breaks are deliberate, so ``opt.step`` is compiled with the default
# ``fullgraph=False``. Asking for ``fullgraph=True`` turns the first break into an error:

opt_strict = torch.optim.Adam(make_params(WIDTHS[0]), lr=LR, foreach=True)
try:
    torch.compile(opt_strict.step, fullgraph=True)()
except Exception as e:
    print(f"{type(e).__name__}: {str(e).strip().splitlines()[0][:100]}")
del opt_strict

# %%
# One more thing happened during that first call. On a GPU, ``torch.compile`` switched the
# optimizer to ``capturable=True`` before creating its state, which keeps the step counter
# on the GPU instead of the CPU. The compiled kernel then reads the counter like any other
# tensor, and, as we will see later, the whole step can be recorded in a CUDA graph. On a
# CPU there is nothing to capture, and both optimizers keep ``capturable=False``.

print("capturable, eager optimizer:   ", opt_eager.param_groups[0]["capturable"])
print("capturable, compiled optimizer:", opt_compiled.param_groups[0]["capturable"])

# %%
# Correctness: the compiled step matches eager
# --------------------------------------------
#
# The two optimizers started from identical parameters and gradients and have each taken
# one step. We give both the same fresh gradients a few more times and compare the
# parameters and both moments after every step. The kernels round differently from the
# eager ops (Inductor fuses the update and may reorder it), so the check allows a small
# float32 tolerance rather than demanding bit equality.


def new_gradients(params_a, params_b, seed):
    gen = torch.Generator(device=device).manual_seed(seed)
    for pa, pb in zip(params_a, params_b):
        g = torch.randn(pa.shape, device=device, generator=gen)
        pa.grad.copy_(g)
        pb.grad.copy_(g)


def assert_same_state(opt_a, params_a, opt_b, params_b):
    for pa, pb in zip(params_a, params_b):
        torch.testing.assert_close(pb, pa, rtol=1e-5, atol=1e-6)
        for key in ["exp_avg", "exp_avg_sq"]:
            torch.testing.assert_close(
                opt_b.state[pb][key], opt_a.state[pa][key], rtol=1e-5, atol=1e-6
            )


STEPS = 5
assert_same_state(opt_eager, params_eager, opt_compiled, params_compiled)
for i in range(STEPS):
    new_gradients(params_eager, params_compiled, seed=100 + i)
    opt_eager.step()
    compiled_step()
    assert_same_state(opt_eager, params_eager, opt_compiled, params_compiled)
print(f"Adam: compiled and eager agree after {STEPS + 1} steps")

# %%
# The same check works for the other built-in optimizers. ``AdamW`` decouples the weight
# decay from the gradient, which adds one more term to the update and therefore compiles
# to a different kernel:

params_eager = make_params(WIDTHS[0])
params_compiled = make_params(WIDTHS[0])
opt_eager = torch.optim.AdamW(params_eager, lr=LR, weight_decay=0.1, foreach=True)
opt_compiled = torch.optim.AdamW(params_compiled, lr=LR, weight_decay=0.1, foreach=True)
compiled_step = torch.compile(opt_compiled.step)
for i in range(STEPS):
    new_gradients(params_eager, params_compiled, seed=200 + i)
    opt_eager.step()
    compiled_step()
    assert_same_state(opt_eager, params_eager, opt_compiled, params_compiled)
print(f"AdamW: compiled and eager agree after {STEPS} steps")
del opt_eager, opt_compiled, compiled_step, params_eager, params_compiled

# %%
# Timing the step, and the roofline
# ---------------------------------
#
# On a GPU, ``time_step`` runs the step in bursts of back-to-back calls between two CUDA
# events and reports the median time per call over ``REPS`` bursts. Calls in a burst queue
# up behind each other the way they do in a training loop, so when the CPU cannot issue
# steps as fast as the GPU runs them, the gap shows up in the measurement instead of being
# hidden. One extra call before the start event keeps the GPU busy while the CPU issues
# the first call of the burst, so a burst measures steady-state throughput. On a CPU,
# ``torch.utils.benchmark.Timer`` does the same job. ``host_time`` measures something
# different: how long the CPU spends *issuing* one call, that is, how long the Python call
# takes to return while the GPU works through its queue. When that is about as long as the
# whole step, the step is overhead-bound: the GPU waits for the CPU.
#
# The roofline needs the memory bandwidth the device actually delivers, so we measure it:
# copy a large buffer and count the bytes read plus the bytes written.

REPS = 20
if device == "cuda":
    TIMING = f"median of {REPS} bursts of back-to-back calls, CUDA events"
else:
    TIMING = "median of torch.utils.benchmark.Timer.blocked_autorange"


def sync():
    if device == "cuda":
        torch.cuda.synchronize()


def time_step(fn):
    """Median time per call of ``fn`` in microseconds (after warm-up)."""
    for _ in range(3):
        fn()
    sync()
    if device == "cpu":
        timer = benchmark.Timer(
            "fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()
        )
        return timer.blocked_autorange(min_run_time=0.2).median * 1e6
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    burst = max(1, min(50, int(2e-3 / (time.perf_counter() - t0))))
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(REPS):
        fn()  # lead-in: the GPU is busy when the start event is queued
        start.record()
        for _ in range(burst):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / burst)
    return statistics.median(samples)


def host_time(fn, calls=REPS):
    """Median CPU time to issue one call of ``fn``, in microseconds."""
    if device == "cpu":
        calls = 3  # the CPU also does the work, so this is the step time once more
    samples = []
    for _ in range(calls):
        fn()  # gives the GPU work, as in a training loop, so the timed call never waits
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
        sync()
    return statistics.median(samples)


def measure_copy(numel):
    src = torch.rand(numel, device=device)
    dst = torch.empty_like(src)
    us = time_step(lambda: dst.copy_(src))
    return us, 2 * src.nbytes / (us * 1e-6)


copy_numel = 2**28 if device == "cuda" else 2**25
copy_us, bandwidth = measure_copy(copy_numel)
print(f"copy of {copy_numel * 4 / 2**20:.0f} MiB: {copy_us:8.1f} us")
print(f"measured copy bandwidth: {bandwidth / 1e9:7.1f} GB/s (read + written)")


def roofline_us(n):
    return n * ADAM_BYTES_PER_PARAM / bandwidth * 1e6


# %%
# Eager against compiled on the smallest model
# --------------------------------------------
#
# ``measure_basic`` times the three implementations on one parameter set: eager
# ``foreach``, eager ``fused=True``, and the compiled ``foreach`` step. The first call of the
# compiled step is timed on its own, because it includes compilation. Here it is short:
# Inductor's cache already holds the kernels compiled for the same shapes in the
# correctness check, so only the tracing is repeated. Each variant gets its own optimizer,
# so each starts from fresh state, and is freed before the next one is built.
#
# ``torch._dynamo.reset()`` before each compile matters when you compile many optimizers in
# one process: a fresh optimizer fails the guards of the code compiled for the previous one
# and causes a recompile, and after ``torch._dynamo.config.recompile_limit`` of those (8 by
# default) ``torch.compile`` gives up and runs the step eagerly.


def measure_basic(params):
    row = {}
    for name, kwargs in [
        ("eager foreach", {"foreach": True}),
        ("eager fused", {"fused": True}),
    ]:
        opt = torch.optim.Adam(params, lr=LR, **kwargs)
        row[name] = time_step(opt.step)
        row[name + " host"] = host_time(opt.step)
        del opt
    torch._dynamo.reset()
    opt = torch.optim.Adam(params, lr=LR, foreach=True)
    step = torch.compile(opt.step)
    t0 = time.perf_counter()
    step()
    sync()
    row["compile s"] = time.perf_counter() - t0
    row["compiled"] = time_step(step)
    row["compiled host"] = host_time(step)
    return row, opt, step


params = make_params(WIDTHS[0])
n = n_params(WIDTHS[0])
small, opt_small, step_small = measure_basic(params)

print(f"{n / 1e6:.1f}M parameters, roofline {roofline_us(n):8.1f} us")
print(f"compiled step, first call: {small['compile s']:6.1f} s")
rows = [
    [v, small[v], small[v + " host"], 100 * roofline_us(n) / small[v]]
    for v in ["eager foreach", "eager fused", "compiled"]
]
headers = ["variant", "step (us)", "CPU time to issue (us)", "% of roofline"]
print(tabulate(rows, headers=headers, floatfmt=".1f"))

# %%
# The overhead regime
# -------------------
#
# On large models the compiled step runs close to the roofline (the size sweep below shows
# it), but on a small one it can lose to ``fused=True``. The table above, measured when this
# page was built, shows how the variants compare on this machine, and its middle column says
# why.
# When the CPU time to issue a step is about as long as the whole step, the GPU spends most
# of the step waiting for the CPU, and a faster kernel would change nothing. (On a CPU both
# columns measure the same thing, since the CPU does the work as well.)
#
# Where does the CPU time of a compiled step go? Not into the kernels: it is spread over the
# layers that run before and around them, on every call.
#
# * **Guards.** Before running compiled code, ``torch.compile`` checks that the inputs still
#   look like those it compiled for. For an optimizer the inputs are every parameter, every
#   gradient and every state tensor, plus the hyperparameters of each group.
# * **Wrappers.** The optimizer's own ``step`` wrapper and hooks run as Python around the graph
#   breaks; AOTAutograd's runtime wrapper passes some hundred tensors into the compiled graph;
#   the code Inductor generates checks the sizes and strides of those tensors.
# * **Launches.** Each generated kernel is a call into Triton's launcher.
#
# A step that moves 300 MB on a GPU with several TB/s of bandwidth has about 100 us of work
# or less, so a hundred or two microseconds of CPU time per call dominate. The fixes remove CPU
# work:
#
# 1. ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)`` skips the guards after
#    warm-up. It is *unsafe* in the literal sense: if something changes that a guard would
#    have caught (a new parameter group, a learning rate held in a Python float that you
#    modify, a gradient that becomes ``None``), the stale compiled code runs anyway and
#    silently computes the wrong thing. It only removes the guards, not the wrappers.
# 2. **A CUDA graph** records the kernels of one step once and replays them with a single
#    call: no guards, no Python, no per-kernel launches. Replaying works because the compiled
#    optimizer is ``capturable``: its step counter lives on the GPU, so the recorded kernels
#    advance it themselves. Two conditions apply. The gradients must stay at the same
#    addresses from step to step: call ``opt.zero_grad(set_to_none=False)``, so that
#    ``backward`` accumulates into the existing ``.grad`` tensors instead of allocating new
#    ones. And a learning rate that changes must live in a tensor, because a Python float is
#    baked into the recording (see :ref:`compiling_optimizer_lr_scheduler`).
#
# There are two ways to get a CUDA graph. ``torch.compile(opt.step, mode="reduce-overhead")``
# records and manages the graph for you, but still runs the guards and its own bookkeeping
# on every call. Or you record the already-compiled step yourself with ``torch.cuda.graph``;
# then a call is one ``graph.replay()``. The helper below does the latter: it warms the step
# up on a side stream, as the CUDA graph documentation asks, and records one call. Note that
# the three warm-up calls are real optimizer steps.


def record_cuda_graph(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


# %%
# First, the recorded step must still be the right step. We record the compiled step of a
# fresh optimizer, run an eager twin alongside it for the same number of steps, write new
# gradients into the existing ``.grad`` tensors before each replay, and compare.

if device == "cuda":
    params_eager = make_params(WIDTHS[0])
    params_graph = make_params(WIDTHS[0])
    opt_eager = torch.optim.Adam(params_eager, lr=LR, foreach=True)
    opt_graph = torch.optim.Adam(params_graph, lr=LR, foreach=True)
    step_graph = torch.compile(opt_graph.step)
    graph = record_cuda_graph(step_graph)
    for _ in range(3):  # the warm-up calls ran; the recorded call did not
        opt_eager.step()
    assert_same_state(opt_eager, params_eager, opt_graph, params_graph)
    for i in range(STEPS):
        new_gradients(params_eager, params_graph, seed=300 + i)
        opt_eager.step()
        graph.replay()
        assert_same_state(opt_eager, params_eager, opt_graph, params_graph)
    print(f"CUDA graph of the compiled step agrees with eager after {STEPS} replays")
    del graph, opt_eager, opt_graph, step_graph, params_eager, params_graph
else:
    print("CUDA graphs need a CUDA GPU: skipped on the CPU.")


# %%
# Now the measurements, all on the smallest model. The first rows reuse the compiled step
# from before, so they compile nothing new. ``mode="reduce-overhead"`` is a different
# compilation mode and compiles once more. Before compiling it we mark the gradients as
# static addresses with ``torch._dynamo.mark_static_address``; otherwise the CUDA graph it
# records would copy every gradient into a buffer of its own on each call, an extra pass
# over memory (the compiler assumes stable addresses only for the parameters and the
# optimizer state). The last row records the hand-written ``fused=True`` kernel in a CUDA
# graph too, to show how fast that kernel runs once the CPU is out of the way.
#
# ``skip_guard_eval_unsafe`` is tried inside ``try``: some PyTorch versions refuse to run
# the optimizer step under that stance even after warm-up, and the page then prints the
# refusal instead of a time.


def without_guards(fn, row, name):
    try:
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            row[name] = time_step(fn)
            row[name + " host"] = host_time(fn)
    except RuntimeError as e:
        print(f"{name}: {type(e).__name__}: {str(e).split('.')[0][:80]}")


without_guards(step_small, small, "compiled, guards skipped")

if device == "cuda":
    graph = record_cuda_graph(step_small)
    small["compiled + CUDA graph"] = time_step(graph.replay)
    small["compiled + CUDA graph host"] = host_time(graph.replay)
    del graph

    torch._dynamo.reset()
    for p in params:
        torch._dynamo.mark_static_address(p.grad)
    opt_ro = torch.optim.Adam(params, lr=LR, foreach=True)
    step_ro = torch.compile(opt_ro.step, mode="reduce-overhead")
    t0 = time.perf_counter()
    step_ro()
    sync()
    print(f"reduce-overhead, first call (compiles): {time.perf_counter() - t0:6.1f} s")
    small["reduce-overhead"] = time_step(step_ro)
    small["reduce-overhead host"] = host_time(step_ro)
    without_guards(step_ro, small, "reduce-overhead, guards skipped")
    del opt_ro, step_ro

    opt_fused = torch.optim.Adam(params, lr=LR, fused=True, capturable=True)
    graph = record_cuda_graph(opt_fused.step)
    small["fused + CUDA graph"] = time_step(graph.replay)
    small["fused + CUDA graph host"] = host_time(graph.replay)
    del graph, opt_fused

del opt_small, step_small, params
torch._dynamo.reset()

variants = [v for v in small if v != "compile s" and not v.endswith(" host")]
rows = [
    [v, small[v], small[v + " host"], 100 * roofline_us(n) / small[v]] for v in variants
]
print(f"{n / 1e6:.1f}M parameters on {device_name}, {TIMING}")
print(f"roofline: {roofline_us(n):8.1f} us")
print(tabulate(rows, headers=headers, floatfmt=".1f"))

# %%
# Read the table from the top; the CUDA-graph rows appear only when a GPU ran the page. The
# plain compiled step costs about as much CPU time to issue as it takes in total: it is
# overhead-bound. Skipping the guards, where the PyTorch version accepts it, changes the
# CPU time little: for this step the guards are a small part of it, and the wrappers and
# launches remain. ``mode="reduce-overhead"`` puts the kernels in a CUDA graph but still runs the guards and
# its own bookkeeping on each call, so it remains bound by the CPU. Recording the compiled
# step yourself removes all of it: a replay costs the CPU a few microseconds, and what
# remains is the time the kernels take on the GPU. That time is within about 10% of the
# roofline, on par with or a little faster than the hand-written ``fused=True`` kernel
# replayed the same way.
#
# In a training loop, the recorded step replaces ``opt.step()`` once the ``.grad`` tensors
# exist:
#
# .. code-block:: python
#
#     step = torch.compile(opt.step)
#     loss_fn(model(x), y).backward()  # creates the .grad tensors
#     graph = record_cuda_graph(step)  # compiles; its warm-up calls are real steps
#     for x, y in loader:
#         opt.zero_grad(set_to_none=False)  # keep the .grad tensors where they are
#         loss_fn(model(x), y).backward()
#         graph.replay()  # instead of opt.step()
#
# When does each fix apply?
#
# * The recorded CUDA graph needs a GPU, a ``capturable`` optimizer (``torch.compile`` sets
#   it for you), gradients at fixed addresses, and a learning rate in a tensor if a
#   scheduler changes it. It gives the largest gain, and it is the variant the sweep below
#   calls the best compiled step.
# * Skipping guards works on any device, but only for a step whose inputs never change in a
#   way that would require recompiling, and not every PyTorch version accepts it for the
#   optimizer step.
# * On a large model neither matters much: the GPU work of one step grows with the model,
#   the CPU cost does not, and once the GPU work is the larger of the two the CPU time hides
#   behind it.
#
# Compiling the *whole* training step (forward, backward and optimizer) in one function is
# a further option: the per-call costs are then paid once per iteration instead of once per
# compiled region, and ``mode="reduce-overhead"`` can record all of it. It needs a model
# whose forward and backward compile cleanly.
#
# The size sweep
# --------------
#
# Now the other sizes. For each one, ``measure_all`` runs the three basic variants and, on
# a GPU, the compiled step recorded in a CUDA graph. On a CPU there is no CUDA graph, and
# the plain compiled step is the best compiled variant. Each entry is the median time per
# step and, in parentheses, the percentage of the roofline it reaches. The compile time is
# the first call of the compiled step; at the smallest size the kernels came from the cache.
# On a CPU, expect noisier numbers, and percentages above 100 where the data fits in the
# CPU's caches, which are faster than the memory the copy measured.

BEST = "compiled + CUDA graph" if device == "cuda" else "compiled"


def measure_all(width):
    params = make_params(width)
    row, opt, step = measure_basic(params)
    if device == "cuda":
        graph = record_cuda_graph(step)
        row[BEST] = time_step(graph.replay)
        del graph
    del opt, step, params
    torch._dynamo.reset()
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


results = {WIDTHS[0]: small}
for width in WIDTHS[1:]:
    results[width] = measure_all(width)

SWEEP = list(dict.fromkeys(["eager foreach", "eager fused", "compiled", BEST]))


def cell(us, n):
    return f"{us:9.1f} ({100 * roofline_us(n) / us:3.0f}%)"


table = []
for width, row in results.items():
    n = n_params(width)
    table.append(
        [f"{n / 1e6:.1f}M", f"{roofline_us(n):9.1f}"]
        + [cell(row[v], n) for v in SWEEP]
        + [f"{row['compile s']:5.1f}"]
    )
print(f"Adam, float32, {device_name}, torch {torch.__version__}")
print(f"time per step in us (% of roofline), {TIMING}")
print(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s")
print(tabulate(table, headers=["params", "roofline"] + SWEEP + ["compile (s)"]))

# %%
# The same numbers as a plot: the fraction of the roofline each variant reaches, against the
# number of parameters.

# sphinx_gallery_thumbnail_number = 1
counts = [n_params(w) for w in results]
fig, ax = plt.subplots(figsize=(7, 4.5))
for v, marker in zip(SWEEP, "osv^"):
    pct = [100 * roofline_us(n_params(w)) / results[w][v] for w in results]
    ax.plot(counts, pct, marker=marker, label=v)
ax.axhline(100, color="gray", linewidth=1)
ax.axhline(90, color="gray", linewidth=1, linestyle=":")
ax.set_xscale("log")
ax.set_ylim(bottom=0)
ax.set_xlabel("parameters")
ax.set_ylabel("% of the copy-bandwidth roofline")
ax.set_title(f"Adam step, float32, {device_name}")
ax.legend()
fig.tight_layout()
plt.show()

# %%
# How close does the best compiled step get?
# ------------------------------------------
#
# The goal for this page is a compiled step that reaches at least 90% of the roofline at
# every size and is never slower than ``fused=True``. The cell below checks both on the
# numbers just measured. It prints; it does not assert, because timings depend on the
# machine.

for width, row in results.items():
    n = n_params(width)
    pct = 100 * roofline_us(n) / row[BEST]
    ratio = row["eager fused"] / row[BEST]
    print(
        f"{n / 1e6:8.1f}M params: {BEST} at {pct:5.1f}% of roofline, "
        f"{ratio:4.2f}x the speed of eager fused"
    )

# %%
# Conclusion
# ----------
#
# Compiling ``opt.step()`` takes one line, and the graph breaks it reports are the
# optimizer's own, placed on purpose, so ``fullgraph`` stays ``False``. The compiled Adam
# and AdamW steps matched their eager versions within float32 tolerance. On large models
# the compiled step can move its 28 bytes per parameter close to the speed of a plain copy;
# on small models it is bound by the CPU work of each call, not by its kernels. Recording
# the compiled step in a CUDA graph removes that work, as long as the gradients keep their
# addresses and a changing learning rate lives in a tensor.
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
# * `torch.compiler.set_stance
#   <https://docs.pytorch.org/docs/stable/generated/torch.compiler.set_stance.html>`__ and
#   its ``skip_guard_eval_unsafe`` flag.
# * `pytorch/pytorch#104053 <https://github.com/pytorch/pytorch/issues/104053>`__: the
#   tracking issue behind the optimizer's deliberate graph breaks.
