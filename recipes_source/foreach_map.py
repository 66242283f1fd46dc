"""
.. _foreach_map_recipe:

Horizontal fusion with foreach_map: a compiled Adam
===================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * Why an optimizer step over many tensors is bound by kernel launches and memory traffic
       * What the ``torch._foreach_*`` ops batch together, and what they leave on the table
       * How ``foreach_map`` turns any pointwise function into one fused foreach kernel
         under ``torch.compile``
       * How to write Adam with ``foreach_map``, check it against ``torch.optim.Adam``, and
         measure it against the memory-bandwidth roofline

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
       * A CUDA GPU of compute capability 7.0 or newer for the timings; runs on CPU with smaller sizes
"""

# %%
# Overview
# --------
#
# An optimizer step touches every parameter of a model, but does very little work on each
# element: Adam reads a parameter, its gradient and two running averages, does a dozen
# floating-point operations, and writes three tensors back. A model is not one tensor but
# hundreds, so a plain Python loop launches one small kernel per operation *per tensor*.
# Two kinds of fusion attack that cost:
#
# * **Horizontal fusion** runs the *same* operation on *many* tensors in one kernel. This is
#   what the ``torch._foreach_*`` ops do: ``torch._foreach_mul_(tensors, 0.9)`` scales a whole
#   list with a handful of launches instead of one per tensor.
# * **Vertical fusion** chains *several* operations on the *same* data in one kernel, so the
#   intermediate values stay in registers instead of going back to memory between steps.
#
# Eager foreach ops give you the first but not the second: each op is still a separate pass
# over memory. ``foreach_map`` gives you both. You write the update for one tensor as an
# ordinary pointwise function, ``foreach_map`` applies it to every tensor of the lists you
# pass, and ``torch.compile`` turns the whole thing into a single pass over memory (one
# kernel, or a few when the tensors differ in shape) that reads each input once and writes
# each output once.
#
# .. note::
#
#    ``foreach_map`` lives at ``torch._higher_order_ops.foreach_map.foreach_map`` and is a
#    **prototype** API: its location, signature and the code it generates may change between
#    releases. The version this page was built with is printed below.
#
# Setup
# -----
#
# Sizes depend on the device. On a GPU the benchmark uses a stack of ``Linear`` layers of about
# 10 million and about 170 million parameters; on a CPU it uses smaller stacks so that the page
# still runs in a minute or two.

import time

import matplotlib.pyplot as plt
import torch
from tabulate import tabulate
from torch._higher_order_ops.foreach_map import foreach_map

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    # (width, depth) of a stack of nn.Linear(width, width) layers with biases
    bench_shapes = [(1024, 10), (4096, 10)]
else:
    device_name = "CPU"
    bench_shapes = [(256, 4), (1024, 4)]
    print("No CUDA GPU found: running on the CPU with smaller models.")

print(f"torch {torch.__version__} on {device} ({device_name})")


def make_model(width, depth):
    layers = [torch.nn.Linear(width, width) for _ in range(depth)]
    return torch.nn.Sequential(*layers).to(device)


def num_params(model):
    return sum(p.numel() for p in model.parameters())


for width, depth in bench_shapes:
    n_million = num_params(make_model(width, depth)) / 1e6
    print(
        f"benchmark model: {depth} x Linear({width}, {width}) = {n_million:6.2f} M parameters"
    )

# %%
# Foreach ops: horizontal fusion in eager mode
# --------------------------------------------
#
# The foreach ops take lists of tensors (and scalars, or lists of scalars) and apply one
# operation to every element of the lists. Their results are the same as a Python loop over
# the tensors; the difference is how many kernels run. On CUDA a foreach op packs many tensors
# into each launch; on CPU it falls back to a loop in C++, which still saves the Python
# overhead. The tensors do not need to share a shape.

xs = [torch.randn(s, device=device) for s in [(3,), (4, 5), (64, 64)]]
ys = [torch.randn_like(x) for x in xs]

looped = [x + 0.5 * y for x, y in zip(xs, ys)]
batched = torch._foreach_add(xs, ys, alpha=0.5)
for a, b in zip(looped, batched):
    torch.testing.assert_close(a, b)
print(f"torch._foreach_add over {len(xs)} tensors matches the Python loop")

# %%
# The catch is that every foreach op is still a full trip through memory. Adam written with
# foreach ops is about ten of them in a row (add the weight decay, update the first moment,
# update the second moment, square root, divide, ...), and each one reads its inputs from
# memory and writes its result back. For a step whose arithmetic is trivial, those extra
# trips *are* the cost. The hand-written ``fused=True`` kernel of ``torch.optim.Adam`` does the
# whole update in one pass, but it exists only for the optimizers someone wrote it for.
#
# foreach_map: any pointwise function, fused
# ------------------------------------------
#
# ``foreach_map(fn, *operands)`` calls ``fn`` once per position of the list operands:
# ``fn(a[i], b[i], ...)``. Operands that are not lists (a Python float, a 0-dim tensor) are
# handed unchanged to every call. It returns a list with one result per position. In eager mode
# it is literally that loop. Under ``torch.compile`` it becomes a *higher-order operator*:
# Dynamo traces ``fn`` once into a subgraph, and Inductor lowers that subgraph into a
# horizontally fused foreach kernel for the whole list, with the body of ``fn`` vertically fused
# inside.
#
# A few rules follow from it being a higher-order operator:
#
# * ``fn`` must be pointwise: every output element depends only on the same element of the
#   inputs (and on scalars). No reductions, no reshapes.
# * ``fn`` must not mutate its inputs. Compute new tensors and copy them back afterwards with
#   ``torch._foreach_copy_``; Inductor turns that copy into an in-place store in the same
#   kernel.
# * Give ``fn`` one tensor output, and call ``foreach_map`` once per result list. Inductor fuses
#   consecutive calls into the same kernels anyway (the kernel counts below show it). A single ``fn``
#   returning a tuple of results also runs, but on CUDA with torch 2.11 it compiled to extra
#   kernels that wrote the results to temporary buffers and copied them back: more launches and
#   more memory traffic, the opposite of what fusion is for.
# * Pass hyperparameters as operands rather than capturing them from an enclosing function.


def scaled_silu(x, gate, scale):
    return scale * x * torch.sigmoid(gate)


def scaled_silu_all(xs, ys):
    return foreach_map(scaled_silu, xs, ys, 2.0)


eager_out = scaled_silu_all(xs, ys)
compiled_out = torch.compile(scaled_silu_all, fullgraph=True)(xs, ys)
for x, y, a, b in zip(xs, ys, eager_out, compiled_out):
    torch.testing.assert_close(a, 2.0 * x * torch.sigmoid(y))
    torch.testing.assert_close(b, a)
print(
    f"foreach_map(scaled_silu, ...) returned {len(compiled_out)} tensors; eager and compiled agree"
)

# %%
# Adam, one element at a time
# ---------------------------
#
# Adam with L2 weight decay keeps, for every parameter :math:`p`, a first moment :math:`m`
# and a second moment :math:`v`. At step :math:`t` with gradient :math:`g`:
#
# .. math::
#
#    \begin{aligned}
#    g' &= g + \lambda p \\
#    m &\leftarrow \beta_1 m + (1 - \beta_1) g' \\
#    v &\leftarrow \beta_2 v + (1 - \beta_2) g'^2 \\
#    p &\leftarrow p - \frac{\alpha}{1 - \beta_1^t}
#          \cdot \frac{m}{\sqrt{v} / \sqrt{1 - \beta_2^t} + \epsilon}
#    \end{aligned}
#
# The decayed gradient :math:`g'` is what both moments see, so the weight decay is a real part
# of the update, not a side computation whose result is dropped. Each line becomes one
# pointwise function. The step counter :math:`t` is a 0-dim tensor on the device rather than a
# Python int: a Python int would be baked into the compiled code as a constant, and every new
# step would recompile. As a tensor it is just another input.


def decayed_grad(g, p, weight_decay):
    return g + weight_decay * p


def first_moment(m, g, beta1):
    return m + (1 - beta1) * (g - m)  # the same as m.lerp(g, 1 - beta1)


def second_moment(v, g, beta2):
    return beta2 * v + (1 - beta2) * g * g


def param_update(p, m, v, step, lr, beta1, beta2, eps):
    bias_correction1 = 1 - beta1**step
    bias_correction2 = 1 - beta2**step
    denom = v.sqrt() / bias_correction2.sqrt() + eps
    return p - (lr / bias_correction1) * m / denom


# %%
# The step chains the four maps. Nothing is written in place inside a map; the three
# ``torch._foreach_copy_`` calls at the end store the new values into the optimizer state and
# the parameters. The decayed gradients are an intermediate list that is never copied anywhere,
# so once everything is fused Inductor never writes it to memory: each decayed gradient lives in
# a register between the line that computes it and the two moment updates that use it.
# ``dynamic=False`` asks for one specialized kernel per set of shapes.


def adam_step(
    params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay
):
    step.add_(1)
    grads = foreach_map(decayed_grad, grads, params, weight_decay)
    new_exp_avgs = foreach_map(first_moment, exp_avgs, grads, beta1)
    new_exp_avg_sqs = foreach_map(second_moment, exp_avg_sqs, grads, beta2)
    torch._foreach_copy_(exp_avgs, new_exp_avgs)
    torch._foreach_copy_(exp_avg_sqs, new_exp_avg_sqs)
    new_params = foreach_map(
        param_update, params, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps
    )
    torch._foreach_copy_(params, new_params)


compiled_adam_step = torch.compile(adam_step, fullgraph=True, dynamic=False)


class ForeachMapAdam:
    """Adam with L2 weight decay; one compiled foreach_map step for all parameters."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.params = list(params)
        self.hparams = (lr, betas[0], betas[1], eps, weight_decay)
        self.exp_avgs = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p) for p in self.params]
        self.step_count = torch.zeros((), device=self.params[0].device)

    @torch.no_grad()
    def step(self):
        grads = [p.grad for p in self.params]
        compiled_adam_step(
            self.params,
            grads,
            self.exp_avgs,
            self.exp_avg_sqs,
            self.step_count,
            *self.hparams,
        )


# %%
# Check it against ``torch.optim.Adam``
# -------------------------------------
#
# Two copies of the same small model get identical gradients, fresh random ones at every step.
# One copy is updated by ``torch.optim.Adam``, the other by the compiled ``ForeachMapAdam``,
# both with a non-zero weight decay. After every step, every parameter and every piece of
# optimizer state (both moments and the step counter) must agree to float32 precision. The
# model mixes weight matrices and bias vectors of different shapes, as a real model does.


import copy

hp = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.1}
torch.manual_seed(0)
ref_model = torch.nn.Sequential(
    torch.nn.Linear(32, 64),
    torch.nn.GELU(),
    torch.nn.Linear(64, 64),
    torch.nn.GELU(),
    torch.nn.Linear(64, 8),
).to(device)
fm_model = copy.deepcopy(ref_model)
ref_params = list(ref_model.parameters())
fm_params = list(fm_model.parameters())
start = [p.detach().clone() for p in ref_params]

ref_opt = torch.optim.Adam(ref_params, **hp)
fm_opt = ForeachMapAdam(fm_params, **hp)

n_steps = 6
for step in range(n_steps):
    for p_ref, p_fm in zip(ref_params, fm_params):
        g = torch.randn_like(p_ref)
        p_ref.grad = g.clone()
        p_fm.grad = g.clone()
    ref_opt.step()
    t0 = time.perf_counter()
    fm_opt.step()
    if step == 0:
        print(
            f"first ForeachMapAdam.step() (compiles): {time.perf_counter() - t0:6.2f} s"
        )
    for i, (p_ref, p_fm) in enumerate(zip(ref_params, fm_params)):
        state = ref_opt.state[p_ref]
        torch.testing.assert_close(p_fm, p_ref)
        torch.testing.assert_close(fm_opt.exp_avgs[i], state["exp_avg"])
        torch.testing.assert_close(fm_opt.exp_avg_sqs[i], state["exp_avg_sq"])
        torch.testing.assert_close(fm_opt.step_count, state["step"], check_device=False)

moved = max((p - s).abs().max().item() for p, s in zip(ref_params, start))
diff = max((a - b).abs().max().item() for a, b in zip(ref_params, fm_params))
print(
    f"{n_steps} steps, {len(fm_params)} tensors: parameters moved by up to {moved:.2e}"
)
print(
    f"largest difference to torch.optim.Adam: {diff:.2e} (parameters, moments and step all match)"
)

# %%
# What fusion bought: kernels per step
# ------------------------------------
#
# The profiler records every kernel that runs on the device. On CUDA the count below is the
# number of GPU kernels (and memory copies) one ``step()`` launches. A CPU has no kernel
# launches; there the count is the number of leaf operator calls and generated C++ kernels, each
# of which is one loop over the data. Inductor's C++ backend only names its kernels for the
# profiler when ``cpp.enable_kernel_profile`` is set, so the CPU path turns it on.
#
# The model is the smaller benchmark model: ``depth`` weight matrices and ``depth`` bias vectors.

from torch.profiler import ProfilerActivity, profile

if device == "cpu":
    torch._inductor.config.cpp.enable_kernel_profile = True

# CPU operators that allocate, convert a scalar or read one back; they do not loop over the data.
BOOKKEEPING = {
    "aten::empty",
    "aten::empty_strided",
    "aten::to",
    "aten::lift_fresh",
    "aten::detach_",
}
BOOKKEEPING |= {"detach_", "aten::item", "aten::_local_scalar_dense"}


def sync():
    if device == "cuda":
        torch.cuda.synchronize()


def cpu_kernels(event):
    """The innermost operators under ``event`` that do work, or ``event`` itself."""
    if event.name in BOOKKEEPING:
        return []
    inner = [k for child in event.cpu_children for k in cpu_kernels(child)]
    if inner:
        return inner
    return (
        [event.name]
        if event.name.startswith("aten::") or "cpp_fused" in event.name
        else []
    )


def kernels_per_step(fn):
    """Names of the kernels that one call of ``fn`` runs (``fn`` is called once before)."""
    fn()
    sync()
    activity = ProfilerActivity.CUDA if device == "cuda" else ProfilerActivity.CPU
    with profile(activities=[activity], acc_events=True) as prof:
        fn()
        sync()
    if device == "cuda":
        return [
            e.name
            for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA
        ]
    return [k for e in prof.events() if e.cpu_parent is None for k in cpu_kernels(e)]


def short(name):
    """``void at::native::(anonymous namespace)::foo_kernel<...>(...)`` -> ``foo_kernel``."""
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    return name.split("<")[0].split("(")[0].split("::")[-1] if "::" in name else name


def setup(width, depth):
    """A model with gradients and the three optimizers that the benchmark compares."""
    torch.manual_seed(0)
    model = make_model(width, depth)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    bench_hp = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}
    fm = ForeachMapAdam(params, **bench_hp)
    sync()
    t0 = time.perf_counter()
    fm.step()
    sync()
    compile_s = time.perf_counter() - t0
    return {
        "n": num_params(model),
        "tensors": len(params),
        "compile_s": compile_s,
        "eager foreach": torch.optim.Adam(params, foreach=True, **bench_hp),
        "eager fused=True": torch.optim.Adam(params, fused=True, **bench_hp),
        "foreach_map, compiled": fm,
    }


setups = {bench_shapes[0]: setup(*bench_shapes[0])}
first = setups[bench_shapes[0]]
print(
    f"{first['n'] / 1e6:.2f} M parameters in {first['tensors']} tensors on {device_name}"
)
print(f"first compiled step: {first['compile_s']:6.2f} s")

rows = []
for name in ["eager foreach", "eager fused=True", "foreach_map, compiled"]:
    names = kernels_per_step(first[name].step)
    rows.append([name, len(names), ", ".join(sorted({short(n) for n in names}))])
print(tabulate(rows, headers=["step", "kernels per step", "kernel names"]))

# %%
# Eager foreach Adam launches a kernel for every operation of the update, and more than one when
# the lists are long. ``fused=True`` runs the whole update in one hand-written kernel, launched
# once per chunk of the list. The compiled ``foreach_map`` step runs generated foreach kernels
# (``triton_for_fused_*`` on CUDA), each of which does the *whole* update for its share of the
# tensors, plus a tiny kernel that increments the step counter. Inductor puts tensors that it
# tiles differently, such as the weight matrices and the bias vectors here, into separate
# foreach kernels, and splits very long lists to respect a limit on the number of kernel
# arguments; on CUDA you may therefore see two or three kernels rather than one. On a CPU the
# C++ backend emits a single function for the whole step.
#
# The roofline
# ------------
#
# Kernel counts are only half of the story: the step is memory-bound, so the question is how
# close it gets to the memory bandwidth of the device. Adam in float32 must read the parameter,
# the gradient and both moments (16 bytes per parameter) and write the parameter and both
# moments (12 bytes): **28 bytes per parameter** is the least any implementation can move. The
# fastest that traffic can go is measured here with a large device-to-device copy, counting the
# bytes read and the bytes written.

if device == "cuda":
    import triton.testing

    timing_method = "triton.testing.do_bench, median of the runs in 200 ms"

    def median_us(fn):
        return (
            triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3
        )

else:
    from torch.utils import benchmark

    timing_method = (
        "torch.utils.benchmark blocked_autorange, median of >= 0.5 s of runs"
    )

    def median_us(fn):
        return (
            benchmark.Timer(stmt="fn()", globals={"fn": fn})
            .blocked_autorange(min_run_time=0.5)
            .median
            * 1e6
        )


def measure_copy_bandwidth(numel):
    """Bytes per second of a device-to-device copy, counting what is read and what is written."""
    src = torch.ones(numel, device=device)
    dst = torch.empty_like(src)
    us = median_us(lambda: dst.copy_(src))
    nbytes = 2 * src.numel() * src.element_size()
    print(f"copy of {nbytes / 2**30:.2f} GiB (read + write): {us:9.1f} us")
    return nbytes / (us * 1e-6)


copy_bw = measure_copy_bandwidth(
    2**28 if device == "cuda" else 2**25
)  # 1 GiB or 128 MiB
print(f"copy bandwidth: {copy_bw / 1e9:7.1f} GB/s")

BYTES_PER_PARAM = 28


def roofline_us(n_params):
    return n_params * BYTES_PER_PARAM / copy_bw * 1e6


# %%
# Closing the gap at small sizes: CUDA graphs
# -------------------------------------------
#
# At ten million parameters the fused kernel itself needs well under a tenth of a millisecond
# on a modern GPU, and the host-side work around it becomes visible: ``torch.compile`` checks
# its guards on all the tensors in the lists, then launches the kernels. A CUDA graph removes
# both. It records the kernels of one step, with their arguments, once; replaying it launches
# them all with a single call and runs no Python.
#
# The compiled step suits a graph well: it launches a fixed sequence of kernels, allocates
# nothing, and keeps all of its state (including the step counter) in device tensors. The one
# rule to respect is that the graph reads and writes *the same memory* every time. Parameters
# and optimizer state stay put on their own; the gradients must too, so in a training loop call
# ``zero_grad(set_to_none=False)`` (the backward pass then accumulates into the existing
# ``.grad`` tensors) or copy each new gradient into a fixed buffer. ``torch.compile`` can
# manage graphs itself with ``mode="reduce-overhead"``; capturing by hand keeps the mechanics
# visible.
#
# The check below captures one step of a compiled optimizer, then feeds both it and an
# uncaptured twin new gradients, written *in place*, for three steps.


def capture_step(opt):
    """Record one ``opt.step()`` into a CUDA graph. ``opt.step()`` must have run once already."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt.step()
    return graph


if device == "cuda":
    torch.manual_seed(0)
    live_model = copy.deepcopy(ref_model)
    graph_model = copy.deepcopy(ref_model)
    live_params, graph_params = (
        list(live_model.parameters()),
        list(graph_model.parameters()),
    )
    for a, b in zip(live_params, graph_params):
        a.grad = torch.randn_like(a)
        b.grad = a.grad.clone()
    live_opt, graph_opt = (
        ForeachMapAdam(live_params, **hp),
        ForeachMapAdam(graph_params, **hp),
    )
    live_opt.step()
    graph_opt.step()
    graph = capture_step(graph_opt)  # recording runs nothing
    for _ in range(3):
        for a, b in zip(live_params, graph_params):
            a.grad.copy_(torch.randn_like(a))
            b.grad.copy_(a.grad)
        live_opt.step()
        graph.replay()
        for a, b in zip(live_params, graph_params):
            torch.testing.assert_close(b, a)
        torch.testing.assert_close(graph_opt.step_count, live_opt.step_count)
    print(
        f"CUDA graph replay matches the compiled step after {int(graph_opt.step_count.item())} steps"
    )
else:
    print("CUDA graphs need a CUDA GPU: the CPU run skips them.")

# %%
# Benchmark
# ---------
#
# Every variant steps the same parameters with the same (fixed) gradients; each optimizer
# keeps its own state. The table reports the median time of one step and the fraction of the
# roofline it reaches (100% means the step moved its 28 bytes per parameter as fast as the
# copy above). Nothing here is asserted: timings depend on the machine.

results = []
for shape in bench_shapes:
    if shape not in setups:
        setups[shape] = setup(*shape)
    s = setups[shape]
    timings = {
        name: median_us(s[name].step)
        for name in ["eager foreach", "eager fused=True", "foreach_map, compiled"]
    }
    if device == "cuda":
        timings["foreach_map + CUDA graph"] = median_us(
            capture_step(s["foreach_map, compiled"]).replay
        )
    for name, us in timings.items():
        results.append((s["n"], name, us, roofline_us(s["n"]) / us * 100))
    print(
        f"{s['n'] / 1e6:7.2f} M params: first compiled step {s['compile_s']:6.2f} s, "
        f"roofline {roofline_us(s['n']):9.1f} us"
    )

print(f"device: {device_name}, torch {torch.__version__}, timing: {timing_method}")
baseline = {n: us for n, name, us, _ in results if name == "eager foreach"}
table = [
    [f"{n / 1e6:.1f}", name, f"{us:.1f}", f"{pct:.0f}%", f"{baseline[n] / us:.2f}x"]
    for n, name, us, pct in results
]
print(
    tabulate(
        table,
        headers=[
            "params (M)",
            "step",
            "median (us)",
            "% of roofline",
            "speed-up vs eager foreach",
        ],
    )
)

# %%
# The same numbers as a chart: each bar is one way of taking the step, grouped by model size.
# The dashed line is the roofline.

variants = list(dict.fromkeys(name for _, name, _, _ in results))
sizes = list(dict.fromkeys(n for n, _, _, _ in results))
bar_width = 0.8 / len(variants)
fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
for k, name in enumerate(variants):
    pcts = [
        next(p for n, v, _, p in results if n == size and v == name) for size in sizes
    ]
    xs_bar = [i + (k - (len(variants) - 1) / 2) * bar_width for i in range(len(sizes))]
    ax.bar(xs_bar, pcts, bar_width, label=name)
ax.axhline(100, color="black", linestyle="--", linewidth=1)
ax.set_xticks(range(len(sizes)), [f"{n / 1e6:.1f} M params" for n in sizes])
ax.set_ylabel("% of copy-bandwidth roofline")
ax.set_title(f"Adam step, float32, {device_name}")
ax.legend(
    loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, fontsize=8, frameon=False
)
plt.show()

# %%
# Reading the results
# -------------------
#
# Eager foreach Adam makes about ten passes over memory where one would do, and it shows: it
# reaches only a fraction of the roofline at every size. On a GPU, the compiled ``foreach_map``
# step does the same arithmetic in a single pass, so on the large model it moves its 28 bytes
# per parameter about as fast as a plain copy moves bytes, level with or ahead of the
# hand-written ``fused=True`` kernel. On the small model the kernels take well under a tenth
# of a millisecond, and the host work of a compiled call (checking guards on every tensor of
# four lists, launching the kernels) takes longer than that, so the GPU waits. Replaying the
# step as a CUDA graph removes that host work and brings the small model close to the
# roofline too.
#
# On a CPU read the numbers with more care. The copy that sets the roofline goes to main
# memory, while the smaller model's optimizer state partly fits in the caches, and on a shared
# machine the bandwidth left over by other work changes from one measurement to the next; more
# than 100% is possible. And a CPU has far less arithmetic to spare than a GPU: the generated loop
# recomputes the bias corrections (two scalar powers of the step counter) for every vector of
# values it processes, which costs a visible share of the step there. The hand-written CPU
# ``fused=True`` kernel computes them once per tensor.
#
# Conclusion
# ----------
#
# An optimizer step is a memory-bound loop over many tensors, so the way to make it fast is to
# launch few kernels and to move each byte once. The ``torch._foreach_*`` ops batch the tensors
# but still make one pass per operation. ``foreach_map`` lets you write the per-tensor update as
# plain pointwise Python; under ``torch.compile`` Inductor fuses it across tensors and across
# operations into a single pass, and folds the ``torch._foreach_copy_`` write-back into it. The
# Adam built that way matches ``torch.optim.Adam`` to float32 precision, and with a CUDA graph
# for small models it competes with the hand-written fused kernel.
#
# Further reading
# ---------------
#
# * `torch.optim <https://docs.pytorch.org/docs/stable/optim.html>`__: the ``foreach`` and
#   ``fused`` implementations and when each is the default
# * `torch.compile <https://docs.pytorch.org/docs/stable/generated/torch.compile.html>`__ and
#   its ``mode="reduce-overhead"`` option
# * `CUDA graphs <https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-graphs>`__ in the
#   CUDA semantics notes
# * `torch.profiler <https://docs.pytorch.org/docs/stable/profiler.html>`__
# * The source of ``foreach_map``:
#   `torch/_higher_order_ops/foreach_map.py
#   <https://github.com/pytorch/pytorch/blob/main/torch/_higher_order_ops/foreach_map.py>`__
