"""
.. _distributed_compile_tutorial:

torch.compile with DDP and FSDP2
================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * Why a compiled backward would delay DDP's gradient all-reduce, and how Dynamo's
         ``DDPOptimizer`` splits the graph at bucket boundaries to keep the overlap
       * How to compile an FSDP2 (``fully_shard``) transformer block by block, as
         TorchTitan does, or as a whole, and what ``MixedPrecisionPolicy`` casts when
       * How to time a distributed step on both ranks with the site's measurement core:
         the step's parts, and where waiting for the other rank shows up
       * How far one rank's optimizer step is from its roofline, the least time its
         bytes take at copy speed
       * Which matrix-product and attention kernels an eager and a compiled step run
       * How to check that compiled distributed training computes the same losses and
         gradients as a single process

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
       * Familiarity with ``torch.compile`` and with DDP or FSDP
       * Linux (the workers pin their threads with ``os.sched_setaffinity``)
       * For the GPU path, two CUDA GPUs of compute capability 7.5 or newer with about
         58 GB free each, NCCL and Triton (the page prints its estimate and checks it);
         otherwise it runs as two CPU processes (gloo) with small sizes
       * On CPU, Inductor needs a C++ compiler and the Python headers
"""

# %%
# Overview
# --------
#
# Data-parallel training hides communication behind computation. DDP registers a hook
# on each parameter's gradient; when every gradient of a *bucket* (parameters grouped
# in reverse order of use) is ready, it starts an asynchronous all-reduce of that bucket
# while autograd goes on with the earlier layers. FSDP2 shards every parameter over the
# ranks: it all-gathers a module's parameters just before the module's forward (and
# again before its backward) and reduce-scatters its gradients after its backward.
#
# ``torch.compile`` changes the granularity. AOTAutograd turns each captured forward
# graph into one compiled backward function, which the autograd engine runs as a single
# node. Every gradient of that graph becomes ready at the same moment, at its end, so
# DDP's hooks would fire together and each all-reduce would wait for the whole backward.
# This page shows what PyTorch does about it for DDP and for FSDP2, on a decoder-only
# transformer built like Llama, of about a billion parameters on GPUs (the kind of model
# these recipes are made for, with large matrix products in every FSDP2 unit) and a tiny
# one on CPUs; it checks every variant against a single-process run and takes each step
# apart on both ranks.
#
# How this page runs
# ------------------
#
# Functions defined in a notebook cannot be imported by freshly spawned processes, so
# the page writes a worker script from the source of the functions shown below, puts
# the measurement core's source (``measure.py``) beside it, and starts two copies with
# ``torchrun`` (``--standalone`` picks a free port). With two GPUs the workers use
# NCCL, one GPU each; otherwise two CPU processes use gloo with a small float32 model.
# NVLink multicast stays off (``NCCL_NVLS_ENABLE=0`` and its siblings below), so every
# multi-GPU host runs the same code path. Two ranks run in lockstep, so a delay on
# either one shows in both; the workers remove what they can:
#
# * each rank pins all its threads to its own half of the cores the job may use
#   (``os.sched_setaffinity``), so the two ranks never compete for a core and the
#   operating system cannot move them between launches;
# * Inductor's pool of compile workers gets as many processes as a rank has cores
#   (``TORCHINDUCTOR_COMPILE_THREADS``; by default each rank starts one per core it may
#   use, up to 32), and intra-op threads are one per rank (``OMP_NUM_THREADS=1``);
# * the garbage collector runs only by hand, once before each group of variants, as
#   TorchTitan turns it off in its training loop and collects every so many steps: a
#   collection pauses the rank that runs it at a moment of its own, and the other rank
#   then waits for it at the next collective.
#
# The GPU path takes two GPUs with enough free memory; the page estimates it first.
# One DDP variant keeps 20 bytes per parameter (float32 parameters and gradients,
# AdamW's two moments, DDP's buckets) while the other takes a step with those 20, 2 more
# for the bf16 weights autocast keeps, and the activations saved for the backward
# (per token, about ``26 d + 8 f`` bytes a block for width ``d`` and SwiGLU width ``f``,
# and 10 bytes per vocabulary entry for the logits, their float32 copy and gradient);
# 2 GB more for the CUDA context and NCCL's and cuBLAS's buffers. The FSDP2 groups and
# the single-process float32 reference need less. Where two GPUs lack that much free
# memory, the page takes the CPU path and its first line says why.

import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import OrderedDict
from functools import partial
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from tabulate import tabulate

import measure

# About 1.1 B parameters; few, wide blocks give large matrix products per FSDP2 unit.
big = dict(backend="nccl", dtype="bfloat16", width=3072, heads=24, depth=8)
big.update(vocab=32768, seq=2048, batch=3, bucket_mb=500, lr=1e-4)
d, ffn, depth = big["width"], 256 * -(-8 * big["width"] // 768), big["depth"]
n_params = 2 * big["vocab"] * d + depth * (4 * d * d + 3 * d * ffn)
saved = big["batch"] * big["seq"] * (depth * (26 * d + 8 * ffn) + 10 * big["vocab"])
need = (42 * n_params + saved) / 1e9 + 2  # GB on each GPU
free = [torch.cuda.mem_get_info(i)[0] / 1e9 for i in range(torch.cuda.device_count())]
gpu = len(free) > 1 and dist.is_nccl_available() and min(free[:2]) >= need
# 1 MB DDP buckets (the smallest DDPOptimizer accepts) still cut this model in pieces.
small = dict(backend="gloo", dtype="float32", width=128, heads=4, depth=2)
small.update(vocab=1024, seq=64, batch=4, bucket_mb=1, lr=1e-3)
cfg = (big if gpu else small) | dict(world=2, check=3, rounds=11)
where = f"2 x {torch.cuda.get_device_name()}, NCCL" if gpu else "CPU, gloo"
measure.require(linux=True, cxx=not gpu, triton=gpu)  # else one line, and a stop
gb = [round(x, 1) for x in free]
print(f"GPU path: about {need:.0f} GB per GPU; GB free: {gb}; path: {where}")
print(f"torch {torch.__version__};", ", ".join(f"{k} {v}" for k, v in cfg.items()))

# %%
# The model, the data and the training step
# -----------------------------------------
#
# A token embedding, then blocks built as in Llama (the model TorchTitan trains): causal
# self-attention with **rotary position embeddings** and a **SwiGLU** MLP, each behind an
# RMSNorm and a residual connection; a final norm and an output layer. The rotary
# embedding turns each pair of query and key channels (``i`` and ``i + half`` of a head)
# by an angle that grows with the token's position, so that attention scores depend on
# how far apart two tokens are; its cosine and sine tables are computed once in
# ``make_model``, outside any module, so neither DDP nor FSDP2 syncs or shards them.
# SwiGLU multiplies ``silu`` of one projection by another (``up`` computes both). Both
# are chains of elementwise operators between the matrix products, in eager mode one
# kernel and one trip through memory each.
# ``nn.Sequential`` given an ``OrderedDict`` registers the layers by name, so the classes
# need only a ``forward`` (``fully_shard`` in PyTorch 2.9 refuses ``nn.ModuleDict``).
# Every process builds the model from the same seed, on its device, and draws the same
# global batches of random tokens; each rank trains on its half of a batch. Data
# parallelism averages the gradients over the ranks, so a distributed step computes the
# gradients of one process that sees the whole global batch, up to rounding.
#
# The parameters stay in float32. On GPUs the DDP variants compute under
# ``torch.autocast`` in bf16, and FSDP2 casts with its ``MixedPrecisionPolicy`` instead
# (below); on CPUs everything runs in float32. The logits go back to float32 for the
# loss.


def make_model(cfg):
    # The classes live inside the function so that its source carries them to the worker.
    heads, d, ffn = cfg["heads"], cfg["width"], 256 * -(-8 * cfg["width"] // 768)
    half = d // heads // 2  # rotary embedding: channel i and i + half turn together
    angle = torch.arange(cfg["seq"])[:, None] * 10000.0 ** (-torch.arange(half) / half)
    cos, sin = angle.cos().repeat(1, 2), torch.cat((-angle.sin(), angle.sin()), -1)

    class Block(nn.Sequential):
        def forward(self, x):
            b, s, _ = x.shape
            qkv = self.qkv(self.norm1(x)).view(b, s, 3, heads, d // heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            c, n = cos[:s].to(q.dtype), sin[:s].to(q.dtype)
            q, k = (t * c + t.roll(half, -1) * n for t in (q, k))
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
            gate, up = self.up(self.norm2(x)).chunk(2, dim=-1)  # SwiGLU
            return x + self.down(F.silu(gate) * up)

    class Net(nn.Sequential):
        def forward(self, tokens):
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x))

    torch.manual_seed(0)
    linear = partial(nn.Linear, bias=False)
    blocks = nn.ModuleList()
    for _ in range(cfg["depth"]):
        layers = dict(norm1=nn.RMSNorm(d), qkv=linear(d, 3 * d), proj=linear(d, d))
        layers.update(norm2=nn.RMSNorm(d), up=linear(d, 2 * ffn), down=linear(ffn, d))
        blocks.append(Block(OrderedDict(layers)))
    net = dict(embed=nn.Embedding(cfg["vocab"], d), blocks=blocks)
    net.update(norm=nn.RMSNorm(d), head=linear(d, cfg["vocab"]))
    return Net(OrderedDict(net))


def batches(cfg):
    gen = torch.Generator().manual_seed(1)
    shape = (cfg["check"], cfg["world"] * cfg["batch"], cfg["seq"] + 1)
    tokens = torch.randint(0, cfg["vocab"], shape, generator=gen)
    return [(t[:, :-1], t[:, 1:]) for t in tokens]


def train_step(model, opt, x, y, amp=False):
    opt.zero_grad()
    with torch.autocast(x.device.type, torch.bfloat16, enabled=amp):
        logits = model(x)
    loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
    loss.backward()
    opt.step()
    return loss.detach()


# %%
# The reference: one process, eager, float32, the whole global batch, on the device
# type the workers use. It keeps the losses of the first ``check`` steps and the first
# step's gradients of the first and last blocks, the final norm and the output layer,
# stored in the dtype the workers compute in. Low-precision rounding shows in eager and
# compiled variants alike, and the check allows for it (a relative gradient error below
# 5 % in bf16, 0.01 % in float32).

with torch.device("cuda" if gpu else "cpu") as ref_device:
    model = make_model(cfg)
params = dict(model.named_parameters())
checked = ("blocks.0.", f"blocks.{cfg['depth'] - 1}.", "norm.", "head.")
opt = torch.optim.AdamW(params.values(), lr=cfg["lr"], fused=True)
ref_losses = []
for step, (x, y) in enumerate(batches(cfg)):
    ref_losses.append(train_step(model, opt, x.to(ref_device), y.to(ref_device)).item())
    if step == 0:  # the checked gradients, in the dtype the workers compute in
        grads = [(n, p.grad) for n, p in params.items() if n.startswith(checked)]
        ref_grads = {n: g.to("cpu", getattr(torch, cfg["dtype"])) for n, g in grads}
print("reference losses:", " ".join(f"{v:.5f}" for v in ref_losses))
loss_tol, grad_tol = {"float32": (1e-4, 1e-4), "bfloat16": (1e-2, 5e-2)}[cfg["dtype"]]
del model, params, opt
torch.cuda.empty_cache()

# %%
# Measuring a distributed step
# ----------------------------
#
# Timings come from the site's measurement core (:ref:`measuring_recipe` explains it).
# Each rank calls ``measure.compare`` on its own, on the variants of one **group**: an
# eager variant and the compiled variants to compare with it, all alive at once and
# timed in interleaved windows without the profiler, then profiled for a few steps.
# ``compare`` picks how many calls fill a window by timing one call, and the two ranks
# could pick different counts and so run different collectives, which would hang both;
# ``max_calls=1`` makes every window one step on every rank. The ranks run in
# lockstep, so their step times come out close; their parts need not. Each rank sends
# its rows back as JSON, and the launcher turns them into the core's ``Results`` again,
# checks them against physics and prints the tables and the comparison lines.
#
# A rank that reaches a collective before the other rank waits inside it; that wait is
# neither its compute nor its idle time, and the core counts it under
# **communication**. On GPUs an NCCL kernel starts when its stream reaches it and spins
# on the GPU until its peer arrives, so the wait is part of that kernel's time, in
# ``GPU: communication``; a GPU left idle while its CPU thread blocks in a collective
# call counts under ``waiting: communication``. On the CPU path gloo moves the data on
# the CPU, and the core splits the main thread's time by the innermost operator or
# range it was running: time inside a collective call, or inside one of FSDP2's ranges
# named after one (``FSDP::all_gather_copy_in`` and the like; the operators inside such
# a range count as themselves), is ``communication``. The communication column below
# adds all these parts: data moving and waiting for the other rank together.
#
# The core's busy share counts every kernel, NCCL's included, and an NCCL kernel that
# spins while the other rank is late keeps the GPU "busy" without computing anything.
# So on GPUs the tables also give **compute busy %**: the time of every kernel but
# NCCL's (the ``GPU:`` parts other than ``GPU: communication`` and
# ``GPU: kernels overlapping (counted once)``) over the step. Where compute busy % is
# below the busy share, the gap is time in which only NCCL's kernels ran (less any
# time in which two compute kernels ran at once, such as one of FSDP2's copies on its
# own stream beside a matrix product, which the compute share counts twice).
#
# Dynamo's caches belong to the process, and a variant compiled earlier in a group would
# serve later variants of the same blocks from them. So every group starts from
# ``torch._dynamo.reset()`` with fresh models, and each compiled FSDP2 variant gets a
# group of its own beside a fresh eager FSDP2 run. Those caches also hold on to the
# last group's compiled models, so the reset comes first; then the garbage collector
# and ``torch.cuda.empty_cache()`` free those models and their memory before the
# group's first model is built. Otherwise they could be freed in the middle of a later
# variant, and that variant's peak, taken above what was allocated when it was built,
# would read low by their size.
#
# The worker
# ----------
#
# Dynamo calls the backend once per graph it captures, and ``DDPOptimizer`` once per
# piece of a split graph; Inductor hands each graph to AOTAutograd, which counts it. So
# the tables show graphs captured by Dynamo (``counters["stats"]["unique_graphs"]``),
# graphs compiled (``counters["aot_autograd"]["total"]``) and, in brackets, the
# operator calls Dynamo put into its graphs (``counters["stats"]["calls_captured"]``),
# counted per variant.
#
# ``build`` makes each variant; ``run_group`` trains each variant of a group for
# ``check`` steps (the first compiles), keeps the losses, averaged over the ranks, the
# relative error of the checked gradients against the reference (FSDP2's sharded
# gradients are gathered with ``full_tensor``, a collective every rank joins) and, on
# GPUs, the most memory the variant held for tensors beyond what was allocated before
# it was built (**peak GB**); then it times the group on the last batch and, after the
# timing, profiles three more steps of each variant for ``by_name``: the matrix-product
# and attention kernels by name (on a CPU, operators by their own time), and the time
# they ran while a communication kernel ran on the same GPU. In the per-block FSDP2
# group it then times the optimizer step on its own (below, "What compiling can still
# reach"). ``main`` pins the rank's threads, then writes one JSON report per group and
# rank.

WORKER_HEADER = """import json, measure, os, re, sys, torch; from pathlib import Path
import torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
from collections import OrderedDict; from functools import partial"""


def build(variant, cfg, dev):
    """The plain model (for its parameter names) and the module the step calls."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    with dev:
        model = make_model(cfg)
    if variant.startswith("FSDP2"):  # TorchTitan's order: compile, then shard
        # param_dtype, the compute dtype; reduce_dtype, that of the reduce-scatter
        mp = MixedPrecisionPolicy(getattr(torch, cfg["dtype"]), torch.float32)
        for i, block in enumerate(model.blocks):
            if "per-block" in variant:
                model.blocks[i] = block = torch.compile(block, fullgraph=True)
            fully_shard(block, mp_policy=mp)
        fully_shard(model, mp_policy=mp)  # the root: embedding, final norm, output
        return model, torch.compile(model) if "whole-model" in variant else model
    if "compile" in variant:
        model.compile()
    return model, DDP(model, bucket_cap_mb=cfg["bucket_mb"])  # on the model's device


def by_name(step, dev, steps=3):
    """A step's matmul and attention kernels (on a CPU, operators by their own time),
    named without arguments or namespaces: {name: [calls, ms]} per step, and the ms per
    step in which one of them and a communication kernel ran at once."""
    gpu, sync = dev.type == "cuda", getattr(torch, dev.type).synchronize
    with torch.profiler.profile() as prof:  # the CPU, and CUDA where there is a GPU
        for _ in range(steps):
            step()
        sync()
    kinds, found, out = measure.KERNEL_FAMILIES if gpu else measure.CPU_FAMILIES, {}, {}
    for e in prof.events():  # each kernel once, by name, start and end: some come twice
        if e.device_type.name == dev.type.upper() and not e.is_user_annotation:
            fam = next((f for f, pattern in kinds if re.search(pattern, e.name)), "")
            us = e.time_range.elapsed_us() if gpu else e.self_cpu_time_total
            found[e.name, e.time_range.start, e.time_range.end] = fam, us / 1e3 / steps
    for (name, _, _), (fam, ms) in found.items():
        if fam in ("matmul", "attention") or name.startswith("triton_tem"):
            n = re.sub(r"^void |\(anonymous namespace\)::|\(.*|\w+::| ", "", name)
            n = n if len(n) < 64 else n[:36] + "..." + n[-25:]  # the start and the end
            out[n] = [x + y for x, y in zip(out.get(n, (0, 0)), (1 / steps, ms))]
    mm = [k[1:] for k, (fam, _) in found.items() if fam in ("matmul", "attention")]
    talk = [k[1:] for k, (fam, _) in found.items() if fam == "communication"]
    u = measure._union  # the length of a union of intervals, in us
    both = u(mm)[0] + u(talk)[0] - u(mm + talk)[0]
    return dict(kernels=out, beside=both / 1e3 / steps)


def run_group(variants, cfg, dev, ref_grads):
    import gc

    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # first, as its caches hold on to the last group's models
    gc.collect(), torch.cuda.empty_cache()  # then they and their memory are freed
    gc.disable()  # and no collection pauses a rank until the next group
    rank, world, steps, out = dist.get_rank(), cfg["world"], {}, {}
    for variant in variants:
        counters.clear()  # the graph counts of this variant
        torch.cuda.reset_peak_memory_stats() if dev.type == "cuda" else None
        before = torch.cuda.memory_allocated()  # 0 on the CPU path
        model, wrapped = build(variant, cfg, dev)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], fused=True)
        amp = cfg["dtype"] == "bfloat16" and variant.startswith("DDP")
        params = {n.replace("_orig_mod.", ""): p for n, p in model.named_parameters()}
        out[variant] = rec = dict(losses=[], errors={})
        for i, (x, y) in enumerate(batches(cfg)):
            x, y = x.chunk(world)[rank].to(dev), y.chunk(world)[rank].to(dev)
            loss = train_step(wrapped, opt, x, y, amp)
            dist.all_reduce(loss)  # a sum: gloo has no average
            rec["losses"].append(loss.item() / world)
            for n in ref_grads if i == 0 else []:  # the same order on every rank
                g, r = params[n].grad, ref_grads[n].to(dev).float()
                g = g.full_tensor() if hasattr(g, "full_tensor") else g  # FSDP2
                rec["errors"][n] = ((g.float() - r).norm() / r.norm()).item()
        steps[variant] = partial(train_step, wrapped, opt, x, y, amp)
        rec["mem"] = (torch.cuda.max_memory_allocated() - before) / 1e9
        graphs = counters["stats"]["unique_graphs"], counters["aot_autograd"]["total"]
        rec["graphs"] = graphs + (counters["stats"]["calls_captured"],)  # and ops
    res = measure.compare(steps, dev.type, rounds=cfg["rounds"], max_calls=1)
    for v in variants:  # after the timing: the kernels by name
        out[v] |= by_name(steps[v], dev) | {"row": vars(res[v])}
    if "per-block" in v:  # the last variant, and opt its optimizer: the step alone
        n = sum(p.to_local().numel() for p in opt.param_groups[0]["params"])  # shard
        alone = measure.compare({"AdamW": opt.step}, dev.type, roofline_bytes=28 * n)
        out[v]["opt"] = dict(row=vars(alone["AdamW"]), n=n, bpms=alone.bytes_per_ms)
    return out


def main(cfg):
    rank, cores = int(os.environ["RANK"]), sorted(os.sched_getaffinity(0))
    cores = cores[rank * len(cores) // 2 : (rank + 1) * len(cores) // 2] or cores
    for thread in os.listdir("/proc/self/task"):  # every thread started so far
        os.sched_setaffinity(int(thread), cores)
    nccl = cfg["backend"] == "nccl"
    dev = torch.device(f"cuda:{os.environ['LOCAL_RANK']}" if nccl else "cpu")
    torch.cuda.set_device(dev) if nccl else None
    dist.init_process_group(cfg["backend"])
    for i, group in enumerate(cfg["groups"]):  # ref.pt: written by the launcher
        out = dict(variants=run_group(group, cfg, dev, torch.load("ref.pt")))
        Path(f"{i:02}.{rank}.json").write_text(json.dumps(out))  # sorted: group, rank
    dist.destroy_process_group()


# %%
# The launcher writes those functions into ``worker.py``, and the source of the ``measure``
# module this process imported into ``measure.py`` beside it, then starts two copies. If
# the job overruns the time limit, coreutils' ``timeout`` stops ``torchrun`` with
# SIGTERM, and ``torchrun`` stops its workers (each runs in a session of its own, so
# killing ``torchrun``'s process group would leave them running). A failure raises with
# the end of the output, so that a broken build names its cause. CPU workers must not
# see a GPU: FSDP2 would put its default device mesh there.

WORKER_FUNCTIONS = [make_model, batches, train_step, build, by_name, run_group, main]
# Inductor's compile workers per rank: as many as the rank has cores on GPUs, else one.
threads = max(1, len(os.sched_getaffinity(0)) // 2) if gpu else 1
WORKER_ENV = dict(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
WORKER_ENV.update(NVSHMEM_DISABLE_NVLS="1", OMP_NUM_THREADS="1")
WORKER_ENV["TORCHINDUCTOR_COMPILE_THREADS"] = str(threads)


def launch(timeout=600):
    with tempfile.TemporaryDirectory() as tmp:
        source = [WORKER_HEADER] + [inspect.getsource(f) for f in WORKER_FUNCTIONS]
        source.append("main(json.loads(sys.argv[1]))\n")
        (Path(tmp) / "worker.py").write_text("\n\n".join(source))
        (Path(tmp) / "measure.py").write_text(inspect.getsource(measure))
        torch.save(ref_grads, Path(tmp) / "ref.pt")  # the workers run in tmp
        # SIGTERM at the time limit: torchrun then stops its workers
        run = ["timeout", "-k", "60", str(timeout)]
        run += [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd = run + [f"--nproc-per-node={cfg['world']}", "worker.py", json.dumps(cfg)]
        env = os.environ | WORKER_ENV | ({} if gpu else {"CUDA_VISIBLE_DEVICES": ""})
        done = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        if done.returncode != 0:  # 124: the time limit
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-80:])
            raise RuntimeError(f"the workers failed ({done.returncode}):\n{tail}")
        return [json.loads(f.read_text()) for f in sorted(Path(tmp).glob("*.json"))]


# %%
# Reading the results
# -------------------
#
# ``read`` asserts that every variant's losses and checked gradients match the reference
# (the gradient error is the largest over the checked parameters of
# ``|g - g_ref| / |g_ref|``), then prints one row per variant and rank: the page's own
# columns (on GPUs with peak GB), then the core's (step, spread, and on GPUs
# the busy share, the bound and the profiler's stretch). Under the table, one line per
# rank compares each compiled variant with the group's eager one, from their paired
# windows, and names the parts that moved where they differ. Then rank 0's matrix
# products and attention by kernel name, eager against compiled, per step (calls and
# ms): the five longest, then all of them; on GPUs the line under them gives the time
# in which one of them ran beside an NCCL kernel. ``read`` returns rank 0's graph
# counts of the compiled variant, for the asserts after it.


COMPUTE = r"GPU: (?!communication|kernels overlapping)"  # the compute kernels' parts


def read(i):
    table, (ref, new) = [], cfg["groups"][i]
    for name in cfg["groups"][i]:
        for rank, report in enumerate(runs[i]):
            r, res = report["variants"][name], report["res"]
            loss_err = max(abs(a / b - 1) for a, b in zip(r["losses"], ref_losses))
            assert loss_err < loss_tol, f"{name}: losses off by {loss_err:.2e}"
            assert (err := max(r["errors"].values())) < grad_tol, (name, r["errors"])
            res[name].check()  # prints any physics failure in this page's output
            comm = sum(v for k, v in res[name].parts.items() if "communication" in k)
            cells = [name, rank, "{}/{} ({})".format(*r["graphs"]), loss_err]
            compute = sum(v for k, v in res[name].parts.items() if re.match(COMPUTE, k))
            cells += [err, comm] + [r["mem"], 100 * compute / res[name].ms] * gpu
            table.append(cells + res.cells(name))
    head = ["variant", "rank", "graphs Dynamo/compiled (ops)", "loss err", "grad err"]
    head += ["communication (ms)"] + ["peak GB", "compute busy %"] * gpu + res.headers()
    fmt = ["", "", "", ".1e", ".1e", ".1f"] + [".1f", ".0f"] * gpu + res.formats()
    print(f"{where}; step: median of {cfg['rounds']} interleaved windows of one step")
    print(tabulate(table, head, "github", fmt))
    for rank, report in enumerate(runs[i]):
        print(report["res"].versus(new, ref, f"rank {rank}: ", rank == 0 and new))
    v = [runs[i][0]["variants"][n] for n in (ref, new)]  # rank 0's kernels
    k = [r["kernels"] for r in v]
    cells = [[n] + [x for r in k for x in r.get(n, (0, 0))] for n in k[0] | k[1]]
    cells.sort(key=lambda c: -max(c[2], c[4]))  # the longest first
    total = [f"all {len(cells)}"] + [sum(c[j] for c in cells) for j in (1, 2, 3, 4)]
    head = ["rank 0: matmul, attention", "eager calls", "ms", "compiled calls", "ms"]
    print(tabulate(cells[:5] + [total], head, "github", [""] + [".0f", ".2f"] * 2))
    if gpu:  # the time in which one of them and an NCCL kernel ran at once
        print(f"Rank 0, beside NCCL: {v[0]['beside']:.2f} -> {v[1]['beside']:.2f} ms")
    return v[1]["graphs"]  # rank 0's compiled variant: graphs and operators


# %%
# Running the variants
# --------------------
#
# One launch runs every group, each with fresh models.

fsdp = [["FSDP2, eager", f"FSDP2, {k} compile"] for k in ("per-block", "whole-model")]
cfg["groups"] = [["DDP, eager", "DDP(model.compile())"], *fsdp]
reports = launch()
runs = [reports[i : i + cfg["world"]] for i in range(0, len(reports), cfg["world"])]
every = {}  # every row by "variant, rank"; FSDP2's second eager rows replace the first
for i, report in enumerate(reports):  # the core's rows again, as each rank measured
    rows = {n: measure.Row(**v["row"]) for n, v in report["variants"].items()}
    report["res"] = measure.Results(rows)
    every |= {f"{n}, rank {i % cfg['world']}": row for n, row in rows.items()}


# %%
# DDP and torch.compile
# ---------------------
#
# When Dynamo compiles a frame while a DDP module's forward is running, and
# ``torch._dynamo.config.optimize_ddp`` asks for it (the default), it hands the captured
# graph to ``DDPOptimizer`` instead of the backend. ``DDPOptimizer`` walks the graph
# backwards, the order in which gradients become ready, adds up the sizes of the
# parameters it meets, and cuts the graph wherever a bucket of ``bucket_cap_mb`` fills
# (the first bucket is capped at 1 MB, as in DDP). Each piece is compiled on its own,
# forward and backward, so in the backward the autograd engine runs one compiled node
# per piece, and the last piece's all-reduce starts while the earlier pieces compute.
# The cost: more graphs to compile, no fusion across a cut, one more call per piece.
# With ``optimize_ddp=False`` the graph stays whole, and DDP's hooks all fire after the
# whole compiled backward, so no all-reduce overlaps it. On GPUs the page uses buckets
# of ``bucket_mb`` (500 MB, about one block's float32 gradients), which keeps the number
# of pieces to compile small at this size; DDP's default is 25 MB.
#
# Dynamo does not trace DDP's own ``forward`` (the context that marks a DDP module as
# active is excluded from tracing), so ``torch.compile(DDP(model))`` and
# ``DDP(model.compile())`` both compile the model's ``forward`` while DDP is active. The
# PyTorch documentation (*Where to apply torch.compile?*) recommends the second:
# ``model.compile()`` compiles in place, so ``state_dict`` keys keep their names, and
# the wrapper stays an ordinary module. DDP keeps a full copy of the parameters,
# gradients and optimizer state on every rank: 16 bytes per parameter in float32 with
# AdamW's two moments, plus DDP's gradient buckets and the activations; the ``peak GB``
# column on GPUs shows what that took.

dynamo, compiled, _ = read(0)
assert dynamo == 1 < compiled, (dynamo, compiled)  # DDPOptimizer cut the graph

# %%
# How to read the tables. Every row matched the reference within its precision; the
# error columns compare eager and compiled rows against the same float32 run. One graph
# captured by Dynamo became several compiled pieces: the bucket cuts. On GPUs the busy
# share and the bound say whether the kernels or the CPU set each rank's pace, and the
# compute busy share how much of that kernel time computed rather than moved data or
# waited in NCCL's kernels. The ``rank`` lines say, from the paired windows, whether
# the compiled row is faster, slower or a tie on each rank, and where they differ,
# which parts of the step moved.
#
# Without ``max-autotune``, Inductor lowers each ``aten.mm`` to the ATen call
# (``extern_kernels.mm``, cuBLAS on a GPU; a Triton template of its own would show in
# the kernel table as ``triton_tem_...``), and attention to the ATen operator that the
# traced graph names (flash, memory-efficient or cuDNN attention, chosen by the same
# rules as in eager mode), after copying any input whose last dimension is not dense
# (``sdpa_constraint`` in ``torch/_inductor/lowering.py``). A linear layer with a bias
# would be an ``aten.addmm``, which a post-grad pass may split on a GPU into a product
# and an add fused into the next pointwise kernel (``unfuse_bias_add_to_pointwise``);
# this page's layers have no bias. Inductor does choose the memory layout of the tensors
# it writes, the products' outputs included, and cuBLAS picks its kernel by shapes,
# dtypes and transposes: the names in the kernel table record the result. A kernel can
# also run longer under the same name: beside an NCCL kernel it shares the GPU's
# multiprocessors and memory bandwidth. The kernel table's last row gives the time of
# all of them, eager and compiled, and on GPUs the line under it the time during which
# a product or attention kernel and an NCCL kernel ran at once. The core sorts kernels
# into families by name, first match first: every ``triton_`` kernel counts as a
# compiled kernel whatever operator it is named after, so the only Triton kernels this
# table can list are templates (``triton_tem_``).
#
# FSDP2 and torch.compile
# -----------------------
#
# ``fully_shard`` turns a module into a unit whose parameters are all-gathered by a
# forward pre-hook and whose gradients are reduce-scattered from a backward hook. FSDP2
# wraps its hooks in ``torch._dynamo.disable``, so what Dynamo compiles is the code
# *between* the hooks. TorchTitan's recipe for a transformer, which the page follows:
#
# * compile each transformer block with ``fullgraph=True``, *then* ``fully_shard`` each
#   compiled block, then the root module (here the root holds the embedding, the final
#   norm and the output layer);
# * ``MixedPrecisionPolicy(param_dtype=..., reduce_dtype=torch.float32)``. FSDP2 keeps
#   the sharded parameters in float32 and casts each rank's **local shard** to
#   ``param_dtype`` *before* the all-gather (``FSDPParam.all_gather_inputs``), so the
#   collective moves half the bytes when ``param_dtype`` is bf16, as on the GPU path;
#   gradients are cast to ``reduce_dtype`` before their reduce-scatter. On the CPU path
#   ``param_dtype`` is float32 and FSDP2 casts nothing;
# * every block frees its gathered parameters after its forward and gathers them again
#   for its backward (``reshard_after_forward``); the root keeps its own, since its
#   backward comes first.
#
# The hooks sit on the outer wrapper and run eagerly around each compiled ``forward``,
# so ``fullgraph=True`` holds and the communication keeps its per-block overlap;
# identical blocks share one compiled graph. ``torch.compile(model)`` after
# ``fully_shard`` starts at the model's ``forward`` and meets the first block's hook,
# which Dynamo must not trace: it breaks the graph there or, since the call sits in the
# loop over the blocks, gives up on the frame, which then runs eagerly. Each block's
# ``forward``, called from that loop, is a frame of its own, and Dynamo compiles it as
# the per-block variant does. ``optimize_ddp`` concerns DDP only: FSDP2's collectives
# live in its hooks.
#
# Both compiled FSDP2 rows show the same counts, graphs and operators, and the page
# asserts it: the whole-model row's graph is the block's ``forward``, which the blocks
# share, and the model's own ``forward`` (the embedding, the loop, the final norm and
# the output layer) ran eagerly, as in the per-block row. The two compiled rows ran in
# separate groups, so no paired windows compare them: each ``rank`` line gives its
# ratio to its own eager run with an interval, and where the two intervals overlap,
# nothing here tells the two compiles apart.

per, whole = read(1), read(2)
assert 1 <= per[0] == per[1] < cfg["depth"] and whole == per, (per, whole)
fig, ax = plt.subplots(figsize=(9, 1.2 + 0.4 * len(every)), layout="tight")
steps = [r.ms for r in every.values()]
ax.barh(list(every), steps, xerr=[r.spread for r in every.values()])
ax.set(xlabel="ms per step, no profiler (bars: spread)", title=f"Each step: {where}")
plt.show()

# %%
# ``fullgraph=True`` proves that each block compiled without a break, and fewer graphs
# than blocks compiled: the blocks reuse one graph. The chart shows every variant's step
# on each rank, with the spread of its windows (the FSDP2 eager rows are those of the
# whole-model group); the ``rank`` lines above split each gap into the core's parts.
# Compiling changes only what runs between the hooks: it fuses the norms, the rotary
# embedding, SwiGLU's activation and product and the residual adds into fewer kernels
# with fewer launches, and adds a guard check and AOTAutograd's runtime wrapper to every
# compiled call. Around each unit FSDP2 still does the same CPU work: it issues the
# all-gather, copies the gathered shards out into parameters and issues the
# reduce-scatter, and the optimizer updates sharded DTensor parameters. Whether that CPU
# work or the kernels set the pace is what the busy share and the bound say; where the
# kernels do, their time is what compiling can shrink.
#
# What compiling can still reach
# ------------------------------
#
# The core sorts every kernel by family. Matrix products and attention
# (``GPU: matmul``, ``GPU: attention``) run in library kernels in every variant (the
# kernel tables name them). Fusion acts on the other kernels, and only on those that a
# compiled graph launches:
#
# * ``GPU: compiled kernels``: Inductor's Triton kernels, forward and backward;
# * ``GPU: eager elementwise``: kernels of code that runs uncompiled, such as the
#   embedding, the final norm, the loss and their backward, and in an eager variant every
#   norm, rotary embedding, activation, product and residual add of the blocks;
# * ``GPU: copies``: among others FSDP2's copies around each collective (the shard
#   copied into the all-gather's buffer, the gathered parameters copied out, the
#   gradients copied and cast for the reduce-scatter);
# * ``GPU: optimizer``: the fused AdamW kernels, outside the compiled model here.
#
# On the CPU path the core splits the main thread's time instead; there
# ``compiled code`` is the time inside Inductor's C++ kernels, apart from the matrix
# products they call, and ``FSDP2 hooks`` the time inside FSDP2's own ranges.
#
# Each part has its own lever. Inductor's kernels shrink only with more fusion inside
# the blocks; the eager kernels, by compiling more of the model (the root's embedding,
# final norm and loss); FSDP2's copies and the rest of its hooks' work (``FSDP2 hooks``
# on the CPU path), only on FSDP2's side, since its hooks run eagerly around the
# compiled blocks: ``reshard_after_forward=False``, for one, skips the all-gather
# before each block's backward and the copies around it, for the memory of keeping the
# gathered parameters until then. The optimizer's lever is its own step: AdamW in
# float32 reads each parameter, its gradient and its two moments and writes back the
# parameter and both moments, at least 28 bytes per parameter, and under FSDP2 each
# rank updates only its shard. So after the group's timing each rank times
# ``opt.step()`` alone (on the last step's gradients, again and again) with
# ``measure.compare(..., roofline_bytes=28 * n)``, which times a large copy in the same
# windows: those bytes at the copy's speed are the least time the step can take, its
# roofline. The time above the roofline is the most that any optimizer moving those
# bytes could win (:ref:`compiling_optimizer_recipe` compiles one); a step close to its
# roofline gains only from moving fewer bytes, such as moments kept in bf16. That holds
# where the optimizer's state is far larger than the caches, as on the GPU path
# (gigabytes a rank). On the CPU path this small model's state, a few MB a rank, can
# stay in the processor's caches between steps, where the core's copy of 128 MiB
# cannot: there the share compares the step's speed with a copy's, and it is no bound.
#
# The lines below rank the parts of the per-block step on each rank that are neither
# matrix products, attention nor communication; on GPUs they start with the busy share
# and the part of it that NCCL's kernels took, which includes their waits for the other
# rank and is no lever of compiling. The first part named is the next lever; under it,
# the optimizer step alone against its roofline.

for rank, report in enumerate(runs[1]):
    v, skip = "FSDP2, per-block compile", "matmul|attention|communic|overlap"
    row, o = report["res"][v], report["variants"][v]["opt"]
    rest = {k: ms for k, ms in row.parts.items() if not re.search(skip, k)}
    top = sorted(rest, key=rest.get, reverse=True)[:3]
    parts = [f"{k} {rest[k]:.2f} ms ({100 * rest[k] / row.ms:.0f} %)" for k in top]
    nccl = row.parts.get("GPU: communication", 0)  # of the busy time, NCCL's kernels
    busy = f"busy {row.busy:.0f} %, of which NCCL {nccl:.2f} ms; " if gpu else ""
    print(f"rank {rank}, per-block compile, {row.ms:.2f} ms: {busy}" + "; ".join(parts))
    alone, roof = measure.Row(**o["row"]), 28 * o["n"] / o["bpms"]  # its roofline, ms
    alone.check(roof)  # on GPUs its kernel time cannot be shorter than the roofline
    say = "  AdamW alone: {:.2f} ms; its bytes at copy speed: {:.2f} ms ({:,} "
    say += "parameters x 28 bytes at {:.0f} GB/s), {:.0f} % of copy speed"
    print(say.format(alone.ms, roof, o["n"], o["bpms"] / 1e6, 100 * roof / alone.ms))

# %%
# Conclusion
# ----------
#
# A compiled backward makes all gradients of a graph ready at once, which would delay
# data-parallel communication to the end of the backward. For DDP, ``DDPOptimizer``
# cuts the graph at bucket boundaries so that the all-reduces overlap the backward
# again; compile the inner module and wrap it in DDP. For FSDP2, TorchTitan's recipe
# keeps ``fullgraph=True``: compile each block, then ``fully_shard`` it. Whether
# compiling pays is a question of where a step's time goes: measure it on every rank,
# keeping the time in collectives, waits for the other rank included, apart from
# compute; compare each compiled variant with its eager twin timed beside it, and its
# losses and gradients with a single process.

# sphinx_gallery_runner_label = "multi-gpu"

# %%
# Further reading
# ---------------
#
# * `Where to apply torch.compile?
#   <https://docs.pytorch.org/docs/stable/compile/programming_model.where_to_apply_compile.html>`_
# * `torch.compile FAQ: distributed code
#   <https://docs.pytorch.org/docs/stable/torch.compiler_faq.html>`_
# * `torch.distributed.fsdp.fully_shard
#   <https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html>`_
# * `TorchTitan: per-block compile and FSDP2 for Llama
#   <https://github.com/pytorch/torchtitan/blob/main/torchtitan/models/llama3/infra/parallelize.py>`_
# * `Maximizing training throughput using torch.compile and FSDP
#   <https://pytorch.org/blog/maximizing-training-throughput/>`_
# * :ref:`compiled_autograd_tutorial`

# sphinx_gallery_thumbnail_number = 1
