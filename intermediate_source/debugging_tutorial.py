"""
.. _debugging_tutorial:

Debugging torch.compile end to end: graph breaks, recompiles, wrong results
===========================================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How to find every graph break of a model with ``torch._dynamo.explain``, the
         ``graph_breaks`` log and ``fullgraph=True``, and how to read the explanation each
         message links to
       * How to find out why a function recompiles with the ``recompiles`` and ``guards``
         logs, and what "recompile limit reached" means
       * How to record a ``TORCH_TRACE`` of a run and turn it into a ``tlparse`` report
       * How to locate a numerical difference by switching backends, checked against float64
       * Why a compiled step can be no faster: how busy the GPU is, what the code
         Inductor generated ran against the work of entering it, which parts of the step
         moved between two versions, and a profiler trace to open in Perfetto

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later; built on Linux, and nothing on the page is Linux-only;
         ``pip install tlparse`` for the report (optional)
       * The basics of ``torch.compile`` (:ref:`torch_compile_tutorial`)
       * A GPU is optional. With a CUDA GPU (compute capability 7.5 or newer, under 1 GB
         of its memory) the timings show how busy it is, and Inductor needs Triton
         (PyTorch's Linux CUDA wheels bring it). Without one the page runs on the CPU with
         a smaller model, and Inductor needs a C++ compiler and the Python headers
       * On a 2-core CPU it runs in about a minute, with about 1 GB of memory
"""

# %%
# Overview
# --------
#
# Four questions come back again and again from people who have just added
# ``torch.compile`` to a model: *where is the graph break, why did it recompile, why is the
# compiled result different, and why is it not faster?* This page answers each of them on
# one small model into which we plant the problems real code has:
#
# 1. a Python ``if`` on a value read with ``.item()``,
# 2. a logging call inside ``forward``,
# 3. batches whose sequence length changes from one step to the next,
# 4. a Python float (a dropout rate) that the training loop changes every step.
#
# Each section goes *symptom, how to see it, fix, check*: the check counts graph breaks and
# compiled graphs before and after, so that "fixed" is asserted, not assumed. At the end we
# time the training step before and after the fixes, eager and compiled, profile it, and
# look at the compiled run of the model as written in a ``tlparse`` report that the page
# generates.
#
# Setup
# -----

import contextlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# torch.profiler's tracing library (Kineto) logs each start and stop, and on a machine
# without a GPU an error line; level 6 keeps it quiet (set before importing torch).
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
from tabulate import tabulate
from torch._dynamo.utils import counters
from torch.profiler import profile, record_function

import measure

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    batch, features, width, seq_lens = 64, 64, 512, [96, 112, 128, 104, 120]
    device_name = torch.cuda.get_device_name()
else:
    batch, features, width, seq_lens = 16, 16, 64, [24, 28, 32, 26, 30]
    device_name = f"CPU, {torch.get_num_threads()} threads"
    print("No CUDA GPU found: running on the CPU with a smaller model.")
measure.require(cxx=device == "cpu", triton=device == "cuda")  # what Inductor needs
print(f"torch {torch.__version__} on {device} ({device_name})")

# %%
# Helpers. ``captured_logs`` turns log artifacts on in-process (the switches of
# ``TORCH_LOGS``) and collects what they print; ``fresh`` starts Dynamo over before each
# experiment; ``show`` prints the lines we ask for, without the log prefix and the
# directories of file names.


@contextlib.contextmanager
def captured_logs(**artifacts):
    """torch._logging.set_logs(**artifacts) for the block; yields the captured text."""
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured):  # the log handlers write to stderr
        torch._logging.set_logs(**artifacts)
        try:
            yield captured
        finally:
            torch._logging.set_logs()


def fresh():
    """Start Dynamo over: no compiled graphs, every counter at zero."""
    torch._dynamo.reset()
    counters.clear()


def show(log, pattern, limit=6):
    """Print the first lines matching pattern, once each (numbers aside)."""
    prefix = re.compile(r"^[VIWEDC]\d{4} \S+ \d+ \S+\] (\[\S+\] )?(\[__\w+\] )?")
    seen = set()
    for line in log.getvalue().splitlines():
        line = prefix.sub("", line).split("  # ")[0]  # no source-line comment
        line = re.sub(r"(?<![\w:/.])/(?:[^\s/\"']+/)+", "", line)  # file names only
        key = re.sub(r"\d+\.\d+|\d+/\d+|expected \d+, actual \d+", "#", line)
        if re.search(pattern, line) and key not in seen and len(seen) < limit:
            seen.add(key)
            print(line[:150])


# %%
# The model and its training step
# --------------------------------
#
# A small sequence classifier: project the features, one residual MLP block with dropout,
# average over the sequence, classify. The four problems are marked in ``forward`` and in
# the data. ``set_dropout`` is what a dropout schedule in the training loop would call.

logger = logging.getLogger("classifier")


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.out = nn.Linear(features, width), nn.Linear(width, 10)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.drop_p = 0.1

    def set_dropout(self, p):
        self.drop_p = p  # (4) a new Python float every step

    def forward(self, x):
        h = F.gelu(self.inp(x))
        if h.abs().amax().item() > 4.0:  # (1) a Python decision on tensor data
            h = h.clamp(-4.0, 4.0)
        logger.debug("hidden rms %s", h.pow(2).mean().sqrt())  # (2) a logging call
        h = h + self.mlp(F.dropout(h, self.drop_p, self.training))
        return self.out(h.mean(dim=1))


def make_batch(step):
    seq = seq_lens[step % len(seq_lens)]  # (3) the sequence length changes every step
    x = 2 * torch.randn(batch, seq, features, device=device)
    return x, torch.randint(0, 10, (batch,), device=device)


def train(model, compiled, steps=12, dynamic_seq=False):
    """A training loop as a user writes it: anneal the dropout, take a batch, step."""
    for step in range(steps):
        model.set_dropout(0.1 * (1 - step / steps))
        x, y = make_batch(step)
        if dynamic_seq:
            torch._dynamo.mark_dynamic(x, 1)  # fix (3), explained below
        model.zero_grad(set_to_none=True)
        F.cross_entropy(compiled(x), y).backward()


torch.manual_seed(0)
model = Classifier().to(device)
x, y = make_batch(0)
print(f"batch {batch}, sequence lengths {seq_lens}, features {features}, width {width}")

# %%
# Where are the graph breaks?
# ---------------------------
#
# **Symptom.** The model runs, but a profile shows several compiled regions with eager
# code between them, or it is slower than expected. Dynamo stops a graph where it meets
# something it cannot put into one (a *graph break*), runs that piece in ordinary Python,
# and starts a new graph after it.
#
# **How to see it: ``torch._dynamo.explain``.** It runs the function once under Dynamo with
# a backend that only records, and reports the graphs and every break with its reason and
# the user line where it happened (here, the first sentence of each reason). No code is
# generated, so it is cheap.

with captured_logs() as log:  # the default logging: warnings only
    found = torch._dynamo.explain(model)(x)
print(f"graphs: {found.graph_count}, graph breaks: {found.graph_break_count}")
for b in found.break_reasons:  # where, and the first sentence of the reason
    where = f"{Path(b.user_stack[-1].filename).name}:{b.user_stack[-1].lineno}"
    print(f"  {where}: {b.reason.splitlines()[0].split('. ')[0]}")
assert found.graph_break_count >= 2

# %%
# Two breaks, three graphs. ``.item()`` returns a Python number, and the ``if`` on it can
# only be decided by running the graph so far, so Dynamo ends the graph there. The logging
# call breaks because Dynamo does not trace ``logging.Logger`` methods.
#
# **The same from the logs.** ``TORCH_LOGS="graph_breaks"`` (here:
# ``torch._logging.set_logs(graph_breaks=True)``) prints each break as it happens, with a
# structured explanation: a *type* (first line), an explanation, hints, and a link to a page
# about that break type on the graph-break site (its cause and the usual fixes). We compile
# with the ``"eager"`` backend throughout this search: it runs Dynamo's graphs without
# generating code, which is all we need to find breaks and recompiles.

fresh()
with captured_logs(graph_breaks=True) as log:
    torch.compile(model, backend="eager")(x)
show(log, r"Graph break in user code|^Unsupported|^logging|For more details")
breaks_before = sum(counters["graph_break"].values())
print(f"graph breaks counted: {breaks_before}")

# %%
# The log counts one break more than ``explain``: after the break at the logging call,
# ``Logger.debug`` runs as ordinary Python, Dynamo tries to compile it as a frame of its
# own, and breaks again inside ``logging/__init__.py``. Each break line is followed by its
# type and a link to the page about that type.
#
# **Make breaks an error.** ``fullgraph=True`` turns a graph break into an exception: use
# it in a test, or once your model is clean, so that a new break cannot slip in unnoticed.
# ``torch._dynamo.error_on_graph_break`` (a context manager and decorator in recent
# releases) does the same for a region of code. The error is the lesson here, so we catch it
# and print its first lines. Note *which* error comes out: with ``fullgraph=True``, Dynamo
# does not stop at ``.item()``; it records the number as a symbol (``zuf0``) and goes on,
# and fails at the ``if``, because a graph cannot branch on a value it does not know yet.

torch._dynamo.reset()
try:
    torch.compile(model, backend="eager", fullgraph=True)(x)
    raise AssertionError("fullgraph=True should have raised")
except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError) as error:
    print("\n".join(str(error).splitlines()[:3]))

# %%
# **Fix.** For (1): ``clamp`` leaves values inside the range unchanged, so clamping every
# time computes the same function, with no decision to make in Python. For (2): log from
# the training loop, outside the compiled model. Where a call cannot be removed (a
# library you do not own), two tools contain the damage:
#
# * ``torch.compiler.disable`` on a function makes Dynamo call it as it is: still one
#   break, but Dynamo no longer tries to trace (or compile) its inside;
# * ``torch._dynamo.nonstrict_trace`` (``torch.compiler.nonstrict_trace`` in newer
#   releases) on a function that Dynamo cannot trace, taking and returning tensors (or
#   other pytree values) and changing nothing else, puts it into the graph anyway as one
#   opaque call: Dynamo does not trace its body, only runs it on *fake tensors* (shapes
#   and dtypes, no data) to learn its outputs; AOTAutograd then traces inside it, also
#   with fake tensors. There is no break at all.
#
# Here is the first tool on the model as written: we wrap its logger's ``debug`` (as you
# would a library call you cannot edit) and count the breaks again.

logger.debug = torch.compiler.disable(logger.debug)  # an instance attribute, for now
fresh()
torch.compile(model, backend="eager")(x)
del logger.debug  # back to Logger.debug
breaks = sum(counters["graph_break"].values())
print(f"graph breaks with the call disabled: {breaks} (was {breaks_before})")
assert breaks == breaks_before - 1

# %%
# Why does it recompile?
# ----------------------
#
# **Symptom.** The first steps are slow, and some later ones too; or a warning says
# ``torch._dynamo hit config.recompile_limit (8)``. Every compiled graph is stored with
# *guards*: checks on its inputs (shapes, Python values, module attributes) that must hold
# for the graph to be reused. When a call fails every stored graph's guards, Dynamo
# compiles again; after ``recompile_limit`` graphs for one function it gives up and runs
# that function eagerly for new inputs.
#
# **How to see it.** ``TORCH_LOGS="recompiles"`` prints, for each recompile, the guard that
# failed. We run twelve steps of the training loop and keep the lines that name a function
# and a failing guard, and the limit warning.

fresh()
with captured_logs(recompiles=True) as log:
    train(model, torch.compile(model, backend="eager"))
show(log, r"Recompiling function|size mismatch|drop_p ==|hit config.recompile_limit", 8)
graphs_before = counters["stats"]["unique_graphs"]
print(f"graphs compiled in 12 steps: {graphs_before}")

# %%
# Read the lines in pairs: the function that recompiles (with its frame and compile id,
# ``[frame/recompile]``), then the guard that failed.
#
# * **size mismatch at index 1**: the sequence length changed. Dynamo compiled the first
#   graph for the exact shape; on the second length it recompiles once with that dimension
#   *dynamic* (automatic dynamic shapes), so the shape costs one recompile, not one per
#   length.
# * **self.drop_p == 0.1 ...**: Dynamo also makes a changing float symbolic after one
#   recompile, but ``F.dropout`` passes ``p`` to the ATen ``dropout`` operator, which
#   takes a plain float: the symbol is specialized back to its value, and the guard is on
#   the exact value. Every step has a new value, so every step recompiles until the limit
#   is hit. The recipe
#   :ref:`compiling_optimizer_lr_scheduler` shows the same problem with a learning rate.
#
# The resume functions (``torch_dynamo_resume_in_forward_at_...``) are the pieces after each
# graph break: each is a function of its own, with its own guards and its own recompiles.
#
# **Fix.** (3) Call ``torch._dynamo.mark_dynamic(x, 1)`` on each batch: the graph is
# compiled with a dynamic sequence length from the first call. (Padding to a few fixed
# lengths is the alternative when static shapes matter, for CUDA graphs.) (4) Keep the
# rate in a tensor (a buffer) and update it in place: a new value is new *data*, not a new
# constant. ``F.dropout`` wants a Python float, so the fixed model writes dropout out.
# Compiled code draws its random numbers with its own generator, so its dropout masks
# differ from eager ones: compare compiled and eager results in ``eval()`` mode.


class FixedClassifier(Classifier):
    def __init__(self):
        super().__init__()
        del self.drop_p  # becomes a buffer: saved, moved with .to(), updated in place
        self.register_buffer("drop_p", torch.tensor(0.1))

    def set_dropout(self, p):
        self.drop_p.fill_(p)

    def forward(self, x):
        h = F.gelu(self.inp(x)).clamp(-4.0, 4.0)  # fixes (1); (2) moved out
        d = h
        if self.training:  # fixes (4): p is a tensor
            d = h * (torch.rand_like(h) >= self.drop_p) / (1 - self.drop_p)
        h = h + self.mlp(d)
        return self.out(h.mean(dim=1))


fixed = FixedClassifier().to(device)
_ = fixed.load_state_dict(model.state_dict(), strict=False)  # the same weights

# %%
# **Check.** The same twelve steps, now with ``fullgraph=True``, so that any break would be
# an error. We count the graphs compiled during the first step and over all twelve. The
# ``guards`` log shows why nothing recompiles: the guard on the input tensor leaves the
# sequence length open (``None``), and the dropout rate is checked as a tensor (its dtype
# and shape), not by value.

fresh()
compiled_fixed = torch.compile(fixed, backend="eager", fullgraph=True)
with captured_logs(guards=True) as log:
    train(fixed, compiled_fixed, steps=1, dynamic_seq=True)
tensor_guard = r"check_tensor\((\S+), .*?size=(\[[^\]]*\])"
for name, size in re.findall(tensor_guard, log.getvalue()):
    if name == "L['x']" or "drop_p" in name:
        print(f"TENSOR_MATCH on {name}: size={size}")
graphs_first = counters["stats"]["unique_graphs"]
train(fixed, compiled_fixed, dynamic_seq=True)
breaks = sum(counters["graph_break"].values())
graphs = counters["stats"]["unique_graphs"]
rows = [["as written", breaks_before, graphs_before], ["fixed", breaks, graphs]]
print(tabulate(rows, ["model", "graph breaks", "graphs in 12 steps"], "github"))
assert graphs_first == 1 and graphs == graphs_first and breaks == 0

# %%
# Recording a trace for tlparse
# -----------------------------
#
# Logs answer one question at a time. A *trace* records everything the compiler does
# (every frame, graph, guard, recompile, generated kernel and compile time), and
# `tlparse <https://github.com/meta-pytorch/tlparse>`__ turns it into a browsable HTML
# report. For your own script, set the folder in the environment before starting Python,
# then run ``tlparse`` on what it wrote:
#
# .. code-block:: bash
#
#     TORCH_TRACE=my_trace python train.py
#     tlparse my_trace --latest -o tl_out --no-browser
#
# Trace one run per folder. A compile id numbers frames in the order Dynamo first meets
# them, and ``torch._dynamo.reset()`` starts that count again: a second model traced into
# the same folder after a reset gets the same ids, and the report then files both models'
# graphs under one ``[0/0]``. ``TORCH_TRACE`` is read when ``torch`` is imported, long
# before this point, so we make a file handler for the structured trace logger ourselves
# (``trace_log``, a private name: in your own code, use the environment variable), with
# the formatter the trace format needs, and attach it around one run in the next section.

import torch._logging.structured
from torch._logging._internal import TorchLogsFormatter, trace_log

trace_dir = Path(tempfile.mkdtemp(prefix="torch_trace_"))
trace_file = trace_dir / "dedicated_log_torch_trace_page.log"
trace_handler = logging.FileHandler(trace_file)
trace_handler.setFormatter(TorchLogsFormatter(trace=True))
# The trace names each source file once, the first time it is used; in a fresh process
# that is after the handler exists. Forget the names used so far, so they are named again.
torch._logging.structured.INTERN_TABLE.clear()
torch._logging.structured.DUMPED_FILES.clear()

# %%
# Is it faster now? Where does the step spend its time?
# -----------------------------------------------------
#
# We time one training step (forward, loss, backward) on a batch of the longest sequence
# length four ways: each model eager, and compiled with the default Inductor backend. The
# eager row of the fixed model separates the two changes: against the model as written,
# eager, it is the code fix alone; each compiled row against the eager row of its own
# model is compiling alone. Before timing, each compiled model runs the twelve-step loop,
# so it is measured in the state a training run leaves it in. For the model as written we
# lower ``recompile_limit`` to 2: the default of 8 reaches the same steady state (the
# function with the dropout falls back to eager code for new rates) with more compiling.
# The timing runs under the same limit, so nothing compiles while it runs. The trace
# records exactly one run: the model as written, compiled, through its twelve steps
# and one more.
#
# Timings come from the site's measurement core (:ref:`measuring_recipe` explains it).
# ``measure.compare`` times the four steps together, in interleaved windows, without the
# profiler; then it profiles a few steps of each to split the step into parts. Dynamo's
# caches belong to a function's code, so the two compiled models keep their graphs side
# by side. The fixed model gets its own copy of the batch, marked dynamic as in its
# training loop: a mark on the shared batch would change what the other model's guards
# see.

x_long, y_long = make_batch(seq_lens.index(max(seq_lens)))
x_dyn = x_long.clone()
torch._dynamo.mark_dynamic(x_dyn, 1)


def step_of(net, run, x):
    """One training step of net, its forward pass run by run (eager or compiled)."""
    return lambda: (net.zero_grad(), F.cross_entropy(run(x), y_long).backward())


def counted(step):
    """Graph breaks and graphs so far, after one more step in the timed state."""
    step()
    return [sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"]]


fresh()
steps = {"eager, as written": step_of(model, model, x_long)}
trace_log.addHandler(trace_handler)  # the trace holds this run, and only this run
with captured_logs() as log, torch._dynamo.config.patch(recompile_limit=2):
    compiled_model = torch.compile(model)
    train(model, compiled_model)
    steps["compiled, as written"] = step_of(model, compiled_model, x_long)
    counts = {"compiled, as written": counted(steps["compiled, as written"])}
    trace_log.removeHandler(trace_handler)
    counters.clear()
    compiled_fixed = torch.compile(fixed, fullgraph=True)
    train(fixed, compiled_fixed, dynamic_seq=True)
    steps["eager, fixed"] = step_of(fixed, fixed, x_long)
    steps["compiled, fixed"] = step_of(fixed, compiled_fixed, x_dyn)
    counts["compiled, fixed"] = counted(steps["compiled, fixed"])
    results = measure.compare(steps, device)
    with profile() as prof:  # three steps for the trace below; CPU and GPU if any
        for _ in range(3):
            with record_function("training step"):
                steps["compiled, as written"]()
trace_handler.close()
show(log, r"hit config.recompile_limit|last reason")
assert counts["compiled, fixed"][0] == 0

# %%
# How to read the table. "graphs compiled" counts the forward graphs Dynamo produced
# during the twelve training steps and one more step (Inductor compiles a backward for
# each); ``measure.compare`` asserts that none compiled while it timed. "graph breaks"
# counts a break each time Dynamo traces through it, so a frame compiled again counts
# its breaks again (``explain`` above counted the places that break). The spread is the
# interquartile range of the timing windows.
#
# **The first check for "not faster"**, on a GPU, is the busy share: the GPU's kernel
# time per step over the step time measured without the profiler, and the ``bound``
# column it gives. At least 85 %: the GPU is the bottleneck, and only less GPU work
# (fusion, fewer bytes) helps. Below: the GPU idles for the rest of the step, waiting for
# the CPU (Python, guard checks, kernel launches, an ``.item()`` that waits for the GPU),
# and what helps is less CPU work per step; the parts below say which work grew. On a
# CPU one device does everything: the step time is all of it, and the table has no busy
# share. Compiling can then shorten the operators' own work (fused loops, fewer passes
# over memory) and the Python and autograd work between them (one call and one autograd
# node for a whole graph), while every call adds work of its own: Dynamo's guard checks
# and the wrappers that enter the compiled code (AOTAutograd's, in the forward and again
# in the backward pass). On a small step the two can be of the same size; the comparison
# lines and the parts below measure both.
#
# Under the table, four comparisons: each compiled row against the eager row of its
# model, and the fixed model against the model as written, eager and compiled. Each line
# gives the two medians and their difference, then the median ratio of windows timed
# side by side, with its interval. On a noisy host the two readings can disagree
# (medians far apart, paired windows close): the verdict is the interval's. An interval
# that holds 1.00x is a tie; otherwise the line splits the medians' difference into the
# parts that moved most. Where that difference and the paired ratio disagree, read the
# parts as shares of the gap, not as its size.

print(f"{device_name}, batch {batch}, sequence length {max(seq_lens)}, width {width}")
headers = ["step", "graph breaks", "graphs compiled", *results.headers()]
rows = [[n, *counts.get(n, ["-", "-"]), *results.cells(n)] for n in results]
print(tabulate(rows, headers, "github", ["", "", "", *results.formats()]))
for m in ["as written", "fixed"]:  # compiling alone
    print(results.versus(f"compiled, {m}", f"eager, {m}", headline_as=f"compiled, {m}"))
for run_name in ["eager", "compiled"]:  # the code fix alone
    print(results.versus(f"{run_name}, fixed", f"{run_name}, as written"))

# The same step times as a chart; on a GPU, split into GPU busy and GPU waiting time.
fig, ax = plt.subplots(figsize=(7, 2.8), layout="tight")
ax.barh(list(results), [r.ms for r in results.values()], color="0.75", label="waiting")
ax.barh(list(results), [r.busy_ms or 0 for r in results.values()], label="GPU busy")
ax.set(xlabel="step time, ms (median)", title=f"One training step, {device_name}")
ax.invert_yaxis()
if device == "cuda":
    ax.legend()
plt.show()

# %%
# **Where the time goes.** The busy share says which side to work on; the parts say on
# what. Each row's parts add up to its step time. On a GPU, ``GPU: ...`` parts are
# kernel time by family (matrix products, compiled kernels, eager elementwise kernels,
# copies), and ``waiting: ...`` parts are the time the GPU sat idle, charged to what the
# thread that launched the next kernel was doing meanwhile. On a CPU, the parts are the
# main thread's time, by what ran: the code Inductor generated (``compiled code``), the
# wrappers that enter it (``compiled-code entry``: ``Torch-Compiled Region`` and
# AOTAutograd's ``CompiledFunction``), Dynamo's guard checks (``guards``), PyTorch's
# operators run eagerly (``matmul``, ``copies``, the other ``eager operators``), the
# autograd engine, and Python outside every operator.
#
# Under the table, each compiled step is read against the eager step of its model, in
# four groups: the code Inductor generated (on a GPU, its kernels), entering it (guard
# checks and the wrappers around it, on the CPU), the eager operators with their library
# kernels (matrix products), and the host's other work (Python, the autograd engine,
# kernel launches and waits for the GPU). On a GPU, the time it waited joins the group of
# what the CPU was doing meanwhile. On a CPU, compiling pays where what it removes (eager
# operators, and host work between them) takes longer than what it adds (the generated
# code, and entering it on every call); on a GPU, where the kernel time it saves is not
# turned into more waiting.
#
# Each group that grew points to its own next step:
#
# * *entering it*: fewer graphs per step (fewer breaks), or more work per call (a larger
#   batch);
# * *generated code*: on a GPU, its waiting is the host running the Python that Inductor
#   generated, which launches the kernels one at a time; CUDA graphs
#   (``mode="reduce-overhead"``) replay them all in one launch. Its own time (on a CPU,
#   or the GPU's compiled kernels) above that of the eager operators it replaced: read
#   the code, ``inductor_output_code`` in the report below;
# * *host work*: kernel launches (CUDA graphs again), waits for the GPU (an ``.item()``:
#   keep the value on the device), Python and the autograd engine (more work per call).

rows = list(results.values())
parts = {p: [r.parts.get(p, 0.0) for r in rows] for r in rows for p in r.parts}
table = sorted(([p, *ms] for p, ms in parts.items()), key=lambda row: -max(row[1:]))
table.append(["step", *(r.ms for r in rows)])
print("ms per step, by part (each column adds up to its step):")
print(tabulate(table, ["part", *results], "github", ".3f"))
GROUPS = {  # a part joins the first group whose pattern matches the start of its name
    "generated code": r"(GPU: )?compiled (code|kernels)",
    "entering it (guards, wrappers)": r"guards|compiled-code entry",
    "eager operators and library kernels": r"matmul|attention|optimizer|copies|eager operators|GPU: ",
    "host work (Python, autograd, launches, syncs)": r"Python|autograd|kernel|sync",
}  # a part that fits none stops the page: each name says all its group can hold


def grouped(row):
    """row's parts summed by GROUPS, ms per step."""
    out = dict.fromkeys(GROUPS, 0.0)
    for part, ms in row.parts.items():
        name = part.removeprefix("waiting: ")  # a wait, charged to what the CPU did
        out[next(g for g, pattern in GROUPS.items() if re.match(pattern, name))] += ms
    return out


for m in ["as written", "fixed"]:  # c: the compiled step's groups, e: the eager one's
    c, e = grouped(results[f"compiled, {m}"]), grouped(results[f"eager, {m}"])
    text = "; ".join(f"{g} {c[g]:.3f} ({e[g]:.3f})" for g in c if c[g] or e[g])
    print(f"Compiled, {m}, ms per step (eager in brackets): {text}")

# %%
# **The trace.** Above, three steps of the compiled model as written were profiled again,
# for you to look at rather than to time: ``export_chrome_trace`` writes them as a
# timeline into the report folder below: `profiler trace of this page's run
# <debugging_tutorial_report/profile_trace.json.gz>`__. Open it at `ui.perfetto.dev
# <https://ui.perfetto.dev>`__ ("Open trace file") or at ``chrome://tracing`` ("Load").
# Each ``training step`` holds the compiled regions (``Torch-Compiled Region: 1/0``, with
# its compile id), each after its guard check (``TorchDynamo Cache Lookup``), with Python
# and eager operators between them; inside a region, AOTAutograd's ``CompiledFunction``
# calls the code Inductor generated (``## Call CompiledFxGraph <hash> ##``). On a GPU the
# kernels have a row of their own: its gaps are the idle time, and
# ``aten::_local_scalar_dense`` (the ``.item()``) is the CPU waiting for the GPU.
#
# Reading the tlparse report
# --------------------------
#
# We run ``tlparse`` on the trace. The report shows one run: the model as written,
# compiled, through its twelve training steps and one more. It goes into a folder next
# to this script, ``debugging_tutorial_report``; on the published site it is here: `the
# tlparse report of this page's run <debugging_tutorial_report/index.html>`__ (also as a
# `zip archive <debugging_tutorial_report.zip>`__). When you run the notebook yourself,
# your own report and trace land in the same folder next to it.

report = Path("debugging_tutorial_report")
shutil.rmtree(report, ignore_errors=True)
venv_bin = Path(sys.executable).parent  # where pip put it, if PATH does not say
exe = shutil.which("tlparse") or shutil.which("tlparse", path=venv_bin) or "tlparse"
cmd = [exe, str(trace_file), "-o", str(report), "--overwrite", "--no-browser"]
try:
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
except (OSError, subprocess.SubprocessError) as error:
    print(f"No tlparse report ({type(error).__name__}): pip install tlparse for one.")
shutil.rmtree(trace_dir, ignore_errors=True)
report.mkdir(exist_ok=True)  # the profiler's trace goes in it, with or without tlparse
profile_trace = report / "profile_trace.json.gz"
prof.export_chrome_trace(str(profile_trace))
print(f"profiler trace: {profile_trace} ({profile_trace.stat().st_size / 1e3:.0f} kB)")

# %%
# The report's front page (``index.html``) starts with a *stack trie*: the Python stacks
# that led to each compilation, with links to every compile id. A compile id ``[x/y]`` is
# frame ``x``, compiled for the ``y``-th time; ``[x/y_1]`` is a second attempt after Dynamo
# restarted its analysis, which is what a graph break inside a frame does. Below it,
# *Failures and Restarts* lists every graph break with the same explanation as the log, and
# each compile id links to its artifacts (``compile_directory.json`` lists them). The
# artifacts to open first, counted below in this page's report:
#
# * ``dynamo_graph_break_reason``: the break, with the user stack that led to it;
# * ``recompile_reasons``: the guard failure behind a ``[x/1]`` or later compile id;
# * ``dynamo_output_graph``: the FX graph Dynamo captured;
# * ``dynamo_cpp_guards_str``: the guards that graph is stored with;
# * ``inductor_output_code``: the generated kernels and the Python that calls them (a
#   graph that is trained through has two: forward and backward);
# * ``compilation_metrics``: the time each phase of a compilation took.

if (report / "compile_directory.json").is_file():
    directory = json.loads((report / "compile_directory.json").read_text())
    names = [a["name"] for entry in directory.values() for a in entry["artifacts"]]
    ids = sum(key != "[-/-]" for key in directory)  # [-/-]: what no compile id owns
    print(f"{ids} compile ids, from one run: the model as written, compiled")
    kinds = "dynamo_graph_break_reason recompile_reasons dynamo_output_graph"
    kinds += " dynamo_cpp_guards_str inductor_output_code compilation_metrics"
    rows = [[kind, sum(n.startswith(kind) for n in names)] for kind in kinds.split()]
    print(tabulate(rows, ["artifact", "files"], "github"))

# %%
# Wrong results: which layer changes the numbers?
# -----------------------------------------------
#
# **Symptom.** The compiled model's output differs from eager. Some difference is expected:
# compiled code fuses operations and may sum in another order, and float32 rounds
# differently then. The question is whether the difference is *round-off* or a *bug*.
#
# **How to see it: ablate the backend.** ``torch.compile`` is a stack of layers: Dynamo
# captures the graph (backend ``"eager"`` runs just that), AOTAutograd traces it into ATen
# operations and decomposes them (``"aot_eager"``), and Inductor generates code
# (``"inductor"``). Run the same input through each and compare every result with a float64
# run of the same model: the first backend whose error jumps is the layer to look at. An
# error of the same size as eager float32's is round-off.

fixed.eval()
reference = FixedClassifier().to(device).double().eval()
reference.load_state_dict(fixed.state_dict())
with torch.no_grad():
    expected = reference(x.double())
    errors = {"none (eager)": (fixed(x).double() - expected).abs().max().item()}
    for backend in ["eager", "aot_eager", "inductor"]:
        torch._dynamo.reset()
        run = torch.compile(fixed, backend=backend)
        errors[backend] = (run(x).double() - expected).abs().max().item()
print(tabulate(errors.items(), ["backend", "max error vs float64"], "github", ".2e"))
for backend, err in errors.items():
    assert err <= 4 * errors["none (eager)"] + 1e-5, backend

# %%
# Here every layer stays at float32 round-off. Had ``"aot_eager"`` jumped, the cause would
# be in a decomposition or in AOTAutograd; had only ``"inductor"`` jumped, in the generated
# code.
#
# **The accuracy minifier** automates the next step for Inductor. With
# ``torch._dynamo.config.repro_after = "aot"`` and ``repro_level = 4`` (or the
# environment variables ``TORCHDYNAMO_REPRO_AFTER=aot TORCHDYNAMO_REPRO_LEVEL=4``), every
# graph Inductor compiles is run both compiled and eagerly and compared against a float64
# run. A graph that fails raises ``AccuracyError`` and leaves a ``repro.py`` and a
# ``minifier_launcher.py`` under ``torch_compile_debug/``: running the launcher shrinks the
# graph to the fewest operations that still fail, a small reproducer for a bug report.
# In a script of your own:
#
# .. code-block:: python
#
#     torch._dynamo.config.repro_after = "aot"
#     torch._dynamo.config.repro_level = 4
#     torch.compile(model)(x)  # AccuracyError, and a reproducer, if a graph fails
#
# Conclusion
# ----------
#
# Graph breaks are found with ``torch._dynamo.explain`` or the ``graph_breaks`` log,
# whose messages link to an explanation of each break type, and are kept out with
# ``fullgraph=True``; recompiles are explained by the ``recompiles`` log, one failed
# guard per line, and the ``guards`` log shows what a graph is checked against. Most
# fixes replace a Python value that changes (a number read with ``.item()``, a float
# argument, a shape) with tensor data or a declared dynamic dimension, and we asserted
# each fix by counting breaks and graphs. How busy the GPU is over an unprofiled step
# says whether better kernels can make a step faster at all, and on a CPU what compiling
# removed (eager operators, host work between them) against what it added (generated
# code, entering it) says what it bought; timing the fix eager as well as compiled keeps
# its effect apart from compiling's, a paired comparison says whether two rows differ,
# and the parts that grew say what to try next. A ``TORCH_TRACE`` of one run and
# ``tlparse`` put that run's whole compilation in one report, and a backend ablation
# against float64 tells round-off from a bug.
#
# Further reading
# ---------------
#
# * :ref:`torch_compile_tutorial`, :ref:`compile_time`,
#   :ref:`compiling_optimizer_lr_scheduler`, :ref:`compiled_training_tutorial`
# * `torch.compile troubleshooting
#   <https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html>`__
# * `The graph-break site <https://meta-pytorch.github.io/compile-graph-break-site/>`__
# * `tlparse <https://github.com/meta-pytorch/tlparse>`__, `torch.profiler
#   <https://docs.pytorch.org/docs/stable/profiler.html>`__, `Perfetto
#   <https://ui.perfetto.dev>`__
# * :ref:`dynamic_shapes_tutorial`: why a model recompiles for new sizes, and what a
#   variable-length workload should do about it, measured
# * `torch._logging.set_logs
#   <https://docs.pytorch.org/docs/stable/generated/torch._logging.set_logs.html>`__

# sphinx_gallery_thumbnail_number = 1
