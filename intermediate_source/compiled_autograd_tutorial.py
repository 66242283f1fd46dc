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
         and why the older ``compiled_autograd.enable`` no longer works
       * How to read its logs: what the captured graph contains and why it recaptures
       * How to measure what compiled autograd adds to and removes from a training step:
         its time in kernels, and its time outside them (guards, graph entries, Python)
       * How compiled autograd combines with CUDA graphs (``mode="reduce-overhead"``)

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later, with tabulate and matplotlib, on any operating system
         PyTorch supports (the C++ compiler's share of each compile is read on Linux)
       * Familiarity with ``torch.compile`` and graph breaks
       * A GPU is optional. With a CUDA GPU (compute capability 7.5 or newer, under 1 GB of
         its memory) the page also times CUDA graphs, and Inductor needs Triton (PyTorch's
         Linux CUDA wheels bring it). Without one it runs on the CPU with smaller sizes,
         and Inductor needs a C++ compiler and the Python headers. The first cell stops
         with one line if what Inductor needs is missing
       * On a 2-core CPU it runs in under a minute, with about 1 GB of memory
"""

# %%
# Overview
# --------
#
# ``torch.compile`` already compiles the backward pass. For every forward graph whose inputs
# need gradients, AOTAutograd traces the matching backward graph *ahead of time*, from that
# forward graph alone. At run time the ordinary autograd engine sees one opaque node per
# compiled region (``CompiledFunctionBackward``) and calls its compiled backward when it gets
# there. Two things stay outside those graphs:
#
# * **Graph breaks split the backward.** Each forward graph gets its own backward graph, and
#   whatever ran eagerly between two forward graphs is differentiated eagerly, node by node.
# * **Hooks and gradient accumulation run in the engine.** A hook registered on a parameter
#   is a Python function that the engine calls, and writing each gradient into ``.grad``
#   is an ``AccumulateGrad`` node that it runs, one parameter at a time.
#
# **Compiled autograd** captures the backward when ``loss.backward()`` is called. At that
# moment the engine knows the whole graph it is about to execute: every compiled region, the
# eager nodes between them, every hook and every accumulation. Compiled autograd traces it
# into one FX graph and hands that to ``torch.compile``. The price is paid on every backward
# call: before running anything, it walks the autograd graph node by node and builds a cache
# key for each (in C++, calling into Python for the backward node of each compiled region),
# to find the graph it captured before. That walk is CPU time. A miss means a new capture
# and a new compile.
#
# Setup
# -----

import contextlib
import logging
import re
import warnings
from collections import Counter

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
from tabulate import tabulate
from torch._dynamo.utils import compilation_time_metrics, counters

import measure

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    # PyTorch's default float32 matmuls; Inductor's hint to enable TF32 is about speed only.
    warnings.filterwarnings("ignore", message=".*TensorFloat32")
    batch, width, blocks = 64, 1024, 4  # blocks per stage
    CLIP = 5e-4  # the hooks' clamp: the larger model has smaller gradients
else:
    device_name = f"CPU, {torch.get_num_threads()} threads"
    batch, width, blocks = 32, 128, 1
    CLIP = 2e-3
print(f"torch {torch.__version__} on {device_name}: batch {batch}, width {width}")
measure.require(cxx=device == "cpu", triton=device == "cuda")  # what Inductor needs

# PyTorch 2.9 logs "ChromiumEventLogger: Start event not in stack" during the first
# capture below: a note on its own compile-time tracing, not on this lesson.
logging.getLogger("torch._dynamo.utils").addFilter(
    lambda record: "ChromiumEventLogger" not in record.getMessage()
)

# %%
# Compiled autograd and Inductor report through Python's ``logging``; ``kept_log``
# collects what a few named logs say, so the page can print the lines that matter.


@contextlib.contextmanager
def kept_log(*names, **artifacts):
    """Collect the lines of the named logs (compiled autograd's by default) instead of
    printing them."""
    lines, handler = [], logging.Handler()
    handler.emit = lambda record: lines.extend(
        line.strip() for line in record.getMessage().splitlines()
    )
    names = names or ["torch._dynamo.compiled_autograd"]
    loggers = [logging.getLogger(name) for name in names]
    before = [logger.propagate for logger in loggers]
    torch._logging.set_logs(**artifacts)
    for logger in loggers:
        logger.addHandler(handler)
        logger.propagate = False  # keep them off stderr too
    try:
        yield lines
    finally:
        for logger, propagate in zip(loggers, before):
            logger.removeHandler(handler)
            logger.propagate = propagate
        torch._logging.set_logs()


# %%
# A training step with a graph break and hooks
# --------------------------------------------
#
# Three stages of LayerNorm-Linear-GELU blocks (GELU rather than ReLU on purpose: ReLU's
# gradient jumps at zero, so a pre-activation within rounding error of zero can land on
# different sides in float32 and in float64, and the comparison with float64 below would
# measure that jump instead of rounding). Between stages the model calls ``swish``,
# which ``torch.compiler.disable`` keeps out of the graph: it stands in for anything Dynamo
# cannot capture (a third-party extension, logging, a data-dependent branch). So the forward
# is three compiled graphs with eager code between them. Every parameter gets a hook that
# clamps its gradient elementwise, a common way to keep updates small. Per-parameter hooks
# (``register_hook``, or ``register_post_accumulate_grad_hook``) are also how gradient
# communication and optimizer-in-backward code attach to a model.


@torch.compiler.disable
def swish(x):
    return x * torch.sigmoid(x)


class ThreeStageNet(nn.Module):
    def __init__(self):
        super().__init__()
        block = (nn.LayerNorm, lambda w: nn.Linear(w, w), lambda w: nn.GELU())
        self.stages = nn.ModuleList(
            nn.Sequential(*[layer(width) for _ in range(blocks) for layer in block])
            for _ in range(3)
        )

    def forward(self, x, target):
        x = swish(self.stages[0](x))  # graph break
        x = swish(self.stages[1](x))  # graph break
        return F.mse_loss(self.stages[2](x), target)


def clip_grad(grad):
    return grad.clamp(-CLIP, CLIP)


def train_step(model, x, target):
    loss = model(x, target)
    loss.backward()
    return loss


def run(step, model, x, target, cudagraphs=False):
    """One step from fresh gradients (zeroed outside the step, so Dynamo does not guard
    on whether each ``.grad`` is ``None``)."""
    if cudagraphs:  # the previous step's CUDA-graph outputs may now be overwritten
        torch.compiler.cudagraph_mark_step_begin()
    model.zero_grad(set_to_none=True)
    return step(model, x, target)


torch.manual_seed(0)
model = ThreeStageNet().to(device)
for p in model.parameters():
    p.register_hook(clip_grad)
x = torch.randn(batch, width, device=device)
target = torch.randn(batch, width, device=device)
n_params = len(list(model.parameters()))
print(f"{blocks * 3} blocks, {n_params} parameter tensors with a hook each")

# %%
# Turning it on
# -------------
#
# Set the Dynamo flag ``torch._dynamo.config.compiled_autograd`` when you wrap the training
# step: either ``torch._dynamo.config.compiled_autograd = True`` once for the whole script,
# or ``torch._dynamo.config.patch(compiled_autograd=True)`` around one ``torch.compile``
# call, as below. The flag is read when ``torch.compile`` wraps the function; each call of
# the wrapped function then turns compiled autograd on for its own duration. So it captures
# only the ``backward()`` calls made *inside* that function: compile the step (forward, loss
# and ``backward()``), not only the model.
#
# .. note::
#
#    The upstream tutorial, written for PyTorch 2.5, used the context manager
#    ``torch._dynamo.compiled_autograd.enable(...)``. It was renamed to the private
#    ``_enable``, which the flag calls for you; from PyTorch 2.9 on, the old name raises
#    ``AttributeError``. Use the flag. The line below checks both on this build.

print(f"config.compiled_autograd: {hasattr(torch._dynamo.config, 'compiled_autograd')}")
print(f"compiled_autograd.enable: {hasattr(torch._dynamo.compiled_autograd, 'enable')}")
assert hasattr(torch._dynamo.config, "compiled_autograd")

# %%
# To see what gets captured, we compile with the ``aot_eager`` backend (AOTAutograd without
# Inductor's code generation: the same graphs, compiled in seconds) and collect the
# ``compiled_autograd_verbose`` log, the one that ``TORCH_LOGS="compiled_autograd_verbose"``
# would print. It has a line for each cache miss and the captured graph as Python code,
# in which a comment names the autograd node each group of statements came from. We count
# those origins and the hook calls.

torch._dynamo.reset()
with torch._dynamo.config.patch(compiled_autograd=True):
    demo_step = torch.compile(train_step, backend="aot_eager")
captures = counters["compiled_autograd"]["captures"]
with kept_log(compiled_autograd_verbose=True) as log:
    run(demo_step, model, x, target)
assert counters["compiled_autograd"]["captures"] == captures + 1

# NodeCall number -> autograd node. The graph's body comes last in the log and names every
# node call (the input unpacking before it numbers them differently): the last name wins.
node_calls = {}
for line in log:
    if m := re.search(r"code: (\S+) \(NodeCall (\d+)\)$", line):
        name = re.sub(r"^torch::autograd::|(?<=CompiledFunctionBackward)\d+$", "", m[1])
        node_calls[int(m[2])] = name
origins = Counter(node_calls.values())
hook_calls = [line.split(";")[0] for line in log if "call_hook(" in line]
print(next(line for line in log if line.startswith("Cache miss")))
print(tabulate(sorted(origins.items()), ["autograd node", "node calls"]))
print(f"{len(hook_calls)} hook calls in the graph, the first:\n  {hook_calls[0]}")
assert origins["CompiledFunctionBackward"] == 3
assert len(hook_calls) == n_params

# %%
# One graph holds all of it: the backward of the three compiled regions (AOTAutograd's
# backward graphs, inlined), the eager ``swish`` backward (``MulBackward0``,
# ``SigmoidBackward0``), one ``AccumulateGrad`` group and one ``call_hook`` per parameter
# (as a ``tensor_pre_hook``: the hook runs before the gradient is accumulated). When
# ``torch.compile`` then traces this graph it inlines ``clip_grad``, so the clamp becomes
# part of the compiled backward.
#
# The cache miss line says why it captured: at ``NodeCall 0`` (the graph root) the walk found
# no cached key (``previous key sizes=[]``). The next call with the same inputs walks the
# same keys and reuses the graph. A new batch size changes what some keys hold, so the walk
# misses again; the line names the first node whose key is new, with the key's size in bytes
# beside the sizes of the keys cached for that node before.

with kept_log(compiled_autograd_verbose=True) as log:
    run(demo_step, model, x, target)
    same = counters["compiled_autograd"]["captures"] - captures - 1
    run(demo_step, model, x[: batch // 2], target[: batch // 2])
    new_batch = counters["compiled_autograd"]["captures"] - captures - 1 - same
recaptures = [["same inputs", same], ["half the batch", new_batch]]
print(tabulate(recaptures, ["call", "new captures"]))
print("\n".join(line for line in log if line.startswith("Cache miss")))
assert same == 0 and new_batch >= 1

# %%
# Other things that change a key and cause a capture: adding or removing a hook, a
# ``.grad`` that is ``None`` in one step and a tensor in the next (zero the gradients the same
# way every step, as ``run`` does), and freezing layers. A loop that does the same
# thing every step captures a few times at the start and then pays only the walk.
#
# Ways to run the step
# --------------------
#
# Now the real thing, with the default Inductor backend:
#
# * **eager**: plain PyTorch;
# * **torch.compile(model)**: the model is compiled, ``backward()`` runs in the engine;
# * **torch.compile + compiled autograd**: the step compiled with the flag on, and
#   ``compiled_autograd_kwargs_override={"fullgraph": True}``, which makes a graph break
#   inside the captured backward an error, so the backward is provably one graph. (It is
#   the only key that override accepts; the forward may still break.)
# * on a GPU, the last two again with ``mode="reduce-overhead"``, which hands every
#   compiled graph to Inductor's CUDA-graph trees: a recorded graph replays all its
#   kernels with one launch. Compiled autograd compiles its captured backward with the
#   same arguments as the step (``rebuild_ctx`` in ``torch/_dynamo/eval_frame.py``), so
#   there the whole backward, hooks and accumulation included, is a candidate for one
#   CUDA graph; without it, only the three AOTAutograd backward graphs are, and the engine
#   runs the rest between their replays. ``run`` then calls
#   ``torch.compiler.cudagraph_mark_step_begin()`` first, telling the runtime that the
#   previous step's outputs may be overwritten.
#
# Each variant's first call is its compile, and ``measure.cold_compile`` makes it
# **cold**: it resets Dynamo (as in a new process: nothing compiled), points Inductor at
# a new, empty on-disk cache, and asserts that Inductor's FX graph cache missed, never
# hit, and that a graph was compiled. Without the reset, a variant would reuse the
# forward graphs that the one before it compiled (both compile ``ThreeStageNet.forward``
# with the same backend), and its cold call would hold only the rest. The reset also
# drops the variants compiled before, so all are compiled again, warm, before the
# timing. Inductor's one-time start-up in the process (its imports, its pool of compile
# workers) is timed first, on a one-line function, with the seconds a C++ compiler ran
# in it. We also record how many backward graphs run per step: AOTAutograd's
# ``CompiledFunctionBackward`` nodes left in the autograd graph for
# ``torch.compile(model)``, compiled autograd's captures for the others, and, with CUDA
# graphs, how many graphs were recorded and why any was not (Inductor's log of each
# graph it declines). ``settle`` then calls the step until three calls in a row compile
# nothing; the timings later are warm.


def autograd_nodes(loss):
    """Count the nodes of the autograd graph that ``loss.backward()`` runs, by type."""
    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo += [next_node for next_node, _ in node.next_functions]
    return Counter(node.name().replace("torch::autograd::", "") for node in seen)


def compile_counts():
    """Inductor graphs compiled and found in its cache, compiled autograd captures, and
    frames Dynamo converted: any compile changes at least one of them."""
    return (
        counters["inductor"]["fxgraph_cache_miss"],
        counters["inductor"]["fxgraph_cache_hit"],
        counters["compiled_autograd"]["captures"],
        counters["frames"]["total"],
    )


def settle(step):
    """Call ``step`` until three calls in a row compile nothing; return the calls made.
    Three, because a CUDA-graph tree records a graph on its second call."""
    calls, before = 0, None
    while compile_counts() != before:
        assert calls < 12, "the step kept compiling"
        before = compile_counts()
        for _ in range(3):
            step()
        calls += 3
    return calls


def compile_model(mode=None):
    compiled = torch.compile(model, mode=mode)  # wrapped once, reused by every step
    return lambda _, *args: train_step(compiled, *args)


def compile_step_with_ca(mode=None):
    with torch._dynamo.config.patch(compiled_autograd=True):
        return torch.compile(train_step, mode=mode)


TM, CA = "torch.compile(model)", "torch.compile + compiled autograd"
CG = ", CUDA graphs"
variants = {"eager": lambda: train_step, TM: compile_model, CA: compile_step_with_ca}
if device == "cuda":  # the same two, with CUDA graphs
    variants[TM + CG] = lambda: compile_model("reduce-overhead")
    variants[CA + CG] = lambda: compile_step_with_ca("reduce-overhead")
else:
    print("CUDA graphs need a GPU: the mode='reduce-overhead' variants run only there.")

# %%
# Correctness is checked against a float64 copy of the model run eagerly: each variant's
# largest gradient error relative to it, next to eager float32's. The fullgraph override
# is read at every backward, so it is set for the rest of the script, not around one call.

model64 = ThreeStageNet().to(device, torch.float64)
model64.load_state_dict(model.state_dict())
for p in model64.parameters():
    p.register_hook(clip_grad)
run(train_step, model64, x.double(), target.double())
grads64 = torch.cat([p.grad.flatten() for p in model64.parameters()])
clipped = (grads64.abs() == CLIP).double().mean().item()
print(f"the hooks clipped {clipped:.1%} of the gradient elements (float64 run)")
assert 0.01 < clipped < 1
torch._dynamo.config.compiled_autograd_kwargs_override = {"fullgraph": True}

# Inductor logs each graph it declines to record; the log moved between releases
# ("perf_hints" in PyTorch 2.9, "cudagraphs" later), so both are collected.
CUDAGRAPH_LOGS = [
    f"torch._inductor.cudagraph_utils.__{a}" for a in ("perf_hints", "cudagraphs")
]
watch = measure.watch_cxx()  # None where it cannot watch (not Linux)
zeros = torch.zeros(8, device=device)
boot = measure.cold_compile(torch.compile(torch.sin), zeros, device=device)
cxx = f", of which C++ compiler {boot.cxx:.1f} s" if watch else ""
print(f"one-time Inductor start-up, with a tiny compile: {boot.seconds:.1f} s{cxx}")
steps, table, colds, notes = {}, [], {}, {}
for label, make_step in variants.items():
    counters.clear()
    compilation_time_metrics.pop("CUDAGraphNode.record", None)  # count this one's own
    step = make_step()
    steps[label] = lambda s=step, cg=CG in label: run(s, model, x, target, cg)
    with kept_log(*CUDAGRAPH_LOGS) as declined:
        if label == "eager":
            loss = steps[label]()
        else:  # from a reset: it compiles every graph it needs
            colds[label] = measure.cold_compile(steps[label], device=device)
            loss = colds[label].result
        grads = torch.cat([p.grad.flatten() for p in model.parameters()]).double()
        error = ((grads - grads64).abs().max() / grads64.abs().max()).item()
        misses, _, captures, _ = compile_counts()
        warm_calls = settle(steps[label])
    nodes = autograd_nodes(loss)
    graphs = captures or nodes["CompiledFunctionBackward"]
    cold = colds.get(label)
    times = [cold.seconds, cold.compiling, cold.cxx] if cold else [None] * 3
    table.append([label, *times, misses, graphs, error])
    who = "compiled autograd walks" if captures else "the engine runs one by one"
    notes[label] = (
        f"{graphs} compiled backward graph{'s' * (graphs != 1)}, in an autograd graph "
        f"of {sum(nodes.values())} nodes (and the root) that {who}, and {n_params} hooks"
    )
    if CG in label:
        recorded = len(compilation_time_metrics.get("CUDAGraphNode.record", []))
        skipped = counters["inductor"]["cudagraph_skips"]
        notes[label] += f"; CUDA graphs recorded {recorded}, declined {skipped}"
        notes[label] += f"; warm-up calls until three compiled nothing: {warm_calls}"
        notes[label] += "".join(f"\n    declined: {line[:150]}" for line in declined)
        assert recorded > 0, "reduce-overhead recorded no CUDA graph"

# %%
# Timing the variants
# -------------------
#
# Timings come from the site's measurement core (:ref:`measuring_recipe` explains it).
# ``measure.compare`` times all variants together, in interleaved windows, and then
# profiles a few steps of each.

for step in steps.values():  # each reset dropped the variants compiled before it
    settle(step)
res = measure.compare(steps, device)

# %%
# Reading the results
# -------------------
#
# One row per variant; below the table, a line for each variant says what it runs per
# step, and a comparison line pits each compiled variant against the one it builds on.
# Under each, ``reading`` says the same in words and splits both steps in two: time in
# kernels (on a GPU, its busy time; on a CPU, the main thread's time in operators and
# compiled code) and time outside them (the GPU idle, or the CPU in guards, graph entries,
# the autograd engine and Python). The change outside kernels is split into those parts,
# which add up to it; on a GPU one more part holds the idle time during which the CPU ran
# operators and launched kernels.

OUTSIDE = ["guards", "compiled-code entry", "autograd engine", measure.PYTHON]
INSIDE = "GPU kernels" if device == "cuda" else "operators and compiled code"
W = "waiting: " if device == "cuda" else ""  # a GPU's idle time, by what the CPU did


def outside(row):
    """ms outside kernels: a GPU's idle time, or a CPU's time in the OUTSIDE parts."""
    return row.ms - row.busy_ms if W else sum(row.parts.get(k, 0) for k in OUTSIDE)


def reading(name, ref):
    """One sentence from two rows' numbers: the verdict, then kernels and the rest."""
    mid, lo, hi, _ = res.ratio(name, ref)
    verdict = "ties with" if lo <= 1 <= hi else f"takes {mid:.2f}x the step time of"
    r1, r0 = res[name], res[ref]
    h1, h0 = outside(r1), outside(r0)
    moved = {k: r1.parts.get(W + k, 0) - r0.parts.get(W + k, 0) for k in OUTSIDE}
    if W:  # the rest of the GPU's idle: the CPU ran operators, launched kernels
        moved["operators and launches"] = h1 - h0 - sum(moved.values())
    moved = ", ".join(f"{k} {ms:+.3f}" for k, ms in moved.items())
    return (
        f"{name} {verdict} {ref}: {INSIDE} {r0.ms - h0:.3f} -> {r1.ms - h1:.3f} ms, "
        f"outside them {h0:.3f} -> {h1:.3f} ms, {h1 - h0:+.3f} ms: {moved} ms"
    )


eager_error = table[0][-1]
print(f"{device_name}, torch {torch.__version__}; errors relative to float64")
headers = ["variant", "first call, cold (s)", "of which compiling (s)"]
headers += ["of which C++ compiler (s)", "FX graphs compiled", "backward graphs"]
headers += ["grad error", *res.headers()]
rows = [row + res.cells(row[0]) for row in table]
fmts = ["", ".1f", ".1f", ".1f", "", "", ".1e", *res.formats()]
print(tabulate(rows, headers, "github", fmts, missingval="-"))
for name, note in notes.items():
    print(f"{name}: per step, {note}")
pairs = [(TM, "eager"), (CA, TM), (TM + CG, TM), (CA + CG, CA), (CA + CG, TM + CG)]
for name, ref in pairs:
    if name in res:
        print(res.versus(name, ref) + "\n  in words: " + reading(name, ref))
print(res.against("eager", headlines=True))
ratio = colds[CA].seconds / colds[TM].seconds
print(f"cold first call of {CA}: {ratio:.2f}x that of {TM} (one each, from a reset)")
for name, *_, error in table:
    assert error <= 4 * eager_error + 1e-5, f"{name}: gradients differ"
assert table[1][5] == 3  # torch.compile(model): one backward graph per forward graph
assert table[2][5] == 1  # compiled autograd: one capture, fullgraph
assert table[2][4] > 3  # its cold call compiled its own three forward graphs too
print(f"autograd nodes that compiled autograd walks per backward: {len(node_calls)}")

totals = Counter()
for row in res.values():
    totals.update({part: abs(ms) for part, ms in row.parts.items()})
shown = [part for part, _ in totals.most_common(6)]
fig, ax = plt.subplots(figsize=(7, 0.5 * len(res) + 2.5))
left = [0.0] * len(res)
for i, part in enumerate(shown):
    widths = [row.parts.get(part, 0.0) for row in res.values()]
    ax.barh(list(res), widths, left=left, color=f"C{i}", label=part)
    left = [a + w for a, w in zip(left, widths)]
rest = [row.ms - a for row, a in zip(res.values(), left)]
ax.barh(list(res), rest, left=left, color="0.8", label="smaller parts")
ax.legend(ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
ax.invert_yaxis()
ax.set_xlabel("warm step time, ms (median), split into the core's parts")
ax.set_title(f"Where a warm training step goes, {device_name}")
fig.tight_layout()
plt.show()

# %%
# How to read the table:
#
# * **Grad error.** The largest difference from the float64 gradients, relative to the
#   largest gradient. Compiled code may sum in another order than eager code; the page
#   asserts that each compiled row stays within four times eager's error plus 1e-5.
# * **Backward graphs.** ``torch.compile(model)`` runs three compiled backward graphs, and
#   the engine runs the ``swish`` backward, every hook (a Python call and a small kernel
#   each) and every ``AccumulateGrad`` between and after them. With compiled autograd one
#   graph does all of it, so Inductor can fuse the clamp and the accumulation into the
#   gradient computation.
# * **Cold first call.** The compiled variants compile different graphs: three forward
#   and three backward graphs, or three forward graphs and one large backward graph,
#   plus, for compiled autograd, the capture itself. Each cold call starts from a reset,
#   so it compiles all of its graphs (the FX cache misses count them). "Of which
#   compiling" is the time Dynamo's timer gives to compiling frames (tracing, then
#   AOTAutograd and Inductor on the result). Work compiled outside a frame's compile, such
#   as a backward graph that AOTAutograd compiles when the engine first runs it, falls in
#   the rest of the first call, with the step itself. "Of which C++ compiler" is the
#   time a C++ compiler ran during the first call (its runs counted once, compile
#   workers included): ``measure.watch_cxx()`` has Inductor call the compiler through a
#   wrapper that logs each run. Inductor's CPU kernels are C++, so on a CPU the compiler
#   builds every kernel; its GPU kernels are Triton, built by Triton's own compiler,
#   which the wrapper does not see. Both "of which" columns are parts of the first call
#   and they overlap: C++ runs for a graph compiled within a frame's compile fall in
#   both, those for a backward graph compiled when the engine first runs it fall only in
#   the C++ column, which can so exceed the compiling one.
# * **Kernels, and the time outside them** (the "in words" lines). Fusing operators
#   changes the time in kernels; entering compiled graphs changes the time outside them.
#   On a GPU, kernel time is the busy time: where it is most of the step the kernels set
#   the pace (the "bound" column), and where it is not the GPU waits for the CPU. On a
#   CPU one thread does both, so the split is of that thread's time. Outside kernels,
#   ``torch.compile(model)`` enters each of its three forward graphs through guard checks
#   and AOTAutograd's wrapper ("compiled-code entry"), and in the backward the engine calls
#   a Python function for each ``CompiledFunctionBackward`` node, on top of the ``swish``
#   nodes, the hooks and the ``AccumulateGrad`` nodes that it runs as in eager. Compiled
#   autograd replaces those with one compiled graph, and adds its walk over the autograd
#   nodes to build the cache key, and the guards of that graph. The walk runs in C++ and
#   records no profiler range of its own, so its time falls in the part the core calls
#   "Python and other host work". Where kernels are a small part of a step, what the
#   entries add can outweigh what fusion saves; the lines say which it was here.
# * **The lines under the table.** Each comparison line gives both medians, the gap and
#   the ratio of paired windows with its interval. An interval that holds 1.00x is a tie;
#   otherwise the line names the parts of the step that moved most (on a GPU, kernel
#   families and what the launching thread did while the GPU waited; on a CPU, the main
#   thread's time by family) and the share of the gap they cover. The figure splits each
#   warm step into the same parts.
#
# Compiled autograd is built for a backward that the engine would otherwise run as many
# small, separate pieces: the more graph breaks, hooks and eager nodes, the more one graph
# has to offer, and one graph is also what CUDA graphs can replay with a single launch.
# Whether that shows up as a faster step depends on how the step splits between kernels
# and the work around them, which differs from machine to machine: measure it where you
# train. A CPU has no CUDA graphs; Inductor's setting against Python in a compiled graph's
# own launcher there is ``options={"cpp_wrapper": True}``, which leaves the guards and
# AOTAutograd's entry as they are and adds a C++ compile of each graph's launcher to the
# cold start, so it needs the same measurement before you adopt it.
#
# Limitations
# -----------
#
# * **The backward runs on the calling thread.** Compiled autograd's ``_enable`` turns off
#   the autograd engine's worker threads (``torch.autograd.set_multithreading_enabled(False)``)
#   for each call of a step compiled with the flag on
#   (`compiled_autograd.py <https://github.com/pytorch/pytorch/blob/v2.9.0/torch/_dynamo/compiled_autograd.py>`__).
# * **DistributedDataParallel needs the Python reducer.** The default C++ reducer registers
#   hooks that compiled autograd cannot capture; set
#   ``torch._dynamo.config.optimize_ddp = "python_reducer"`` *before* wrapping the model in
#   ``DistributedDataParallel`` (its constructor reads it), and the gradient communication is
#   traced into the compiled backward. ``torch/_dynamo/config.py`` calls it experimental.
# * **A hook Dynamo cannot trace breaks the backward graph**, exactly as it would break a
#   forward graph: the hook runs eagerly between two backward graphs. With
#   ``compiled_autograd_kwargs_override={"fullgraph": True}``, as above, that is an error
#   instead, raised at the first backward.
# * **The "force_eager" stance turns it off.** Under
#   ``torch.compiler.set_stance("force_eager")`` the compiled step runs eagerly and compiled
#   autograd captures nothing.
# * **Private API.** The flag lives in ``torch._dynamo.config`` and its behavior may change
#   between releases; the counters and logs used here are diagnostics, not a stable API.
#
# Conclusion
# ----------
#
# AOTAutograd compiles the backward of each forward graph on its own, so graph breaks split
# the backward into pieces and hooks and gradient accumulation run in the eager engine
# between them. Compiled autograd, turned on with ``torch._dynamo.config.compiled_autograd``
# when the training step is wrapped, captures the whole backward as one graph, and its
# ``compiled_autograd_verbose`` log says what it captured and why it captured again. One
# backward graph is also what ``mode="reduce-overhead"`` can record as one CUDA graph.
# Every backward call still walks the autograd graph to find the captured graph. Whether
# the trade pays is a measurement: the paired ratio of two variants' step times, the
# step's split between kernels and the time outside them, and the parts that moved.
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
# * `torch.profiler
#   <https://docs.pytorch.org/docs/stable/profiler.html>`_
# * `torch.compiler API reference
#   <https://docs.pytorch.org/docs/stable/torch.compiler_api.html>`_

# sphinx_gallery_thumbnail_number = 1
