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
# The benchmark steps stacks of ``Linear`` layers, on a GPU as deep as the memory allows.

import copy
import re

import matplotlib.pyplot as plt
import torch
from tabulate import tabulate
from torch._dynamo.utils import counters
from torch._higher_order_ops.foreach_map import foreach_map
from torch._inductor.utils import run_and_get_code

import measure

device = "cuda" if torch.cuda.is_available() else "cpu"
measure.require(cxx=device == "cpu", triton=device == "cuda")  # what Inductor needs
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    free_bytes, _ = torch.cuda.mem_get_info()
    # the peak: 36 bytes per parameter (p, grad, three optimizers' two moments, one
    # temporary of eager foreach's) and the 2 GiB copy that times the roofline
    depth = max(1, min(16, int((0.8 * free_bytes - 2**31) / 36 / (4096 * 4097))))
    shapes = [(2048, 8), (4096, depth)]  # (width, depth) of the Linear stacks
else:
    device_name = f"CPU, threads: {torch.get_num_threads()}"
    shapes = [(256, 4), (2048, 4)]
print(f"{device_name}, torch {torch.__version__}, (width, depth) of stacks: {shapes}")

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
counters.clear()
_, code = run_and_get_code(sgd_step, params, grads, lr)  # compiles it afresh
torch.testing.assert_close(params, expected)
kernels = set(re.findall(r"\b(?:triton_\w+|cpp_fused\w*)(?=\()", "\n".join(code)))
print(f"{len(params)} tensors updated by the kernels: {', '.join(sorted(kernels))}")
cache = {k: counters["inductor"][f"fxgraph_cache_{k}"] for k in ["miss", "bypass"]}
print(f"FX graph cache on this compilation: {cache}")

# %%
# On a GPU the kernels are Triton *foreach* kernels (``triton_for_fused_*``): in one launch,
# different blocks of threads update different tensors, each with the whole update fused.
# On a CPU the generated C++ function runs one fused loop per tensor. A "bypass" in the
# cache counts means that Inductor's FX graph cache cannot hold a graph with this
# higher-order op: every process compiles it again.
#
# The learning rate is a 0-dim tensor, not a Python float, on purpose. A float that the
# compiled code reads becomes a constant in it, guarded by its value: a new value compiles
# again, until the recompile limit. A tensor is an input like the parameters; the cell
# asserts that Dynamo's count of compiled graphs does not change (its count of frames
# leaves out ``fullgraph=True`` compiles).

graphs = counters["stats"]["unique_graphs"]
assert graphs > 0  # the first call was compiled
lr.fill_(0.05)
expected = [p - 0.05 * g for p, g in zip(params, grads)]
sgd_step(params, grads, lr)
torch.testing.assert_close(params, expected)
assert counters["stats"]["unique_graphs"] == graphs, "changing lr recompiled"
print("new learning rate: same result as the loop, nothing recompiled")

# %%
# ``fn`` must also be pointwise: each output element depends on the same element of the
# inputs and on scalars (no reductions, reshapes or matmuls), checked at compile time.
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
# Copies of one model take eight steps with weight decay and the same fresh gradients:
# ``torch.optim.Adam`` in float64 (the reference) and float32, and ``ForeachMapAdam``, with
# the learning rate halved after four. Each float32 error must be of the size of
# ``torch.optim.Adam``'s own, and the change of rate must compile nothing.

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
del models, opts, opt, ref  # the benchmark needs the memory

# %%
# Measuring
# ---------
#
# Timings come from the site's measurement core (:ref:`measuring_recipe` explains it).
# The three variants of each size are timed together, in interleaved windows. Under the
# table, the first line of each size sorts the eager optimizers into faster than, tied
# with and slower than ``foreach_map`` by their paired intervals; on a GPU, a line per
# variant splits its time above the roofline into kernel time beyond copy speed and time
# the GPU sat idle; the last two compare ``foreach_map`` with each eager optimizer and
# take the gap apart.
#
# The roofline: Adam in float32 moves at least **28 bytes per parameter** (it reads the
# parameter, the gradient and both moments, and writes back all but the gradient), at the
# speed of a large on-device copy (bytes read plus written). ``measure.compare(...,
# roofline_bytes=28 * n)`` times that copy as one more variant in the same interleaved
# windows as the steps, so both see the machine in the same state.


def read(label, res):
    """Print how foreach_map fared against the others (by paired intervals), and on a GPU
    what kept each variant above the roofline: kernel time or the GPU's idle time."""
    roofline_ms, copy = res.roofline_ms, f"copy {res.bytes_per_ms / 1e6:.0f} GB/s"
    print(f"{label} ({copy} in the same windows): {res.against('foreach_map')}")
    for name, r in res.items():
        if r.busy_ms is not None:  # GPU only: kernel time apart from the step
            print(
                f"{label}, {name}: {r.ms - roofline_ms:.3f} ms above the roofline = "
                f"{r.busy_ms - roofline_ms:.3f} ms of kernel time beyond copy speed + "
                f"{r.ms - r.busy_ms:.3f} ms of GPU idle between and around its kernels"
            )


# %%
# The benchmark
# -------------
#
# Every variant steps the same parameters with the same fixed gradients and its own
# optimizer state: ``torch.optim.Adam`` with ``foreach=True`` and with ``fused=True``
# (one hand-written kernel), and ``ForeachMapAdam``, whose first step at each size is a
# compilation from an empty cache (``measure.cold_compile``).

variants = {
    "eager foreach": lambda ps: torch.optim.Adam(ps, foreach=True, **HP).step,
    "eager fused": lambda ps: torch.optim.Adam(ps, fused=True, **HP).step,
    "foreach_map": lambda ps: ForeachMapAdam(ps, **HP).step,
}

rows, readings, compiles = [], [], []
for width, depth in shapes:
    layers = [torch.nn.Linear(width, width, device=device) for _ in range(depth)]
    params = [p for layer in layers for p in layer.parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    n = sum(p.numel() for p in params)
    size = f"{n / 1e6:.1f}"
    steps = {name: make_step(params) for name, make_step in variants.items()}
    cold = measure.cold_compile(steps["foreach_map"], device=device)
    compiles.append([size, len(params), cold.seconds, cold.compiling])
    graphs = counters["stats"]["unique_graphs"]  # compare's check misses fullgraph=True
    res = measure.compare(steps, device, roofline_bytes=28 * n)
    assert counters["stats"]["unique_graphs"] == graphs, "compiled while timing"
    roofline_ms = res.roofline_ms
    for name, r in res.items():
        inside = [] if r.busy_ms is None else [100 * roofline_ms / r.busy_ms]
        rows.append([size, name, *res.cells(name), 100 * roofline_ms / r.ms, *inside])
    readings.append((f"{size} M params", res))
    del layers, params, steps

first = ["ForeachMapAdam's first step from an empty cache (s)", "compiling (s)"]
print(tabulate(compiles, ["params (M)", "tensors", *first], floatfmt=".2f"))
print(f"Adam, float32, {device_name}")
gpu = res["foreach_map"].busy_ms is not None
inside = ["% of copy speed in its kernels"] if gpu else []
headers = ["params (M)", "variant", *res.headers(), "% of copy roofline", *inside]
print(tabulate(rows, headers, "github", ["", "", *res.formats(), ".1f", ".1f"]))
for i, (label, res) in enumerate(readings):
    read(label, res)
    which = "largest" if i else "smallest"  # two sizes
    for ref in ("eager fused", "eager foreach"):
        headline = f"foreach_map vs {ref} ({which})"
        print(res.versus("foreach_map", ref, f"{label}: ", headline))
share = 100 * res.roofline_ms / res["foreach_map"].ms  # the largest size
measure.headline("foreach_map, % of copy roofline (largest)", share, "%")

# %%
# The chart draws the roofline column: how close each variant came to moving its bytes
# at the copy's speed, for every size.

col = headers.index("% of copy roofline")
fig, ax = plt.subplots(figsize=(8, 3.5))
for name in variants:
    ax.plot(
        *zip(*[(float(r[0]), r[col]) for r in rows if r[1] == name]), "o-", label=name
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
# * **% of copy roofline**: 100 % would mean moving 28 bytes per parameter as fast as
#   ``dst.copy_(src)`` moves memory. Eager ``foreach`` makes several passes where one
#   would do; ``fused=True`` and ``ForeachMapAdam`` make one. A row above 100 % means the
#   copy is not the fastest way the device moves memory: on a CPU, a copy may read the
#   memory it overwrites (a read its byte count leaves out), while Adam writes over memory
#   it read, and a small size may stay in the caches.
# * **% of copy speed in its kernels** (GPU only): the roofline over the row's kernel time
#   per step. Near 100 %, the kernels move the bytes at copy speed, and whatever keeps the
#   step from the roofline is time between and around them, when the GPU waited for the
#   host: that is what **bound** "CPU" counts, not slow kernels.
# * The comparison lines take a gap apart. On every call ``ForeachMapAdam`` runs an eager
#   ``step_count += 1`` and two compiled functions, so its parts include **guards**
#   (checking that the compiled code still applies), **compiled-code entry**, **compiled
#   code** (the generated code; on a CPU, its C++ kernels too) and, on a GPU, **kernel
#   launches** and the time the GPU waited for them. A CUDA graph launches a step whole
#   (:ref:`compiling_optimizer_recipe`).
#
# Going further
# -------------
#
# * **Compiling unrolls the list.** Dynamo runs the loop of ``foreach_map`` while tracing,
#   so the graph holds one copy of ``fn`` per tensor (compile times above, per length).
# * **Errors.** A mutating ``fn`` fails in Dynamo ("Encountered input mutation during
#   higher order op tracing"); a reduction fails in Inductor ("Buffers cannot be created
#   while lowering a pointwise subgraph").
#
# Conclusion
# ----------
#
# ``foreach_map`` lets you write a per-tensor update as pointwise Python, and
# ``torch.compile`` fuses it over all tensors into one pass over memory, write-backs
# included. Values that change during training go in as 0-dim tensors, and step-dependent
# scalars are computed once per step. The result matched ``torch.optim.Adam`` against
# float64. The lines under the table give the verdict against ``fused=True`` size by size,
# from paired windows, since the two can differ: the host's work per call (guards, two
# compiled functions, launches) weighs more in a shorter step. On a GPU they also separate
# the kernels' speed from the time the GPU waited between them.
#
# Further reading
# ---------------
#
# * :ref:`compiling_optimizer_recipe`: compiling the step of a built-in optimizer
#   (``foreach_map`` is for the others), and recording it in a CUDA graph.
# * `torch.optim <https://docs.pytorch.org/docs/stable/optim.html>`__: the ``foreach`` and
#   ``fused`` implementations; :ref:`triton_custom_op_tutorial` writes such a kernel by hand.
# * The source: `foreach_map
#   <https://github.com/pytorch/pytorch/blob/main/torch/_higher_order_ops/foreach_map.py>`__
#   and Dynamo's polyfill ``foreach_map_fn``, `the loop it traces
#   <https://github.com/pytorch/pytorch/blob/main/torch/_dynamo/polyfills/__init__.py>`__.

# sphinx_gallery_thumbnail_number = 1
