"""
.. _compiled_training_tutorial:

Compiling a whole training step, end to end
============================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How to compile an ordinary training step (AdamW, a learning-rate schedule,
         gradient clipping) one piece at a time, up to the whole step in CUDA graphs
       * Why the learning rate must live in a tensor once the optimizer is compiled
       * How to check that compiled training computes what eager training computes,
         against a float64 reference
       * How to measure, with ``torch.profiler``, whether the CPU or the GPU sets the
         pace of a step, and which optimizations can help in each case

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
       * The lessons on compiling the optimizer and on compiled autograd help, but are
         not required
       * A CUDA GPU of compute capability 7.5 or newer for the timings (current CUDA
         wheels need it); runs on CPU with smaller sizes (Inductor then needs a C++
         compiler and the Python headers)
"""

# %%
# Overview
# --------
#
# A training step is more than a model: it runs the forward pass, the backward pass,
# gradient clipping, the optimizer and the learning-rate schedule. This page compiles
# such a step one piece at a time and measures every rung of the ladder:
#
# 1. **eager**, in float32, and once more under bfloat16 autocast;
# 2. **compiled model**: ``torch.compile(model)`` compiles forward and backward;
# 3. **+ compiled optimizer**: clipping and ``AdamW.step()`` in one compiled function,
#    with the learning rate in a tensor;
# 4. **whole step in CUDA graphs** (GPU only): the step in one ``torch.compile`` call with
#    ``mode="reduce-overhead"``, in float32 and under bfloat16 autocast.
#
# On a GPU, each row of the final table holds the step time *and* the share of it in
# which the GPU was busy running kernels, measured with ``torch.profiler``. That share is
# the lens of the page: a GPU runs kernels only as fast as the CPU queues them, and
# whether the GPU or the CPU sets the pace decides which rungs can help. On a CPU there
# is no second device to be busy or idle, and the table holds the step times alone.
# Every rung also trains ten steps from the same weights, and its losses and weights are
# compared with a float64 run.
#
# Setup
# -----
#
# A small GPT-style model; on a CPU it is smaller still, since compiling forward,
# backward and the optimizer several times is slow on a small CPU.

import copy
import logging
import statistics
import time
import warnings

import matplotlib.pyplot as plt
import torch
import torch._inductor.utils
import torch.nn as nn
import torch.nn.functional as F
from tabulate import tabulate
from torch._dynamo.utils import counters
from torch.profiler import ProfilerActivity, profile
from torch.utils import benchmark

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    n_layer, d_model, n_head, seq_len, batch = 4, 384, 6, 256, 32
    device_name = torch.cuda.get_device_name()
else:
    n_layer, d_model, n_head, seq_len, batch = 2, 64, 4, 64, 16
    device_name = f"CPU, threads: {torch.get_num_threads()}"
VOCAB, N_CHECK, LR, CLIP = 128, 10, 3e-3, 1.0
print(
    f"torch {torch.__version__} on {device_name}: {n_layer} layers, d_model {d_model}, "
    f"batch {batch} x {seq_len} tokens"
)
# PyTorch's default float32 matmul precision (no TF32) is kept on purpose; Inductor's
# advice to turn TF32 on is about speed, not about this lesson.
warnings.filterwarnings("ignore", message=".*(TensorFloat32|Profiler clears)")
# Compiling ``Optimizer.step`` logs once that the profiler range around it is left out of
# the graph: a note about profiling, not about this lesson.
for name in ["torch._dynamo.variables.torch", "torch._dynamo.variables.ctx_manager"]:
    logging.getLogger(name).setLevel(logging.ERROR)

# %%
# The task is made up, so nothing is downloaded: each sequence is random tokens followed
# by the same tokens again. The first half cannot be predicted; the second half can, by
# attending back to the first, so there is something to learn.

gen = torch.Generator().manual_seed(0)
half = torch.randint(VOCAB, (N_CHECK, batch, seq_len // 2 + 1), generator=gen)
seqs = torch.cat([half, half], dim=-1)[..., : seq_len + 1].to(device)
inputs, targets = seqs[..., :-1], seqs[..., 1:]

# %%
# The model is a standard pre-norm decoder with causal self-attention; ``forward``
# returns the loss, so the loss is compiled with the rest.


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
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, n_head, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.blocks = nn.Sequential(*(Block() for _ in range(n_layer)))
        self.head = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, VOCAB))

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        logits = self.head(self.blocks(self.tok_emb(idx) + self.pos_emb(pos)))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


torch.manual_seed(0)
model = GPT().to(device)
initial_state = copy.deepcopy(model.state_dict())
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters")

# %%
# The training step
# -----------------
#
# ``train_step`` is what every rung runs; the rungs differ only in which of its parts are
# compiled, which is why the model and the update come in as arguments. ``update`` clips
# the gradients and steps the optimizer.
#
# One optimizer serves every rung, so that eager and compiled rungs run the same AdamW
# algorithm with the same settings. Its learning rate is a 0-dim tensor: ``torch.compile``
# treats a Python float in the optimizer as a constant, so each new value from the
# schedule would compile the step again, while a tensor is an input of the compiled graph
# that ``LambdaLR`` updates in place. Eager AdamW accepts a tensor learning rate on a GPU
# only with ``capturable=True``, which also keeps its step counter on the GPU, as CUDA
# graphs require. (The fastest *eager* AdamW, ``fused=True``, is compared with the
# compiled one in :ref:`compiling_optimizer_recipe`.)


def train_step(model, update, opt, x, y, bf16=False):
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
        loss = model(x, y)
    loss.backward()
    update(opt)
    return loss.detach()


def update(opt):
    torch.nn.utils.clip_grad_norm_(opt.param_groups[0]["params"], CLIP)
    opt.step()


def warmup(step):
    return min(1.0, (step + 1) / N_CHECK)


lr = torch.tensor(LR, device=device)
opt = torch.optim.AdamW(
    model.parameters(), lr=lr, weight_decay=0.1, capturable=device == "cuda"
)

# %%
# The float64 reference trains a copy of the model in eager mode for ``N_CHECK`` steps.
# Its rounding error is far below float32's, so its losses and weights stand in for the
# exact ones, and each rung is scored by its distance from them.

ref_model = copy.deepcopy(model).double()
ref_opt = torch.optim.AdamW(ref_model.parameters(), lr=LR, weight_decay=0.1)
ref_scheduler = torch.optim.lr_scheduler.LambdaLR(ref_opt, warmup)
ref_losses = []
for i in range(N_CHECK):
    ref_losses.append(train_step(ref_model, update, ref_opt, inputs[i], targets[i]))
    ref_opt.zero_grad()
    ref_scheduler.step()
ref_losses = torch.stack(ref_losses).cpu()
ref_weights = torch.cat([p.detach().flatten() for p in ref_model.parameters()])
print("float64 losses:", " ".join(f"{v:.3f}" for v in ref_losses.tolist()))

# %%
# Measurement helpers
# -------------------
#
# ``step_and_busy`` times ``steps`` back-to-back calls of a step, five times over, and
# returns the median time per step, in milliseconds, and the spread of those timings
# (their interquartile range). On a GPU the step time comes from CUDA events around the
# loop, so it includes any time the GPU sits idle waiting for work; the caches stay warm
# from one call to the next, as in training (``triton.testing.do_bench`` would flush the
# L2 cache before each call instead). Then ``torch.profiler`` records the same loop once
# more, and the helper adds up the time during which at least one GPU kernel was running
# (kernels that overlap count once, and kernels replayed from a CUDA graph are recorded
# too): the **GPU busy time** per step. The profiler slows the CPU side, which is why the
# step time comes from the loop without it.
#
# The **busy share**, busy time over step time, gives the verdict that ``read_steps``
# prints in the ``bound`` column:
#
# * at least 85 %: the GPU works almost all the time and the step is **bound by the
#   GPU**: only less GPU work (fusion, a cheaper precision) makes it faster;
# * below: the GPU idles for the rest of the step, waiting for the CPU to queue the next
#   kernel, and the step is **bound by the CPU** (Python, guard checks, kernel launches):
#   only less CPU work per step helps.
#
# A share slightly above 100 % is noise between the two loops. On a CPU there is no
# second device: ``torch.utils.benchmark`` times the step with every thread, and the
# busy time is ``None``.


def step_and_busy(step, steps=5):
    """Median step time, GPU busy time per step (None on a CPU) and spread, in ms."""
    if device == "cpu":
        timer = benchmark.Timer(
            "step()", globals={"step": step}, num_threads=torch.get_num_threads()
        )
        m = timer.blocked_autorange(min_run_time=1.0)
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
    spans = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
    )
    busy, reach = 0.0, float("-inf")
    for s, e in spans:  # the union of the kernels' intervals, in microseconds
        if e > reach:
            busy += e - max(s, reach)
            reach = e
    q1, _, q3 = statistics.quantiles(windows, n=4)
    return statistics.median(windows), busy / steps / 1e3, q3 - q1


# %%
# ``read_steps`` is the page's one reading of those numbers. It prints the table, with
# three GPU columns on a GPU (busy time, busy share, and the bound from the share), and
# then one line for every step that came out slower than a step it builds on, saying
# whether the difference exceeds the spread of the timings and, on a GPU, whether the
# extra time went into kernels (more busy time) or into waiting for the CPU (more idle
# time).


def read_steps(timed, refs, rows, headers):
    """Print the table (with the GPU columns on a GPU), then a line for each step that
    is slower than a step it is compared with, saying where the extra time went."""
    if device == "cpu":
        print(
            "On a CPU there is no separate device to be busy or idle: "
            "the GPU columns are left out."
        )
    else:
        headers = headers + ["GPU busy (ms)", "busy %", "bound"]
        for row, (step, busy, _) in zip(rows, timed.values()):
            bound = "GPU" if busy >= 0.85 * step else "CPU"
            row += [f"{busy:.2f}", f"{busy / step:.0%}", bound]
    print(tabulate(rows, headers, tablefmt="github", disable_numparse=True))
    for label, (step, busy, spread) in timed.items():
        for ref in [ref for ref in refs.get(label, []) if timed[ref][0] < step]:
            ref_step, ref_busy, ref_spread = timed[ref]
            extra, noise = step - ref_step, max(spread, ref_spread)
            why = f"{label}: {step / ref_step:.2f}x the step of {ref} "
            why += f"({step:.2f} against {ref_step:.2f} ms)"
            if extra <= noise:
                why += f", within the spread of the timings ({noise:.2f} ms)"
            elif busy is None:
                why += f": {extra:.2f} ms more CPU time (spread {noise:.2f} ms)"
            else:
                idle, ref_idle = max(step - busy, 0), max(ref_step - ref_busy, 0)
                more = (
                    "idle, waiting for the CPU"
                    if idle - ref_idle >= busy - ref_busy
                    else "busy"
                )
                why += f"; GPU busy {ref_busy:.2f} -> {busy:.2f} ms, idle "
                why += f"{ref_idle:.2f} -> {idle:.2f} ms: the GPU spends most "
                why += f"of the extra time {more}; {busy / step:.0%} busy"
            print(why)


# %%
# Running a rung
# --------------
#
# ``rung`` runs one rung of the ladder. It puts the weights and the optimizer state back
# to their initial values *in place* (the same tensors, so whatever an earlier rung
# compiled stays valid) and trains ``N_CHECK`` steps on the fixed batches. The first step
# runs inside ``fresh_cache()``, Inductor's helper that points its caches at a new empty
# folder, so it includes a **cold** compile of whatever the rung adds; ``rung`` asserts
# that the FX graph cache missed and never hit, and that a graph was compiled. The later
# steps must compile nothing, although the schedule changes the learning rate at every
# one of them, nor while the step is timed. Then it scores the losses and weights
# against float64 and times the step.

rows, timed = [], {}


def rung(label, step_fn, compiled=True, cudagraphs=False):
    global scheduler
    with torch.no_grad():
        model.load_state_dict(initial_state)
        for state in opt.state.values():
            for value in state.values():  # exp_avg, exp_avg_sq, step
                value.zero_()
    opt.zero_grad()
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, warmup)

    def step(x=inputs[0], y=targets[0]):
        if cudagraphs:  # the previous step's graph outputs may now be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        loss = step_fn(x, y)
        opt.zero_grad()
        scheduler.step()
        return loss

    graphs0 = counters["stats"]["unique_graphs"]
    hits0 = counters["inductor"]["fxgraph_cache_hit"]
    misses0 = counters["inductor"]["fxgraph_cache_miss"]
    with torch._inductor.utils.fresh_cache():
        start = time.perf_counter()
        losses = [step(inputs[0], targets[0]).item()]
        first_s = time.perf_counter() - start
    graphs = counters["stats"]["unique_graphs"] - graphs0
    if compiled:
        assert counters["inductor"]["fxgraph_cache_hit"] == hits0, "not cold"
        assert counters["inductor"]["fxgraph_cache_miss"] > misses0 and graphs > 0
    else:
        assert graphs == 0
    losses += [step(inputs[i], targets[i]).item() for i in range(1, N_CHECK)]

    loss_err = (
        ((torch.tensor(losses, dtype=torch.float64) - ref_losses).abs() / ref_losses)
        .max()
        .item()
    )
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).double()
    weight_err = ((weights - ref_weights).norm() / ref_weights.norm()).item()
    timed[label] = step_and_busy(step)
    step_ms, busy_ms, _ = timed[label]
    assert counters["stats"]["unique_graphs"] == graphs0 + graphs, "recompiled"
    first = f"{first_s:.1f}" if compiled else "-"
    rows.append(
        [label, first, f"{loss_err:.1e}", f"{weight_err:.1e}", f"{step_ms:.2f}"]
    )
    busy = "" if busy_ms is None else f", GPU busy {busy_ms:.2f} ms"
    print(
        f"{label}: "
        + (f"first step {first} s, " if compiled else "")
        + f"step {step_ms:.2f} ms{busy}"
    )
    return loss_err, weight_err


# %%
# Rung 1: eager
# -------------
#
# The loop everyone writes first, in float32 and then under bfloat16 autocast.
# ``torch.autocast`` runs matrix multiplications and attention in bfloat16 and keeps the
# sensitive ops (LayerNorm, softmax, cross-entropy) and the weights in float32, by
# PyTorch's default rules. Cheaper arithmetic where the hardware has bfloat16 units,
# but more kernels to launch: every autocast region adds casts. Its errors against
# float64 are those of bfloat16 and are shown for scale only.

eager_err = rung("eager", lambda x, y: train_step(model, update, opt, x, y), False)
_ = rung(
    "eager, bf16 autocast",
    lambda x, y: train_step(model, update, opt, x, y, bf16=True),
    compiled=False,
)

# %%
# Rung 2: compile the model
# -------------------------
#
# ``torch.compile(model)`` compiles the forward pass, and AOTAutograd derives and compiles
# the matching backward; the autograd engine still runs that backward and accumulates
# the gradients. Clipping, the optimizer and the schedule stay eager. We reset Dynamo
# once here, so the ladder starts from nothing compiled in this process.

torch._dynamo.reset()
compiled_model = torch.compile(model)
results = {
    "compiled model": rung(
        "compiled model",
        lambda x, y: train_step(compiled_model, update, opt, x, y),
    )
}

# %%
# Rung 3: compile the optimizer step
# ----------------------------------
#
# ``torch.compile(update)`` turns clipping and AdamW into generated kernels, each covering
# many parameters. The schedule writes a new value into ``lr`` at every step and the
# compiled graph reads it; ``rung`` has asserted that none of those steps compiled
# anything. The optimizer's compilation is the subject of :ref:`compiling_optimizer_recipe`
# and, with schedules, of :ref:`compiling_optimizer_lr_scheduler`.

compiled_update = torch.compile(update)
results["+ compiled optimizer"] = rung(
    "+ compiled optimizer",
    lambda x, y: train_step(compiled_model, compiled_update, opt, x, y),
)
assert opt.param_groups[0]["lr"] is lr
print(
    f"lr is still the same tensor, now {lr.item():.1e} (it started at {LR / N_CHECK:.1e})"
)

# %%
# Rung 4: the whole step in CUDA graphs
# -------------------------------------
#
# After rung 3 a step is a handful of compiled graphs, but each still launches its
# kernels one at a time from Python, with guard checks and autograd bookkeeping in
# between. A CUDA graph records the kernels of a graph once and replays them all with one
# launch. ``mode="reduce-overhead"`` records every graph that ``torch.compile``
# produces, and this step meets the conditions: fixed shapes, no ``.item()`` or other
# CPU read of GPU values, and everything that changes between steps (weights, optimizer
# state, learning rate, batch) held in tensors.
#
# ``train_step`` itself is compiled now. Dynamo splits it at ``loss.backward()``, which
# it does not trace: one graph for the forward, the backward that AOTAutograd derives
# from it, and one graph for clipping and AdamW. ``rung`` calls
# ``torch.compiler.cudagraph_mark_step_begin()`` before each step, telling the CUDA-graph
# runtime that the previous step's outputs may be overwritten. Compiled autograd could
# capture the backward as a graph of its own as well: :ref:`compiled_autograd_tutorial`
# shows how, and what it costs.
#
# The rung runs twice, in float32 and under bfloat16 autocast; ``bf16`` is a Python
# bool that Dynamo guards on, so the second run compiles the step again, once. Compare
# the bfloat16 row with the eager bfloat16 row and the float32 one: the same change of
# GPU work, measured with and without the CPU's launch costs in the way.
#
# CUDA graphs do not exist on a CPU, so there the ladder ends at rung 3.

if device == "cuda":
    whole_step = torch.compile(train_step, mode="reduce-overhead")
    results["whole step, CUDA graphs"] = rung(
        "whole step, CUDA graphs",
        lambda x, y: whole_step(model, update, opt, x, y),
        cudagraphs=True,
    )
    rung(
        "whole step, CUDA graphs, bf16",
        lambda x, y: whole_step(model, update, opt, x, y, bf16=True),
        cudagraphs=True,
    )
    # Inductor times every CUDA graph it records and counts every graph it declines to.
    recorded = torch._dynamo.utils.compilation_time_metrics.get("CUDAGraphNode.record")
    skipped = counters["inductor"]["cudagraph_skips"]
    print(
        f"CUDA graphs recorded: {len(recorded or [])}; graphs not recorded: {skipped}"
    )
    assert recorded and skipped == 0
else:
    print("No CUDA graphs on a CPU: the ladder ends at rung 3.")

# %%
# Compiled training computes the same thing
# -----------------------------------------
#
# A compiled step adds and multiplies in a different order than eager, so it rounds
# differently; it may be as far from the float64 truth as eager is, but not much
# farther. Following the rule of PyTorch's own accuracy checker, each compiled rung's
# error (the largest relative loss error over the ``N_CHECK`` steps, and the relative
# error of all weights after them) must be at most three times eager's plus a small
# floor.

for name, errors in results.items():
    for err, eager, what in zip(errors, eager_err, ("loss", "weights")):
        assert err <= 3 * eager + 1e-5, f"{name}: {what} error {err:.1e}"
print(f"eager float32 errors: loss {eager_err[0]:.1e}, weights {eager_err[1]:.1e}")
print(f"compiled rungs within 3x of eager's error + 1e-5: {', '.join(results)}")

# %%
# Reading the ladder
# ------------------
#
# One row per rung. "first step" is the cold compile of what the rung adds, plus one
# step; a CUDA-graph rung records its graphs during the steps after it, which that
# column leaves out. The errors are against float64, after ``N_CHECK`` steps. Below the
# table, ``read_steps`` prints a line for each rung that came out slower than the rung
# before it or than eager in the same precision.

refs = {
    "eager, bf16 autocast": ["eager"],
    "compiled model": ["eager"],
    "+ compiled optimizer": ["compiled model", "eager"],
    "whole step, CUDA graphs": ["+ compiled optimizer", "eager"],
    "whole step, CUDA graphs, bf16": [
        "whole step, CUDA graphs",
        "eager, bf16 autocast",
    ],
}
headers = ["rung", "first step, cold (s)", "loss error", "weight error", "step (ms)"]
print(f"{device_name}, torch {torch.__version__}; medians of back-to-back steps")
read_steps(timed, refs, rows, headers)

fig, ax = plt.subplots(figsize=(7, 0.5 * len(timed) + 1.5))
steps = [step for step, _, _ in timed.values()]
if device == "cuda":
    busy = [busy for _, busy, _ in timed.values()]
    ax.barh(list(timed), busy, color="C0", label="GPU busy")
    idle = [max(step - b, 0) for step, b in zip(steps, busy)]
    ax.barh(list(timed), idle, left=busy, color="0.75", label="GPU idle")
    ax.legend(ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
else:
    ax.barh(list(timed), steps, color="C0")
ax.invert_yaxis()
ax.set_xlabel("step time, ms (median)")
ax.set_title(f"Training step, {device_name}")
fig.tight_layout()
plt.show()

# %%
# On a GPU, read each row by its busy share first. Where the share is low, the GPU
# finishes each kernel before the CPU has queued the next, and the step is as long as
# the CPU's work. On such a row, making the GPU's work smaller (fusing kernels,
# switching to bfloat16) cannot shorten the step, and anything that adds kernels (the
# casts of autocast) or fixed costs per call (guard checks, the wrappers around a
# compiled graph) lengthens it: a line from ``read_steps`` then says that the extra time
# is the GPU waiting for the CPU. Where the share is near 100 %, the GPU's work sets the
# pace: now fusion and bfloat16 count, and trimming the CPU side does not.
#
# Each rung moves both the busy and the idle time. Compiling the model fuses the
# pointwise work around the matrix multiplications into fewer kernels (less GPU time,
# fewer launches), but each call into a compiled graph has fixed costs of its own.
# Compiling the optimizer replaces its Python loop over the parameters and its chain of
# foreach kernels with a few generated kernels. CUDA graphs act on the CPU side alone: a
# replay issues all the kernels of a graph with one launch, so the CPU's share shrinks to
# a few calls plus the eager Python left between graphs (``zero_grad``, the scheduler),
# while the GPU runs the same kernels as before, plus copies of the inputs that change
# (here the batch) into the graphs' own buffers.
#
# On a CPU the step time is all CPU time, and the same rungs change it in other ways.
# Compiled code runs Inductor's generated C++ loops in place of ATen's kernels (fused, but
# each parallel loop wakes every thread), and each call into a compiled graph still pays
# its fixed costs. Autocast helps only a CPU with bfloat16 instructions (AVX-512 BF16 or
# AMX); elsewhere bfloat16 matrix multiplications convert their operands to float32 on
# the fly, and the casts come on top. Threads that must meet after each loop also wait
# for one another when other programs share the cores, so on a busy machine the spread
# of the timings grows, and a line that says "within the spread of the timings" means
# that the two rungs cannot be told apart there.
#
# The balance depends on the machine: the same GPU behind a slower host CPU spends more
# time idle, and a bigger model or batch shifts the work to the GPU. So measure on
# yours, rung by rung, and read the busy share before choosing what to optimize.
#
# Conclusion
# ----------
#
# A whole training step compiles in rungs: the model with ``torch.compile(model)``, the
# clipping and optimizer step with ``torch.compile`` and a tensor learning rate that the
# schedule updates in place, and, on a GPU, the whole step with
# ``mode="reduce-overhead"``, which replays it as CUDA graphs. Every rung trained from
# the same weights, stayed within a small multiple of eager's distance from a float64
# run, and compiled nothing after its first step. On a GPU, the busy share that
# ``torch.profiler`` measures beside each step time tells which changes can help: less
# GPU work pays only while the GPU is busy most of the step, and CUDA graphs, which
# remove the CPU's cost per kernel, only while it idles. On a CPU, where the step is all
# CPU time, compare the rungs' step times against the spread of their timings.
#
# Further reading
# ---------------
#
# * One rung at a time, on this site: :ref:`torch_compile_tutorial`,
#   :ref:`compiling_optimizer_recipe`, :ref:`compiling_optimizer_lr_scheduler` and
#   :ref:`compiled_autograd_tutorial`
# * `CUDA graphs in PyTorch
#   <https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-graphs>`_ and
#   `torch.compiler.cudagraph_mark_step_begin
#   <https://docs.pytorch.org/docs/stable/generated/torch.compiler.cudagraph_mark_step_begin.html>`_
# * `Automatic mixed precision (torch.amp)
#   <https://docs.pytorch.org/docs/stable/amp.html>`_
# * `torch.optim: how to adjust the learning rate
#   <https://docs.pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate>`_
# * `torch.profiler
#   <https://docs.pytorch.org/docs/stable/profiler.html>`_

# sphinx_gallery_thumbnail_number = 1
