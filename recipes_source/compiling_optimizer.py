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
       * How to measure an optimizer step against the memory-bandwidth roofline, and
         how to compare it fairly with ``fused=True`` (CUDA graph against CUDA graph)
       * Why a compiled step can lose to ``fused=True`` on a small model, and how to
         remove the per-call overhead that causes it
       * Why the compiled step can trail ``fused=True`` on a CPU

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
       * A CUDA GPU of compute capability 7.5 or newer for the timings (current CUDA
         wheels need it); runs on CPU with smaller sizes
       * On CPU, Inductor needs a C++ compiler and the Python headers
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
# to keep a GPU's arithmetic units busy, so on a GPU the step is *memory-bound*: the best
# any implementation can do is move those bytes once, at the speed the memory allows. That
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
# three against the roofline over a range of model sizes, and then deals with the cases
# where the compiled step is *slower* than ``fused=True``: small models on a GPU, where the
# cost of calling the step outweighs the cost of running it, and the CPU.
#
# Setup
# -----
#
# The parameters stand in for a stack of ``Linear(width, width)`` layers, each with a weight
# and a bias. The gradients are random: an optimizer does not care where they came from.
# On a GPU the sweep goes from about 10 million parameters up to the largest size that the
# free GPU memory holds (the parameters, gradients, both moments and the temporaries of the
# eager ``foreach`` step, with room to spare), so that a 16 GB GPU runs the page too. On a
# CPU the stack is shorter and narrower so that the page runs in a couple of minutes.

import logging
import re
import statistics
import time

import matplotlib.pyplot as plt
import torch
import torch._dynamo
import torch._inductor.utils
import torch.utils.benchmark as benchmark
from tabulate import tabulate
from torch._dynamo.utils import counters

LR = 1e-3
# Adam reads p, grad, exp_avg, exp_avg_sq and writes p, exp_avg, exp_avg_sq: 7 x 4 bytes
ADAM_BYTES_PER_PARAM = 28
# what the sweep allocates per parameter at most: p, grad, two moments (16 bytes), one
# temporary of the eager foreach step (4) and headroom for the allocator and CUDA graphs
SWEEP_BYTES_PER_PARAM = 40

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    LAYERS = 10
    free_bytes, total_bytes = torch.cuda.mem_get_info()
    fits = [
        w
        for w in [1024, 2048, 4096, 10240]
        if LAYERS * (w * w + w) * SWEEP_BYTES_PER_PARAM < 0.8 * free_bytes
    ]
    WIDTHS = fits or [1024]
    device_name = torch.cuda.get_device_name()
    print(f"free GPU memory: {free_bytes / 2**30:.1f} of {total_bytes / 2**30:.1f} GiB")
else:
    LAYERS, WIDTHS = 4, [512, 1024, 2048]
    device_name = f"CPU, {torch.get_num_threads()} threads"
    print("No CUDA GPU found: running on the CPU with smaller sizes.")


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
# The first call compiles, so its duration is the compile time. To make that a *cold*
# figure even when this page is rebuilt, the call runs inside
# ``torch._inductor.utils.fresh_cache()``, which points Inductor (and Triton) at a new,
# empty cache directory for its duration; ``torch._dynamo.reset()`` (done by
# ``run_and_get_code``, below) forgets what Dynamo compiled before. Inductor counts how
# often it found a compiled graph in its cache; the cell asserts that this never happened.
# ``run_and_get_code`` also hands back the source code Inductor generated, which we read
# later.
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


# ``fresh_cache`` was called ``fresh_inductor_cache`` in older releases
fresh_cache = getattr(torch._inductor.utils, "fresh_cache", None)
if fresh_cache is None:
    fresh_cache = torch._inductor.utils.fresh_inductor_cache


def sync():
    if device == "cuda":
        torch.cuda.synchronize()


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


def call_and_wait(fn):
    fn()
    sync()


counters.clear()
with fresh_cache():
    t0 = time.perf_counter()
    _, generated_code = torch._inductor.utils.run_and_get_code(
        call_and_wait, compiled_step
    )
    compile_s = time.perf_counter() - t0
hits = counters["inductor"]["fxgraph_cache_hit"]
misses = counters["inductor"]["fxgraph_cache_miss"]
assert hits == 0, "the compile time must come from an empty cache"
print(f"first call of the compiled step (compiles, empty cache): {compile_s:6.1f} s")
print(f"Inductor FX-graph cache during that call: {hits} hits, {misses} misses")
opt_eager.step()

for logger in graph_break_loggers():
    logger.removeHandler(handler)
torch._logging.set_logs()  # back to the defaults

# %%
# The graph break comes from ``torch/optim/optimizer.py`` itself, not from anything we
# wrote. Most built-in optimizers (``Adam``, ``AdamW``, ``SGD``, ``RMSprop``, ``Adagrad``,
# ``Adadelta``, ``Adamax``, ``ASGD``, ``NAdam``, ``RAdam`` and ``Rprop``) wrap their
# ``step`` in the decorator ``_use_grad_for_differentiable``, which sets the grad mode (off,
# unless the optimizer is ``differentiable``) and calls ``torch._dynamo.graph_break()``
# right before and right after the update; depending on the PyTorch version the log lists
# one or both. The comment next to those calls gives the reason: the break makes the update
# a graph of its own that runs with grad mode off, so the compiler sees an *inference*
# graph, in which the in-place updates of the parameters and the state stay in place.
# Without the break, AOTAutograd would treat the update as part of a training graph, write
# the new values into fresh buffers and copy them back afterwards: an extra allocation and
# an extra pass over every parameter.
#
# Not every optimizer does this. ``LBFGS`` and ``SparseAdam`` (and ``Adafactor`` and, in
# recent releases, ``Muon``) decorate ``step`` with plain ``torch.no_grad()`` and add no
# deliberate break; whether their step compiles into one graph then depends only on their
# code (``LBFGS``, for example, calls a closure and branches on values it reads from
# tensors). Separately, the functional implementations (``adam()``, ``sgd()`` ...) carry
# ``_disable_dynamo_if_unsupported``: when they are compiled with their step counters on a
# GPU but ``capturable=False``, which ``torch.compile`` normally prevents (next cell), they
# run eagerly instead of being traced.
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
# ``capturable`` also matters when you create an optimizer with a learning rate held in a
# tensor (the way to change it without recompiling, see
# :ref:`compiling_optimizer_lr_scheduler`). The eager ``foreach`` implementation cannot use
# a tensor learning rate unless the optimizer is capturable, and ``Adam`` refuses the
# combination when it is built:

try:
    torch.optim.Adam(make_params(WIDTHS[0]), lr=torch.tensor(LR), foreach=True)
except ValueError as e:
    print(f"ValueError: {e}")

# %%
# With an explicit ``foreach=True``, pass ``capturable=True`` as well (on a GPU), or leave
# ``foreach`` at its default.
#
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
# the first call of the burst, so a burst measures steady-state throughput. ``host_time``
# measures something different: how long the CPU spends *issuing* one call, that is, how
# long the Python call takes to return while the GPU works through its queue. When that is
# about as long as the whole step, the step is overhead-bound: the GPU waits for the CPU.
#
# On a CPU, ``torch.utils.benchmark.Timer`` does the job, with
# ``num_threads=torch.get_num_threads()`` for every variant: the timer's default is a single
# thread, which would slow the eager ops and Inductor's C++ kernels alike, and since Dynamo
# guards on the thread count, it would also make the compiled step recompile.
# ``time_step`` asserts that timing compiled nothing new.
#
# The roofline needs the memory bandwidth the device actually delivers, so we measure it
# the same way: copy a large buffer and count the bytes read plus the bytes written.

REPS = 20
if device == "cuda":
    TIMING = f"median of {REPS} bursts of back-to-back calls, CUDA events"
else:
    TIMING = "median of benchmark.Timer.blocked_autorange, all threads"


def time_step(fn):
    """Median time per call of ``fn`` in microseconds (after warm-up)."""
    for _ in range(3):
        fn()
    sync()
    graphs_before = counters["stats"]["unique_graphs"]
    if device == "cpu":
        timer = benchmark.Timer(
            "fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()
        )
        us = timer.blocked_autorange(min_run_time=0.2).median * 1e6
    else:
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
        us = statistics.median(samples)
    assert counters["stats"]["unique_graphs"] == graphs_before, "timing recompiled"
    return us


def host_time(fn, calls=REPS):
    """Median CPU time to issue one call of ``fn`` on a GPU, in microseconds."""
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
print(f"copy of {copy_numel * 4 / 2**20:.0f} MiB: {copy_us:8.1f} us ({TIMING})")
print(f"measured copy bandwidth: {bandwidth / 1e9:7.1f} GB/s (read + written)")


def roofline_us(n):
    return n * ADAM_BYTES_PER_PARAM / bandwidth * 1e6


def pct(us, n):
    return 100 * roofline_us(n) / us


# %%
# Eager against compiled on the smallest model
# --------------------------------------------
#
# ``measure_basic`` times the three implementations on one parameter set: eager
# ``foreach``, eager ``fused=True``, and the compiled ``foreach`` step, none of them in a
# CUDA graph. Each variant gets its own optimizer, so each starts from fresh state, and is
# freed before the next one is built. The compile time was measured above; the first call
# here finds the kernels in Inductor's cache and is not a compile time.
#
# ``torch._dynamo.reset()`` before each compile matters when you compile many optimizers in
# one process: a fresh optimizer fails the guards of the code compiled for the previous one
# and causes a recompile, and after ``torch._dynamo.config.recompile_limit`` of those (8 by
# default) ``torch.compile`` gives up and runs the step eagerly.

UNGRAPHED = ["eager foreach", "eager fused", "compiled"]
GRAPHED = ["fused + CUDA graph", "compiled + CUDA graph"]


def measure_basic(params):
    row = {}
    for name, kwargs in [
        ("eager foreach", {"foreach": True}),
        ("eager fused", {"fused": True}),
    ]:
        opt = torch.optim.Adam(params, lr=LR, **kwargs)
        row[name] = time_step(opt.step)
        if device == "cuda":
            row[name + " host"] = host_time(opt.step)
        del opt
    torch._dynamo.reset()
    opt = torch.optim.Adam(params, lr=LR, foreach=True)
    step = torch.compile(opt.step)
    step()
    row["compiled"] = time_step(step)
    if device == "cuda":
        row["compiled host"] = host_time(step)
    return row, opt, step


def print_rows(row, n, variants):
    headers = ["variant", "step (us)", "% of roofline"]
    if device == "cuda":
        headers.insert(2, "CPU time to issue (us)")
    table = []
    for v in variants:
        host = [row[v + " host"]] if device == "cuda" else []
        table.append([v, row[v]] + host + [pct(row[v], n)])
    print(tabulate(table, headers=headers, floatfmt=".1f"))


params = make_params(WIDTHS[0])
n = n_params(WIDTHS[0])
small, opt_small, step_small = measure_basic(params)

print(f"{n / 1e6:.1f}M parameters on {device_name}, {TIMING}, no CUDA graphs")
print(f"roofline: {roofline_us(n):8.1f} us")
print_rows(small, n, UNGRAPHED)
ratio = small["eager fused"] / small["compiled"]
print(
    f"compiled step: {ratio:.2f}x the speed of eager fused=True, "
    f"both without CUDA graphs"
)

# %%
# The overhead regime
# -------------------
#
# On large models a compiled GPU step runs close to the roofline (the size sweep below shows
# how close), but on a small one it can lose to ``fused=True``. When the CPU time to issue a
# step (the middle column on a GPU) is about as long as the whole step, the GPU spends most
# of the step waiting for the CPU, and a faster kernel would change nothing.
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
# or less, so a hundred or two microseconds of CPU time per call dominate. Two ways to
# remove CPU work come to mind: skipping the guards, and recording the step in a CUDA graph.
#
# Skipping the guards instead?
# ----------------------------
#
# ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)`` promises to remove the guard
# part of the per-call cost without a CUDA graph. In this mode Dynamo runs, for each cached
# version of a frame, only a reduced set of guards: those that have failed before (the ones
# that told apart the versions compiled so far) and the checks on plain tensor inputs. The
# optimizer's frames have neither: Dynamo handles an optimizer specially and does not check
# its parameters, gradients and state as tensor inputs, and a step that was compiled once
# has no guard that ever failed. So the reduced set of the ``step`` wrapper's frame and of
# ``Adam.step`` is empty. In the releases this page was checked on, the lookup treats
# such an empty set not as "always matches" but as a miss, and a miss in this stance raises
# ``RuntimeError: Recompilation triggered with skip_guard_eval_unsafe stance``. It happens
# however long you warm up, so it is not about the first call creating the optimizer state
# or about the step counter; warming up cannot fix it. The cell below tries once, on the
# compiled step that has run many times by now, and prints what happened.

try:
    with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
        step_small()
    print("skip_guard_eval_unsafe: accepted by this PyTorch version")
except RuntimeError as e:
    print(f"skip_guard_eval_unsafe: refused: RuntimeError: {str(e).split('.')[0]}")

# %%
# Where the stance is refused, the CUDA graph below is the way to remove the per-call cost.
# Where it is accepted, remember that it is *unsafe* in the literal sense: if something
# changes that a guard would have caught (a new parameter group, a learning rate held in a
# Python float, a gradient that becomes ``None``), the stale compiled code runs anyway and
# computes the wrong thing. It also removes only the guards, not the wrappers and launches.
#
# CUDA graphs
# -----------
#
# A **CUDA graph** records the kernels of one step once and replays them with a single
# call: no guards, no Python, no per-kernel launches. Replaying works because the compiled
# optimizer is ``capturable``: its step counter lives on the GPU, so the recorded kernels
# advance it themselves. Two conditions apply. The gradients must stay at the same
# addresses from step to step: call ``opt.zero_grad(set_to_none=False)``, so that
# ``backward`` accumulates into the existing ``.grad`` tensors instead of allocating new
# ones. And a learning rate that changes must live in a tensor, because a Python float is
# baked into the recording (see :ref:`compiling_optimizer_lr_scheduler`).
#
# A CUDA graph removes the CPU cost of *any* step, including the hand-written fused one:
# ``fused=True`` with ``capturable=True`` can be recorded too. So the fair comparison for a
# recorded compiled step is a recorded fused step; the table below shows both.
#
# There are two ways to get a CUDA graph. ``torch.compile(opt.step, mode="reduce-overhead")``
# records and manages the graph for you, but still runs the guards and its own bookkeeping
# on every call. Or you record the step yourself with ``torch.cuda.graph``; then a call is
# one ``graph.replay()``. The helper below does the latter: it warms the step up on a side
# stream, as the CUDA graph documentation asks, and records one call. Note that the three
# warm-up calls are real optimizer steps.


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
# Now the recorded variants on the smallest model. ``compiled + CUDA graph`` records the
# compiled step from before, so it compiles nothing new, and ``fused + CUDA graph`` records
# the hand-written kernel of a ``fused=True, capturable=True`` optimizer.
# ``mode="reduce-overhead"`` is a different compilation mode and compiles once more. Before
# compiling it we mark the gradients as static addresses with
# ``torch._dynamo.mark_static_address``; otherwise the CUDA graph it records would copy
# every gradient into a buffer of its own on each call, an extra pass over memory (the
# compiler assumes stable addresses only for the parameters and the optimizer state).


def measure_graphed(row, params, step):
    graph = record_cuda_graph(step)
    row["compiled + CUDA graph"] = time_step(graph.replay)
    row["compiled + CUDA graph host"] = host_time(graph.replay)
    del graph
    opt_fused = torch.optim.Adam(params, lr=LR, fused=True, capturable=True)
    graph = record_cuda_graph(opt_fused.step)
    row["fused + CUDA graph"] = time_step(graph.replay)
    row["fused + CUDA graph host"] = host_time(graph.replay)
    del graph, opt_fused


if device == "cuda":
    measure_graphed(small, params, step_small)

    torch._dynamo.reset()
    for p in params:
        torch._dynamo.mark_static_address(p.grad)
    opt_ro = torch.optim.Adam(params, lr=LR, foreach=True)
    step_ro = torch.compile(opt_ro.step, mode="reduce-overhead")
    step_ro()
    small["reduce-overhead"] = time_step(step_ro)
    small["reduce-overhead host"] = host_time(step_ro)
    del opt_ro, step_ro

    print(f"{n / 1e6:.1f}M parameters on {device_name}, {TIMING}, CUDA graphs")
    print(f"roofline: {roofline_us(n):8.1f} us")
    print_rows(small, n, ["reduce-overhead"] + GRAPHED)
    ratio = small["fused + CUDA graph"] / small["compiled + CUDA graph"]
    print(
        f"recorded compiled step: {ratio:.2f}x the speed of the recorded fused step, "
        f"both replayed from CUDA graphs"
    )
else:
    print("CUDA graphs need a CUDA GPU: only the ungraphed variants ran on the CPU.")

# %%
# On a GPU, read the two tables together. The plain compiled step costs about as much CPU
# time to issue as it takes in total when it is overhead-bound. ``mode="reduce-overhead"``
# puts the kernels in a CUDA graph but still runs the guards and its own bookkeeping on each
# call. A step you record yourself costs the CPU a few microseconds per replay, and what
# remains is the time the kernels take on the GPU; the line under the second table compares
# it with the hand-written kernel under the same conditions.
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
# Compiling the *whole* training step (forward, backward and optimizer) in one function is
# a further option: the per-call costs are then paid once per iteration instead of once per
# compiled region, and ``mode="reduce-overhead"`` can record all of it. It needs a model
# whose forward and backward compile cleanly.

# %%
# The size sweep
# --------------
#
# Now all sizes. For each one, ``measure_all`` runs the three ungraphed variants and, on a
# GPU, the two recorded ones. Each entry is the median time per step and, in parentheses,
# the percentage of the roofline it reaches. Compile times are not repeated here: the first
# section measured one from an empty cache, and the kernels for the other sizes are compiled
# during their first call, with whatever the cache already holds. On a CPU, expect noisier
# numbers, and percentages above 100 where the data fits in the CPU's caches, which are
# faster than the memory the copy measured.

SWEEP = UNGRAPHED + (GRAPHED if device == "cuda" else [])
BEST = "compiled + CUDA graph" if device == "cuda" else "compiled"
FUSED_LIKE = "fused + CUDA graph" if device == "cuda" else "eager fused"


def measure_all(width):
    params = make_params(width)
    row, opt, step = measure_basic(params)
    if device == "cuda":
        measure_graphed(row, params, step)
    del opt, step, params
    torch._dynamo.reset()
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


del opt_small, step_small, params
torch._dynamo.reset()
results = {WIDTHS[0]: small}
for width in WIDTHS[1:]:
    results[width] = measure_all(width)

table = []
for width, row in results.items():
    n = n_params(width)
    cells = [f"{row[v]:9.1f} ({pct(row[v], n):3.0f}%)" for v in SWEEP]
    table.append([f"{n / 1e6:.1f}M", f"{roofline_us(n):9.1f}"] + cells)
print(f"Adam, float32, {device_name}, torch {torch.__version__}")
print(f"time per step in us (% of roofline), {TIMING}")
print(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s")
print(tabulate(table, headers=["params", "roofline"] + SWEEP))

# %%
# The same numbers as a plot: the fraction of the roofline each variant reaches, against the
# number of parameters. Dashed lines are the recorded (CUDA graph) variants.

# sphinx_gallery_thumbnail_number = 1
counts = [n_params(w) for w in results]
fig, ax = plt.subplots(figsize=(7, 4.5))
for v, marker in zip(SWEEP, "osv^D"):
    style = "--" if v in GRAPHED else "-"
    fractions = [pct(results[w][v], n_params(w)) for w in results]
    ax.plot(counts, fractions, style, marker=marker, label=v)
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
# The goal for this page on a GPU is a compiled step that reaches at least 90% of the
# roofline at every size and keeps up with ``fused=True`` under the same conditions: the
# recorded compiled step against the recorded fused step. On a CPU there is no CUDA graph,
# and the plain compiled step is compared with eager ``fused=True``. The cell below states
# what the numbers just measured say; it prints rather than asserts, because timings
# depend on the machine.


def compare(ratio):
    if ratio > 1.05:
        return "faster than"
    if ratio < 0.95:
        return "slower than"
    return "level with"


for width, row in results.items():
    n = n_params(width)
    share = pct(row[BEST], n)
    ratio = row[FUSED_LIKE] / row[BEST]
    goal = ""
    if device == "cuda":
        goal = f" ({'meets' if share >= 90 else 'misses'} the 90% goal)"
    print(
        f"{n / 1e6:8.1f}M params: {BEST} at {share:5.1f}% of roofline{goal}, "
        f"{ratio:4.2f}x the speed of {FUSED_LIKE} ({compare(ratio)} it)"
    )

# %%
# Why the compiled step can trail ``fused=True`` on a CPU
# --------------------------------------------------------
#
# On a CPU, the argument that made the step memory-bound no longer holds as well: a few
# cores have far less arithmetic to spare per byte than a GPU, so a kernel that does more
# arithmetic per element than it must can become limited by the arithmetic. The compiled
# Adam step does such extra work. Adam's bias corrections ``1 - beta1 ** step`` and
# ``1 - beta2 ** step`` depend on the step counter, and every parameter has a counter of
# its own, a 0-dimensional tensor in its state. Inductor fuses those small computations
# into the kernel that updates the parameter, where they are recomputed inside the loop
# over the elements instead of once per parameter. The source code ``run_and_get_code``
# returned for the first compiled step shows it; here are the lines that raise to a power:

kernel_lines = [
    line.strip()
    for code in generated_code
    for line in code.splitlines()
    if re.search(r"\bpow\(", line)
]
print(f"lines calling pow in the generated code: {len(kernel_lines)}, for example:")
for line in kernel_lines[:2]:
    print("    " + line)

# %%
# ATen's hand-written fused CPU kernel computes those scalars once per parameter, before its
# loop. To see what the recomputation costs on its own, the next cell compiles a bare Adam
# update of one flat buffer twice: once computing the bias corrections from the step counter
# (as the compiled optimizer does), and once receiving them as precomputed 0-dimensional
# tensors, which the kernel only has to load. Both read and write the same bytes and are
# timed the same way; only the scalar arithmetic inside the loop differs.

B1, B2, EPS = 0.9, 0.999, 1e-8


def update_from_step(p, g, m, v, step):
    m.lerp_(g, 1 - B1)
    v.mul_(B2).addcmul_(g, g, value=1 - B2)
    bias1 = 1 - B1**step
    bias2 = 1 - B2**step
    p.sub_(LR / bias1 * m / (v.sqrt() / bias2.sqrt() + EPS))


def update_from_scalars(p, g, m, v, step_size, bias2_sqrt):
    m.lerp_(g, 1 - B1)
    v.mul_(B2).addcmul_(g, g, value=1 - B2)
    p.sub_(step_size * m / (v.sqrt() / bias2_sqrt + EPS))


flat = n_params(WIDTHS[1] if len(WIDTHS) > 1 else WIDTHS[0])
buffers = [torch.rand(flat, device=device) for _ in range(4)]  # p, grad, m, v
step = torch.tensor(10.0, device=device)
step_size = LR / (1 - B1**step)
bias2_sqrt = (1 - B2**step).sqrt()
from_step = torch.compile(update_from_step)
from_scalars = torch.compile(update_from_scalars)
us_step = time_step(lambda: from_step(*buffers, step))
us_scalars = time_step(lambda: from_scalars(*buffers, step_size, bias2_sqrt))
ratio = us_step / us_scalars
print(f"bare Adam update of {flat / 1e6:.1f}M elements on {device_name}, {TIMING}")
print(f"  bias corrections computed in the loop: {us_step:9.1f} us")
print(f"  bias corrections precomputed:          {us_scalars:9.1f} us")
if ratio > 1.1:
    print(f"computing them in the loop took {ratio:.2f}x as long on this device")
else:
    print(f"computing them in the loop made no clear difference here ({ratio:.2f}x)")

# %%
# The comparison of the whole compiled step with ``fused=True`` below was measured on this
# page's build machine, with the same threads for both, and says nothing about other CPUs.

if device == "cpu":
    for width, row in results.items():
        ratio = row["eager fused"] / row["compiled"]
        print(
            f"{n_params(width) / 1e6:6.1f}M params: compiled ran at {ratio:4.2f}x the "
            f"speed of eager fused=True ({compare(ratio)} fused) on {device_name}"
        )
else:
    print("This page ran on a GPU: see the sweep above for the comparison there.")

# %%
# To remove the extra arithmetic, compute the step-dependent scalars yourself, once per
# step, and write the fused update with ``foreach_map`` (see :ref:`foreach_map_recipe`),
# or keep ``fused=True`` for the built-in optimizers on a CPU.
#
# Conclusion
# ----------
#
# Compiling ``opt.step()`` takes one line, and the graph breaks most built-in optimizers
# report are their own, placed on purpose, so ``fullgraph`` stays ``False``. The compiled
# Adam and AdamW steps matched their eager versions within float32 tolerance. A fair speed
# comparison puts the compiled step and ``fused=True`` under the same conditions: on a GPU
# both recorded in a CUDA graph, which removes the per-call CPU cost that dominates small
# models, or both without. ``skip_guard_eval_unsafe`` is no substitute for the optimizer
# step in the releases checked here. On a CPU, the compiled step recomputes the bias
# corrections for every vector of elements, which the sweep above measured against
# ``fused=True`` on one machine.
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
