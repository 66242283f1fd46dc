"""
.. _compiling_optimizer_lr_scheduler:

A compiled optimizer step with an LR scheduler, compiled once
=============================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * Why a learning rate stored as a Python float makes a compiled ``opt.step()``
         recompile when it changes (with or without a scheduler), and why a tensor
         learning rate does not
       * How to count compilations and read the recompile log that explains each one
       * What the recompile limit is and what happens when a training loop hits it
       * What ``OneCycleLR`` and ``CyclicLR`` need on top of a tensor learning rate,
         because they also change Adam's ``betas``
       * Why a tensor learning rate matters most when the step is recorded in a CUDA graph
       * How to check that the compiled run follows the same schedule, and reaches the same
         parameters, as an eager run

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
# Wrapping ``opt.step()`` in ``torch.compile`` turns the optimizer's per-parameter loop into a
# few fused kernels. Training loops rarely keep the learning rate fixed, though: a scheduler
# such as ``LinearLR`` writes a new value into ``opt.param_groups[i]["lr"]`` after every step.
#
# ``torch.compile`` only reuses a compiled graph while its *guards* hold: checks, run before
# every call, that the inputs still look the way they did at compile time. A Python number
# that the traced code reads is normally baked into the graph as a constant and guarded by
# value (``lr == 0.001``). Any new float breaks that guard on the very next step, whether a
# scheduler or your own code wrote it into ``param_groups``, and the step
# is compiled again. A tensor is guarded by its metadata (dtype, device, shape), not by its
# value, and the compiled code reads its value at run time. A scheduler that *fills* the same
# tensor with a new value never breaks a guard.
#
# This recipe counts the compilations that each choice costs, shows the log line that explains
# every recompilation, and checks that the compiled run computes exactly what eager computes.
#
# Setup
# -----
#
# The model is a small two-layer MLP: the lesson is about how often the step compiles, not how
# fast it runs, so the sizes only grow a little on a GPU.

import contextlib
import logging
import re
import time

import matplotlib.pyplot as plt
import torch
import torch._inductor.utils
from tabulate import tabulate
from torch._dynamo.utils import counters
from torch.optim.lr_scheduler import CosineAnnealingLR, CyclicLR, LinearLR, OneCycleLR

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    WIDTH, HIDDEN = 1024, 4096
else:
    device_name = "CPU"
    WIDTH, HIDDEN = 32, 64
    print("No CUDA GPU found: running on the CPU with a smaller model.")

N_STEPS = 12  # more than the default recompile limit of 8, so the limit shows up below
LR = 1e-2

print(f"torch {torch.__version__} on {device} ({device_name})")
print(f"MLP {WIDTH} -> {HIDDEN} -> {WIDTH}, {N_STEPS} steps per run")
print(f"recompile limit: {torch._dynamo.config.recompile_limit}")

# %%
# The pieces every experiment shares: a model built from the same seed each time, and an
# optimizer whose learning rate (and, later, ``betas``) can be a float or a 0-dimensional
# tensor. A tensor hyperparameter lives on the same device as the parameters.


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(WIDTH, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, WIDTH),
    ).to(device)


def make_adam(model, tensor_lr=False, tensor_betas=False):
    lr = torch.tensor(LR, device=device) if tensor_lr else LR
    betas = (0.9, 0.999)
    if tensor_betas:
        betas = tuple(torch.tensor(b, device=device) for b in betas)
    return torch.optim.Adam(model.parameters(), lr=lr, betas=betas)


# %%
# Four schedulers: two that only change the learning rate, and ``OneCycleLR`` and
# ``CyclicLR``, which also cycle Adam's first beta (its momentum) against the learning rate.
# A fifth entry is no scheduler at all: ``FloatLRByHand`` multiplies the learning rate by
# 1.1 after every step, the way a hand-written warm-up might, by storing a new Python
# float in ``param_groups``.


class FloatLRByHand:
    def __init__(self, opt):
        self.opt = opt

    def step(self):
        for group in self.opt.param_groups:
            group["lr"] = group["lr"] * 1.1


SCHEDULERS = {
    "LinearLR": lambda opt: LinearLR(opt, start_factor=0.1, total_iters=N_STEPS),
    "CosineAnnealingLR": lambda opt: CosineAnnealingLR(
        opt, T_max=N_STEPS, eta_min=1e-4
    ),
    # total_steps counts scheduler steps: the constructor's, then one per training step
    "OneCycleLR": lambda opt: OneCycleLR(opt, max_lr=5 * LR, total_steps=N_STEPS + 1),
    # cycle_momentum=True is the default: beta1 cycles between 0.8 and 0.9
    "CyclicLR": lambda opt: CyclicLR(
        opt, base_lr=LR / 10, max_lr=LR, step_size_up=N_STEPS
    ),
    "by hand": FloatLRByHand,
}

# %%
# Counting compilations
# ---------------------
#
# A ``torch.compile`` backend is any callable that receives the FX graph Dynamo captured and
# returns a function to run. Dynamo calls it once per compilation, so a wrapper that counts
# its calls counts compilations exactly. With ``inner=None`` the wrapper runs the captured
# graph as it is (no code generation), which keeps the counting experiments cheap. Whether a
# guard fails is decided by Dynamo *before* any backend is called, so the counts are the same
# as with the default Inductor backend; the correctness section below uses Inductor itself.


class CountingBackend:
    def __init__(self, inner=None):
        self.inner = inner
        self.compilations = 0
        self.graph_inputs = []  # how many inputs each compiled graph takes

    def __call__(self, gm, example_inputs):
        self.compilations += 1
        self.graph_inputs.append(len(example_inputs))
        if self.inner is None:
            return gm.forward
        return self.inner(gm, example_inputs)


# %%
# ``train`` runs ``N_STEPS`` steps of a plain loop (gradients, optimizer step, scheduler
# step) and records, after each step, the learning rate, Adam's first beta and how many
# compilations have happened so far. The gradients come from a generator seeded the same way
# in every run, not from a loss, so that every run sees exactly the same gradients and runs
# can be compared value for value. With gradients from a real loss, the rounding differences
# between eager and compiled Adam (a fused kernel may order its float32 operations
# differently) change the next step's gradients, and Adam, which divides each gradient by
# its own running scale, turns a tiny change in a near-zero gradient into a step of about the
# full learning rate: two correct runs drift visibly apart within a few steps.
# ``torch._dynamo.reset()`` at the start gives each run an empty compile cache, so no run
# inherits compiled code (or a recompile count) from the one before. ``keep_beta1_tensor``
# is for ``OneCycleLR`` and is explained in its section.


def train(
    scheduler,
    *,
    compiled=True,
    tensor_lr=False,
    tensor_betas=False,
    keep_beta1_tensor=False,
    dynamic=None,
    inner=None,
):
    torch._dynamo.reset()
    model = make_model()
    opt = make_adam(model, tensor_lr, tensor_betas)
    sched = SCHEDULERS[scheduler](opt)
    # keep_beta1_as_tensor is defined in the OneCycleLR section below
    after_sched = keep_beta1_as_tensor(opt) if keep_beta1_tensor else None
    backend = CountingBackend(inner)

    if compiled:

        @torch.compile(backend=backend, dynamic=dynamic)
        def step():
            opt.step()

    else:
        step = opt.step

    history = {"lr": [], "beta1": [], "compilations": [], "step_s": []}
    grads = torch.Generator(device=device).manual_seed(1)
    for _ in range(N_STEPS):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=grads, device=device)
        t0 = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        history["step_s"].append(time.perf_counter() - t0)
        opt.zero_grad()
        sched.step()
        if after_sched is not None:
            after_sched()
        group = opt.param_groups[0]
        history["lr"].append(float(group["lr"]))
        history["beta1"].append(float(group["betas"][0]))
        history["compilations"].append(backend.compilations)
    history["params"] = [p.detach().clone() for p in model.parameters()]
    history["graph_inputs"] = backend.graph_inputs
    return history


# %%
# Seeing the recompile log
# ------------------------
#
# ``torch._logging.set_logs(recompiles=True)`` makes Dynamo log every recompilation with the
# guards that failed. The records go to the ``torch._dynamo`` logger, whose handler writes to
# standard error. ``recompile_log`` swaps that handler for ``RecompileLog``, which counts the
# guard failures and the hits of the recompile limit, and prints a trimmed copy to standard
# output so that it shows on this page and in a notebook: the first line of each record, the
# failed guard of the newest cached version (a record lists one per cached version), and file
# paths cut down to their base name.

_PATH = re.compile(r"(?:/[^\s'\"():/]+)+/([^\s'\"():/]+\.py)")
_GUARD = re.compile(r"- \d+/(\d+): ")  # "- frame/version: guard"


def _trim(line):
    line = _PATH.sub(r"\1", line)
    # "guard   # source line that read the value  # file:line in function": keep both ends
    parts = [part.strip() for part in line.split("  # ")]
    return parts[0] if len(parts) == 1 else f"{parts[0]}  # {parts[-1]}"


class RecompileLog(logging.Handler):
    def __init__(self, echo=True):
        super().__init__()
        self.echo = echo
        self.guard_failures = 0
        self.limit_hits = 0
        self.limit_warning = ""

    def emit(self, record):
        lines = [line.strip() for line in record.getMessage().splitlines()]
        if not lines:
            return
        if lines[0].startswith("Recompiling function"):
            self.guard_failures += 1
            guards = [line for line in lines if _GUARD.match(line)]
            newest = max(guards, key=lambda g: int(_GUARD.match(g)[1]), default=None)
            keep = lines[:1] + ([newest] if newest else [])
        elif "hit config.recompile_limit" in lines[0]:
            self.limit_hits += 1
            self.limit_warning = record.getMessage()
            keep = lines[:1] + [
                line for line in lines if line.startswith("last reason")
            ]
        else:
            return
        if self.echo:
            for line in keep:
                print("    " + _trim(line))


@contextlib.contextmanager
def recompile_log(echo=True):
    log = logging.getLogger("torch._dynamo")
    torch._logging.set_logs(recompiles=True)
    saved, handler = log.handlers[:], RecompileLog(echo)
    log.handlers = [handler]
    try:
        yield handler
    finally:
        log.handlers = saved
        torch._logging.set_logs()


# %%
# A float learning rate
# ---------------------
#
# First, the way most training scripts are written: ``lr=1e-2`` as a Python float and
# ``LinearLR`` warming it up from a tenth of that value.

with recompile_log() as log:
    run = train("LinearLR")
print(f"compilations after each step: {run['compilations']}")
print(f"guard failures logged: {log.guard_failures}")
print(f"inputs of each compiled graph: {run['graph_inputs']}")

# %%
# The first call compiled the step with the learning rate baked in, under a guard that it
# equals ``0.001`` (the warm-up start value). The scheduler changed it, so on the second step
# the guard failed and the step was compiled again. The log names the failed guard and the
# line of ``adam.py`` that read the value. ``2/0`` is Dynamo's name for the cached version
# whose guard failed (frame 2, version 0).
#
# The function it recompiles is ``Adam.step`` itself, not our ``step``, because ``Adam.step``
# is a frame of its own: the optimizer's ``_use_grad_for_differentiable`` decorator puts a
# deliberate graph break before and after it (see :ref:`compiling_optimizer_recipe`), and
# the scheduler replaces ``opt.step`` with a small wrapper that lives in
# ``torch/optim/lr_scheduler.py``, a file Dynamo never traces (``trace_rules.py`` lists it
# in ``FORCE_SKIP_FILES``), so tracing starts again in the frames that wrapper calls. Neither
# of these is the *cause* of the recompilation, though. The cause is the float: any code
# that stores a new Python number in ``param_groups`` makes the same guard fail. Here is the
# same loop without any scheduler, with ``FloatLRByHand`` changing the float instead:

with recompile_log() as log:
    run = train("by hand")
print(f"compilations after each step: {run['compilations']}")
print(f"guard failures logged: {log.guard_failures}")

# %%
# The same guard on the learning rate fails in the same frame, ``Adam.step``, and the step
# is compiled a second time; no scheduler is involved.
#
# After that single recompilation the count stays flat. This is *automatic dynamic*: when a
# guarded number changes, Dynamo assumes it will keep changing and compiles a version in which
# the float is no longer a constant but an input of the graph. The second graph indeed takes
# an extra input: the learning rate, passed in on every call.
#
# So with default settings a float learning rate costs one extra compilation, not one per
# step. Two settings bring back one compilation per value:
# ``torch.compile(..., dynamic=False)``, which turns automatic dynamic off, and
# ``torch._dynamo.config.specialize_float = True``. Here is the same run with
# ``dynamic=False``:

with recompile_log() as log:
    run = train("LinearLR", dynamic=False)
print(f"compilations after each step: {run['compilations']}")
print(
    f"guard failures logged: {log.guard_failures}, "
    f"of which hit the recompile limit: {log.limit_hits}"
)

# %%
# Every step now brings a new value, a failed guard and a new compilation, until the function
# has ``recompile_limit`` (8) compiled versions. The eighth failure is still logged, but then
# Dynamo finds the cache full and stops compiling that function: from then on, a call whose
# guards match none of the cached versions runs in eager mode, which is why the count stays
# at 8 for the last steps. Nothing fails and the loop still trains; the only sign is one
# warning in the log. The handler above shortens it to two lines; here it is once more,
# complete (file paths cut to their base name), as the same run logged it:

# intended-warning: the recompile-limit warning is what this cell shows
for line in log.limit_warning.splitlines():
    line = re.sub(r"\s{3,}#", "  #", _PATH.sub(r"\1", line.rstrip()))
    print("    " + line)

# %%
# Line by line: the limit that was hit and its value (``recompile_limit``, 8 by default);
# the function that stopped being compiled, ``Adam.step`` with its file and first line; the
# guard that failed on the last attempt, the learning rate again, with the source line that
# read it (recent releases repeat that line as a short "User stack trace"); and two pointers,
# to the ``recompiles`` log used on this page and to the troubleshooting guide. The warning is
# logged once per function, through Python's ``logging`` (a logger under ``torch._dynamo``), so a
# training script that silences or redirects that logger never shows it. Setting
# ``torch._dynamo.config.fail_on_recompile_limit_hit = True`` turns the fallback into an
# error, which is useful in tests. Raising ``recompile_limit`` only moves the problem: a
# schedule with thousands of distinct values would need thousands of compilations.
#
# A tensor learning rate
# ----------------------
#
# Now pass the learning rate as a 0-dimensional tensor. The optimizer keeps that tensor in
# ``param_groups``, and the schedulers used here write each new learning rate into that
# tensor in place (``fill_``) instead of replacing it. Dynamo guards a tensor on its dtype,
# device and shape, which never change, and the compiled code reads its value when it runs.

with recompile_log() as log:
    run = train("LinearLR", tensor_lr=True, dynamic=False)
print(f"compilations after each step: {run['compilations']}")
print(f"guard failures logged: {log.guard_failures}")

# %%
# One compilation and an empty log, even with ``dynamic=False``: the learning rate is an input
# of the graph from the start. Automatic dynamic rescues a float learning rate after one
# recompilation, but the tensor avoids even that one (with Inductor, a recompilation costs as
# much as the first compilation, timed below), and it does not depend on settings such as
# ``dynamic=False``.
#
# OneCycleLR and CyclicLR also change the betas
# ---------------------------------------------
#
# With ``cycle_momentum=True`` (their default), ``OneCycleLR`` and ``CyclicLR`` cycle Adam's
# first beta against the learning rate (``CyclicLR`` between ``base_momentum=0.8`` and
# ``max_momentum=0.9`` unless told otherwise). Both do so by assigning a new tuple that
# starts with a Python float, ``group["betas"] = (momentum, *group["betas"][1:])``, in their
# constructor and on every ``step()``. A tensor learning rate does not help with that: the
# first beta is still a float that changes every step, so the compiled step meets the same
# guard failure as with a float learning rate, now on ``betas[0]``.

with recompile_log() as log:
    run = train("OneCycleLR", tensor_lr=True)
print(f"compilations after each step: {run['compilations']}")

# %%
# The failed guard is now on ``betas[0]`` (and with ``dynamic=False`` there would be one
# failure per step, as the table below shows). Passing tensor betas to ``Adam`` is not enough
# either: the scheduler's constructor already replaces the first one with a float (the table
# below measures it). What works is to give each parameter group *one* tensor for its first
# beta and, after every scheduler step, copy the float the scheduler wrote into that tensor
# and put the tensor back in the tuple. The scheduler still computes every value; the
# compiled step only ever sees the same tensor. ``keep_beta1_as_tensor`` does this and returns
# the function to call after each ``sched.step()``; ``train`` calls it when
# ``keep_beta1_tensor=True``.


def keep_beta1_as_tensor(opt):
    beta1 = [
        torch.tensor(float(g["betas"][0]), device=device) for g in opt.param_groups
    ]

    def put_back():
        for group, b1 in zip(opt.param_groups, beta1):
            value, beta2 = group["betas"]
            if not isinstance(value, torch.Tensor):
                b1.fill_(value)  # same tensor, new value: no guard sees a change
            group["betas"] = (b1, beta2)

    put_back()
    return put_back


with recompile_log() as log:
    run = train(
        "OneCycleLR",
        tensor_lr=True,
        tensor_betas=True,
        keep_beta1_tensor=True,
        dynamic=False,
    )
print(f"compilations after each step: {run['compilations']}")
print(f"guard failures logged: {log.guard_failures}")

# %%
# If you do not need the momentum cycle, ``cycle_momentum=False`` leaves the betas alone and
# a tensor learning rate is enough.
#
# Why tensors matter most under CUDA graphs
# -----------------------------------------
#
# Without CUDA graphs, a float that changes costs compilations: one extra with automatic
# dynamic, or one per value up to the limit with ``dynamic=False``. The results stay right,
# because a recompiled or eager step reads the new value. A step recorded in a CUDA graph
# (``mode="reduce-overhead"``, or ``torch.cuda.graph`` around the compiled step as in
# :ref:`compiling_optimizer_recipe`) is different: the recording stores the kernels *with
# their arguments*, and a Python float is passed to a kernel as an argument. Every replay
# then uses the value the float had when the graph was recorded, whatever the scheduler
# writes into ``param_groups`` afterwards, and nothing warns about it. A 0-dimensional
# tensor is passed by its address instead, so the recorded kernels read whatever value
# ``fill_`` last wrote there. The same holds for a cycled ``betas[0]``: under a CUDA graph it
# must be a tensor that the scheduler's value is copied into, as ``keep_beta1_as_tensor``
# does, or the momentum stops cycling.
#
# On a GPU, the next cell shows it. It records one compiled step in a CUDA graph, sets the
# learning rate to zero the way a scheduler would (a new float, or ``fill_`` on the tensor),
# replays the graph and measures how far the parameters moved. With a learning rate of zero
# they must not move at all.


def replay_with_lr_zero(tensor_lr):
    torch._dynamo.reset()
    model = make_model()
    opt = make_adam(model, tensor_lr=tensor_lr)
    grads = torch.Generator(device=device).manual_seed(2)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=grads, device=device)
    step = torch.compile(opt.step)
    side = torch.cuda.Stream()  # warm up on a side stream, then record one call
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    group = opt.param_groups[0]
    if tensor_lr:
        group["lr"].fill_(0.0)
    else:
        group["lr"] = 0.0
    before = [p.detach().clone() for p in model.parameters()]
    graph.replay()
    torch.cuda.synchronize()
    return max((p - b).abs().max().item() for p, b in zip(model.parameters(), before))


if device == "cuda":
    moved_float = replay_with_lr_zero(tensor_lr=False)
    moved_tensor = replay_with_lr_zero(tensor_lr=True)
    print(
        f"float lr set to 0.0, then replay:  parameters moved by up to {moved_float:.2e}"
    )
    print(
        f"tensor lr filled with 0, then replay: parameters moved by up to {moved_tensor:.2e}"
    )
    assert moved_float > 0, "the recorded float learning rate should still be in use"
    assert moved_tensor == 0, "the replay should read the tensor's new value"
else:
    print("CUDA graphs need a CUDA GPU: this check is skipped on the CPU.")

# %%
# On a GPU, the assertions check both halves: the replay with the float kept stepping with
# the learning rate of the recording, and the replay with the tensor read the zero and left
# the parameters where they were.
#
# Compilations per scheduler and setup
# ------------------------------------
#
# The table runs every scheduler with every setup, twice: with default settings and with
# ``dynamic=False``. The log handler runs silently here and supplies a second count: every
# compilation after the first must come with one logged guard failure (plus the failure that
# hits the limit, where there is one). The assertions state the lesson: a setup in which
# everything the scheduler changes is a tensor compiles exactly once; every other setup
# recompiles, and with ``dynamic=False`` it runs into the recompile limit. The last column
# says whether the ``dynamic=False`` run hit the limit.

SETUPS = {
    "float lr": {},
    "tensor lr": {"tensor_lr": True},
    "tensor lr + betas": {"tensor_lr": True, "tensor_betas": True},
    "tensor lr + betas, beta1 kept": {
        "tensor_lr": True,
        "tensor_betas": True,
        "keep_beta1_tensor": True,
    },
}
CASES = [
    ("LinearLR", "float lr"),
    ("LinearLR", "tensor lr"),
    ("CosineAnnealingLR", "float lr"),
    ("CosineAnnealingLR", "tensor lr"),
    ("OneCycleLR", "float lr"),
    ("OneCycleLR", "tensor lr"),
    ("OneCycleLR", "tensor lr + betas"),
    ("OneCycleLR", "tensor lr + betas, beta1 kept"),
    ("CyclicLR", "tensor lr"),
    ("CyclicLR", "tensor lr + betas, beta1 kept"),
]
COMPILES_ONCE = {
    ("LinearLR", "tensor lr"),
    ("CosineAnnealingLR", "tensor lr"),
    ("OneCycleLR", "tensor lr + betas, beta1 kept"),
    ("CyclicLR", "tensor lr + betas, beta1 kept"),
}
limit = torch._dynamo.config.recompile_limit


def count_compilations(scheduler, setup, dynamic):
    with recompile_log(echo=False) as log:
        compilations = train(scheduler, dynamic=dynamic, **SETUPS[setup])[
            "compilations"
        ]
    recompiled = log.guard_failures - log.limit_hits
    assert recompiled == compilations[-1] - 1, (scheduler, setup, log.guard_failures)
    return compilations[-1], log.limit_hits > 0


rows = []
for scheduler, setup in CASES:
    default, _ = count_compilations(scheduler, setup, dynamic=None)
    static, static_hit_limit = count_compilations(scheduler, setup, dynamic=False)
    rows.append(
        [scheduler, setup, default, static, "yes" if static_hit_limit else "no"]
    )
    if (scheduler, setup) in COMPILES_ONCE:
        assert default == 1 and static == 1, (scheduler, setup, default, static)
    else:
        assert default > 1, (scheduler, setup, default)
        assert static == limit and static_hit_limit, (scheduler, setup, static)

print(f"compilations over {N_STEPS} steps (recompile limit {limit})")
print(
    tabulate(
        rows,
        headers=["scheduler", "setup", "default", "dynamic=False", "hit limit"],
        tablefmt="github",
    )
)

# %%
# The ``OneCycleLR`` rows ``tensor lr`` and ``tensor lr + betas`` and the ``CyclicLR`` row
# ``tensor lr`` are the trap: a tensor learning rate, even with tensor betas, still
# recompiles, because the scheduler writes a float into ``betas[0]``. Under
# ``dynamic=False`` they ran their last steps in eager mode.
#
# Same schedule, same parameters
# ------------------------------
#
# Counting compilations says nothing about whether the compiled step computes the right thing.
# For each scheduler, this section trains once in eager mode with plain floats (what a training
# script without ``torch.compile`` does) and once with the compiled step, now generated by
# Inductor, in the setup that compiled once above. The learning rates, Adam's first beta and
# the parameters after ``N_STEPS`` steps must match up to float32 rounding: the tensors hold
# float32 values where the eager run computes with Python's double-precision floats.
#
# Each compiled run also measures what one compilation costs: its first step is traced by
# Dynamo and compiled by Inductor. A compile time means something only if it starts from an
# empty cache, and this site keeps Inductor's cache between builds on purpose, so the runs
# use ``torch._inductor.utils.fresh_cache()``, which gives Inductor (and Triton) a new,
# empty cache directory for its duration. ``LinearLR`` and ``CosineAnnealingLR`` share one
# fresh cache, in that order: the first starts empty (the cell asserts that Inductor's
# FX-graph cache had no hit), and the second may find the first one's graph there, which the
# hit counter shows. ``OneCycleLR`` gets a fresh cache of its own.

# ``fresh_cache`` was called ``fresh_inductor_cache`` in older releases
fresh_cache = getattr(torch._inductor.utils, "fresh_cache", None)
if fresh_cache is None:
    fresh_cache = torch._inductor.utils.fresh_inductor_cache


def compiled_run(scheduler):
    tensors = {"tensor_lr": True}
    if scheduler == "OneCycleLR":
        tensors.update(tensor_betas=True, keep_beta1_tensor=True)
    counters.clear()
    run = train(scheduler, inner=torch._inductor.compile, **tensors)
    run["hits"] = counters["inductor"]["fxgraph_cache_hit"]
    run["misses"] = counters["inductor"]["fxgraph_cache_miss"]
    return run


compiled_runs = {}
with fresh_cache():
    compiled_runs["LinearLR"] = compiled_run("LinearLR")
    assert compiled_runs["LinearLR"]["hits"] == 0, "must start from an empty cache"
    compiled_runs["CosineAnnealingLR"] = compiled_run("CosineAnnealingLR")
with fresh_cache():
    compiled_runs["OneCycleLR"] = compiled_run("OneCycleLR")
    assert compiled_runs["OneCycleLR"]["hits"] == 0, "must start from an empty cache"

results = {}
for scheduler, compiled in compiled_runs.items():
    eager = train(scheduler, compiled=False)
    results[scheduler] = (eager, compiled)
    assert compiled["compilations"][-1] == 1
    for key in ("lr", "beta1"):
        torch.testing.assert_close(
            torch.tensor(compiled[key], dtype=torch.float64),
            torch.tensor(eager[key], dtype=torch.float64),
            rtol=1e-5,
            atol=0.0,
        )
    for p_compiled, p_eager in zip(compiled["params"], eager["params"]):
        torch.testing.assert_close(p_compiled, p_eager, rtol=1e-4, atol=1e-5)
    print(f"{scheduler:18s} compiled once; lr, beta1 and parameters match eager")

# %%
# The first step of each compiled run, with the state of Inductor's FX-graph cache during
# it. A run with no cache hit compiled everything from scratch and its first step is a cold
# compile time; a run with hits reused generated code and is labelled warm. These are single
# runs, not a benchmark. Every recompilation a float learning rate causes costs about as
# much as a cold first step, minus what the cache happens to hold.

rows = []
for scheduler, run in compiled_runs.items():
    label = "cold (empty cache)" if run["hits"] == 0 else "warm (cache hits)"
    rows.append([scheduler, run["step_s"][0], run["hits"], run["misses"], label])
print(
    f"{device_name}, torch {torch.__version__}, MLP {WIDTH}-{HIDDEN}-{WIDTH}, one run each"
)
print(
    tabulate(
        rows,
        headers=["scheduler", "first step (s)", "hits", "misses", "cache"],
        floatfmt=".2f",
    )
)
shared = compiled_runs["CosineAnnealingLR"]["hits"] > 0
print(
    "CosineAnnealingLR "
    + (
        "reused the graph compiled for LinearLR: both only change a tensor lr"
        if shared
        else "found nothing of LinearLR's in the cache and compiled from scratch"
    )
)

# %%
# The plot overlays the eager schedules (lines) with the values the compiled runs used
# (dots).

fig, (ax_lr, ax_beta) = plt.subplots(1, 2, figsize=(10, 4))
steps = range(1, N_STEPS + 1)
for scheduler, (eager, compiled) in results.items():
    (line,) = ax_lr.plot(steps, eager["lr"], label=scheduler)
    ax_lr.plot(steps, compiled["lr"], "o", color=line.get_color())
eager, compiled = results["OneCycleLR"]
ax_beta.plot(steps, eager["beta1"], color="tab:green", label="OneCycleLR")
ax_beta.plot(steps, compiled["beta1"], "o", color="tab:green")
ax_lr.set(
    xlabel="step",
    ylabel="learning rate",
    title="Learning rate (line eager, dots compiled)",
)
ax_beta.set(
    xlabel="step", ylabel="beta1", title="Adam's first beta (line eager, dots compiled)"
)
ax_lr.legend(fontsize=8)
ax_beta.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %%
# Conclusion
# ----------
#
# A compiled ``opt.step()`` guards every Python number it reads, so any code that writes a
# new float into ``param_groups`` each step, a scheduler or a line of your own, makes a guard
# fail in ``Adam.step``: with default settings that costs one recompilation before automatic
# dynamic turns the float into a graph input, and with ``dynamic=False`` it costs a
# recompilation per step until the recompile limit sends the step back to eager mode, with
# one warning in the log. A tensor learning rate avoids all of it, because schedulers fill
# that tensor in place, and under a CUDA graph it is the only way the recorded step sees a
# new value at all. ``OneCycleLR`` and ``CyclicLR`` also rewrite Adam's ``betas`` with a
# float, so the first beta has to be kept as one tensor too. With both, the step compiles
# once and matches eager.
#
# Further reading
# ---------------
#
# * `How to adjust the learning rate (torch.optim)
#   <https://docs.pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate>`__
# * `OneCycleLR
#   <https://docs.pytorch.org/docs/stable/generated/torch.optim.lr_scheduler.OneCycleLR.html>`__
#   and `CyclicLR
#   <https://docs.pytorch.org/docs/stable/generated/torch.optim.lr_scheduler.CyclicLR.html>`__
# * :ref:`compiling_optimizer_recipe`: the compiled step, its graph breaks and recording it
#   in a CUDA graph.
# * `torch._logging.set_logs <https://docs.pytorch.org/docs/stable/logging.html>`__
# * `torch.compile troubleshooting, including recompilations
#   <https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html>`__
