"""
.. _foreach_map_recipe:

Horizontal fusion with foreach_map: a compiled Adam
===================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * Why an optimizer step over many tensors is bound by kernel launches and memory traffic
       * What the ``torch._foreach_*`` ops batch together, and what they leave on the table
       * What ``torch.compile`` really does with ``foreach_map``: Dynamo unrolls it over the
         list, Inductor fuses the copies into foreach kernels
       * Why hyperparameters that change go in as 0-dim tensors, and why step-dependent
         scalars belong outside the per-element function
       * How to write Adam with ``foreach_map``, check it against ``torch.optim.Adam``, and
         measure it against the memory-bandwidth roofline
       * When ``foreach_map`` is the right tool, and when ``torch.compile(opt.step)`` is enough

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
# An optimizer step touches every parameter of a model, but does very little work on each
# element: Adam reads a parameter, its gradient and two running averages, does a dozen
# floating-point operations, and writes three tensors back. A model is not one tensor but
# hundreds, so a plain Python loop launches one small kernel per operation *per tensor*.
# Two kinds of fusion attack that cost:
#
# * **Horizontal fusion** runs the *same* operation on *many* tensors in one kernel. This is
#   what the ``torch._foreach_*`` ops do: ``torch._foreach_mul_(tensors, 0.9)`` scales a whole
#   list with a handful of launches instead of one per tensor.
# * **Vertical fusion** chains *several* operations on the *same* data in one kernel, so the
#   intermediate values stay in registers instead of going back to memory between steps.
#
# Eager foreach ops give you the first but not the second: each op is still a separate pass
# over memory. ``foreach_map`` gives you both. You write the update for one tensor as an
# ordinary pointwise function, ``foreach_map`` applies it to every tensor of the lists you
# pass, and ``torch.compile`` turns the whole thing into one pass over memory that reads each
# input once and writes each output once.
#
# The built-in optimizers already get this from ``torch.compile(opt.step)``, as the benchmark
# at the end shows. ``foreach_map`` is for the update rules that ``torch.optim`` does not
# have: your own optimizer, an EMA of the weights, a custom clipping rule.
#
# .. note::
#
#    ``foreach_map`` lives at ``torch._higher_order_ops.foreach_map.foreach_map`` and is a
#    **prototype** API: its location, signature and the code it generates may change between
#    releases. The version this page was built with is printed below.
#
# Setup
# -----
#
# Sizes depend on the device. The benchmark steps stacks of ``Linear`` layers. On a GPU the
# largest stack is chosen from the free memory (every variant in the benchmark keeps its own
# optimizer state, so the page needs several copies of the parameters); on a CPU the stacks are
# small enough for the page to run in a couple of minutes.

import copy
import re
import time

import matplotlib.pyplot as plt
import torch
from tabulate import tabulate
from torch._dynamo.utils import counters
from torch._higher_order_ops.foreach_map import foreach_map

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    free_bytes, _ = torch.cuda.mem_get_info()
    # Parameters, gradients and seven copies of Adam's two moments: about 64 bytes per
    # parameter. Use at most half of the free memory, and at most 16 layers of 4096 x 4096.
    big_depth = max(1, min(16, int(free_bytes * 0.5 / 64 / (4096 * 4097))))
    # (width, depth) of a stack of nn.Linear(width, width) layers with biases
    bench_shapes = [(2048, 8), (4096, big_depth)]
    print(f"{free_bytes / 2**30:.1f} GiB free on the GPU")
else:
    device_name = "CPU"
    # The larger model's optimizer data (about 270 MB) is meant to exceed the CPU's caches.
    bench_shapes = [(256, 4), (2048, 4)]
    print("No CUDA GPU found: running on the CPU with smaller models.")

print(f"torch {torch.__version__} on {device} ({device_name})")
if device == "cpu":
    print(f"CPU threads used by every variant: {torch.get_num_threads()}")


def make_model(width, depth):
    layers = [torch.nn.Linear(width, width) for _ in range(depth)]
    return torch.nn.Sequential(*layers).to(device)


for width, depth in bench_shapes:
    n_million = depth * width * (width + 1) / 1e6
    print(
        f"benchmark model: {depth:2d} x Linear({width}, {width}) = {n_million:7.2f} M parameters"
    )

# %%
# Foreach ops: horizontal fusion in eager mode
# --------------------------------------------
#
# The foreach ops take lists of tensors (and scalars, or lists of scalars) and apply one
# operation to every element of the lists. Their results are the same as a Python loop over
# the tensors; the difference is how many kernels run. On CUDA a foreach op packs many tensors
# into each launch; on CPU it falls back to a loop in C++, which still saves the Python
# overhead. The tensors do not need to share a shape.

xs = [torch.randn(s, device=device) for s in [(3,), (4, 5), (64, 64)]]
ys = [torch.randn_like(x) for x in xs]

looped = [x + 0.5 * y for x, y in zip(xs, ys)]
batched = torch._foreach_add(xs, ys, alpha=0.5)
for a, b in zip(looped, batched):
    torch.testing.assert_close(a, b)
print(f"torch._foreach_add over {len(xs)} tensors matches the Python loop")

# %%
# The catch is that every foreach op is still a full trip through memory. Adam written with
# foreach ops is about ten of them in a row (add the weight decay, update the first moment,
# update the second moment, square root, divide, ...), and each one reads its inputs from
# memory and writes its result back. For a step whose arithmetic is trivial, those extra
# trips *are* the cost. The hand-written ``fused=True`` kernel of ``torch.optim.Adam`` does the
# whole update in one pass, but it exists only for the optimizers someone wrote it for.
#
# foreach_map: any pointwise function, fused
# ------------------------------------------
#
# ``foreach_map(fn, *operands)`` calls ``fn`` once per position of the list operands:
# ``fn(a[i], b[i], ...)``. Operands that are not lists (a Python float, a 0-dim tensor) are
# handed unchanged to every call. It returns a list with one result per position. In eager
# mode it is literally that loop.


def scaled_silu(x, gate, scale):
    return scale * x * torch.sigmoid(gate)


def scaled_silu_all(xs, ys):
    return foreach_map(scaled_silu, xs, ys, 2.0)


eager_out = scaled_silu_all(xs, ys)
compiled_out = torch.compile(scaled_silu_all, fullgraph=True)(xs, ys)
for x, y, a, b in zip(xs, ys, eager_out, compiled_out):
    torch.testing.assert_close(a, 2.0 * x * torch.sigmoid(y))
    torch.testing.assert_close(b, a)
print(
    f"foreach_map(scaled_silu, ...) returned {len(compiled_out)} tensors; eager and compiled agree"
)

# %%
# What torch.compile does with it
# -------------------------------
#
# ``foreach_map`` is a *higher-order operator*: an operator that takes a function. Its body is
# a small Python function in ``torch._dynamo.polyfills`` that zips the list operands and calls
# ``fn`` on each position. Dynamo does not trace ``fn`` once and reuse it; it runs that Python
# loop while tracing, so it traces ``fn`` once *per tensor* and records every copy of ``fn``'s
# body into one subgraph. The subgraph is therefore as long as ``fn`` times the number of
# tensors. Inductor then inlines the subgraph into the surrounding graph (every operation in
# it must be pointwise) and marks its outputs as one group that may be fused horizontally:
#
# * with Triton (GPUs), the group becomes ``triton_for_fused_*`` foreach kernels: one launch in
#   which different blocks of threads work on different tensors;
# * the C++ backend (CPUs) has no foreach kernels; it fuses each tensor's copy of ``fn``
#   vertically into one loop (tensors of the same size may share one) and puts the loops one
#   after the other in a single generated function (for large tensors, in one parallel region).
#
# A backend that only looks at the graph shows the unrolling. Here it is for a plain SGD update
# over three tensors; the learning rate is a 0-dim tensor (the reason comes below).


def sgd_update(p, g, lr):
    return p - lr * g


def sgd_step(params, grads, lr):
    return foreach_map(sgd_update, params, grads, lr)


captured = {}


def graph_only_backend(gm, example_inputs):
    """Keep the graph that Dynamo captured and run it as it is (no Inductor)."""
    captured["gm"] = gm
    return gm.forward


def graph_nodes(gm):
    """Operations in a captured graph, its subgraphs included."""
    return sum(
        node.op == "call_function"
        for module in gm.modules()
        if isinstance(module, torch.fx.GraphModule)
        for node in module.graph.nodes
    )


lr = torch.tensor(0.1, device=device)
params3 = [torch.randn(1000, device=device) for _ in range(3)]
grads3 = [torch.randn(1000, device=device) for _ in range(3)]
torch._dynamo.reset()
torch.compile(sgd_step, backend=graph_only_backend, fullgraph=True)(params3, grads3, lr)
# Drop comments and the FakeTensor type annotations; keep the operations.
subgraph = next(
    m for m in captured["gm"].children() if isinstance(m, torch.fx.GraphModule)
)
subgraph_code = re.sub(r" ?: torch\S*FakeTensor", "", subgraph.code)
print(
    "\n".join(
        line
        for line in subgraph_code.strip().splitlines()
        if line.strip() and not line.strip().startswith("#")
    )
)

# %%
# ``sgd_update`` has two operations (a multiply and a subtraction); the subgraph has them three
# times, once per tensor, and ``l_lr_`` is shared by all copies. The cost of that unrolling
# grows with the list: more to trace, more to lower, more code to generate and compile. The
# table measures it for a few list lengths: the size of the captured graph, and the time of
# the first call under Inductor from an **empty** compile cache that the page creates
# (``fresh_cache``). Inductor's FX-graph cache counts its hits, which must stay at zero. It also
# counts the graphs that bypass it, which it can neither store nor look up: a graph that holds
# ``foreach_map`` may be one of them, and is then lowered again on every run, even with a warm
# cache.

import torch._inductor.utils as inductor_utils

# Older releases name it fresh_inductor_cache.
fresh_cache = (
    getattr(inductor_utils, "fresh_cache", None) or inductor_utils.fresh_inductor_cache
)

rows = []
for n_tensors in (4, 16, 48):
    params_n = [torch.randn(1000, device=device) for _ in range(n_tensors)]
    grads_n = [torch.randn(1000, device=device) for _ in range(n_tensors)]
    torch._dynamo.reset()
    torch.compile(sgd_step, backend=graph_only_backend, fullgraph=True)(
        params_n, grads_n, lr
    )
    n_nodes = graph_nodes(captured["gm"])
    torch._dynamo.reset()
    counters.clear()
    with fresh_cache():
        t0 = time.perf_counter()
        torch.compile(sgd_step, fullgraph=True, dynamic=False)(params_n, grads_n, lr)
        if device == "cuda":
            torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
    cache = counters["inductor"]
    assert cache["fxgraph_cache_hit"] == 0, (
        "the compile time must come from a cold cache"
    )
    rows.append(
        [
            n_tensors,
            n_nodes,
            compile_s,
            cache["fxgraph_cache_hit"],
            cache["fxgraph_cache_miss"],
            cache["fxgraph_cache_bypass"],
        ]
    )
print(
    tabulate(
        rows,
        headers=[
            "tensors",
            "graph ops",
            "cold compile (s)",
            "FX cache hits",
            "misses",
            "bypasses",
        ],
        floatfmt=".2f",
    )
)
growth = rows[-1][1] / rows[0][1]
print(
    f"{rows[-1][0] // rows[0][0]}x the tensors gave {growth:.1f}x the graph operations; the "
    f"cold compile took {rows[-1][2] / rows[0][2]:.1f}x as long."
)

# %%
# A real model has hundreds of parameter tensors, so expect a compiled ``foreach_map`` step to
# take seconds to compile, once. The steady-state step does not pay for it: the generated code
# runs with no Python per tensor.
#
# The generated code
# ------------------
#
# ``torch._inductor.utils.run_and_get_code`` returns the source that Inductor generated for a
# call. Below is the start of the fused kernel for the three-tensor SGD step, trimmed to the
# lines that do the work. On a GPU it is a Triton foreach kernel: each block of threads reads
# its program id, finds out which tensor it belongs to (``if pid < num_xblocks_0``, then
# ``elif pid < num_xblocks_1``, ...) and runs that tensor's copy of ``sgd_update``. On a CPU it
# is the first of three vectorized loops in one C++ function. Either way, ``lr`` is read from
# memory (``in_ptr``/``tl.load`` of a single element), not written into the code as a number.

from torch._inductor.utils import run_and_get_code

torch._dynamo.reset()
_, sources = run_and_get_code(
    torch.compile(sgd_step, fullgraph=True, dynamic=False), params3, grads3, lr
)
source = "\n".join(sources)
lines = source.splitlines()
if device == "cuda":
    start = next(i for i, line in enumerate(lines) if "def triton_for_fused" in line)
    # Up to the start of the second tensor's branch.
    elifs = [i for i, line in enumerate(lines[start:], start) if "elif pid <" in line]
    stop = elifs[0] + 1 if elifs else start + 30
else:
    start = next(i for i, line in enumerate(lines) if 'extern "C"' in line)
    stop = (
        next(i for i, line in enumerate(lines[start:], start) if ".store(" in line) + 1
    )
kernel_lines = [line for line in lines[start:stop] if line.strip()]
indent = min(len(line) - len(line.lstrip()) for line in kernel_lines)
print("\n".join(line[indent:] for line in kernel_lines))
kernel_names = sorted(
    set(re.findall(r"\b(?:triton_[a-z]+_fused\w*|cpp_fused\w*)", source))
)
print(f"... kernels in the generated code: {', '.join(kernel_names)}")

# %%
# The rules, and what breaking them looks like
# --------------------------------------------
#
# Because ``fn`` is traced as the body of a higher-order operator and lowered as a pointwise
# subgraph, it has to follow two rules:
#
# * ``fn`` must not mutate its inputs. Compute new tensors and write them back afterwards with
#   ``torch._foreach_copy_``; Inductor turns that copy into a store inside the same kernel.
# * ``fn`` must be pointwise: each output element depends only on the same element of the
#   inputs (and on scalars). No reductions, no reshapes, no matrix products.
#
# Breaking either rule fails at compile time. The cell catches each error and prints its first
# line.


def sgd_in_place(p, g, lr):
    return p.sub_(lr * g)  # mutates p: not allowed


def centered_update(p, g, lr):
    return p - lr * (g - g.mean())  # g.mean() is a reduction: not pointwise


for bad_fn in (sgd_in_place, centered_update):
    torch._dynamo.reset()

    def bad_step(params, grads, lr, fn=bad_fn):
        return foreach_map(fn, params, grads, lr)

    try:
        torch.compile(bad_step, fullgraph=True)(params3, grads3, lr)
        print(f"{bad_fn.__name__}: compiled without an error")
    except Exception as err:
        first_line = str(err).strip().splitlines()[0]
        print(f"{bad_fn.__name__}: {type(err).__name__}: {first_line}")

# %%
# The two messages come from two different stages:
#
# * ``Unsupported: Encountered input mutation during higher order op tracing`` is Dynamo's.
#   While tracing the subgraph it saw ``p.sub_`` write into a tensor that came from outside the
#   subgraph; higher-order operators do not allow that, and with ``fullgraph=True`` the would-be
#   graph break is an error. The full message lists the offending subgraph inputs, one per
#   tensor of the list.
# * ``LoweringException: SubgraphLoweringException: Buffers cannot be created while lowering a
#   pointwise subgraph`` is Inductor's. Dynamo traced ``g.mean()`` without complaint, but
#   Inductor lowers the subgraph as pointwise code, and a mean needs a buffer of its own (the
#   reduction result) before the subtraction can use it. The full message then names the
#   offending node (``aten.mean.default``).
#
# One more rule comes from how the compiled step is guarded. A Python number that the compiled
# code reads becomes a constant in it, and Dynamo adds a *guard* that checks the value on every
# call. When the value changes the guard fails and the function is compiled again. Changing a
# learning rate given as a float therefore recompiles every time, and after
# ``torch._dynamo.config.recompile_limit`` compilations Dynamo gives up and runs the function
# eagerly, unfused, with a warning. A 0-dim tensor is an input like the parameters: changing its
# value changes nothing the guards look at. A counting backend makes the difference visible;
# the recompile log names the guard that failed.

import logging

recompile_limit = getattr(
    torch._dynamo.config,
    "recompile_limit",
    getattr(torch._dynamo.config, "cache_size_limit", None),
)
print(f"recompile limit: {recompile_limit}")


class RecompileLog(logging.Handler):
    def __init__(self):
        super().__init__()
        self.guards = []

    def emit(self, record):
        # Keep the failed guard, e.g. "- 0/0: lr == 0.1", without the source comment.
        for line in record.getMessage().splitlines():
            match = re.search(r"- \d+/\d+: (lr == \S+)", line)
            if match:
                self.guards.append(match.group(1))


for kind in ("Python float", "0-dim tensor"):
    compiles = 0

    def counting_backend(gm, example_inputs):
        global compiles
        compiles += 1
        return gm.forward

    torch._dynamo.reset()
    log = RecompileLog()
    torch._logging.set_logs(recompiles=True)
    # Send the recompile log to our handler only, not to the console.
    recompile_loggers = [
        logging.getLogger(name)
        for name in list(logging.root.manager.loggerDict)
        if name.endswith("__recompiles")
    ]
    for logger in recompile_loggers:
        logger.addHandler(log)
        logger.propagate = False
    step_fn = torch.compile(
        sgd_step, backend=counting_backend, fullgraph=True, dynamic=False
    )
    lr_value = torch.tensor(0.1, device=device)
    for new_lr in (0.1, 0.05, 0.025, 0.0125):
        if kind == "Python float":
            step_fn(params3, grads3, new_lr)
        else:
            lr_value.fill_(new_lr)
            step_fn(params3, grads3, lr_value)
    for logger in recompile_loggers:
        logger.removeHandler(log)
        logger.propagate = True
    torch._logging.set_logs()
    failed = (
        f" (failed guards: {', '.join(dict.fromkeys(log.guards))})"
        if log.guards
        else ""
    )
    print(f"lr as a {kind}: 4 learning rates, {compiles} compilation(s){failed}")

# %%
# Adam, one element at a time
# ---------------------------
#
# Adam with L2 weight decay keeps, for every parameter :math:`p`, a first moment :math:`m`
# and a second moment :math:`v`. At step :math:`t` with gradient :math:`g`:
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
# The decayed gradient :math:`g'` is what both moments see. Each line becomes one pointwise
# function. Three things in it change during training and are 0-dim tensors on the device:
# the learning rate :math:`\alpha` (a scheduler changes it), :math:`\beta_1` (``CyclicLR`` and
# ``OneCycleLR`` cycle it), and the step counter :math:`t`. :math:`\beta_2`, :math:`\epsilon`
# and :math:`\lambda` stay Python floats: they never change, so baking them into the kernel as
# constants is what we want.
#
# The bias corrections :math:`1 - \beta_1^t` and :math:`\sqrt{1 - \beta_2^t}` depend only on
# the step, not on the element. Written inside the per-element function, they are recomputed
# for every vector of elements of every tensor: two ``pow`` calls each time, which a GPU hides
# behind its memory traffic but a CPU does not. The fix is to compute them once per step, as
# 0-dim tensors, and hand them to the per-element function as two more scalars. Where matters:
# computed inside the same compiled function as the update, a 0-dim result is not stored
# anywhere; Inductor inlines its computation into every loop that reads it, and the ``pow``
# calls are back in the loop. A separate small compiled function, ``step_scalars`` below,
# makes them real 0-dim tensors that the update only reads. Both versions are below; the
# benchmark compares them.


def decayed_grad(g, p, weight_decay):
    return g + weight_decay * p


def first_moment(m, g, beta1):
    return m + (1 - beta1) * (g - m)  # the same as m.lerp(g, 1 - beta1)


def second_moment(v, g, beta2):
    return beta2 * v + (1 - beta2) * g * g


def param_update(p, m, v, step_size, bias_correction2_sqrt, eps):
    return p - step_size * m / (v.sqrt() / bias_correction2_sqrt + eps)


def param_update_powers_inside(p, m, v, step, lr, beta1, beta2, eps):
    bias_correction1 = 1 - beta1**step
    bias_correction2 = 1 - beta2**step
    denom = v.sqrt() / bias_correction2.sqrt() + eps
    return p - (lr / bias_correction1) * m / denom


# %%
# The update chains the maps. Nothing is written in place inside a map; the three
# ``torch._foreach_copy_`` calls store the new values into the optimizer state and the
# parameters. The decayed gradients are an intermediate list that is never copied anywhere, so
# once everything is fused Inductor never writes it to memory. ``dynamic=False`` asks for one
# specialized kernel per set of shapes; with the changing values passed as tensors, no value
# change recompiles it.


@torch.compile(fullgraph=True)
def step_scalars(step, lr, beta1, beta2):
    """Once per step: advance the counter and compute the step-dependent scalars."""
    step.add_(1)
    return lr / (1 - beta1**step), (1 - beta2**step).sqrt()


def adam_step(
    params, grads, exp_avgs, exp_avg_sqs, step_size, bc2_sqrt, beta1, beta2, eps, wd
):
    grads = foreach_map(decayed_grad, grads, params, wd)
    new_exp_avgs = foreach_map(first_moment, exp_avgs, grads, beta1)
    new_exp_avg_sqs = foreach_map(second_moment, exp_avg_sqs, grads, beta2)
    torch._foreach_copy_(exp_avgs, new_exp_avgs)
    torch._foreach_copy_(exp_avg_sqs, new_exp_avg_sqs)
    new_params = foreach_map(
        param_update, params, exp_avgs, exp_avg_sqs, step_size, bc2_sqrt, eps
    )
    torch._foreach_copy_(params, new_params)


def adam_step_powers_inside(
    params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, wd
):
    step.add_(1)
    grads = foreach_map(decayed_grad, grads, params, wd)
    new_exp_avgs = foreach_map(first_moment, exp_avgs, grads, beta1)
    new_exp_avg_sqs = foreach_map(second_moment, exp_avg_sqs, grads, beta2)
    torch._foreach_copy_(exp_avgs, new_exp_avgs)
    torch._foreach_copy_(exp_avg_sqs, new_exp_avg_sqs)
    new_params = foreach_map(
        param_update_powers_inside,
        params,
        exp_avgs,
        exp_avg_sqs,
        step,
        lr,
        beta1,
        beta2,
        eps,
    )
    torch._foreach_copy_(params, new_params)


compiled_adam_step = torch.compile(adam_step, fullgraph=True, dynamic=False)
compiled_adam_step_powers_inside = torch.compile(
    adam_step_powers_inside, fullgraph=True, dynamic=False
)


class ForeachMapAdam:
    """Adam with L2 weight decay; one compiled foreach_map step for all parameters."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.params = list(params)
        dev = self.params[0].device
        # Values that may change during training: 0-dim tensors, read by the kernel.
        self.lr = torch.tensor(lr, device=dev)
        self.beta1 = torch.tensor(betas[0], device=dev)
        self.step_count = torch.zeros((), device=dev)
        # Values that never change: Python floats, constants in the kernel.
        self.beta2, self.eps, self.weight_decay = betas[1], eps, weight_decay
        self.exp_avgs = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self):
        step_size, bc2_sqrt = step_scalars(
            self.step_count, self.lr, self.beta1, self.beta2
        )
        compiled_adam_step(
            self.params,
            [p.grad for p in self.params],
            self.exp_avgs,
            self.exp_avg_sqs,
            step_size,
            bc2_sqrt,
            self.beta1,
            self.beta2,
            self.eps,
            self.weight_decay,
        )


class PowersInsideAdam(ForeachMapAdam):
    """The same optimizer, with the bias-correction powers inside the per-element function."""

    @torch.no_grad()
    def step(self):
        compiled_adam_step_powers_inside(
            self.params,
            [p.grad for p in self.params],
            self.exp_avgs,
            self.exp_avg_sqs,
            self.step_count,
            self.lr,
            self.beta1,
            self.beta2,
            self.eps,
            self.weight_decay,
        )


# %%
# Check it against ``torch.optim.Adam``
# -------------------------------------
#
# Copies of the same small model get identical gradients, fresh random ones at every step.
# ``torch.optim.Adam`` updates two of them (its ``foreach`` and its ``fused`` implementation),
# ``ForeachMapAdam`` and ``PowersInsideAdam`` the others, all with a non-zero weight decay.
# Halfway through, the learning rate is halved: ``param_groups`` for the reference,
# ``lr.fill_`` for ours. After every step every parameter and both moments must agree to
# float32 precision, and the learning-rate change must not have compiled anything.

hp = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.1}
torch.manual_seed(0)
base_model = torch.nn.Sequential(
    torch.nn.Linear(32, 64),
    torch.nn.GELU(),
    torch.nn.Linear(64, 64),
    torch.nn.GELU(),
    torch.nn.Linear(64, 8),
).to(device)
models = {
    name: copy.deepcopy(base_model)
    for name in ["Adam foreach", "Adam fused", "ForeachMapAdam", "PowersInsideAdam"]
}
params_of = {name: list(m.parameters()) for name, m in models.items()}
start = [p.detach().clone() for p in params_of["Adam foreach"]]
opts = {
    "Adam foreach": torch.optim.Adam(params_of["Adam foreach"], foreach=True, **hp),
    "Adam fused": torch.optim.Adam(params_of["Adam fused"], fused=True, **hp),
    "ForeachMapAdam": ForeachMapAdam(params_of["ForeachMapAdam"], **hp),
    "PowersInsideAdam": PowersInsideAdam(params_of["PowersInsideAdam"], **hp),
}

torch._dynamo.reset()
n_steps = 6
for step in range(n_steps):
    if step == n_steps // 2:
        for name in ("Adam foreach", "Adam fused"):
            opts[name].param_groups[0]["lr"] = hp["lr"] / 2
        opts["ForeachMapAdam"].lr.fill_(hp["lr"] / 2)
        opts["PowersInsideAdam"].lr.fill_(hp["lr"] / 2)
        graphs_before_lr_change = counters["stats"]["unique_graphs"]
    for ps in zip(*params_of.values()):
        g = torch.randn_like(ps[0])
        for p in ps:
            p.grad = g.clone()
    for opt in opts.values():
        opt.step()
    ref = opts["Adam foreach"]
    for name in ("Adam fused", "ForeachMapAdam", "PowersInsideAdam"):
        for i, (p_ref, p) in enumerate(zip(params_of["Adam foreach"], params_of[name])):
            torch.testing.assert_close(p, p_ref)
            if name != "Adam fused":
                state = ref.state[p_ref]
                torch.testing.assert_close(opts[name].exp_avgs[i], state["exp_avg"])
                torch.testing.assert_close(
                    opts[name].exp_avg_sqs[i], state["exp_avg_sq"]
                )
assert counters["stats"]["unique_graphs"] == graphs_before_lr_change, (
    "lr change recompiled"
)

moved = max(
    (p - s).abs().max().item() for p, s in zip(params_of["Adam foreach"], start)
)
diff = max(
    (a - b).abs().max().item()
    for name in ("Adam fused", "ForeachMapAdam", "PowersInsideAdam")
    for a, b in zip(params_of["Adam foreach"], params_of[name])
)
print(
    f"{n_steps} steps over {len(start)} tensors: parameters moved by up to {moved:.2e}"
)
print(f"largest difference to torch.optim.Adam(foreach=True): {diff:.2e}")
print("the learning-rate change compiled nothing new")

# %%
# The roofline
# ------------
#
# The step is memory-bound, so the question is how close it gets to the memory bandwidth of
# the device. Adam in float32 must read the parameter, the gradient and both moments (16 bytes
# per parameter) and write the parameter and both moments (12 bytes): **28 bytes per
# parameter** is the least any implementation can move. How fast that traffic can go is
# measured with a large copy, counting the bytes read and the bytes written, timed exactly
# like the optimizer steps:
#
# * on a GPU with ``triton.testing.do_bench`` (CUDA events, median);
# * on a CPU with ``torch.utils.benchmark.Timer`` using **all** the threads that PyTorch uses
#   (``num_threads=torch.get_num_threads()``; its default is one thread, while both the
#   copy and Inductor's C++ code run on all of them). Dynamo guards on the thread count, so
#   timing a compiled function under another thread count would also recompile it.

if device == "cuda":
    import triton.testing

    timing_method = "triton.testing.do_bench, median of the runs in 200 ms"

    def median_us(fn):
        return (
            triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3
        )

else:
    from torch.utils import benchmark

    timing_method = (
        f"torch.utils.benchmark, {torch.get_num_threads()} threads, "
        "median of blocked_autorange over >= 0.5 s"
    )

    def median_us(fn):
        timer = benchmark.Timer(
            stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()
        )
        return timer.blocked_autorange(min_run_time=0.5).median * 1e6


def measure_bandwidth(numel, in_place_add=False):
    """Bytes per second of a copy (or an in-place add), counting each array read or written."""
    src = torch.ones(numel, device=device)
    dst = torch.ones_like(src)
    if in_place_add:
        us = median_us(lambda: dst.add_(src))  # reads src and dst, writes dst
        passes, what = 3, "in-place add"
    else:
        us = median_us(lambda: dst.copy_(src))  # reads src, writes dst
        passes, what = 2, "copy"
    nbytes = passes * src.numel() * src.element_size()
    print(
        f"{what} of {nbytes / 2**20:.0f} MiB: {us:9.1f} us, {nbytes / us / 1e3:7.1f} GB/s"
    )
    return nbytes / (us * 1e-6)


# 2 GiB moved on a GPU, 256 MiB on a CPU: well beyond the caches.
copy_numel = 2**28 if device == "cuda" else 2**25
copy_bw = measure_bandwidth(copy_numel)

# %%
# The roofline is the copy. On a CPU, one more reference helps reading it: a copy's stores go
# to memory that the core has not read, and most CPUs fetch each such cache line before
# overwriting it (write-allocate), a read the byte count above does not include. An optimizer
# step only writes what it has just read, like the in-place add measured here.

add_bw = copy_bw
if device == "cpu":
    add_bw = measure_bandwidth(copy_numel, in_place_add=True)
    if add_bw > 1.1 * copy_bw:
        print(
            f"the in-place add moved {add_bw / copy_bw:.2f}x the bytes per second of the copy: "
            "an in-place update can beat the copy roofline on this CPU"
        )
    else:
        print(
            f"the in-place add moved {add_bw / copy_bw:.2f}x the bytes per second of the copy: "
            "the copy is a fair roofline on this CPU"
        )

BYTES_PER_PARAM = 28


def roofline_us(n_params):
    return n_params * BYTES_PER_PARAM / copy_bw * 1e6


# %%
# CUDA graphs
# -----------
#
# For a small model the step's kernels finish so quickly on a modern GPU that the host-side
# work around them becomes visible: ``torch.compile`` checks its guards on
# every tensor of the lists and then launches the kernels; the eager optimizers run Python per
# step. A CUDA graph removes that host work for any of them. It records the kernels of one
# step, with their arguments, once; replaying it launches them all with one call and runs no
# Python. To compare like with like, the benchmark puts the hand-written ``fused=True`` step
# and the compiled steps into CUDA graphs alike (``fused`` needs ``capturable=True`` for
# that, so its step counter lives on the GPU).
#
# A graph reads and writes *the same memory* every time. Parameters and optimizer state stay
# put on their own; the gradients must too, so in a training loop call
# ``zero_grad(set_to_none=False)`` or copy each new gradient into a fixed buffer. The check
# below captures one compiled step and compares the replay with an uncaptured twin for three
# steps with new gradients written in place.


def capture_step(step_fn):
    """Record one call of ``step_fn`` into a CUDA graph (warm it up first)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step_fn()  # warm-up on a side stream, as torch.cuda.graph's docs recommend
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step_fn()
    return graph


if device == "cuda":
    torch.manual_seed(0)
    live_model, graph_model = copy.deepcopy(base_model), copy.deepcopy(base_model)
    live_params, graph_params = (
        list(live_model.parameters()),
        list(graph_model.parameters()),
    )
    for a, b in zip(live_params, graph_params):
        a.grad = torch.randn_like(a)
        b.grad = a.grad.clone()
    live_opt, graph_opt = (
        ForeachMapAdam(live_params, **hp),
        ForeachMapAdam(graph_params, **hp),
    )
    graph = capture_step(graph_opt.step)  # warms up with one step, records another
    live_opt.step()
    for _ in range(3):
        for a, b in zip(live_params, graph_params):
            a.grad.copy_(torch.randn_like(a))
            b.grad.copy_(a.grad)
        live_opt.step()
        graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(live_params, graph_params):
        torch.testing.assert_close(b, a)
    torch.testing.assert_close(graph_opt.step_count, live_opt.step_count)
    print(
        f"CUDA graph replays match the compiled step ({int(live_opt.step_count)} steps)"
    )
else:
    print("CUDA graphs need a CUDA GPU: the CPU run skips them.")

# %%
# Benchmark
# ---------
#
# Every variant steps the same parameters with the same (fixed) gradients; each keeps its own
# state. The variants:
#
# * **eager foreach** and **eager fused**: ``torch.optim.Adam(foreach=True)`` and
#   ``(fused=True)``;
# * **compiled Adam.step**: ``torch.compile(opt.step)`` on the built-in Adam, with its learning
#   rate given as a 0-dim tensor;
# * **foreach_map** and **foreach_map, powers inside**: the two versions written above;
# * on a GPU, **eager fused**, **compiled Adam.step** and **foreach_map** again, each replayed
#   from a CUDA graph, so that the compiled steps meet ``fused`` under the same conditions.
#
# The table reports the median time of one step and the fraction of the roofline it reaches
# (100% means the step moved its 28 bytes per parameter as fast as the copy above moved its
# bytes). Nothing here is asserted: timings depend on the machine. The page only checks that
# no compiled function was compiled again while it was being timed.

BENCH_HP = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}


def setup(width, depth):
    """A model with fixed gradients, and every variant of its optimizer step."""
    torch.manual_seed(0)
    model = make_model(width, depth)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    lr_tensor = torch.tensor(1e-3, device=device)
    builtin = torch.optim.Adam(params, lr=lr_tensor, **BENCH_HP)
    variants = {
        "eager foreach": torch.optim.Adam(
            params, foreach=True, lr=1e-3, **BENCH_HP
        ).step,
        "eager fused": torch.optim.Adam(params, fused=True, lr=1e-3, **BENCH_HP).step,
        "compiled Adam.step": torch.compile(builtin.step),
        "foreach_map": ForeachMapAdam(params, lr=1e-3, **BENCH_HP).step,
        "foreach_map, powers inside": PowersInsideAdam(
            params, lr=1e-3, **BENCH_HP
        ).step,
    }
    # Dynamo logs, once, that it drops the profiler label (record_function) that
    # Optimizer.step puts around its body; it concerns profiling, not this page.
    dynamo_ctx_log = logging.getLogger("torch._dynamo.variables.ctx_manager")
    old_level = dynamo_ctx_log.level
    dynamo_ctx_log.setLevel(logging.ERROR)
    for step_fn in variants.values():
        step_fn()  # compiles the compiled ones, creates the state of all
    dynamo_ctx_log.setLevel(old_level)
    if device == "cuda":
        fused_capturable = torch.optim.Adam(
            params, fused=True, capturable=True, lr=1e-3, **BENCH_HP
        )
        for name, step_fn in [
            ("eager fused", fused_capturable.step),
            ("compiled Adam.step", variants["compiled Adam.step"]),
            ("foreach_map", variants["foreach_map"]),
        ]:
            variants[f"{name} + CUDA graph"] = capture_step(step_fn).replay
        torch.cuda.synchronize()
    return {
        "n": sum(p.numel() for p in params),
        "tensors": len(params),
        "steps": variants,
    }


results = []
for shape in bench_shapes:
    s = setup(*shape)
    graphs_before = counters["stats"]["unique_graphs"]
    timings = {name: median_us(fn) for name, fn in s["steps"].items()}
    assert counters["stats"]["unique_graphs"] == graphs_before, (
        "recompiled while timing"
    )
    for name, us in timings.items():
        results.append((s["n"], name, us, roofline_us(s["n"]) / us * 100))
    print(
        f"{s['n'] / 1e6:7.2f} M params in {s['tensors']} tensors: "
        f"roofline {roofline_us(s['n']):9.1f} us, no recompiles while timing"
    )
    del s

print(f"device: {device_name}, torch {torch.__version__}, timing: {timing_method}")
table = [
    [f"{n / 1e6:.1f}", name, f"{us:.1f}", f"{pct:.0f}%"] for n, name, us, pct in results
]
print(tabulate(table, headers=["params (M)", "step", "median (us)", "% of roofline"]))

# %%
# The same numbers as a chart: each bar is one way of taking the step, grouped by model size.
# The dashed line is the roofline.

variant_names = list(dict.fromkeys(name for _, name, _, _ in results))
sizes = list(dict.fromkeys(n for n, _, _, _ in results))
pct_of = {(n, name): pct for n, name, _, pct in results}
bar_width = 0.8 / len(variant_names)
fig, ax = plt.subplots(figsize=(8, 4.8), layout="constrained")
for k, name in enumerate(variant_names):
    offsets = [
        i + (k - (len(variant_names) - 1) / 2) * bar_width for i in range(len(sizes))
    ]
    ax.bar(offsets, [pct_of[(n, name)] for n in sizes], bar_width, label=name)
ax.axhline(100, color="black", linestyle="--", linewidth=1)
ax.set_xticks(range(len(sizes)), [f"{n / 1e6:.1f} M params" for n in sizes])
ax.set_ylabel("% of copy-bandwidth roofline")
ax.set_title(f"Adam step, float32, {device_name}")
ax.legend(
    loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, fontsize=8, frameon=False
)
plt.show()

# %%
# Reading the results
# -------------------
#
# Eager foreach Adam makes about ten passes over memory where one would do. The compiled
# variants and ``fused`` make one. The lines below are printed from the table: which variant
# came closest to the roofline at each size, how the compiled variants compare with ``fused``
# under the same conditions, and what moving the bias-correction powers out of the
# per-element function did.


def result(n, name):
    return next(us for size, v, us, _ in results if size == n and v == name)


suffix = " + CUDA graph" if device == "cuda" else ""
for n in sizes:
    compiled_names = [
        name
        for name in variant_names
        if name.startswith(("compiled", "foreach_map")) and name.endswith(suffix)
    ]
    best = min(compiled_names, key=lambda name: result(n, name))
    fused_us = result(n, "eager fused" + suffix)
    best_pct = pct_of[(n, best)]
    ratio = fused_us / result(n, best)
    verdict = (
        "level with"
        if abs(ratio - 1) < 0.05
        else ("faster than" if ratio > 1 else "slower than")
    )
    print(
        f"{n / 1e6:7.1f} M: best compiled variant '{best}' at {best_pct:.0f}% of the "
        f"roofline, {verdict} 'eager fused{suffix}' ({ratio:.2f}x its speed)"
    )
    inside, outside = result(n, "foreach_map, powers inside"), result(n, "foreach_map")
    change = "faster" if outside < inside * 0.95 else "no faster"
    print(
        f"          powers outside fn: {outside:.1f} us vs {inside:.1f} us inside "
        f"({change}; {inside / outside:.2f}x)"
    )
    builtin_ratio = result(n, "eager fused" + suffix) / result(
        n, "compiled Adam.step" + suffix
    )
    builtin_verdict = (
        "level with or faster than" if builtin_ratio > 0.95 else "slower than"
    )
    print(
        f"          compiled Adam.step{suffix}: {pct_of[(n, 'compiled Adam.step' + suffix)]:.0f}%"
        f" of the roofline, {builtin_verdict} 'eager fused{suffix}' ({builtin_ratio:.2f}x)"
    )
    top = max(variant_names, key=lambda name: pct_of[(n, name)])
    if pct_of[(n, top)] > 100:
        state_mib = n * 16 / 2**20  # parameters, gradients and both moments
        print(
            f"          above 100% ('{top}'): faster than the copy. The in-place add reached "
            f"{add_bw / copy_bw * 100:.0f}% of the copy's rate; see the note below the chart "
            f"({state_mib:.0f} MiB of optimizer data)"
        )

# %%
# The two ``foreach_map`` versions trade differently on the two kinds of device. On a GPU the
# arithmetic of one Adam element is cheap next to its 28 bytes, so the ``pow`` calls of the
# powers-inside version are hidden; the outside version makes one more compiled call per step
# (``step_scalars``), which costs host time when the step is small and not in a CUDA graph. On
# a CPU the ``pow`` calls run for every vector of elements and take a share of the step. The
# value that the outside version computes once per step is the same, so it costs nothing in
# accuracy (the check above held both versions to float32 precision).
#
# The built-in Adam under ``torch.compile`` follows the same rules inside: its learning rate
# is a tensor here, and under compilation its bias corrections are computed from step tensors
# in the same graph as the update. How close it comes to ``fused`` is printed above for each
# size; where it falls short, ``fused=True`` (or a ``foreach_map`` step like the one on this
# page) is the faster choice on that device.
#
# A CPU result above 100% of the copy roofline does not mean that the step moved bytes faster
# than memory can; it means that the copy is a poor bound on a CPU. Two effects make it so.
# Writing to memory that has not been read first makes the CPU fetch each cache line before
# overwriting it, so a copy moves more bytes than it is credited with; the in-place add, which
# writes only what it read, measures that effect. And when a step runs on a few cores of a large
# CPU, each core's bandwidth is limited by how many cache misses it keeps in flight rather than
# by the memory: a loop that streams seven arrays at once keeps more of them in flight than a
# copy that streams two. A model whose optimizer data fits in the caches can add a third
# effect. A GPU keeps its memory busy with many thousands of threads whatever the number of
# arrays, and there the copy is a tight bound.
#
# What remains to the roofline
# ----------------------------
#
# A compiled step is more than its kernel: before the kernel runs, the compiled function
# checks its guards (on every tensor of four lists) and the wrapper allocates nothing but still
# runs some Python. The profiler separates the two on the largest model. On a CPU the C++
# backend names its kernels for the profiler only when ``cpp.enable_kernel_profile`` is set,
# so the cell turns it on and compiles the step once more (timing and profiling share nothing
# else).

from torch.profiler import ProfilerActivity, profile

n_big = sizes[-1]
if device == "cpu":
    torch._inductor.config.cpp.enable_kernel_profile = True
    torch._dynamo.reset()
torch.manual_seed(0)
prof_model = make_model(*bench_shapes[-1])
prof_params = list(prof_model.parameters())
for p in prof_params:
    p.grad = torch.randn_like(p)
prof_opt = ForeachMapAdam(prof_params, lr=1e-3, **BENCH_HP)
prof_opt.step()
if device == "cuda":
    torch.cuda.synchronize()
n_prof = 10
activity = ProfilerActivity.CUDA if device == "cuda" else ProfilerActivity.CPU
with profile(activities=[activity], acc_events=True) as prof:
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n_prof):
        prof_opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
    step_us = (time.perf_counter() - t0) / n_prof * 1e6
if device == "cuda":
    kernel_events = [
        e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
    ]
    kernel_us = sum(e.device_time_total for e in kernel_events) / n_prof
else:
    kernel_events = [e for e in prof.events() if "cpp_fused" in e.name]
    kernel_us = sum(e.cpu_time_total for e in kernel_events) / n_prof
rest_us = max(step_us - kernel_us, 0)
if device == "cuda":
    rest = (
        f"the GPU waited for the host {rest_us:.1f} us ({rest_us / step_us * 100:.0f}%) per "
        f"step on average; in a CUDA graph the step took "
        f"{result(n_big, 'foreach_map + CUDA graph'):.1f} us"
    )
else:
    rest = (
        f"{rest_us:.1f} us ({rest_us / step_us * 100:.0f}%) of each step went to work "
        "outside the generated kernels"
    )
print(
    f"{n_big / 1e6:.1f} M params: the kernels of one step ran {kernel_us:.1f} us "
    f"({roofline_us(n_big) / kernel_us * 100:.0f}% of the roofline); the whole step took "
    f"{step_us:.1f} us under the profiler, so {rest}"
)
if device == "cpu":
    torch._inductor.config.cpp.enable_kernel_profile = False

# %%
# The kernel time is what the generated code costs; the rest is the price of calling it:
# guards on every tensor of the lists, the wrapper's Python, and on a GPU the launches. A
# CUDA graph removes it on a GPU; on a CPU it stays, and it weighs most for models with many
# small tensors. Where the kernel itself stays below the roofline, it moves its bytes less
# smoothly than a copy: the copy streams one array in and one out, while the Adam loop streams
# seven arrays per tensor (four in, three out), one loop after another, and on a CPU waits for
# all threads at the end of every loop. Where a CPU kernel lands above the copy roofline, the
# in-place add measured with the roofline shows the reason: it writes only what it has read.
#
# Conclusion
# ----------
#
# An optimizer step is a memory-bound loop over many tensors, so the way to make it fast is to
# launch few kernels and to move each byte once. ``foreach_map`` lets you write the per-tensor
# update as plain pointwise Python; Dynamo unrolls it over the list (so compile time grows with
# the number of tensors), and Inductor fuses the copies into one pass over memory, with the
# ``torch._foreach_copy_`` write-back folded in. Values that change during training go in as
# 0-dim tensors, so changing them recompiles nothing, and values that depend only on the step
# are computed once per step outside the per-element function. For the built-in optimizers,
# ``torch.compile(opt.step)`` already does all of this; ``foreach_map`` is for the updates that
# ``torch.optim`` does not provide.
#
# Further reading
# ---------------
#
# * `torch.optim <https://docs.pytorch.org/docs/stable/optim.html>`__: the ``foreach`` and
#   ``fused`` implementations and when each is the default
# * `torch.compile <https://docs.pytorch.org/docs/stable/generated/torch.compile.html>`__ and
#   its ``mode="reduce-overhead"`` option
# * `CUDA graphs <https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-graphs>`__ in the
#   CUDA semantics notes
# * `torch.profiler <https://docs.pytorch.org/docs/stable/profiler.html>`__
# * The source of ``foreach_map``:
#   `torch/_higher_order_ops/foreach_map.py
#   <https://github.com/pytorch/pytorch/blob/main/torch/_higher_order_ops/foreach_map.py>`__
#   and its polyfill ``foreach_map_fn`` in
#   `torch/_dynamo/polyfills/__init__.py
#   <https://github.com/pytorch/pytorch/blob/main/torch/_dynamo/polyfills/__init__.py>`__
