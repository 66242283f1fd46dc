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

       * PyTorch 2.9 or later; built on Linux. Elsewhere it runs too, without the C++
         compiler's share of each compile time (it is read from a Linux-only wrapper)
       * The basics of ``torch.compile`` (:ref:`torch_compile_tutorial`); the recompile
         section of :ref:`debugging_tutorial` helps
       * A GPU is optional. With a CUDA GPU (compute capability 7.5 or newer, under 1 GB
         of its memory) the page also serves with CUDA graphs, and Inductor needs Triton
         (PyTorch's Linux CUDA wheels bring it). Without one it runs on the CPU with
         smaller sizes, and Inductor needs a C++ compiler and the Python headers
       * On a 2-core CPU it runs in about 1 to 2.5 minutes, with about 1 GB of memory
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
import os
import re
import textwrap
import warnings

# torch.profiler's tracing library (Kineto) logs each start and stop, and on a machine
# without a GPU an error line; level 6 keeps it quiet (set before importing torch).
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
from tabulate import tabulate
from torch._dynamo.utils import compilation_time_metrics, counters
from torch._inductor.utils import fresh_cache

import measure

device = "cuda" if torch.cuda.is_available() else "cpu"
gpu = device == "cuda"
if gpu:
    n_layer, d_model, batch, max_len, n_steps = 4, 256, 16, 512, 256
    median_len, buckets, n_check = 48, (64, 128, 256, 512), 16
    device_name = torch.cuda.get_device_name()
else:
    n_layer, d_model, batch, max_len, n_steps = 1, 64, 8, 128, 96
    median_len, buckets, n_check = 16, (32, 64, 128), 8
    device_name = f"CPU, {torch.get_num_threads()} threads"
measure.require(cxx=not gpu, triton=gpu)  # what Inductor needs here
N_HEAD, VOCAB = 4, 512
print(f"torch {torch.__version__}, {device_name}: {n_layer} layers, width {d_model}")
# PyTorch's default float32 matmul precision (no TF32) is kept on purpose.
warnings.filterwarnings("ignore", message=".*TensorFloat32")

# %%
# Helpers
# -------
#
# ``captured_log`` turns log artifacts on for a block (``recompiles=True`` is the
# in-program form of ``TORCH_LOGS="recompiles"``) and then prints the lines that match a
# pattern, without the log prefix, source comments or directories.

LOG_PREFIX = re.compile(r"^[VIWEDC]\d{4} \S+ \d+ \S+\] (\[\d+/\d+\] )?(\[__\w+\] )?")
DIRS = re.compile(r"(?<![\w:/.])/(?:[^\s/\"']+/)+")


@contextlib.contextmanager
def captured_log(pattern=None, limit=8, **artifacts):
    """torch._logging.set_logs(**artifacts) for the block; print matching lines, trimmed."""
    try:  # torch's log handlers write to stderr
        with contextlib.redirect_stderr(io.StringIO()) as buffer:
            torch._logging.set_logs(**artifacts)
            yield
    finally:
        torch._logging.set_logs()  # the defaults again, on the real stderr
        kept = {}  # the lines that match, once each, in order
        for line in buffer.getvalue().splitlines():
            line = DIRS.sub("", LOG_PREFIX.sub(r"\1", line).split("  # ")[0]).rstrip()
            line = re.sub(r"(check_tensor\(\S+), .*(size=)", r"\1, ..., \2", line)
            kept |= {line: None} if pattern and re.search(pattern, line) else {}
        for line in list(kept)[:limit]:
            print(textwrap.fill(f"[log] {line}", 100, subsequent_indent="      "))


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


def eager_backend(fn, **options):
    """fn compiled with backend="eager", after a reset: no graphs, every count at 0."""
    torch._dynamo.reset()
    counters.clear()
    return torch.compile(fn, backend="eager", **options)


compiled_norm = eager_backend(first_rows_norm)
symbolic = r"Recompiling|- \d+/\d+:|size=\[None|LAMBDA_GUARD: .*size\(\)"
with captured_log(symbolic, limit=14, recompiles=True, guards=True):
    for x in [torch.randn(n, 16) for n in (8, 16, 32, 48, 1)]:
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
# Recompiling cannot go on for ever. After ``torch._dynamo.config.recompile_limit``
# graphs for one function (8 by default; ``cache_size_limit`` is its older name, still
# accepted in 2.9), Dynamo logs a warning and stops compiling that function: the graphs
# it has keep serving the inputs they match, and every other call runs the Python code
# eagerly, uncompiled.
#
# The table counts Dynamo's graphs for two functions in each mode, and checks every
# result against the function run without compiling. ``first_rows_norm`` gets twelve
# sizes, on both sides of its branch. ``chunk_sums`` loops over chunks of eight rows in
# Python: Dynamo unrolls the loop, so the number of chunks, hence the size, becomes a
# constant, and code that needs a size as a number breaks ``mark_dynamic``'s promise.


def chunk_sums(x):
    return torch.stack([x[i : i + 8].sum(0) for i in range(0, x.shape[0], 8)])


def graphs_for(fn, sizes, options, mark):
    """How many graphs Dynamo compiles for fn over inputs of these sizes, or its error."""
    compiled = eager_backend(fn, **options)
    try:
        for n in sizes:
            x = torch.randn(n, 16)
            if mark is not None:
                mark(x, 0)
            torch.testing.assert_close(compiled(x), fn(x))
    except torch.fx.experimental.symbolic_shapes.ConstraintViolationError as error:
        return type(error).__name__
    return counters["stats"]["unique_graphs"]


mode_rows, sizes = [], [8, 16, 32, 48, 2, 3, 4, 5, 6, 7, 9, 10]
with captured_log(r"You marked|hit config|last reason", limit=3):
    for name, options, mark in [
        ("automatic (default)", {}, None),
        ("mark_dynamic(x, 0)", {}, torch._dynamo.mark_dynamic),
        ("maybe_mark_dynamic(x, 0)", {}, torch._dynamo.maybe_mark_dynamic),
        ("dynamic=True", {"dynamic": True}, None),
        ("dynamic=False", {"dynamic": False}, None),
    ]:
        norm = graphs_for(first_rows_norm, sizes, options, mark)
        mode_rows.append([name, norm, graphs_for(chunk_sums, [16, 32], options, mark)])
headers = ["graphs for", "first_rows_norm, 12 sizes", "chunk_sums, sizes 16, 32"]
print(tabulate(mode_rows, headers, tablefmt="github"))
limit = torch._dynamo.config.recompile_limit
assert [r[1] for r in mode_rows] == [3, 2, 2, 2, limit], mode_rows
assert [r[2] for r in mode_rows] == [2, "ConstraintViolationError", 2, 2, 2], mode_rows

# %%
# In the dynamic modes the sizes on each side of ``first_rows_norm``'s branch still
# need a graph each. ``mark_dynamic`` on ``chunk_sums`` raises
# ``ConstraintViolationError``, with the reason in the log above, while
# ``maybe_mark_dynamic`` accepts the constant and recompiles per size. With
# ``dynamic=False``, twelve sizes reach the recompile limit (the warning and the last
# failed guard are in the log), and the results are still right, which is what makes the
# limit a surprise: new sizes just run uncompiled from then on.
# ``torch._dynamo.config.fail_on_recompile_limit_hit = True`` turns the warning into an
# error, which is worth setting in tests. Raising the limit only postpones the problem;
# the fix is a dynamic size or fewer distinct sizes, as the workload below shows.
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
    unbacked = ", ".join(sorted(set(re.findall(r"\w\d+\[[^\]]*\bu\d[^\]]*\]", code))))
    reason = textwrap.shorten("; ".join(reasons) or "-", 64, placeholder=" ...")
    config = ", ".join(options) or "defaults"
    dd_rows.append([name, config, result.graph_count, reason, unbacked or "-"])
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
seq_lens = (torch.randn(n_steps * batch, generator=gen) * 0.8).exp() * median_len
seq_lens = seq_lens.round().clamp(2, max_len).long()
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
    # the batch's sequences, zero past each one's length
    x = (stream[i, :, :width] * (torch.arange(width) < seq_lens[i, :, None])).to(device)
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

# %%
# Ways to serve it
# ----------------
#
# * **exact shapes**: ``torch.compile`` on each batch as it comes. Automatic dynamic
#   compiles one graph for the first width and a dynamic one at the second.
# * **dynamic from call 1**: the same, with ``mark_dynamic(x, 1)`` on each batch, so
#   the first graph is already the dynamic one.
# * **buckets**: each batch padded to the next of a few widths (``buckets`` above) and
#   compiled with ``dynamic=False``: one static graph per bucket, each specialized to
#   its sizes, at the price of computing the padding.
# * **CUDA graphs, exact** and **CUDA graphs, buckets** (GPU only):
#   ``mode="reduce-overhead"``, which records the kernels of a graph once and replays
#   them with one launch. A recording holds fixed sizes, so a dynamic graph records
#   one CUDA graph per distinct width that it meets twice (the first call of a width
#   runs without recording); with buckets there is one per bucket.
#
# Each strategy compiles a function of its own: ``lambda x: model(x)``, written out
# once per strategy. Dynamo keeps compiled graphs, their guards, the recompile count and
# what automatic dynamic has learned per function (per code object), so the strategies
# share none of it and stay compiled side by side, to be timed together below. The
# CUDA-graph strategies call ``torch.compiler.cudagraph_mark_step_begin()`` before each
# batch: it tells CUDA graph trees that the previous call's outputs are no longer
# needed, so the next replay may overwrite them.
#
# ``serve`` runs one strategy over the whole stream, once, then compares the outputs of
# ``n_check`` batches spread over the stream with a float64 copy of the model. With
# ``fullgraph=True`` every strategy must compile the model as one graph, without breaks.
# ``measure.cold_compile`` runs ``serve`` for each compiled strategy inside
# ``fresh_cache()``, Inductor's helper that points its caches at a new empty folder
# (exact shapes and dynamic from call 1 end up with the same dynamic graph, and the
# second must not find the first's in a cache), and asserts that the FX graph cache
# missed and never hit: every strategy compiled cold. It counts the graphs compiled and
# the time Dynamo, AOTAutograd and Inductor spent on them (Dynamo's
# ``_compile.compile_inner`` timer). Of that time, the page shows the seconds a C++
# compiler ran (its runs counted once, compile workers included):
# ``measure.watch_cxx()`` has Inductor call the compiler through a wrapper that logs
# each run. Inductor's CPU kernels are C++, so on a CPU the compiler builds every
# kernel; its GPU kernels are Triton, built by Triton's own compiler, which the wrapper
# does not see.

model64 = copy.deepcopy(model).double()
check_ids = list(range(0, n_steps, n_steps // n_check))
with torch.no_grad():
    refs = [model64(make_batch(i)) for i in check_ids]


def serve(name, fn):
    """Serve the stream once and check the outputs against float64: the row's cells,
    one pass over the check batches (to time) and the tokens that pass computes."""
    bucketed, mark = "buckets" in name, "call 1" in name
    records = len(compilation_time_metrics.get("CUDAGraphNode.record", []))
    with captured_log(shown.get(name), limit=2, recompiles=True), torch.no_grad():
        batches = [make_batch(i, bucketed, mark) for i in range(n_steps)]
        for x in batches:
            fn(x)
        xs, err = [batches[i] for i in check_ids], 0.0
        for x, r in zip(xs, refs):  # each read before the next CUDA-graph replay
            o = fn(x)[:, : r.shape[1]]
            err = max(err, (abs(o - r).max() / abs(r).max()).item())
        assert err < 1e-4, f"{name}: error {err:.1e} against float64"
        # A pass to time: without autograd, as served, and keeping no outputs.
        one_pass = torch.no_grad()(lambda: [fn(x).shape for x in xs])
        one_pass()  # a CUDA graph records at its second call
    rec = compilation_time_metrics.get("CUDAGraphNode.record", [])[records:]
    cuda_graphs = f"{len(rec)} in {sum(rec):.2f} s" if "CUDA" in name else None
    padding = 1 - int(seq_lens.sum()) / sum(x.numel() for x in batches)
    return [*[cuda_graphs] * gpu, padding, err], one_pass, sum(x.numel() for x in xs)


strategies = {  # each strategy compiles a function of its own (see above)
    "exact shapes": torch.compile(lambda x: model(x), fullgraph=True),
    "dynamic from call 1": torch.compile(lambda x: model(x), fullgraph=True),
    "buckets": torch.compile(lambda x: model(x), fullgraph=True, dynamic=False),
}
if gpu:
    begin = torch.compiler.cudagraph_mark_step_begin
    graphed = dict(fullgraph=True, mode="reduce-overhead")
    exact = torch.compile(lambda x: model(x), **graphed)
    static = torch.compile(lambda x: model(x), **graphed, dynamic=False)
    strategies["CUDA graphs, exact"] = lambda x: (begin(), exact(x))[1]
    strategies["CUDA graphs, buckets"] = lambda x: (begin(), static(x))[1]
shown = {"exact shapes": r"Recompiling|size mismatch", "CUDA graphs, exact": "distinct"}

watch = measure.watch_cxx()  # None where it cannot watch (not Linux)
# The first Inductor compile in a process also starts its compile workers and imports
# its code generators: a throwaway compile pays for that here, outside the table.
with fresh_cache(), captured_log():  # and its notes about the machine, unshown
    torch.compile(F.gelu)(torch.randn(8, device=device))
rows = {"eager": ((0, None, None), *serve("eager", model))}  # it compiles nothing
for name, fn in strategies.items():  # each from an empty cache, after those before it
    cold = measure.cold_compile(serve, name, fn, device=device, reset=False)
    rows[name] = ((cold.graphs, cold.compiling, cold.cxx), *cold.result)
used = {next(b for b in buckets if b >= w) for w in widths.tolist()}
assert [row[0][0] for row in rows.values()][:4] == [0, 2, 1, len(used)]

# %%
# The table
# ---------
#
# Timings come from the site's measurement core (:ref:`measuring_recipe` explains it).
# ``measure.compare`` times one pass of each strategy over the ``n_check`` batches (a
# "step" in its columns), all strategies in interleaved windows, without the profiler;
# then it profiles a few passes of each to split a pass into parts. It asserts that
# nothing compiled while it timed; the page asserts that no CUDA graph was recorded.
# **tokens/s** counts real tokens only. On a CPU there are no CUDA graphs and no busy
# share: one device runs the Python and computes.
#
# Under the table, a line adds up the compile columns; then each strategy is compared
# with the fastest, and on a GPU a line names the rows bound by the CPU. Then the
# padding: buckets against exact shapes (on a GPU, also with CUDA graphs), as the tokens
# each computed in the timed pass beside the time it took: on a CPU the pass, with the
# interval of the paired windows; on a GPU the GPU's busy time, where padding adds
# kernel work, with 5 % either side for the precision of kernel timestamps. Then their
# paired comparison.

records = len(compilation_time_metrics.get("CUDAGraphNode.record", []))
results = measure.compare({n: row[2] for n, row in rows.items()}, device)
assert len(compilation_time_metrics.get("CUDAGraphNode.record", [])) == records
tokens = int(seq_lens[check_ids].sum())
table = [
    [n, *compiled, *cells, tokens / results[n].ms * 1e3, *results.cells(n)]
    for n, (compiled, cells, _, _) in rows.items()
]
headers = ["strategy", "graphs", "compile (s)", "of which C++ compiler (s)"]
headers += [*["CUDA graphs"] * gpu, "padding", "error", "tokens/s", *results.headers()]
formats = ["", "", ".1f", ".1f", *[""] * gpu, ".0%", ".1e", ",.0f", *results.formats()]
print(f"{device_name}, torch {torch.__version__}; {n_steps} batches of {batch}")
print(tabulate(table, headers, "github", formats, missingval="-"))
if watch:  # the compile columns, in words
    spent, cxx = (sum(rows[n][0][i] for n in strategies) for i in (1, 2))
    print(f"Compiling in all: {spent:.1f} s, of which C++ compiler {cxx:.1f} s")
best = min(results, key=lambda name: results[name].ms)
print(f"Fastest pass: {best}. Each other strategy against it:")
print("\n".join(results.versus(name, best) for name in results if name != best))
if gpu:  # what bounds each row: the busy share of its unprofiled pass
    cpu = [f"{n} ({r.busy:.0f} %)" for n, r in results.items() if r.bound == "CPU"]
    print(f"CPU-bound, the GPU busy under 85 %: {', '.join(cpu) or 'none'}")


def reading(name, ref):
    """name, padded to buckets, against ref, exact widths: padding's cost in time."""
    r, r0, tokens = results[name], results[ref], rows[name][3] / rows[ref][3]
    (cost, lo, hi, _), what = results.ratio(name, ref), "time"  # paired windows
    if r.busy_ms is not None:  # on a GPU, the kernels' time (timestamps hold ~5 %)
        cost, what = r.busy_ms / r0.busy_ms, "GPU busy time"
        lo, hi = cost / 1.05, cost * 1.05
    share = "below" if hi < tokens else "above" if lo > tokens else "holding"
    print(f"Padding, {name} against {ref}: {tokens:.2f}x the tokens computed, for")
    print(f"{cost:.2f}x the {what}, {lo:.2f}-{hi:.2f}x: {share} the tokens' ratio.")
    print(results.versus(name, ref, headline_as=f"{name} vs {ref}"))


reading("buckets", "exact shapes")
if gpu:
    reading("CUDA graphs, buckets", "CUDA graphs, exact")

# %%
# The chart shows each strategy's pass over the ``n_check`` batches; on a GPU each bar
# is split into the time the GPU was busy and the time it waited.

fig, ax = plt.subplots(figsize=(8, 0.5 * len(results) + 1.8), layout="tight")
ax.barh(list(results), [r.ms for r in results.values()], color="0.75", label="waiting")
ax.barh(list(results), [r.busy_ms or 0 for r in results.values()], label="GPU busy")
ax.set(xlabel=f"ms per pass over {n_check} batches (median)", title=device_name)
ax.invert_yaxis()
if gpu:
    ax.legend()
plt.show()

# %%
# Reading the table
# -----------------
#
# **graphs** and **compile** are what each strategy pays before it serves at full speed,
# and **of which C++ compiler** is the part of that compile time during which a C++
# compiler ran. Exact shapes compile twice (the first width, then the dynamic graph at
# the second), dynamic from call 1 once, buckets once per bucket the stream reaches. The
# recompile log above names the guard that made exact shapes compile again: the sequence
# length, index 1. A CUDA-graph row also records graphs while it serves; its column
# gives how many and how long they took. A dynamic graph records one per distinct width
# it meets (the second time it meets it), so its recordings go on as long as new widths
# arrive; past ``torch._inductor.config.triton.cudagraph_dynamic_shape_warn_limit``
# distinct sizes Inductor logs the warning printed above, if the stream got there.
#
# **padding** is the share of computed tokens that are padding, over the whole stream;
# **tokens/s** counts real tokens only, so padding is work that yields no token. A
# padded matrix product does work in proportion to the width, and attention in
# proportion to its square, but a kernel's time follows its work only once the work
# fills the device: a small kernel takes about as long at either width, and on a pass
# bound by the CPU, more GPU work can fill time the GPU would have idled. Padding's
# cost in time can so be more or less than its share of tokens; the lines that put
# computed tokens beside time measure it. What a static graph can win in exchange:
# kernels compiled for known sizes (loop bounds and index arithmetic fixed in the
# code), and, with CUDA graphs, one launch per graph instead of one per kernel.
#
# The comparison lines read two strategies on the same sequences, from the paired
# windows of the interleaved timing: the ratio of the two passes with its interval, a
# tie where the interval holds 1.00x, and otherwise the parts of the pass that moved
# most and how much of the gap they cover. On a CPU the parts are the main thread's
# time by what ran: eager operators and the Python around them, the compiled code and
# the wrappers that enter it, Dynamo's guard checks. On a GPU they are kernel time by
# family (``GPU: matmul``, ``GPU: attention``, ...) and the time the GPU waited,
# charged to what the launching thread was doing (``waiting: ...``).
#
# Which strategy wins depends on the machine, the model's size and the length
# distribution, so measure yours; the lines under the table read this run. The
# mechanisms do not change. Automatic dynamic costs one recompile and no padding beyond
# each batch's longest sequence; ``mark_dynamic`` saves that recompile; buckets trade
# padding for static kernels and a bounded number of graphs. A CUDA graph replays a
# recording of fixed sizes, so exact shapes record one per distinct width that comes
# again, and each recording costs time when it is made (the **CUDA graphs** column) and
# keeps GPU memory (its executable graph and the buffers it was recorded with). Buckets
# bound the recordings at the price of padding: they pay where a stream has many
# distinct widths, where recording takes long against the time served, or where memory
# is short, and they cost where the padded work takes more time than they save.
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
# * :ref:`llm_decode_tutorial`: a decoder's prompt compiled with dynamic lengths, and
#   its one-token decode step with a static shape replayed from a CUDA graph
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
