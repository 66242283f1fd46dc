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
       * How to read what bounds a step: matmul, attention, the other kernels, or the
         work outside kernels (Python, guards, graph entries), and which rungs change which
       * How to read what changed between two rungs from the parts of their steps

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later, with tabulate and matplotlib, on any operating system
         PyTorch supports
       * The lessons on compiling the optimizer and on compiled autograd help, but are
         not required
       * A GPU is optional. With a CUDA GPU (compute capability 7.5 or newer, about 3 GB
         of its memory) the page also climbs the CUDA-graph rung, and Inductor needs
         Triton (PyTorch's Linux CUDA wheels bring it). Without one it runs on the CPU
         with smaller sizes, and Inductor needs a C++ compiler and the Python headers.
         The first cell stops with one line if what Inductor needs is missing
       * On a 2-core CPU it runs in about 1.5-2 minutes, with about 1 GB of memory
"""

# %%
# Overview
# --------
#
# A training step is more than a model: it runs the forward pass, the backward pass,
# gradient clipping, the optimizer and the learning-rate schedule. This page compiles
# such a step one piece at a time and measures every rung of the ladder:
#
# 1. **eager**, in float32 and under bfloat16 autocast, with ``AdamW(fused=True)``, the
#    implementation that ``torch.optim``'s documentation ranks fastest of its three;
# 2. **compiled model**: ``torch.compile(model)`` compiles forward and backward;
# 3. **+ compiled optimizer**: clipping and ``AdamW.step()`` in one compiled function,
#    with the learning rate in a tensor, in float32 and under bfloat16 autocast;
# 4. **whole step in CUDA graphs** (GPU only): the step in one ``torch.compile`` call with
#    ``mode="reduce-overhead"``, in float32 and under bfloat16 autocast.
#
# Each row of the final table holds the step time and splits it four ways, from
# ``torch.profiler``: matrix multiplications, attention, the other kernels, and the
# time outside kernels (Python, guards, graph entries; on a GPU, the time it waits for
# the CPU to queue work). Which group is largest decides which rungs can help. On a GPU
# the row also holds the busy share: its kernel time per step over the step time
# measured without the profiler. All rungs are timed together, and each is compared
# with the rung it builds on; where they differ, the gap is split into the parts of the
# step that moved. Every rung also trains ten steps from the same weights, and its
# losses and weights are compared with a float64 run.
#
# Setup
# -----
#
# A small GPT-style model; on a CPU it is smaller still, since compiling forward,
# backward and the optimizer several times is slow on a small CPU.

import copy
import logging
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
from tabulate import tabulate
from torch._dynamo.utils import compilation_time_metrics, counters

import measure

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
measure.require(cxx=device == "cpu", triton=device == "cuda")  # what Inductor needs
# On a CPU, Inductor writes C++ and builds it with the system's compiler; the core logs
# each run of that compiler, so a compile time can show the compiler's share of it.
cxx_watch = measure.watch_cxx() if device == "cpu" else None
# PyTorch's default float32 matmul precision (no TF32) is kept on purpose; Inductor's
# advice to turn TF32 on is about speed, not about this lesson.
warnings.filterwarnings("ignore", message=".*TensorFloat32")
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
# The learning rate is a 0-dim tensor that ``LambdaLR`` updates in place:
# ``torch.compile`` treats a Python float in the optimizer as a constant, so each new
# value from the schedule would compile the step again, while a tensor is an input of the
# compiled graph. Two AdamW instances share the weights and that tensor:
#
# * ``eager_opt``, for the rungs whose optimizer runs eagerly: ``fused=True``, one fused
#   kernel for the whole update, which accepts a tensor learning rate (in
#   ``torch/optim/adam.py``, only ``foreach=True`` with ``capturable=False`` rejects one);
# * ``opt``, for the rungs that compile it: the default implementation, which Dynamo
#   traces and Inductor turns into its own kernels, with ``capturable=True`` on a GPU, which
#   keeps the step counter on the GPU as CUDA graphs require. Dynamo turns it on only in
#   an optimizer whose state is still empty (``_set_capturable`` in
#   ``torch/_dynamo/variables/optimizer.py``); this one's state exists by the time the
#   whole step is compiled, so it is set here.


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
eager_opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, fused=True)
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
# Running a rung
# --------------
#
# Timings come from the site's measurement core (:ref:`measuring_recipe` explains it).
# ``rung`` runs one rung of the ladder. It puts the weights, the learning rate and the
# optimizer state back to their initial values *in place* (the same tensors, so whatever
# an earlier rung compiled stays valid) and trains ``N_CHECK`` steps on the fixed
# batches. A compiled rung's first step runs in ``measure.cold_compile``, which points
# Inductor's caches at a new empty folder and asserts that the FX graph cache missed and
# never hit and that a graph was compiled: the step includes a **cold** compile. On a
# CPU it also returns the seconds the C++ compiler ran during that step (``cxx``, from
# the log that ``measure.watch_cxx()`` set up), kept as a column of their own; on a GPU,
# Inductor's kernels are Triton's, compiled by Triton, and that column is left out.
# ``cold_compile`` would also reset Dynamo, as a new process would; ``reset=False``
# keeps what the earlier rungs compiled, so the first step compiles what the rung adds.
# The later steps must compile nothing, although the schedule changes the learning rate
# at every one of them. Then ``rung`` scores the losses and weights against float64 and
# keeps the step, to be timed with the others once the ladder is built. For the
# CUDA-graph rungs it counts the CUDA graphs that Inductor recorded and those it
# declined to record.

rows, steps = [], {}
COLD = ["first step, cold (s)"] + ["of which C++ compiler (s)"] * bool(cxx_watch)


def rung(label, step_fn, opt, compiled=True, cudagraphs=False):
    with torch.no_grad():
        model.load_state_dict(initial_state)
        lr.fill_(LR)
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

    recorded0 = len(compilation_time_metrics.get("CUDAGraphNode.record", []))
    skipped0 = counters["inductor"]["cudagraph_skips"]
    if compiled:  # reset=False: keep what earlier rungs compiled
        cold = measure.cold_compile(
            step, inputs[0], targets[0], device=device, reset=False
        )
        first = [f"{t:.1f}" for t in (cold.seconds, cold.cxx)[: len(COLD)]]
        losses = [cold.result.item()]
    else:
        first, losses = ["-"] * len(COLD), [step().item()]
    graphs = counters["stats"]["unique_graphs"]
    losses += [step(inputs[i], targets[i]).item() for i in range(1, N_CHECK)]
    assert counters["stats"]["unique_graphs"] == graphs, "recompiled"

    loss_err = (
        ((torch.tensor(losses, dtype=torch.float64) - ref_losses).abs() / ref_losses)
        .max()
        .item()
    )
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).double()
    weight_err = ((weights - ref_weights).norm() / ref_weights.norm()).item()
    steps[label] = step
    rows.append([label, *first])
    if compiled:
        line = f"{label}: Dynamo graphs compiled {cold.graphs}"
        if cudagraphs:
            recorded = len(compilation_time_metrics.get("CUDAGraphNode.record", []))
            recorded -= recorded0
            skipped = counters["inductor"]["cudagraph_skips"] - skipped0
            line += f", CUDA graphs recorded {recorded}, not recorded {skipped}"
            assert recorded > 0 and skipped == 0
        print(line)
    return loss_err, weight_err


# %%
# Rung 1: eager
# -------------
#
# The loop everyone writes first, in float32 and then under bfloat16 autocast.
# ``torch.autocast`` runs matrix multiplications and attention in bfloat16 and keeps the
# sensitive ops (LayerNorm, softmax, cross-entropy) and the weights in float32, by
# PyTorch's default rules: arithmetic on half the bytes, which a kernel can run faster
# where it uses the hardware's bfloat16 units, and cast kernels around every autocast
# region. Its errors against float64 are those of bfloat16; the compiled bfloat16 rungs
# are held to them.

errors = {
    "eager": rung(
        "eager",
        lambda x, y: train_step(model, update, eager_opt, x, y),
        eager_opt,
        False,
    )
}
errors["eager, bf16 autocast"] = rung(
    "eager, bf16 autocast",
    lambda x, y: train_step(model, update, eager_opt, x, y, bf16=True),
    eager_opt,
    compiled=False,
)

# %%
# Rung 2: compile the model
# -------------------------
#
# ``torch.compile(model)`` compiles the forward pass, and AOTAutograd derives and compiles
# the matching backward; the autograd engine still runs that backward and accumulates
# the gradients. Clipping, the fused optimizer and the schedule stay eager. A one-line
# function is compiled cold first, with Dynamo's reset this time, so that the ladder
# starts from nothing compiled in this process and Inductor's one-time start-up in the
# process (its imports, its pool of compile workers) is timed apart from the rungs'.

tiny = measure.cold_compile(
    torch.compile(torch.sin), torch.zeros(8, device=device), device=device
)
line = f"one-time Inductor start-up, with a tiny compile: {tiny.seconds:.1f} s"
if tiny.cxx is not None:
    line += f", of which the C++ compiler ran {tiny.cxx:.1f} s"
print(line)
compiled_model = torch.compile(model)
errors["compiled model"] = rung(
    "compiled model",
    lambda x, y: train_step(compiled_model, update, eager_opt, x, y),
    eager_opt,
)

# %%
# Rung 3: compile the optimizer step
# ----------------------------------
#
# ``torch.compile(update)`` turns clipping and AdamW into generated kernels, each covering
# many parameters. The schedule writes a new value into ``lr`` at every step and the
# compiled graph reads it; ``rung`` has asserted that none of those steps compiled
# anything. The rung runs in float32 and under bfloat16 autocast: autocast's state is
# part of what Dynamo guards on, so the second run compiles the model's forward again,
# once. The optimizer's compilation is the subject of :ref:`compiling_optimizer_recipe`
# and, with schedules, of :ref:`compiling_optimizer_lr_scheduler`.

compiled_update = torch.compile(update)
errors["+ compiled optimizer"] = rung(
    "+ compiled optimizer",
    lambda x, y: train_step(compiled_model, compiled_update, opt, x, y),
    opt,
)
errors["+ compiled optimizer, bf16"] = rung(
    "+ compiled optimizer, bf16",
    lambda x, y: train_step(compiled_model, compiled_update, opt, x, y, bf16=True),
    opt,
)
assert opt.param_groups[0]["lr"] is lr and eager_opt.param_groups[0]["lr"] is lr
print(
    f"lr is still the same tensor, now {lr.item():.1e} (it starts at {LR / N_CHECK:.1e})"
)

# %%
# Rung 4: the whole step in CUDA graphs
# -------------------------------------
#
# After rung 3 a step is a handful of compiled graphs, but each still launches its
# kernels one at a time from Python, with guard checks and autograd bookkeeping in
# between. A CUDA graph records the kernels of a graph once and replays them all with one
# launch. ``mode="reduce-overhead"`` hands every graph that ``torch.compile`` produces to
# Inductor's CUDA-graph trees, and this step meets their conditions: fixed shapes, no
# ``.item()`` or other CPU read of GPU values, and everything that changes between steps
# (weights, optimizer state, learning rate, batch) held in tensors.
#
# ``train_step`` itself is compiled now, and Dynamo splits it into several graphs. It
# does not trace ``loss.backward()``, so the forward and loss are one graph, and
# AOTAutograd compiles their backward, which the engine calls. After it, AdamW's
# ``step`` is wrapped in ``_use_grad_for_differentiable`` (``torch/optim/optimizer.py``),
# which calls ``torch._dynamo.graph_break()`` before and after the update on purpose, so
# that AOTAutograd sees the update as a graph without autograd: clipping, the update and
# the rest of the step (``loss.detach()``) are graphs of their own. ``rung`` prints how
# many graphs Dynamo compiled and how many CUDA graphs were recorded, and the two counts
# need not match: the backward has no Dynamo graph of its own but is recorded too, and a
# CUDA-graph tree records a graph, after a warm-up call, as a node that follows the graph
# that ran before it in the step (``CUDAGraphTreeManager._run`` in
# ``torch/_inductor/cudagraph_trees.py``), so a compiled graph that runs after another
# graph than before, such as another backward, is recorded again as a new node.
# ``rung`` calls ``torch.compiler.cudagraph_mark_step_begin()`` before each step,
# telling the runtime that the previous step's outputs may be overwritten.
#
# The rung runs in float32 and under bfloat16 autocast; ``bf16`` is a Python bool that
# Dynamo guards on, so the second run compiles the forward again. Each row is compared
# with rung 3 in the same precision: largely the same kernels, without and with CUDA
# graphs.
# Compiled autograd can capture the backward into the graphs as well:
# :ref:`compiled_autograd_tutorial` shows how.

if device == "cuda":
    whole_step = torch.compile(train_step, mode="reduce-overhead")
    for bf16 in (False, True):
        label = "whole step, CUDA graphs" + ", bf16" * bf16
        errors[label] = rung(
            label,
            lambda x, y, bf16=bf16: whole_step(model, update, opt, x, y, bf16=bf16),
            opt,
            cudagraphs=True,
        )
else:
    print("CUDA graphs need a GPU: on this CPU the ladder ends at rung 3.")

# %%
# Compiled training computes the same thing
# -----------------------------------------
#
# A compiled step adds and multiplies in a different order than eager, so it rounds
# differently; it may be as far from the float64 truth as eager is, but not much
# farther. Following the rule of PyTorch's own accuracy checker, each compiled rung's
# error (the largest relative loss error over the ``N_CHECK`` steps, and the relative
# error of all weights after them) must be at most three times eager's in the same
# precision, plus a small floor.

for name, errs in errors.items():
    eager = errors["eager, bf16 autocast" if "bf16" in name else "eager"]
    for err, err0, what in zip(errs, eager, ("loss", "weights")):
        assert err <= 3 * err0 + 1e-5, f"{name}: {what} error {err:.1e}"
print("every rung within 3x of eager's error in its precision + 1e-5:")
rows_err = [[name, f"{a:.1e}", f"{b:.1e}"] for name, (a, b) in errors.items()]
headers = ["rung", "loss error", "weight error"]
print(tabulate(rows_err, headers, tablefmt="github", disable_numparse=True))

# %%
# Reading the ladder
# ------------------
#
# With the ladder built, one ``measure.compare`` call times every rung's step in
# interleaved windows, so a slow moment of the machine hits all rungs alike. Nothing is
# reset from here on: the rungs take turns training the same weights, each with its own
# optimizer state and schedule, and a step's work does not depend on the weights'
# values. One row per rung. "first step" is the cold compile of what the rung adds, plus
# one step; a CUDA-graph rung records its graphs during the steps after it, which that
# column leaves out. On a CPU, the next column is the time within it during which the
# C++ compiler ran (its runs overlap, so this is wall time). The last four columns split
# the step by what bounds it: matrix multiplications and attention, two families of
# library kernels that compiled and eager rungs alike call (Inductor's default mode
# calls them rather than generating them); the other kernels (on a CPU, operators and
# compiled code), which are what compiling fuses; and the time outside kernels (on a
# GPU, while it idles; on a CPU, Python, guards, graph entries and the autograd engine).
# Below the table, each rung is compared with the one it builds on (bfloat16 eager with
# float32 eager), each line naming, where the two differ, the parts of the step that
# moved, and each precision's rungs are grouped against eager in that precision. Then
# come where the time of the rung with the lowest median went (on a GPU, with what
# bounds it), the time outside kernels of every bf16 rung and, on a GPU, the largest
# parts of each CUDA-graph rung.

SPLIT = ["matmul", "attention", "other kernels", "outside kernels"]
HOST = {"guards", "compiled-code entry", "autograd engine", measure.PYTHON}


def split(row):
    """The step's ms in the four SPLIT groups, from the core's parts."""
    groups = dict.fromkeys(SPLIT, 0.0)
    for part, ms in row.parts.items():
        group = part.removeprefix("GPU: ")
        if part.startswith("waiting: ") or part in HOST:
            group = "outside kernels"
        elif group not in SPLIT:
            group = "other kernels"
        groups[group] += ms
    return list(groups.values())


graphs = counters["stats"]["unique_graphs"]
res = measure.compare(steps, device)
assert counters["stats"]["unique_graphs"] == graphs, "a rung compiled again"
BF16 = "eager, bf16 autocast"
refs = {
    BF16: "eager",
    "compiled model": "eager",
    "+ compiled optimizer": "compiled model",
    "+ compiled optimizer, bf16": BF16,
    "whole step, CUDA graphs": "+ compiled optimizer",
    "whole step, CUDA graphs, bf16": "+ compiled optimizer, bf16",
}
rows = [[*row, *res.cells(row[0]), *split(res[row[0]])] for row in rows]
headers = ["rung", *COLD, *res.headers(), *[f"{g} (ms)" for g in SPLIT]]
print(f"{device_name}, torch {torch.__version__}; medians of interleaved windows")
fmt = ["", *[""] * len(COLD), *res.formats(), *[".3f"] * len(SPLIT)]
print(tabulate(rows, headers, "github", fmt))
for name, ref in refs.items():  # the one headline across precisions: bf16 in eager
    if name in res:
        print(res.versus(name, ref, headline_as=(name == BF16) and f"{name} vs eager"))
for ref, label in (("eager", "float32 eager"), (BF16, None)):  # like for like
    same = {n: r for n, r in res.items() if ("bf16" in n) == ("bf16" in ref)}
    print(measure.Results(same).against(ref, label, headlines=True))
best = min(res, key=lambda name: res[name].ms)
spent = zip(SPLIT, split(res[best]))
spent = ", ".join(
    f"{g} {ms:.3f} ms ({100 * ms / res[best].ms:.0f} %)" for g, ms in spent
)
if res[best].busy is not None:
    spent += f"; GPU busy {res[best].busy:.0f} %, {res[best].bound}-bound"
print(f"lowest median, {best} ({res[best].ms:.3f} ms): {spent}")
out = [(n, split(r)[-1], r.ms) for n, r in res.items() if "bf16" in n]
out = "; ".join(f"{n} {ms:.3f} ms ({100 * ms / step:.0f} %)" for n, ms, step in out)
print(f"bf16 rungs, outside kernels (share of the step): {out}")
for name in [name for name in res if "CUDA graphs" in name]:
    parts = sorted(res[name].parts.items(), key=lambda kv: -kv[1])[:5]
    print(f"{name}, largest parts: " + "; ".join(f"{k} {ms:.3f} ms" for k, ms in parts))

fig, ax = plt.subplots(figsize=(7, 0.5 * len(res) + 1.5))
left = [0.0] * len(res)
for i, group in enumerate(SPLIT):
    widths = [split(row)[i] for row in res.values()]
    ax.barh(
        list(res), widths, left=left, color=["C0", "C2", "C1", "0.75"][i], label=group
    )
    left = [a + w for a, w in zip(left, widths)]
ax.legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.25), frameon=False)
ax.invert_yaxis()
ax.set_xlabel("step time, ms (median), by what it was spent on")
ax.set_title(f"Training step, {device_name}")
fig.tight_layout()
plt.show()

# %%
# How the rungs act, group by group. Matrix multiplications and attention are library
# kernels on every rung: Inductor's default mode calls them rather than fusing them, so
# in one precision each rung runs the same computation there, and their columns show
# whether its time stayed. bfloat16 autocast is the rung aimed at those two columns. A
# matmul and an attention kernel each have their own bfloat16 code, so what autocast
# gives depends on the hardware's bfloat16 units and on how each kernel uses them: the
# two columns can move by different amounts, even in opposite directions, and where
# the bf16 row differs from float32 its comparison line names each. Autocast also adds
# work of its own: a cast for each tensor it converts (a copy kernel, under "copies" in
# the parts) and its own dispatch for every op it covers; that line sizes the copies
# beside the kernels. On
# a GPU the CPU issues a step's kernels while earlier ones run, so the issuing stays
# hidden only while the GPU's work outlasts it; kernels that finish sooner can leave the
# step waiting on the CPU instead: the line above on the bf16 rungs prints how much of
# each step is spent outside kernels, and the table's bound column what bounds it. Of
# the rungs here, only CUDA graphs issue a step's kernels differently. Compiling the
# model fuses the pointwise work around the library kernels (LayerNorm, GELU, residual
# adds, the loss) into fewer kernels, each reading and writing memory once, which acts
# on the other kernels; but each call into a compiled graph has fixed costs outside
# kernels (guard checks, AOTAutograd's wrapper). Compiling the optimizer replaces the
# fused AdamW kernel and the clipping's kernels with Inductor's generated kernels. On a
# CPU that is all the ladder has: in float32, no rung sets out to lower what matmul and
# attention take, and the other two groups are what compiling can change. CUDA graphs
# act on the CPU side alone: a replay issues all the kernels of a graph with one launch,
# while the GPU runs the same kernels as before, plus copies of the inputs that change
# (here the batch) into the graphs' own buffers.
# What stays on the CPU in a CUDA-graph step is what runs outside the graphs:
# ``zero_grad`` and the scheduler, the guard checks and the CUDA-graph runtime's
# bookkeeping around each graph, the engine's call of the backward, and the Python
# between them; the ``waiting:`` parts of a CUDA-graph rung say how long the GPU waited
# while the CPU did each. Which of these effects wins on a row is what its comparison
# line prints, from the parts that moved. The balance depends on the machine: the same
# GPU behind a slower host CPU idles longer, and a bigger model or batch shifts the work
# into matmul and attention.
#
# Conclusion
# ----------
#
# A whole training step compiles in rungs: the model with ``torch.compile(model)``, the
# clipping and optimizer step with ``torch.compile`` and a tensor learning rate that the
# schedule updates in place, and, on a GPU, the whole step with
# ``mode="reduce-overhead"``, which replays every graph of it, the backward included, as
# CUDA graphs. Every rung trained from the same weights, stayed within a small multiple
# of eager's distance from a float64 run in its precision, and compiled nothing after
# its first step. Splitting a step into matmul, attention, the other kernels, and the
# time outside kernels says where each rung acts: compiling fuses the other kernels and
# adds a fixed cost outside them at each graph's entry, CUDA graphs issue each graph's
# kernels with one launch, and bfloat16 autocast runs matmul and attention in bfloat16
# with casts around them; which of these effects moves a step, and which way, is what
# the parts of two rungs' steps say.
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
