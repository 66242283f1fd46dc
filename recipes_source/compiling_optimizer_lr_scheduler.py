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
import os
import re
from unittest import mock

# torch.profiler's tracing library (Kineto), which the timings below use, logs each
# start and stop: level 6 quiets it.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
import matplotlib.pyplot as plt
import torch
from tabulate import tabulate
from torch import nn
from torch._dynamo.utils import counters
from torch.nn.utils import parameters_to_vector as flat
from torch.optim.lr_scheduler import LinearLR, OneCycleLR

import measure

device = "cuda" if torch.cuda.is_available() else "cpu"
measure.require(cxx=device == "cpu", triton=device == "cuda")  # what Inductor needs
WIDTH, HIDDEN = (1024, 4096) if device == "cuda" else (32, 64)
N_STEPS = 12  # more than the default recompile limit of 8, which shows up below
gpu_name = torch.cuda.get_device_name() if device == "cuda" else None
device_name = gpu_name or f"CPU, threads: {torch.get_num_threads()}"
print(f"torch {torch.__version__} on {device_name}; MLP {WIDTH}-{HIDDEN}-{WIDTH}")
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


opt_step = torch.compile(opt.step)
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
# (``torch._logging.set_logs(recompiles=True)``).


tensor = functools.partial(torch.tensor, device=device)


def train(lr_type=tensor, sched=None, backend="inductor", dtype=None, cap=False, **kw):
    torch._dynamo.reset()
    counters.clear()
    model = make_model(dtype or torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=lr_type(0.01), capturable=cap)
    sched = (sched or (lambda o: LinearLR(o, 0.1, total_iters=N_STEPS)))(opt)
    step = torch.compile(opt.step, backend=backend, **kw) if backend else opt.step
    grads = torch.Generator().manual_seed(1)
    run = {"lr": [], "graphs": []}
    for _ in range(N_STEPS):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=grads).to(p)
        step()
        sched.step()
        run["lr"].append(float(opt.param_groups[0]["lr"]))
        run["graphs"].append(counters["stats"]["unique_graphs"])
    run["capturable"] = opt.param_groups[0]["capturable"]  # after compiling, too
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


# %%
# Checking it: one compilation, the eager schedule, the eager parameters
# ----------------------------------------------------------------------
#
# The recipe's run again, under ``train``: compiled by Inductor from an empty cache
# (``measure.cold_compile`` gives Inductor a new temporary cache folder), so its first
# step is a cold compile, which it asserts: the FX graph cache missed, never hit, and a
# graph was compiled. After that first step the graph count must not change. A float64
# eager run with a plain float learning rate, the way a script without ``torch.compile``
# is written, is the reference: the schedule must match it, and each float32 run's
# parameters are measured against it.
#
# Under ``torch.compile``, Adam reads its step count as a float32 tensor: Dynamo sets
# ``capturable=True`` in each param group whose parameters are on a GPU and have no
# state yet (the ``capturable`` column shows the flag after the run), and on any device
# ``_get_value`` keeps the tensor while compiling. The bias correction
# :math:`1 - \beta_2^t` is then computed in float32. With :math:`\beta_2 = 0.999` it is
# about :math:`t/1000`, so an error in :math:`\beta_2^t` grows a thousandfold relative
# to it: float32 stores 0.999 as 0.99900001287, which makes :math:`\beta_2^t` about
# :math:`1.3 \cdot 10^{-8}\,t` too large, and one float32 step near 1
# (:math:`6 \cdot 10^{-8}`) in the computed power moves the correction by
# :math:`6 \cdot 10^{-5}/t`. Eager Adam with ``capturable=False`` computes it from a
# Python float, in double precision.
#
# More runs separate the causes: ``backend="aot_eager"`` runs the program that Dynamo
# and AOTAutograd traced operator by operator, without Inductor's kernels; on a GPU
# (eager's capturable path refuses CPU tensors), eager Adam with ``capturable=True``
# runs once as it is and once with ``torch._foreach_pow``, which it calls for
# :math:`\beta_1^t` and :math:`\beta_2^t`, replaced by the power that Inductor
# compiles. The line under the table compares that power with eager's, step by step,
# in float32 steps: a negative step makes :math:`\beta_2^t` smaller, against the rounding
# of 0.999, which makes it too large.

cold = measure.cold_compile(train, device=device)
compiled = cold.result
assert compiled["graphs"][0] > 0 and len(set(compiled["graphs"])) == 1, compiled
exact = train(float, backend=None, dtype=torch.float64)
torch.testing.assert_close(compiled["lr"], exact["lr"], rtol=1e-5, atol=0.0)
runs = {"eager": train(backend=None), "compiled": compiled}
runs["compiled, aot_eager"] = train(backend="aot_eager")
pow_c = torch.compile(lambda base, t: base**t, dynamic=False)  # Inductor's power
if device == "cuda":
    runs["eager, capturable=True"] = train(backend=None, cap=True)
    with mock.patch("torch._foreach_pow", lambda b, s: [pow_c(b, t) for t in s]):
        runs["eager, capturable=True, compiled pow"] = train(backend=None, cap=True)
ref = flat(exact["params"])  # all parameters in one vector (float32 - float64: float64)
err = {k: float((flat(r["params"]) - ref).norm() / ref.norm()) for k, r in runs.items()}
rows = [[k, r["capturable"], err[k], err[k] / err["eager"]] for k, r in runs.items()]
headers = ["Adam, 12 steps", "capturable", "error to float64", "x eager's"]
print(tabulate(rows, headers, "github", ".3g"))
ts = list(torch.arange(1.0, N_STEPS + 1, device=device))  # 0-dim counts, as in Adam
eager = torch._foreach_pow(0.999, ts)
apart = [round((pow_c(0.999, t) - e).item() * 2**24) for t, e in zip(ts, eager)]
print(f"0.999**t, t = 1..{N_STEPS}: compiled minus eager, in float32 steps: {apart}")
ratio = err["compiled"] / err["compiled, aot_eager"]
swap = err.get("eager, capturable=True, compiled pow", 0.0) / err["compiled"]
reading = (
    "they agree"
    if abs(ratio - 1) < 0.05
    else "eager Adam given the compiled powers matches it: they make the difference"
    if abs(swap - 1) < 0.05
    else "a surprise that the compiled powers alone do not reproduce (only a GPU "
    "tests them); comparing each intermediate of the fused kernel with eager's would "
    "locate its cause"
)
print(
    f"compiled's error: {ratio:.2f}x aot_eager's (the same traced program); {reading}"
)
assert err["compiled"] <= 3 * err["compiled, aot_eager"] + 1e-7, err

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
# only sign. None of this needs a scheduler: any code that stores a new float in
# ``param_groups`` does it. The table counts the graphs; the assertions state the rule.


limit, rows = torch._dynamo.config.recompile_limit, []
for name, kind, run in [("float lr", float, float_lr), ("tensor lr", tensor, compiled)]:
    with RecompileLog() as log:
        static = train(kind, backend="eager", dynamic=False)["graphs"][-1]
    hit_limit = any("hit config.recompile_limit" in line for line in log.lines)
    rows.append([name, run["graphs"][-1], static, "yes" if hit_limit else "no"])
assert rows[0][1] > 1 and rows[0][2] == limit and rows[0][3] == "yes", rows  # float
assert rows[1][1] == rows[1][2] and rows[1][3] == "no", rows  # tensor: compiled once
print(f"graphs compiled in {N_STEPS} steps (recompile limit {limit})")
print(tabulate(rows, ["setup", "default", "dynamic=False", "hit limit"], "github"))

# %%
# Measuring it
# ------------
#
# What a recompilation costs is a whole compilation: the first line is the cold compile
# of the run above (Dynamo and the backend, every frame; the recipe's cell already paid
# for importing Inductor). The table times ``opt.step()`` in the steady state, each
# variant on an optimizer of its own, since compiling sets ``capturable`` in the
# optimizer it compiles. Timings come from the site's measurement core
# (:ref:`measuring_recipe` explains it). The reference is what a script without
# ``torch.compile`` runs: a float learning rate and Adam's default implementation
# (``foreach`` on a GPU, one parameter at a time on a CPU). Eager Adam with a tensor
# learning rate and ``capturable=False`` runs the for-loop implementation
# (``foreach`` refuses a tensor learning rate unless capturable): a few small kernels
# per parameter.
#
# The **roofline** is the time a step's 28 bytes per parameter take at the speed of a
# large on-device copy: Adam reads the parameter, its gradient and two moments (4 bytes
# each in float32) and writes back all but the gradient. ``measure.compare(...,
# roofline_bytes=28 * n)`` times that copy as one more variant in the same interleaved
# windows as the steps. Each row is checked against it, and the last column is the
# roofline's share of the step.

params = list(make_model().parameters())
for p in params:
    p.grad = torch.randn_like(p)
steps = {
    "compiled": torch.compile(torch.optim.Adam(params, lr=tensor(0.01)).step),
    "eager, float lr": torch.optim.Adam(params, lr=0.01).step,
    "eager, tensor lr": torch.optim.Adam(params, lr=tensor(0.01)).step,
}
n = sum(p.numel() for p in params)  # compare's warm-up compiles, creates the state
res = measure.compare(steps, device, roofline_bytes=28 * n)
roofline_ms = res.roofline_ms
graphs = f"{cold.graphs} graph{'s' * (cold.graphs != 1)}"
print(
    f"the run above from an empty cache: {cold.seconds:.2f} s for {N_STEPS} steps, of "
    f"which compiling: {cold.compiling:.2f} s ({graphs})"
)
print(
    f"Adam step, steady state; {device_name}, torch {torch.__version__}; roofline: "
    f"{n:,} parameters x 28 bytes at {res.bytes_per_ms / 1e6:.0f} GB/s = "
    f"{roofline_ms:.3f} ms"
)
rows = [[name, *res.cells(name), 100 * roofline_ms / res[name].ms] for name in res]
headers = ["variant", *res.headers(), "% of roofline"]
print(tabulate(rows, headers, "github", ["", *res.formats(), ".1f"]))
c = res["compiled"]
measure.headline("compiled, % of copy roofline", 100 * roofline_ms / c.ms, "%")
if c.busy_ms is not None:  # on a GPU: how fast its kernels move the bytes
    print(f"compiled's kernels: {100 * roofline_ms / c.busy_ms:.0f} % of copy speed")
print(
    res.versus("compiled", "eager, float lr", headline_as="compiled vs eager, float lr")
)
print(res.versus("compiled", "eager, tensor lr"))

fig, ax = plt.subplots(figsize=(6, 2))
ax.barh(list(res), [r.ms for r in res.values()], xerr=[r.spread for r in res.values()])
ax.set(xlabel="ms per step (line: spread)", title=f"Adam step, {device_name}")
fig.tight_layout()
plt.show()

# %%
# Under a CUDA graph the tensor is required
# -----------------------------------------
#
# A recompiling float costs time but stays correct: the new version reads the new value.
# A step recorded by hand in a CUDA graph (``torch.cuda.graph``, as in
# :ref:`compiling_optimizer_recipe`) stores every kernel *with its arguments*, and a
# Python float is passed to a kernel by value: every replay uses the learning rate of
# the recording, whatever the scheduler writes afterwards, and nothing warns
# (``mode="reduce-overhead"`` checks Dynamo's guards before each replay, so the float
# guard above still applies there). A tensor is passed by address, so a replay reads
# whatever ``fill_`` last wrote. On a GPU, the
# next cell records one compiled step, sets the learning rate to zero (a new float, or
# ``fill_``), replays, and measures how far the parameters moved: they must not move.


def replay_with_lr_zero(lr_type):
    torch._dynamo.reset()
    model = make_model()
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt = torch.optim.Adam(model.parameters(), lr=lr_type(0.01))
    step, graph = torch.compile(opt.step), torch.cuda.CUDAGraph()
    for _ in range(3):  # compile and warm up before recording
        step()
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

cycle = functools.partial(OneCycleLR, max_lr=0.05, total_steps=N_STEPS + 1)
with RecompileLog() as log:
    one_cycle = train(sched=cycle, backend="eager")
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
# learning rate, which schedulers fill in place, compiles once and follows eager's
# schedule; under a CUDA graph it is the only way a replay sees a new rate at all.
# Compiled Adam reads its step count as a float32 tensor (``capturable`` on a GPU), so
# its bias correction is float32 where eager's is double: the error table measures it,
# and the lines under it test whether the compiled :math:`\beta^t` alone explains how
# the compiled run's error differs from the traced program's.
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
