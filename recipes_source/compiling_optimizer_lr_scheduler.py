"""
.. _compiling_optimizer_lr_scheduler:

A compiled optimizer step with an LR scheduler, compiled once
=============================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How to pair a compiled ``opt.step()`` with an LR scheduler so that the step
         compiles once: give the optimizer a tensor learning rate
       * Why a learning rate stored as a Python float makes the step recompile when it
         changes, with or without a scheduler, and how to count and read those recompiles
       * Why a tensor learning rate is required when the step is recorded in a CUDA graph
       * How to check that the compiled run follows the schedule and reaches the same
         parameters as an eager run

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
# Wrapping ``opt.step()`` in ``torch.compile`` turns the optimizer's loop over parameters
# into a few fused kernels. A scheduler such as ``LinearLR`` writes a new learning rate into
# ``opt.param_groups`` after every step, and ``torch.compile`` reuses a compiled graph only
# while its *guards* hold: checks, run before every call, that the inputs look as they did at
# compile time. A Python float that the traced code reads is guarded by its value, so a new
# float fails the guard. A tensor is guarded by its dtype, device and shape, and the compiled
# code reads its value when it runs; schedulers write a new value *into* that tensor. The
# recipe is therefore one argument: ``lr=torch.tensor(...)``.
#
# The recipe
# ----------

import functools
import logging
import re
import statistics
import time
import warnings

import matplotlib.pyplot as plt
import torch
from tabulate import tabulate
from torch import nn
from torch._dynamo.utils import counters
from torch._inductor.utils import fresh_cache
from torch.optim.lr_scheduler import LinearLR, OneCycleLR
from torch.profiler import ProfilerActivity, profile

# A note from torch.profiler about reusing a profiler: each one here runs once.
warnings.filterwarnings("ignore", message=".*Profiler clears events.*")

device = "cuda" if torch.cuda.is_available() else "cpu"
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
WIDTH, HIDDEN = (1024, 4096) if device == "cuda" else (32, 64)
N_STEPS = 12  # more than the default recompile limit of 8, which shows up below
print(f"torch {torch.__version__} on {device}; MLP {WIDTH}-{HIDDEN}-{WIDTH}")
# Compiling ``Optimizer.step`` logs once that its profiler range is left out of the graph
# (from another module in PyTorch 2.9): a note about profiling, not about this recipe.
for name in ["torch._dynamo.variables.torch", "torch._dynamo.variables.ctx_manager"]:
    logging.getLogger(name).setLevel(logging.ERROR)


def make_model(dtype=torch.float32):
    torch.manual_seed(0)
    layers = [nn.Linear(WIDTH, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, WIDTH)]
    return nn.Sequential(*layers).to(device, dtype)


model = make_model()
opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01, device=device))
sched = LinearLR(opt, start_factor=0.1, total_iters=N_STEPS)


@torch.compile
def opt_step():
    opt.step()


for p in model.parameters():
    p.grad = torch.randn_like(p)  # stands in for loss.backward()
for _ in range(N_STEPS):
    opt_step()
    sched.step()
print(f"learning rate after {N_STEPS} steps: {opt.param_groups[0]['lr'].item():.4f}")

# %%
# Helpers
# -------
#
# ``train`` repeats that loop from a fresh start (``torch._dynamo.reset()`` drops
# compiled code, so no run inherits another's) and records, after every step, the
# learning rate and the graphs Dynamo has compiled (``counters["stats"]["unique_graphs"]``),
# with seeded gradients. ``backend="eager"`` runs Dynamo without code generation: guards
# are decided before any backend is called, so the counts match Inductor's, cheaply.
#
# ``RecompileLog`` keeps the lines that matter of the recompile log
# (``torch._logging.set_logs(recompiles=True)``). ``step_and_busy`` times six windows of
# ``steps`` back-to-back calls (the first warms up) and returns the median time of one
# call and the windows' spread (IQR). On a GPU one more window runs under
# ``torch.profiler``: the union of the intervals in which a kernel ran, per call, is the
# GPU's **busy** time; busy 85 % of the step or more means bound by the GPU, less means
# the GPU waits for the CPU (Python, guards, launches) for the rest. On a CPU there is
# no separate device to be busy or idle. ``explain_slower`` prints where the extra time
# of a slower step went.


tensor = functools.partial(torch.tensor, device=device)


def train(lr_type=tensor, make_sched=None, backend="inductor", dtype=None, **kw):
    torch._dynamo.reset()
    counters.clear()
    model = make_model(dtype or torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=lr_type(0.01))
    sched = (make_sched or (lambda o: LinearLR(o, 0.1, total_iters=N_STEPS)))(opt)
    step = torch.compile(opt.step, backend=backend, **kw) if backend else opt.step
    grads = torch.Generator().manual_seed(1)
    run = {"lr": [], "graphs": [], "seconds": []}
    for _ in range(N_STEPS):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=grads).to(p)
        start = time.perf_counter()
        step()
        sync()
        run["seconds"].append(time.perf_counter() - start)
        sched.step()
        run["lr"].append(float(opt.param_groups[0]["lr"]))
        run["graphs"].append(counters["stats"]["unique_graphs"])
    return run | {"params": [p.detach() for p in model.parameters()]}


_PATH = re.compile(r"(?:/[^\s'\"():/]+)+/([^\s'\"():/]+\.py)")


class RecompileLog(logging.Handler):
    def emit(self, record):
        for line in record.getMessage().splitlines():
            line = _PATH.sub(r"\1", line.strip()).split("  # ")[0].rstrip()
            if re.match(r"Recompiling|- \d+/\d+: ", line) or "recompile_limit" in line:
                self.lines.append(line)

    def __enter__(self):
        torch._logging.set_logs(recompiles=True)  # first: it installs its own handlers
        self.lines, self.logger = [], logging.getLogger("torch._dynamo")
        self.saved, self.logger.handlers = self.logger.handlers, [self]
        return self

    def __exit__(self, *exc):
        self.logger.handlers = self.saved
        torch._logging.set_logs()


def step_and_busy(step, steps=10):
    """Median step time, GPU busy time per step (None on a CPU) and spread, in ms."""
    count, windows, busy = counters["frames"]["total"], [], None
    for _ in range(6):  # windows of `steps` back-to-back calls, without the profiler
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


def explain_slower(name, times, ref):
    """Print where the extra time of ``name`` went, if it is slower than ``ref``."""
    (t, busy, spread), (t0, busy0, spread0) = times[name], times[ref]
    if t <= t0:
        return print(f"{name}: not slower than {ref} ({t:.3f} vs {t0:.3f} ms)")
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
    print(f"{name}: {t / t0:.2f}x the time of {ref} ({t:.3f} vs {t0:.3f} ms); {why}")


# %%
# Checking it: one compilation, the eager schedule, the eager parameters
# ----------------------------------------------------------------------
#
# The recipe's run again, under ``train``: compiled by Inductor from an empty cache
# (``fresh_cache`` gives Inductor a new temporary cache folder), so its first step is a
# cold compile, which the cell asserts:
# the FX graph cache missed and a graph was compiled. After that first step the graph count
# must not change. An eager run with the same tensor learning rate is the float32 baseline,
# and a float64 eager run with a plain float learning rate, the way a script without
# ``torch.compile`` is written, is the reference: the schedule must match it, and each
# float32 run's parameters are measured against it.

with fresh_cache():
    compiled = train()
    assert counters["inductor"]["fxgraph_cache_miss"] > 0, counters["inductor"]
assert counters["inductor"]["fxgraph_cache_hit"] == 0, "must start from an empty cache"
assert compiled["graphs"][0] > 0 and len(set(compiled["graphs"])) == 1, compiled
eager = train(backend=None)
exact = train(float, backend=None, dtype=torch.float64)

torch.testing.assert_close(compiled["lr"], exact["lr"], rtol=1e-5, atol=0.0)


def error(run):  # relative error of all parameters together, against float64
    pairs = zip(run["params"], exact["params"])
    diff = sum((p.double() - q).norm() ** 2 for p, q in pairs)
    return (diff / sum(q.norm() ** 2 for q in exact["params"])).sqrt().item()


err_eager, err_compiled = error(eager), error(compiled)
print(f"graphs compiled after each step: {compiled['graphs']}")
print(f"parameter error to float64: eager {err_eager:.2e}, compiled {err_compiled:.2e}")
assert err_compiled <= 3 * err_eager + 1e-5

# %%
# The compiled error can be many times eager's and still be round-off. Most of it comes
# from Adam's bias correction :math:`1 - \beta_2^t`: with :math:`\beta_2 = 0.999` it
# subtracts two nearly equal numbers, and the compiled kernels compute it in float32, which
# leaves about four significant digits; eager Adam computes it in double precision. The
# floor of ``1e-5`` in the assertion allows for that; :ref:`foreach_map_recipe` computes
# it in float64 in its own compiled Adam.

# %%
# Why a float learning rate recompiles
# ------------------------------------
#
# Now the usual way of writing it, ``lr=0.01`` as a Python float, with the same scheduler.
# The recompile log names the guard that failed.

with RecompileLog() as log:
    float_lr = train(float, backend="eager")
print(f"graphs compiled after each step: {float_lr['graphs']}")
print("\n".join("    " + line for line in log.lines))

# %%
# The first step compiled ``Adam.step`` with the learning rate baked in as a constant,
# guarded by its value. The scheduler then stored a new float, and the second step
# failed that guard (the guard line's ``frame/version`` prefix names the frame and the
# cached version that failed). It is ``Adam.step`` that recompiles, not our function:
# ``torch.optim`` breaks the graph on purpose around the optimizer's step, which makes
# it a frame of its own (see :ref:`compiling_optimizer_recipe`).
#
# After that one recompilation the count stays flat. That is *automatic dynamic*: when a
# guarded number changes, Dynamo assumes it will keep changing and compiles a version that
# takes it as an input. ``torch.compile(..., dynamic=False)`` turns that off, and then every
# new value is a new compilation, until the function holds ``recompile_limit`` versions
# (8 by default); from then on Dynamo runs it in eager mode, with one line in the log as the
# only sign. None of this needs a scheduler: any code that stores a new float does it. The
# table counts the graphs for each case; the assertions state the rule.


def by_hand(opt):  # a hand-written warm-up: a new Python float after every step
    class ByHand:
        def step(self):
            opt.param_groups[0]["lr"] *= 1.1

    return ByHand()


limit = torch._dynamo.config.recompile_limit
rows = []
for name, lr_type, make in [
    ("float lr, LinearLR", float, None),
    ("float lr, by hand", float, by_hand),
    ("tensor lr, LinearLR", tensor, None),
]:
    default = train(lr_type, make, backend="eager")["graphs"][-1]
    with RecompileLog() as log:
        static = train(lr_type, make, backend="eager", dynamic=False)["graphs"][-1]
    hit_limit = any("hit config.recompile_limit" in line for line in log.lines)
    rows.append([name, default, static, "yes" if hit_limit else "no"])
    if lr_type is float:
        assert default == float_lr["graphs"][-1] > 1 and static == limit and hit_limit
    else:
        assert default == static == compiled["graphs"][0] and not hit_limit
print(f"graphs compiled in {N_STEPS} steps (recompile limit {limit})")
print(tabulate(rows, ["setup", "default", "dynamic=False", "hit limit"], "github"))

# %%
# Measuring it
# ------------
#
# What a recompilation costs is a whole compilation: the first row is the first step of
# the compiled run above, a cold compile included. The steady-state rows time one
# training step's ``opt.step()`` (the same gradients every call) with ``step_and_busy``,
# back to back, without flushing caches between calls.

model = make_model()
for p in model.parameters():
    p.grad = torch.randn_like(p)
opt = torch.optim.Adam(model.parameters(), lr=tensor(0.01))
times = {}
for name, step in [("compiled", torch.compile(opt.step)), ("eager", opt.step)]:
    step()  # compiles the compiled step
    times[name] = step_and_busy(step, steps=50)
gpu = ["GPU busy (ms)", "busy %", "bound"] if device == "cuda" else []
rows = [["compiled, first call (cold compile)", compiled["seconds"][0] * 1e3]]
rows[0] += ["-"] * len(gpu)
for name, (t, busy, _) in times.items():
    gpu_cells = [] if busy is None else [f"{busy:.3f}", f"{100 * busy / t:.0f}"]
    gpu_cells += ["GPU" if busy >= 0.85 * t else "CPU"] if gpu_cells else []
    rows.append([f"{name}, steady state", t, *gpu_cells])
print(f"{device}, torch {torch.__version__}, MLP {WIDTH}-{HIDDEN}-{WIDTH}, medians")
print(tabulate(rows, ["Adam step", "time (ms)", *gpu], "github", ".3f"))
if device == "cpu":
    print("On a CPU there is no separate device to be busy or idle: no GPU columns.")
explain_slower("compiled", times, "eager")

# %%
# The compiled step does CPU work of its own on every call: Python, the frames on both
# sides of the optimizer's deliberate graph break, and their guards on every parameter
# and state tensor. On a GPU, the busy share says whether that leaves the GPU idle, and
# the line under the table splits a slower compiled step's extra time into idle time
# (CPU work, which a CUDA graph removes: next section) and busy time (kernels). On a
# CPU, where all of a step is CPU time, that work weighs against the kernels it fused,
# and the line gives the timings' spread, since a busy machine can make either step look
# slower.

fig, ax = plt.subplots(figsize=(6, 2))
busy = [times[k][1] or times[k][0] for k in times]  # on a CPU: the step time
ax.barh(list(times), busy, label="GPU busy")
if device == "cuda":
    idle = [times[k][0] - b for k, b in zip(times, busy)]
    ax.barh(list(times), idle, left=busy, label="GPU idle")
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
ax.set(xlabel="ms per step", title=f"Adam step, steady state, {device}")
fig.tight_layout()
plt.show()

# %%
# Under a CUDA graph the tensor is required
# -----------------------------------------
#
# A recompiling float costs time but stays correct: the new version reads the new value.
# A step recorded in a CUDA graph (``mode="reduce-overhead"``, or ``torch.cuda.graph``
# as in :ref:`compiling_optimizer_recipe`) stores every kernel *with its arguments*, and
# a Python float is passed to a kernel by value: every replay uses the learning rate of
# the recording, whatever the scheduler writes afterwards, and nothing warns. A tensor
# is passed by address, so a replay reads whatever ``fill_`` last wrote. On a GPU, the
# next cell records one compiled step, sets the learning rate to zero (a new float, or
# ``fill_``), replays, and measures how far the parameters moved: they must not move.


def replay_with_lr_zero(lr_type):
    torch._dynamo.reset()
    model = make_model()
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt = torch.optim.Adam(model.parameters(), lr=lr_type(0.01))
    step, side = torch.compile(opt.step), torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (and compile) on a side stream
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    group = opt.param_groups[0]  # a new float, or the same tensor filled in place
    group["lr"] = 0.0 if lr_type is float else group["lr"].fill_(0.0)
    before = [p.detach().clone() for p in model.parameters()]
    graph.replay()
    return max((p - b).abs().max().item() for p, b in zip(model.parameters(), before))


if device == "cuda":
    moved = {"float": replay_with_lr_zero(float), "tensor": replay_with_lr_zero(tensor)}
    print(f"parameters moved by a replay after lr = 0: {moved}")
    assert moved["float"] > 0 and moved["tensor"] == 0, moved
else:
    print("CUDA graphs need a CUDA GPU: this check is skipped on the CPU.")

# %%
# Going further: schedulers that also change the betas
# ----------------------------------------------------
#
# ``OneCycleLR`` and ``CyclicLR`` (with ``cycle_momentum=True``, their default) also cycle
# Adam's first beta against the learning rate, by storing a new tuple that starts with a
# Python float, ``group["betas"] = (momentum, *rest)``, on every step. A tensor learning rate
# does not cover that, and the step recompiles on ``betas[0]``:

with RecompileLog() as log:
    one_cycle = train(
        make_sched=lambda o: OneCycleLR(o, 0.05, total_steps=N_STEPS + 1),
        backend="eager",
    )
print(f"graphs compiled after each step: {one_cycle['graphs']}")
print("\n".join("    " + line for line in log.lines[:2]))
assert one_cycle["graphs"][-1] > 1

# %%
# Tensor betas are not enough: the scheduler replaces the first with a float again.
# Either set ``cycle_momentum=False``, or keep one 0-dim tensor per group and, after
# every ``sched.step()``, ``fill_`` it with the float the scheduler wrote and put it
# back, ``group["betas"] = (beta1_tensor, group["betas"][1])``; only the second keeps
# the momentum cycling under a CUDA graph.
#
# Conclusion
# ----------
#
# A compiled ``opt.step()`` guards every Python number it reads, so code that stores a
# new float in ``param_groups`` makes ``Adam.step`` recompile: once under automatic
# dynamic, or once per value until the recompile limit with ``dynamic=False``. A tensor
# learning rate, which schedulers fill in place, compiles once and matches eager; under
# a CUDA graph it is the only way a replay sees a new rate at all.
#
# Further reading
# ---------------
#
# * `How to adjust the learning rate (torch.optim)
#   <https://docs.pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate>`__
# * :ref:`compiling_optimizer_recipe`: the compiled step, its graph breaks and recording it
#   in a CUDA graph.
# * `torch._logging.set_logs <https://docs.pytorch.org/docs/stable/logging.html>`__
# * `torch.compile troubleshooting, including recompilations
#   <https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html>`__

# sphinx_gallery_thumbnail_number = 1
