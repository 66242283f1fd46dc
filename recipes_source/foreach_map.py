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
# with a few kernel launches. But each op is still a full pass over memory, and Adam takes
# about ten of them. ``foreach_map`` adds *vertical* fusion: you write the update for one
# tensor as a pointwise function, ``foreach_map`` applies it to every position of the lists,
# and ``torch.compile`` turns the whole update into one pass that reads each input once and
# writes each output once. It is meant for the updates ``torch.optim`` does not have: your
# own optimizer, an EMA of the weights, a custom clipping rule.
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

import torch
import torch.utils.benchmark as benchmark
from tabulate import tabulate
from torch._dynamo.utils import counters
from torch._higher_order_ops.foreach_map import foreach_map
from torch._inductor.utils import run_and_get_code

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    import triton.testing

    device_name = torch.cuda.get_device_name()
    free_bytes, _ = torch.cuda.mem_get_info()
    # at most 40 bytes per parameter: p, grad, one optimizer's state, eager temporaries
    depth = max(1, min(16, int(0.8 * free_bytes / 40 / (4096 * 4097))))
    shapes = [(2048, 8), (4096, depth)]  # (width, depth) of the Linear stacks
else:
    device_name = f"CPU, {torch.get_num_threads()} threads"
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
# The bias corrections depend only on the step. ``step_scalars``, a separate small compiled
# function, computes them once per step as 0-dim tensors that the update only reads.
# Computed inside the same compiled function as the update, they would not be stored:
# Inductor would inline their ``pow`` calls into the loop over every tensor's elements.
# They are computed in float64, as ``torch.optim.Adam`` does with Python floats: in
# float32, ``1 - beta2**t`` is off by about 1e-5 (relative) in the first steps. The step
# counter itself is advanced outside the compiled functions: PyTorch 2.9 on a CPU loses
# an in-place update of a 0-dim CPU tensor made inside a compiled function.
# The decayed gradients :math:`g'` are never stored: once fused, they stay in registers.


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
# CUDA graphs
# -----------
#
# On a GPU, a CUDA graph records the kernels of one step and replays them with one call:
# no Python, no guards, no launch per kernel. ``cuda_graph`` warms the step up on a side
# stream (three real steps, as the CUDA graph notes recommend), records one call and
# returns its ``replay``. A replay reads and writes the same memory every time, so new
# gradients must be written into the existing ``.grad`` tensors, and the learning rate must
# be a tensor, as it is here.


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


# %%
# Check it against ``torch.optim.Adam``
# -------------------------------------
#
# Copies of the same model take the same steps with a non-zero weight decay: a float64
# ``torch.optim.Adam`` as the reference, a float32 ``torch.optim.Adam``, a float32
# ``ForeachMapAdam``, and on a GPU a ``ForeachMapAdam`` replayed from a CUDA graph. All
# first take three steps with the initial gradients (the graph's warm-up), then five with
# fresh ones, written into the existing ``.grad`` tensors. Halfway, the learning rate is
# halved: through ``param_groups`` for ``torch.optim.Adam``, with ``lr.fill_`` for ours.
# Each float32 result's error against float64 must be of the size of
# ``torch.optim.Adam``'s own, and the learning-rate change must compile nothing.

HP = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}
kinds = {
    "float64": torch.optim.Adam,
    "torch.optim.Adam": torch.optim.Adam,
    "ForeachMapAdam": ForeachMapAdam,
}
if device == "cuda":
    kinds["+ CUDA graph"] = ForeachMapAdam
width, depth = shapes[0]
base = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)])
models = {name: copy.deepcopy(base).to(device) for name in kinds}
models["float64"].double()
for ps in zip(*(m.parameters() for m in models.values())):
    g = torch.randn(ps[0].shape, device=device)
    for p in ps:
        p.grad = g.to(p.dtype, copy=True)
opts = {
    name: kind(models[name].parameters(), lr=1e-2, **HP) for name, kind in kinds.items()
}
steps = {name: opt.step for name, opt in opts.items()}
if device == "cuda":
    steps["+ CUDA graph"] = cuda_graph(steps["+ CUDA graph"])  # takes 3 steps
for _ in range(3):
    for name in ["float64", "torch.optim.Adam", "ForeachMapAdam"]:
        steps[name]()

for i in range(5):
    if i == 2:
        graphs = counters["stats"]["unique_graphs"]
        for opt in opts.values():
            if isinstance(opt, ForeachMapAdam):
                opt.lr.fill_(5e-3)
            else:
                opt.param_groups[0]["lr"] = 5e-3
    for ps in zip(*(m.parameters() for m in models.values())):
        g = torch.randn(ps[0].shape, device=device)
        for p in ps:
            p.grad.copy_(g)
    for step in steps.values():
        step()
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
# ``bench`` returns the median time of one step. On a GPU it uses
# ``triton.testing.do_bench`` (CUDA events), and also times how long the CPU takes to
# *issue* one call (the Python call returning, without waiting for the GPU): when that is
# close to the step time, the GPU spends the step waiting for the CPU (``bound_by`` prints
# "CPU"); when it is well below, the GPU is the limit. On a CPU the issue time is the step
# time, and ``torch.utils.benchmark.Timer`` runs every variant on all of PyTorch's threads
# (its default is one). ``bench`` asserts that no graph was compiled while timing.
#
# The roofline: Adam in float32 must read the parameter, the gradient and both moments and
# write the parameter and both moments, **28 bytes per parameter** at least. The roofline
# time is those bytes at the device's measured copy bandwidth (a large device-to-device
# copy, counting the bytes read and the bytes written); "% of copy roofline" is the
# roofline time divided by the step time.


def bench(fn):
    """Median step time and CPU issue time of ``fn``, in ms (issue time: GPU only)."""
    graphs = counters["stats"]["unique_graphs"]
    if device == "cuda":
        step_ms = triton.testing.do_bench(fn, return_mode="median")
        issue = []
        for _ in range(30):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            issue.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
        issue_ms = statistics.median(issue)
    else:
        timer = benchmark.Timer(
            "fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()
        )
        step_ms, issue_ms = timer.blocked_autorange().median * 1e3, None
    assert counters["stats"]["unique_graphs"] == graphs, "recompiled while timing"
    return step_ms, issue_ms


def bound_by(step_ms, issue_ms):
    return "-" if issue_ms is None else ("CPU" if issue_ms > 0.8 * step_ms else "GPU")


src = torch.rand(2**28 if device == "cuda" else 2**25, device=device)
dst = torch.empty_like(src)
copy_ms, _ = bench(functools.partial(dst.copy_, src))
bytes_per_ms = 2 * src.nbytes / copy_ms
print(
    f"copy bandwidth: {bytes_per_ms / 1e6:.0f} GB/s ({2 * src.nbytes / 2**20:.0f} MiB moved)"
)
del src, dst

# %%
# The benchmark
# -------------
#
# Every variant steps the same parameters with the same fixed gradients, each with its own
# optimizer state, built just before it is timed: ``torch.optim.Adam`` with
# ``foreach=True`` and with ``fused=True`` (one hand-written kernel), and
# ``ForeachMapAdam``. On a GPU, ``fused=True`` (with ``capturable=True``) and
# ``ForeachMapAdam`` are also replayed from CUDA graphs, so that they meet under the same
# conditions. "x fused" is a variant's speed relative to ``fused=True`` under the same
# conditions (CUDA graph or not).

HP["lr"] = 1e-3
variants = {
    "eager foreach": lambda ps: torch.optim.Adam(ps, foreach=True, **HP).step,
    "eager fused": lambda ps: torch.optim.Adam(ps, fused=True, **HP).step,
    "foreach_map": lambda ps: ForeachMapAdam(ps, **HP).step,
}
if device == "cuda":
    variants["fused + CUDA graph"] = lambda ps: cuda_graph(
        torch.optim.Adam(ps, fused=True, capturable=True, **HP).step
    )
    variants["foreach_map + CUDA graph"] = lambda ps: cuda_graph(
        ForeachMapAdam(ps, **HP).step
    )

rows = []
for width, depth in shapes:
    layers = [torch.nn.Linear(width, width, device=device) for _ in range(depth)]
    params = [p for layer in layers for p in layer.parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    n = sum(p.numel() for p in params)
    times = {}
    for name, make_step in variants.items():
        step = make_step(params)
        step()  # compiles for new shapes and creates the optimizer state
        times[name] = bench(step)
        del step
    for name, (step_ms, issue_ms) in times.items():
        fused_ms = times["fused + CUDA graph" if "graph" in name else "eager fused"][0]
        rows.append(
            [
                f"{n / 1e6:.1f}",
                name,
                step_ms,
                issue_ms,
                bound_by(step_ms, issue_ms),
                100 * 28 * n / bytes_per_ms / step_ms,
                fused_ms / step_ms,
            ]
        )
    del layers, params
    if device == "cuda":
        torch.cuda.empty_cache()

print(f"Adam, float32, {device_name}; median step times")
headers = (
    "params (M)|variant|step (ms)|CPU issue (ms)|bound by|% of copy roofline|x fused"
)
fmt = ("", "", ".3f", ".3f", "", ".1f", ".2f")
print(tabulate(rows, headers.split("|"), "github", floatfmt=fmt, missingval="-"))

# %%
# Reading the table
# -----------------
#
# * **% of copy roofline**: 100% would mean the step moved its 28 bytes per parameter as
#   fast as the device copies memory. The copy is itself a measurement, so a step that
#   matches it can land a little above 100%. Eager ``foreach`` makes several passes over
#   memory where one would do; ``fused=True`` and ``ForeachMapAdam`` make one.
# * **CPU issue** and **bound by**: a step that the CPU cannot issue faster than the GPU
#   runs it waits for the CPU, whatever its kernels. The compiled step checks guards on
#   every tensor of four lists and calls two compiled functions on every call; a CUDA
#   graph removes that work, for ``fused=True`` and ``ForeachMapAdam`` alike, so the
#   CUDA graph rows compare the kernels.
# * On a CPU there are no CUDA graphs; all variants run on the same threads.
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
# * **The copy as a bound on a CPU.** A copy writes to memory it has not read, which most
#   CPUs first fetch into the cache (a read the byte count omits), while an optimizer step
#   writes only what it has read; and a few cores streaming seven arrays keep more memory
#   requests in flight than a copy streaming two. A CPU step can therefore exceed 100%.
#   On a GPU the copy is a tight bound.
# * **Built-in optimizers.** ``torch.compile(opt.step)`` fuses ``torch.optim``'s own
#   updates (:ref:`compiling_optimizer_recipe`); ``foreach_map`` is for the others.
#
# Conclusion
# ----------
#
# An optimizer step is a memory-bound loop over many tensors. ``foreach_map`` lets you
# write the per-tensor update as plain pointwise Python, and ``torch.compile`` fuses it over
# all tensors into one pass over memory, with the ``torch._foreach_copy_`` write-backs
# folded in. Values that change during training go in as 0-dim tensors so that changing
# them compiles nothing, and step-dependent scalars are computed once per step. The
# ``foreach_map`` Adam matched ``torch.optim.Adam`` against a float64 reference, and the
# table measured it against the copy roofline and ``fused=True``.
#
# Further reading
# ---------------
#
# * :ref:`compiling_optimizer_recipe`: compiling the step of a built-in optimizer.
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
