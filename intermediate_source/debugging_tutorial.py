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
       * Why a compiled step can be no faster: how busy ``torch.profiler`` finds the GPU,
         the top operators of a profile, and a trace to open in Perfetto

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later; ``pip install tlparse`` for the report (optional)
       * The basics of ``torch.compile`` (:ref:`torch_compile_tutorial`)
       * A CUDA GPU of compute capability 7.5 or newer for the timings (current CUDA wheels
         need it); runs on CPU with smaller sizes
       * On CPU, Inductor needs a C++ compiler and the Python headers
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
# time the training step before and after the fixes, profile it, and look at the same run
# in a ``tlparse`` report that the page generates.
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
import statistics
import subprocess
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

# A note from torch.profiler about reusing a profiler: each one here runs once.
warnings.filterwarnings("ignore", message=".*Profiler clears events.*")

# torch.profiler's tracing library (Kineto) logs each start and stop, and on a machine
# without a GPU an error line; level 6 keeps it quiet (set before importing torch).
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.benchmark as benchmark
from tabulate import tabulate
from torch._dynamo.utils import counters
from torch.profiler import ProfilerActivity, profile, record_function

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    batch, features, width, seq_lens = 64, 64, 512, [96, 112, 128, 104, 120]
    device_name = torch.cuda.get_device_name()
else:
    batch, features, width, seq_lens = 16, 16, 64, [24, 28, 32, 26, 30]
    device_name = f"CPU, {torch.get_num_threads()} threads"
    print("No CUDA GPU found: running on the CPU with a smaller model.")
print(f"torch {torch.__version__} on {device} ({device_name})")

# %%
# Three small helpers. ``step_and_busy`` times ``steps`` back-to-back calls of a step, five
# times over: the median time per step, and the spread of the five (interquartile range).
# On a GPU the step time comes from CUDA events, without the profiler (it slows the CPU);
# then ``torch.profiler`` records the same loop, and the time during which at least one
# kernel ran (overlaps counted once) is the **GPU busy time** per step. Both loops keep the
# caches warm from step to step, as training does (``triton.testing.do_bench`` flushes the
# L2 cache before every call). On a CPU, ``torch.utils.benchmark`` times the step on all
# threads. ``captured_logs`` turns log artifacts on in-process (the switches of
# ``TORCH_LOGS``) and collects what they print; ``show`` prints the lines we ask for,
# without the log prefix and the directories of file names.


def step_and_busy(step, steps=10):
    """(median step time, GPU busy time per step or None on a CPU, spread), in ms."""
    if device == "cpu":
        timer = benchmark.Timer(
            "step()", globals={"step": step}, num_threads=torch.get_num_threads()
        )
        m = timer.blocked_autorange(min_run_time=0.5)
        return m.median * 1e3, None, m.iqr * 1e3
    windows = []
    for _ in range(5):  # CUDA events around back-to-back steps, no profiler
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        for _ in range(steps):
            step()
        end.record()
        end.synchronize()
        windows.append(start.elapsed_time(end) / steps)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:  # the same loop, profiled
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    kernels = [e.time_range for e in prof.events() if e.device_type == cuda]
    busy, reach = 0.0, float("-inf")
    for s, e in sorted((k.start, k.end) for k in kernels):  # their union, in us
        if e > reach:
            busy += e - max(s, reach)
            reach = e
    q1, _, q3 = statistics.quantiles(windows, n=4)
    return statistics.median(windows), busy / steps / 1e3, q3 - q1


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
        self.inp = nn.Linear(features, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.out = nn.Linear(width, 10)
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
rows = []
for b in found.break_reasons:
    frame = b.user_stack[-1]
    reason = b.reason.splitlines()[0].split(". ")[0]  # its first sentence
    rows.append([f"{Path(frame.filename).name}:{frame.lineno}", reason])
print(tabulate(rows, headers=["where", "reason"], tablefmt="github"))
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

torch._dynamo.reset()
counters.clear()
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
#   releases) on a *pure tensor function* that Dynamo cannot trace puts it into the graph
#   anyway: AOTAutograd traces it with real tensor operations, so there is no break at all.
#
# Here is the first tool on the logging call, to see what is left:


@torch.compiler.disable
def log_hidden(h):
    logger.debug("hidden rms %s", h.pow(2).mean().sqrt())


def forward_with_disabled_log(x):
    h = F.gelu(model.inp(x)).clamp(-4.0, 4.0)
    log_hidden(h)
    return model.out((h + model.mlp(h)).mean(dim=1))


torch._dynamo.reset()
counters.clear()
torch.compile(forward_with_disabled_log, backend="eager")(x)
breaks = sum(counters["graph_break"].values())
print(f"graph breaks with the call disabled: {breaks} (was {breaks_before})")
assert breaks == 1

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

torch._dynamo.reset()
counters.clear()
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
#   recompile, but ``F.dropout`` checks the range of ``p`` in Python, which turns the value
#   back into a constant; the guard is on the exact value. Every step has a new value, so
#   every step recompiles until the limit is hit. The recipe
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

torch._dynamo.reset()
counters.clear()
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
headers = ["model", "graph breaks", "graphs in 12 steps"]
print(tabulate(rows, headers=headers, tablefmt="github"))
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
# ``TORCH_TRACE`` is read when ``torch`` is imported, long before this point, so we attach
# a file handler to the structured trace logger ourselves (``trace_log``, a private name:
# in your own code, use the environment variable), with the formatter the trace format
# needs. Everything the next section compiles goes into the trace.

import torch._logging.structured
from torch._logging._internal import TorchLogsFormatter, trace_log

trace_dir = Path(tempfile.mkdtemp(prefix="torch_trace_"))
trace_file = trace_dir / "dedicated_log_torch_trace_page.log"
trace_handler = logging.FileHandler(trace_file)
trace_handler.setFormatter(TorchLogsFormatter(trace=True))
trace_log.addHandler(trace_handler)
# The trace names each source file once, the first time it is used; in a fresh process
# that is after the handler exists. Forget the names used so far, so they are named again.
torch._logging.structured.INTERN_TABLE.clear()
torch._logging.structured.DUMPED_FILES.clear()

# %%
# Is it faster now? Where does the step spend its time?
# -----------------------------------------------------
#
# We time one training step (forward, loss, backward) on a batch of the longest sequence
# length three ways: eager, compiled as written, and compiled after the fixes, both with the
# default Inductor backend. Before timing, each compiled model runs the twelve-step loop, so
# it is measured in the state a training run leaves it in. For the model as written we
# lower ``recompile_limit`` to 2: the default of 8 reaches the same steady state (the
# function with the dropout falls back to eager code for new rates) with more compiling.
# In that state we also record three of its steps with ``torch.profiler``, read below.

x_long, y_long = make_batch(seq_lens.index(max(seq_lens)))
timed, rows = {}, []


def measure(label, net, step_net):
    def step():
        net.zero_grad(set_to_none=True)
        F.cross_entropy(step_net(x_long), y_long).backward()

    timed[label] = step_and_busy(step)
    graphs = counters["stats"]["unique_graphs"]
    rows.append([label, sum(counters["graph_break"].values()), graphs])
    rows[-1].append(f"{timed[label][0]:8.3f}")
    return step


activities = [ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * (device == "cuda")
torch._dynamo.reset()
counters.clear()
measure("eager", model, model)
with captured_logs() as log, torch._dynamo.config.patch(recompile_limit=2):
    compiled_model = torch.compile(model)
    train(model, compiled_model)
    step = measure("compiled, as written", model, compiled_model)
    with profile(activities=activities) as prof:
        for _ in range(3):
            with record_function("training step"):
                step()
        if device == "cuda":
            torch.cuda.synchronize()
show(log, r"hit config.recompile_limit|last reason")
torch._dynamo.reset()
counters.clear()
compiled_fixed = torch.compile(fixed, fullgraph=True)
train(fixed, compiled_fixed, dynamic_seq=True)
torch._dynamo.mark_dynamic(x_long, 1)
measure("compiled, fixed", fixed, compiled_fixed)
assert rows[2][1] == 0

# %%
# How to read the table. "graphs compiled" counts the forward graphs Dynamo produced during
# the twelve warm-up steps and the timing (Inductor compiles a backward for each). "graph
# breaks" counts a break each time Dynamo traces through it, so a frame compiled again
# counts its breaks again (``explain`` above counted the places that break).
#
# **The first check for "not faster"**, on a GPU, is the busy share (busy time over step
# time) and the ``bound`` column it gives. At least 85 %: the GPU is the bottleneck, and
# only less GPU work (fusion, fewer bytes) helps. Below: the GPU idles for the rest of the
# step, waiting for the CPU (Python, guard checks, kernel launches, an ``.item()`` that
# waits for the GPU), and what helps is less CPU work per step: fewer graph breaks, larger
# batches, CUDA graphs (``mode="reduce-overhead"``). A share slightly above 100 % is noise
# between the two loops. On a CPU one device does everything: the step time is all of it.
#
# Under the table, one line for each row slower than eager or than the row before it,
# printed from these numbers; a difference within the spread of the timings is noise. On a
# GPU it splits the extra time into busy time (kernels) and idle time (the CPU falling
# behind). On a CPU it is all CPU time, and the line gives the graph breaks and graphs:
# each break leaves compiled code for Python and comes back, with a guard check per frame
# and eager code between graphs (the operator table below shows what that costs). With no
# break, what is left is the fixed cost of each compiled call, and the generated kernels,
# whose threads slow down most when other programs share the cores.

print(f"{device_name}, batch {batch}, sequence length {max(seq_lens)}, width {width}")
headers = ["step", "graph breaks", "graphs compiled", "step (ms)"]
if device == "cuda":
    headers += ["GPU busy (ms)", "busy %", "bound"]
    for row, (step_ms, busy, _) in zip(rows, timed.values()):
        share = busy / step_ms
        row += [f"{busy:8.3f}", f"{share:.0%}", "GPU" if share >= 0.85 else "CPU"]
else:
    print("On a CPU there is no separate device to be busy or idle: no GPU columns.")
print(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))
labels = list(timed)
for i, label in enumerate(labels[1:], start=1):
    step_ms, busy, spread = timed[label]
    for j in sorted({0, i - 1}):  # against eager, and the row before
        ref_ms, ref_busy, ref_spread = timed[labels[j]]
        extra, noise = step_ms - ref_ms, max(spread, ref_spread)
        if extra <= 0:
            continue
        why = f"{label}: {step_ms / ref_ms:.2f}x the step of {labels[j]} ({ref_ms:.3f} ms)"
        if extra <= noise:
            why += f", within the spread of the timings ({noise:.3f} ms)"
        elif busy is None:
            why += f": {extra:.3f} ms more CPU time; graph breaks/graphs compiled "
            why += f"{rows[i][1]}/{rows[i][2]} against {rows[j][1]}/{rows[j][2]}"
        else:
            idle, ref_idle = max(step_ms - busy, 0), max(ref_ms - ref_busy, 0)
            more = "idle" if idle - ref_idle >= busy - ref_busy else "busy"
            why += f"; GPU busy {ref_busy:.3f} -> {busy:.3f} ms, idle {ref_idle:.3f}"
            why += f" -> {idle:.3f} ms: the extra time is mostly GPU {more} time; "
            why += f"{busy / step_ms:.0%} busy, bound by the {rows[i][6]}"
        print(why)

# The same step times as a chart; on a GPU, split into GPU busy and GPU idle time.
fig, ax = plt.subplots(figsize=(7, 2.6))
if device == "cuda":
    busy = [t[1] for t in timed.values()]
    ax.barh(labels, busy, color="C0", label="GPU busy")
    idle = [max(t[0] - b, 0) for t, b in zip(timed.values(), busy)]
    ax.barh(labels, idle, left=busy, color="0.75", label="GPU idle")
    ax.legend()
else:
    ax.barh(labels, [t[0] for t in timed.values()], color="C0")
ax.invert_yaxis()
ax.set_xlabel("step time, ms (median)")
ax.set_title(f"One training step, {device_name}")
fig.tight_layout()
plt.show()

# %%
# **The top operators.** The busy share says which side to work on; a profile says on
# what. ``prof`` holds three steps of the model as written, recorded above;
# ``prof.key_averages().table(sort_by=..., row_limit=6)`` prints its top operators with
# all of the profiler's columns, and we keep three, per step, and wrap long names rather
# than cut them. We keep the operators (the kernels appear in the trace below) and leave
# out our own ``training step`` range. On a GPU the rows are sorted by the GPU time of the
# kernels each operator launched (``"self_cuda_time_total"``); on a CPU, by self CPU time.

key = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
ops = [e for e in prof.key_averages() if e.device_type.name == "CPU"]
ops = [e for e in ops if e.key != "training step"]  # operators, not our own range
top = sorted(ops, key=lambda e: getattr(e, key), reverse=True)[:6]
headers = ["operator", "calls", "self CPU (ms)", "self GPU (ms)"]
table = []
for e in top:
    name = textwrap.fill(e.key, 58, subsequent_indent="  ", break_on_hyphens=False)
    times = [e.self_cpu_time_total] + [e.self_device_time_total] * (device == "cuda")
    table.append([name, f"{e.count / 3:g}", *(f"{t / 3e3:.3f}" for t in times)])
print(f"compiled model as written, per step (3 steps profiled), sorted by {key}:")
print(tabulate(table, headers[: len(table[0])], "github", disable_numparse=True))

# %%
# How to read the names. ``Torch-Compiled Region:
# 1/0`` spans a compiled frame (with its compile id), ``TorchDynamo Cache Lookup`` is the
# guard check, ``CompiledFunction`` and ``CompiledFunctionBackward`` are AOTAutograd's
# wrappers, and ``## Call CompiledFxGraph <hash> ##`` runs the code Inductor generated for
# a graph. ``aten::`` rows are PyTorch operators, eager or called from a graph (matrix
# multiplications).
#
# **The trace.** ``prof.export_chrome_trace`` writes the same steps as a timeline into the
# report folder below: `profiler trace of this page's run
# <debugging_tutorial_report/profile_trace.json.gz>`__. Open it at `ui.perfetto.dev
# <https://ui.perfetto.dev>`__ ("Open trace file") or at ``chrome://tracing`` ("Load").
# Each ``training step`` holds the compiled regions, with Python and eager operators
# between them. On a GPU the kernels have a row of their own: its gaps are the idle time,
# and ``aten::_local_scalar_dense`` (the ``.item()``) is the CPU waiting for the GPU.
#
# Reading the tlparse report
# --------------------------
#
# We detach the trace handler and run ``tlparse`` on the trace. The report goes into a
# folder next to this script, ``debugging_tutorial_report``; on the published site it is
# here: `the tlparse report of this page's run <debugging_tutorial_report/index.html>`__
# (also as a `zip archive <debugging_tutorial_report.zip>`__). When you run the notebook
# yourself, your own report and trace land in the same folder next to it.

trace_log.removeHandler(trace_handler)
trace_handler.close()
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
# each compile id links to its artifacts. ``compile_directory.json`` lists them; here are
# the artifacts of the first few compile ids, by kind, without the numbers that order them,
# the hash of ``inductor_output_code``, and a resume function's name before its bytecode.

if (report / "compile_directory.json").is_file():
    directory = json.loads((report / "compile_directory.json").read_text())
    rows = []
    for compile_id, entry in [e for e in directory.items() if e[1]["artifacts"]][:8]:
        kinds = set()
        for artifact in entry["artifacts"]:
            kind = re.sub(r"_\d+$", "", Path(artifact["name"]).stem)  # the number
            kind = re.sub(r"^(inductor_output_code)_\w+$", r"\1", kind)  # the hash
            kind = re.sub(r"^torch_dynamo_resume_in_\w+_(\w+_BYTECODE)$", r"\1", kind)
            kinds.add(kind.lower())
        kinds = sorted(kinds)
        more = " ..." if len(kinds) > 4 else ""
        rows.append([compile_id, len(entry["artifacts"]), ", ".join(kinds[:4]) + more])
    print(f"{len(directory)} compile ids in the report")
    headers = ["compile id", "artifacts", "kinds (first 4)"]
    print(tabulate(rows, headers=headers, tablefmt="github"))

# %%
# The artifacts to open first:
#
# * ``dynamo_graph_break_reason``: the break, with the user stack that led to it;
# * ``recompile_reasons``: the guard failure behind a ``[x/1]`` or later compile id;
# * ``dynamo_output_graph``: the FX graph Dynamo captured (one per graph on this page);
# * ``dynamo_cpp_guards_str``: the guards that graph is stored with;
# * ``inductor_output_code``: the generated kernels and the Python that calls them;
# * ``compilation_metrics``: the time each phase of that compilation took.
#
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
rows = [[backend, f"{err:.2e}"] for backend, err in errors.items()]
print(tabulate(rows, ["backend", "max abs error vs float64"], "github"))
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
# graph to the fewest operations that still fail, a small reproducer for a bug report. On
# this model it has nothing to find, and we check exactly that: no error, no files.

debug_root = Path(tempfile.mkdtemp(prefix="repro_"))
torch._dynamo.reset()
repro = dict(repro_after="aot", repro_level=4, debug_dir_root=str(debug_root))
with torch.no_grad(), torch._dynamo.config.patch(**repro):
    torch.compile(fixed)(x)
written = [p.name for p in debug_root.rglob("*.py")]
print(f"accuracy check after AOTAutograd: passed; reproducers: {written or 'none'}")
assert not written
shutil.rmtree(debug_root, ignore_errors=True)

# %%
# Conclusion
# ----------
#
# Graph breaks are found with ``torch._dynamo.explain`` or the ``graph_breaks`` log, whose
# messages link to an explanation of each break type, and are kept out with
# ``fullgraph=True``; recompiles are explained by the ``recompiles`` log, one failed guard
# per line, and the ``guards`` log shows what a graph is checked against. Most fixes
# replace a Python value that changes (a number read with ``.item()``, a float argument, a
# shape) with tensor data or a declared dynamic dimension, and we asserted each fix by
# counting breaks and graphs. How busy ``torch.profiler`` finds the GPU says whether
# better kernels can make a step faster at all, and its operator table and trace say
# where the time goes. A ``TORCH_TRACE`` and ``tlparse`` put the whole compilation in one
# report, and a backend ablation against float64 tells round-off from a bug.
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
