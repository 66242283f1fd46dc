"""
.. _foreach_map_recipe:

Horizontal fusion with foreach_map: a compiled Adam
===================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How ``foreach_map`` applies a pointwise function to lists of tensors, and what
         ``torch.compile`` makes of it: one fused pass over memory for all of them
       * The rules the function must follow, and why values that change during training
         go in as 0-dim tensors
       * How to write Adam with ``foreach_map``, check it against ``torch.optim.Adam``, and
         measure it against the copy-bandwidth roofline and ``fused=True``

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
# An optimizer step applies the same small update to every parameter tensor of a model.
# The ``torch._foreach_*`` ops fuse *horizontally*: one op covers a whole list of tensors
# with a few kernel launches, but each op is still a full pass over memory, and Adam takes
# about ten of them. ``foreach_map`` adds *vertical* fusion: you write the update for one
# tensor as a pointwise function, and ``torch.compile`` turns the update of all of them into
# one pass that reads each input once and writes each output once. It is meant for updates
# ``torch.optim`` does not have: your own optimizer, an EMA of the weights, a clipping rule.
#
# .. note::
#
#    ``foreach_map`` lives at ``torch._higher_order_ops.foreach_map`` and is a
#    **prototype** API: its location and behavior may change between releases.
#
# Setup
# -----
#
# The benchmark steps stacks of ``Linear`` layers; on a GPU the largest stack is chosen from
# the free memory.

import copy
import functools
import re
import statistics
import time
import warnings

import matplotlib.pyplot as plt
import torch
from tabulate import tabulate
from torch._dynamo.utils import counters
from torch._higher_order_ops.foreach_map import foreach_map
from torch._inductor.utils import run_and_get_code
from torch.profiler import ProfilerActivity, profile

# A note from torch.profiler about reusing a profiler: each one here runs once.
warnings.filterwarnings("ignore", message=".*Profiler clears events.*")

device = "cuda" if torch.cuda.is_available() else "cpu"
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    free_bytes, _ = torch.cuda.mem_get_info()
    # at most 40 bytes per parameter: p, grad, one optimizer's state, eager temporaries
    depth = max(1, min(16, int(0.8 * free_bytes / 40 / (4096 * 4097))))
    shapes = [(2048, 8), (4096, depth)]  # (width, depth) of the Linear stacks
else:
    device_name = f"CPU, threads: {torch.get_num_threads()}"
    shapes = [(256, 4), (2048, 4)]
print(
    f"{device_name}, torch {torch.__version__}, Linear stacks (width, depth): {shapes}"
)

# %%
# foreach_map in one screen
# -------------------------
#
# ``foreach_map(fn, *operands)`` calls ``fn(a[i], b[i], ...)`` for every position ``i`` of
# the list operands and returns the list of results. Operands that are not lists (here the
# learning rate) are passed unchanged to every call. ``fn`` must not write into its inputs,
# so the new values are stored with ``torch._foreach_copy_``, which Inductor fuses into the
# same kernel.


def sgd_update(p, g, lr):
    return p - lr * g


@torch.compile(fullgraph=True, dynamic=False)
def sgd_step(params, grads, lr):
    torch._foreach_copy_(params, foreach_map(sgd_update, params, grads, lr))


params = [torch.randn(s, device=device) for s in [(64,), (64, 32), (1000,)]]
grads = [torch.randn_like(p) for p in params]
lr = torch.tensor(0.1, device=device)
expected = [p - 0.1 * g for p, g in zip(params, grads)]
_, code = run_and_get_code(sgd_step, params, grads, lr)  # compiles, keeps the source
for p, e in zip(params, expected):
    torch.testing.assert_close(p, e)
kernels = sorted(
    set(re.findall(r"\b(?:triton_\w+|cpp_fused\w*)(?=\()", "\n".join(code)))
)
print(f"{len(params)} tensors updated by the generated kernels: {', '.join(kernels)}")

# %%
# On a GPU the kernels are Triton *foreach* kernels (``triton_for_fused_*``): in one launch,
# different blocks of threads update different tensors, each with the whole update fused.
# On a CPU the generated C++ function runs one fused loop per tensor.
#
# The learning rate is a 0-dim tensor, not a Python float, on purpose. A float that the
# compiled code reads becomes a constant in it, guarded by a check on its value: a new
# value compiles the function again, once per value until the recompile limit. A tensor is
# an input like the parameters, and changing its value compiles nothing. The cell asserts
# it: Dynamo's count of compiled graphs does not change. (Its count of frames would not
# do here: it leaves out ``fullgraph=True`` compiles.)

graphs = counters["stats"]["unique_graphs"]
assert graphs > 0  # the first call was compiled
lr.fill_(0.05)
expected = [p - 0.05 * g for p, g in zip(params, grads)]
sgd_step(params, grads, lr)
for p, e in zip(params, expected):
    torch.testing.assert_close(p, e)
assert counters["stats"]["unique_graphs"] == graphs, "changing lr recompiled"
print("new learning rate: same result as the loop, nothing recompiled")

# %%
# ``fn`` must also be pointwise: each output element depends on the same element of the
# inputs and on scalars (no reductions, reshapes or matrix products). Both rules are checked
# at compile time.
#
# Adam, one element at a time
# ---------------------------
#
# Adam with L2 weight decay keeps two moments :math:`m` and :math:`v` for every parameter
# :math:`p`. At step :math:`t` with gradient :math:`g`:
#
# .. math::
#
#    \begin{aligned}
#    g' &= g + \lambda p \\
#    m &\leftarrow \beta_1 m + (1 - \beta_1) g' \\
#    v &\leftarrow \beta_2 v + (1 - \beta_2) g'^2 \\
#    p &\leftarrow p - \frac{\alpha}{1 - \beta_1^t}
#          \cdot \frac{m}{\sqrt{v} / \sqrt{1 - \beta_2^t} + \epsilon}
#    \end{aligned}
#
# Each line becomes one ``foreach_map`` (the first moment is ``torch.lerp``). The values
# that change during training are 0-dim tensors: the learning rate :math:`\alpha` (a
# scheduler changes it), :math:`\beta_1` (``OneCycleLR`` cycles it) and the step :math:`t`.
# :math:`\beta_2`, :math:`\epsilon` and :math:`\lambda` never change and stay Python
# floats, which become constants in the kernel.
#
# The bias corrections depend only on the step, so ``step_scalars``, a separate small
# compiled function, computes them once per step as 0-dim tensors (inside the update's
# compiled function, Inductor would inline their ``pow`` into the loop over every element).
# They are computed in float64, as ``torch.optim.Adam`` does with Python floats (in float32,
# ``1 - beta2**t`` is off by about 1e-5, relative, in the first steps). The step counter is
# advanced outside the compiled functions: PyTorch 2.9 on a CPU loses an in-place update of
# a 0-dim CPU tensor made inside one. The decayed gradients :math:`g'` are never stored:
# once fused, they stay in registers.


def decayed_grad(g, p, weight_decay):
    return g + weight_decay * p


def second_moment(v, g, beta2):
    return beta2 * v + (1 - beta2) * g * g


def param_update(p, m, v, step_size, bias_correction2_sqrt, eps):
    return p - step_size * m / (v.sqrt() / bias_correction2_sqrt + eps)


@torch.compile(fullgraph=True)
def step_scalars(step, lr, beta1, beta2):
    scalars = lr / (1 - beta1**step), (1 - beta2**step).sqrt(), 1 - beta1
    return [s.float() for s in scalars]


@torch.compile(fullgraph=True, dynamic=False)
def adam_step(params, grads, ms, vs, scalars, constants):
    step_size, bc2_sqrt, one_minus_beta1 = scalars
    beta2, eps, weight_decay = constants
    grads = foreach_map(decayed_grad, grads, params, weight_decay)
    torch._foreach_copy_(ms, foreach_map(torch.lerp, ms, grads, one_minus_beta1))
    torch._foreach_copy_(vs, foreach_map(second_moment, vs, grads, beta2))
    new_params = foreach_map(param_update, params, ms, vs, step_size, bc2_sqrt, eps)
    torch._foreach_copy_(params, new_params)


class ForeachMapAdam:
    """Adam with L2 weight decay: one compiled foreach_map step for all parameters."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.params = list(params)
        dev = self.params[0].device
        # values that may change during training: 0-dim float64 tensors
        self.lr = torch.tensor(lr, dtype=torch.float64, device=dev)
        self.beta1 = torch.tensor(betas[0], dtype=torch.float64, device=dev)
        self.step_count = torch.zeros((), dtype=torch.float64, device=dev)
        # values that never change: Python floats, constants in the kernel
        self.constants = (betas[1], eps, weight_decay)
        self.exp_avgs = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self):
        self.step_count += 1
        scalars = step_scalars(self.step_count, self.lr, self.beta1, self.constants[0])
        grads = [p.grad for p in self.params]
        adam_step(
            self.params, grads, self.exp_avgs, self.exp_avg_sqs, scalars, self.constants
        )


# %%
# Check it against ``torch.optim.Adam``
# -------------------------------------
#
# Copies of one model take the same steps with weight decay: a float64 ``torch.optim.Adam``
# (the reference), a float32 ``torch.optim.Adam`` and a float32 ``ForeachMapAdam``: eight
# steps, each with the same fresh gradients for all, and the learning rate halved after
# four (through ``param_groups``, or with ``lr.fill_`` for ours). Each float32
# error against float64 must be of the size of ``torch.optim.Adam``'s own, and the change
# of rate must compile nothing. (A tensor learning rate is also what lets a step recorded
# in a CUDA graph see a new rate: :ref:`compiling_optimizer_lr_scheduler`.)

HP = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}
kinds = {"float64": torch.optim.Adam, "torch.optim.Adam": torch.optim.Adam}
kinds["ForeachMapAdam"] = ForeachMapAdam
width, depth = shapes[0]
base = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)])
models = {name: copy.deepcopy(base).to(device) for name in kinds}
models["float64"].double()
opts = {
    name: kind(models[name].parameters(), lr=1e-2, **HP) for name, kind in kinds.items()
}
for i in range(8):
    if i == 4:
        graphs = counters["stats"]["unique_graphs"]
        for opt in opts.values():
            if isinstance(opt, ForeachMapAdam):
                opt.lr.fill_(5e-3)
            else:
                opt.param_groups[0]["lr"] = 5e-3
    for ps in zip(*(m.parameters() for m in models.values())):
        g = torch.randn(ps[0].shape, device=device)
        for p in ps:
            p.grad = g.to(p.dtype, copy=True)
    for opt in opts.values():
        opt.step()
assert counters["stats"]["unique_graphs"] == graphs, "the lr change recompiled"

ref = list(models["float64"].parameters())
errors = {
    name: max((p.double() - r).abs().max().item() for p, r in zip(m.parameters(), ref))
    for name, m in models.items()
    if name != "float64"
}
print("largest error against float64 Adam after 8 steps:")
print(tabulate(errors.items(), headers=["optimizer", "error"], floatfmt=".2e"))
for name, err in errors.items():
    assert err <= 4 * errors["torch.optim.Adam"] + 1e-6, name

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
# The roofline: Adam in float32 moves at least **28 bytes per parameter** (it reads the
# parameter, the gradient and both moments, and writes back all but the gradient); the
# roofline time is those bytes at the copy bandwidth that the same helper measures on a
# large copy. Copy and steps alike run back to back with no cache flush between calls
# (unlike ``triton.testing.do_bench``, which flushes the GPU's L2 cache before each): on a
# GPU the working sets, hundreds of MB to GBs, dwarf the L2 cache, so that makes little
# difference.


def step_and_busy(step, steps=10):
    """Median step time, GPU busy time per step (None on a CPU) and spread, in ms."""
    count, windows, busy = counters["stats"]["unique_graphs"], [], None
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
    assert counters["stats"]["unique_graphs"] == count, "compiled while timing"
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
# Every variant steps the same parameters with the same fixed gradients and its own
# optimizer state, built just before it is timed: ``torch.optim.Adam`` with
# ``foreach=True`` and with ``fused=True`` (one hand-written kernel), and
# ``ForeachMapAdam``. "x fused" is a variant's speed relative to ``fused=True``.

HP["lr"] = 1e-3
variants = {
    "eager foreach": lambda ps: torch.optim.Adam(ps, foreach=True, **HP).step,
    "eager fused": lambda ps: torch.optim.Adam(ps, fused=True, **HP).step,
    "foreach_map": lambda ps: ForeachMapAdam(ps, **HP).step,
}
refs = {"foreach_map": ["eager foreach", "eager fused"]}

rows, results = [], {}
for width, depth in shapes:
    layers = [torch.nn.Linear(width, width, device=device) for _ in range(depth)]
    params = [p for layer in layers for p in layer.parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    n = sum(p.numel() for p in params)
    roofline_ms = 28 * n / bytes_per_ms
    steps = max(1, min(100, round(10 / roofline_ms)))  # windows of 10 ms or more
    times = results[f"{n / 1e6:.1f} M params"] = {}
    for name, make_step in variants.items():
        step = make_step(params)
        step()  # compiles for new shapes and creates the optimizer state
        times[name] = step_and_busy(step, steps)
        del step
    for name, (step_ms, busy, _) in times.items():
        fused_ms = times["eager fused"][0]
        share = None if busy is None else 100 * busy / step_ms
        gpu = [] if busy is None else [busy, share, "GPU" if share >= 85 else "CPU"]
        row = [f"{n / 1e6:.1f}", name, step_ms, *gpu, 100 * roofline_ms / step_ms]
        rows.append(row + [fused_ms / step_ms])
    del layers, params
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
#   passes over memory where one would do; ``fused=True`` and ``ForeachMapAdam`` make
#   one. How tight a bound the copy is depends on the device. On a GPU, with working
#   sets far larger than its caches, it is close: near 100 %, a step moves memory
#   about as fast as the GPU can. On a CPU it is not: tensors that fit in the
#   last-level cache are reread from there on back-to-back calls, a copy may also
#   fetch the memory it overwrites (a read its byte count leaves out), and a few cores
#   keep more requests in flight on seven arrays than on two, so an eager fused step
#   can exceed 100 % by far.
# * **GPU busy**, **busy %** and **bound** (GPU only): below 85 % busy, the GPU waits for
#   the CPU for the rest of the step. On every call ``ForeachMapAdam`` runs two compiled
#   functions, which check guards on every tensor of four lists, and launches their
#   kernels; the shorter the step, the more that weighs. A CUDA graph removes that work
#   (:ref:`compiling_optimizer_recipe` records one). A share a little above 100 % is noise.
# * The lines under the table say where a slower row's extra time went: on a GPU, extra
#   *idle* time is CPU work (guards, launches), extra *busy* time slower kernels; on a CPU,
#   where all variants run on the same threads, a steady slower row is the compiled step's
#   own work, and an unsteady one is worth measuring again.
#
# Going further
# -------------
#
# * **Compile time grows with the list.** Dynamo does not trace ``fn`` once: it runs the
#   loop of ``foreach_map`` while tracing, so the graph holds one copy of ``fn`` per
#   tensor, and the compile time grows with the number of tensors (paid once).
# * **Errors.** A mutating ``fn`` fails in Dynamo ("Encountered input mutation during
#   higher order op tracing"); a reduction fails in Inductor ("Buffers cannot be created
#   while lowering a pointwise subgraph").
#
# Conclusion
# ----------
#
# An optimizer step is a memory-bound loop over many tensors. ``foreach_map`` lets you write
# the per-tensor update as pointwise Python, and ``torch.compile`` fuses it over all tensors
# into one pass over memory, write-backs included. Values that change during training go in
# as 0-dim tensors, and step-dependent scalars are computed once per step. The result
# matched ``torch.optim.Adam`` against float64, and the table measured it against the copy
# roofline and ``fused=True``, with the GPU's busy share saying what bounds each step.
#
# Further reading
# ---------------
#
# * :ref:`compiling_optimizer_recipe`: compiling the step of a built-in optimizer
#   (``foreach_map`` is for the others), and recording it in a CUDA graph.
# * `torch.optim <https://docs.pytorch.org/docs/stable/optim.html>`__: the ``foreach`` and
#   ``fused`` implementations.
# * `CUDA graphs <https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-graphs>`__ in
#   the CUDA semantics notes.
# * The source of ``foreach_map``:
#   `torch/_higher_order_ops/foreach_map.py
#   <https://github.com/pytorch/pytorch/blob/main/torch/_higher_order_ops/foreach_map.py>`__
#   and its polyfill ``foreach_map_fn`` in
#   `torch/_dynamo/polyfills/__init__.py
#   <https://github.com/pytorch/pytorch/blob/main/torch/_dynamo/polyfills/__init__.py>`__.

# sphinx_gallery_thumbnail_number = 1
