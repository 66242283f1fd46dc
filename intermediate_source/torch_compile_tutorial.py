"""
.. _torch_compile_tutorial:

Introduction to ``torch.compile``
=================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * What ``torch.compile`` does: TorchDynamo, AOTAutograd and TorchInductor
       * How to compile a function and an ``nn.Module``, and how to check the result
         against a float64 reference
       * What compiling changes for a ResNet-18 in inference and a small GPT in
         training, and how to tell whether a step is bound by the CPU or by the GPU
       * What settings for deployment change: CUDA graphs on a GPU, freezing on a CPU
       * What a cold and a warm compile cost, and what the ``default``,
         ``reduce-overhead`` and ``max-autotune`` modes trade
       * How new input shapes cause recompiles, and how to see and avoid them
       * What a graph break is and how to find one

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later, with torchvision, tabulate and matplotlib
       * Basic PyTorch: tensors, ``nn.Module`` and a training loop
       * Nothing more: a GPU is optional. On a CUDA GPU (compute capability 7.5 or newer,
         as current CUDA wheels need) the page times the GPU; elsewhere it runs on the CPU
         with smaller sizes, where Inductor writes C++ and so needs a C++ compiler and the
         Python headers (``python3-dev`` or similar)
       * On a 2-core CPU it runs in about 1 to 1.5 minutes with about 1.3 GiB of memory.
         On a GPU with more than 24 GiB free it uses about 15 GiB of GPU memory (with
         less, the GPT's batch is smaller)
"""

# %%
# What ``torch.compile`` does
# ---------------------------
#
# ``torch.compile`` takes a function or a module and returns a callable with the same
# signature. Nothing happens until the first call; then three components go to work:
#
# 1. **TorchDynamo** reads the function's Python bytecode as it is about to run and
#    records the PyTorch operations it meets into an FX graph. Python that it cannot
#    record (a ``print``, a branch on a tensor's value) is not an error: Dynamo ends the
#    graph there, lets Python run that piece, and starts a new graph after it. This is a
#    *graph break*.
# 2. **AOTAutograd** traces each graph down to ATen operations and, when it needs
#    gradients, traces its backward ahead of time, so training is compiled too.
# 3. **TorchInductor**, the default backend, fuses operations and generates kernels:
#    Triton on GPUs, C++ with OpenMP on CPUs. Convolutions and most matrix products still
#    go to the vendor libraries (cuDNN, cuBLAS, oneDNN), with Inductor fusing the work
#    around them.
#
# Dynamo also records *guards*: the assumptions a graph relies on (shapes, dtypes, the
# values of Python constants). A later call that passes the guards reuses the compiled
# code; a call that fails them triggers a *recompile*.
#
# Setup
# -----
#
# The page runs on a CUDA GPU when there is one and on the CPU otherwise, with smaller
# models there, and with PyTorch's default numerics on both.

import contextlib
import copy
import io
import logging.handlers
import os
import re
import textwrap
import time

# torch.profiler's tracing library (Kineto) prints notes on each start and stop, and on a
# machine without a GPU an error line about it; level 6 keeps its own log quiet.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
import torchvision
from tabulate import tabulate
from torch import nn
from torch._dynamo.utils import compile_times, counters
from torch._inductor.utils import fresh_cache

import measure

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    CNN_BATCH, IMAGE = 16, 224
    GPT = dict(layers=6, dim=768, heads=12, vocab=8192, seq=1024)
    GPT_BATCH = 8 if torch.cuda.mem_get_info()[0] > 24 * 2**30 else 2
    # bfloat16 autocast where the GPU has native bfloat16 (compute capability 8.0+);
    # False: emulated bfloat16 does not count
    AMP_DTYPE = torch.bfloat16 if torch.cuda.is_bf16_supported(False) else None
else:
    device_name = f"CPU, {torch.get_num_threads()} threads"
    CNN_BATCH, IMAGE = 4, 128
    GPT = dict(layers=2, dim=256, heads=4, vocab=2048, seq=128)
    GPT_BATCH, AMP_DTYPE = 4, None

measure.require(cxx=device == "cpu")  # Inductor's CPU code is C++
print(f"{device_name}, torch {torch.__version__}")
print(f"ResNet-18: batch {CNN_BATCH} at {IMAGE}x{IMAGE}")
print(f"GPT: {GPT}, batch {GPT_BATCH}, autocast {AMP_DTYPE or 'off'}")

# %%
# Measuring
# ---------
#
# Timings come from the site's measurement core (:ref:`measuring_recipe` explains it).
# ``measure.compare`` warms each variant up (compiling it if needed), times the variants
# in interleaved windows without the profiler, then profiles a few steps of each. The
# **step** is the median ms per step, the **spread** the windows' interquartile range.
#
# On a GPU the CPU only queues kernels, and the GPU runs them behind it. Whether a step is
# bound by the CPU or by the GPU decides what can make it faster, so the table measures
# it: **busy %** is the GPU's kernel time per step over the step time measured without
# the profiler. At 85 % or more, **bound** says ``GPU``: the CPU keeps ahead, and less
# GPU work (fusion, lower precision) is what makes the step faster. Below, it says
# ``CPU``: the GPU waited for the CPU (Python, guards, kernel launches), and less CPU
# work per step (fewer operator calls and launches, CUDA graphs) is what makes it
# faster. A CPU both runs the Python and computes, so its tables have no GPU columns.
#
# ``show`` prints the table, then reads each row against the row above it (in a longer
# table, the last row against the first too): both medians, the ratio of their paired
# windows with its interval (a tie when the interval holds 1.00x), and otherwise the
# parts of the step that moved most, which add up to the gap. On a GPU the parts are
# kernel time by family and the time the GPU waited, charged to what the CPU did
# meanwhile; on a CPU, the main thread's time by family. That split says where on the
# GPU's timeline a gap fell, not which side's work changed: in a CPU-bound step the CPU
# keeps issuing work while the kernels run, so its time hides under the busy time too.
# So on a GPU one more line says what set each of the two steps, with the CPU's time to
# issue a step (timed without the profiler and without waiting for the GPU) and the
# GPU's busy time. Where the CPU set both steps, their gap is in the CPU's work per
# step; where the GPU set both, in the kernels. A last line per row names its largest
# parts, and a chart shows the step times, on a GPU split into busy and waiting time.


def show(results, title, more=()):
    names = list(results)
    rows = [[name, *results.cells(name)] for name in names]
    print(tabulate(rows, ["", *results.headers()], "github", ["", *results.formats()]))
    first_last = [(names[0], names[-1])]  # kept as the table's headline result
    for ref, name in [*zip(names, names[1:]), *first_last * (len(names) > 2), *more]:
        label = f"{title}: {name} vs {ref}" if (ref, name) == first_last[0] else None
        print(results.versus(name, ref, headline_as=label))
        a, b = results[ref], results[name]
        if b.busy is not None:  # a GPU: what set each step (one side, or each in turn)
            by = " -> ".join(dict.fromkeys(f"the {x.bound}'s work" for x in (a, b)))
            n0, n = (sum(x.kernels.values()) for x in (a, b))
            print(
                f"  {a.bound}-bound -> {b.bound}-bound: each step set by {by}. The CPU "
                f"issued a step in {a.issue_ms:.3f} -> {b.issue_ms:.3f} ms; the GPU ran "
                f"{n0:.0f} -> {n:.0f} kernels, busy {a.busy_ms:.3f} -> {b.busy_ms:.3f} ms"
            )
    for name, r in results.items():  # where each step's time went, largest parts first
        top = sorted(r.parts.items(), key=lambda kv: -kv[1])[:3]
        spent = "; ".join(f"{part} {100 * ms / r.ms:.0f} %" for part, ms in top)
        print(f"{name}: {r.ms:.3f} ms; largest parts: {spent}")
    busy = [results[name].busy_ms or 0.0 for name in names]  # 0 on a CPU
    waiting = [results[name].ms - b for name, b in zip(names, busy)]
    fig, ax = plt.subplots(figsize=(7, 1.8 + 0.45 * len(names)), layout="constrained")
    ax.barh(names, busy, color="C0", label="GPU busy")
    grey = "0.75" if device == "cuda" else "C0"  # the whole step on a CPU
    ax.barh(names, waiting, left=busy, color=grey, label="GPU waiting")
    if device == "cuda":
        ax.legend(loc="lower right")
    ax.invert_yaxis()
    ax.set(xlabel="ms per step (median)", title=f"{title}, {device_name}")
    ax.set_xlim(0, 1.4 * max(r.ms for r in results.values()))  # room for the legend
    plt.show()


# %%
# Compiled code adds and multiplies in another order than eager code, so the two rarely
# agree to the last bit, and comparing them with each other says nothing about which is
# closer to the truth. ``check`` runs the comparison that PyTorch's own accuracy checker
# uses: the relative error of eager and of compiled to a float64 run of the same
# computation, with compiled allowed a small multiple of eager's error (2 in float32, 3
# under a low-precision autocast) plus a tiny floor.


def check(label, eager, compiled, ref, factor=2.0):
    errors = [float((t.double() - ref).norm() / ref.norm()) for t in (eager, compiled)]
    print(f"{label}: error vs float64, eager {errors[0]:.1e}, compiled {errors[1]:.1e}")
    assert errors[1] <= factor * errors[0] + 1e-5, (label, errors)


# %%
# Compiling a function
# --------------------
#
# Here is the tanh approximation of GELU written out by hand. In eager PyTorch each
# arithmetic operation is its own operator call and its own kernel, which reads its
# input from memory and writes its result back. Compiled, Inductor fuses the whole
# expression into one kernel that reads ``x`` once and writes the result once, called
# from one compiled function. (On a GPU whose L2 cache holds ``x``, 50 MB on an H100,
# these kernels can run faster than a copy to and from its memory.)


def gelu_tanh(x):
    inner = 0.7978845608 * (x + 0.044715 * x**3)  # sqrt(2 / pi) = 0.7978845608
    return 0.5 * x * (1.0 + torch.tanh(inner))


compiled_gelu = torch.compile(gelu_tanh)
x = torch.randn(4096, 1024, device=device)
check("gelu_tanh", gelu_tanh(x), compiled_gelu(x), gelu_tanh(x.double()))
variants = {"eager": lambda: gelu_tanh(x), "compiled": lambda: compiled_gelu(x)}
show(measure.compare(variants, device), "gelu_tanh")

# %%
# The first call of ``compiled_gelu``, in ``check``, compiled it; ``measure.compare``
# times later calls only, and asserts that nothing compiled while it timed.
# ``@torch.compile`` written above a ``def`` does the same as ``torch.compile(fn)``.
#
# Fusing the eight operations saves work on two sides. On the data: one kernel reads
# and writes a tensor of ``x``'s size where eight kernels did, which is less time in
# kernels. On the calls: the CPU calls one compiled function that launches one kernel,
# instead of eight operators that launch one kernel each; but the compiled call has
# costs of its own, paid on every call whatever the size: checking its guards and
# entering the compiled code. On a GPU a step shows the saving of the side that set it,
# which the line under the comparison reads from this run's measurements: a step the
# CPU set gains only what the CPU saved, however much kernel time went. On a CPU the
# main thread both calls the operators and runs them (with the other cores), so the
# parts split its time into eager operators and compiled code.
#
# Compiling a module
# ------------------
#
# ``torch.compile(module)`` returns a wrapper, an ``OptimizedModule``, that shares its
# parameters with the original; its ``state_dict`` keys gain an ``_orig_mod.`` prefix.
# ``module.compile()`` compiles the module in place and leaves its type and its
# ``state_dict`` keys unchanged, which is handy when checkpoints must load in
# uncompiled code.

mlp = nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 10)).to(device)
inputs = torch.randn(64, 256, device=device)
wrapped = torch.compile(mlp)
in_place = copy.deepcopy(mlp)
in_place.compile()
with torch.no_grad():
    reference = copy.deepcopy(mlp).double()(inputs.double())
    check("torch.compile(mlp)", mlp(inputs), wrapped(inputs), reference)
    check("mlp.compile()", mlp(inputs), in_place(inputs), reference)
for module in (wrapped, in_place):
    print(f"{type(module).__name__}: state_dict keys {list(module.state_dict())[:2]}")

# %%
# ResNet-18 inference: cold and warm compiles
# -------------------------------------------
#
# Now a real model, torchvision's ResNet-18 (random weights). Inductor keeps what it
# compiles in a cache on disk, keyed by the graph and the settings, so a second process
# that compiles the same model finds it there. Two caches take part: AOTAutograd's, keyed
# by the graph Dynamo captured, and Inductor's FX graph cache, keyed by the graph
# AOTAutograd hands it. A **cold** compile starts from empty caches: inside
# ``fresh_cache()`` Inductor's cache folder (both caches) and Triton's point at a new,
# empty folder, and ``torch._dynamo.reset()`` makes Dynamo forget what it compiled.
# Compiling again inside the same block is a **warm** compile. The process's one-time
# start-up of Inductor (importing its code generators, starting its compile workers) was
# paid by the compiles above, so each figure is a compile and one forward pass, and
# ``compiling`` is the part of it spent in Dynamo, AOTAutograd and Inductor. Of that,
# ``C++ compiler`` is the time a C++ compiler ran (its runs counted once, compile
# workers included): ``measure.watch_cxx()`` has Inductor call the compiler through a
# wrapper that logs each run. Inductor's CPU kernels are C++; its GPU kernels are
# Triton, compiled by Triton's own compiler.
#
# ``torch.compiler.cudagraph_mark_step_begin()`` starts a new iteration for the CUDA
# graphs of ``mode="reduce-overhead"`` (used below); it does nothing without them.

cnn = torchvision.models.resnet18(weights=None).to(device).eval()
images = torch.randn(CNN_BATCH, 3, IMAGE, IMAGE, device=device)
compiled_cnn = torch.compile(cnn)


@torch.no_grad()
def infer(net, inputs=images):
    torch.compiler.cudagraph_mark_step_begin()
    return net(inputs)


table, watch = [], measure.watch_cxx()  # None where it cannot watch (not Linux)
with fresh_cache():
    for label in ["cold (empty caches)", "warm (caches filled)"]:
        torch._dynamo.reset()
        counters.clear()
        start, wall = time.perf_counter(), time.time()
        logits = infer(compiled_cnn)
        getattr(torch, device).synchronize()  # torch.cuda's, or torch.cpu's (no-op)
        seconds = time.perf_counter() - start
        timed = dict(zip(*compile_times("csv", aggregate=True)))
        cxx = watch.seconds(wall, time.time()) if watch else float("nan")
        aot, fx = counters["aot_autograd"], counters["inductor"]
        table.append(
            [label, seconds, float(timed["_compile.compile_inner"]), cxx]
            + [aot["autograd_cache_miss"], aot["autograd_cache_hit"]]
            + [fx["fxgraph_cache_miss"], fx["fxgraph_cache_hit"]]
        )
cold, warm = table
assert cold[4] > 0 and cold[6] > 0 and cold[5] == cold[7] == 0, cold  # compiled
assert warm[5] > 0 and warm[7] > 0 and warm[4] == warm[6] == 0, warm  # loaded
headers = ["", "first call (s)", "compiling (s)", "C++ compiler (s)"]
headers += ["AOT miss", "AOT hit", "FX miss", "FX hit"]
print(tabulate(table, headers, "github", ".1f"))
print(
    f"The warm first call took {100 * warm[1] / cold[1]:.0f} % of the cold one's time, "
    f"and {100 * warm[2] / cold[2]:.0f} % of its compiling; a C++ compiler ran "
    f"{cold[3]:.1f} s of the cold call ({100 * cold[3] / cold[1]:.0f} %) and "
    f"{warm[3]:.1f} s of the warm one."
)
measure.headline("ResNet-18 cold compile, first call", cold[1], "s")
with torch.no_grad():
    reference = copy.deepcopy(cnn).double()(images.double())
check("ResNet-18 logits", infer(cnn), logits, reference)

# %%
# On the warm compile Dynamo still runs: it traces the model's bytecode into a graph and
# builds its guards, since those live in the process only. The AOTAutograd cache then
# hits, so AOTAutograd does not trace the graph into ATen operations again: the cache
# entry names the compiled graph in the FX graph cache, which hits too, and the generated
# code is loaded from disk: no lowering and no code generation. The table shows the
# hits, and how long a C++ compiler ran in each call.
# (On NVIDIA GPUs of compute capability 8.0 or newer, PyTorch runs float32 convolutions
# in cuDNN with TF32 by default, ``torch.backends.cudnn.allow_tf32``, in eager and
# compiled code alike, so both errors there include TF32's rounding.)
# Keeping the cache between runs (``TORCHINDUCTOR_CACHE_DIR``) gives a new process the
# warm compile; :ref:`compile_time` measures where compile time goes and how to cut it.
#
# Modes, and what compiling changes in inference
# ----------------------------------------------
#
# ``mode`` picks a preset of Inductor options:
#
# * ``"default"`` fuses and generates kernels, and compiles quickly. Start here.
# * ``"reduce-overhead"`` also records the compiled kernels into **CUDA graphs** and
#   replays them, so that one launch replaces many: it removes CPU launch cost, which
#   matters when a step is CPU-bound. The graphs keep a memory pool of their own, each new
#   shape records new graphs, and an output is overwritten by the next replay unless you
#   clone it. CUDA graphs are a GPU feature: on a CPU this mode adds nothing, and the
#   page skips it there.
# * ``"max-autotune"`` benchmarks several implementations of each matrix product and
#   convolution (Triton templates beside cuBLAS and cuDNN) and keeps the fastest, and uses
#   CUDA graphs. Timing the candidates lengthens its compile, so this page does not run
#   it: it is for code that runs long enough to repay that, such as a deployed model.
#
# ``torch._inductor.list_mode_options`` shows what each preset sets:

for mode in ["default", "reduce-overhead", "max-autotune"]:
    print(f"{mode:16s} {torch._inductor.list_mode_options(mode)}")

# %%
# The table times a forward pass of ResNet-18, eager and compiled, and then a setting
# for deployment on each device. On a GPU, that is ``reduce-overhead``, and the
# ``bound`` column says whether the GPU sat waiting for the CPU, and so whether less GPU
# work or less CPU work per step can help (CUDA graphs cut the CPU's launch work).
#
# A CPU has no CUDA graphs; what is set there for inference is the memory layout and
# *freezing*. oneDNN's convolutions run in the channels-last layout (NHWC), which
# Inductor picks for compiled code by itself and an eager model gets from
# ``.to(memory_format=torch.channels_last)``. Without freezing, the weights are inputs
# of the compiled graph, so on a CPU Inductor's code copies every convolution weight
# into that layout on every call. ``torch._inductor.config.freezing = True`` makes
# Inductor treat the weights as constants when it compiles under ``torch.no_grad()``:
# it folds each batch norm into the convolution before it (constant folding), fuses
# ReLUs and residual additions into oneDNN's convolutions, and converts each weight
# once, ahead of time, into the blocked layout oneDNN computes with (weight
# prepacking). The compiled model no longer sees later changes to the weights:
# freezing is for inference. The setting must be in Inductor's config while the model
# compiles, since Dynamo reads it there to pass the weights on as constants;
# ``config.patch`` sets it for that first call only, which ``measure.cold_compile``
# times from an empty cache. Passed as a ``torch.compile`` option too, it makes this a
# compile of its own: Dynamo would otherwise reuse ``compiled_cnn``'s graph, which
# wraps the same model with the same options.

variants = {"eager": lambda: infer(cnn)}
if device == "cpu":
    cl_cnn = copy.deepcopy(cnn).to(memory_format=torch.channels_last)
    cl_images = images.to(memory_format=torch.channels_last)
    variants["eager, channels_last"] = lambda: infer(cl_cnn, cl_images)
variants["compiled, default"] = lambda: infer(compiled_cnn)
if device == "cuda":
    cudagraph_cnn = torch.compile(cnn, mode="reduce-overhead")
    variants["reduce-overhead"] = lambda: infer(cudagraph_cnn)
else:
    frozen_cnn = torch.compile(cnn, options={"freezing": True})
    with torch._inductor.config.patch(freezing=True):
        frozen = measure.cold_compile(infer, frozen_cnn, device=device, reset=False)
    check("frozen ResNet-18", infer(cnn), frozen.result, reference)
    assert counters["inductor"]["binary_folding"] > 0  # batch norms folded: it froze
    cxx = frozen.cxx if watch else float("nan")
    print(f"Freezing's cold compile: {frozen.seconds:.1f} s, C++ compiler {cxx:.1f} s")
    variants["compiled, freezing"] = lambda: infer(frozen_cnn)
like_for_like = [("eager, channels_last", "compiled, freezing")] * (device == "cpu")
show(measure.compare(variants, device), "ResNet-18 inference", like_for_like)

# %%
# The convolutions run in cuDNN or oneDNN in every row. What compiling changes is the
# work around them: batch norms, ReLUs and residual additions fused into fewer kernels,
# which is less memory traffic and, on a GPU, fewer launches; each compiled call also
# checks its guards. On a CPU, the unfrozen compiled code also copies the weights, as
# said above, which its ``compiled code`` part includes. The lines under the table
# read each row against the row above it, so the parts of each gap name what a setting
# changed; on a GPU, the line under each comparison says whether the CPU's work or the
# GPU's set each step; the last lines say where each row's time went. On a CPU, the
# last comparison is like for like: freezing against eager in the channels-last layout,
# which compiled code uses too, so the layout's own effect is not in its gap (the line
# before it, against eager in the default layout, includes it). A row's spread is the
# scatter of its own windows, which a busy machine widens, at times past a gap; the
# verdicts rest on the paired intervals, which compare windows timed back to back. How
# much of a step lies outside the convolutions depends on the machine, so measure with
# the sizes, precision and hardware you will run with.
#
# Training a small GPT
# --------------------
#
# Training is where ``torch.compile`` is used most. The model is a GPT-style stack of
# ``nn.TransformerEncoderLayer`` blocks with causal attention, token and position
# embeddings, and an output layer. On a GPU it runs under bfloat16 ``torch.autocast``,
# the usual way to train, where the GPU supports it.


class TinyGPT(nn.Module):
    def __init__(self, layers, dim, heads, vocab, seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(0.02 * torch.randn(seq, dim))
        block = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, 0.0, "gelu", batch_first=True, norm_first=True
        )  # dropout 0, GELU, layer norm before attention and MLP
        self.blocks = nn.TransformerEncoder(
            block, layers, norm=nn.LayerNorm(dim), enable_nested_tensor=False
        )
        self.head = nn.Linear(dim, vocab)
        mask = nn.Transformer.generate_square_subsequent_mask(seq)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos
        return self.head(self.blocks(x, mask=self.mask, is_causal=True))


gpt = TinyGPT(**GPT).to(device)
tokens = torch.randint(0, GPT["vocab"], (GPT_BATCH, GPT["seq"]), device=device)
targets = torch.roll(tokens, -1, dims=1)  # next-token prediction


def loss_of(net, dtype=AMP_DTYPE):
    with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
        logits = net(tokens)
        # autocast computes cross_entropy in float32
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    return loss, logits


# %%
# Compiling the model compiles its forward and, through AOTAutograd, its backward. One
# step from the same weights in eager, compiled and float64 (no autocast) shows that the
# logits and every gradient agree.

eager_gpt = copy.deepcopy(gpt)
compiled_gpt = torch.compile(copy.deepcopy(gpt))
results = []
runs = [(eager_gpt, AMP_DTYPE), (compiled_gpt, AMP_DTYPE), (gpt.double(), None)]
for net, dtype in runs:
    loss, logits = loss_of(net, dtype)
    loss.backward()
    grads = torch.cat([p.grad.flatten().double() for p in net.parameters()])
    results.append((logits.detach().double(), grads))
factor = 2.0 if AMP_DTYPE is None else 3.0
check("GPT logits", results[0][0], results[1][0], results[2][0], factor)
check("GPT gradients", results[0][1], results[1][1], results[2][1], factor)
del gpt, runs, net, loss, logits, grads, results  # frees the float64 model

# %%
# A training step is forward, backward and the optimizer. On a GPU the default AdamW
# (the ``foreach`` implementation) runs its update as a series of operations over lists
# of tensors, each called from Python and launching its own kernels, which costs CPU
# time on every step. ``fused=True`` does the whole update in one fused operation and is
# how AdamW is best run on a GPU (CPUs have a fused AdamW too). Both rows below use the
# same fused AdamW, so they differ only in the model, eager or compiled; the optimizer
# itself is not compiled. Compiling it too is the subject of
# :ref:`compiled_training_tutorial`.


def make_step(net):
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_of(net)[0].backward()
        optimizer.step()

    return step


variants = {"eager": make_step(eager_gpt), "compiled": make_step(compiled_gpt)}
show(measure.compare(variants, device), "GPT training step, fused AdamW")

# %%
# In training, each elementwise operation of the forward (layer norms, GELU, residual
# additions) has a matching one in the backward for Inductor to fuse, and AOTAutograd
# may recompute cheap activations in the backward instead of storing them and reading
# them back. The matrix products and the attention run in the same library kernels in
# both rows, so what compiling can change is the rest of the step: the largest parts of
# each row show how much of the step that rest is, and on a GPU the line under the
# comparison says whether the CPU's work or the GPU's set each step.
#
# Dynamic shapes and recompiles
# -----------------------------
#
# A graph is compiled for the shapes of its first inputs, and its guards check them on
# each call. When a size changes, the guard fails and Dynamo recompiles; the second time
# it marks the size that changed as *dynamic* (a symbol such as ``s0``), so the new graph
# serves every size. This section is about what Dynamo captures, not speed, so it uses
# ``backend="eager"``, which runs the captured graphs without Inductor; the guards and
# recompiles are the same.
#
# ``torch._logging.set_logs(recompiles=True)`` is the in-program form of
# ``TORCH_LOGS="recompiles"``. ``trimmed_logs`` turns a log on for a block and prints the
# first lines of each record, with file paths shortened to file names.


PATH = re.compile(r"(?<!\S)/\S*/")  # a file path up to its file name


@contextlib.contextmanager
def trimmed_logs(lines=3, **artifacts):
    records = logging.handlers.BufferingHandler(capacity=1000)
    logging.getLogger("torch._dynamo").addHandler(records)
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # torch's own, untrimmed copy
            torch._logging.set_logs(**artifacts)
            yield
    finally:
        torch._logging.set_logs()  # back to the defaults, printing to stderr
        logging.getLogger("torch._dynamo").removeHandler(records)
    for record in records.buffer:
        for line in record.getMessage().splitlines()[:lines]:
            print(f"[log] {PATH.sub('', line.strip())}")


def row_rms(x):
    return x.pow(2).mean(dim=1).sqrt()


torch._dynamo.reset()
counters.clear()
compiled_rms = torch.compile(row_rms, backend="eager")
with trimmed_logs(recompiles=True):
    for n in [8, 16, 32]:
        t = torch.randn(n, 16)
        torch.testing.assert_close(compiled_rms(t), row_rms(t))
print(f"3 sizes: {counters['stats']['unique_graphs']} graphs compiled")
# 32 rows reused the dynamic graph: no third frame compiled, no third graph
assert counters["frames"]["ok"] == counters["stats"]["unique_graphs"] == 2

# %%
# The log names the guard that failed: the size of ``x``'s first dimension. Two graphs
# served three sizes. When you know in advance which size varies (a batch, a sequence
# length), ``torch._dynamo.mark_dynamic(tensor, dim)`` makes it dynamic from the first
# call and saves the recompile; ``dynamic=False`` turns the automatic step off (a new
# graph per size). Dynamo still treats sizes 0 and 1 as special. A function recompiles at
# most ``torch._dynamo.config.recompile_limit`` times (8 by default); past that, a call
# that matches none of its graphs runs eagerly, and Dynamo logs a warning.
# :ref:`dynamic_shapes_tutorial` measures these choices, and :ref:`debugging_tutorial`
# shows how to find what keeps recompiling.
#
# Graph breaks
# ------------
#
# A graph break is not an error, but each one ends a graph: Inductor cannot fuse across
# it, and the Python in between runs eagerly. This function has two common ones: a
# ``print``, and ``.item()``, which turns a tensor into a Python number for an ``if``.
# ``torch._dynamo.explain(fn)(*args)`` runs it under Dynamo and reports the graphs and,
# for each break, the reason and Dynamo's hint for avoiding it. (Dynamo also logs a
# warning at the first ``.item()`` break of a process; ``trimmed_logs(lines=0)`` keeps
# that copy off the page.)


def noisy_clip(x):
    y = F.layer_norm(x, x.shape[-1:])
    print("layer norm done")
    if y.max().item() > 3:
        y = y.clamp(-3, 3)
    return y * 2


x = 2 * torch.rand(16, 32, generator=torch.Generator().manual_seed(0)) - 1  # in [-1, 1)
x[0, 0] = 50.0  # an outlier: the only value above 3 after the layer norm
with trimmed_logs(lines=0):
    explanation = torch._dynamo.explain(noisy_clip)(x)
print(f"graphs: {explanation.graph_count}, breaks: {explanation.graph_break_count}")
for reason in explanation.break_reasons:
    frame, lines = reason.user_stack[-1], reason.reason.splitlines()
    print(f"line {(frame.line or '').strip()!r}: {lines[0]}")
    for hint in [line.strip() for line in lines if "Hint:" in line][:1]:
        print(textwrap.fill(hint, 88, initial_indent="  ", subsequent_indent="    "))
assert explanation.graph_break_count == 2

# %%
# When a region must be one graph, for speed or before ``torch.export``, pass
# ``fullgraph=True``: the first break then raises an error instead of splitting the
# graph. Here is that error's first line:

torch._dynamo.reset()
try:
    torch.compile(noisy_clip, backend="eager", fullgraph=True)(x)
    raise AssertionError("fullgraph=True did not raise")
except torch._dynamo.exc.Unsupported as error:
    print(f"{type(error).__name__}: {str(error).splitlines()[0]}")


# %%
# Removing the breaks means staying in tensors: no ``print`` inside the compiled region,
# and ``torch.where`` on the 0-d tensor ``y.max() > 3`` in place of the ``if`` on a Python
# number. ``torch.where`` computes both sides and picks one, so the rewrite clamps only
# when the maximum exceeds 3, as ``noisy_clip`` does: an input whose maximum is at most 3
# comes back unclamped even where its minimum is below -3. Compiled with
# ``fullgraph=True``, it is checked against ``noisy_clip`` on one input of each branch.


def quiet_clip(x):
    y = F.layer_norm(x, x.shape[-1:])
    return torch.where(y.max() > 3, y.clamp(-3, 3), y) * 2


low = x.clone()
low[0, 0] = -50.0  # below -3 after the layer norm, while the maximum stays under 3
torch._dynamo.reset()
counters.clear()
compiled_quiet = torch.compile(quiet_clip, backend="eager", fullgraph=True)
for name, t in [("max > 3", x), ("max <= 3, min < -3", low)]:
    y = F.layer_norm(t, t.shape[-1:])
    assert (y.max() > 3) == (t is x) and (y.min() < -3) == (t is low), name
    with contextlib.redirect_stdout(io.StringIO()):  # noisy_clip's print
        expected = noisy_clip(t)
    torch.testing.assert_close(compiled_quiet(t), expected)
    print(f"{name}: compiled quiet_clip equals noisy_clip")
assert counters["stats"]["unique_graphs"] == 1
print(f"fullgraph=True: {counters['stats']['unique_graphs']} graph, no break")

# %%
# ``TORCH_LOGS="graph_breaks"`` lists the breaks of a whole program as it runs, and
# ``@torch.compiler.disable`` keeps a function out of compilation on purpose;
# :ref:`debugging_tutorial` covers these and ``tlparse``.
#
# Conclusion
# ----------
#
# ``torch.compile`` turns a function or a module into compiled code with one line, and a
# float64 reference tells whether it still computes the same thing. What it saves
# depends on what sets a step: fusion cuts both the GPU's work and the calls and
# launches the CPU makes, CUDA graphs (``mode="reduce-overhead"``) cut the CPU's launch
# work further, and the GPU's busy share (kernel time from ``torch.profiler`` over the
# step time measured without it) says which side a step waits on, and so which saving it
# can show. On a CPU, compiling fuses the work between the library kernels (matrix
# products, convolutions), and for inference, freezing also folds batch norms into the
# convolutions and packs their weights once. Compile time is paid once per process and
# set of shapes (on a CPU, partly in the C++ compiler, which the cold compile measured);
# with warm caches Dynamo still traces, but AOTAutograd's trace and Inductor's code
# generation are loaded from disk. New shapes cause recompiles and unsupported Python
# causes graph breaks; both are visible in the logs and with ``torch._dynamo.explain``.
#
# Further reading
# ---------------
#
# * :ref:`dynamic_shapes_tutorial` goes further into dynamic shapes: what a graph is
#   specialized on, how to choose what is dynamic, and how to serve variable lengths.
# * :ref:`compile_time`: where compile time goes, caches and regional compilation
# * :ref:`debugging_tutorial`: graph breaks, recompiles and ``tlparse`` in depth
# * :ref:`compiled_training_tutorial`: compiling the whole training step, optimizer
#   included
# * :ref:`compiled_autograd_tutorial`: capturing the whole backward pass
# * :ref:`llm_decode_tutorial`: a language model's decode step, compiled and replayed
#   from CUDA graphs, measured against the memory roofline
# * :ref:`triton_custom_op_tutorial`: your own Triton kernel as an operator that
#   ``torch.compile`` compiles around, measured against Inductor's
# * `torch.compile API reference
#   <https://docs.pytorch.org/docs/stable/generated/torch.compile.html>`__
# * `The torch.compile programming model
#   <https://docs.pytorch.org/docs/stable/compile/programming_model.html>`__
# * `CUDA graph trees, behind mode="reduce-overhead"
#   <https://docs.pytorch.org/docs/stable/torch.compiler_cudagraph_trees.html>`__

# sphinx_gallery_thumbnail_number = 2
