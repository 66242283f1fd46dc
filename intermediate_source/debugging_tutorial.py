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
       * Why a compiled step can be no faster, and the first check to make: CPU time to issue
         the step against its device time

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
# time the training step before and after the fixes, and look at the same run in a
# ``tlparse`` report that the page generates.
#
# Setup
# -----

import contextlib
import io
import json
import logging
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.benchmark as benchmark
from tabulate import tabulate
from torch._dynamo.utils import counters

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    import triton.testing

    batch, features, width, seq_lens = 64, 64, 512, [96, 112, 128, 104, 120]
    device_name = torch.cuda.get_device_name()
else:
    batch, features, width, seq_lens = 16, 16, 64, [24, 28, 32, 26, 30]
    device_name = f"CPU, {torch.get_num_threads()} threads"
    print("No CUDA GPU found: running on the CPU with a smaller model.")
print(f"torch {torch.__version__} on {device} ({device_name})")

# %%
# Three small helpers. ``step_times`` returns the median time of one step and, on a GPU, the
# median CPU time to *issue* it: the call is timed without waiting for the GPU, so it
# measures Python, Dynamo's guard checks and kernel launches. On a CPU the two are the same
# thing, so that column shows "-". ``captured_logs`` turns log artifacts on in-process (the same switches
# as the ``TORCH_LOGS`` environment variable) and collects what they print;
# ``show`` prints the lines we ask for, without the log prefix and without the
# directories of file names.


def step_times(fn, n=30):
    """(median step time, median CPU time to issue one call) in ms; issue is None on CPU."""
    if device == "cuda":
        step_ms = triton.testing.do_bench(fn, return_mode="median")
        issue = []
        for _ in range(n):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()  # no synchronize: only the time the CPU needs to issue the work
            issue.append(time.perf_counter() - start)
            torch.cuda.synchronize()
        return step_ms, statistics.median(issue) * 1e3
    timer = benchmark.Timer(
        "fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()
    )
    return timer.blocked_autorange(min_run_time=1.0).median * 1e3, None


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
# the user line where it happened. No code is generated, so it is cheap. (For this
# page's tables we strip each reason to its first line.)

with captured_logs() as log:  # the default logging: warnings only
    explanation = torch._dynamo.explain(model)(x)
print(
    f"graphs: {explanation.graph_count}, graph breaks: {explanation.graph_break_count}"
)
rows = [
    [f"{Path(b.user_stack[-1].filename).name}:{b.user_stack[-1].lineno}"]
    + [b.reason.splitlines()[0][:90]]
    for b in explanation.break_reasons
]
print(tabulate(rows, headers=["where", "reason"], tablefmt="github"))
assert explanation.graph_break_count >= 2

# %%
# Two breaks, three graphs. ``.item()`` returns a Python number, and the ``if`` on it can
# only be decided by running the graph so far, so Dynamo ends the graph there. The logging
# call breaks because Dynamo does not trace ``logging.Logger`` methods.
#
# **The same from the logs.** ``TORCH_LOGS="graph_breaks"`` (here:
# ``torch._logging.set_logs(graph_breaks=True)``) prints each break as it happens, with a
# structured explanation: a *type* (first line), an explanation, hints, and a link to a page
# about that break type on the graph-break site. Those pages are the place to start when a
# message is unclear: each describes the cause and the usual fixes. We compile with the
# ``"eager"`` backend throughout this search: it runs Dynamo's graphs without generating
# code, which is all we need to find breaks and recompiles.

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
print(
    f"graph breaks with the call disabled: {sum(counters['graph_break'].values())} "
    f"(was {breaks_before})"
)
assert sum(counters["graph_break"].values()) == 1

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
for name, size in re.findall(
    r"check_tensor\((\S+), .*?size=(\[[^\]]*\])", log.getvalue()
):
    if name == "L['x']" or "drop_p" in name:
        print(f"TENSOR_MATCH on {name}: size={size}")
graphs_first = counters["stats"]["unique_graphs"]
train(fixed, compiled_fixed, dynamic_seq=True)
rows = [
    ["as written", breaks_before, graphs_before],
    [
        "fixed",
        sum(counters["graph_break"].values()),
        counters["stats"]["unique_graphs"],
    ],
]
print(
    tabulate(
        rows, headers=["model", "graph breaks", "graphs in 12 steps"], tablefmt="github"
    )
)
assert graphs_first == 1 and counters["stats"]["unique_graphs"] == graphs_first
assert sum(counters["graph_break"].values()) == 0

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
# ``TORCH_TRACE`` is read when ``torch`` is imported, and this page has imported it long
# ago. So we do in-process what the environment variable sets up: attach a file handler to
# the structured trace logger (``torch._logging._internal.trace_log``, a private name; the
# environment variable is the supported way) with the formatter the trace format needs.
# Everything the next section compiles goes into the trace.

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
# lower ``recompile_limit`` to 2 for this measurement: the steady state is the same one the
# default of 8 reaches (the function with the dropout falls back to eager code for new
# rates), reached with fewer compilations, which keeps this page's build short.
#
# **The first diagnostic for "not faster"** is the pair of columns on the right: the CPU
# time to issue one step beside the step's time on the device. If the CPU needs about as
# long to issue the work as the GPU needs to run it, the step is bound by the CPU (Python,
# guard checks, kernel launches, or a ``.item()`` that makes the CPU wait for the GPU), and
# faster kernels do not help: fewer graph breaks, larger batches or CUDA graphs
# (``mode="reduce-overhead"``) do. If the issue time is well below the step time, the GPU
# is the bottleneck and the kernels themselves are what to look at. On a CPU both are one
# number, so the verdict column shows "-".

x_long, y_long = make_batch(seq_lens.index(max(seq_lens)))


def measure(label, net, step_net):
    def step():
        net.zero_grad(set_to_none=True)
        F.cross_entropy(step_net(x_long), y_long).backward()

    step_ms, issue_ms = step_times(step)
    issue, verdict = "-", "-"
    if (
        issue_ms is not None
    ):  # the one-word verdict: CPU-bound if issuing takes most of it
        issue, verdict = (
            f"{issue_ms:8.3f}",
            "CPU" if issue_ms > 0.8 * step_ms else "GPU",
        )
    breaks = sum(counters["graph_break"].values())
    graphs = counters["stats"]["unique_graphs"]
    return [
        label,
        breaks,
        graphs,
        f"{step_ms:8.3f}",
        issue,
        verdict,
    ]


torch._dynamo.reset()
counters.clear()
results = [measure("eager", model, model)]
with captured_logs() as log, torch._dynamo.config.patch(recompile_limit=2):
    compiled_model = torch.compile(model)
    train(model, compiled_model)
    results.append(measure("compiled, as written", model, compiled_model))
show(log, r"hit config.recompile_limit|last reason")
torch._dynamo.reset()
counters.clear()
compiled_fixed = torch.compile(fixed, fullgraph=True)
train(fixed, compiled_fixed, dynamic_seq=True)
torch._dynamo.mark_dynamic(x_long, 1)
results.append(measure("compiled, fixed", fixed, compiled_fixed))

print(f"{device_name}, batch {batch}, sequence length {max(seq_lens)}, width {width}")
print(
    tabulate(
        results,
        headers=[
            "step",
            "graph breaks",
            "graphs compiled",
            "step (ms)",
            "CPU issue (ms)",
            "bound by",
        ],
        tablefmt="github",
        disable_numparse=True,
    )
)
assert results[2][1] == 0

# %%
# How to read the table: "graphs compiled" counts every graph Dynamo produced during the
# twelve warm-up steps and the timing (forward graphs; Inductor compiles a backward for each).
# "graph breaks" is Dynamo's counter over the same steps: it counts a break each time Dynamo
# traces through it, so a frame that is compiled again counts its breaks again. It is not
# the number of places that break, which ``explain`` reported above.
# The model as written compiles several pieces with eager code between them, and
# pays for every ``.item()`` on every step; the fixed one compiles one graph, once. Whether
# that shows up in the step time depends on which side is the bottleneck on this machine,
# which is what the last two columns say. :ref:`compile_time` covers what the compiled
# graphs cost to build, and :ref:`compiled_training_tutorial` compiles the optimizer step
# too.
#
# Reading the tlparse report
# --------------------------
#
# We detach the trace handler and run ``tlparse`` on the trace. The report goes into a
# folder next to this script, ``debugging_tutorial_report``; on the published site it is
# here: `the tlparse report of this page's run <debugging_tutorial_report/index.html>`__
# (also as a `zip archive <debugging_tutorial_report.zip>`__). When you run the notebook
# yourself, your own report lands in the same folder next to it.

trace_log.removeHandler(trace_handler)
trace_handler.close()
report = Path("debugging_tutorial_report")
shutil.rmtree(report, ignore_errors=True)
exe = shutil.which("tlparse") or shutil.which(
    "tlparse", path=Path(sys.executable).parent
)
cmd = [
    exe or "tlparse",
    str(trace_file),
    "-o",
    str(report),
    "--overwrite",
    "--no-browser",
]
try:
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
except (OSError, subprocess.SubprocessError) as error:
    print(
        f"No tlparse report ({type(error).__name__}): pip install tlparse to get one."
    )
shutil.rmtree(trace_dir, ignore_errors=True)

# %%
# The report's front page (``index.html``) starts with a *stack trie*: the Python stacks
# that led to each compilation, with links to every compile id. A compile id ``[x/y]`` is
# frame ``x``, compiled for the ``y``-th time; ``[x/y_1]`` is a second attempt after Dynamo
# restarted its analysis, which is what a graph break inside a frame does. Below it,
# *Failures and Restarts* lists every graph break with the same explanation as the log, and
# each compile id links to its artifacts. ``compile_directory.json`` lists them; here are
# the artifacts of the first few compile ids, by kind (the numbers in the file names only
# order them).

if (report / "compile_directory.json").is_file():
    directory = json.loads((report / "compile_directory.json").read_text())
    rows = []
    for compile_id, entry in [e for e in directory.items() if e[1]["artifacts"]][:8]:
        kinds = sorted(
            {
                re.sub(r"_\d+$", "", Path(a["name"]).stem)[:40]
                for a in entry["artifacts"]
            }
        )
        rows.append(
            [
                compile_id,
                len(entry["artifacts"]),
                ", ".join(kinds[:4]) + (" ..." if len(kinds) > 4 else ""),
            ]
        )
    print(f"{len(directory)} compile ids in the report")
    print(
        tabulate(
            rows,
            headers=["compile id", "artifacts", "kinds (first 4)"],
            tablefmt="github",
        )
    )

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
    rows, errors = [], {}
    for backend in ["none (eager)", "eager", "aot_eager", "inductor"]:
        torch._dynamo.reset()
        run = (
            fixed
            if backend.startswith("none")
            else torch.compile(fixed, backend=backend)
        )
        errors[backend] = (run(x).double() - expected).abs().max().item()
        rows.append([backend, f"{errors[backend]:.2e}"])
print(
    tabulate(rows, headers=["backend", "max abs error vs float64"], tablefmt="github")
)
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
with (
    torch.no_grad(),
    torch._dynamo.config.patch(
        repro_after="aot", repro_level=4, debug_dir_root=str(debug_root)
    ),
):
    torch.compile(fixed)(x)
written = [p.name for p in debug_root.rglob("*.py")]
print(
    f"accuracy check after AOTAutograd: passed; reproducer files written: {written or 'none'}"
)
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
# counting breaks and graphs. A ``TORCH_TRACE`` and ``tlparse`` put the whole run in one
# report, a backend ablation against float64 tells round-off from a bug, and the CPU issue
# time next to the device time says whether a step can get faster from better kernels at
# all.
#
# Further reading
# ---------------
#
# * :ref:`torch_compile_tutorial`, :ref:`compile_time`,
#   :ref:`compiling_optimizer_lr_scheduler`, :ref:`compiled_training_tutorial`
# * `torch.compile troubleshooting
#   <https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html>`__
# * `The graph-break site <https://meta-pytorch.github.io/compile-graph-break-site/>`__
# * `tlparse <https://github.com/meta-pytorch/tlparse>`__
# * `Dynamic shapes <https://docs.pytorch.org/docs/stable/torch.compiler_dynamic_shapes.html>`__
# * `torch._logging.set_logs
#   <https://docs.pytorch.org/docs/stable/generated/torch._logging.set_logs.html>`__
