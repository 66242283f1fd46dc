"""
.. _compiled_autograd_tutorial:

Compiled autograd: capturing the whole backward pass
====================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * Which parts of the backward pass ``torch.compile`` captures ahead of time, and which
         it leaves to the eager autograd engine
       * How to turn compiled autograd on with ``torch._dynamo.config.compiled_autograd``,
         globally or for one ``torch.compile`` call
       * How graph breaks and tensor hooks look in the backward with and without it
       * What makes compiled autograd recompile, and how to see it in its logs
       * How to measure whether it pays off for your training step

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
       * Familiarity with ``torch.compile`` and graph breaks
       * A CUDA GPU of compute capability 7.0 or newer for the timings; runs on CPU with
         smaller sizes
"""

# %%
# Overview
# --------
#
# ``torch.compile`` already compiles the backward pass. When TorchDynamo captures a forward
# graph whose inputs need gradients, AOTAutograd traces the matching backward graph *ahead of
# time*, from the forward graph alone, and Inductor compiles both. At run time the ordinary
# autograd engine sees one opaque node per compiled region (``CompiledFunctionBackward``) and
# calls the compiled backward graph when it gets there.
#
# Ahead-of-time tracing has two blind spots, because AOTAutograd only ever sees one forward
# graph at a time:
#
# * **Graph breaks in the forward split the backward.** Every forward graph gets its own
#   backward graph, and whatever ran eagerly between two forward graphs is differentiated
#   eagerly, node by node. Inductor never sees the backward as a whole, so it cannot fuse
#   across the pieces.
# * **Backward hooks are not captured.** Hooks are attached to tensors and autograd nodes
#   and run by the autograd engine; the forward graph does not record them, so AOTAutograd
#   does not know they exist. The engine calls them as Python functions between the
#   compiled pieces.
#
# **Compiled autograd** moves the capture to the moment you call ``loss.backward()``. At that
# point the autograd engine knows the *whole* graph it is about to execute: every compiled
# region, every eager op between them, every hook and every gradient accumulation into
# ``.grad``. Compiled autograd traces that graph into a single FX graph and hands it to
# ``torch.compile``. The cost: each backward call first walks the autograd graph to look up
# a cached compilation, and anything that changes the graph's structure or shapes means a
# new capture and a new compile.
#
# This page shows each of those effects with code that counts graphs, prints the relevant
# log lines live, and finally times a training step three ways.
#
# Setup
# -----

import contextlib
import logging
import re
import statistics
import time
import warnings
from collections import Counter

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.benchmark as benchmark
from tabulate import tabulate
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    # This page compares compiled gradients with eager ones in full float32. Inductor
    # suggests TF32 tensor cores when it compiles a float32 matmul with them off; that
    # advice is about speed, not about this lesson.
    warnings.filterwarnings("ignore", message=".*TensorFloat32 tensor cores.*")
    # The timed model at the end: batch, width, Blocks per stage.
    bench_batch, bench_width, bench_blocks = 64, 1024, 4
else:
    device_name = "CPU"
    bench_batch, bench_width, bench_blocks = 32, 128, 1
    print("No CUDA GPU found: running on the CPU with a smaller benchmark model.")

# The lessons before the benchmark use a tiny model: they count graphs, not time.
batch, width, blocks = 8, 32, 1
print(f"torch {torch.__version__} on {device} ({device_name})")

# %%
# A model with two graph breaks
# -----------------------------
#
# The model has three stages of residual blocks. Between the stages it calls ``swish``, an
# activation that ``torch.compile`` is told not to trace (``torch.compiler.disable``). It
# stands in for anything Dynamo cannot capture: a call into a third-party extension, some
# logging, a data-dependent branch. Each call is a graph break, so the forward pass becomes
# three compiled graphs with eager code in between. The model returns its own loss, so the
# loss computation sits in the last compiled graph.


@torch.compiler.disable
def swish(x):
    return x * torch.sigmoid(x)


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.relu(self.linear(self.norm(x)))


class ThreeStageNet(nn.Module):
    def __init__(self, width, blocks_per_stage, act=swish):
        super().__init__()
        self.stages = nn.ModuleList(
            nn.Sequential(*[Block(width) for _ in range(blocks_per_stage)])
            for _ in range(3)
        )
        self.act = act

    def forward(self, x, target):
        x = self.act(self.stages[0](x))  # graph break 1
        x = self.act(self.stages[1](x))  # graph break 2
        return F.mse_loss(self.stages[2](x), target)


def train_step(model, x, target):
    loss = model(x, target)
    loss.backward()
    return loss


def run_step(step, model, x, target):
    """One step from fresh gradients; returns the loss and a copy of every gradient."""
    model.zero_grad(set_to_none=True)
    loss = step(model, x, target)
    return loss, {name: p.grad.clone() for name, p in model.named_parameters()}


torch.manual_seed(0)
model = ThreeStageNet(width, blocks).to(device)
x = torch.randn(batch, width, device=device)
target = torch.randn(batch, width, device=device)
_, eager_grads = run_step(train_step, model, x, target)
print(f"model: 3 stages x {blocks} Block(s) of width {width}, batch {batch}")

# %%
# A backend that counts graphs
# ----------------------------
#
# To *see* how the backward pass is split, we give ``torch.compile`` a small backend of our
# own. It is built on ``aot_autograd``, the same machinery the default Inductor backend uses,
# so it is handed exactly the graphs Inductor would be handed. Instead of generating kernels
# it runs each graph as it is, and it counts two things per kind of graph: how many were
# compiled and how many times they ran. AOTAutograd calls it with three kinds of graph:
#
# * ``forward`` and ``backward``: the pair it traces for every forward graph whose inputs
#   need gradients;
# * ``inference``: a graph that needs no gradients. Compiled autograd's graph is one of
#   those: it *computes* gradients, it is not differentiated itself.


class GraphCounter:
    def __init__(self):
        self.compiled = Counter()
        self.runs = Counter()
        self.graphs = []  # (kind, torch.fx.GraphModule) in compilation order
        self.backend = aot_autograd(
            fw_compiler=self._compiler("forward"),
            bw_compiler=self._compiler("backward"),
            inference_compiler=self._compiler("inference"),
        )

    def _compiler(self, kind):
        def compile_graph(gm, example_inputs):
            self.compiled[kind] += 1
            self.graphs.append((kind, gm))

            def run(*args):
                self.runs[kind] += 1
                return gm(*args)

            # AOTAutograd passes arguments as one list ("boxed"); adapt our function to it.
            return make_boxed_func(run)

        return compile_graph

    def backward_runs(self):
        # Graphs that run while loss.backward() executes: AOTAutograd's backward graphs, or
        # the one graph compiled autograd builds.
        return self.runs["backward"] + self.runs["inference"]


# %%
# Without compiled autograd: three backward graphs
# ------------------------------------------------
#
# We compile the whole training step, ``loss.backward()`` included, and run it twice: the
# first call compiles, the second shows what every later step costs. (``loss.backward()``
# itself is a graph break; Dynamo does not trace into the autograd engine.)

torch._dynamo.reset()  # start every experiment on this page from empty compile caches
plain = GraphCounter()
compiled_step = torch.compile(train_step, backend=plain.backend)
run_step(compiled_step, model, x, target)
plain.runs.clear()
loss, grads = run_step(compiled_step, model, x, target)

print(
    tabulate(
        [
            ["forward graphs", plain.compiled["forward"], plain.runs["forward"]],
            ["backward graphs", plain.compiled["backward"], plain.backward_runs()],
        ],
        headers=["", "compiled", "run per step"],
    )
)
assert plain.runs["forward"] == 3 and plain.backward_runs() == 3
for name in grads:
    torch.testing.assert_close(grads[name], eager_grads[name])
print("gradients match eager")

# %%
# Three forward graphs, three backward graphs. Walking the autograd graph that the step left
# behind (from ``loss.grad_fn`` back to the parameters) shows what the autograd engine
# actually executes: three opaque compiled pieces, the eager nodes of the two ``swish``
# calls between them, and one ``AccumulateGrad`` node per parameter, also run eagerly.


def autograd_node_census(loss):
    counts, seen, todo = Counter(), set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        counts[node.name().replace("torch::autograd::", "")] += 1
        todo.extend(next_node for next_node, _ in node.next_functions)
    return counts


census = autograd_node_census(loss)
print(tabulate(sorted(census.items()), headers=["autograd node", "count"]))
assert census["CompiledFunctionBackward"] == 3

# %%
# Turning compiled autograd on
# ----------------------------
#
# The switch is a Dynamo config flag, ``torch._dynamo.config.compiled_autograd``. Setting it
# to ``True`` once, near the top of a training script, turns it on for every ``torch.compile``
# that follows. To limit it to one compiled function, use the same flag through
# ``torch._dynamo.config.patch``, which works as a context manager (or as a decorator):
#
# .. code-block:: python
#
#     torch._dynamo.config.compiled_autograd = True  # global
#
#     with torch._dynamo.config.patch(compiled_autograd=True):  # scoped
#         compiled_step = torch.compile(train_step)
#
# Two details matter:
#
# * The flag is read **when** ``torch.compile`` **wraps the function**, not when it runs.
#   Each call of the compiled function then turns compiled autograd on for its own duration.
# * Compiled autograd captures only the ``backward()`` calls that run *inside* that compiled
#   function. Compile the training step (forward, loss and ``backward()``), not just the model.
#
# Older tutorials and blog posts use a context manager ``torch._dynamo.compiled_autograd.enable``.
# It no longer exists:

try:
    old_api = torch._dynamo.compiled_autograd.enable
    print("torch._dynamo.compiled_autograd.enable still exists in this PyTorch version")
except AttributeError as e:
    print(f"{type(e).__name__}: {str(e).splitlines()[0]}")

# %%
# Its successor, ``torch._dynamo.compiled_autograd._enable(compiler_fn)``, is private (the
# leading underscore): it is what the config flag uses internally, and it may change without
# notice. This page sticks to the flag. What the installed PyTorch offers:

print(
    tabulate(
        [
            [
                "torch._dynamo.config.compiled_autograd",
                hasattr(torch._dynamo.config, "compiled_autograd"),
            ],
            ["torch._dynamo.config.patch", hasattr(torch._dynamo.config, "patch")],
            [
                "torch._dynamo.compiled_autograd._enable",
                hasattr(torch._dynamo.compiled_autograd, "_enable"),
            ],
        ],
        headers=["API", "present"],
    )
)

# %%
# Here is the first detail in action. We wrap ``train_step`` with compiled autograd turned on
# (``ca_step``), and a second time *before* turning it on and call it *inside* the ``patch``
# block (``late_step``):

torch._dynamo.reset()
with_ca = GraphCounter()
with torch._dynamo.config.patch(compiled_autograd=True):
    ca_step = torch.compile(train_step, backend=with_ca.backend)

late = GraphCounter()
late_step = torch.compile(train_step, backend=late.backend)
with torch._dynamo.config.patch(compiled_autograd=True):
    run_step(late_step, model, x, target)
    late.runs.clear()
    run_step(late_step, model, x, target)

run_step(ca_step, model, x, target)
with_ca.runs.clear()
loss, grads = run_step(ca_step, model, x, target)

print(
    tabulate(
        [
            ["compiled outside the patch", late.runs["forward"], late.backward_runs()],
            [
                "compiled inside the patch",
                with_ca.runs["forward"],
                with_ca.backward_runs(),
            ],
        ],
        headers=["train_step", "forward graphs run", "backward graphs run"],
    )
)
assert late.backward_runs() == 3  # the flag was not set when late_step was wrapped
assert with_ca.runs["forward"] == 3 and with_ca.backward_runs() == 1
for name in grads:
    torch.testing.assert_close(grads[name], eager_grads[name])
print("gradients with compiled autograd match eager")

# %%
# The forward pass is unchanged (still three graphs: compiled autograd does nothing about
# *forward* graph breaks), but the backward pass is now **one** graph. It contains the
# backward of all three compiled regions, the backward of both eager ``swish`` calls, and
# the gradient accumulation into every ``.grad``. The autograd graph left behind by the step
# is the same as before; what changed is who executes it. Listing the ops of the captured
# graph shows all of it: ``mm`` and ``native_layer_norm_backward`` from the compiled
# regions, ``sigmoid_backward`` and ``mul`` from the two eager ``swish`` calls, and a
# ``new_empty_strided`` plus ``copy`` per parameter for the accumulation into ``.grad``.

ca_graph = next(gm for kind, gm in with_ca.graphs if kind == "inference")
ops = Counter(
    str(node.target).rsplit(".", 1)[0]  # aten.mm.default -> aten.mm
    for node in ca_graph.graph.nodes
    if isinstance(node.target, torch._ops.OpOverload)
)
print(f"the compiled backward graph has {sum(ops.values())} ATen ops:")
print(tabulate(ops.most_common(), headers=["op", "count"]))
assert "aten.sigmoid_backward" in ops  # the eager swish, now compiled

# %%
# Hooks
# -----
#
# A tensor hook runs on a gradient as the backward pass produces it. Here we register one on
# the weight of the first Linear layer that clips each gradient element to
# ``[-0.001, 0.001]``, a common way to keep one layer's updates small.
#
# Compiled autograd writes the graph it captured to the ``compiled_autograd`` log artifact.
# ``TORCH_LOGS="compiled_autograd"`` or ``torch._logging.set_logs(compiled_autograd=True)``
# turns it on and sends it to stderr, graph and all. This page only shows what the code
# prints to stdout, so we turn the artifact on with ``set_logs`` and attach a small
# ``logging.Handler`` that prints just the lines we care about (with any file path shortened
# to its file name).

CLIP = 1e-3


def clip_grad(grad):
    return grad.clamp(-CLIP, CLIP)


def shorten_paths(line):
    return re.sub(
        r"(?:[A-Za-z]:)?(?:[\\/][^\\/\s:,\"']+)+[\\/]([^\\/\s:,\"']+)", r"\1", line
    )


class PrintToStdout(logging.Handler):
    """Prints the lines of each log record for which ``keep(line)`` is true."""

    def __init__(self, keep, prefix="  log |"):
        super().__init__()
        self.keep, self.prefix, self.lines = keep, prefix, []

    def emit(self, record):
        for line in record.getMessage().splitlines():
            if self.keep(line):
                line = shorten_paths(line.strip().split(";")[0])
                self.lines.append(line)
                print(f"{self.prefix} {line[:120]}{' ...' if len(line) > 120 else ''}")


@contextlib.contextmanager
def compiled_autograd_logs(keep, artifact="compiled_autograd"):
    """Route one compiled-autograd log artifact to stdout while the block runs."""
    logger = logging.getLogger("torch._dynamo.compiled_autograd")
    handler = PrintToStdout(keep)
    torch._logging.set_logs(**{artifact: True})
    saved_propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False  # keep the same lines off stderr
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved_propagate
        torch._logging.set_logs()


hook_handle = model.stages[0][0].linear.weight.register_hook(clip_grad)
_, eager_hook_grads = run_step(train_step, model, x, target)
name = "stages.0.0.linear.weight"
clipped = (eager_hook_grads[name].abs() == CLIP).float().mean().item()
print(f"eager: {clipped:.0%} of the elements of {name}.grad were clipped")

# %%
# Without compiled autograd the hook is invisible to the compiler: none of AOTAutograd's
# backward graphs contains a ``clamp``, because the engine calls ``clip_grad`` in Python
# after the backward graph of the first stage (the last one the backward runs) returns.

torch._dynamo.reset()
plain_hook = GraphCounter()
compiled_step = torch.compile(train_step, backend=plain_hook.backend)
_, grads = run_step(compiled_step, model, x, target)
has_clamp = [
    "aten.clamp" in gm.code for kind, gm in plain_hook.graphs if kind == "backward"
]
print(f"backward graphs containing clamp: {sum(has_clamp)} of {len(has_clamp)}")
assert not any(has_clamp)
torch.testing.assert_close(grads[name], eager_hook_grads[name])

# %%
# With compiled autograd the hook becomes a ``call_hook`` node in the captured graph; its
# result feeds the accumulation into ``.grad``. When ``torch.compile`` then traces that graph
# it inlines ``clip_grad``, so the graph that actually runs contains the ``clamp``.

torch._dynamo.reset()
ca_hook = GraphCounter()
with torch._dynamo.config.patch(compiled_autograd=True):
    ca_step = torch.compile(train_step, backend=ca_hook.backend)
with compiled_autograd_logs(keep=lambda line: "call_hook" in line) as log:
    _, grads = run_step(ca_step, model, x, target)

ca_graph = next(gm for kind, gm in ca_hook.graphs if kind == "inference")
clamp_lines = [line.strip() for line in ca_graph.code.splitlines() if "clamp" in line]
print("compiled backward graph:")
for line in clamp_lines:
    line = line.split(";")[0]
    print(f"  {line[:95]} ..." if len(line) > 99 else f"  {line}")
assert clamp_lines
for param_name in grads:
    torch.testing.assert_close(grads[param_name], eager_hook_grads[param_name])
print("gradients with the hook, compiled autograd vs eager: match")
hook_handle.remove()

# %%
# Recompiles
# ----------
#
# Before each backward call, compiled autograd walks the autograd graph and builds a key
# from it: the type of every node, how they connect, the hooks, and the shapes of the
# tensors involved. A key it has seen before reuses the compiled graph. A new key means a
# new **capture** (compiled autograd traces the autograd graph again) followed by a
# ``torch.compile`` of the result. The reason for each capture is logged to the
# ``compiled_autograd_verbose`` artifact in a line that starts with ``Cache miss``; we print
# those lines as they happen. We count two things per call: captures (Dynamo's internal
# ``counters["compiled_autograd"]["captures"]``) and backward graphs that ``torch.compile``
# compiled (our ``GraphCounter``). The two differ because ``torch.compile`` has its own
# guards on the captured graph and can recompile it without a new capture.
#
# The calls below change one thing at a time: nothing, the batch size (four different
# sizes), and the activation between the stages, which we swap for ``tanh``. Since the
# activation runs eagerly, its backward nodes are part of the autograd graph that compiled
# autograd walks: a new node type, ``TanhBackward0``, means a new key.

from torch._dynamo.utils import counters


@torch.compiler.disable
def tanh(x):
    return torch.tanh(x)


torch._dynamo.reset()
recompiles = GraphCounter()
with torch._dynamo.config.patch(compiled_autograd=True):
    ca_step = torch.compile(train_step, backend=recompiles.backend)

calls = [
    ("first call", batch, swish),
    ("same inputs again", batch, swish),
    ("new batch size", batch // 2, swish),
    ("new batch size", batch + 4, swish),
    ("new batch size", batch + 6, swish),
    ("new batch size", batch + 8, swish),
    ("activation becomes tanh", batch, tanh),
    ("same inputs again", batch, tanh),
]
rows = []
with compiled_autograd_logs(
    keep=lambda line: line.startswith("Cache miss"),
    artifact="compiled_autograd_verbose",
):
    for what, n, act in calls:
        print(f"{what}: batch {n}, {act.__name__}")
        model.act = act
        captures = counters["compiled_autograd"]["captures"]
        compiles = recompiles.compiled["inference"]
        xn = torch.randn(n, width, device=device)
        run_step(ca_step, model, xn, torch.randn_like(xn))
        rows.append(
            [
                what,
                n,
                act.__name__,
                counters["compiled_autograd"]["captures"] - captures,
                recompiles.compiled["inference"] - compiles,
            ]
        )
model.act = swish

print(
    tabulate(
        rows, headers=["call", "batch", "activation", "captures", "graphs compiled"]
    )
)
new_captures = [row[3] for row in rows]
new_compiles = [row[4] for row in rows]
assert new_captures[0] == 1 and new_compiles[0] == 1  # empty cache
assert new_captures[1] == 0 and new_compiles[1] == 0  # same key: cache hit
assert sum(new_captures[2:5]) >= 1  # the first shape changes miss
assert new_captures[5] == 0 and new_compiles[5] == 0  # by now the sizes are dynamic
assert new_captures[6] == 1 and new_compiles[6] == 1  # new node type
assert new_captures[7] == 0 and new_compiles[7] == 0

# %%
# Reading the table from the top:
#
# * The first call always captures: the cache is empty.
# * An identical call costs only the cache lookup.
# * The first new batch size misses the cache (the log names the node whose key changed:
#   the forward graphs were recompiled for the new shape, so their backward nodes differ).
#   The next one misses because of the changed shapes, and compiled autograd marks those
#   sizes as dynamic. ``torch.compile`` may then recompile the captured graph once more, by
#   its usual automatic-dynamic rule, without a new capture. After that, new batch sizes
#   reuse the same graph.
# * Swapping the eager activation changes the node types in the autograd graph and forces a
#   new capture, even though nothing changed inside the compiled regions.
#
# Other things that change the key: registering or removing hooks, a ``.grad`` that exists
# in one step and is ``None`` in the next (call ``zero_grad(set_to_none=True)``
# consistently, as ``run_step`` does), and ``requires_grad`` changes such as freezing
# layers. A training loop that does the same thing every step captures a few times at the
# start and then only pays the lookup.
#
# Measuring the payoff
# --------------------
#
# Compiled autograd pays off when the backward pass has structure that AOTAutograd cannot
# see: graph breaks and hooks. The benchmark model has both: the two ``swish`` graph breaks,
# and a gradient-clipping hook on *every* parameter. We time one full training step
# (forward, backward, hooks, accumulation into ``.grad``) three ways:
#
# * **eager**: plain PyTorch;
# * **torch.compile**: the compiled step with the default Inductor backend;
# * **torch.compile + compiled autograd**: the same, wrapped with the flag on.
#
# The first call of each compiled variant includes compilation and is reported on its own.
# Steady-state times are the median of many steps: on a GPU measured with CUDA events, on a
# CPU with ``torch.utils.benchmark``.

torch._dynamo.reset()
torch.manual_seed(0)
bench_model = ThreeStageNet(bench_width, bench_blocks).to(device)
for p in bench_model.parameters():
    p.register_hook(clip_grad)
bx = torch.randn(bench_batch, bench_width, device=device)
btarget = torch.randn(bench_batch, bench_width, device=device)
n_params = sum(p.numel() for p in bench_model.parameters())
print(
    f"benchmark model: 3 stages x {bench_blocks} Blocks of width {bench_width}, "
    f"{n_params / 1e6:.2f} M parameters, {len(list(bench_model.parameters()))} hooks, "
    f"batch {bench_batch}"
)

with torch._dynamo.config.patch(compiled_autograd=True):
    ca_step = torch.compile(train_step)
compiled_step = torch.compile(train_step)

variants = {
    "eager": train_step,
    "torch.compile": compiled_step,
    "torch.compile + compiled autograd": ca_step,
}


def synchronize():
    if device == "cuda":
        torch.cuda.synchronize()


def one_step(step):
    bench_model.zero_grad(set_to_none=True)
    step(bench_model, bx, btarget)


def median_step_us(step, n_gpu=100):
    """Median time of one training step in microseconds, and how many samples it is from."""
    if device == "cuda":
        for _ in range(10):
            one_step(step)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_gpu)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_gpu)]
        for start, end in zip(starts, ends):
            start.record()
            one_step(step)
            end.record()
        torch.cuda.synchronize()
        return statistics.median(
            s.elapsed_time(e) for s, e in zip(starts, ends)
        ) * 1e3, n_gpu
    one_step(step)  # warm-up
    timer = benchmark.Timer(
        stmt="one_step(step)", globals={"one_step": one_step, "step": step}
    )
    measurement = timer.blocked_autorange(min_run_time=1.0)
    return measurement.median * 1e6, len(measurement.times)


_, reference = run_step(train_step, bench_model, bx, btarget)
results = {}
for label, step in variants.items():
    synchronize()
    start = time.perf_counter()
    _, grads = run_step(step, bench_model, bx, btarget)
    synchronize()
    first_s = time.perf_counter() - start
    # Compiled kernels sum in a different order than eager ones: allow float32 round-off.
    for param_name in grads:
        torch.testing.assert_close(
            grads[param_name], reference[param_name], rtol=1e-3, atol=1e-5
        )
    median_us, samples = median_step_us(step)
    results[label] = (first_s, median_us, samples)

eager_us = results["eager"][1]
print(
    f"{device_name}, torch {torch.__version__}, batch {bench_batch}, width {bench_width}; "
    f"{bench_blocks * 3} Blocks; steady state = median of N samples "
    + (
        "(N single steps timed with CUDA events)"
        if device == "cuda"
        else "(N blocks of steps)"
    )
)
print(
    tabulate(
        [
            [label, f"{first:8.2f}", f"{us:10.1f}", n, f"{eager_us / us:5.2f}x"]
            for label, (first, us, n) in results.items()
        ],
        headers=["variant", "first call (s)", "median step (us)", "N", "vs eager"],
        disable_numparse=True,
    )
)

fig, ax = plt.subplots(figsize=(7, 3))
labels = list(results)
ax.barh(
    labels, [results[label][1] / 1e3 for label in labels], color=["grey", "C0", "C1"]
)
ax.invert_yaxis()
ax.set_xlabel("median training step (ms), lower is better")
ax.set_title(f"Graph breaks + per-parameter hooks, {device_name}")
fig.tight_layout()
plt.show()

ca_vs_compile = (
    results["torch.compile"][1] / results["torch.compile + compiled autograd"][1]
)
print(f"compiled autograd vs plain torch.compile, steady state: {ca_vs_compile:5.2f}x")

# %%
# How to read the result. With plain ``torch.compile``, the backward pass of this model is
# three compiled graphs, the eager backward of the two ``swish`` calls, and, for every
# parameter, a Python call to ``clip_grad`` that launches its own small kernel. With
# compiled autograd it is a single compiled graph in which the clipping is fused into the
# gradient computation. The difference between the last two rows is what that buys.
#
# It buys the most where a training step is dominated by fixed per-kernel and per-Python-call
# costs, which is typical of a GPU running a model of this size. On a CPU with tensors this
# small, the fixed costs of compiled code (guard checks and a call per compiled graph) can
# outweigh what fusion saves, so even eager may come out ahead; treat CPU numbers from this
# page as a functional check rather than a benchmark. The price of compiled autograd shows in
# the "first call" column: its row reuses the forward graphs compiled for the row above, so
# its first call is mostly the compilation of the captured backward graph. After that, every
# backward call pays the cache lookup, a walk over the autograd graph.
#
# Conclusion
# ----------
#
# AOTAutograd compiles the backward of each forward graph in isolation, so graph breaks split
# the backward into pieces glued together by the eager autograd engine, and hooks run as
# Python between them. Compiled autograd, turned on with
# ``torch._dynamo.config.compiled_autograd`` at the time ``torch.compile`` wraps your training
# step, captures the backward the engine is about to run as one graph, hooks and gradient
# accumulation included. It recompiles when the autograd graph's structure or shapes change,
# which its ``compiled_autograd_verbose`` log explains line by line. Measure your own step:
# it helps most when the backward has many small pieces and hooks.
#
# Further reading
# ---------------
#
# * `torch.compile programming model: graph breaks
#   <https://docs.pytorch.org/docs/stable/compile/programming_model.graph_breaks_index.html>`_
# * `Autograd mechanics: backward hooks
#   <https://docs.pytorch.org/docs/stable/notes/autograd.html#backward-hooks-execution>`_
# * `torch._logging.set_logs
#   <https://docs.pytorch.org/docs/stable/generated/torch._logging.set_logs.html>`_
# * `torch.compiler API reference
#   <https://docs.pytorch.org/docs/stable/torch.compiler_api.html>`_
