"""
.. _torch_compile_tutorial:

Introduction to ``torch.compile``
=================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How to compile a function, a decorated function and an ``nn.Module``, and how to
         check that compiled code computes the same function as eager PyTorch
       * What compiling buys on a torchvision ResNet (inference and training) and on a small
         GPT-style transformer trained under autocast, measured fairly, and why it can cost
         time on a small model or a small CPU
       * What a cold and a warm compile cost, and how to tell them apart
       * What the ``default``, ``reduce-overhead`` and ``max-autotune`` modes trade
       * How ``torch.compile`` handles new input shapes (dynamic shapes, ``mark_dynamic``),
         when it recompiles and what happens at the recompile limit
       * How to find and remove graph breaks: ``TORCH_LOGS``, ``torch._dynamo.explain``,
         ``fullgraph=True``, ``torch.cond``, ``torch.compiler.disable`` and
         ``torch.compiler.set_stance``, and how ``torch.export`` differs

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later, with torchvision, NumPy, SciPy, tabulate and matplotlib
       * Basic PyTorch: tensors, ``nn.Module`` and a training loop
       * A CUDA GPU of compute capability 7.5 or newer for the timings (current CUDA wheels
         need it); runs on CPU with smaller sizes. On a CPU, Inductor needs a C++ compiler
         and the Python headers (``python3-dev`` or similar)
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
#    on GPUs, C++ with OpenMP on CPUs. Convolutions and most matrix products still go to
#    the vendor libraries (cuDNN and cuBLAS, oneDNN and MKL), but Inductor decides the
#    memory layout of their inputs and outputs and fuses the work around them.
#
# Dynamo also writes down *guards*, the assumptions the graph relies on (shapes, dtypes,
# the values of Python constants). Later calls that pass the guards reuse the compiled code;
# a call that fails them triggers a recompile. The `torch.compile programming model
# <https://docs.pytorch.org/docs/stable/compile/programming_model.html>`__ describes these
# rules in full.
#
# Setup
# -----
#
# The page runs on a CUDA GPU when there is one and on the CPU otherwise, with PyTorch's
# default numerics on both (on a GPU, cuDNN may use TF32 tensor cores for float32
# convolutions; float32 matrix products stay in full float32). The models and sizes are
# chosen per device and printed.

import contextlib
import copy
import io
import logging
import re
import statistics
import sys
import tempfile
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
import scipy.special
import torch
import torch._dynamo
import torch._inductor.utils
import torch.nn.functional as F
import torchvision
from tabulate import tabulate
from torch import nn
from torch._dynamo.utils import counters
from torch.utils import benchmark

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"

if device == "cuda":
    # On GPUs with TF32 tensor cores, Inductor's first compile of a float32 matrix
    # product warns that TF32 is "available but not enabled" and suggests
    # torch.set_float32_matmul_precision("high"): faster matrix products, 10 mantissa
    # bits in their inputs instead of 23. It is advice about speed; this page keeps
    # PyTorch's default and silences the hint, which would appear wherever a compile
    # first met a matmul.
    warnings.filterwarnings("ignore", message=".*TensorFloat32 tensor cores")
    device_name = torch.cuda.get_device_name()
    free_gib = torch.cuda.mem_get_info()[0] / 2**30
    # A torchvision ResNet-18 at batch 16, 224x224, inference and a training step.
    # mode="reduce-overhead" adds CUDA graphs: at batch 16 a ResNet launches many small
    # kernels, and replaying them from a graph removes the launch cost.
    CNN_NAME, CNN_BATCH, IMAGE = "ResNet-18", 16, 224
    CNN_OPTIONS = {"mode": "reduce-overhead"}
    TRAIN_CNN = True
    # A GPT-style stack of transformer blocks trained under autocast. Batch 8 x 1024
    # tokens needs several GiB of activations; smaller GPUs get batch 2.
    GPT = dict(layers=6, dim=768, heads=12, vocab=8192, seq=1024)
    GPT["batch"] = 8 if free_gib > 24 else 2
    bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    AMP_DTYPE = torch.bfloat16 if bf16 else torch.float16
    MLP_BATCH, MLP_WIDTH = 32, 1024
else:
    device_name = f"CPU, {torch.get_num_threads()} threads"
    # Compiling is the expensive part on a small CPU: Inductor writes C++ and runs the
    # C++ compiler on it. A ResNet-18 training graph takes minutes on two cores, so the
    # CPU runs the CNN in inference only, and with one block per stage (ResNet-10,
    # the same kinds of layers as ResNet-18, half as many), at the usual 224x224.
    # freezing=True lets Inductor treat the weights as constants: it folds each batch
    # norm into its convolution and stores the weights in oneDNN's preferred layout.
    CNN_NAME, CNN_BATCH, IMAGE = "ResNet-10", 2, 224
    CNN_OPTIONS = {"options": {"freezing": True}}
    TRAIN_CNN = False
    # The transformer is trained in float32: CPUs without native bfloat16 instructions
    # run bfloat16 matrix products slowly, in eager and compiled code alike.
    GPT = dict(layers=2, dim=256, heads=4, vocab=2048, seq=128, batch=4)
    AMP_DTYPE = None
    MLP_BATCH, MLP_WIDTH = 32, 256

print(f"device: {device} ({device_name})")
print(f"torch {torch.__version__}, torchvision {torchvision.__version__}")
print(
    f"CNN: {CNN_NAME}, batch {CNN_BATCH}, {IMAGE}x{IMAGE}, compiled with {CNN_OPTIONS}"
)
print(
    f"GPT: {GPT['layers']} blocks, width {GPT['dim']}, {GPT['heads']} heads, "
    f"batch {GPT['batch']} x {GPT['seq']} tokens, "
    f"{'autocast ' + str(AMP_DTYPE) if AMP_DTYPE else 'float32'}"
)
if device == "cpu":
    print("no CUDA GPU: running on the CPU with smaller models")

# %%
# Helpers
# ~~~~~~~
#
# **Timing.** ``first_call`` times one call on its own, because a first call includes
# compiling. ``median_ms`` warms a function up, then reports the median: on a GPU, of
# ``N_CUDA_CALLS`` calls each timed with CUDA events; on a CPU, of at least
# ``MIN_CPU_SAMPLES`` blocks of calls timed by ``torch.utils.benchmark.Timer`` with all
# CPU threads (``Timer`` uses one thread unless told otherwise, while Inductor's C++ code
# uses them all; Dynamo also guards on the thread count, so a compiled function timed
# under another count would recompile).

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
# **Checking the numbers.** Compiled code adds and multiplies in a different order than
# eager code, so the two rarely agree bit for bit, and comparing them with each other
# says nothing about which is closer to the truth. We do what PyTorch's own accuracy
# checker (``torch._dynamo.utils.same``) does: run the same model and inputs in float64
# as a reference, measure the relative error of eager and of compiled to it, and require
# compiled's error to be at most a small multiple of eager's. The multiple is 2 for
# float32 and 3 for a low-precision autocast, as in that checker: two results with
# rounding errors of the same size, made in a different order, can land a little further
# apart than one of them; a wrong result lands orders of magnitude further. A tiny floor
# covers the case where eager happens to be almost exact.

ERROR_FLOOR = 1e-5


def rel_error(result, reference):
    """||result - reference|| / ||reference||, computed in float64."""
    return ((result.double() - reference).norm() / reference.norm()).item()


def check_against_float64(label, eager, compiled, reference, factor=2.0):
    eager_err = rel_error(eager, reference)
    compiled_err = rel_error(compiled, reference)
    print(
        f"{label:30s} relative error to float64: eager {eager_err:.1e}, "
        f"compiled {compiled_err:.1e}"
    )
    assert compiled_err <= factor * eager_err + ERROR_FLOOR, (label, compiled_err)


def all_grads(net):
    """Every parameter's gradient in one float64 vector (a copy)."""
    return torch.cat([p.grad.flatten().double() for p in net.parameters()])


# %%
# **Cold compiles.** Inductor keeps what it compiles in a cache on disk (and Triton keeps
# its kernels in another), keyed by the graph and the settings. A process that finds
# them there compiles much faster: that is a *warm* compile. To measure a *cold* compile,
# ``cold_cache`` points both caches at a new, empty folder (``fresh_cache``, called
# ``fresh_inductor_cache`` in older releases) and clears the counters that Inductor
# keeps; ``cache_report`` reads them.

fresh_cache = getattr(torch._inductor.utils, "fresh_cache", None)
if fresh_cache is None:  # older PyTorch
    fresh_cache = torch._inductor.utils.fresh_inductor_cache


@contextlib.contextmanager
def cold_cache():
    torch._dynamo.reset()  # forget every compiled function
    counters.clear()
    # An explicit parent folder: fresh_cache makes a new, empty folder inside it.
    with fresh_cache(dir=tempfile.gettempdir()):
        yield


def cache_report():
    inductor = counters["inductor"]
    aot = counters["aot_autograd"]
    return (
        f"FX graph cache: {inductor['fxgraph_cache_hit']} hits, "
        f"{inductor['fxgraph_cache_miss']} misses; AOTAutograd cache: "
        f"{aot['autograd_cache_hit']} hits, {aot['autograd_cache_miss']} misses"
    )


# %%
# **Logs.** ``torch._logging.set_logs(recompiles=True)`` is the in-code form of the
# environment variable ``TORCH_LOGS="recompiles"``. PyTorch's log records go to stderr
# through Python's ``logging``, whole and with full file paths; the handler below prints
# the lines of each record that matter for this page on stdout, with paths shortened to
# ``file:line``.

_PATH = re.compile(r"(?:/[^/\s:\"']+)+/([^/\s:\"']+)")


def _keep(artifact, lines):
    """The lines of a log record that this page shows."""
    if artifact == "recompiles":
        # Guard lines read "- 6/0: <guard>  # <source line>"; keep <guard>.
        failed = [re.match(r"\s*- \d+/\d+: (.*?)(\s+#.*)?$", ln) for ln in lines]
        return lines[:1] + [f"  failed guard: {m.group(1)}" for m in failed if m][:1]
    if artifact == "graph_breaks":
        reasons = [ln.replace("Graph Break Reason:", "").strip() for ln in lines[1:]]
        reason = next(
            (r for r in reasons if r and not r.startswith("Encountered graph break")),
            "",
        )
        return [lines[0], f"  reason: {reason}"]
    if artifact == "warning":
        # Drop the source-line comment that Dynamo appends to a guard.
        return [ln.split("  #")[0].rstrip() for ln in lines[:3]]
    return lines


class PrintToStdout(logging.Handler):
    def __init__(self, artifacts):
        super().__init__()
        self.artifacts = artifacts

    def emit(self, record):
        artifact = record.name.rpartition(".__")[2]
        if record.levelno >= logging.WARNING and "__" not in record.name:
            artifact = "warning"
        if artifact not in self.artifacts:
            return
        lines = [
            _PATH.sub(r"\1", ln.rstrip())
            for ln in record.getMessage().splitlines()
            if ln.strip()
        ]
        label = record.levelname.lower() if artifact == "warning" else artifact
        for line in _keep(artifact, lines):
            print(f"[{label}] {line}", file=sys.stdout)


def short_error(e, width=110):
    """The exception's type and the first line of its message, paths shortened."""
    first_line = (str(e).strip().splitlines() or [""])[0]
    first_line = _PATH.sub(r"\1", first_line)
    if len(first_line) > width:  # cut at a space, not inside a word
        first_line = first_line[:width].rsplit(" ", 1)[0] + " ..."
    return f"{type(e).__name__}: {first_line}"


@contextlib.contextmanager
def torch_logs_to_stdout(*artifacts):
    """Turn on the given log artifacts; show their records, trimmed, on stdout."""
    handler = PrintToStdout(artifacts)
    # Records stop at these loggers: torch sets propagate=False on them.
    loggers = [logging.getLogger(name) for name in ("torch._dynamo", "torch._inductor")]
    try:
        # torch's own handlers print the whole records to stderr; send that copy nowhere.
        with contextlib.redirect_stderr(io.StringIO()):
            torch._logging.set_logs(**{a: True for a in artifacts if a != "warning"})
            for logger in loggers:
                logger.addHandler(handler)
            yield
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        torch._logging.set_logs()  # back to the defaults


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
reference = gelu_tanh(x.double())
check_against_float64("gelu_tanh", gelu_tanh(x), y, reference)

gelu_eager_ms, n_eager = median_ms(lambda: gelu_tanh(x))
gelu_compiled_ms, n_compiled = median_ms(lambda: compiled_gelu(x))
print(f"compiled, first call: {gelu_first_s * 1e3:9.1f} ms  (traces, compiles, runs)")
print(f"compiled, later     : {gelu_compiled_ms:9.3f} ms  (median of {n_compiled})")
print(f"eager               : {gelu_eager_ms:9.3f} ms  (median of {n_eager})")

# %%
# The first call paid for compiling (and, being the first compile in this process, for
# loading the compiler); later calls only run the fused kernel. This first-call figure
# is neither a cold nor a warm compile: it depends on what the compile cache held when
# the page ran, so a later section measures both on purpose.
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
check_against_float64(
    "rms_norm",
    F.rms_norm(x, (1024,), weight, eps=1e-6),
    rms_norm(x, weight),
    F.rms_norm(x.double(), (1024,), weight.double(), eps=1e-6),
)

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
    reference = copy.deepcopy(mlp).double()(inputs.double())
    check_against_float64(
        "torch.compile(mlp)", expected, compiled_mlp(inputs), reference
    )
    check_against_float64("mlp.compile()", expected, mlp_in_place(inputs), reference)

for label, module in [
    ("torch.compile(mlp)", compiled_mlp),
    ("mlp.compile()", mlp_in_place),
]:
    keys = list(module.state_dict())
    print(f"{label:20s} -> {type(module).__name__:16s} state_dict keys: {keys[:2]}")

# %%
# The price of a call
# ~~~~~~~~~~~~~~~~~~~
#
# Every call of a compiled function first checks its guards and then enters the
# compiled code through a wrapper, and that costs a few microseconds even when the work
# is trivial. Timing a one-element addition shows the size of that fixed cost here; the
# later sections use it to explain their results.

one = torch.ones(1, device=device)


def add_one(t):
    return t + 1


compiled_add_one = torch.compile(add_one)
compiled_add_one(one)
tiny_eager_ms, _ = median_ms(lambda: add_one(one))
tiny_compiled_ms, n_tiny = median_ms(lambda: compiled_add_one(one))
CALL_OVERHEAD_US = max(tiny_compiled_ms - tiny_eager_ms, 0.0) * 1e3
print(
    f"one-element add: eager {tiny_eager_ms * 1e3:7.1f} us, compiled "
    f"{tiny_compiled_ms * 1e3:7.1f} us (medians of {n_tiny})"
)
print(f"fixed cost of entering compiled code: about {CALL_OVERHEAD_US:.1f} us per call")

# %%
# A torchvision CNN
# -----------------
#
# Now a real model: a torchvision ResNet, in inference and (on the GPU) in a training
# step, at PyTorch's default settings. Its first compile is measured cold.
#
# ``torch.compiler.cudagraph_mark_step_begin()`` tells the CUDA graph runtime of
# ``mode="reduce-overhead"`` that a new iteration begins, so that it may reuse the memory
# of the previous iteration's outputs. It does nothing when no CUDA graphs are in use.


def build_cnn():
    if CNN_NAME == "ResNet-18":
        return torchvision.models.resnet18()
    blocks_per_stage = [1, 1, 1, 1]  # ResNet-18 has [2, 2, 2, 2]
    return torchvision.models.resnet.ResNet(
        torchvision.models.resnet.BasicBlock, blocks_per_stage
    )


images = torch.randn(CNN_BATCH, 3, IMAGE, IMAGE, device=device)
labels = torch.randint(0, 1000, (CNN_BATCH,), device=device)

# %%
# Inference, and a cold and a warm compile
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# Inside ``cold_cache()`` the caches start empty, so the first call compiles every graph
# and every kernel from scratch, and the page asserts that the FX graph cache found
# nothing. Then, still inside, ``torch._dynamo.reset()`` makes Dynamo forget the compiled
# model and we compile it again: Dynamo traces it again, but Inductor now finds the
# compiled graph in the cache. That second figure is a *warm* compile: about what a new
# process pays, on top of its start-up, when ``TORCHINDUCTOR_CACHE_DIR`` is kept between
# runs.

cnn = build_cnn().to(device).eval()


def cnn_inference(net):
    def run():
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            return net(images)

    return run


with cold_cache():
    compiled_cnn = torch.compile(cnn, **CNN_OPTIONS)
    logits, cold_s = first_call(cnn_inference(compiled_cnn))
    cold_report = cache_report()
    assert counters["inductor"]["fxgraph_cache_hit"] == 0, cold_report
    assert counters["inductor"]["fxgraph_cache_miss"] > 0, cold_report
    logits = logits.clone()  # CUDA graph outputs are overwritten by the next replay

    torch._dynamo.reset()
    counters.clear()
    compiled_cnn = torch.compile(cnn, **CNN_OPTIONS)
    _, warm_s = first_call(cnn_inference(compiled_cnn))
    warm_report = cache_report()

print(f"cold compile (empty cache) : {cold_s:6.1f} s   {cold_report}")
print(f"warm compile (cache filled): {warm_s:6.1f} s   {warm_report}")

with torch.no_grad():
    reference = copy.deepcopy(cnn).double()(images.double())
    eager_logits = cnn(images)
check_against_float64(f"{CNN_NAME} logits", eager_logits, logits, reference)
del reference, eager_logits, logits

infer_eager_ms, n_eager = median_ms(cnn_inference(cnn))
infer_compiled_ms, n_compiled = median_ms(cnn_inference(compiled_cnn))
samples = [n_eager, n_compiled]
print(
    f"eager {infer_eager_ms:8.2f} ms (median of {n_eager}), "
    f"compiled {infer_compiled_ms:8.2f} ms (median of {n_compiled})"
)

# %%
# The warm compile skipped Inductor's work (code generation, the C++ or Triton compiler),
# which is most of a cold compile; tracing the model with Dynamo and AOTAutograd remains.
# With ``freezing`` (on the CPU) a warm compile also runs the freezing passes again
# (folding each batch norm into its convolution), since they run before Inductor looks
# in its cache.
#
# Where does the time go? A profile of a few eager calls tells how much of the time the
# convolutions, matrix products and attention take, the calls that compiled code hands
# to cuDNN, cuBLAS or oneDNN as well. Fusion can only shrink the rest, unless the library
# calls themselves get faster, which happens when Inductor gives them a better memory
# layout (channels-last for convolutions) or, with ``freezing``, prepacked weights. On a
# CPU, where no CUDA graphs hide the compiled operators, the page profiles the compiled
# calls too and says which part grew or shrank.

LIBRARY_OP = re.compile(r"conv|mm|linear|attention")


def library_ms(fn, calls=3):
    """Milliseconds per call spent in convolution, matmul and attention operators, and
    the wall time per call of the profiled calls. GPU: their kernels' time; CPU: the
    operators' own time (profiling slows a CPU down, so compare with the same wall)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    fn()
    sync()
    with warnings.catch_warnings():
        # A note about profiling cycles, which this single profile does not use.
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        with torch.profiler.profile(activities=activities) as prof:
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            wall_ms = (time.perf_counter() - start) * 1e3 / calls
    total_us = 0.0
    for event in prof.key_averages():
        namespace, _, name = event.key.partition("::")  # e.g. aten::addmm
        if namespace in ("aten", "mkldnn", "mkl") and LIBRARY_OP.search(name):
            if device == "cuda":
                total_us += event.self_device_time_total
            else:
                total_us += event.self_cpu_time_total
    return total_us / 1e3 / calls, wall_ms


def where_time_goes(label, eager_fn, compiled_fn, eager_ms, compiled_ms):
    """Print how much of eager's time the library calls take, and read the speedup."""
    lib_ms, wall_ms = library_ms(eager_fn)
    # GPU kernel times are not slowed by the profiler: compare with the median.
    share = min(lib_ms / (eager_ms if device == "cuda" else wall_ms), 1.0)
    speedup = eager_ms / compiled_ms
    ceiling = 1 / share if share > 0 else float("inf")
    print(
        f"{label}: eager spends {share:.0%} of its time in convolutions, matmuls and "
        f"attention; if they took as long compiled, the speedup could be at most "
        f"{ceiling:.2f}x; measured {speedup:.2f}x"
    )
    if device == "cuda":
        if speedup > ceiling * 1.02:
            print(
                "  compiled beat that bound, so the library calls themselves got faster: "
                "Inductor chose the memory layout of their inputs and weights"
            )
        elif speedup >= 1.02:
            print("  the gain came from the work around the library calls")
        elif speedup > 0.98:
            print("  compiled and eager ran at the same speed")
        else:
            print("  compiled was slower")
        return
    # On a CPU no CUDA graphs hide the compiled operators: profile them too.
    c_lib_ms, c_wall_ms = library_ms(compiled_fn)
    c_share = min(c_lib_ms / c_wall_ms, 1.0)
    lib = (share * eager_ms, c_share * compiled_ms)
    rest = ((1 - share) * eager_ms, (1 - c_share) * compiled_ms)

    def change(before, after):
        ratio = after / before
        if 0.95 <= ratio <= 1.05:
            return "about the same"
        return f"{'shrank' if ratio < 1 else 'grew'} to {ratio:.2f}x"

    print(
        f"  library calls {lib[0]:.2f} -> {lib[1]:.2f} ms ({change(*lib)}); "
        f"everything else {rest[0]:.2f} -> {rest[1]:.2f} ms ({change(*rest)})"
    )
    if speedup < 0.98 and rest[1] > 1.05 * rest[0]:
        overhead = CALL_OVERHEAD_US / 1e3 / (rest[1] - rest[0])
        print(
            f"  compiled was slower; the fixed cost of entering compiled code explains "
            f"{min(overhead, 1):.0%} of the growth outside the library calls"
        )


where_time_goes(
    f"{CNN_NAME} inference",
    cnn_inference(cnn),
    cnn_inference(compiled_cnn),
    infer_eager_ms,
    infer_compiled_ms,
)

# %%
# Training
# ~~~~~~~~
#
# A training step compiles two graphs, the forward and the backward that AOTAutograd
# derives from it. Only the model is compiled; the loss, ``backward()`` and the
# optimizer step are written as usual. Three copies of one fresh model (eager, compiled
# and a float64 reference) take one step each from the same weights, and we compare the
# logits and all the gradients with the float64 ones.
#
# On a GPU the float64 errors of the gradients can be much larger than those of the
# logits, for eager and compiled alike: cuDNN's default TF32 convolutions round their
# inputs to 10 mantissa bits, and the backward through a deep network adds up those
# roundings. The check asks whether compiling made it worse, not whether TF32 is exact.
#
# On the CPU this part is skipped: compiling a ResNet's backward takes minutes on a
# small CPU. The transformer below is trained on both devices.

train_rows = []
if TRAIN_CNN:
    base = build_cnn().to(device).train()
    eager_net = copy.deepcopy(base)
    compiled_net = torch.compile(copy.deepcopy(base), **CNN_OPTIONS)
    ref_net = copy.deepcopy(base).double()

    def one_step(net, imgs):
        torch.compiler.cudagraph_mark_step_begin()
        net.zero_grad(set_to_none=True)
        out = net(imgs)
        F.cross_entropy(out, labels).backward()
        # Copies: under CUDA graphs, outputs and gradients live in memory that the
        # next replay overwrites.
        return out.detach().double(), all_grads(net)

    (ref_out, ref_grads) = one_step(ref_net, images.double())
    (compiled_out, compiled_grads), train_first_s = first_call(
        lambda: one_step(compiled_net, images)
    )
    (eager_out, eager_grads) = one_step(eager_net, images)
    check_against_float64(
        f"{CNN_NAME} training logits", eager_out, compiled_out, ref_out
    )
    check_against_float64(
        f"{CNN_NAME} gradients", eager_grads, compiled_grads, ref_grads
    )
    del (
        ref_net,
        ref_out,
        ref_grads,
        compiled_out,
        compiled_grads,
        eager_out,
        eager_grads,
    )

    def make_train_step(net):
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

        def train_step():
            torch.compiler.cudagraph_mark_step_begin()
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(images), labels)
            loss.backward()
            optimizer.step()

        return train_step

    train_eager_ms, n_eager = median_ms(make_train_step(eager_net))
    train_compiled_ms, n_compiled = median_ms(make_train_step(compiled_net))
    samples += [n_eager, n_compiled]
    print(
        f"first call (compiles forward and backward; cache as found): {train_first_s:.1f} s"
    )
    print(
        f"eager {train_eager_ms:8.2f} ms (median of {n_eager}), "
        f"compiled {train_compiled_ms:8.2f} ms (median of {n_compiled})"
    )
    train_rows.append([f"{CNN_NAME} training step", train_eager_ms, train_compiled_ms])
else:
    print(f"{CNN_NAME} training: skipped on the CPU (its compile takes minutes there)")

# %%
# A small GPT trained under autocast
# ----------------------------------
#
# Transformers are where ``torch.compile`` is most used in training. This is a stack of
# GPT-style blocks (layer norm, causal self-attention through
# ``F.scaled_dot_product_attention``, an MLP with GELU, residual connections) with token
# and position embeddings and an output layer. On a GPU it runs under
# ``torch.autocast`` in bfloat16 (float16 on GPUs without bfloat16), the usual way to
# train: the matrix products run in the low precision while reductions such as layer
# norm and the loss stay in float32. Compiled, Inductor fuses each layer norm, GELU,
# residual addition and dtype cast into the kernels around them.


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (batch, heads, tokens, head_dim)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class TinyGPT(nn.Module):
    def __init__(self, layers, dim, heads, vocab, seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(0.02 * torch.randn(seq, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


gpt_cfg = {k: GPT[k] for k in ("layers", "dim", "heads", "vocab", "seq")}
gpt_base = TinyGPT(**gpt_cfg).to(device)
tokens = torch.randint(0, GPT["vocab"], (GPT["batch"], GPT["seq"]), device=device)
targets = torch.roll(tokens, -1, dims=1)  # next-token prediction


def gpt_step_grads(net, use_amp=True):
    net.zero_grad(set_to_none=True)
    with torch.autocast(
        device, dtype=AMP_DTYPE, enabled=use_amp and AMP_DTYPE is not None
    ):
        logits = net(tokens)
    if logits.dtype != torch.float64:
        logits = logits.float()
    F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    return logits.detach().double(), all_grads(net)


gpt_eager = copy.deepcopy(gpt_base)
gpt_compiled = torch.compile(copy.deepcopy(gpt_base))
ref_logits, ref_grads = gpt_step_grads(copy.deepcopy(gpt_base).double(), use_amp=False)
(c_logits, c_grads), gpt_first_s = first_call(lambda: gpt_step_grads(gpt_compiled))
e_logits, e_grads = gpt_step_grads(gpt_eager)
factor = 3.0 if AMP_DTYPE is not None else 2.0
check_against_float64("GPT logits", e_logits, c_logits, ref_logits, factor)
check_against_float64("GPT gradients", e_grads, c_grads, ref_grads, factor)
del ref_logits, ref_grads, c_logits, c_grads, e_logits, e_grads


def make_gpt_step(net):
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=AMP_DTYPE, enabled=AMP_DTYPE is not None):
            logits = net(tokens)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        optimizer.step()

    return train_step


gpt_eager_ms, n_eager = median_ms(make_gpt_step(gpt_eager))
gpt_compiled_ms, n_compiled = median_ms(make_gpt_step(gpt_compiled))
samples += [n_eager, n_compiled]
print(
    f"first call (compiles forward and backward; cache as found): {gpt_first_s:.1f} s"
)
print(
    f"eager {gpt_eager_ms:8.2f} ms (median of {n_eager}), "
    f"compiled {gpt_compiled_ms:8.2f} ms (median of {n_compiled})"
)
train_rows.append(["GPT training step", gpt_eager_ms, gpt_compiled_ms])
where_time_goes(
    "GPT training step",
    make_gpt_step(gpt_eager),
    make_gpt_step(gpt_compiled),
    gpt_eager_ms,
    gpt_compiled_ms,
)

# %%
# Results
# ~~~~~~~

rows = [[f"{CNN_NAME} inference", infer_eager_ms, infer_compiled_ms]] + train_rows
for row in rows:
    row.append(row[1] / row[2])
print(
    f"on {device_name}, torch {torch.__version__}, medians of at least "
    f"{min(samples)} samples; {CNN_NAME} batch {CNN_BATCH} {IMAGE}x{IMAGE} "
    f"{CNN_OPTIONS}; GPT batch {GPT['batch']} x {GPT['seq']}, default mode"
)
print(
    tabulate(
        rows,
        headers=["", "eager ms", "compiled ms", "speedup"],
        floatfmt=("", ".2f", ".2f", ".2f"),
    )
)
for name, _, _, gain in rows:
    if gain >= 1.05:
        verdict = f"compiled took {1 - 1 / gain:.0%} less time"
    elif gain > 0.95:
        verdict = "compiled and eager within 5% of each other"
    else:
        verdict = f"compiled took {1 / gain - 1:.0%} more time"
    print(f"{name}: {verdict}")

fig, ax = plt.subplots(figsize=(6.4, 3.6))
positions = np.arange(len(rows))
ax.bar(positions - 0.2, [r[1] / r[1] for r in rows], width=0.4, label="eager")
ax.bar(positions + 0.2, [r[2] / r[1] for r in rows], width=0.4, label="torch.compile")
for pos, row in zip(positions, rows):
    ax.annotate(
        f"{row[3]:.2f}x", (pos + 0.2, row[2] / row[1]), ha="center", va="bottom"
    )
ax.set_xticks(positions, [r[0] for r in rows], fontsize=8)
ax.set_ylabel("time per call, relative to eager")
ax.set_ylim(top=1.2 * max(1.0, *(r[2] / r[1] for r in rows)))  # room for labels
ax.set_title(f"on {device_name} (labels: speedup)", fontsize=10)
ax.legend(loc="upper right")
fig.tight_layout()
plt.show()

# %%
# What the gains depend on. The convolutions and matrix products run in vendor
# libraries in both versions, so a model whose time is mostly in them has little left
# for the compiler; the rest (batch norms, activations, residual additions, layer norms,
# dtype casts) is memory-bound work that fusion shrinks, and on a GPU, CUDA graphs also
# remove the CPU time spent launching each kernel, which matters at small batches. On a
# CPU there is no launch cost to remove, so fusion and the layout of the library calls
# are all there is to gain, and for small inputs the fixed cost of each compiled call
# can outweigh them. Measure on the hardware, precision and sizes you will run with.
#
# Compile time grows with the model, and a cold compile of a large network can take
# minutes. It is paid once per process and per set of shapes; keeping Inductor's cache
# between runs (``TORCHINDUCTOR_CACHE_DIR``) turns it into the warm figure above.

# %%
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
# * ``"max-autotune"`` benchmarks several implementations of each matmul and convolution
#   (Triton templates next to cuBLAS and cuDNN) and keeps the fastest, tunes the other
#   kernels' launch parameters, and uses CUDA graphs. Compiling takes much longer, so it
#   is for code that will run for a long time, such as a deployed model or a long
#   training run. ``"max-autotune-no-cudagraphs"`` tunes without CUDA graphs.
#
# Inductor offers its Triton matmul templates only on GPUs with at least 68 streaming
# multiprocessors (``torch._inductor.utils.is_big_gpu``); on smaller GPUs
# ``max-autotune`` has only the library kernels to choose from for matrix products.

if device == "cuda":
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    big = torch._inductor.utils.is_big_gpu(0)
    if big:
        print(
            f"{sm_count} SMs: Triton matmul templates are among max-autotune's choices"
        )
    else:
        print(
            f"{sm_count} SMs (fewer than 68): Inductor skips its Triton matmul templates "
            "here, so max-autotune only picks among library kernels for matrix products"
        )
else:
    print("no GPU: the SM count check applies to CUDA GPUs only")

# %%
# ``torch._inductor.list_mode_options(mode)`` shows what each preset sets. A small MLP at
# a small batch makes the differences visible: its matrix products are tiny, so
# launching kernels is a large part of its run time. Each mode is compiled cold, from an
# empty cache, and the first lines that ``max-autotune`` writes about its choices are
# shown below the table.

width = MLP_WIDTH
layers = []
for _ in range(4):
    layers += [nn.Linear(width, width), nn.GELU()]
mode_mlp = nn.Sequential(*layers).to(device).eval()
mode_inputs = torch.randn(MLP_BATCH, width, device=device)


def host_us(fn, calls=50):
    """Microseconds of CPU time per call: the loop is timed without waiting for the
    GPU, which runs behind the CPU. On a CPU this is the whole call."""
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    sync()
    return elapsed / calls * 1e6


with torch.no_grad():
    mode_eager = mode_mlp(mode_inputs)
    mode_reference = copy.deepcopy(mode_mlp).double()(mode_inputs.double())
    mode_eager_ms, n_eager = median_ms(lambda: mode_mlp(mode_inputs))
    eager_host = host_us(lambda: mode_mlp(mode_inputs))
samples = [n_eager]

mode_rows = [["eager", "", "", mode_eager_ms, 1.0, eager_host]]
autotune_log = ""
if device == "cuda":
    modes = ["default", "reduce-overhead", "max-autotune"]
else:
    # No CUDA graphs on a CPU, and max-autotune's cold compile would lengthen the
    # page's CPU run: only the default mode is compiled there.
    modes = ["default"]
    print("CPU: only mode='default' (reduce-overhead and max-autotune are GPU modes)")
for mode in modes:
    with cold_cache():
        compiled = torch.compile(mode_mlp, mode=mode)

        def run(compiled=compiled):
            torch.compiler.cudagraph_mark_step_begin()
            with torch.no_grad():
                return compiled(mode_inputs)

        # Autotuning reports go to stderr: keep them for below. Inductor's log records
        # (a candidate that failed to compile, say) are printed here, trimmed.
        captured = io.StringIO()
        with torch_logs_to_stdout("warning"), contextlib.redirect_stderr(captured):
            out, cold_first_s = first_call(run)
        assert counters["inductor"]["fxgraph_cache_hit"] == 0, cache_report()
        if mode == "max-autotune":
            autotune_log = captured.getvalue()
    check_against_float64(f"MLP, {mode}", mode_eager, out, mode_reference)
    del out
    ms, n = median_ms(run)
    samples.append(n)
    options = ", ".join(sorted(torch._inductor.list_mode_options(mode))) or "(none)"
    mode_rows.append(
        [mode, options, cold_first_s, ms, mode_eager_ms / ms, host_us(run)]
    )

print(
    f"4 x (Linear {width}x{width} + GELU), batch {MLP_BATCH}, float32, on {device_name}, "
    f"medians of at least {min(samples)} samples"
)
print(
    tabulate(
        mode_rows,
        headers=[
            "mode",
            "options it sets",
            "cold compile s",
            "median ms",
            "vs eager",
            "CPU us/call",
        ],
        floatfmt=("", "", ".1f", ".3f", ".2f", ".0f"),
    )
)
# The autotuning report: for the first tuned matmul, its sizes and the fastest choices.
report = autotune_log.splitlines()
first = next((i for i, ln in enumerate(report) if ln.startswith("AUTOTUNE ")), None)
if first is None and device == "cuda":
    print("max-autotune wrote no autotuning report (nothing was benchmarked)")
elif first is not None:
    block = [report[first]] + [
        ln for ln in report[first + 1 :][:8] if ln.startswith("  ")
    ]
    print("\n".join(block[:4]))
    n_tables = sum(ln.startswith("AUTOTUNE ") for ln in report)
    print(f"... {n_tables} matmul shape(s) tuned in all (equal shapes are tuned once)")

if device == "cuda":
    best = max(mode_rows[1:], key=lambda r: r[4])
    print(f"fastest here: {best[0]}, at {best[4]:.2f}x the speed of eager")
    cpu_bound = [r[0] for r in mode_rows if r[5] >= 0.8 * r[3] * 1e3]
    print(
        "calls whose time is mostly CPU time (the GPU waits for the CPU to launch "
        f"work): {', '.join(cpu_bound) or 'none'}"
    )
    default_row = mode_rows[1]
    if default_row[4] < 1 and default_row[5] > eager_host:
        print(
            f"default was slower than eager: a call costs {default_row[5]:.0f} us of "
            f"CPU time against eager's {eager_host:.0f} us (guards, then launching each "
            "kernel from Python), more than the GPU time that fusion saved at this size"
        )
    elif default_row[4] < 1:
        print(
            f"default was slower than eager although a call costs less CPU time "
            f"({default_row[5]:.0f} us against {eager_host:.0f} us): the difference is "
            "GPU time, which torch.profiler breaks down kernel by kernel"
        )
else:
    lost_us = (mode_rows[1][3] - mode_eager_ms) * 1e3
    if lost_us <= 0:
        print(f"compiled saved {-lost_us:.0f} us per call against eager")
    elif lost_us <= 2 * CALL_OVERHEAD_US:
        print(
            f"compiled lost {lost_us:.0f} us per call, about the fixed cost of entering "
            f"compiled code ({CALL_OVERHEAD_US:.0f} us)"
        )
    else:
        print(
            f"compiled lost {lost_us:.0f} us per call; the fixed cost of entering "
            f"compiled code ({CALL_OVERHEAD_US:.0f} us) is part of it, the rest went to "
            "the compiled kernels themselves (torch.profiler shows which)"
        )

# %%
# How to read the table: ``default`` fuses each bias and GELU into one kernel, but
# still launches every kernel from Python; ``reduce-overhead`` replays them all from one
# CUDA graph, which removes that CPU work; ``max-autotune`` can also replace a library
# matmul with a tuned Triton kernel that applies the bias and GELU on the way out, and
# its compile includes benchmarking every candidate. In the autotuning report each line
# names a candidate kernel (``mm`` is cuBLAS, ``triton_mm_*`` a Triton template with its
# tile sizes), its time, and its speed relative to the best. A logged "Runtime error
# during autotuning ... out of resource" means that one candidate's tiles needed more
# shared memory than the GPU has; Inductor drops that candidate and goes on. The
# ``CPU us/call`` column is the time the CPU spends per call when it does not wait for
# the GPU: when it is close to the median, the GPU sits idle waiting for work, and only
# less CPU work per call (fewer launches, CUDA graphs) makes the call faster. On a CPU
# there are no CUDA graphs, so the page compiles only ``default`` there; what a model
# this small can lose against eager PyTorch is the fixed cost of entering compiled code,
# measured earlier.
#
# Dynamic shapes and recompiles
# -----------------------------
#
# The next sections study what Dynamo captures, not how fast it runs, so they pass
# ``backend=`` a small function that receives each captured graph, reports it and runs
# it as it is. A backend is any callable that takes an FX ``GraphModule`` and example
# inputs and returns something to call; skipping Inductor keeps these sections quick,
# and the capture is the same with the default backend.
#
# By default a graph is compiled for the exact shapes of its first inputs. When a call
# brings a different size, the guard on that size fails and Dynamo recompiles; this
# time it marks the size that changed as *dynamic* (a symbol such as ``s0``), so the new
# graph serves every size. This is *automatic dynamic* shapes.

captured_graphs = []


def shape_backend(gm, example_inputs):
    """Record the graph and print the shapes it was compiled for."""
    captured_graphs.append(gm)
    shapes = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value = node.meta.get("example_value")
            if isinstance(value, torch.Tensor):
                shapes.append(tuple(value.shape))
    print(f"  compiled a graph for input shapes {shapes}")
    return gm.forward


def row_rms(x):
    return x.pow(2).mean(dim=1).sqrt()


def call_with_rows(fn, row_counts):
    for n in row_counts:
        t = torch.randn(n, 16)
        torch.testing.assert_close(fn(t), row_rms(t))


print("dynamic=None (the default): static first, dynamic after a size changes")
torch._dynamo.reset()
with torch_logs_to_stdout("recompiles"):
    call_with_rows(torch.compile(row_rms, backend=shape_backend), [8, 16, 32])

print("dynamic=False: a new graph for every size")
torch._dynamo.reset()
call_with_rows(
    torch.compile(row_rms, backend=shape_backend, dynamic=False), [8, 16, 32]
)

print("dynamic=True: dynamic from the first call")
torch._dynamo.reset()
call_with_rows(torch.compile(row_rms, backend=shape_backend, dynamic=True), [8, 16, 32])

print("mark_dynamic(x, 0): only dimension 0 dynamic, from the first call")
torch._dynamo.reset()
compiled_rms = torch.compile(row_rms, backend=shape_backend)
for n in [8, 16, 32]:
    t = torch.randn(n, 16)
    torch._dynamo.mark_dynamic(t, 0)
    torch.testing.assert_close(compiled_rms(t), row_rms(t))

# %%
# The ``recompiles`` log names the guard that failed: the size of ``x``'s first
# dimension. The second graph has a symbol for that size and no longer guards on its
# value, so the third call reused it. ``dynamic=False`` keeps every graph static (a new
# compile per size, each specialised to it); ``dynamic=True`` makes every dimension
# dynamic at once; ``torch._dynamo.mark_dynamic(tensor, dim)`` marks one dimension of one
# input before the first call, when you know which size will vary, such as a batch or a
# sequence length. Dynamo still specialises sizes 0 and 1, and a graph with dynamic
# shapes can be a little slower than one compiled for fixed sizes.
#
# The recompile limit
# ~~~~~~~~~~~~~~~~~~~
#
# Each function keeps a small number of compiled versions:
# ``torch._dynamo.config.recompile_limit`` (called ``cache_size_limit`` before PyTorch
# 2.7; the old name still works). When a call needs one more, Dynamo logs a warning and
# from then on runs that function eagerly whenever none of its compiled versions fits.
# Python strings are a common cause: they are baked into the graph as constants, so
# every new value recompiles. With the limit lowered to 2:

print(f"recompile_limit by default: {torch._dynamo.config.recompile_limit}")


def activate(x, kind):
    return getattr(torch, kind)(x) * 2  # the string kind is a constant of the graph


torch._dynamo.reset()
captured_graphs.clear()
compiled_activate = torch.compile(activate, backend=shape_backend)
with torch._dynamo.config.patch(recompile_limit=2), torch_logs_to_stdout("warning"):
    for kind in ["relu", "tanh", "sigmoid", "exp"]:
        t = torch.randn(4)
        torch.testing.assert_close(compiled_activate(t, kind), activate(t, kind))
print(f"4 calls with 4 strings, {len(captured_graphs)} graphs compiled")

# %%
# The warning names the limit, the function and the reason for the last recompile; the
# calls with ``"sigmoid"`` and ``"exp"`` ran eagerly, still with the right results. If the
# recompiles are expected, raise the limit; if not, the ``recompiles`` log tells which
# guard keeps failing (here, fixing it would mean passing the activation as a function,
# or keeping the number of distinct strings small).
#
# ``torch.compiler.set_stance``
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# ``torch.compiler.set_stance`` changes what compiled functions do without touching the
# code that compiled them: ``"force_eager"`` ignores ``torch.compile`` (to compare
# with eager or to debug), ``"fail_on_recompile"`` raises instead of recompiling (to make
# sure a warmed-up program never compiles again), and ``"eager_on_recompile"`` runs
# eagerly where a recompile would be needed. It works as a function, a context manager
# or a decorator.

torch._dynamo.reset()
captured_graphs.clear()
compiled_rms = torch.compile(row_rms, backend=shape_backend, dynamic=False)
compiled_rms(torch.randn(8, 16))
with torch.compiler.set_stance("force_eager"):
    compiled_rms(torch.randn(8, 16, dtype=torch.float64))
print(f"after force_eager with a float64 input: {len(captured_graphs)} graph")
with torch.compiler.set_stance("fail_on_recompile"):
    compiled_rms(torch.randn(8, 16))  # fits the compiled graph: fine
    try:
        compiled_rms(torch.randn(12, 16))
    except Exception as e:  # torch._dynamo.exc.RecompileError
        print(f"fail_on_recompile, new size: {short_error(e, 100)}")

# %%
# Seeing what the compiler did
# ----------------------------
#
# ``TORCH_LOGS`` and ``torch._logging.set_logs``
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# The environment variable ``TORCH_LOGS`` turns on PyTorch's logs by name, for a whole
# run: ``TORCH_LOGS="graph_breaks,recompiles" python train.py``. The most useful names
# for a start are ``graph_breaks`` (where and why a graph ended), ``recompiles`` (which
# guard failed), ``graph_code`` (the Python code of each captured graph) and
# ``output_code`` (the code Inductor generated); ``TORCH_LOGS="help"`` lists them all.
# ``torch._logging.set_logs(graph_breaks=True, ...)`` does the same from inside a
# program, and ``torch._logging.set_logs()`` turns them off again.
#
# Here is ``output_code`` for the GELU from the start of the page, compiled from an
# empty cache so that the code is generated, trimmed to the fused kernel. On a GPU it is
# a Triton kernel, on a CPU a C++ function; either way, one kernel computes the whole
# expression.

generated = []


class KeepRecords(logging.Handler):
    def emit(self, record):
        generated.append(record.getMessage())


keeper = KeepRecords()
inductor_logger = logging.getLogger("torch._inductor")
with cold_cache(), contextlib.redirect_stderr(io.StringIO()):
    torch._logging.set_logs(output_code=True)
    inductor_logger.addHandler(keeper)
    try:
        torch.compile(gelu_tanh)(torch.randn(64, 64, device=device))
    finally:
        inductor_logger.removeHandler(keeper)
        torch._logging.set_logs()

code = "\n".join(generated).splitlines()
start = next(
    i for i, ln in enumerate(code) if "def triton_" in ln or 'extern "C"' in ln
)
kernel = []
for ln in code[start:]:
    kernel.append(ln.rstrip())
    if "store(" in ln:  # Triton's tl.store, or a C++ vector's .store
        break
print(f"[output_code] {len(code)} lines in all; the kernel, up to its store:")
print("\n".join(kernel[:50]))

# %%
# ``tlparse`` and ``TORCH_TRACE``
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# For a whole program, logs scroll by too fast. ``TORCH_TRACE`` writes a structured
# record of every compilation into a folder instead:
#
# .. code-block:: bash
#
#    TORCH_TRACE=trace_dir python train.py
#    pip install tlparse
#    tlparse trace_dir/<the log file> -o report/
#
# ``tlparse`` (a separate tool, not needed for this page) turns that record into an HTML
# report: one entry per compiled frame, with its graphs, guards, the reason for every
# graph break and recompile, the generated code and the time spent in each compile stage.
# A report like this is also what to attach to a bug report about ``torch.compile``.
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

torch._dynamo.reset()
captured_graphs.clear()
with torch_logs_to_stdout("graph_breaks"):
    out = torch.compile(clipped_norm, backend=shape_backend)(x_small)
torch.testing.assert_close(out, clipped_norm(x_small))
stats.clear()

# %%
# ``torch._dynamo.explain``
# ~~~~~~~~~~~~~~~~~~~~~~~~~
#
# ``torch._dynamo.explain(fn)(*args)`` runs the function under Dynamo and returns a
# summary instead of compiling it: the graphs, the break reasons, and ``op_count``, the
# number of *function calls* in the graphs (nodes such as ``torch.clamp`` or ``>``).
# Tensor *method* calls such as ``y.abs()`` are nodes of another kind, ``call_method``,
# and are not in ``op_count``; the graphs printed below count both, from the same graph
# objects. Printing the whole summary also lists every guard, which runs to hundreds of
# lines for a real model.


def node_name(node):
    target = node.target
    return (
        target if isinstance(target, str) else getattr(target, "__name__", str(target))
    )


explanation = torch._dynamo.explain(clipped_norm)(x_small)
stats.clear()
function_calls = 0
for i, gm in enumerate(explanation.graphs, 1):
    functions = [node_name(n) for n in gm.graph.nodes if n.op == "call_function"]
    methods = [node_name(n) for n in gm.graph.nodes if n.op == "call_method"]
    function_calls += len(functions)
    print(
        f"graph {i}: {len(functions)} function calls {functions}, "
        f"{len(methods)} method calls {methods}"
    )
assert function_calls == explanation.op_count
print(
    f"graphs: {explanation.graph_count}, graph breaks: {explanation.graph_break_count}, "
    f"op_count: {explanation.op_count} (the function calls above)"
)
for i, br in enumerate(explanation.break_reasons, 1):
    frame = br.user_stack[-1]
    reason = br.reason.strip().splitlines()[0]
    print(
        f"break {i}, line {frame.lineno} ({(frame.line or '').strip()}): {reason[:90]}"
    )

# %%
# Three graphs: the layer norm and the comparison; then, after Python took the branch
# (the outlier in ``x_small`` is above 3), the clamp and ``abs().mean()`` for the
# statistic; then, after ``.item()`` ran in Python, the final multiplication. A break
# reason like ``generic_jump TensorVariable()`` is Dynamo's name for a jump (an ``if``)
# on a tensor.
#
# ``fullgraph=True``: breaks become errors
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# When a region must compile as one graph (for the speed, or before exporting it), pass
# ``fullgraph=True``. The first graph break then raises instead of splitting the graph.


torch._dynamo.reset()
try:
    torch.compile(clipped_norm, backend="eager", fullgraph=True)(x_small)
    print("compiled as one graph")
except Exception as e:  # torch._dynamo.exc.Unsupported
    print(f"fullgraph=True raised {short_error(e)}")
stats.clear()

# %%
# Removing the breaks is a matter of staying in tensors. ``torch.cond(pred, true_fn,
# false_fn, operands)`` is an ``if`` that the compiler can capture: it records both
# branches as subgraphs and picks one at run time from the value of ``pred``, a
# one-element boolean tensor. The branches take the operands as arguments and must
# return tensors of the same shape and dtype that are new (not the operands themselves;
# hence the ``clone``). The statistic stays a tensor in the list and becomes a number
# later, outside the compiled code (``torch.stack(stats).tolist()`` once per epoch,
# say). For a branch this cheap, ``torch.where(y.max() > 3, y.clamp(-3, 3), y)`` would do
# too; ``torch.cond`` runs only the branch taken, which matters when the branches are
# expensive.


def clipped_norm_fixed(x):
    y = F.layer_norm(x, x.shape[-1:])
    y = torch.cond(y.max() > 3, lambda t: t.clamp(-3, 3), lambda t: t.clone(), (y,))
    stats.append(y.abs().mean().detach())
    return y * 2


torch._dynamo.reset()
stats.clear()
fixed = torch.compile(clipped_norm_fixed, backend="eager", fullgraph=True)
for label, inp in [("with the outlier", x_small), ("without", x_small.clamp(-2, 2))]:
    stats.clear()
    expected = clipped_norm(inp)
    out = fixed(inp)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(stats[1], torch.tensor(stats[0], device=device))
    print(f"fullgraph=True with torch.cond, input {label}: matches the original")
stats.clear()

# %%
# ``torch.compiler.disable``
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# Some code should not be compiled at all: logging, a call into a library that Dynamo
# handles badly, a piece being debugged. ``@torch.compiler.disable`` on a function makes
# Dynamo call it as plain Python, with a graph break before and after it; the code
# around it is still compiled.

history = []


@torch.compiler.disable
def log_step(t):
    history.append(f"mean {t.mean().item():.3f}")  # Python, never traced


def step(x):
    y = torch.sin(x) * 2
    log_step(y)
    return y + 1


explanation = torch._dynamo.explain(step)(torch.randn(8))
print(
    f"graphs: {explanation.graph_count}, breaks: {explanation.graph_break_count}, "
    f"reason: {explanation.break_reasons[0].reason.strip().splitlines()[0][:100]}"
)
print(f"log_step ran as Python: {history}")

# %%
# How ``torch.compile`` differs from earlier capture approaches
# -------------------------------------------------------------
#
# PyTorch has other ways to capture a program as a graph:
#
# * ``torch.fx.symbolic_trace`` runs the function with *proxy* objects in place of tensors
#   and records what is done to them. The program must never need a proxy's value.
# * ``torch.export`` captures a whole program ahead of time as one graph, for deployment
#   without Python. Whatever it cannot put in that one graph is an error that you fix in
#   the code (for example with ``torch.cond`` for a branch, as above).
# * TorchScript (``torch.jit.script`` and ``torch.jit.trace``) is deprecated in favour of
#   ``torch.compile`` and ``torch.export``, and no longer developed. This page does not
#   run it.
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
# ``torch.export`` takes an ``nn.Module``, so each function is wrapped in one. NumPy only
# sees host memory, so these examples use CPU tensors. ``torch.compile`` uses the
# recording backend from above.


class AsModule(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


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


def quiet_shape_backend(gm, example_inputs):
    captured_graphs.append(gm)
    return gm.forward


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
        # torch.export prints the part of the graph it did capture, and logs where a
        # data-dependent value came from, to stderr; the errors below say what matters.
        with torch_logs_to_stdout(), contextlib.redirect_stderr(io.StringIO()):
            torch.export.export(AsModule(fn), args)
        row.append("ok")
    except Exception as e:
        row.append(type(e).__name__)
        errors.append(f"export, {name}: {short_error(e)}")
    torch._dynamo.reset()
    captured_graphs.clear()
    result = torch.compile(fn, backend=quiet_shape_backend)(*args)
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
# What the error messages say (their wording differs a little between PyTorch versions):
#
# * ``symbolic_trace`` never sees real values, only proxies. **Branch:** "symbolically
#   traced variables cannot be used as inputs to control flow": ``if`` asks the proxy
#   ``x.sum() > 0`` for a truth value it does not have. **NumPy:** ``x.numpy()`` on a
#   proxy just records a call and returns another proxy, and ``torch.from_numpy``
#   "expected np.ndarray (got Proxy)". **SciPy:** ``erf`` asks its argument for NumPy's
#   array interface (``__array_struct__``); a proxy answers every attribute with another
#   proxy, which NumPy rejects as invalid. **Python objects:** "Proxy object cannot be
#   iterated": the dict argument is a proxy, and the ``for`` loop needs its real items.
# * ``torch.export``, in its default non-strict mode, runs the Python code on *fake*
#   tensors that have shapes but no data, and it needs the whole program in one graph.
#   **Branch:** it "could not guard on data-dependent expression": the result of
#   ``x.sum() > 0`` became a symbol (``u0``) whose value is unknown while tracing, and
#   the ``if`` would have to fix it to one branch for every input. **NumPy and SciPy:**
#   "``.numpy()`` is not supported for tensor subclasses": a fake tensor is a subclass
#   with no memory to hand to NumPy. **Python objects:** "Unsupported input type": export
#   only accepts inputs it can flatten into tensors and constants (tensors, numbers,
#   strings, and lists, tuples and dicts of them); ``Scale`` is none of these unless it
#   is registered as a pytree node.
#
# The same branch written with ``torch.cond`` exports as one graph:


def branchy_cond(x):
    return torch.cond(x.sum() > 0, torch.sin, torch.cos, (x,))


exported = torch.export.export(AsModule(branchy_cond), (x_cpu,))
for sign in (1, -1):
    inp = sign * x_cpu.abs()
    torch.testing.assert_close(exported.module()(inp), branchy(inp))
conds = [n for n in exported.graph.nodes if n.target is torch.ops.higher_order.cond]
print(
    f"torch.export with torch.cond: one graph, {len(conds)} cond node, both signs match"
)

# %%
# Conclusion
# ----------
#
# ``torch.compile`` turns a function or a module into a compiled callable with one line,
# and comparing compiled and eager results with a float64 run is the way to check that
# it computes the same function. On a torchvision ResNet and a small GPT you measured
# what it buys at PyTorch's default settings, what a cold and a warm compile cost, and
# where the time goes when it buys little (library calls that both versions share, and
# the fixed cost of each compiled call). ``default`` is the mode to start with;
# ``reduce-overhead`` removes launch overhead with CUDA graphs; ``max-autotune`` trades a
# long compile for tuned kernels. New shapes, recompiles and graph breaks are visible
# with ``TORCH_LOGS``, ``torch._dynamo.explain`` and ``TORCH_TRACE``, and controllable
# with ``dynamic=``, ``mark_dynamic``, ``fullgraph=True``, ``torch.cond``,
# ``torch.compiler.disable`` and ``torch.compiler.set_stance``.
#
# Further reading
# ---------------
#
# * `The torch.compile programming model
#   <https://docs.pytorch.org/docs/stable/compile/programming_model.html>`__: graph breaks,
#   recompilations, dynamic shapes and ``tlparse`` in depth
# * `torch.compile API reference
#   <https://docs.pytorch.org/docs/stable/generated/torch.compile.html>`__
# * `torch.compiler documentation <https://docs.pytorch.org/docs/stable/torch.compiler.html>`__
# * `torch.export documentation <https://docs.pytorch.org/docs/stable/export.html>`__
# * `torch.cond <https://docs.pytorch.org/docs/stable/generated/torch.cond.html>`__
# * `CUDA graph trees, behind mode="reduce-overhead"
#   <https://docs.pytorch.org/docs/stable/torch.compiler_cudagraph_trees.html>`__
# * `tlparse <https://github.com/pytorch/tlparse>`__
# * :ref:`compiled_autograd_tutorial` on this site, for capturing the whole backward pass

# sphinx_gallery_thumbnail_number = 1
