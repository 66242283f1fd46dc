"""
.. _compiled_training_tutorial:

Compiling a whole training step, end to end
============================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How to take an ordinary training loop (AdamW, a warm-up schedule, gradient
         clipping) and compile it one piece at a time: the model, the optimizer step,
         the backward pass, the numerics, and finally the whole step in a CUDA graph
       * Why the learning rate must live in a tensor once the optimizer is compiled
       * How to check that compiled training computes the same losses as eager training,
         against a float64 reference, and that nothing recompiles after warm-up
       * How to measure each rung of the ladder fairly: step time, tokens/s, peak memory,
         and compile time from an empty cache

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
       * The lessons on compiling the optimizer and on compiled autograd help, but are
         not required
       * A CUDA GPU of compute capability 7.5 or newer for the timings (current CUDA
         wheels need it); bfloat16 runs at full speed from compute capability 8.0, and the
         page skips its bfloat16 rungs on older GPUs. Runs on CPU with smaller sizes; on
         CPU, Inductor needs a C++ compiler and the Python headers
"""

# %%
# Overview
# --------
#
# The other lessons on this site each compile one piece of training: the model, the
# optimizer, the backward pass. A real training step is all of them together, plus the
# parts people forget: the learning-rate schedule, gradient clipping, mixed precision.
# This page starts from a plain eager training loop for a small GPT-style language model
# and climbs a ladder. Each rung adds exactly one thing:
#
# 0. **eager**: the baseline (and, on a GPU, the same baseline in bfloat16 autocast);
# 1. **compiled model**: ``torch.compile(model)``; forward and backward are compiled, the
#    optimizer is not;
# 2. **compiled optimizer**: gradient clipping and ``AdamW.step()`` in one compiled
#    function, with the learning rate in a tensor so that the schedule never recompiles;
# 3. **compiled autograd**: the backward pass captured as one graph when
#    ``loss.backward()`` runs;
# 4. **bfloat16 autocast** (GPU): PyTorch's default mixed-precision rules;
# 5. **CUDA graphs** (GPU): forward, backward, clipping and the optimizer step in one
#    compiled function with ``mode="reduce-overhead"``.
#
# For every rung we record the loss curve, the median step time, tokens per second, peak
# memory and the compile time from an empty cache; then we check that the losses agree
# with eager training and that nothing recompiled once training was under way.
#
# Setup
# -----
#
# On a GPU the model is a 4-layer transformer; on a CPU it is a 2-layer one with fewer,
# shorter steps, because compiling forward, backward and optimizer several times is
# expensive on a small CPU. All CPU work uses every thread PyTorch is given (its default),
# the same for every rung.

import logging
import math
import random
import statistics
import time
import warnings

import matplotlib.pyplot as plt
import torch
import torch._inductor.utils
import torch.nn as nn
import torch.nn.functional as F
from matplotlib.ticker import MaxNLocator
from tabulate import tabulate
from torch._dynamo.utils import counters

# Compiling ``Optimizer.step`` logs, once, that the profiler range PyTorch wraps around
# every step ("Profiler record function ... will be ignored") is left out of the compiled
# graph. That concerns profiling, not this lesson.
logging.getLogger("torch._dynamo.variables.ctx_manager").setLevel(logging.ERROR)

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    # The float32 rungs keep PyTorch's default matmul precision (no TF32). Inductor
    # suggests TF32 when it compiles a float32 matmul without it: advice about speed,
    # not about this lesson.
    warnings.filterwarnings("ignore", message=".*TensorFloat32 tensor cores.*")
    n_layer, d_model, n_head, seq_len = 4, 384, 6, 256
    # One step of this model at batch 32 needs well under 2 GiB; smaller GPUs that are
    # busy with other work get a smaller batch.
    free_bytes, _ = torch.cuda.mem_get_info()
    batch = 32 if free_bytes > 4 * 2**30 else 8
    n_steps, n_warmup = 100, 20
    # is_bf16_supported() alone also says yes on older GPUs that emulate bfloat16 slowly.
    use_bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    if not use_bf16:
        print("This GPU has no native bfloat16: the bfloat16 rungs are skipped.")
else:
    device_name = f"CPU, {torch.get_num_threads()} threads"
    n_layer, d_model, n_head, seq_len, batch = 2, 64, 4, 64, 16
    n_steps, n_warmup = 20, 4
    use_bf16 = False
    print(
        f"No CUDA GPU found: running on the CPU with a {n_layer}-layer model and "
        f"{n_steps} steps per rung."
    )
    # oneDNN's check for native bfloat16 instructions (AVX512-BF16 or AMX).
    native_bf16 = (
        torch.backends.mkldnn.is_available()
        and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )
    print(
        "bfloat16 autocast is not used on the CPU. This CPU "
        + ("has" if native_bf16 else "lacks")
        + " native bfloat16 instructions, but the bfloat16 rung would add a cold "
        "compile of forward and backward, the most expensive part of this page on a "
        "small CPU."
    )

tokens_per_step = batch * seq_len
print(f"torch {torch.__version__} on {device} ({device_name})")
print(
    f"model: {n_layer} layers, d_model {d_model}, {n_head} heads; batch {batch} x "
    f"{seq_len} tokens = {tokens_per_step} tokens per step; {n_steps} steps per rung, "
    f"the first {n_warmup} are warm-up"
)

# %%
# Text with structure to learn
# ----------------------------
#
# The page writes its own training text, so nothing is downloaded. A small grammar makes
# sentences such as "the red fox chases some birds." A character-level model has to learn
# the spelling of every word, which word class comes next, and subject-verb agreement
# across an optional adjective ("a fox chases", "some foxes chase"). The generator is
# seeded, so every run sees the same text.

NOUNS = {
    "cat": "cats",
    "dog": "dogs",
    "fox": "foxes",
    "bird": "birds",
    "child": "children",
}
VERBS = {"sees": "see", "chases": "chase", "likes": "like", "follows": "follow"}
ADJECTIVES = ["small", "red", "quick", "old", "happy"]


def noun_phrase(rng):
    plural = rng.random() < 0.5
    noun = rng.choice(list(NOUNS))
    words = [rng.choice(["the", "some"] if plural else ["the", "a"])]
    if rng.random() < 0.5:
        words.append(rng.choice(ADJECTIVES))
    words.append(NOUNS[noun] if plural else noun)
    return " ".join(words), plural


def make_text(n_chars, seed=0):
    rng = random.Random(seed)
    sentences, length = [], 0
    while length < n_chars:
        subject, plural = noun_phrase(rng)
        verb = rng.choice(list(VERBS))
        obj, _ = noun_phrase(rng)
        sentence = f"{subject} {VERBS[verb] if plural else verb} {obj}. "
        sentences.append(sentence)
        length += len(sentence)
    return "".join(sentences)


text = make_text(200_000 if device == "cuda" else 40_000)
vocab = sorted(set(text))
stoi = {ch: i for i, ch in enumerate(vocab)}
data = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
print(f"{len(text)} characters, vocabulary of {len(vocab)}: {''.join(vocab)!r}")
print(text[:160])

# %%
# Every rung trains on the *same* batches in the same order, so their loss curves can be
# laid on top of each other. We cut them all now: random windows of ``seq_len + 1``
# characters, the input and the same window shifted by one as the target.

gen = torch.Generator().manual_seed(1)
starts = torch.randint(len(data) - seq_len - 1, (n_steps, batch), generator=gen)
windows = data[starts[..., None] + torch.arange(seq_len + 1)]
inputs = windows[..., :-1].to(device)
targets = windows[..., 1:].to(device)

# %%
# A small GPT
# -----------
#
# A standard pre-norm decoder: token and position embeddings, blocks of causal
# self-attention (``scaled_dot_product_attention``) and an MLP, a final LayerNorm and a
# linear head. ``forward`` returns the cross-entropy loss, so the loss is inside whatever
# gets compiled.


class Block(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (
            t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            for t in (q, k, v)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, seq_len, d_model, n_head, n_layer):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, idx, targets):
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


torch.manual_seed(0)
model = GPT(len(vocab), seq_len, d_model, n_head, n_layer).to(device)
initial_state = {k: v.clone() for k, v in model.state_dict().items()}
n_params = sum(p.numel() for p in model.parameters())
print(f"{n_params / 1e6:.2f} M parameters")

# %%
# The training step
# -----------------
#
# The step is split into the three functions that the ladder compiles separately:
#
# * ``forward`` runs the model under ``torch.autocast``, which does nothing when ``bf16``
#   is false;
# * ``backward`` calls ``loss.backward()``;
# * ``update`` clips the gradients to a total norm of 1 with ``clip_grad_norm_`` and takes
#   the AdamW step.
#
# Each step then drops the gradients with ``opt.zero_grad()`` (``set_to_none=True`` is its
# default) outside anything compiled: Dynamo does not trace ``Optimizer.zero_grad``, and
# calling it inside a compiled function would split the graph there.
#
# The learning rate follows a linear warm-up followed by a cosine decay, through
# ``LambdaLR``; ``scheduler.step()`` runs after every step.
#
# There are two optimizers over the same parameters. The eager rungs use a Python float
# learning rate (on a GPU with ``fused=True``, the fastest eager AdamW). The compiled rungs
# need a different one: ``torch.compile`` treats a Python float in the optimizer as a
# constant, so every new value from the schedule would recompile the step. A 0-dim tensor
# is an input of the compiled graph instead, and ``LambdaLR`` updates it in place with
# ``fill_``. In eager mode AdamW accepts a tensor learning rate with ``foreach=True`` only
# when ``capturable=True`` (its source checks exactly that), so on a GPU we ask for it;
# ``torch.compile`` would set it anyway.

LR, WEIGHT_DECAY, CLIP = 2e-3, 0.1, 1.0
lr_warmup = n_steps // 10


def lr_lambda(step):
    if step < lr_warmup:
        return (step + 1) / lr_warmup
    progress = (step - lr_warmup) / max(1, n_steps - lr_warmup)
    return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))


params = list(model.parameters())
eager_opt = torch.optim.AdamW(
    params,
    lr=LR,
    weight_decay=WEIGHT_DECAY,
    **({"fused": True} if device == "cuda" else {}),
)
lr_tensor = torch.tensor(LR, device=device)
compiled_opt = torch.optim.AdamW(
    params, lr=lr_tensor, weight_decay=WEIGHT_DECAY, capturable=device == "cuda"
)


def forward(model, x, y, bf16):
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
        return model(x, y)


def backward(loss):
    loss.backward()


def update(opt):
    torch.nn.utils.clip_grad_norm_(opt.param_groups[0]["params"], CLIP)
    opt.step()


# %%
# Measuring a rung
# ----------------
#
# ``train`` puts the model and both optimizers back to their initial state *in place*
# (the same tensors, new values), makes a fresh scheduler, and runs ``n_steps`` steps on
# the shared batches. Resetting in place, instead of building a new model per rung, lets
# a rung reuse what an earlier rung compiled: rung 2 keeps rung 1's compiled model and
# only compiles the optimizer, so its compile time is the cost of the one thing it adds.
#
# What it measures:
#
# * **Compile time**: the wall time of the first step, which compiles whatever the rung
#   adds. Each rung runs inside ``fresh_cache()``, Inductor's helper that points its
#   on-disk caches at a new, empty temporary folder; the function asserts that the FX graph
#   cache had no hit, so the figure is a cold compile even when the site's build keeps a
#   warm cache.
# * **Step time**: the median over the steps after warm-up. On a GPU each step is timed
#   with a pair of CUDA events; on a CPU, where every op finishes before it returns, with
#   ``time.perf_counter``. ``scheduler.step()`` is inside the timed region: it is part of
#   the step.
# * **Peak memory**: on a GPU ``torch.cuda.max_memory_allocated`` over the rung (which
#   includes the parameters, both optimizers' states and the batches, the same for every
#   rung). The CPU allocator keeps no such counter, and the process's resident-set high
#   water mark cannot be reset between rungs, so on a CPU the column is empty.
# * **Recompiles**: ``counters["stats"]["unique_graphs"]`` counts every graph Dynamo
#   compiles, and ``counters["compiled_autograd"]["captures"]`` every backward graph that
#   compiled autograd captures. Both must stay still after warm-up.

# Inductor's empty-cache helper; named fresh_inductor_cache before PyTorch 2.8.
if hasattr(torch._inductor.utils, "fresh_cache"):
    fresh_cache = torch._inductor.utils.fresh_cache
else:
    fresh_cache = torch._inductor.utils.fresh_inductor_cache


def reset_training_state():
    with torch.no_grad():
        model.load_state_dict(initial_state)
        for opt in (eager_opt, compiled_opt):
            for state in opt.state.values():
                for value in state.values():
                    value.zero_()  # exp_avg, exp_avg_sq and the step counter
    model.zero_grad()


def train(label, step, opt, cudagraphs=False):
    reset_training_state()
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    graphs0 = counters["stats"]["unique_graphs"]
    captures0 = counters["compiled_autograd"]["captures"]
    hits0 = counters["inductor"]["fxgraph_cache_hit"]
    misses0 = counters["inductor"]["fxgraph_cache_miss"]
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    losses, step_ms = [], []
    with fresh_cache():
        for i in range(n_steps):
            if i == n_warmup:
                graphs_warm = counters["stats"]["unique_graphs"]
                captures_warm = counters["compiled_autograd"]["captures"]
            if cudagraphs:
                # Tells the CUDA-graph runtime that a new iteration begins, so it may reuse
                # the memory of the previous one.
                torch.compiler.cudagraph_mark_step_begin()
            if i == 0:
                start = time.perf_counter()
                loss = step(inputs[i], targets[i])
                scheduler.step()
                if device == "cuda":
                    torch.cuda.synchronize()
                first_s = time.perf_counter() - start
            elif device == "cuda":
                start_ev = torch.cuda.Event(enable_timing=True)
                end_ev = torch.cuda.Event(enable_timing=True)
                start_ev.record()
                loss = step(inputs[i], targets[i])
                scheduler.step()
                end_ev.record()
                step_ms.append((start_ev, end_ev))
            else:
                start = time.perf_counter()
                loss = step(inputs[i], targets[i])
                scheduler.step()
                step_ms.append((time.perf_counter() - start) * 1e3)
            # A CUDA graph's outputs are overwritten by its next replay: keep a copy.
            losses.append(loss.clone())
        if device == "cuda":
            torch.cuda.synchronize()
            step_ms = [s.elapsed_time(e) for s, e in step_ms]
        hits = counters["inductor"]["fxgraph_cache_hit"] - hits0
        assert hits == 0, (
            f"{label}: {hits} FX graph cache hits, the compile was not cold"
        )
    new_graphs = counters["stats"]["unique_graphs"] - graphs0
    late_graphs = counters["stats"]["unique_graphs"] - graphs_warm
    late_captures = counters["compiled_autograd"]["captures"] - captures_warm
    assert late_graphs == 0, f"{label}: {late_graphs} graphs compiled after warm-up"
    assert late_captures == 0, (
        f"{label}: {late_captures} backward captures after warm-up"
    )
    timed = step_ms[n_warmup - 1 :]  # step_ms starts at step 1
    median_ms = statistics.median(timed)
    result = {
        "label": label,
        "first_s": first_s,
        "median_ms": median_ms,
        "n": len(timed),
        "tokens_s": tokens_per_step / (median_ms / 1e3),
        "peak_mib": torch.cuda.max_memory_allocated() / 2**20
        if device == "cuda"
        else None,
        "graphs": new_graphs,
        "captures": counters["compiled_autograd"]["captures"] - captures0,
        "hits": hits,
        "misses": counters["inductor"]["fxgraph_cache_miss"] - misses0,
        "losses": torch.stack(losses).float().cpu().tolist(),
    }
    print(
        f"{label}: first step {first_s:6.2f} s, median step {median_ms:8.2f} ms "
        f"(N={len(timed)}), {result['tokens_s']:10.0f} tokens/s, "
        f"{new_graphs} new graph(s), {result['captures']} backward capture(s), "
        f"FX cache {hits} hit / {result['misses']} miss; "
        f"loss {result['losses'][0]:.3f} -> {result['losses'][-1]:.3f}"
    )
    return result


results = []

# %%
# A float64 reference
# -------------------
#
# Before timing anything we train a float64 copy of the model, in eager mode, for the first
# ``N_CHECK`` steps. Float64 rounding is about nine orders of magnitude finer than
# float32's, so for a few steps its losses are the "true" losses of this training run,
# and every rung can be scored by its distance from them. (On a GPU this also pays the
# one-time CUDA and cuBLAS initialisation before the first timed rung.)

N_CHECK = 10
ref_model = GPT(len(vocab), seq_len, d_model, n_head, n_layer).to(device, torch.float64)
ref_model.load_state_dict(initial_state)
ref_opt = torch.optim.AdamW(ref_model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
ref_scheduler = torch.optim.lr_scheduler.LambdaLR(ref_opt, lr_lambda)
ref_losses = []
for i in range(N_CHECK):
    loss = forward(ref_model, inputs[i], targets[i], bf16=False)
    backward(loss)
    ref_losses.append(loss.item())
    update(ref_opt)
    ref_opt.zero_grad()
    ref_scheduler.step()
print("float64 losses:", " ".join(f"{v:.4f}" for v in ref_losses))
del ref_model, ref_opt

# %%
# Rung 0: eager
# -------------
#
# The baseline is the loop everyone writes first. On a GPU we also run it in bfloat16
# autocast: the later bfloat16 rungs must be compared with the best *eager* setup that
# computes the same numerics, not with float32.


def eager_step(x, y):
    loss = forward(model, x, y, bf16=False)
    backward(loss)
    update(eager_opt)
    eager_opt.zero_grad()
    return loss.detach()


results.append(train("eager", eager_step, eager_opt))

if use_bf16:

    def eager_bf16_step(x, y):
        loss = forward(model, x, y, bf16=True)
        backward(loss)
        update(eager_opt)
        eager_opt.zero_grad()
        return loss.detach()

    results.append(train("eager, bf16 autocast", eager_bf16_step, eager_opt))

# %%
# Rung 1: compile the model
# -------------------------
#
# ``torch.compile(model)`` compiles the forward pass, and AOTAutograd traces and compiles
# the matching backward ahead of time. The clipping, the optimizer and the scheduler stay
# eager.

compiled_model = torch.compile(model)


def compiled_model_step(x, y):
    loss = forward(compiled_model, x, y, bf16=False)
    backward(loss)
    update(eager_opt)
    eager_opt.zero_grad()
    return loss.detach()


results.append(train("+ compiled model", compiled_model_step, eager_opt))

# %%
# Rung 2: compile the optimizer step
# ----------------------------------
#
# ``update`` (clipping and ``AdamW.step``) becomes one compiled function: Inductor
# generates the kernels for the gradient norm, the scaling and AdamW's arithmetic, each
# kernel covering many parameters at once. The optimizer here is ``compiled_opt``, whose learning rate
# is the tensor ``lr_tensor``: the scheduler writes a new value into it every step and the
# compiled graph reads it, so the schedule costs no recompile. The assertion in ``train``
# (no graphs after warm-up) is what proves it; so does the check below that the scheduler
# kept the same tensor object.

compiled_update = torch.compile(update)


def compiled_update_step(x, y):
    loss = forward(compiled_model, x, y, bf16=False)
    backward(loss)
    compiled_update(compiled_opt)
    compiled_opt.zero_grad()
    return loss.detach()


results.append(
    train("+ compiled optimizer (tensor lr)", compiled_update_step, compiled_opt)
)
assert compiled_opt.param_groups[0]["lr"] is lr_tensor
print(f"lr after the last step: {lr_tensor.item():.2e} (same tensor, updated in place)")

# %%
# Rung 3: compiled autograd
# -------------------------
#
# So far the backward pass is the one AOTAutograd derived from the forward graph, run by
# the eager autograd engine, which then calls ``AccumulateGrad`` for every parameter.
# Compiled autograd captures the whole backward as one graph at the moment
# ``loss.backward()`` runs, gradient accumulation included, and compiles it.
#
# It is switched on with the Dynamo config flag ``compiled_autograd``, here through
# ``torch._dynamo.config.patch`` so it applies only to the functions compiled inside the
# ``with`` block. The flag is read when ``torch.compile`` wraps a function, and it captures
# the ``backward()`` calls made *inside* that function. So we compile ``backward``. By
# default Dynamo does not trace ``loss.backward()`` itself (it stops there and runs it),
# but every call of the compiled function turns compiled autograd on for its duration,
# and the graph it captures contains the backward of rung 1's compiled forward, which is
# reused as it is: this rung compiles only the backward graph.

with torch._dynamo.config.patch(compiled_autograd=True):
    compiled_backward = torch.compile(backward)


def compiled_autograd_step(x, y):
    loss = forward(compiled_model, x, y, bf16=False)
    compiled_backward(loss)
    compiled_update(compiled_opt)
    compiled_opt.zero_grad()
    return loss.detach()


results.append(train("+ compiled autograd", compiled_autograd_step, compiled_opt))

# %%
# Rung 4: bfloat16 autocast
# -------------------------
#
# ``torch.autocast`` with ``dtype=torch.bfloat16`` runs matrix multiplications and
# attention in bfloat16 and keeps numerically sensitive ops (LayerNorm, softmax,
# cross-entropy) and the parameters in float32, by PyTorch's default rules; we change none
# of them. Compiled code honours the same rules: Dynamo records the autocast region and
# Inductor compiles the casts with the rest. Autocast is entered outside the compiled
# model, and Dynamo guards on it, so the model is compiled a second time, once, for
# bfloat16; compiled autograd captures the new backward graph that comes with it.
#
# On a CPU this page skips the rung (see the line printed at the top); on a GPU without
# native bfloat16 it is skipped too.

if use_bf16:

    def bf16_step(x, y):
        loss = forward(compiled_model, x, y, bf16=True)
        compiled_backward(loss)
        compiled_update(compiled_opt)
        compiled_opt.zero_grad()
        return loss.detach()

    results.append(train("+ bf16 autocast", bf16_step, compiled_opt))

# %%
# Rung 5: the whole step in CUDA graphs
# -------------------------------------
#
# After the rungs above, a step on a GPU is a few compiled graphs, each launching its
# kernels one by one from Python, plus guard checks and the autograd engine's bookkeeping
# between them. A CUDA graph records the kernels of a graph once and replays them with a
# single call. ``mode="reduce-overhead"`` does that for every graph ``torch.compile``
# produces, and it applies here because the step has what recording needs:
#
# * fixed shapes (every batch has the same size);
# * no CPU work that the GPU waits for: nothing calls ``.item()``, the learning rate is a
#   tensor, and the optimizer is ``capturable`` (its step counter lives on the GPU);
# * everything that changes between steps lives in tensors whose memory the graphs own or
#   read from: parameters, optimizer state, the learning rate, the batch.
#
# We compile one function, ``whole_step``: forward, backward, clipping and AdamW;
# ``zero_grad`` follows it eagerly, as in every rung. Dynamo still splits the function at
# ``loss.backward()`` (by default it does not trace ``Tensor.backward()``): the forward is
# one graph, the part after ``backward()`` another, and compiled autograd's backward graph
# is compiled with the same mode. All three are recorded. A CUDA graph writes its outputs
# into the same memory at every replay, so ``train`` clones the loss, and it calls
# ``torch.compiler.cudagraph_mark_step_begin()`` before each step to say that the previous
# step's outputs may be overwritten.
#
# There are no CUDA graphs on a CPU; there the ladder ends at rung 3 (or 4).


def whole_step(x, y):
    loss = forward(model, x, y, bf16=use_bf16)
    backward(loss)
    update(compiled_opt)
    return loss.detach()


def zero_grad_after(step):
    def step_and_zero_grad(x, y):
        loss = step(x, y)
        compiled_opt.zero_grad()
        return loss

    return step_and_zero_grad


if device == "cuda":
    skips = counters["inductor"]["cudagraph_skips"]
    with torch._dynamo.config.patch(compiled_autograd=True):
        compiled_whole_step = torch.compile(whole_step, mode="reduce-overhead")
    results.append(
        train(
            "+ CUDA graphs (whole step)",
            zero_grad_after(compiled_whole_step),
            compiled_opt,
            cudagraphs=True,
        )
    )
    # Inductor counts every graph it declines to record (and logs why).
    skips = counters["inductor"]["cudagraph_skips"] - skips
    print(f"graphs that reduce-overhead could not record: {skips}")
    assert skips == 0

# %%
# Do compiled and eager training compute the same thing?
# ------------------------------------------------------
#
# Each rung's first ``N_CHECK`` losses are compared with the float64 reference, following
# the method of PyTorch's own accuracy checker: the relative error of a compiled rung must
# be at most three times eager's relative error (plus a small floor, ``1e-5``), because a
# compiled step sums in a different order than eager and is entitled to the same amount of
# rounding error, not to zero. The bfloat16 rungs are held to the eager bfloat16 run
# instead, with a floor of ``4 * 2**-8`` (about 1.6 %): a bfloat16 number keeps 8
# significant bits, so each rounding moves it by up to ``2**-8`` of its value, and two
# bfloat16 runs that round in different places legitimately differ by a few of those.
# Training is chaotic over many steps, so the check uses only the first steps; the loss
# curves below show the rest.


def rel_error(losses):
    return max(abs(a - b) / abs(b) for a, b in zip(losses[:N_CHECK], ref_losses))


by_label = {r["label"]: r for r in results}
check_rows = []
for r in results:
    bf16_row = "bf16" in r["label"] or (use_bf16 and r["label"].startswith("+ CUDA"))
    base = by_label["eager, bf16 autocast" if bf16_row else "eager"]
    err, base_err = rel_error(r["losses"]), rel_error(base["losses"])
    floor = 4 * 2**-8 if bf16_row else 1e-5
    bound = 3 * base_err + floor
    check_rows.append([r["label"], f"{err:.2e}", base["label"], f"{bound:.2e}"])
    assert err <= bound, f"{r['label']}: relative error {err:.2e} > {bound:.2e}"
print(
    tabulate(
        check_rows,
        headers=["rung", "rel. error vs float64", "held to", "allowed"],
        disable_numparse=True,
    )
)
print(f"all rungs agree with their eager counterpart over the first {N_CHECK} steps")

# %%
# Results
# -------
#
# The table puts the ladder side by side. "first step" is the cold compile of what the
# rung adds, plus one step; the FX cache columns prove the cache was empty (no hits). For
# the CUDA-graph rung, recording the graphs happens in the next warm-up steps and is not
# in that column. The graph and capture counts are all from warm-up: ``train`` asserted
# that none came later. Two of them are known in advance and checked: the model compiles
# to a single graph (it has no graph breaks), and each rung that runs compiled autograd
# captures its backward exactly once.

assert by_label["+ compiled model"]["graphs"] == 1
for r in results:
    uses_compiled_autograd = r["label"] in (
        "+ compiled autograd",
        "+ bf16 autocast",
        "+ CUDA graphs (whole step)",
    )
    assert r["captures"] == (1 if uses_compiled_autograd else 0), r["label"]

print(
    f"{device_name}, torch {torch.__version__}; {tokens_per_step} tokens per step; "
    f"median of N steps after {n_warmup} warm-up steps"
    + (" (CUDA events)" if device == "cuda" else " (time.perf_counter, all threads)")
)
table = [
    [
        r["label"],
        f"{r['first_s']:.2f}",
        f"{r['median_ms']:.2f}",
        r["n"],
        f"{r['tokens_s']:,.0f}",
        "-" if r["peak_mib"] is None else f"{r['peak_mib']:,.0f}",
        r["graphs"],
        r["captures"],
        f"{r['hits']}/{r['misses']}",
        f"{r['losses'][-1]:.3f}",
    ]
    for r in results
]
print(
    tabulate(
        table,
        headers=[
            "rung",
            "first step (s)",
            "median step (ms)",
            "N",
            "tokens/s",
            "peak MiB",
            "graphs",
            "bw captures",
            "FX hit/miss",
            "final loss",
        ],
        disable_numparse=True,
    )
)

# %%
# Tokens per second, rung by rung:

labels = [r["label"] for r in results]
fig, ax = plt.subplots(figsize=(8, 0.5 * len(results) + 1.2))
colors = ["grey" if r["label"].startswith("eager") else "C0" for r in results]
ax.barh(labels, [r["tokens_s"] for r in results], color=colors)
ax.invert_yaxis()
ax.set_xlabel("tokens/s (median step), higher is better")
ax.set_title(f"Training a {n_layer}-layer GPT, {device_name}")
fig.tight_layout()
plt.show()

# %%
# And the loss curves. Every rung starts from the same weights and sees the same batches,
# so the curves should lie on top of each other; the bfloat16 curves may drift apart from
# the float32 ones by rounding, without training worse.

fig, ax = plt.subplots(figsize=(8, 4))
for r in results:
    style = "--" if r["label"].startswith("eager") else "-"
    ax.plot(range(1, n_steps + 1), r["losses"], style, label=r["label"], alpha=0.8)
ax.set_xlabel("step")
ax.xaxis.set_major_locator(MaxNLocator(integer=True))
ax.set_ylabel("training loss (cross-entropy)")
ax.set_title("Loss curves of every rung")
ax.legend(fontsize="small")
fig.tight_layout()
plt.show()

# %%
# What the numbers say
# --------------------
#
# The sentences below are chosen from this run's measurements. Each rung is compared with
# the rung of the ladder before it (rung 1 with eager float32), and the last rung with
# the fastest eager setup that computes the same numerics (eager bfloat16 with the fused
# AdamW when the last rung uses bfloat16, eager float32 otherwise). The break-even line
# divides the compile time by the time saved per step.


def compare(ratio):
    if ratio > 1.03:
        return "faster than"
    if ratio < 0.97:
        return "slower than"
    return "about as fast as"


ladder = [r for r in results if r["label"] != "eager, bf16 autocast"]
for prev, cur in zip(ladder, ladder[1:]):
    ratio = cur["tokens_s"] / prev["tokens_s"]
    print(
        f"{cur['label']:>34}: {ratio:5.2f}x the tokens/s of '{prev['label']}' ({compare(ratio)})"
    )

last = results[-1]
last_bf16 = use_bf16 and device == "cuda"
same_numerics = [
    r
    for r in results
    if r["label"].startswith("eager") and (("bf16" in r["label"]) == last_bf16)
]
best_eager = max(same_numerics, key=lambda r: r["tokens_s"])
ratio = last["tokens_s"] / best_eager["tokens_s"]
print(
    f"The fully compiled step ('{last['label']}') ran at {ratio:.2f}x the tokens/s of "
    f"the best eager setup with the same numerics ('{best_eager['label']}'): it was "
    f"{compare(ratio)} eager."
)
saved_ms = best_eager["median_ms"] - last["median_ms"]
if saved_ms > 0:
    compile_s = last["first_s"] - last["median_ms"] / 1e3
    print(
        f"Its cold first step took {last['first_s']:.1f} s, so at {saved_ms:.2f} ms saved "
        f"per step it pays for its own compile after about {compile_s / saved_ms * 1e3:,.0f} "
        "steps."
    )
else:
    print(
        "It saved no time per step here, so its compile time is not paid back on this "
        "machine at this model size."
    )
if device == "cpu":
    print(
        "Steps this short on a CPU are sensitive to anything else the machine runs, and "
        "compiled code adds fixed costs per call (guards, one call per graph): treat the "
        "CPU figures on this page as a functional check, not a benchmark."
    )

# %%
# How to read the ladder
# ----------------------
#
# Where the time goes depends on the ratio of GPU work to CPU work per step:
#
# * **Compiling the model** fuses the pointwise work around the matrix multiplications
#   (LayerNorm, GELU, residual adds, the attention's reshapes) and trims memory traffic;
#   the matrix multiplications themselves still call the same library kernels.
# * **Compiling the optimizer** replaces the eager clipping and AdamW (a loop over the
#   parameters on a CPU; foreach kernels and the fused AdamW kernel on a GPU) with
#   generated kernels. Against the fused eager AdamW it has little to win on its own; its
#   real purpose in this ladder is to make the whole step compilable, which rung 5 needs.
# * **Compiled autograd** hands Inductor the whole backward, including the gradient
#   accumulation, in one graph; for a model without graph breaks or hooks it mostly
#   removes the autograd engine's per-node work, and its cost is a cache lookup (a walk of
#   the autograd graph) on every ``backward()``.
# * **bfloat16** halves the bytes of the activations it touches and multiplies the matmul
#   throughput on GPUs with bfloat16 tensor cores, but adds cast kernels; it pays once
#   the GPU, not the CPU, sets the pace. It changes the numerics, which is why it is
#   compared with eager bfloat16.
# * **CUDA graphs** remove what is left on the CPU side: launches, guards, Python. They
#   matter most when the GPU would otherwise wait for the CPU, which is the case for
#   small models and small batches; on a model large enough to keep the GPU busy they
#   change little. The recorded graphs keep their memory in a pool of their own, for as
#   long as the graphs live.
#
# Compile time is paid once per process (and much less with a warm cache, which this page
# deliberately avoids for its measurements); the break-even line above says how many steps
# it takes to earn it back at this size.
#
# Conclusion
# ----------
#
# A whole training step compiles in rungs: the model with ``torch.compile(model)``, the
# clipping and optimizer step with ``torch.compile`` and a tensor learning rate that the
# scheduler updates in place, the backward pass with compiled autograd, bfloat16 with
# ``torch.autocast`` at its default rules, and on a GPU the whole step in CUDA graphs with
# ``mode="reduce-overhead"``. Each rung was checked against a float64 reference with the
# accuracy checker's rule, and counted: after warm-up, nothing recompiled. Measure your own
# model the same way, rung by rung, from a cold cache, and keep only the rungs that pay.
#
# Further reading
# ---------------
#
# * On this site, one rung at a time: :ref:`compiling_optimizer_recipe`,
#   :ref:`compiling_optimizer_lr_scheduler` and :ref:`compiled_autograd_tutorial`
# * `torch.compile API reference
#   <https://docs.pytorch.org/docs/stable/generated/torch.compile.html>`_
# * `torch.optim: how to adjust the learning rate
#   <https://docs.pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate>`_
# * `Automatic mixed precision (torch.amp)
#   <https://docs.pytorch.org/docs/stable/amp.html>`_
# * `CUDA graphs in PyTorch
#   <https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-graphs>`_
# * `torch.nn.utils.clip_grad_norm_
#   <https://docs.pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html>`_

# sphinx_gallery_thumbnail_number = 1
