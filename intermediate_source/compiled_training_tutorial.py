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
       * How to tell, from two numbers per step, whether the CPU or the GPU sets the pace,
         and which optimizations can help in each case

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
# Each row of the final table holds the step time *and* the time the CPU needs to issue
# the step. That second number is the point of the page: a GPU runs kernels only as fast
# as the CPU queues them, and which of the two is the bottleneck decides which rungs can
# help. Every rung also trains ten steps from the same weights, and its losses and
# weights are compared with a float64 run.
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
from torch.utils import benchmark

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    n_layer, d_model, n_head, seq_len, batch = 4, 384, 6, 256, 32
    device_name = torch.cuda.get_device_name()
else:
    n_layer, d_model, n_head, seq_len, batch = 2, 64, 4, 64, 16
    device_name = f"CPU, {torch.get_num_threads()} threads"
VOCAB, N_CHECK, LR, CLIP = 128, 10, 3e-3, 1.0
print(
    f"torch {torch.__version__} on {device_name}: {n_layer} layers, d_model {d_model}, "
    f"batch {batch} x {seq_len} tokens"
)
# PyTorch's default float32 matmul precision (no TF32) is kept on purpose; Inductor's
# advice to turn TF32 on is about speed, not about this lesson.
warnings.filterwarnings("ignore", message=".*TensorFloat32 tensor cores.*")
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
# ``measure`` returns two medians in milliseconds. On a GPU the **step time** comes from
# ``triton.testing.do_bench``, CUDA events around back-to-back calls, so it includes any
# time the GPU sits idle waiting for work. The **CPU issue time** is the wall time of one
# call without synchronizing: it stops when the last kernel is queued, not when it has
# run. Read them together:
#
# * issue time close to the step time: the GPU waits for the CPU, and the step is **bound
#   by the CPU** (Python, the framework, kernel launches); only less CPU work helps;
# * issue time well below the step time: the CPU runs ahead and the step is **bound by the
#   GPU**; only less GPU work helps.
#
# ``bound`` prints that verdict ("CPU" when the issue time is above 80 % of the step
# time). The two times come from separate runs, each issue run starting from an idle GPU,
# so the issue time can come out above the step time; the step is CPU-bound then too. On a
# CPU there is no separate device: ``torch.utils.benchmark`` times the step
# with every thread, and the issue column shows "-". ``measure`` also asserts that
# nothing compiles while it times.


def measure(step):
    graphs = counters["stats"]["unique_graphs"]
    if device == "cuda":
        import triton.testing

        step_ms = triton.testing.do_bench(step, return_mode="median")
        issue = []
        for _ in range(30):
            torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            issue.append(time.perf_counter() - start)
        torch.cuda.synchronize()
        issue_ms = statistics.median(issue) * 1e3
    else:
        timer = benchmark.Timer(
            "step()", globals={"step": step}, num_threads=torch.get_num_threads()
        )
        step_ms, issue_ms = timer.blocked_autorange(min_run_time=1.0).median * 1e3, None
    assert counters["stats"]["unique_graphs"] == graphs, "compiled while timing"
    return step_ms, issue_ms


def bound(step_ms, issue_ms):
    if issue_ms is None:
        return "-"
    return "CPU" if issue_ms > 0.8 * step_ms else "GPU"


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
# one of them. Then it scores the losses and weights against float64 and times the step.

rows = []
headers = ["rung", "first step, cold (s)", "step (ms)", "CPU issue (ms)", "bound"]
headers += ["loss error", "weight error"]


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
    assert counters["stats"]["unique_graphs"] == graphs0 + graphs, "recompiled"

    loss_err = (
        ((torch.tensor(losses, dtype=torch.float64) - ref_losses).abs() / ref_losses)
        .max()
        .item()
    )
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).double()
    weight_err = ((weights - ref_weights).norm() / ref_weights.norm()).item()
    step_ms, issue_ms = measure(step)
    rows.append(
        [
            label,
            f"{first_s:.1f}" if compiled else "-",
            f"{step_ms:.2f}",
            "-" if issue_ms is None else f"{issue_ms:.2f}",
            bound(step_ms, issue_ms),
            f"{loss_err:.1e}",
            f"{weight_err:.1e}",
        ]
    )
    print(
        f"{label}: " + ", ".join(f"{h} {v}" for h, v in zip(headers[1:5], rows[-1][1:]))
    )
    return loss_err, weight_err


# %%
# Rung 1: eager
# -------------
#
# The loop everyone writes first, in float32 and then under bfloat16 autocast.
# ``torch.autocast`` runs matrix multiplications and attention in bfloat16 and keeps the
# sensitive ops (LayerNorm, softmax, cross-entropy) and the weights in float32, by
# PyTorch's default rules. Less arithmetic for the GPU, but more kernels for the CPU to
# issue: every autocast region adds casts. Its errors against float64 are those of
# bfloat16 and are shown for scale only.

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
# column leaves out. The errors are against float64, after ``N_CHECK`` steps.

print(f"{device_name}, torch {torch.__version__}; medians")
print(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))

fig, ax = plt.subplots(figsize=(7, 0.6 * len(rows) + 1.2))
names = [r[0] for r in rows]
ax.barh(names, [float(r[2]) for r in rows], height=0.4, label="step")
if device == "cuda":
    issue = [float(r[3]) for r in rows]
    ax.barh(names, issue, height=0.2, color="C1", label="CPU issue")
ax.invert_yaxis()
ax.set_xlabel("milliseconds (median)")
ax.set_title(f"Training step, {device_name}")
ax.legend()
fig.tight_layout()
plt.show()

# %%
# Read each row by its last timing columns first. Where the issue time nearly equals the
# step time, the GPU finishes each kernel before the CPU has queued the next, and the
# step is as long as the CPU's work. On such a row, making the GPU's work smaller (fusing
# kernels, switching to bfloat16) cannot shorten the step, and anything that adds
# kernels (the casts of autocast) or fixed costs per call (guard checks, the wrappers
# around a compiled graph) lengthens it. Where the issue time is well below the step
# time, the CPU runs ahead and the GPU's work sets the pace: now fusion and bfloat16
# count, and trimming the CPU side does not.
#
# Each rung moves both numbers. Compiling the model fuses the pointwise work around the
# matrix multiplications into fewer kernels (less GPU time, fewer launches), but each
# call into a compiled graph has fixed costs of its own. Compiling the optimizer
# replaces its Python loop over the parameters and its chain of foreach kernels with a
# few generated kernels. CUDA graphs act on the CPU side alone: a replay issues all the
# kernels of a graph with one launch, so the issue time shrinks to a few calls plus the
# eager Python left between graphs (``zero_grad``, the scheduler), while the GPU runs
# the same kernels as before, plus copies of the inputs that change (here the batch)
# into the graphs' own buffers.
#
# The balance depends on the machine: the same GPU behind a slower host CPU spends more
# time issuing, and a bigger model or batch shifts the work to the GPU. So measure on
# yours, rung by rung, and read the verdict column before choosing what to optimize.
#
# Conclusion
# ----------
#
# A whole training step compiles in rungs: the model with ``torch.compile(model)``, the
# clipping and optimizer step with ``torch.compile`` and a tensor learning rate that the
# schedule updates in place, and, on a GPU, the whole step with
# ``mode="reduce-overhead"``, which replays it as CUDA graphs. Every rung trained from
# the same weights, stayed within a small multiple of eager's distance from a float64
# run, and compiled nothing after its first step. The CPU issue time beside each step
# time tells which changes can help: less GPU work pays only while the GPU is the bound,
# and CUDA graphs, which remove the CPU's cost per kernel, only while the CPU is.
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
# * `triton.testing.do_bench
#   <https://triton-lang.org/main/python-api/generated/triton.testing.do_bench.html>`_

# sphinx_gallery_thumbnail_number = 1
