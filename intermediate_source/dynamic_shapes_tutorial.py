"""
.. _dynamic_shapes_tutorial:

Dynamic shapes without surprises
================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * What a compiled graph is specialized on, how automatic dynamic shapes turn a
         size into a symbol at the first recompile, and why sizes 0 and 1 stay special
       * How to choose what is dynamic (``mark_dynamic``, ``maybe_mark_dynamic``,
         ``dynamic=True`` or ``False``) and what happens at the recompile limit
       * Why a boolean mask, ``nonzero`` or ``.item()`` breaks a graph, and how unbacked
         symbols and ``torch._check`` keep it whole
       * How to serve batches of variable length: exact shapes, dynamic kernels, length
         buckets and CUDA graphs, each compiled cold and measured

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
       * The basics of ``torch.compile`` (:ref:`torch_compile_tutorial`); the recompile
         section of :ref:`debugging_tutorial` helps
       * A CUDA GPU of compute capability 7.5 or newer for the timings (current CUDA
         wheels need it); runs on CPU with smaller sizes (Inductor then needs a C++
         compiler and the Python headers)
"""

# %%
# Overview
# --------
#
# "Why does it keep recompiling, and then fall back to eager?" is the question that
# follows graph breaks. The answer is in what a compiled graph assumes about its
# inputs: every graph is stored with *guards*, checks on the shapes and values it was
# compiled for, and a call that fails them all compiles a new graph. This page shows
# those guards for sizes, the switches that decide which sizes are fixed and which are
# symbols, and what happens when a size depends on the data. Then it serves a small
# transformer on batches whose lengths vary as the lengths of text do, with each of the
# usual strategies (three on a CPU, five on a GPU) beside eager, every one compiled
# cold, checked against float64 and measured.
#
# Setup
# -----

import contextlib
import copy
import io
import math
import re
import statistics
import textwrap
import time
import warnings

import matplotlib.pyplot as plt
import torch
import torch._inductor.utils
import torch.nn as nn
import torch.nn.functional as F
from tabulate import tabulate
from torch._dynamo.utils import compilation_time_metrics, counters
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile
from torch.utils import benchmark

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    n_layer, d_model, batch, max_len, n_steps = 4, 256, 16, 512, 256
    median_len, buckets, n_check = 48, (64, 128, 256, 512), 16
    device_name = torch.cuda.get_device_name()
else:
    n_layer, d_model, batch, max_len, n_steps = 1, 64, 8, 128, 96
    median_len, buckets, n_check = 16, (32, 64, 128), 8
    device_name = f"CPU, {torch.get_num_threads()} threads"
N_HEAD, VOCAB, THREADS = 4, 512, torch.get_num_threads()
print(f"torch {torch.__version__}, {device_name}: {n_layer} layers, width {d_model}")
# PyTorch's default float32 matmul precision (no TF32) is kept on purpose.
warnings.filterwarnings("ignore", message=".*(TensorFloat32|Profiler clears)")

# %%
# Helpers
# -------
#
# ``captured_log`` turns log artifacts on for a block (``recompiles=True`` is the
# in-program form of ``TORCH_LOGS="recompiles"``) and then prints the lines that match a
# pattern, without the log prefix, source comments or directories.
#
# ``measure`` times the serving loop: five windows of ``steps`` back-to-back calls of
# ``step`` with ``torch.utils.benchmark.Timer`` (which synchronizes the GPU at each end
# and uses all of the CPU's threads); the median window is the time per call, their
# interquartile range its **spread**. It then profiles ``profiled`` more calls, after one
# warm-up call that the profiler's schedule leaves out, and keeps the profile's totals
# per operator and kernel (``key_averages``). On a GPU, the union of the kernel
# intervals (kernels that overlap count once) over that profiled loop's own wall time is
# the **busy share**: at least 85 %, the GPU bounds the loop; below, the GPU idles that
# share of the time waiting for the CPU (Python, guards, launches). A CPU both runs the
# Python and computes, so it has no busy share.
#
# ``attribute`` reads one row against another. Within both rows' spread it says so and
# names no cause. Beyond it, it diffs the two rows' profiles and names the parts whose
# time per call grew most and how much of the difference they cover: self CPU time of
# each operator and range (``Torch-Compiled Region``, a compiled graph's call, a CUDA
# graph's replay), or kernel time (cuBLAS's matmul kernels as one part) when the GPU's
# busy time grew by at least half the gap.
# The parts named can add up to more than the gap, the rest then netting negative: self
# CPU time is not all on a step's critical path. A CPU that runs ahead of its GPU waits
# for it (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``) or works while kernels
# run, so where a row keeps its GPU busy, its CPU time moves by more than its step does.

LOG_PREFIX = re.compile(r"^[VIWEDC]\d{4} \S+ \d+ \S+\] (\[\d+/\d+\] )?(\[__\w+\] )?")
DIRS = re.compile(r"(?<![\w:/.])/(?:[^\s/\"']+/)+")


@contextlib.contextmanager
def captured_log(pattern=None, limit=8, **artifacts):
    """torch._logging.set_logs(**artifacts) for the block; print matching lines, trimmed."""
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stderr(buffer):  # torch's log handlers write to stderr
            torch._logging.set_logs(**artifacts)
            yield
    finally:
        torch._logging.set_logs()  # the defaults again, on the real stderr
        kept = []
        for line in buffer.getvalue().splitlines():
            line = DIRS.sub("", LOG_PREFIX.sub(r"\1", line).split("  # ")[0]).rstrip()
            line = re.sub(r"(check_tensor\(\S+), .*(size=)", r"\1, ..., \2", line)
            if pattern and re.search(pattern, line) and line not in kept:
                kept.append(line)
        for line in kept[:limit]:
            print(textwrap.fill(f"[log] {line}", 100, subsequent_indent="      "))


def measure(step, steps=3, profiled=2):
    """(ms per call, spread ms, busy % or None) of step(), and the operator and kernel
    totals of a profile of `profiled` calls."""
    timer = benchmark.Timer("step()", globals={"step": step}, num_threads=THREADS)
    windows = [timer.timeit(steps).mean * 1e3 for _ in range(5)]  # no profiler
    q1, ms, q3 = statistics.quantiles(windows, n=4)
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else lambda: None
    activities = [ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=profiled, repeat=1)
    with profile(activities=activities, schedule=schedule) as prof:
        for i in range(profiled + 1):  # call 0 warms the profiler up, unrecorded
            step()
            if i == 0:
                sync()  # call 0's kernels end before the profiler starts recording
                wall = -time.perf_counter()
            if i == profiled:
                sync()
                wall += time.perf_counter()
            prof.step()
    on_gpu = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    kernels = [e for e in on_gpu if not e.is_user_annotation]  # none on a CPU
    spans = sorted((e.time_range.start, e.time_range.end) for e in kernels)
    busy, reach = 0.0, float("-inf")
    for s, e in spans:  # union of kernel intervals (microseconds)
        if e > reach:
            busy += e - max(s, reach)
            reach = e
    busy = 100 * busy / (wall * 1e6) if cuda else None  # in %
    return (ms, q3 - q1, busy), prof.key_averages()


# cuBLAS's matmul kernels, by name: one part when GPU time is compared, since two rows
# may run the same products in kernels of different names.
GEMM = re.compile("gemm|gemv|nvjet|xmma|cutlass", re.I)


def attribute(name, ref, times, profs, steps):
    """Print whether `name` is slower than `ref` beyond both spreads and, if so, what grew."""
    (t, spread, busy), (t0, spread0, busy0) = times[name], times[ref]
    gap = t - t0
    head = f"{name} vs {ref}: {t:.3f} vs {t0:.3f} ms ({gap:+.3f} ms)"
    if gap <= max(spread, spread0):
        print(f"{head}, within the spread ({spread:.3f} and {spread0:.3f} ms)")
        return
    gpu = busy is not None and (t * busy - t0 * busy0) / 100 / gap >= 0.5
    parts = {}
    for sign, prof in ((1, profs[name]), (-1, profs[ref])):
        for e in prof:
            kernel = e.device_type == DeviceType.CUDA and not e.is_user_annotation
            # kernels only: a CPU operator's device time repeats its kernels'
            us = e.self_device_time_total * kernel if gpu else e.self_cpu_time_total
            key = "Python outside operators" if e.key == "ProfilerStep*" else e.key
            key = "matmul kernels (all)" if gpu and GEMM.search(key) else key
            parts[key] = parts.get(key, 0.0) + sign * us / 1e3 / steps
    grew = [kv for kv in sorted(parts.items(), key=lambda kv: -kv[1])[:3] if kv[1] > 0]
    covered = sum(ms for _, ms in grew)
    named = "; ".join(f"{k[:48]} {ms:+.3f} ms" for k, ms in grew)
    print(
        f"{head}, slower beyond the spread. {'GPU kernel' if gpu else 'Self CPU'} time per"
        f" pass that grew most: {named}: {100 * covered / gap:.0f} % of the gap; "
        f"the rest, {gap - covered:+.3f} ms net, over the other parts and the time outside every part"
    )


# %%
# What a graph is specialized on
# ------------------------------
#
# Dynamo records the shape of every input tensor and, by default, compiles the first
# graph for exactly those sizes. A call with another size fails that graph's guard and
# compiles again; this time Dynamo marks the size that changed as *dynamic*, a symbol
# such as ``s0``, so that one graph serves every size (**automatic dynamic shapes**).
# The symbol still carries guards: whatever the code decided from the size (here, a
# branch that truncates long inputs) becomes a range the next size must fall in.
#
# This section is about what Dynamo captures, not speed, so it compiles with
# ``backend="eager"``, which runs the captured graphs without Inductor; the guards and
# recompiles are the same. The ``recompiles`` log names the guard that failed and the
# ``guards`` log shows the guards of each new graph.


def first_rows_norm(x, limit=24):
    if x.shape[0] > limit:  # truncate long inputs: a branch on a size
        x = x[:limit]
    return F.layer_norm(x, x.shape[-1:])


torch._dynamo.reset()
counters.clear()
compiled_norm = torch.compile(first_rows_norm, backend="eager")
symbolic = r"Recompiling|- \d+/\d+:|size=\[None|LAMBDA_GUARD: .*size\(\)"
with captured_log(symbolic, limit=14, recompiles=True, guards=True):
    for n in [8, 16, 32, 48, 1]:
        x = torch.randn(n, 16)
        torch.testing.assert_close(compiled_norm(x), first_rows_norm(x))
print(f"5 sizes (8, 16, 32, 48, 1): {counters['stats']['unique_graphs']} graphs")
assert counters["stats"]["unique_graphs"] == 4

# %%
# Read the log by compile id, ``[frame/compile]``:
#
# * ``[0/1]``: size 16 failed the first graph's guard (``size mismatch at index 0``), and
#   the new graph's tensor guard leaves that size open (``size=[None, 16]``). Its
#   symbolic guard ``2 <= L['x'].size()[0] <= 24`` holds the branch the code took.
# * ``[0/2]``: size 32 fails both graphs and gets a third, for ``25 <= size``; 48 then
#   reuses it.
# * ``[0/3]``: size 1 fails the dynamic guards too. Every symbolic size starts at 2:
#   Dynamo *specializes* sizes 0 and 1, because so much code (broadcasting, contiguity,
#   ``squeeze``) behaves differently for them, so a batch of one always gets a graph of
#   its own. (``torch._dynamo.decorators.mark_unbacked(x, dim)`` opts a size out of
#   that: it becomes an *unbacked* symbol, the kind met in the data-dependent section.)
#
# Choosing what is dynamic
# ------------------------
#
# When you know which size varies (the batch, the sequence length), there is no need to
# pay the first recompile to find out:
#
# * ``torch._dynamo.mark_dynamic(x, dim)`` makes that dimension of that tensor symbolic
#   from the first call, and raises an error if the code forces it to a constant;
# * ``torch._dynamo.maybe_mark_dynamic(x, dim)`` asks for the same but lets Dynamo
#   specialize silently when the code needs a constant;
# * ``torch.compile(..., dynamic=True)`` makes every size of every input symbolic from
#   the start, and ``dynamic=False`` turns automatic dynamic off: one graph per size.
#
# The counts below are Dynamo's, for the same four sizes. In the dynamic modes the
# sizes on each side of the branch still need a graph each.

mode_rows = []
for name, options, mark in [
    ("automatic (default)", {}, None),
    ("mark_dynamic(x, 0)", {}, torch._dynamo.mark_dynamic),
    ("maybe_mark_dynamic(x, 0)", {}, torch._dynamo.maybe_mark_dynamic),
    ("dynamic=True", {"dynamic": True}, None),
    ("dynamic=False", {"dynamic": False}, None),
]:
    torch._dynamo.reset()
    counters.clear()
    compiled_norm = torch.compile(first_rows_norm, backend="eager", **options)
    for n in [8, 16, 32, 48]:
        x = torch.randn(n, 16)
        if mark is not None:
            mark(x, 0)
        compiled_norm(x)
    mode_rows.append([name, counters["stats"]["unique_graphs"]])
print(tabulate(mode_rows, ["sizes 8, 16, 32, 48", "graphs"], tablefmt="github"))
assert [r[1] for r in mode_rows] == [3, 2, 2, 2, 4], mode_rows

# %%
# ``mark_dynamic`` is a promise that the code treats the size as a symbol. Code that
# needs it as a number breaks the promise: this function loops over chunks of eight rows
# in Python, so Dynamo unrolls the loop and the number of chunks, hence the size,
# becomes a constant. ``mark_dynamic`` then raises ``ConstraintViolationError`` with the
# reason below, while ``maybe_mark_dynamic`` accepts the constant and recompiles per size.


def chunk_sums(x):
    return torch.stack([x[i : i + 8].sum(0) for i in range(0, x.shape[0], 8)])


for mark in [torch._dynamo.mark_dynamic, torch._dynamo.maybe_mark_dynamic]:
    torch._dynamo.reset()
    counters.clear()
    compiled_chunks = torch.compile(chunk_sums, backend="eager")
    try:
        with captured_log(r"You marked", limit=1):
            for n in [16, 32]:
                x = torch.randn(n, 4)
                mark(x, 0)
                compiled_chunks(x)
        print(f"{mark.__name__}: {counters['stats']['unique_graphs']} graphs")
    except torch.fx.experimental.symbolic_shapes.ConstraintViolationError as error:
        print(f"{mark.__name__}: {type(error).__name__}: {str(error).splitlines()[0]}")
assert counters["stats"]["unique_graphs"] == 2

# %%
# The recompile limit
# -------------------
#
# Recompiling cannot go on for ever. After ``torch._dynamo.config.recompile_limit``
# graphs for one function (8 by default; ``cache_size_limit`` is its older name, still
# accepted in 2.9), Dynamo logs a warning and stops compiling that function: the graphs
# it has keep serving the inputs they match, and every other call runs the Python code
# eagerly, uncompiled. With ``dynamic=False`` twelve sizes are enough to get there:

torch._dynamo.reset()
counters.clear()
compiled_norm = torch.compile(first_rows_norm, backend="eager", dynamic=False)
with captured_log(r"hit config|last reason"):
    for n in range(2, 14):
        x = torch.randn(n, 16)
        torch.testing.assert_close(compiled_norm(x), first_rows_norm(x))
limit = torch._dynamo.config.recompile_limit
print(f"12 sizes, recompile_limit {limit}: {counters['stats']['unique_graphs']} graphs")
assert counters["stats"]["unique_graphs"] == limit

# %%
# The results are still right, which is what makes the limit a surprise: the program
# just gets slower. ``torch._dynamo.config.fail_on_recompile_limit_hit = True`` turns
# the warning into an error, which is worth setting in tests. Raising the limit only
# postpones the problem; the fix is a dynamic size or fewer distinct sizes, as the
# workload below shows.
#
# Data-dependent shapes
# ---------------------
#
# A symbol like ``s0`` is *backed*: it stands for an input size, so Dynamo knows its
# value at compile time and can guard on it. Some sizes come from the data instead:
# the rows a boolean mask keeps (``x[mask]``, ``nonzero``), or a number read with
# ``.item()``. Tracing never sees those values, so by default Dynamo breaks the graph
# there and runs the operation eagerly. Two switches keep them in the graph as
# **unbacked** symbols (``u0``), sizes with no value known at compile time:
#
# * ``torch._dynamo.config.capture_dynamic_output_shape_ops`` for operations whose
#   output size depends on the data (a mask, ``nonzero``);
# * ``torch._dynamo.config.capture_scalar_outputs`` for ``.item()``.
#
# Code that *decides* on an unbacked value still needs Python: an ``if`` on it breaks
# the graph again, since there is no value to guard on. ``torch._check(condition)``
# states a fact the compiler may assume (it is checked at run time), and a branch that
# the fact decides no longer breaks the graph. ``torch._dynamo.explain`` counts the
# graphs of each variant:


def valid_mean(h, mask):
    return h[mask].mean(0)  # how many rows the mask keeps depends on the data


def trim_to_longest(h, lengths, checked=False):
    n = lengths.max().item()
    if checked:  # facts the compiler cannot know; each is asserted at run time
        torch._check(n >= 0)
        torch._check(n <= h.shape[1])
    if n > h.shape[1]:
        raise ValueError("a length exceeds the padded width")
    return h[:, :n].sum(1)


h, lengths = torch.randn(3, 16, 8), torch.tensor([5, 9, 7])
mask = torch.arange(16) < lengths[:, None]
scalars = {"capture_scalar_outputs": True}
cases = [
    ("h[mask]", valid_mean, (h, mask), {}),
    ("h[mask]", valid_mean, (h, mask), {"capture_dynamic_output_shape_ops": True}),
    (".item()", trim_to_longest, (h, lengths), {}),
    (".item()", trim_to_longest, (h, lengths), scalars),
    (".item(), _check", trim_to_longest, (h, lengths, True), scalars),
]
dd_rows = []
for name, fn, args, options in cases:
    torch._dynamo.reset()
    with torch._dynamo.config.patch(**options), captured_log():  # hides its hints
        result = torch._dynamo.explain(fn)(*args)
    torch.testing.assert_close(fn(*args), torch.compile(fn, backend="eager")(*args))
    assert result.graph_break_count == result.graph_count - 1, name
    reasons = [  # the line that names the cause
        (re.findall(r"Could not guard on [^(]*", r.reason) or r.reason.splitlines())[0]
        for r in result.break_reasons
    ]
    code = result.graphs[-1].print_readable(print_output=False)  # shapes annotated
    unbacked = sorted(set(re.findall(r"\w\d+\[[^\]]*\bu\d[^\]]*\]", code)))
    reason = textwrap.shorten("; ".join(reasons) or "-", 64, placeholder=" ...")
    config = ", ".join(options) or "defaults"
    dd_rows.append(
        [name, config, result.graph_count, reason, ", ".join(unbacked) or "-"]
    )
headers = ["code", "config", "graphs", "graph break", "unbacked shapes"]
print(tabulate(dd_rows, headers, tablefmt="github"))
assert [r[2] for r in dd_rows] == [2, 1, 2, 2, 1], dd_rows

# %%
# Read the rows in pairs. A mask's output size is data, so by default the graph ends
# before it and ``h[mask]`` runs eagerly between two graphs; with
# ``capture_dynamic_output_shape_ops`` the graph holds it, and its shape ``(u0, 8)``
# carries the unbacked symbol. ``.item()`` breaks the graph by default; with
# ``capture_scalar_outputs`` it enters the graph as ``u0``, but the length check
# ``if n > h.shape[1]`` needs a value Dynamo does not have, so the graph breaks at the
# ``if``. The two ``torch._check`` calls tell the compiler that ``0 <= n <= 16``: the
# branch is decided, the slice has the size ``u0``, and the function is one graph. A
# ``torch._check`` that fails at run time raises an error, as the ``if`` would have.
#
# Inductor compiles unbacked sizes too. They cost what any data-dependent size costs: the
# CPU waits for the GPU to produce the value before it can size the next tensor.
#
# A variable-length workload
# --------------------------
#
# Now a workload where shapes vary on every step: a small decoder-only transformer that
# scores batches of token sequences (the forward pass of serving), with lengths drawn
# from a log-normal distribution, skewed as the lengths of real text are: most
# sequences are short, a few are long. As length-grouping samplers do, the sequences are
# sorted by length within windows of eight batches, so a batch holds similar lengths;
# every batch is padded with zeros to its longest sequence. The model's attention is
# causal, so padding at the end never changes the outputs at the real positions.

gen = torch.Generator().manual_seed(0)
seq_lens = torch.randn(n_steps * batch, generator=gen) * 0.8 + math.log(median_len)
seq_lens = seq_lens.exp().round().clamp(2, max_len).long()
seq_lens = seq_lens.view(-1, 8 * batch).sort(dim=1).values.view(n_steps, batch)
seq_lens = seq_lens[torch.randperm(n_steps, generator=gen)]
stream = torch.randint(1, VOCAB, (n_steps, batch, max_len), generator=gen)
widths = seq_lens.max(dim=1).values
print(f"{n_steps} batches of {batch}, lengths {seq_lens.min()}-{seq_lens.max()} tokens")
print(f"median {seq_lens.median()}; {widths.unique().numel()} distinct batch widths")


def make_batch(i, bucketed=False, mark=False):
    """Batch i padded to its longest sequence, or to the next bucket."""
    width = int(widths[i])
    if bucketed:
        width = next(b for b in buckets if b >= width)
    x = stream[i, :, :width] * (torch.arange(width) < seq_lens[i, :, None])  # pad: 0
    x = x.to(device)
    if mark:  # the sequence length is dynamic from the first call
        torch._dynamo.mark_dynamic(x, 1)
    return x


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, N_HEAD, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.blocks = nn.Sequential(*(Block() for _ in range(n_layer)))
        self.head = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, VOCAB))

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.blocks(self.tok_emb(idx) + self.pos_emb(pos)))


torch.manual_seed(0)
model = GPT().to(device).eval()
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters")

# %%
# Ways to serve it
# ----------------
#
# * **exact shapes**: ``torch.compile(model)`` on each batch as it comes. Automatic
#   dynamic compiles one graph for the first width and a dynamic one at the second.
# * **dynamic from call 1**: the same, with ``mark_dynamic(x, 1)`` on each batch, so
#   the first graph is already the dynamic one.
# * **buckets**: each batch padded to the next of a few widths (``buckets`` above) and
#   compiled with ``dynamic=False``: one static graph per bucket, each specialized to
#   its sizes, at the price of computing the padding.
# * **CUDA graphs, exact** and **CUDA graphs, buckets** (GPU only):
#   ``mode="reduce-overhead"``, which records the kernels of a graph once and replays
#   them with one launch. A recording holds fixed sizes, so a dynamic graph records
#   one CUDA graph per distinct width it meets; with buckets there is one per bucket.
#
# ``serve`` runs one strategy over the whole stream, once, from nothing compiled:
# Dynamo is reset and the whole run is inside ``fresh_cache()``, Inductor's helper that
# points its caches at a new empty folder. It asserts that the FX graph cache missed and
# never hit, and reports the wall time of the calls that compiled a graph. It then
# compares the outputs of ``n_check`` batches spread over the stream with a float64
# copy of the model, and times one pass over those batches with ``measure``: tokens per
# second counts real tokens only. With ``fullgraph=True`` every strategy must compile the
# model as one graph, without breaks.

model64 = copy.deepcopy(model).double()
check_ids = list(range(0, n_steps, n_steps // n_check))
with torch.no_grad():
    refs = [model64(make_batch(i)) for i in check_ids]


def infer(fn, x, cudagraphs):
    if cudagraphs:  # outputs of the previous call may now be overwritten
        torch.compiler.cudagraph_mark_step_begin()
    return fn(x)


def serve(name, fn, bucketed=False, mark=False, cudagraphs=False):
    torch._dynamo.reset()  # nothing compiled, automatic dynamic forgotten
    counters.clear()
    compile_s, computed = 0.0, 0
    with torch._inductor.utils.fresh_cache(), torch.no_grad():
        for i in range(n_steps):
            x = make_batch(i, bucketed, mark)
            graphs, start = counters["stats"]["unique_graphs"], time.perf_counter()
            infer(fn, x, cudagraphs)
            if device == "cuda":
                torch.cuda.synchronize()
            if counters["stats"]["unique_graphs"] > graphs:
                compile_s += time.perf_counter() - start
            computed += x.numel()
        graphs = counters["stats"]["unique_graphs"]
        if fn is not model:  # a cold compile: misses, no hits, one graph per compile
            assert counters["inductor"]["fxgraph_cache_hit"] == 0
            assert counters["inductor"]["fxgraph_cache_miss"] > 0 and graphs > 0
            assert sum(counters["graph_break"].values()) == 0
        xs = [make_batch(i, bucketed, mark) for i in check_ids]
        err = 0.0
        for x, r in zip(
            xs, refs
        ):  # read before the next CUDA-graph replay overwrites it
            o = infer(fn, x, cudagraphs)[:, : r.shape[1]]
            err = max(err, (abs(o - r).max() / abs(r).max()).item())
        assert err < 1e-4, f"{name}: error {err:.1e} against float64"
        # A pass keeps no outputs: the next CUDA-graph replay may overwrite them.
        one_pass = lambda: [infer(fn, x, cudagraphs).shape for x in xs]  # noqa: E731
        one_pass()  # a CUDA graph records at its second call
        before = len(compilation_time_metrics.get("CUDAGraphNode.record", []))
        timing, prof = measure(one_pass)
    assert counters["stats"]["unique_graphs"] == graphs, "compiled while timing"
    recorded = compilation_time_metrics.get("CUDAGraphNode.record", [])  # since reset
    assert len(recorded) == before, "recorded a CUDA graph while timing"
    row = dict(name=name, graphs=graphs, compile_s=compile_s, err=err, prof=prof)
    row["cuda graphs"] = f"{len(recorded)} in {sum(recorded):.1f} s"
    row["ms"], row["spread"], row["busy"] = timing
    row["tok/s"] = int(seq_lens[check_ids].sum()) / timing[0] * 1e3
    row["padding"] = 1 - int(seq_lens.sum()) / computed  # over the whole stream
    return row


# The first Inductor compile in a process also starts its compile workers and imports
# its code generators: a throwaway compile pays for that here, outside the table.
with torch._inductor.utils.fresh_cache():
    torch.compile(F.gelu)(torch.randn(8, device=device))
rows = [serve("eager", model)]
with captured_log(r"Recompiling|size mismatch", limit=2, recompiles=True):
    rows.append(serve("exact shapes", torch.compile(model, fullgraph=True)))
dynamic = torch.compile(model, fullgraph=True)
rows.append(serve("dynamic from call 1", dynamic, mark=True))
static = torch.compile(model, fullgraph=True, dynamic=False)
rows.append(serve("buckets", static, bucketed=True))
if device == "cuda":
    graphs_mode = dict(fullgraph=True, mode="reduce-overhead")
    graphed = torch.compile(model, **graphs_mode)
    with captured_log(r"distinct sizes", limit=1):
        rows.append(serve("CUDA graphs, exact", graphed, cudagraphs=True))
    graphed = torch.compile(model, **graphs_mode, dynamic=False)
    rows.append(serve("CUDA graphs, buckets", graphed, bucketed=True, cudagraphs=True))
used = {next(b for b in buckets if b >= w) for w in widths.tolist()}
assert [r["graphs"] for r in rows[:4]] == [0, 2, 1, len(used)]

# %%
# The table
# ---------

gpu = device == "cuda"
headers = ["strategy", "graphs", "compile (s)", "tokens/s", "padding", "pass (ms)"]
headers[3:3] = ["CUDA graphs"] * gpu
headers += ["spread (ms)"] + ["busy %", "bound"] * gpu + ["error"]
table = []
for r in rows:
    row = [r["name"], r["graphs"], f"{r['compile_s']:.1f}" if r["graphs"] else "-"]
    row += [r["cuda graphs"]] * gpu + [f"{r['tok/s']:,.0f}", f"{r['padding']:.0%}"]
    row += [f"{r['ms']:.2f}", f"{r['spread']:.2f}"]
    if gpu:
        row += [f"{r['busy']:.0f}", "GPU" if r["busy"] >= 85 else "CPU"]
    table.append(row + [f"{r['err']:.1e}"])
print(f"{device_name}, torch {torch.__version__}; {n_steps} batches of {batch}")
print(tabulate(table, headers, tablefmt="github", disable_numparse=True))
if not gpu:
    print("On a CPU: no CUDA graphs, and no separate device to be busy or idle.")
times = {r["name"]: (r["ms"], r["spread"], r["busy"]) for r in rows}
best = min(times, key=lambda name: times[name][0])
print(f"Fastest pass: {best}. Each other strategy against it:")
for r in rows:
    if r["name"] != best:
        attribute(r["name"], best, times, {r["name"]: r["prof"] for r in rows}, 2)

# %%
# The chart shows each strategy's pass over the ``n_check`` batches; on a GPU each bar
# is split by its busy share into the time the GPU was busy and the time it sat idle.

names = [r["name"] for r in rows]
fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.8))
busy = [r["ms"] * (r["busy"] or 0) / 100 for r in rows]  # no busy time on a CPU
ax.barh(names, busy, label="GPU busy")
idle = [r["ms"] - b for r, b in zip(rows, busy)]  # the whole pass on a CPU
ax.barh(names, idle, left=busy, color="0.75" if gpu else "C0", label="GPU idle")
if gpu:
    ax.legend()
ax.invert_yaxis()
ax.set_xlabel(f"one pass over {n_check} batches (ms, median)")
ax.set_title(f"Serving variable-length batches, {device_name}")
fig.tight_layout()
plt.show()

# %%
# Reading the table
# -----------------
#
# **graphs** and **compile** are what each strategy pays before it serves at full
# speed. Exact shapes compile twice (the first width, then the dynamic graph at the
# second), dynamic from call 1 once, buckets once per bucket the stream reaches. The
# recompile log above names the guard that made exact shapes compile again: the
# sequence length, index 1. A CUDA-graph row also records graphs while it serves; its
# column gives how many and how long they took. A dynamic graph records one per distinct
# width it meets (the second time it meets it), so its recordings go on as long as new
# widths arrive; past ``torch._inductor.config.triton.cudagraph_dynamic_shape_warn_limit``
# distinct sizes Inductor logs the warning printed above, if the stream got there.
#
# **padding** is the share of computed tokens that are padding, over the whole stream;
# **tokens/s** counts real tokens only, so the padding a strategy computes costs it
# throughput. What a static graph can win in exchange: kernels compiled for known sizes
# (loop bounds and index arithmetic fixed in the code), and, with CUDA graphs, one
# launch per graph instead of one per kernel.
#
# The lines after the table read each strategy against the fastest, on the same
# sequences. Within both rows' spread a line says so and names no cause. Beyond it, it
# names what grew in the profile, per pass. On a loop bound by the CPU that is self CPU
# time: eager's operators and the Python around them, a compiled graph's call, Dynamo's
# guard checks (``TorchDynamo Cache Lookup``), a CUDA graph's replay. On a loop bound by
# the GPU it is kernel time: a padded matrix product's kernel grows with the width, and
# attention's with its square, so padding costs more than its share of tokens.
#
# Which strategy wins depends on the machine, the model's size and the length
# distribution, so measure yours. The trade-offs do not: automatic dynamic costs one
# recompile and no padding beyond each batch's longest sequence; ``mark_dynamic`` saves
# that recompile; buckets trade padding for static kernels and a bounded number of
# graphs; CUDA graphs record one graph per shape, so they pair with few shapes, which
# buckets provide.
#
# Conclusion
# ----------
#
# A compiled graph is guarded on the sizes it was compiled for. The first new size
# recompiles it with that size symbolic, sizes 0 and 1 stay specialized, and
# ``mark_dynamic``, ``maybe_mark_dynamic`` and ``dynamic=`` choose the symbols in
# advance; past ``recompile_limit`` graphs, calls that match none of them run eagerly.
# Sizes that come from data become unbacked symbols once
# ``capture_dynamic_output_shape_ops`` or ``capture_scalar_outputs`` is on, and
# ``torch._check`` supplies the facts a branch on them needs. On a skewed stream of
# batch widths, every strategy matched float64 within float32 rounding, and the table
# measured what each costs in compile time, padding and throughput.
#
# Further reading
# ---------------
#
# * :ref:`torch_compile_tutorial` (recompiles and graph breaks, first steps) and
#   :ref:`debugging_tutorial` (finding what recompiles)
# * :ref:`compiled_training_tutorial`: CUDA graphs for a whole training step
# * `Dynamic shapes in torch.compile
#   <https://docs.pytorch.org/docs/stable/torch.compiler_dynamic_shapes.html>`__
# * `Dealing with recompilations
#   <https://docs.pytorch.org/docs/stable/compile/programming_model.recompilation.html>`__
# * `CUDA graph trees, behind mode="reduce-overhead"
#   <https://docs.pytorch.org/docs/stable/torch.compiler_cudagraph_trees.html>`__
# * `Backed vs unbacked symbolic integers
#   <https://docs.pytorch.org/docs/main/compile/dynamic_shapes_backed_unbacked.html>`__
#   and `the core concepts of dynamic shapes
#   <https://docs.pytorch.org/docs/main/compile/dynamic_shapes_core_concepts.html>`__

# sphinx_gallery_thumbnail_number = 1
