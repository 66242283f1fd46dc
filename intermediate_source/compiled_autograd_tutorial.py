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
         globally or for one ``torch.compile`` call, and why the older
         ``compiled_autograd.enable`` no longer works
       * What the captured graph contains, how tensor hooks get into it, and how to require
         a single backward graph
       * What makes compiled autograd recompile, and how to read its logs
       * Its limitations, and how to measure whether it pays off for your training step

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
       * Familiarity with ``torch.compile`` and graph breaks
       * A CUDA GPU of compute capability 7.5 or newer for the timings (current CUDA wheels
         need it); runs on CPU with smaller sizes
       * On CPU, Inductor needs a C++ compiler and the Python headers
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
# log lines live, lists the limitations, and finally times a training step three ways.
#
# Setup
# -----

import contextlib
import logging
import re
import statistics
import textwrap
import time
import warnings
from collections import Counter

import matplotlib.pyplot as plt
import torch
import torch._inductor.utils
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.benchmark as benchmark
from tabulate import tabulate
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.utils import counters
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
    device_name = f"CPU, {torch.get_num_threads()} threads"
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


def assert_grads_match(grads, reference):
    # Compiled code may sum in another order than eager code: float32 round-off only.
    for name in reference:
        torch.testing.assert_close(grads[name], reference[name], rtol=1e-4, atol=1e-5)


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
        # the graph(s) compiled autograd builds.
        return self.runs["backward"] + self.runs["inference"]

    def code(self, *kinds):
        return "\n".join(gm.code for kind, gm in self.graphs if kind in kinds)


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
assert_grads_match(grads, eager_grads)
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
# .. note::
#
#    **Which API on which PyTorch.** The upstream PyTorch tutorial on compiled autograd was
#    written for PyTorch 2.5 and turns it on with a context manager,
#    ``torch._dynamo.compiled_autograd.enable(torch.compile(...))``. That context manager
#    was later renamed ``_enable``: a private function, which the config flag calls for you
#    and which may change without notice. The
#    `2.9 source <https://github.com/pytorch/pytorch/blob/v2.9.0/torch/_dynamo/compiled_autograd.py>`__
#    defines only ``_enable``, and so do the later releases checked for this page, so the
#    upstream tutorial's ``compiled_autograd.enable(...)`` raises ``AttributeError`` on every
#    version this site supports. On PyTorch 2.9 and later, use ``torch._dynamo.config.compiled_autograd = True``
#    or ``torch._dynamo.config.patch(compiled_autograd=True)`` as shown above. The lines below
#    check both names on the PyTorch that built this page.

has_flag = hasattr(torch._dynamo.config, "compiled_autograd")
has_old_enable = hasattr(torch._dynamo.compiled_autograd, "enable")
print(f"torch {torch.__version__}:")
print(
    "  torch._dynamo.config.compiled_autograd:  "
    + ("present, use this" if has_flag else "missing")
)
print(
    "  torch._dynamo.compiled_autograd.enable:  "
    + ("present" if has_old_enable else "missing (the upstream tutorial's call fails)")
)
assert has_flag

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
assert_grads_match(grads, eager_grads)
print("gradients with compiled autograd match eager")

# %%
# The forward pass is unchanged (still three graphs: compiled autograd does nothing about
# *forward* graph breaks), but the backward pass is now **one** graph. It contains the
# backward of all three compiled regions, the backward of both eager ``swish`` calls, and
# the gradient accumulation into every ``.grad``. The autograd graph left behind by the step
# is the same as before; what changed is who executes it.
#
# What the captured graph contains
# --------------------------------
#
# Compiled autograd writes each graph it captures to the ``compiled_autograd`` log artifact.
# ``TORCH_LOGS="compiled_autograd"`` or ``torch._logging.set_logs(compiled_autograd=True)``
# turns it on and sends it to stderr, graph and all. This page only shows what the code
# prints to stdout, so we turn the artifact on with ``set_logs`` and attach a small
# ``logging.Handler`` that keeps the records and prints just the lines we ask for (with any
# file path shortened to its file name).


def shorten_paths(line):
    return re.sub(
        r"(?:[A-Za-z]:)?(?:[\\/][^\\/\s:,\"']+)+[\\/]([^\\/\s:,\"']+)", r"\1", line
    )


def print_wrapped(line, prefix="  | "):
    """Print a long line over several, breaking only between words."""
    for i, piece in enumerate(
        textwrap.wrap(line, width=120, break_long_words=False, break_on_hyphens=False)
    ):
        print((prefix if i == 0 else " " * len(prefix) + "    ") + piece)


class KeepLogRecords(logging.Handler):
    """Keeps every message; prints the lines of it for which ``show(line)`` is true."""

    def __init__(self, show):
        super().__init__()
        self.show, self.messages = show, []

    def emit(self, record):
        message = record.getMessage()
        self.messages.append(message)
        for line in message.splitlines():
            if self.show(line.strip()):
                # A statement's trailing "x = None" clean-ups are dropped.
                print_wrapped(shorten_paths(line.strip().split(";  ")[0]))


@contextlib.contextmanager
def compiled_autograd_logs(artifact="compiled_autograd", show=lambda line: False):
    """Route one compiled-autograd log artifact to a KeepLogRecords while the block runs."""
    logger = logging.getLogger("torch._dynamo.compiled_autograd")
    handler = KeepLogRecords(show)
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


torch._dynamo.reset()
logged = GraphCounter()
with torch._dynamo.config.patch(compiled_autograd=True):
    ca_step = torch.compile(train_step, backend=logged.backend)
with compiled_autograd_logs() as log:
    run_step(ca_step, model, x, target)
graph_text = log.messages[0]

# %%
# The logged graph is Python code: one statement per FX node, grouped under comments that
# name their origin. Here is the comment that opens one group, the backward of a compiled
# region, and the first three ATen operations of that group:

lines = [line.strip() for line in graph_text.splitlines()]
origin = next(
    i for i, line in enumerate(lines) if "code: CompiledFunctionBackward" in line
)
aten_statements = [
    line.split(";")[0]
    for line in lines[origin + 1 :]
    if re.match(r"aot\d+_\w+(?::\s*\"[^\"]*\")?\s*=\s*torch\.ops\.aten\.", line)
]
for line in [lines[origin]] + aten_statements[:3]:
    print_wrapped(shorten_paths(line))

# %%
# How to read these lines:
#
# * ``# File: compiled_autograd.py:NNN in set_node_origin`` is where compiled autograd
#   *recorded* the origin, always the same place; the useful part follows ``code:``.
# * ``CompiledFunctionBackwardN (NodeCall i)``: the statements below come from the ``i``-th
#   node call of the backward, counted from 0 in the order the autograd engine executes the
#   nodes (``NodeCall 0`` is the graph root, where the gradient of the loss enters). This
#   node is the backward of a compiled region, and the number ``N`` glued to its name is
#   the id AOTAutograd gave that region's graph.
# * ``aotN_...``: compiled autograd copies the statements of that region's AOTAutograd
#   backward graph into its own graph and prefixes their names with ``aot`` and the same
#   id, so ``aotN_mm`` is the node ``mm`` of AOTAutograd's backward graph ``N``. A graph
#   that appears twice in one backward gets a second number (``aotN_1_``).
#
# Counting the statements per origin gives the whole picture. The counts depend on the
# PyTorch version (each release changes how the pieces are traced and decomposed), so the
# table says which version made it.


def statements_by_origin(graph_text):
    """Count the FX nodes of a logged compiled-autograd graph per autograd node."""
    rows, current = {}, "graph inputs"
    for line in (line.strip() for line in graph_text.splitlines()):
        origin = re.search(r"code: (\S+) \(NodeCall (\d+)\)$", line)
        if origin:
            current = origin[1].replace("torch::autograd::", "")
            # A node's statements can come in several groups: collect its NodeCall numbers.
            rows.setdefault(current, [set(), 0])[0].add(int(origin[2]))
            continue
        statement = re.match(r"(\w+)(?::\s*\"[^\"]*\")?\s*=\s", line)
        if not statement:
            continue
        aot = re.match(r"aot(\d+)_", statement[1])
        # Statements copied from an AOTAutograd graph belong to that graph's node, even
        # when compiled autograd moved them after a later node.
        owner = f"CompiledFunctionBackward{aot[1]}" if aot else current
        rows.setdefault(owner, [set(), 0])[1] += 1
    return rows


origins = statements_by_origin(graph_text)
print(f"compiled autograd graph, torch {torch.__version__}:")
print(
    tabulate(
        [[name, len(calls) or "-", nodes] for name, (calls, nodes) in origins.items()],
        headers=["origin", "node calls", "FX nodes"],
    )
)
assert sum(name.startswith("CompiledFunctionBackward") for name in origins) == 3
assert len(origins["AccumulateGrad"][0]) == len(list(model.parameters()))

# Inside the graph that torch.compile compiled from it, the eager swish is now compiled:
assert "aten.sigmoid_backward" in logged.code("inference")

# %%
# Three ``CompiledFunctionBackward`` rows (one per compiled region, the largest groups), the
# two eager activations (``MulBackward0`` and ``SigmoidBackward0``, one call per ``swish``),
# one ``AccumulateGrad`` call per parameter, and the statements that unpack the graph's
# inputs. ``torch.compile`` then traces this graph like any other function, so
# Inductor gets all of it at once.
#
# Hooks
# -----
#
# A tensor hook runs on a gradient as the backward pass produces it. Here we register one on
# the weight of the first Linear layer that clips each gradient element to
# ``[-0.001, 0.001]``, a common way to keep one layer's updates small.

CLIP = 1e-3


def clip_grad(grad):
    return grad.clamp(-CLIP, CLIP)


hook_handle = model.stages[0][0].linear.weight.register_hook(clip_grad)
_, eager_hook_grads = run_step(train_step, model, x, target)
name = "stages.0.0.linear.weight"
clipped = (eager_hook_grads[name].abs() == CLIP).float().mean().item()
print(f"eager: {clipped:.0%} of the elements of {name}.grad were clipped")

# %%
# Without compiled autograd the hook is invisible to AOTAutograd: none of its backward graphs
# contains a ``clamp``. The engine calls ``clip_grad`` on its own, after the backward graph
# of the first stage (the last one the backward runs) returns. Because that call happens
# while the compiled step is running, Dynamo compiles the hook as a separate small graph
# (counted as an ``inference`` graph), which the engine then calls like any hook.

torch._dynamo.reset()
plain_hook = GraphCounter()
compiled_step = torch.compile(train_step, backend=plain_hook.backend)
_, grads = run_step(compiled_step, model, x, target)
has_clamp = [
    "aten.clamp" in gm.code for kind, gm in plain_hook.graphs if kind == "backward"
]
print(f"backward graphs containing clamp: {sum(has_clamp)} of {len(has_clamp)}")
print(
    f"separate graphs compiled from the hook itself: {plain_hook.compiled['inference']}"
)
assert not any(has_clamp)
assert_grads_match(grads, eager_hook_grads)

# %%
# With compiled autograd the hook becomes a ``call_hook`` node in the captured graph (the
# log line below); its result feeds the accumulation into ``.grad``. When ``torch.compile``
# then traces that graph it inlines ``clip_grad``, so the graph that actually runs contains
# the ``clamp``.

torch._dynamo.reset()
ca_hook = GraphCounter()
with torch._dynamo.config.patch(compiled_autograd=True):
    ca_step = torch.compile(train_step, backend=ca_hook.backend)
with compiled_autograd_logs(show=lambda line: line.startswith("call_hook")):
    _, grads = run_step(ca_step, model, x, target)

clamp_lines = [
    line.strip().split(";")[0]
    for line in ca_hook.code("inference").splitlines()
    if "clamp" in line
]
print("compiled backward graph:")
for line in clamp_lines:
    print_wrapped(line)
assert clamp_lines
assert_grads_match(grads, eager_hook_grads)
print("gradients with the hook, compiled autograd vs eager: match")
hook_handle.remove()

# %%
# Hooks registered inside the compiled region
# -------------------------------------------
#
# The hook above was registered *outside* the compiled step, on a parameter. A hook can
# also be registered *inside* it, on an intermediate tensor that exists only during the
# step. Here the step clips the gradient flowing out of the second stage. This model has no
# ``swish`` calls, so without the hook the forward would be one graph.


def inner_hook_step(model, x, target):
    h = model.stages[1](model.stages[0](x))
    h.register_hook(clip_grad)  # on an intermediate tensor, inside the compiled code
    loss = F.mse_loss(model.stages[2](h), target)
    loss.backward()
    return loss


_, eager_inner_grads = run_step(inner_hook_step, model, x, target)

outcomes = {}
for ca in (False, True):
    torch._dynamo.reset()
    counters.clear()
    inner = GraphCounter()
    with torch._dynamo.config.patch(compiled_autograd=ca):
        step = torch.compile(inner_hook_step, backend=inner.backend)
    _, grads = run_step(step, model, x, target)
    assert_grads_match(grads, eager_inner_grads)
    hook_breaks = sum(
        n for reason, n in counters["graph_break"].items() if "hook" in reason
    )
    # Without compiled autograd the backward graphs are AOTAutograd's; with it, the one
    # captured graph (an "inference" graph to our counter).
    in_backward = "aten.clamp" in inner.code("inference" if ca else "backward")
    outcomes[ca] = (inner.compiled["forward"], hook_breaks, in_backward)

print(
    tabulate(
        [
            ["on" if ca else "off", fwd, breaks, "yes" if clamp else "no"]
            for ca, (fwd, breaks, clamp) in outcomes.items()
        ],
        headers=[
            "compiled autograd",
            "forward graphs",
            "graph breaks at the hook",
            "clamp in a backward graph",
        ],
    )
)
fwd_off, breaks_off, clamp_off = outcomes[False]
if breaks_off:
    print(
        f"torch {torch.__version__}: without compiled autograd, registering the hook "
        "inside the compiled region is a graph break; the hook runs eagerly."
    )
else:
    print(
        f"torch {torch.__version__}: without compiled autograd, Dynamo traced the hook "
        + ("into AOTAutograd's backward graph." if clamp_off else "without a break.")
    )
assert outcomes[True] == (1, 0, True)
print("gradients match eager in both cases")

# %%
# With compiled autograd the intermediate's hook is recorded in the forward graph without a
# break and runs inside the one captured backward graph. Without it, the result depends on
# the release: PyTorch 2.9
# `refuses to compile such a hook <https://github.com/pytorch/pytorch/blob/v2.9.0/torch/_dynamo/variables/tensor.py>`__
# without compiled autograd (graph break "Compilation of intermediate hooks requires compiled
# autograd", in ``_method_register_hook``), while newer releases can trace it into
# AOTAutograd's backward graph on their own. The table above shows what the PyTorch that
# built this page did.
#
# Compiling the backward with other settings
# ------------------------------------------
#
# The captured backward graph is compiled by the same ``torch.compile`` call that wrapped
# the step: same backend, same mode and options. That is why every graph on this page so far,
# forward or backward, went to our counting backend. One setting can differ:
# ``torch._dynamo.config.compiled_autograd_kwargs_override`` holds ``torch.compile``
# arguments for the backward graph alone, and ``fullgraph`` is the only key it accepts, in
# 2.9 as in later releases (any other key fails an assertion in ``rebuild_ctx`` in
# `eval_frame.py <https://github.com/pytorch/pytorch/blob/v2.9.0/torch/_dynamo/eval_frame.py>`__);
# there is no per-backward backend. ``{"fullgraph": True}`` makes a graph break in the
# captured backward an error, while the forward may still break: a way to guarantee that the
# backward stays one graph. The override is read each time the compiled step runs, so we
# keep it patched around the calls too.

torch._dynamo.reset()
strict = GraphCounter()
with torch._dynamo.config.patch(
    compiled_autograd=True, compiled_autograd_kwargs_override={"fullgraph": True}
):
    strict_step = torch.compile(train_step, backend=strict.backend)
    _, grads = run_step(strict_step, model, x, target)
print(
    f"fullgraph backward: {strict.compiled['forward']} forward graphs (breaks allowed), "
    f"{strict.compiled['inference']} backward graph"
)
assert strict.compiled["forward"] == 3 and strict.compiled["inference"] == 1
assert_grads_match(grads, eager_grads)

# %%
# Recompiles
# ----------
#
# Before each backward call, compiled autograd walks the autograd graph node by node, in the
# engine's order, and builds a **key** for each node: bytes that describe the node's type
# and everything about it that is not a tensor's values: how it connects, which of its
# outputs need gradients, its hooks, the sizes it saved, and for a compiled region's backward
# node, which compiled graph it belongs to. The cache is a tree of these keys. A walk that
# finds every key reuses the compiled graph. A new key means a new **capture** (compiled
# autograd traces the autograd graph again) followed by a ``torch.compile`` of the result.
#
# The reason for each capture goes to the ``compiled_autograd_verbose`` artifact in a line
# that starts with ``Cache miss``; we print those lines as they happen. They come in two
# forms:
#
# * ``Cache miss due to new autograd node: X (NodeCall i) with key size A, previous key
#   sizes=[B]``: at node call ``i`` the walk met node ``X`` with a key it has not cached.
#   ``A`` is that key's length in bytes, and the list holds the lengths of the keys already
#   cached for the same node type at that point (empty: none yet). Different lengths show
#   the node's description changed; equal lengths can still differ in content.
# * ``Cache miss due to ... changed tensor shapes ...``: the same nodes, new sizes. The
#   line names the size slots that changed, and compiled autograd makes those sizes
#   dynamic, so the next change does not miss again.
#
# We count two things per call: captures (Dynamo's internal
# ``counters["compiled_autograd"]["captures"]``) and backward graphs that ``torch.compile``
# compiled (our ``GraphCounter``). The two differ because ``torch.compile`` has its own
# guards on the captured graph and can recompile it without a new capture.
#
# The calls below change one thing at a time: nothing, the batch size (four different
# sizes), and the activation between the stages, which we swap for ``tanh``. Since the
# activation runs eagerly, its backward nodes are part of the autograd graph that compiled
# autograd walks: a new node type, ``TanhBackward0``, means a new key.


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
    "compiled_autograd_verbose", show=lambda line: line.startswith("Cache miss")
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
# * The first call always captures: the cache is empty, so the walk misses at the graph
#   root (``NodeCall 0``) with no previous keys.
# * An identical call costs only the walk.
# * The first new batch size misses at a ``CompiledFunctionBackward`` node: Dynamo
#   recompiled the forward graphs for the new shape, so that node now belongs to another
#   compiled graph and its key changed. The next one misses because of the changed shapes,
#   and compiled autograd marks those sizes as dynamic. ``torch.compile`` may then recompile
#   the captured graph once more, by its usual automatic-dynamic rule, without a new
#   capture. After that, new batch sizes reuse the same graph.
# * Swapping the eager activation changes the node types in the autograd graph and forces a
#   new capture, even though nothing changed inside the compiled regions.
#
# Other things that change a key: registering or removing hooks, a ``.grad`` that exists
# in one step and is ``None`` in the next (call ``zero_grad(set_to_none=True)``
# consistently, as ``run_step`` does), and ``requires_grad`` changes such as freezing
# layers. A training loop that does the same thing every step captures a few times at the
# start and then only pays the walk.
#
# Limitations
# -----------
#
# **Autograd's multithreading is off while compiled autograd is active.** Normally the
# autograd engine runs the backward of accelerator tensors on one worker thread per device;
# with multithreading off, the whole backward runs on the thread that called
# ``backward()`` (see ``torch.autograd.set_multithreading_enabled``). Compiled autograd's
# ``_enable`` context turns it off
# (`compiled_autograd.py <https://github.com/pytorch/pytorch/blob/v2.9.0/torch/_dynamo/compiled_autograd.py>`__,
# search ``set_multithreading_enabled(False)``), for the duration of each call of a step
# compiled with the flag on. A function that ``torch.compile`` leaves to eager mode can see
# it from inside the step:

is_multithreading_enabled = getattr(  # public name in newer releases, private in older
    torch.autograd, "is_multithreading_enabled", torch._C._is_multithreading_enabled
)
seen = {}


@torch.compiler.disable
def record_multithreading(ca):
    seen[ca] = is_multithreading_enabled()


def probed_step(model, x, target, ca):
    record_multithreading(ca)
    return train_step(model, x, target)


for ca in (False, True):
    torch._dynamo.reset()
    with torch._dynamo.config.patch(compiled_autograd=ca):
        step = torch.compile(probed_step, backend=GraphCounter().backend)
    model.zero_grad(set_to_none=True)
    step(model, x, target, ca)
    print(
        f"compiled autograd {'on ' if ca else 'off'}: autograd multithreading "
        f"{'enabled' if seen[ca] else 'disabled'} inside the step"
    )
assert seen == {False: True, True: False}

# %%
# **DistributedDataParallel needs the Python reducer.** DDP's default C++ reducer registers
# hooks that compiled autograd cannot capture; the reducer's
# `source <https://github.com/pytorch/pytorch/blob/v2.9.0/torch/csrc/distributed/c10d/reducer.cpp>`__
# raises "Compiled autograd is not compatible with C++ DDP Reducer, please use
# torch._dynamo.config.optimize_ddp="python_reducer"" when compiled autograd meets one of
# them. Set ``torch._dynamo.config.optimize_ddp = "python_reducer"`` *before* wrapping the
# model in ``DistributedDataParallel``: DDP reads it in its constructor
# (`distributed.py <https://github.com/pytorch/pytorch/blob/v2.9.0/torch/nn/parallel/distributed.py>`__,
# ``_use_python_reducer``), and the Python reducer's gradient hooks are then traced into
# the compiled backward, communication included. The option is described next to
# ``optimize_ddp`` in
# `torch/_dynamo/config.py <https://github.com/pytorch/pytorch/blob/v2.9.0/torch/_dynamo/config.py>`__,
# which calls it experimental. This page runs in one process, so it only shows the default:

print(f"torch._dynamo.config.optimize_ddp = {torch._dynamo.config.optimize_ddp!r}")

# %%
# **The "force_eager" stance turns it off too.** ``torch.compiler.set_stance("force_eager")``
# runs compiled functions eagerly, and compiled autograd's ``_enable`` checks the stance and
# leaves the autograd engine alone when it is ``"force_eager"``. Under that stance our
# compiled-autograd step compiles nothing and captures nothing:

torch._dynamo.reset()
stance = GraphCounter()
with torch._dynamo.config.patch(compiled_autograd=True):
    ca_step = torch.compile(train_step, backend=stance.backend)
captures = counters["compiled_autograd"]["captures"]
with torch.compiler.set_stance("force_eager"):
    _, grads = run_step(ca_step, model, x, target)
new_captures = counters["compiled_autograd"]["captures"] - captures
print(
    f'set_stance("force_eager"): {sum(stance.compiled.values())} graphs compiled, '
    f"{new_captures} compiled autograd captures"
)
assert sum(stance.compiled.values()) == 0 and new_captures == 0
assert_grads_match(grads, eager_grads)

# %%
# **A hook that Dynamo cannot trace breaks the backward graph.** Compiled autograd puts
# every hook into its graph, and ``torch.compile`` then has to trace the hook like any other
# code. If it cannot, the captured backward graph breaks there, just as a forward graph
# would. Our hook below records each gradient's norm for a monitoring tool; its
# ``torch.compiler.disable`` stands in for anything Dynamo cannot trace.

grad_norms = []


@torch.compiler.disable
def record_grad_norm(grad):
    grad_norms.append(grad.norm().item())


norm_handle = model.stages[1][0].linear.weight.register_hook(record_grad_norm)

torch._dynamo.reset()
broken = GraphCounter()
with torch._dynamo.config.patch(compiled_autograd=True):
    ca_step = torch.compile(train_step, backend=broken.backend)
run_step(ca_step, model, x, target)
broken.runs.clear()
grad_norms.clear()
_, grads = run_step(ca_step, model, x, target)
print(
    f"untraceable hook: one backward ran as {broken.runs['inference']} graphs, "
    f"and the hook ran {len(grad_norms)} time(s), eagerly"
)
assert broken.runs["inference"] > 1
assert_grads_match(grads, eager_grads)

# %%
# The backward is one graph before the hook and one after it, with the hook run eagerly in
# between: still correct, but Inductor again sees pieces. With the ``fullgraph`` override
# from above the same break is an error instead. Dynamo raises its ``Unsupported``
# exception during the first backward; we catch it and print its first line, which names
# the reason: the hook is a function wrapped in ``torch.compiler.disable``.

torch._dynamo.reset()
with torch._dynamo.config.patch(
    compiled_autograd=True, compiled_autograd_kwargs_override={"fullgraph": True}
):
    strict_step = torch.compile(train_step, backend=GraphCounter().backend)
    try:
        run_step(strict_step, model, x, target)
        raised = None
    except torch._dynamo.exc.Unsupported as error:
        raised = error
print(
    f"fullgraph backward with the untraceable hook: {type(raised).__name__}: "
    f"{str(raised).splitlines()[0]}"
    if raised
    else "fullgraph backward with the untraceable hook: no error"
)
assert raised is not None
norm_handle.remove()
torch._dynamo.reset()

# %%
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
# Each variant starts from empty compile caches: ``torch._dynamo.reset()`` plus Inductor's
# ``fresh_cache()``, a temporary on-disk cache directory (the site's build otherwise keeps
# a warm cache between builds). Its first call is timed on its own and includes all of its
# compilation; the page checks that Inductor's FX graph cache had no hit during it and
# prints the hits and misses. Steady-state ("warm") times are the median of many steps
# afterwards: on a GPU, single steps timed with CUDA events after a warm-up; on a CPU,
# ``torch.utils.benchmark`` with the same number of threads for every variant
# (``num_threads=torch.get_num_threads()``: the Timer's default is one thread, while
# Inductor's C++ code uses all of them).

# Called fresh_inductor_cache before it was renamed; the old name remains an alias.
fresh_cache = getattr(torch._inductor.utils, "fresh_cache", None) or (
    torch._inductor.utils.fresh_inductor_cache
)

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


def make_compiled():
    return torch.compile(train_step)


def make_compiled_autograd():
    with torch._dynamo.config.patch(compiled_autograd=True):
        return torch.compile(train_step)


variants = {
    "eager": lambda: train_step,
    "torch.compile": make_compiled,
    "torch.compile + compiled autograd": make_compiled_autograd,
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
        stmt="one_step(step)",
        globals={"one_step": one_step, "step": step},
        num_threads=torch.get_num_threads(),
    )
    measurement = timer.blocked_autorange(min_run_time=1.0)
    return measurement.median * 1e6, len(measurement.times)


def fx_cache_counts():
    return (
        counters["inductor"]["fxgraph_cache_hit"],
        counters["inductor"]["fxgraph_cache_miss"],
    )


_, reference = run_step(train_step, bench_model, bx, btarget)
results = {}
for label, make_step in variants.items():
    torch._dynamo.reset()
    hits_before, misses_before = fx_cache_counts()
    with fresh_cache():
        step = make_step()
        synchronize()
        start = time.perf_counter()
        _, grads = run_step(step, bench_model, bx, btarget)
        synchronize()
        first_s = time.perf_counter() - start
        hits, misses = (
            a - b for a, b in zip(fx_cache_counts(), (hits_before, misses_before))
        )
        assert hits == 0, f"{label}: the first call found {hits} cached graphs"
        # Bigger sums than in the small model: a slightly looser float32 tolerance.
        for param_name in grads:
            torch.testing.assert_close(
                grads[param_name], reference[param_name], rtol=1e-3, atol=1e-5
            )
        median_us, samples = median_step_us(step)
        # Warm means warm: nothing was compiled while the steps were timed.
        assert fx_cache_counts()[1] - misses_before == misses, f"{label} recompiled"
    results[label] = (first_s, hits, misses, median_us, samples)

eager_us = results["eager"][3]
print(
    f"{device_name}, torch {torch.__version__}, batch {bench_batch}, width {bench_width}; "
    f"{bench_blocks * 3} Blocks; warm step = median of N "
    + (
        "single steps timed with CUDA events"
        if device == "cuda"
        else f"blocks of steps, {torch.get_num_threads()} threads for every variant"
    )
)
print(
    tabulate(
        [
            [
                label,
                f"{first:8.2f}",
                f"{hits}/{misses}",
                f"{us:10.1f}",
                n,
                f"{eager_us / us:5.2f}x",
            ]
            for label, (first, hits, misses, us, n) in results.items()
        ],
        headers=[
            "variant",
            "first call, cold (s)",
            "FX cache hit/miss",
            "warm step (us)",
            "N",
            "warm vs eager",
        ],
        disable_numparse=True,
    )
)

fig, ax = plt.subplots(figsize=(7, 3))
labels = list(results)
ax.barh(
    labels, [results[label][3] / 1e3 for label in labels], color=["grey", "C0", "C1"]
)
ax.invert_yaxis()
ax.set_xlabel("median warm training step (ms), lower is better")
ax.set_title(f"Graph breaks + per-parameter hooks, {device_name}")
fig.tight_layout()
plt.show()

plain_us = results["torch.compile"][3]
ca_us = results["torch.compile + compiled autograd"][3]
ratio = plain_us / ca_us
if ratio > 1.05:
    verdict = f"compiled autograd made the warm step {ratio:.2f}x faster than plain torch.compile"
elif ratio < 1 / 1.05:
    verdict = f"compiled autograd made the warm step {1 / ratio:.2f}x slower than plain torch.compile"
else:
    verdict = "compiled autograd and plain torch.compile took about the same time per warm step (within 5%)"
print(f"On this machine, {verdict}.")
ca_misses = results["torch.compile + compiled autograd"][2]
plain_misses = results["torch.compile"][2]
print(
    f"Cold first calls compiled {plain_misses} Inductor graphs for plain torch.compile "
    f"and {ca_misses} with compiled autograd."
)

# %%
# How to read the result. With plain ``torch.compile``, the backward pass of this model is
# three compiled graphs, the eager backward of the two ``swish`` calls, and, for every
# parameter, a Python call to ``clip_grad`` that launches its own small kernel. With
# compiled autograd it is a single compiled graph in which the clipping is fused into the
# gradient computation; in exchange, every backward call first walks the autograd graph to
# look up its cache key. The cold first calls compile different sets of graphs: plain
# ``torch.compile`` compiles the three forward graphs, their three backward graphs and small
# graphs for the hook (Dynamo compiles it when the engine calls it, once per gradient
# shape), while compiled autograd compiles the three forward graphs and one large backward
# graph. The "FX cache hit/miss" column counts them.
#
# Which side wins depends on the balance of fixed costs. Per-kernel launch and
# per-Python-call overheads dominate a GPU step of a model this size, which is where one
# fused graph helps most. On a CPU with tiny tensors, the fixed costs of compiled code
# (guard checks, the cache walk, a call per compiled graph) can outweigh what fusion saves,
# so treat CPU numbers from this page as a functional check rather than a benchmark.
#
# Conclusion
# ----------
#
# AOTAutograd compiles the backward of each forward graph in isolation, so graph breaks split
# the backward into pieces glued together by the eager autograd engine, and hooks run as
# Python between them. Compiled autograd, turned on with
# ``torch._dynamo.config.compiled_autograd`` at the time ``torch.compile`` wraps your training
# step, captures the backward the engine is about to run as one graph, hooks and gradient
# accumulation included; ``compiled_autograd_kwargs_override={"fullgraph": True}`` makes sure
# it stays one. It recompiles when the autograd graph's structure or shapes change, which its
# ``compiled_autograd_verbose`` log explains node by node. Mind its limits: single-threaded
# backward, DDP only with the Python reducer, off under ``force_eager``, and broken by hooks
# Dynamo cannot trace. Measure your own step: it helps most when the backward has many small
# pieces and hooks.

print(f"This page was built on {device_name} with torch {torch.__version__}.")

# %%
# Further reading
# ---------------
#
# * `torch.compile programming model: graph breaks
#   <https://docs.pytorch.org/docs/stable/compile/programming_model.graph_breaks_index.html>`_
# * `Autograd mechanics: backward hooks
#   <https://docs.pytorch.org/docs/stable/notes/autograd.html#backward-hooks-execution>`_
# * `torch.autograd.set_multithreading_enabled
#   <https://docs.pytorch.org/docs/stable/generated/torch.autograd.grad_mode.set_multithreading_enabled.html>`_
# * `torch.compiler.set_stance
#   <https://docs.pytorch.org/docs/stable/generated/torch.compiler.set_stance.html>`_
# * `torch._logging.set_logs
#   <https://docs.pytorch.org/docs/stable/generated/torch._logging.set_logs.html>`_
# * `torch.compiler API reference
#   <https://docs.pytorch.org/docs/stable/torch.compiler_api.html>`_
