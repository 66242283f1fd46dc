"""
.. _triton_custom_op_tutorial:

Your own Triton kernel under torch.compile: a custom operator, measured against Inductor
========================================================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How to write a fused residual add + RMSNorm, forward and backward, as Triton
         kernels, and check them against PyTorch in float64
       * Two ways to make them an operator that ``torch.compile`` can take whole:
         ``torch.library.triton_op`` with ``wrap_triton`` (Inductor sees the kernel) and
         ``torch.library.custom_op`` (a black box), each with a fake implementation for
         dynamic shapes, an autograd formula, and ``torch.library.opcheck``
       * How to measure a hand kernel against the kernel Inductor generates from the same
         PyTorch code, fairly (both tuned, both launched from a compiled graph):
         percent of the copy roofline for the kernels alone and for the whole step, the
         GPU's busy share, and the parts of a gap
       * How to check a Triton kernel on a CPU with Triton's interpreter

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later, and Triton: it ships wheels for Linux, and PyTorch's Linux
         wheels bring it; without Triton the page stops at its first cell
       * Familiarity with ``torch.compile``, autograd and the idea of a GPU kernel
       * One CUDA GPU of compute capability 7.5 or newer (current CUDA wheels need
         it) with about 6 GB of memory for the timings; runs on CPU with smaller sizes:
         there Triton's interpreter checks the kernels, and the operators' rows time
         their PyTorch code
       * On CPU, a C++ compiler and the Python headers for Inductor (the first cell
         checks for the compiler); about a minute and 1.1 GB of memory on a 2-core CPU
"""

# %%
# Overview
# --------
#
# In a pre-norm transformer every block ends with a residual add, and the next block
# starts by normalizing the sum: ``h = x + residual``, then
# ``y = h / sqrt(mean(h**2) + eps) * weight`` (RMSNorm). Both are memory-bound: almost no
# arithmetic per byte, so their speed is the speed at which they read and write memory.
# Eager PyTorch runs each operation as its own kernel, with a round trip to memory for
# every intermediate. One fused kernel reads ``x`` and ``residual`` once and writes ``y``
# and ``h`` once; its backward reads the two incoming gradients and ``h`` once and writes
# one gradient (the same for ``x`` and ``residual``). Inductor fuses the same code by
# itself, so the question this page measures is whether a hand kernel beats Inductor's,
# and what wrapping it as an operator costs.
#
# Dynamo can trace a plain call of a Triton kernel inside a compiled function, but such a
# call has no gradient, and outside Dynamo (eager code, ``torch.export``, tensor
# subclasses, the dispatcher) it is just Python that takes raw pointers. An *operator*
# has a name, a schema, a rule for its output shapes and an autograd formula, and
# ``torch.library`` builds one around the kernel in two ways:
#
# * ``triton_op`` with ``wrap_triton``: the operator's body is traced, so Inductor sees the
#   Triton kernel, launches it from its own generated code and knows which buffers it
#   reads and writes. It cannot fuse other work into your kernel.
# * ``custom_op``: the operator is opaque. Inductor calls it through the dispatcher, as it
#   would an ATen kernel it does not generate; any code can hide behind it.
#
# Setup
# -----
#
# The page needs Triton, and on a CPU a C++ compiler for Inductor: ``measure.require``
# stops it here, in one line, where either is missing. On a GPU the kernels are compiled
# for it. On a CPU the page checks them in Triton's **interpreter**, which executes a
# kernel's program instances one after another in NumPy: slow, but it runs anywhere and
# catches indexing and formula mistakes. Triton reads ``TRITON_INTERPRET`` when it is
# first imported (its own ``tl.sum`` and friends are ``@triton.jit`` functions too), and
# PyTorch's compiler modules import it early, so that check runs in a fresh Python
# process started with the variable set; the page's own process launches no Triton
# kernel on a CPU.

import inspect
import os
import subprocess
import sys
import warnings
from functools import partial

import torch

import measure

device = "cuda" if torch.cuda.is_available() else "cpu"
measure.require(triton=True, cxx=device == "cpu")  # the lesson is a Triton kernel

import matplotlib.pyplot as plt
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl
from tabulate import tabulate
from torch import Tensor
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code
from torch.library import triton_op, wrap_triton

EPS = 1e-6
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    warnings.filterwarnings("ignore", message=".*TensorFloat32")
    shapes = [(256, 2048), (16384, 4096)]  # (rows, width) for the operator alone
    tokens, width, depth = 32768, 512, 2  # the model
else:
    device_name = f"CPU, {torch.get_num_threads()} threads"
    shapes = [(64, 256), (1024, 512)]
    tokens, width, depth = 256, 128, 2
tag = "" if device == "cuda" else " (PyTorch body)"  # what a CPU runs in the operators
print(f"torch {torch.__version__}, triton {triton.__version__} on {device_name}")

# %%
# Measuring
# ---------
#
# Timings come from the site's measurement core (:ref:`measuring_recipe` explains it).
# Caches stay warm between calls, as in training (``triton.testing.do_bench`` would flush
# the L2 cache); at the large shape the working set is far bigger than the L2 cache. A
# step is a forward and a backward, with the gradients returned by
# ``torch.autograd.grad``, so none accumulates between steps. ``read`` prints the words
# under each table from its numbers: the fastest row, what bounds it (on a GPU, its busy
# share) and its largest part, then each row against the row above it.


def fwd_bwd(fn, args, inputs, grads):
    """A step: one forward and backward; the gradients are returned, not accumulated."""
    return lambda: torch.autograd.grad(fn(*args), inputs, grads)


def read(label, timed):
    """Print the fastest row, its bound and largest part; each row against the one above."""
    best = min(timed.values(), key=lambda row: row.ms)
    part, ms = max(best.parts.items(), key=lambda kv: kv[1])
    how = f"GPU busy {best.busy:.0f} %: {best.bound}-bound, " if best.bound else ""
    print(f"{label}: fastest {best.name!r} ({how}largest part {part}: {ms:.3f} ms)")
    for name, above in zip(list(timed)[1:], timed):
        print(timed.versus(name, above, f"{label}: "))


# %%
# The reference in PyTorch
# ------------------------
#
# ``add_rmsnorm_ref`` is the operation as a reader would write it; autograd derives its
# backward. ``add_rmsnorm_ref_bwd`` writes that backward out by hand, with
# ``r = 1 / sqrt(mean(h**2) + eps)`` and ``g = dy * weight``:
# ``dh = r * g - r**3 * h * mean(g * h) + dh_out`` (``dh_out`` is the gradient that
# reaches ``h`` from the rest of the model), and the weight's gradient sums
# ``dy * h * r`` over the rows. It is the formula the Triton backward implements, and the
# CPU implementation of the operator below.


def add_rmsnorm_ref(x: Tensor, res: Tensor, w: Tensor, eps: float):
    h = x + res
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w, h


def add_rmsnorm_ref_bwd(dy: Tensor, dh: Tensor, h: Tensor, w: Tensor, eps: float):
    r = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    g = dy * w
    dx = r * g - r.pow(3) * h * (g * h).mean(-1, keepdim=True) + dh
    return dx, (dy * h * r).sum(0)


# %%
# The Triton kernels
# ------------------
#
# The forward runs one program per row: it loads the row of ``x`` and of ``residual``
# (``BLOCK``, the width rounded up to a power of two, with a mask for the tail), adds them
# in float32, reduces the sum of squares, and stores ``h`` and ``y``. The backward gives
# each program ``ROWS`` rows: for each it recomputes ``r`` from ``h`` (cheaper than
# storing it: ``h`` is loaded anyway), stores the input gradient, and accumulates
# ``dy * h * r`` for the weight in registers. Each program writes one row of partial
# weight gradients, which a ``sum`` over the programs finishes; one program per row would
# need a cross-program reduction for the weight instead.
#
# How many warps (groups of 32 threads) share a program's work is a launch setting, not
# part of the kernel, and the best value depends on the GPU and the width. Where its
# heuristics leave several settings for a kernel it generates, Inductor times them on the
# first call and keeps the fastest; ``triton.autotune`` does the same for a hand kernel,
# once per width (``key``), and Inductor times those same configs when it launches the
# kernel itself.
# ``BLOCK`` is no choice here (a program holds a whole row); ``ROWS`` stays at 16.

WARPS = (2, 4, 8, 16)
TUNE = [triton.Config({}, num_warps=w) for w in WARPS]


@triton.autotune(configs=TUNE, key=["N"])
@triton.jit
def add_rmsnorm_fwd_kernel(x_ptr, res_ptr, w_ptr, y_ptr, h_ptr, N, eps, BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    res = tl.load(res_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    h = x + res
    r = (1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N + eps)).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(h_ptr + row * N + cols, h.to(h_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + row * N + cols, (h * r * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.autotune(configs=TUNE, key=["N"])
@triton.jit
def add_rmsnorm_bwd_kernel(dy_ptr, dh_ptr, h_ptr, w_ptr, dx_ptr, dw_ptr, M, N, eps,
                           ROWS: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(ROWS):
        row = pid * ROWS + i
        # the row test as a vector, as Triton 3.9's interpreter needs in a mask
        mask = (cols < N) & (row + tl.zeros_like(cols) < M)
        h = tl.load(h_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        dh = tl.load(dh_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        r = (1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N + eps)).to(tl.float32)
        g = dy * w
        dx = r * g - r * r * r * h * (tl.sum(g * h, axis=0) / N) + dh
        tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += dy * h * r
    tl.store(dw_ptr + pid * N + cols, dw, mask=cols < N)


ROWS = 16  # rows per backward program; not tuned: the launcher sizes a buffer by it
kernels = (add_rmsnorm_fwd_kernel, add_rmsnorm_bwd_kernel)


# %%
# Calling the kernels eagerly
# ---------------------------
#
# A Triton kernel is launched with a grid, ``kernel[grid](args)``; tensors arrive as
# pointers to their first element, so the launchers make the inputs contiguous. These two
# plain functions are the whole eager story; both operators below reuse them, and
# ``wrap``, the identity here, is where the ``triton_op`` passes ``wrap_triton``.


def triton_fwd(x, res, w, eps, wrap=lambda kernel: kernel):
    x, res = x.contiguous(), res.contiguous()
    y, h = torch.empty_like(x), torch.empty_like(x)
    (M, N), BLOCK = x.shape, triton.next_power_of_2(x.shape[1])
    wrap(add_rmsnorm_fwd_kernel)[(M,)](x, res, w, y, h, N, eps, BLOCK)
    return y, h


def triton_bwd(dy, dh, h, w, eps, wrap=lambda kernel: kernel):
    dy, dh = dy.contiguous(), dh.contiguous()
    (M, N), BLOCK = h.shape, triton.next_power_of_2(h.shape[1])
    grid = (triton.cdiv(M, ROWS),)  # programs
    dx, dw = torch.empty_like(h), h.new_empty(*grid, N, dtype=torch.float32)
    wrap(add_rmsnorm_bwd_kernel)[grid](dy, dh, h, w, dx, dw, M, N, eps, ROWS, BLOCK)
    return dx, dw.sum(0).to(w.dtype)


# %%
# The check: the kernels' outputs and gradients against PyTorch's autograd in float64,
# at a width that is not a power of two and a row count that is not a multiple of
# ``ROWS``, so both masks are exercised. On a CPU it runs in the interpreter, in a fresh
# process that receives this page's functions as source (``inspect.getsource``, which is
# how ``@triton.jit`` reads a kernel too) and one config: the interpreter cannot time
# configs. A small size keeps it quick there.


def check_kernels(M, N, device="cpu", how="in Triton's interpreter"):
    """The Triton kernels against autograd in float64; prints the largest errors."""
    x, res, dy, dh = (torch.randn(M, N, device=device) for _ in range(4))
    w = torch.randn(N, device=device)
    x64, res64, w64 = (t.double().requires_grad_() for t in (x, res, w))
    y64, h64 = add_rmsnorm_ref(x64, res64, w64, EPS)
    g64 = torch.autograd.grad((y64, h64), (x64, res64, w64), (dy.double(), dh.double()))
    y, h = triton_fwd(x, res, w, EPS)
    dx, dw = triton_bwd(dy, dh, h, w, EPS)
    got, want = [y, h, dx, dx, dw], [y64, h64, *g64]
    torch.testing.assert_close([t.double() for t in got], want, rtol=1e-4, atol=1e-4)
    err = [f"{(g.double() - r).abs().max():.2e}" for g, r in zip(got, want)]
    print(f"Triton kernels {how}, {M}x{N}, max error against float64 (autograd):")
    print(tabulate([err], ["y", "h", "dx", "dres", "dw"], "github"))


if device == "cuda":
    check_kernels(300, 1000, device, "compiled for the GPU")
else:  # a fresh process, the interpreter on, given this page's functions as source
    script = "import torch, triton\nimport triton.language as tl\n"
    script += "from torch import Tensor\nfrom tabulate import tabulate\n"
    # one config: the interpreter cannot time configs against each other
    script += f"EPS, ROWS, TUNE = {EPS!r}, {ROWS}, [triton.Config({{}})]\n"
    functions = [add_rmsnorm_ref, triton_fwd, triton_bwd, check_kernels]
    functions += [kernel.fn.fn for kernel in kernels]  # Autotuner(JIT(function))
    script += "".join(map(inspect.getsource, functions)) + "check_kernels(37, 40)"
    env = os.environ | {"TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    print(run.stdout.decode(), end="")

# %%
# Registering the operator, two ways
# ----------------------------------
#
# **triton_op.** The body may call only PyTorch operators and kernels wrapped in
# ``wrap_triton`` (here, the launchers given ``wrap=wrap_triton``). ``triton_op`` uses the
# body itself as the fake implementation (run on fake tensors, it only allocates
# outputs), and under ``torch.compile`` AOTAutograd traces the body, so Inductor receives
# the kernel launch as a node it understands. Called eagerly, the wrapper steps aside and
# the kernel is launched directly. Triton kernels run only on a GPU (outside the
# interpreter), so on a CPU the body is the PyTorch reference (the branch is on the
# device, which is fixed while tracing): there Inductor compiles the reference itself.
#
# **custom_op.** The body is the plain launcher, the implementation for every device
# (``device_types`` would limit it to some); the schema is written out, as it leaves
# ``wrap`` out. ``register_kernel("cpu")`` replaces the body on the CPU with the PyTorch
# code, and ``register_fake`` gives the output shapes, computed from the inputs' shapes,
# so a batch size that ``torch.compile`` treats as symbolic flows through: the forward's
# allocates empty outputs; the backward's is the PyTorch reference, which on fake tensors
# computes shapes only, as the ``triton_op``'s body does. Each registration also needs a
# backward operator of the same kind.


Pair = tuple[Tensor, Tensor]  # what both operators return


@triton_op("kern::add_rmsnorm", mutates_args=())
def add_rmsnorm(x: Tensor, res: Tensor, w: Tensor, eps: float) -> Pair:
    if x.device.type == "cpu":
        return add_rmsnorm_ref(x, res, w, eps)
    return triton_fwd(x, res, w, eps, wrap=wrap_triton)


@triton_op("kern::add_rmsnorm_bwd", mutates_args=())
def add_rmsnorm_bwd(dy: Tensor, dh: Tensor, h: Tensor, w: Tensor, eps: float) -> Pair:
    if h.device.type == "cpu":
        return add_rmsnorm_ref_bwd(dy, dh, h, w, eps)
    return triton_bwd(dy, dh, h, w, eps, wrap=wrap_triton)


# the schemas, written out: they leave `wrap` out
fwd_schema = "(Tensor x, Tensor res, Tensor w, float eps) -> (Tensor, Tensor)"
bwd_schema = "(Tensor dy, Tensor dh, Tensor h, Tensor w, float eps) -> (Tensor, Tensor)"
custom_op = partial(torch.library.custom_op, mutates_args=())
opaque = custom_op("kern::add_rmsnorm_opaque", triton_fwd, schema=fwd_schema)
opaque_bwd = custom_op("kern::add_rmsnorm_opaque_bwd", triton_bwd, schema=bwd_schema)
opaque.register_kernel("cpu")(add_rmsnorm_ref)
opaque_bwd.register_kernel("cpu")(add_rmsnorm_ref_bwd)
opaque.register_fake(lambda x, res, w, eps: (torch.empty_like(x), torch.empty_like(x)))
_ = opaque_bwd.register_fake(add_rmsnorm_ref_bwd)  # `_ =`: a notebook would print it

# %%
# The autograd formula is shared: ``setup_context`` saves ``h`` (an output) and the
# weight, and ``backward`` calls the backward operator of the same registration, once for
# both ``x`` and ``residual`` (their gradients are equal) and once for the weight. ``eps``
# gets no gradient.


def setup_context(ctx, inputs, output):
    ctx.save_for_backward(output[1], inputs[2])
    ctx.eps = inputs[3]


def backward(bwd_op, ctx, dy, dh):
    h, w = ctx.saved_tensors
    dx, dw = bwd_op(dy, dh, h, w, ctx.eps)
    return dx, dx, dw, None


for op, bwd_op in ((add_rmsnorm, add_rmsnorm_bwd), (opaque, opaque_bwd)):
    op.register_autograd(partial(backward, bwd_op), setup_context=setup_context)

# %%
# ``torch.library.opcheck`` tests a registration the way PyTorch's subsystems will use it:
# the schema against what the body does (no aliasing, no hidden mutation), the autograd
# registration, the fake implementation against the real one, and AOTAutograd tracing with
# dynamic shapes, forward and backward. It raises on the first failure.

x, res = (torch.randn(64, width, device=device, requires_grad=True) for _ in range(2))
w = torch.rand(width, device=device, requires_grad=True)
registrations = {"kern::add_rmsnorm": add_rmsnorm, "kern::add_rmsnorm_opaque": opaque}
for qualname, op in registrations.items():
    results = torch.library.opcheck(op, (x, res, w, EPS))
    assert set(results.values()) == {"SUCCESS"}, results
    print(f"opcheck {qualname}: {', '.join(f'{k} {v}' for k, v in results.items())}")

# %%
# What Inductor receives
# ----------------------
#
# ``run_and_get_code`` compiles a function and returns the code Inductor generated (it
# resets Dynamo first, so it runs here, before anything else is compiled). Through
# ``triton_op`` the generated code launches ``add_rmsnorm_fwd_kernel`` itself on a GPU (on
# a CPU it fuses the reference into its own loops); through ``custom_op`` it calls the
# operator, whose body Inductor never sees.

with torch.no_grad():
    for qualname, op in registrations.items():
        compiled = torch.compile(partial(op, eps=EPS))
        code = "\n".join(run_and_get_code(compiled, x, res, w)[1])
        black_box = f"torch.ops.{qualname.replace('::', '.')}." in code
        kernel = "add_rmsnorm_fwd_kernel" in code
        print(f"{qualname}: a black-box call {black_box}; launches the kernel {kernel}")
        assert black_box == (op is opaque)
        assert kernel == (op is add_rmsnorm and device == "cuda")

# %%
# A model compiled around the operator
# ------------------------------------
#
# Each block: add the previous block's output to the residual stream and normalize, then
# ``Linear`` and GELU. The operator is an argument, so the same weights run with the
# PyTorch reference, the ``triton_op`` and the ``custom_op`` (the seed is fixed in the
# constructor for that; on a CPU the operators' rows are tagged: they run PyTorch code).
# ``fullgraph=True`` turns any graph break into an error, and the page also checks
# Dynamo's counters: one graph, no break. The batch is marked dynamic and a second,
# smaller batch must run the same graph: that is the fake implementations at work, with a
# symbolic row count. Each model's error is the largest difference from a float64 run,
# over its output and every gradient, relative to that tensor's largest value.


class Net(nn.Module):
    def __init__(self, op):
        super().__init__()
        torch.manual_seed(0)
        self.op = op
        self.norms = nn.ParameterList(1 + torch.randn(width) / 10 for _ in range(depth))
        self.linears = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        out, h = x, torch.zeros_like(x)  # the residual stream starts at zero
        for w, linear in zip(self.norms, self.linears):
            y, h = self.op(out, h, w, EPS)
            out = F.gelu(linear(y))
        return out + h


torch.manual_seed(1)
inp = torch.randn(tokens, width, device=device)
ones = torch.ones_like(inp)  # the gradient of the loss, the sum, at its output
ref64 = Net(add_rmsnorm_ref).to(device).double()
ref64(inp.double()).sum().backward()
variants = {
    "eager, PyTorch op": Net(add_rmsnorm_ref),
    "compiled, PyTorch op": Net(add_rmsnorm_ref),
    f"compiled, triton_op{tag}": Net(add_rmsnorm),
    f"compiled, custom_op{tag}": Net(opaque),
}
model_steps, rows = {}, []
for name, net in variants.items():
    model = net.to(device)
    if name.startswith("compiled"):
        model = torch.compile(net, fullgraph=True)
        graphs = counters["stats"]["unique_graphs"]
        breaks = sum(counters["graph_break"].values())
        for batch in (tokens, tokens // 2):
            small = inp[:batch].clone()
            torch._dynamo.mark_dynamic(small, 0)
            model(small).sum().backward()
        assert counters["stats"]["unique_graphs"] == graphs + 1, "not one graph"
        assert sum(counters["graph_break"].values()) == breaks, "graph break"
        net.zero_grad()
    out = model(inp)
    out.sum().backward()
    got = [out, *(p.grad for p in net.parameters())]
    want = [ref64(inp.double()), *(p.grad for p in ref64.parameters())]
    err = max((g.double() - r).abs().max() / r.abs().max() for g, r in zip(got, want))
    rows.append([name, err.item()])
    model_steps[name] = fwd_bwd(model, (inp,), list(net.parameters()), (ones,))
    assert err <= 4 * rows[0][1] + 1e-5, f"{name}: differs from float64"  # row 0: eager
print(tabulate(rows, ["model", "largest relative error vs float64"], "github", ".2e"))

# %%
# Measuring the operator alone
# ----------------------------
#
# Four rows per shape, each a forward and a backward of the operator, timed together:
# eager PyTorch, then three compiled functions, so that the hand kernels and Inductor's
# are launched the same way, by Inductor's generated code inside a compiled graph: the
# same PyTorch code (Inductor's own kernels), the ``triton_op`` (Inductor launches the
# hand kernels) and the ``custom_op`` (Inductor calls the black box through the
# dispatcher, which launches the same kernels); on a CPU the operators run their PyTorch
# bodies, and their rows say so. On a GPU the warm-up also tunes both kinds of kernel,
# and the page then calls the launchers eagerly once, so that Triton's own tuner names
# the number of warps it keeps at that width.
#
# The roofline: forward and backward together must read ``x``, ``residual``, ``dy``,
# ``dh_out`` and ``h`` and write ``y``, ``h`` and the input gradient, eight passes over a
# rows x width float32 tensor; the roofline time is those bytes at the speed of a large
# on-device copy, which the core measures. The table sets it against two times. The
# **step** column divides it by the whole step (on a GPU, the time the GPU spent waiting
# for the host included). On a GPU the **kernels alone** column divides it by the busy
# time, the kernels' own time per step (every kernel of the step, the small sum that
# finishes the weight's gradient too), so it rates the kernels whatever the host did.

bytes_per_ms, _ = measure.copy_bandwidth(device)

static = partial(torch.compile, dynamic=False)
op_rows = {  # a lambda each: no compiled function shares a code object and its cache
    "PyTorch, eager": add_rmsnorm_ref,
    "PyTorch, compiled": static(add_rmsnorm_ref),
    f"triton_op{tag}, compiled": static(lambda *a: add_rmsnorm(*a)),
    f"custom_op{tag}, compiled": static(lambda *a: opaque(*a)),
}
kinds = ["step, % of roofline"] + ["kernels alone, % of roofline"] * (device == "cuda")
print(f"Operator alone, float32, {device_name}; copy: {bytes_per_ms / 1e6:.0f} GB/s")
chart = {}  # row -> its kinds of % of the copy roofline
for M, N in shapes:
    x, res, dy, dh = (torch.randn(M, N, device=device) for _ in range(4))
    w = torch.rand(N, device=device, requires_grad=True)
    args, shape = (x.requires_grad_(), res.requires_grad_(), w, EPS), f"{M}x{N}"
    steps = {k: fwd_bwd(f, args, args[:3], (dy, dh)) for k, f in op_rows.items()}
    roof = 8 * x.nbytes / bytes_per_ms  # the roofline time, ms
    timed = measure.compare(steps, device, roofline_ms=roof)  # warm-up compiles
    pct = {
        k: [100 * roof / t for t in (r.ms, r.busy_ms) if t] for k, r in timed.items()
    }
    headers = ["shape", "operator", *timed.headers(), *kinds]
    rows = [[shape, k, *timed.cells(k), *pct[k]] for k in timed]
    print(tabulate(rows, headers, "github", ["", "", *timed.formats(), ".0f", ".0f"]))
    read(shape, timed)
    if device == "cuda":  # Triton's own tuner, called eagerly, on the same configs
        triton_bwd(dy, dh, triton_fwd(x, res, w, EPS)[1], w, EPS)
        kept = [kernel.best_config.num_warps for kernel in kernels]
        hand, ind = timed["triton_op, compiled"], timed["PyTorch, compiled"]
        print(
            f"{shape}, hand kernels (Triton's tuner: num_warps {kept}, fwd/bwd) vs "
            f"Inductor's, in two parts. Kernels alone: {pct[hand.name][1]:.0f} vs "
            f"{pct[ind.name][1]:.0f} % of copy roofline. Launch paths: the GPU waited "
            f"{hand.ms - hand.busy_ms:.3f} vs {ind.ms - ind.busy_ms:.3f} ms per step."
        )
    chart |= {f"{shape}: {k}": v for k, v in pct.items()}
for k in ["PyTorch, compiled"] + ["triton_op, compiled"] * (device == "cuda"):
    for what, value in zip(kinds, pct[k]):  # on a CPU the operators run PyTorch code
        measure.headline(f"{k}: {what} (largest shape)", value, "%")

fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
for i, kind in enumerate(kinds):  # the kernels' bars thinner, over the steps'
    ax.barh(list(chart), [v[i] for v in chart.values()], 0.8 - 0.4 * i, label=kind)
ax.invert_yaxis()
fig.legend(loc="outside lower center", ncols=2, fontsize="small")
ax.set_title(f"Add + RMSNorm alone, forward + backward, float32\n{device_name}")
plt.show()

# %%
# How to read it: the step column, drawn as the wide bars, says how close a whole step
# comes to moving its eight passes at copy speed; on a GPU the kernels-alone column, the
# thin bars, says how close its kernels come. What lies between the two is time the GPU
# waited for the host (autograd, the compiled graph's entry, the launches): the step
# column mixes the kernels with the path that launches them, and the kernels-alone
# column keeps them apart. So a row can read CPU-bound (the core's word for a step less
# than 85 % busy) while its kernels run near copy speed: the bound says where the step's
# time went, not how good its kernels are. Eager PyTorch writes and rereads every
# intermediate; on a GPU the compiled rows set the hand kernels against Inductor's,
# tuned and launched alike, and the ``custom_op`` row runs the same hand kernels behind
# the dispatcher's call of the black box. A small shape fits in the caches, so it can
# pass the roofline of a copy measured far out of cache. Under each table, one line names
# the fastest row, what bounds it and its largest part; then each row is compared with
# the row above it, from paired windows, with the change in GPU busy time, the change in
# waiting and the parts that moved most. On a GPU a last line takes the hand kernels
# against Inductor's in those two parts: the kernels alone, in percent of the roofline,
# and the launch paths, as the time the GPU waited per step.
#
# Measuring the model
# -------------------
#
# The same four models as above, each timed for a training step (forward, the sum as
# the loss, backward; gradients returned by ``torch.autograd.grad``, not accumulated).
# The compiled rows differ only in what Inductor receives for the operator: PyTorch code
# it can fuse with the neighbouring GELU, a Triton kernel it launches but cannot fuse
# into, or a black box. On a CPU both operators' bodies are PyTorch code (the tag says
# so): the Triton kernels ran only in the interpreter's check.

timed = measure.compare(model_steps, device)  # asserts that nothing compiles
print(f"Training step, {depth} blocks, {tokens} x {width}, float32, {device_name}")
table = [[name, *timed.cells(name)] for name in timed]
print(tabulate(table, ["model", *timed.headers()], "github", ["", *timed.formats()]))
read("training step", timed)

# %%
# Conclusion
# ----------
#
# A memory-bound fusion such as residual add + RMSNorm is a few dozen lines of Triton,
# forward and backward, and Triton's interpreter checks them on a CPU against float64.
# ``triton_op`` with ``wrap_triton`` makes the kernel an operator whose launch Inductor
# generates itself; ``custom_op`` makes it a black box; both need a fake implementation
# for shapes, an autograd formula and an ``opcheck``, and then a model compiles around
# either with ``fullgraph=True`` and a dynamic batch. Whether the hand kernel is worth it
# is a measurement: against Inductor's kernel for the same PyTorch code, both tuned and
# both launched from a compiled graph, in percent of the copy roofline for the kernels
# alone and for the whole step (the difference is the path that launches them), and
# inside the model, where the operator also stops Inductor from fusing its neighbours
# into it.
#
# Further reading
# ---------------
#
# * :ref:`torch_compile_tutorial`: what Dynamo, AOTAutograd and Inductor each do
# * :ref:`foreach_map_recipe`: a fusion that Inductor writes for you, measured against a
#   hand-written kernel (``fused=True`` Adam) and the copy roofline
# * :ref:`dynamic_shapes_tutorial`: what a symbolic batch size does to guards and kernels
# * `Using user-defined Triton kernels with torch.compile
#   <https://docs.pytorch.org/tutorials/recipes/torch_compile_user_defined_triton_kernel_tutorial.html>`_
# * `Python custom operators
#   <https://docs.pytorch.org/tutorials/advanced/python_custom_ops.html>`_
# * `torch.library API reference <https://docs.pytorch.org/docs/stable/library.html>`_
# * `Triton tutorials <https://triton-lang.org/main/getting-started/tutorials/index.html>`_
