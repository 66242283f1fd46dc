"""
.. _torch_compile_tutorial:

Introduction to ``torch.compile``
=================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How to compile a function, a decorated function and an ``nn.Module``, and how to
         check the compiled result against eager PyTorch
       * What compiling a torchvision ResNet buys in inference and in training, measured
         with warm-up and medians, and what the first (compiling) call costs
       * What the ``default``, ``reduce-overhead`` and ``max-autotune`` modes trade, and
         when to pick each
       * How ``torch.compile`` copes with data-dependent control flow, NumPy and SciPy calls
         and plain Python objects, compared with ``torch.fx.symbolic_trace`` and
         ``torch.export``
       * How to see what it did: the captured graphs, ``torch._dynamo.explain``, graph-break
         and recompile logs, and ``fullgraph=True``

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later, with torchvision, NumPy, SciPy, tabulate and matplotlib
       * Basic PyTorch: tensors, ``nn.Module`` and a training loop
       * A CUDA GPU of compute capability 7.0 or newer for the timings; runs on CPU with
         smaller sizes
"""

# %%
# What ``torch.compile`` does
# ---------------------------
#
# ``torch.compile`` speeds up PyTorch code while you keep writing ordinary Python. You hand
# it a function or a module and get back a callable with the same signature. Nothing happens
# until the first call; then three components go to work:
#
# 1. **TorchDynamo** reads the Python bytecode of the function as it is about to run and
#    records the PyTorch operations it meets into an FX graph. Python it cannot record (a
#    call into a C extension, a branch on a tensor's value) is not an error: Dynamo ends
#    the graph there, lets Python run that piece, and starts a new graph after it. This is
#    a *graph break*.
# 2. **AOTAutograd** traces the backward of each graph ahead of time, so training is
#    compiled too.
# 3. **TorchInductor**, the default backend, fuses operations and generates kernels: Triton
#    on GPUs, C++ with OpenMP on CPUs.
#
# Dynamo also writes down *guards*, the assumptions the graph relies on (shapes, dtypes,
# the values of Python constants). Later calls that pass the guards reuse the compiled code;
# a call that fails them triggers a recompile.
#
# Setup
# -----
#
# The page runs on a CUDA GPU when there is one and on the CPU otherwise, with smaller
# sizes there so that it finishes in a few minutes on a laptop.

import contextlib
import copy
import io
import logging
import os
import re
import statistics
import sys
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
import scipy.special
import torch
import torch.nn.functional as F
import torchvision
from tabulate import tabulate
from torch import nn
from torch.utils import benchmark

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"

if device == "cuda":
    # Full float32 on this page, TF32 tensor cores off for matmuls and for cuDNN's
    # convolutions (which use them by default). TF32 rounds inputs to 10 mantissa bits;
    # eager and compiled code fuse and order operations differently, and through the
    # backward of a ResNet those roundings add up to gradients that differ by several
    # percent, too much to check that the compiled model computes the same thing.
    # Inductor suggests TF32 when it is off; in your own code, weigh it for speed.
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    warnings.filterwarnings("ignore", message=".*TensorFloat32 tensor cores.*")
    device_name = torch.cuda.get_device_name()
    MODEL_NAME, BATCH, IMAGE = "ResNet-18", 16, 224
    MLP_BATCH, MLP_WIDTH = 32, 1024
    # Float32 rounding in different kernels and a different order of operations.
    TOL = {"rtol": 1e-3, "atol": 1e-3}
    GRAD_REL_TOL = 2e-2
else:
    device_name = f"CPU, {torch.get_num_threads()} threads"
    # Compiling ResNet-18 for training takes well over a minute on a 2-core CPU;
    # torchvision's ResNet class with one block per stage (ResNet-10) has the same kinds
    # of layers and about half as many. 32x32 images, as in CIFAR-10, keep timings short.
    MODEL_NAME, BATCH, IMAGE = "ResNet-10", 8, 32
    MLP_BATCH, MLP_WIDTH = 32, 256
    TOL = {"rtol": 1e-4, "atol": 1e-4}
    GRAD_REL_TOL = 1e-3

print(f"device: {device} ({device_name})")
print(f"torch {torch.__version__}, torchvision {torchvision.__version__}")
print(f"model: {MODEL_NAME}, batch {BATCH}, images {IMAGE}x{IMAGE}")
print(f"MLP for the modes: batch {MLP_BATCH}, width {MLP_WIDTH}")


# %%
# Two timing helpers serve the whole page. ``first_call`` times the first call of a
# compiled function on its own, because it includes compiling. ``median_ms`` warms the
# function up and then reports a median: on a GPU, of ``N_CUDA_CALLS`` calls each timed
# with CUDA events; on a CPU, of at least ``MIN_CPU_SAMPLES`` blocks of calls timed by
# ``torch.utils.benchmark.Timer.blocked_autorange`` (with all CPU threads: ``Timer`` uses
# one thread unless told otherwise). Never time a compiled function without warming it
# up, and never trust a single run.

N_CUDA_CALLS = 50
MIN_CPU_SAMPLES = 10


def sync():
    if device == "cuda":
        torch.cuda.synchronize()


def first_call(fn):
    """Run fn once; return its result and the wall time in seconds."""
    sync()
    start = time.perf_counter()
    result = fn()
    sync()
    return result, time.perf_counter() - start


def median_ms(fn):
    """Median milliseconds per call of fn after warm-up, and how many samples it used."""
    for _ in range(3):
        fn()
    sync()
    if device == "cuda":
        times = []
        for _ in range(N_CUDA_CALLS):
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end))
        return statistics.median(times), len(times)
    timer = benchmark.Timer(
        stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()
    )
    times = []
    while len(times) < MIN_CPU_SAMPLES:  # slow functions need more than one round
        times += timer.blocked_autorange(min_run_time=0.5).times  # seconds per call
    return statistics.median(times) * 1e3, len(times)


# %%
# Basic usage
# -----------
#
# Compiling a function
# ~~~~~~~~~~~~~~~~~~~~
#
# Here is the tanh approximation of GELU written out by hand. In eager PyTorch each
# arithmetic operation is its own kernel that reads its input from memory and writes its
# result back; compiled, Inductor fuses the whole expression into one kernel that reads
# ``x`` once and writes the result once.


def gelu_tanh(x):
    inner = 0.7978845608 * (x + 0.044715 * x**3)  # sqrt(2 / pi) = 0.7978845608
    return 0.5 * x * (1.0 + torch.tanh(inner))


compiled_gelu = torch.compile(gelu_tanh)

x = torch.randn(4096, 1024, device=device)
y, gelu_first_s = first_call(lambda: compiled_gelu(x))
torch.testing.assert_close(y, gelu_tanh(x))
# A different implementation of the same formula: allow a few float32 ulps.
torch.testing.assert_close(y, F.gelu(x, approximate="tanh"), rtol=1e-5, atol=1e-5)

gelu_eager_ms, n_eager = median_ms(lambda: gelu_tanh(x))
gelu_compiled_ms, n_compiled = median_ms(lambda: compiled_gelu(x))
print(f"compiled, first call: {gelu_first_s * 1e3:9.1f} ms  (traces, compiles, runs)")
print(f"compiled, later     : {gelu_compiled_ms:9.3f} ms  (median of {n_compiled})")
print(f"eager               : {gelu_eager_ms:9.3f} ms  (median of {n_eager})")

# %%
# The first call paid for compiling (and, being the first compile in this process, for
# loading the compiler); later calls only run the fused kernel. The output equals both the
# eager version of the same function and PyTorch's built-in ``F.gelu``:
# ``torch.testing.assert_close`` raises if they differ by more than float32 rounding.
#
# Using the decorator
# ~~~~~~~~~~~~~~~~~~~
#
# ``@torch.compile`` on a definition does the same thing. Here it compiles an RMSNorm,
# which we check against ``torch.nn.functional.rms_norm``.


@torch.compile
def rms_norm(x, weight, eps: float = 1e-6):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


weight = torch.randn(1024, device=device)
torch.testing.assert_close(
    rms_norm(x, weight), F.rms_norm(x, (1024,), weight, eps=1e-6), rtol=1e-5, atol=1e-5
)
print("decorated rms_norm matches F.rms_norm")

# %%
# Compiling an ``nn.Module``
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# There are two ways to compile a module. ``torch.compile(module)`` returns a wrapper, an
# ``OptimizedModule``, that shares the parameters with the original module; its
# ``state_dict`` keys gain an ``_orig_mod.`` prefix. ``module.compile()`` compiles the
# module in place and leaves its type and its ``state_dict`` keys as they were, which is
# handy when checkpoints must load in uncompiled code.

mlp = nn.Sequential(nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 10)).to(device)
inputs = torch.randn(64, 1024, device=device)

compiled_mlp = torch.compile(mlp)
mlp_in_place = copy.deepcopy(mlp)
mlp_in_place.compile()

with torch.no_grad():
    expected = mlp(inputs)
    torch.testing.assert_close(compiled_mlp(inputs), expected, **TOL)
    torch.testing.assert_close(mlp_in_place(inputs), expected, **TOL)

for label, module in [
    ("torch.compile(mlp)", compiled_mlp),
    ("mlp.compile()", mlp_in_place),
]:
    keys = list(module.state_dict())
    print(f"{label:20s} -> {type(module).__name__:16s} state_dict keys: {keys[:2]}")

# %%
# Both compiled modules agree with the eager one.
#
# Speedups on a real model
# ------------------------
#
# Now a torchvision ResNet, in inference and in a full training step (forward, loss,
# backward, optimizer step), timed with ``first_call`` and ``median_ms`` from the setup.
#
# On the GPU we compile with ``mode="reduce-overhead"``, which adds CUDA graphs (see the
# next section): at batch 16 a ResNet spends much of its time launching kernels. There
# are no CUDA graphs on a CPU, so there we use the default mode.
#
# ``torch.compiler.cudagraph_mark_step_begin()`` tells the CUDA graph runtime that a new
# iteration begins, so that it may reuse the memory of the previous iteration's outputs.
# It does nothing when no CUDA graphs are in use.

MODEL_MODE = "reduce-overhead" if device == "cuda" else "default"


def build_model():
    if MODEL_NAME == "ResNet-18":
        return torchvision.models.resnet18()
    blocks_per_stage = [1, 1, 1, 1]  # ResNet-18 has [2, 2, 2, 2]
    return torchvision.models.resnet.ResNet(
        torchvision.models.resnet.BasicBlock, blocks_per_stage
    )


images = torch.randn(BATCH, 3, IMAGE, IMAGE, device=device)
labels = torch.randint(0, 1000, (BATCH,), device=device)

# %%
# Inference
# ~~~~~~~~~

model = build_model().to(device).eval()
compiled_model = torch.compile(model, mode=MODEL_MODE)


def eager_inference():
    with torch.no_grad():
        return model(images)


def compiled_inference():
    torch.compiler.cudagraph_mark_step_begin()
    with torch.no_grad():
        return compiled_model(images)


logits, infer_first_s = first_call(compiled_inference)
expected = eager_inference()
infer_diff = (logits - expected).abs().max().item()
torch.testing.assert_close(logits, expected, **TOL)
del logits, expected

infer_eager_ms, n_eager = median_ms(eager_inference)
infer_compiled_ms, n_compiled = median_ms(compiled_inference)
samples = [n_eager, n_compiled]
print(f"max |compiled - eager| of the logits: {infer_diff:.2e}")
print(f"first call (compiles): {infer_first_s:6.1f} s")
print(
    f"eager {infer_eager_ms:8.2f} ms (median of {n_eager}), "
    f"compiled {infer_compiled_ms:8.2f} ms (median of {n_compiled})"
)

# %%
# Most of that first call was compiling. Inductor keeps what it compiled in caches, in
# memory and on disk, keyed by the graph. ``torch._dynamo.reset()`` drops everything
# Dynamo holds, so compiling the same model again shows roughly what a new process with a
# warm cache pays: Dynamo still traces the model, but the kernels are loaded, not built.

torch._dynamo.reset()
recompiled_model = torch.compile(model, mode=MODEL_MODE)


def recompiled_inference():
    torch.compiler.cudagraph_mark_step_begin()
    with torch.no_grad():
        return recompiled_model(images)


_, infer_warm_s = first_call(recompiled_inference)
print(f"first call, cold cache: {infer_first_s:6.1f} s")
print(f"first call, warm cache: {infer_warm_s:6.1f} s")

# %%
# Training
# ~~~~~~~~
#
# Two identical copies of a fresh model, one eager and one compiled, each with its own
# SGD optimizer. Only the model is compiled; the loss, ``backward()`` and the optimizer
# step are written as usual, and the backward of the compiled model runs the backward
# graph that AOTAutograd traced. One step of each must give the same loss and the same
# gradients.

train_model = build_model().to(device).train()
eager_net = copy.deepcopy(train_model)
net_to_compile = copy.deepcopy(train_model)
compiled_net = torch.compile(net_to_compile, mode=MODEL_MODE)


def make_train_step(net):
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    def train_step():
        torch.compiler.cudagraph_mark_step_begin()
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(images), labels)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return train_step


eager_step = make_train_step(eager_net)
compiled_step = make_train_step(compiled_net)

compiled_loss, train_first_s = first_call(compiled_step)
eager_loss = eager_step()
torch.testing.assert_close(compiled_loss, eager_loss, **TOL)
# compiled_net shares its parameters with net_to_compile. Gradients of the first and last
# layers, compared as a whole: ||compiled - eager|| / ||eager||. Each entry of the first
# layer's gradient sums many thousands of products of both signs, which mostly cancel, and
# the compiled backward adds them in another order, so single entries can differ by far
# more than their size suggests while the gradient as a whole agrees closely. A wrong
# gradient would be off by order one.
for name in ["conv1.weight", "fc.weight"]:
    grad_compiled = net_to_compile.get_parameter(name).grad
    grad_eager = eager_net.get_parameter(name).grad
    rel = ((grad_compiled - grad_eager).norm() / grad_eager.norm()).item()
    print(f"gradient of {name:13s} relative difference {rel:.1e}")
    assert rel < GRAD_REL_TOL, (name, rel)
print(
    f"loss of the first step: eager {eager_loss.item():.5f}, compiled {compiled_loss.item():.5f}"
)

train_eager_ms, n_eager = median_ms(eager_step)
train_compiled_ms, n_compiled = median_ms(compiled_step)
samples += [n_eager, n_compiled]
print(f"first call (compiles forward and backward): {train_first_s:6.1f} s")
print(
    f"eager {train_eager_ms:8.2f} ms (median of {n_eager}), "
    f"compiled {train_compiled_ms:8.2f} ms (median of {n_compiled})"
)

# %%
# Results
# ~~~~~~~

speedup_rows = [
    [
        "inference",
        infer_eager_ms,
        infer_compiled_ms,
        infer_eager_ms / infer_compiled_ms,
        infer_first_s,
    ],
    [
        "training step",
        train_eager_ms,
        train_compiled_ms,
        train_eager_ms / train_compiled_ms,
        train_first_s,
    ],
]
print(
    f"{MODEL_NAME}, batch {BATCH}, {IMAGE}x{IMAGE}, float32, mode={MODEL_MODE!r}, "
    f"on {device_name}, medians of at least {min(samples)} samples"
)
print(
    tabulate(
        speedup_rows,
        headers=["", "eager ms", "compiled ms", "speedup", "first call s"],
        floatfmt=("", ".2f", ".2f", ".2f", ".1f"),
    )
)

fig, ax = plt.subplots(figsize=(6.4, 3.6))
positions = np.arange(len(speedup_rows))
ax.bar(positions - 0.2, [r[1] for r in speedup_rows], width=0.4, label="eager")
ax.bar(positions + 0.2, [r[2] for r in speedup_rows], width=0.4, label="torch.compile")
for pos, row in zip(positions, speedup_rows):
    ax.annotate(f"{row[3]:.2f}x", (pos + 0.2, row[2]), ha="center", va="bottom")
ax.text(0.99, 0.97, "labels: speedup", transform=ax.transAxes, ha="right", va="top")
ax.set_xticks(positions, [r[0] for r in speedup_rows])
ax.set_ylabel("median time per call (ms)")
ax.set_ylim(top=1.2 * max(max(r[1], r[2]) for r in speedup_rows))  # room for labels
ax.set_title(f"{MODEL_NAME}, batch {BATCH}, on {device_name}", fontsize=10)
ax.legend(loc="upper left")
fig.tight_layout()
plt.show()

# %%
# Where does a gain come from? The convolutions run in the same cuDNN or oneDNN kernels
# in eager and compiled code. What changes is the work around them: Inductor fuses each
# batch norm with its ReLU and with the residual addition, so activations cross memory
# fewer times, and on the GPU, CUDA graphs launch the whole model at once instead of
# kernel by kernel. How much that buys depends on how much of the time the convolutions
# take. This page keeps TF32 off, so on a GPU the float32 convolutions are slow and take
# most of each step, and the part that compiling can shrink is small; with TF32 or
# bfloat16 the convolutions get several times faster and the fused work around them
# becomes a larger share. On a small CPU the gap is small too, and can even reverse.
# Measure on the hardware and precision you will run with.
#
# Compile time grows with the model: the first-call column above is paid once per process
# and per input shape, and a larger network (a DenseNet or a transformer) takes minutes to
# compile cold. The warm-cache first call printed above shows what keeping Inductor's
# cache between runs (``TORCHINDUCTOR_CACHE_DIR``) saves.
#
# Modes
# -----
#
# ``mode`` picks a preset of Inductor options:
#
# * ``"default"`` fuses and generates kernels, and compiles quickly. Start here.
# * ``"reduce-overhead"`` also records the compiled code into **CUDA graphs** and replays
#   them, which removes the CPU cost of launching each kernel. It pays off when kernels are
#   small and many (small batches, inference, small models). The graphs keep a memory
#   pool of their own, so it uses more memory; static shapes work best, since each new
#   shape records new graphs; and an output is overwritten by the next replay unless you
#   clone it. It does nothing on a CPU.
# * ``"max-autotune"`` benchmarks several generated implementations of each matmul and
#   convolution (Triton templates next to cuBLAS and cuDNN) and keeps the fastest, tunes
#   the other kernels' launch parameters, and uses CUDA graphs. Compiling takes much
#   longer, so it is for code that will run for a long time, such as a deployed model or a
#   long training run. ``"max-autotune-no-cudagraphs"`` tunes without CUDA graphs.
#
# ``torch._inductor.list_mode_options(mode)`` shows what each preset sets. A small MLP at
# a small batch makes the differences visible: its matmuls are tiny, so launching kernels
# is a large part of its run time.

width = MLP_WIDTH
layers = []
for _ in range(4):
    layers += [nn.Linear(width, width), nn.GELU()]
mode_mlp = nn.Sequential(*layers).to(device).eval()
mode_inputs = torch.randn(MLP_BATCH, width, device=device)

with torch.no_grad():
    mode_expected = mode_mlp(mode_inputs)
    mode_eager_ms, n_eager = median_ms(lambda: mode_mlp(mode_inputs))
samples = [n_eager]

mode_rows = [["eager", "", "", mode_eager_ms, 1.0]]
for mode in ["default", "reduce-overhead", "max-autotune"]:
    torch._dynamo.reset()  # start each mode from scratch
    compiled = torch.compile(mode_mlp, mode=mode)

    def run(compiled=compiled):
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            return compiled(mode_inputs)

    # max-autotune writes a table per tuned operator to stderr: keep it off the page.
    with contextlib.redirect_stderr(io.StringIO()):
        out, first_s = first_call(run)
    torch.testing.assert_close(out, mode_expected, **TOL)
    del out
    ms, n = median_ms(run)
    samples.append(n)
    options = ", ".join(sorted(torch._inductor.list_mode_options(mode))) or "(none)"
    mode_rows.append([mode, options, first_s, ms, mode_eager_ms / ms])

print(
    f"4 x (Linear {width}x{width} + GELU), batch {MLP_BATCH}, float32, on {device_name}, "
    f"medians of at least {min(samples)} samples"
)
print(
    tabulate(
        mode_rows,
        headers=["mode", "options it sets", "first call s", "median ms", "vs eager"],
        floatfmt=("", "", ".1f", ".3f", ".2f"),
    )
)

fig, ax = plt.subplots(figsize=(6.4, 3.2))
ax.barh(
    [r[0] for r in mode_rows][::-1], [r[3] for r in mode_rows][::-1], color="tab:blue"
)
ax.set_xlabel("median time per call (ms)")
ax.set_title(f"MLP, batch {MLP_BATCH}, width {width}, on {device_name}", fontsize=10)
fig.tight_layout()
plt.show()

# %%
# How to read the table: on a GPU, ``default`` already fuses each bias and GELU into one
# kernel, but still launches every kernel from Python; ``reduce-overhead`` replays them all
# from one CUDA graph, which is where a model this small gains most; ``max-autotune`` can
# also replace the cuBLAS matmuls with tuned Triton kernels that apply the bias and GELU
# on the way out, and it has the longest first call. On a CPU there are no CUDA graphs, and
# the matmul templates that ``max-autotune`` tunes are meant mostly for GPUs, so the three
# modes usually compile to the same or nearly the same code, and their differences there
# are mostly noise.
#
# How ``torch.compile`` differs from earlier capture approaches
# ---------------------------------------------------------------
#
# PyTorch has had ways to capture a program as a graph before ``torch.compile``:
#
# * ``torch.fx.symbolic_trace`` runs the function with *proxy* objects in place of tensors
#   and records what is done to them. The program must never need a proxy's value.
# * ``torch.export`` captures a whole program ahead of time as one graph, for deployment
#   without Python. Whatever it cannot put in that one graph is an error that you fix in
#   the code (for example with ``torch.cond`` for a branch).
# * TorchScript (``torch.jit.script`` and ``torch.jit.trace``) is deprecated in current
#   PyTorch: calling it warns and points to ``torch.compile`` and ``torch.export``. This page
#   does not run it.
#
# ``torch.compile`` works on Python bytecode while the program runs, so it sees real
# values, and where it cannot capture something it breaks the graph instead of failing.
# Four small functions show the difference:


def branchy(x):
    if x.sum() > 0:  # the branch depends on the values in x
        return torch.sin(x)
    return torch.cos(x)


def with_numpy(x):
    a = x.numpy()
    return torch.from_numpy(np.clip(a, -1.0, 1.0) * 2.0)


def with_scipy(x):
    y = torch.sigmoid(x)
    return torch.from_numpy(scipy.special.erf(y.numpy())) + 1.0


class Scale:
    def __init__(self, factor, activation):
        self.factor = factor
        self.activation = activation


def with_python_types(x, scale, extras):
    for value in extras.values():  # a dict of tensors
        x = x + value
    y = x * scale.factor  # a Python float on a plain Python object
    return torch.relu(y) if scale.activation == "relu" else torch.tanh(y)


# %%
# For ``torch.compile`` we pass a backend that only records the graphs Dynamo hands it and
# runs them as they are. A backend is any callable that takes an FX ``GraphModule`` and
# example inputs and returns something to call; this section is about what gets captured,
# so there is no need to generate kernels. ``torch.export`` takes an ``nn.Module``, so each
# function is wrapped in one. NumPy only sees host memory, so these examples use CPU
# tensors.

captured_graphs = []


def recording_backend(gm, example_inputs):
    captured_graphs.append(gm)
    return gm.forward


class AsModule(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def short_error(e):
    first_line = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first_line[:110]}"


x_cpu = torch.randn(8)
cases = {
    "data-dependent branch": (branchy, (x_cpu,)),
    "NumPy calls": (with_numpy, (x_cpu,)),
    "SciPy call": (with_scipy, (x_cpu,)),
    "Python objects": (
        with_python_types,
        (x_cpu, Scale(2.0, "relu"), {"bias": torch.ones(8)}),
    ),
}

capture_rows, errors = [], []
for name, (fn, args) in cases.items():
    row = [name]
    try:
        torch.fx.symbolic_trace(fn)
        row.append("ok")
    except Exception as e:
        row.append(type(e).__name__)
        errors.append(f"symbolic_trace, {name}: {short_error(e)}")
    try:
        # torch.export prints the part of the graph it did capture to stderr; keep it off.
        with contextlib.redirect_stderr(io.StringIO()):
            torch.export.export(AsModule(fn), args)
        row.append("ok")
    except Exception as e:
        row.append(type(e).__name__)
        errors.append(f"export, {name}: {short_error(e)}")
    captured_graphs.clear()
    result = torch.compile(fn, backend=recording_backend)(*args)
    torch.testing.assert_close(result, fn(*args))
    n_graphs = len(captured_graphs)
    row.append(f"ok, {n_graphs} graph" + ("s" if n_graphs > 1 else ""))
    capture_rows.append(row)

print(
    tabulate(
        capture_rows, headers=["", "fx.symbolic_trace", "torch.export", "torch.compile"]
    )
)
print()
print("\n".join(errors))

# %%
# ``torch.compile`` ran all four and matched eager PyTorch. What it did in each case:
#
# * **Data-dependent branch.** It captured ``x.sum() > 0`` in one graph, let Python take the
#   branch with the real value, and captured the branch taken in a second graph. The other
#   branch is compiled if and when an input takes it.
# * **NumPy calls.** Dynamo understands NumPy: it rewrote ``np.clip`` and the
#   multiplication as PyTorch operations, all in one graph.
# * **SciPy call.** ``scipy.special.erf`` is compiled C code that Dynamo cannot look into,
#   so it broke the graph: the sigmoid is one graph, SciPy runs as plain Python, and the
#   ``+ 1.0`` is another graph.
# * **Python objects.** Dynamo looked into the dict and the plain object while tracing:
#   the tensor in the dict became an input of the graph, and the float and the string
#   became constants in it, protected by guards.
#
# ``symbolic_trace`` never sees real values, so a branch on a tensor, iteration over an
# argument or a tensor handed to NumPy is an error. ``torch.export``, in its default
# non-strict mode, runs the Python code on *fake* tensors that have shapes but no data,
# and it needs the whole program in one graph and inputs it can flatten (tensors, numbers
# and strings, and lists, tuples and dicts of them). So the branch, NumPy on a fake tensor
# and a plain Python object are errors there too.
#
# Guards decide when the captured graph is still valid. Dynamo guarded on
# ``scale.activation == "relu"``, so calling with ``"tanh"`` recompiles. The
# ``recompiles`` log says which guard failed. Torch logs go to stderr through Python's
# ``logging``; the small handler below prints the lines we want on stdout, with file paths
# shortened to ``file:line``. ``torch._logging.set_logs`` is the in-code equivalent of the
# ``TORCH_LOGS`` environment variable (here ``TORCH_LOGS="recompiles"``).

_PATH = re.compile(r"(?:/[^/\s:\"']+)+/([^/\s:\"']+)")


def _summarise(artifact, lines):
    """Keep the lines of a log record that matter to this page."""
    if artifact == "recompiles":
        # Guard lines read "- 6/0: <guard>  # <source line>"; keep <guard>.
        failed = [re.match(r"\s*- \d+/\d+: (.*?)(\s+#.*)?$", ln) for ln in lines]
        return lines[:1] + [f"  failed guard: {m.group(1)}" for m in failed if m][:2]
    if artifact == "graph_breaks":
        reasons = [ln.replace("Graph Break Reason:", "").strip() for ln in lines[1:]]
        reason = next(
            (r for r in reasons if r and not r.startswith("Encountered graph break")),
            "",
        )
        return [lines[0], f"  reason: {reason}"]
    return lines


class PrintToStdout(logging.Handler):
    def __init__(self, artifacts):
        super().__init__()
        self.artifacts = artifacts

    def emit(self, record):
        artifact = record.name.rpartition(".__")[2]
        if artifact not in self.artifacts:
            return
        lines = [
            _PATH.sub(r"\1", ln.rstrip())
            for ln in record.getMessage().splitlines()
            if ln.strip()
        ]
        for line in _summarise(artifact, lines):
            print(f"[{artifact}] {line}", file=sys.stdout)


@contextlib.contextmanager
def torch_logs_to_stdout(*artifacts):
    handler = PrintToStdout(artifacts)
    dynamo_logger = logging.getLogger("torch._dynamo")
    try:
        # torch's own handler prints the whole records, paths included, to stderr;
        # send that copy nowhere.
        with contextlib.redirect_stderr(io.StringIO()):
            torch._logging.set_logs(**{a: True for a in artifacts})
            dynamo_logger.addHandler(handler)
            yield
    finally:
        dynamo_logger.removeHandler(handler)
        torch._logging.set_logs()  # back to the defaults


torch._dynamo.reset()  # forget the graphs captured for the table above
compiled_types = torch.compile(with_python_types, backend=recording_backend)
extras = {"bias": torch.ones(8)}
captured_graphs.clear()
with torch_logs_to_stdout("recompiles"):
    for activation in ["relu", "relu", "tanh"]:
        out = compiled_types(x_cpu, Scale(2.0, activation), extras)
        torch.testing.assert_close(
            out, with_python_types(x_cpu, Scale(2.0, activation), extras)
        )
print(f"3 calls, {len(captured_graphs)} graphs captured")

# %%
# The second call with ``"relu"`` reused the graph; ``"tanh"`` failed the guard and got a
# graph of its own. Guards are cheap to check, but a constant that changes on every call
# would mean a recompile on every call. For numbers Dynamo avoids that: once it sees one
# change (a step counter passed as a Python int, say), it recompiles with the number as an
# input of the graph instead of a constant. Strings stay constants.
#
# Graph breaks
# ------------
#
# A graph break is not an error, but each one ends a graph: Inductor cannot fuse across
# it, and the Python in between runs eagerly. This function has two typical breaks: a
# branch on a tensor's value, and ``.item()``, which turns a tensor into a Python number
# (here to record a statistic).

stats = []


def clipped_norm(x):
    y = F.layer_norm(x, x.shape[-1:])
    if y.max() > 3:  # break 1: the branch needs the value of y.max()
        y = y.clamp(-3, 3)
    mean_abs = y.abs().mean().item()  # break 2: .item() leaves the graph
    stats.append(mean_abs)
    return y * 2


x_small = torch.randn(16, 32)
x_small[0, 0] = 50.0  # an outlier: after the layer norm it is above 3
x_small = x_small.to(device)

# %%
# Seeing the graphs
# ~~~~~~~~~~~~~~~~~
#
# A backend that prints each graph it receives shows exactly what Dynamo captured. We drop
# the ``x = None`` statements that FX appends to free memory early, to keep the code
# short. The ``graph_breaks`` log (``TORCH_LOGS="graph_breaks"``) tells where each break
# happened and why.


def printing_backend(gm, example_inputs):
    ops = [
        n
        for n in gm.graph.nodes
        if n.op in ("call_function", "call_method", "call_module")
    ]
    print(f"--- graph with {len(ops)} operations ---")
    for line in gm.code.strip().splitlines():
        line = re.sub(r";\s+(\w+\s*=\s*)+None$", "", line)
        if line.strip():
            print(line)
    return gm.forward


with torch_logs_to_stdout("graph_breaks"):
    out = torch.compile(clipped_norm, backend=printing_backend)(x_small)
stats.clear()
torch.testing.assert_close(out, clipped_norm(x_small))

# %%
# Three graphs: the layer norm and the comparison; then, after Python took the branch
# (the outlier in ``x_small`` is above 3), the clamp and ``abs().mean()`` for the
# statistic; then, after ``.item()`` ran in Python, the final multiplication.
#
# ``torch._dynamo.explain``
# ~~~~~~~~~~~~~~~~~~~~~~~~~
#
# ``torch._dynamo.explain(fn)(*args)`` runs the function under Dynamo and returns a
# summary instead of compiling it. Printing the whole object also lists every guard, which
# runs to hundreds of lines for a real model; the counts and the break reasons are what
# matter here.

explanation = torch._dynamo.explain(clipped_norm)(x_small)
print(f"graphs: {explanation.graph_count}")
print(f"graph breaks: {explanation.graph_break_count}")
print(f"operations captured: {explanation.op_count}")
for i, br in enumerate(explanation.break_reasons, 1):
    frame = br.user_stack[-1]
    where = f"{os.path.basename(frame.filename)}:{frame.lineno}"
    print(f"break {i} at {where}: {br.reason.strip().splitlines()[0]}")

# %%
# ``generic_jump TensorVariable()`` is Dynamo's name for a jump (an ``if``) on a tensor.
#
# ``fullgraph=True``: breaks become errors
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# When a region must compile as one graph (for the speed, or before exporting it), pass
# ``fullgraph=True``. The first graph break then raises instead of splitting the graph.

torch._dynamo.reset()
try:
    torch.compile(clipped_norm, fullgraph=True)(x_small)
    print("compiled as one graph")
except Exception as e:  # torch._dynamo.exc.Unsupported
    print(f"fullgraph=True raised {short_error(e)}")

# %%
# Removing the breaks is a matter of staying in tensors. ``torch.where`` computes both
# sides and selects one, which is exactly what the ``if`` did, without reading a value in
# Python. The statistic stays a tensor in the list and becomes a number later, outside
# the compiled code (``torch.stack(stats).tolist()`` once per epoch, say).


def clipped_norm_fixed(x):
    y = F.layer_norm(x, x.shape[-1:])
    y = torch.where(y.max() > 3, y.clamp(-3, 3), y)
    stats.append(y.abs().mean().detach())
    return y * 2


stats.clear()
fixed = torch.compile(clipped_norm_fixed, fullgraph=True)
out = fixed(x_small)
# Inductor's layer norm reduces in a different order than eager's: allow a few ulps.
torch.testing.assert_close(out, clipped_norm(x_small), rtol=1e-5, atol=1e-5)
torch.testing.assert_close(
    stats[0], torch.tensor(stats[1], device=device), rtol=1e-5, atol=1e-5
)
explanation = torch._dynamo.explain(clipped_norm_fixed)(x_small)
print(
    f"fixed version: {explanation.graph_count} graph, {explanation.graph_break_count} graph breaks"
)

# %%
# The fixed version compiles as a single graph with ``fullgraph=True``, gives the same
# output as the original, and records the same statistic.
#
# Conclusion
# ----------
#
# ``torch.compile`` turns a function or a module into a compiled callable with one line,
# and ``torch.testing.assert_close`` against eager PyTorch is the way to check it. On a
# torchvision ResNet you measured what it buys in inference and in training, and what the
# first, compiling call costs; the caches make later compiles much cheaper. ``default`` is
# the mode to start with, ``reduce-overhead`` removes launch overhead with CUDA graphs,
# and ``max-autotune`` trades a long compile for tuned kernels. Unlike
# ``torch.fx.symbolic_trace`` and ``torch.export``, it runs any Python, breaking the graph
# where it must, and a recording backend, ``torch._dynamo.explain``, the ``graph_breaks``
# and ``recompiles`` logs and ``fullgraph=True`` show where that happened and why.
#
# Further reading
# ---------------
#
# * `torch.compile API reference
#   <https://docs.pytorch.org/docs/stable/generated/torch.compile.html>`__
# * `torch.compiler documentation <https://docs.pytorch.org/docs/stable/torch.compiler.html>`__
# * `torch.export documentation <https://docs.pytorch.org/docs/stable/export.html>`__
# * `CUDA graph trees, behind mode="reduce-overhead"
#   <https://docs.pytorch.org/docs/stable/torch.compiler_cudagraph_trees.html>`__
# * `The graph break catalogue
#   <https://meta-pytorch.github.io/compile-graph-break-site/>`__, linked from graph break
#   messages
# * :ref:`compiled_autograd_tutorial` on this site, for capturing the whole backward pass

# sphinx_gallery_thumbnail_number = 1
