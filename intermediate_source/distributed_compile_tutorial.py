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
       * How to measure a distributed step on both ranks: model FLOPs utilization, and
         a split of each step into compute, communication, waiting for the other rank and
         idle time, with a verdict per rank
       * How to check that compiled distributed training computes the same losses and
         gradients as a single process

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
       * Familiarity with ``torch.compile`` and with DDP or FSDP
       * Linux (the workers pin their threads with ``os.sched_setaffinity``)
       * Two CUDA GPUs of compute capability 7.5 or newer with about 48 GB each for the
         timings (NCCL); runs as two CPU processes (gloo) with small sizes
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
# the page writes a worker script from the source of the functions shown below and
# starts two copies with ``torchrun`` (``--standalone`` picks a free port). With two
# GPUs the workers use NCCL, one GPU each; otherwise two CPU processes use gloo with a
# small float32 model. NVLink multicast stays off (``NCCL_NVLS_ENABLE=0`` and its
# siblings below), so every multi-GPU host runs the same code path. Two ranks run in
# lockstep, so a delay on either one shows in both; the workers remove what they can:
#
# * each rank pins all its threads to its own half of the cores the job may use
#   (``os.sched_setaffinity``), so the two ranks never compete for a core and the
#   operating system cannot move them between launches;
# * Inductor's pool of compile workers gets as many processes as a rank has cores
#   (``TORCHINDUCTOR_COMPILE_THREADS``; by default each rank starts one per core it may
#   use, up to 32), and intra-op threads are one per rank (``OMP_NUM_THREADS=1``);
# * the garbage collector is frozen and off while a rank times its steps, as TorchTitan
#   turns it off in its training loop: a collection pauses the rank that runs it at a
#   moment of its own, and the other rank then waits for it at the next collective.

import gc
import inspect
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, OrderedDict, defaultdict
from functools import partial
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from tabulate import tabulate
from torch._dynamo.utils import counters
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile

gpu = torch.cuda.device_count() >= 2 and dist.is_nccl_available()
if gpu:
    where = f"2 x {torch.cuda.get_device_name()}, NCCL"
    # About 1.1 B parameters; few, wide blocks give large matrix products per FSDP2 unit.
    cfg = dict(backend="nccl", dtype="bfloat16", width=3072, heads=24, depth=8)
    cfg.update(vocab=32768, seq=2048, batch=3, bucket_mb=500, steps=3, lr=1e-4)
else:
    where = "CPU, gloo"
    # 1 MB DDP buckets (the smallest DDPOptimizer accepts) still cut this model in pieces.
    cfg = dict(backend="gloo", dtype="float32", width=128, heads=4, depth=2)
    cfg.update(vocab=1024, seq=64, batch=4, bucket_mb=1, steps=2, lr=1e-3)
cfg.update(world=2, check=3, windows=11, profiled=2)
print(f"Path: {where}; torch {torch.__version__}; 2 processes")
print(", ".join(f"{k} {v}" for k, v in cfg.items() if k != "backend"))

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


def make_batches(cfg):
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
#
# **Model FLOPs utilization** (MFU) counts the work the model needs, not what the kernels
# happen to do: per token ``6 N + 12 L d s`` floating-point operations for forward and
# backward, where ``N`` counts the parameters outside the embedding table (a lookup
# is no matrix product), ``L`` the blocks, ``d`` the width and ``s`` the sequence
# length; the second term is attention's two products, counted over the full ``s x s``
# square as in the PaLM paper. It is divided by the step time and the GPU's dense bf16
# peak from its data sheet.

ref_device = torch.device("cuda" if gpu else "cpu")
with ref_device:
    model = make_model(cfg)
params = dict(model.named_parameters())
checked = ("blocks.0.", f"blocks.{cfg['depth'] - 1}.", "norm.", "head.")
opt = torch.optim.AdamW(params.values(), lr=cfg["lr"], fused=True)
ref_losses = []
for step, (x, y) in enumerate(make_batches(cfg)):
    ref_losses.append(train_step(model, opt, x.to(ref_device), y.to(ref_device)).item())
    if step == 0:  # the checked gradients, in the dtype the workers compute in
        grads = [(n, p.grad) for n, p in params.items() if n.startswith(checked)]
        ref_grads = {n: g.to("cpu", getattr(torch, cfg["dtype"])) for n, g in grads}
print("reference losses:", " ".join(f"{v:.5f}" for v in ref_losses))
loss_tol, grad_tol = {"float32": (1e-4, 1e-4), "bfloat16": (1e-2, 5e-2)}[cfg["dtype"]]
N = sum(p.numel() for n, p in params.items() if not n.startswith("embed"))
flops = (6 * N + 12 * cfg["depth"] * cfg["width"] * cfg["seq"]) * cfg["seq"]
flops *= cfg["batch"]  # per rank and step
PEAK = {"NVIDIA H100 80GB HBM3": 989e12, "NVIDIA H200": 989e12}  # dense bf16, FLOP/s
peak = PEAK.get(torch.cuda.get_device_name()) if gpu else None
total = sum(p.numel() for p in params.values()) / 1e6
print(f"{total:.1f} M parameters, N {N / 1e6:.1f} M: {flops:.4g} FLOP per rank", end="")
print(f" and step; peak {peak:.4g} FLOP/s" if peak else " and step; peak unknown")
del model, params, opt
torch.cuda.empty_cache()

# %%
# Measuring a distributed step
# ----------------------------
#
# ``measure`` runs inside each rank. It times ``windows`` windows of ``steps``
# back-to-back steps without the profiler (on GPUs up to a ``torch.cuda.synchronize``)
# and keeps the median step and the **spread**, the interquartile range of the windows.
# Then ``torch.profiler`` records CPU and CUDA activity over ``profiled`` more steps,
# and the wall time of that profiled loop. On GPUs the **peak GB** is the most memory
# the caching allocator held for tensors over all the measured steps. From the kernels
# (on GPUs):
#
# * **busy**: the time during which at least one kernel runs, the union of their
#   intervals, so an NCCL kernel beside a compute kernel on another stream counts once;
#   the **busy share** is busy time over the profiled loop's own wall time;
# * **compute**: the union of the kernels that are not NCCL's;
# * **exposed communication**: busy minus compute, the time in which only collectives
#   run. It holds two things. An NCCL kernel starts when its stream reaches it and then
#   waits on the GPU for its peer; only when both have arrived does data move. The two
#   ranks run the same collectives in the same order, so the rank that arrived last
#   waited for nobody: its kernel's duration is the **transfer**. The page gathers the
#   other rank's durations, and the earlier rank's extra time at the start of each
#   kernel is **waiting for the other rank**.
# * **idle**: the profiled wall time in which no kernel runs: the GPU waits for its CPU.
#
# On the CPU path gloo moves the data on the CPU and there are no kernels, so the tables
# there leave these columns out.
#
# The **verdict** of a rank leaves its waiting out (that time belongs to the other
# rank's step): *compute* where compute fills at least 85 % of the rest, otherwise
# *communication* or *CPU*, whichever of exposed transfer and idle time is larger.
# ``measure`` also keeps the self CPU and device time of every operator and range, for
# the attribution below, and the seconds its profiling took.


def union(spans):
    """Length of the union of (start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for s, e in sorted(spans):
        total += max(0.0, e - max(s, reach))
        reach = max(reach, e)
    return total


def measure(step, dev, cfg):
    cuda, steps, n = dev.type == "cuda", cfg["steps"], cfg["profiled"]
    sync = torch.cuda.synchronize if cuda else lambda: None
    gc.collect()
    gc.freeze()  # what is alive now is never scanned again
    gc.disable()
    if cuda:  # the peak of the measured steps alone, nothing left from earlier
        torch.cuda.reset_peak_memory_stats()

    def run(k):  # ms per step of k steps back to back
        start = time.perf_counter()
        for _ in range(k):
            step()
        sync()
        return 1e3 * (time.perf_counter() - start) / k

    windows = [run(steps) for _ in range(cfg["windows"])]
    profiling, activities = time.perf_counter(), [ProfilerActivity.CPU]
    with profile(activities=activities + [ProfilerActivity.CUDA] * cuda) as prof:
        wall = run(n)
    gc.enable()
    gc.unfreeze()
    q1, _, q3 = statistics.quantiles(windows, n=4)
    out = dict(step=statistics.median(windows), spread=q3 - q1, wall=wall)
    out.update(ops={}, nccl=[], compute=[], by=defaultdict(float))
    for e in prof.key_averages():  # a kernel's device time, not its launcher's again
        kernel = e.device_type.name == "CUDA" and not e.is_user_annotation
        out["ops"][e.key] = (e.self_cpu_time_total, e.self_device_time_total * kernel)
    for e in prof.events():
        if e.device_type.name == "CUDA" and not e.is_user_annotation:
            kind = "nccl" if "nccl" in e.name.lower() else "compute"
            out[kind].append((e.name, e.time_range.start, e.time_range.end))
    # Each kernel once: a "Command Buffer Full" event repeats its launch's kernels.
    left = Counter((name, end - start) for name, start, end in out["compute"])
    for e in prof.events():
        up = e  # an operator's kernels: the innermost range of LAUNCHERS above it
        while e.kernels and up and not up.name.startswith(tuple(LAUNCHERS)):
            up = up.cpu_parent
        by = [v for k, v in LAUNCHERS.items() if up and up.name.startswith(k)]
        for k in (k for k in e.kernels if left[k.name, k.duration] > 0):
            left[k.name, k.duration] -= 1
            kind = "matmul and attention" if MATMUL.search(k.name) else None
            out["by"][kind or (by or ["eager operators"])[0]] += k.duration / 1e3 / n
    return out | {"profiled_s": time.perf_counter() - profiling}


# %%
# The worker
# ----------
#
# Dynamo calls the backend once per graph it captures, and ``DDPOptimizer`` once per
# piece of a split graph; Inductor hands each graph to AOTAutograd, which counts it. So
# the tables show two counts: graphs captured by Dynamo
# (``counters["stats"]["unique_graphs"]``) and graphs compiled
# (``counters["aot_autograd"]["total"]``).
#
# ``build`` makes each variant; ``run_variant`` trains it for ``check`` steps (the first
# compiles), keeps the losses, averaged over the ranks, and the relative error of the
# checked gradients against the reference (FSDP2's sharded gradients are gathered with
# ``full_tensor``, a collective every rank joins), measures it on the last batch and
# splits its exposed communication. ``main`` pins the rank's threads, then writes one
# JSON report per variant and rank.

WORKER_HEADER = """\
import gc, json, os, re, statistics, sys, time
from collections import Counter, OrderedDict, defaultdict
from functools import partial
from pathlib import Path
import torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
from torch._dynamo.utils import counters
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile
"""
# cuBLAS's matmul and the fused attention kernels, by name. The other compute kernels
# (elementwise, normalization, reduction, copies) go under the innermost of these ranges
# that launched them, forward and backward alike, or else under "eager operators".
MATMUL = re.compile("gemm|xmma|cutlass|nvjet|flash|fmha|cublas|sm90_|sm80_", re.I)
LAUNCHERS = {"CompiledFunction": "compiled graphs", "FSDP::": "FSDP2's hooks"}
LAUNCHERS["Optimizer.step"] = "optimizer step"
WORKER_HEADER += f"LAUNCHERS = {LAUNCHERS!r}\n"  # the worker's copies
WORKER_HEADER += f"MATMUL = re.compile({MATMUL.pattern!r}, re.I)\n"


def build(variant, cfg, dev):
    """The plain model (for its parameter names) and the module the step calls."""
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


def run_variant(variant, cfg, dev, ref_grads):
    torch._dynamo.reset()
    counters.clear()
    model, wrapped = build(variant, cfg, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], fused=True)
    amp = cfg["dtype"] == "bfloat16" and variant.startswith("DDP")
    rank, world, losses, errors = dist.get_rank(), cfg["world"], [], {}
    params = {n.replace("_orig_mod.", ""): p for n, p in model.named_parameters()}
    for i, (x, y) in enumerate(make_batches(cfg)):
        x, y = x.chunk(world)[rank].to(dev), y.chunk(world)[rank].to(dev)
        loss = train_step(wrapped, opt, x, y, amp)
        dist.all_reduce(loss)  # a sum: gloo has no average
        losses.append(loss.item() / world)
        for n in ref_grads if i == 0 else []:  # the same order on every rank
            g, r = params[n].grad, ref_grads[n].to(dev).float()
            g = g.full_tensor() if hasattr(g, "full_tensor") else g  # FSDP2's shards
            errors[n] = ((g.float() - r).norm() / r.norm()).item()
    out = measure(partial(train_step, wrapped, opt, x, y, amp), dev, cfg)
    # Pair each NCCL kernel with the other rank's: the same name, in the same order.
    nccl, compute = sorted(out.pop("nccl")), [k[1:] for k in out.pop("compute")]
    every = [None] * world
    dist.all_gather_object(every, [e - s for _, s, e in nccl])
    out["aligned"] = len({len(d) for d in every}) == 1
    waits = [(s, e - min(d)) for (_, s, e), d in zip(nccl, zip(*every))]
    ms = 1e3 * cfg["profiled"]  # from us per profiled loop to ms per step
    out["busy"] = union([k[1:] for k in nccl] + compute) / ms
    out["compute"] = union(compute) / ms
    out["wait"] = (union(waits + compute) - union(compute)) / ms
    out["transfer"] = out["busy"] - out["compute"] - out["wait"]
    out["idle"] = out["wall"] - out["busy"]
    mem = torch.cuda.max_memory_allocated(dev) / 1e9 if dev.type == "cuda" else 0
    out.update(variant=variant, losses=losses, mem=mem)
    out["compiled"] = counters["aot_autograd"]["total"]
    out.update(dynamo=counters["stats"]["unique_graphs"], grad_err=max(errors.values()))
    return out | {"grad_worst": max(errors, key=errors.get)}


def main(cfg):
    rank, cores = int(os.environ["RANK"]), sorted(os.sched_getaffinity(0))
    share = len(cores) // cfg["world"]
    cores = cores[rank * share : (rank + 1) * share] or cores
    for thread in os.listdir("/proc/self/task"):  # every thread started so far
        os.sched_setaffinity(int(thread), cores)
    dev = torch.device("cpu")
    if cfg["backend"] == "nccl":
        dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(dev)
    dist.init_process_group(cfg["backend"])
    ref_grads = torch.load("ref.pt")  # written by the launcher
    for i, variant in enumerate(cfg["variants"]):
        out = run_variant(variant, cfg, dev, ref_grads) | {"rank": rank, "cores": cores}
        # Zero-padded, so that the launcher's sorted file names follow variant, rank.
        Path(f"{i:02}.{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


# %%
# The launcher writes those functions into ``worker.py`` and starts two copies. If the
# workers overrun the time limit it stops their whole process group, and a failure
# raises with the end of their output, so that a broken build names its cause. CPU
# workers must not see a GPU: FSDP2 would put its default device mesh there.

WORKER_FUNCTIONS = [make_model, make_batches, train_step, union, measure]
WORKER_FUNCTIONS += [build, run_variant, main]
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
        torch.save(ref_grads, Path(tmp) / "ref.pt")  # the workers run in tmp
        run = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd = run + [f"--nproc-per-node={cfg['world']}", "worker.py", json.dumps(cfg)]
        env = os.environ | WORKER_ENV | ({} if gpu else {"CUDA_VISIBLE_DEVICES": ""})
        pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, start_new_session=True, **pipes)
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output = proc.communicate()[0] + f"\n(killed after {timeout} s)"
        if proc.returncode != 0:
            tail = "\n".join(output.splitlines()[-80:])
            raise RuntimeError(f"the workers failed ({proc.returncode}):\n{tail}")
        return [json.loads(f.read_text()) for f in sorted(Path(tmp).glob("*.json"))]


# %%
# Reading the results
# -------------------
#
# ``read`` asserts that every variant's losses and checked gradients match
# the reference (the gradient error is the largest over the checked parameters of
# ``|g - g_ref| / |g_ref|``), then prints one row per variant and rank. On GPUs the
# columns split the profiled step: compute + exposed transfer + waiting + idle adds up
# to the profiled loop's wall time per step. A second table gives, per variant and
# rank, the kernel time per step of matmul and attention and of the other kernels,
# summed by what launched them ("What compiling can still reach", below, explains its
# rows). Kernels on different streams may overlap, so its sums can exceed ``compute``; a
# kernel's duration includes any slowdown from a collective running beside it on the
# same GPU, so the same kernels can add up differently on the two ranks. Two profiled
# steps are a small sample: a pause on one rank shows as idle time there and as waiting
# on the other. The step and spread columns come from the unprofiled windows.
#
# ``attribute`` is the page's one way of explaining a slower row. It compares a row
# with its reference on the same rank: a gap inside either row's spread is called
# within the spread and given no cause. Beyond it, the line names the operators and
# ranges whose time per step grew most, diffed between the two rows' profiles (kernel
# time, matmul and attention as one part, where the GPU's busy time grew by at least
# half the gap; self CPU time otherwise) and how much of the gap they cover.


def read(names, pairs):
    """Check and tabulate the rows of `names`, then compare each (row, reference) pair."""
    table, parts = [], ("compute", "transfer", "wait", "idle", "mem")
    keys = ("step", "spread", "busy %")
    for name in names:
        for r in rows[name]:
            loss_err = max(abs(a / b - 1) for a, b in zip(r["losses"], ref_losses))
            assert loss_err < loss_tol, f"{name}: losses off by {loss_err:.2e}"
            assert r["grad_err"] < grad_tol, f"{name}: {r['grad_worst']} off"
            assert r["aligned"], f"{name}: the ranks ran different collectives"
            cells = [name, r["rank"], f"{r['dynamo']}/{r['compiled']}"]
            cells += [f"{r['step']:.1f}", f"{r['spread']:.1f}"]
            r["busy %"] = 100 * r["busy"] / r["wall"] if gpu else None
            if gpu:  # the verdict leaves out the wait for the other rank
                bound = "communication" if r["transfer"] > r["idle"] else "CPU"
                own = r["compute"] / (r["wall"] - r["wait"])
                r["bound"] = "compute" if own >= 0.85 else bound
                r["mfu"] = 100 * flops / (r["step"] / 1e3) / peak if peak else 0
                cells += [f"{r['mfu']:.1f}" if peak else "-", f"{r['busy %']:.0f}"]
                cells += [f"{r[k]:.1f}" for k in parts] + [r["bound"]]
            table.append(cells + [f"{loss_err:.1e}", f"{r['grad_err']:.1e}"])
    head = ["variant", "rank", "graphs Dynamo/compiled", "step (ms)", "spread"]
    head += ["MFU %", "busy %", "compute", "exposed transfer", "waiting"] * gpu
    head += ["GPU idle", "peak GB", "bound"] * gpu + ["loss err", "grad err"]
    print(f"{where}; step: median of {cfg['windows']} windows of {cfg['steps']} steps")
    print(tabulate(table, head, "github", disable_numparse=True))
    if gpu:  # kernel time per step by what launched it, rank 0 / rank 1
        kinds = ["matmul and attention", "compiled graphs", "eager operators"]
        cells = [[k] for k in kinds + ["FSDP2's hooks", "optimizer step"]]
        for cell, n in ((c, n) for c in cells for n in names):
            cell.append(" / ".join(f"{r['by'].get(cell[0], 0):.1f}" for r in rows[n]))
        print(tabulate(cells, ["kernels, ms per step, rank 0 / 1", *names], "github"))
    for name, ref in pairs:
        for rank in range(cfg["world"]):
            times = {n: [rows[n][rank][k] for k in keys] for n in (name, ref)}
            profs = {n: rows[n][rank]["ops"] for n in (name, ref)}
            attribute(f"rank {rank}: ", name, ref, times, profs, cfg["profiled"])


def attribute(who, name, ref, times, profs, steps):
    """Print whether `name` is slower than `ref` beyond both spreads and, if so, what grew."""
    (t, spread, busy), (t0, spread0, busy0) = times[name], times[ref]
    gap = t - t0
    head = f"{who}{name} vs {ref}: {t:.3f} vs {t0:.3f} ms ({gap:+.3f} ms"
    head += f", {t0 / t:.2f}x the speed)"
    if abs(gap) <= max(spread, spread0) or gap < 0:
        word = "within" if abs(gap) <= max(spread, spread0) else "faster beyond"
        return print(f"{head}, {word} the spread ({spread:.3f} and {spread0:.3f} ms)")
    gpu_bound = busy is not None and (t * busy - t0 * busy0) / 100 / gap >= 0.5
    parts = defaultdict(float)  # ms per step, by operator or range
    for sign, prof in ((1, profs[name]), (-1, profs[ref])):
        for key, (cpu_us, device_us) in prof.items():
            key = "matmul and attention" if gpu_bound and MATMUL.search(key) else key
            parts[key] += sign * (device_us if gpu_bound else cpu_us) / 1e3 / steps
    # Of the three parts that grew most, those that did grow, as (key, ms).
    grew = [p for p in sorted(parts.items(), key=lambda kv: -kv[1])[:3] if p[1] > 0]
    covered = sum(ms for _, ms in grew)
    named = "; ".join(f"{k[:48]} {ms:+.3f} ms" for k, ms in grew)
    print(
        f"{head}, slower beyond the spread. {'GPU kernel' if gpu_bound else 'Self CPU'}"
        f" time per step that grew most: {named}: {100 * covered / gap:.0f} % of the"
        f" gap; the rest, {gap - covered:+.3f} ms net, over the other parts and the time outside every part"
    )


def chart(names):
    labels = [f"{n}, rank {r['rank']}" for n in names for r in rows[n]][::-1]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.4 * len(labels)), layout="tight")
    left = [0.0] * len(labels)
    for key in ["compute", "transfer", "wait", "idle"] if gpu else ["step"]:
        widths = [r[key] for n in names for r in rows[n]][::-1]
        ax.barh(labels, widths, left=left, label=key)
        left = [a + b for a, b in zip(left, widths)]
    ax.set(xlabel=f"ms per {'profiled ' * gpu}step", title=f"Each rank's step: {where}")
    ax.legend(loc="lower right")
    plt.show()


# %%
# Running the variants
# --------------------
#
# One launch runs every variant, each with a fresh model. The time covers starting the
# processes, compiling and measuring; the seconds profiled are the slower rank's.

DDP_ROWS = ["DDP, eager", "DDP(model.compile())"]
FSDP_ROWS = ["FSDP2, eager", "FSDP2, per-block compile", "FSDP2, whole-model compile"]
cfg["variants"] = DDP_ROWS + FSDP_ROWS
start = time.perf_counter()
reports, took = launch(), time.perf_counter() - start
rows = {v: [r for r in reports if r["variant"] == v] for v in cfg["variants"]}
profiled = max(sum(r["profiled_s"] for r in reports if r["rank"] == k) for k in (0, 1))
print(f"{len(rows)} variants ran in {took:.0f} s; profiling took {profiled:.1f} s")
spans = [f"{r['cores'][0]}-{r['cores'][-1]}" for r in reports[:2]]
print(f"cores of rank 0 / 1: {' / '.join(spans)}; compile threads per rank: {threads}")

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

read(DDP_ROWS, [("DDP(model.compile())", "DDP, eager")])
split = rows["DDP(model.compile())"][0]
assert split["dynamo"] == 1 < split["compiled"], split  # DDPOptimizer cut the graph

# %%
# How to read the table. Every row matched the reference within its precision; the
# error columns compare eager and compiled rows against the same float32 run. One graph
# captured by Dynamo became several compiled pieces: the bucket cuts. On GPUs the
# columns say where each rank's step went, and its verdict which part bounds it; the
# kernel table says which kinds of kernel time moved between the rows, whichever way.
# Where a compiled row is slower beyond the spread, the ``rank`` lines name the parts
# of the profile that grew.
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
# ``fully_shard`` starts at the top ``forward`` and reaches the first block's hook,
# where the graph must break; the graph counts show what Dynamo salvaged.
# ``optimize_ddp`` concerns DDP only: FSDP2's collectives live in its hooks.

read(FSDP_ROWS, [(v, "FSDP2, eager") for v in FSDP_ROWS[1:]])
per_block = rows["FSDP2, per-block compile"][0]
assert 1 <= per_block["dynamo"] == per_block["compiled"] < cfg["depth"], per_block
chart(cfg["variants"])

# %%
# ``fullgraph=True`` proves that each block compiled without a break, and fewer graphs
# than blocks compiled: the blocks reuse one graph. On GPUs the chart shows each rank's
# profiled step as compute, exposed transfer, waiting for the other rank and GPU idle.
# Compiling changes only what runs between the hooks: it fuses the norms, the rotary
# embedding, SwiGLU's activation and product and the residual adds into fewer kernels
# with fewer launches, and adds a guard check and AOTAutograd's runtime wrapper to every
# compiled call. Around each unit FSDP2 still does the same CPU work: it issues the
# all-gather, copies the gathered shards out into parameters and issues the
# reduce-scatter, and the optimizer updates sharded DTensor parameters. Whether that CPU
# work or the kernels set the pace is what the verdict column says; where the kernels
# do, the compute column is what compiling can shrink, and MFU says how far the step is
# from the GPU's peak.
#
# What compiling can still reach
# ------------------------------
#
# On GPUs the second table of each section sorts every rank's compute kernels by what
# launched them. Matrix products and attention run in cuBLAS's and the fused attention
# kernels in every variant: Inductor calls the same libraries for them. Fusion acts on
# the other kernels, and only on those that a compiled graph launches:
#
# * **compiled graphs**: Inductor's kernels, forward and backward of the compiled code;
# * **eager operators**: kernels of code that runs uncompiled, such as the embedding,
#   the final norm, the loss and their backward, and in an eager variant every norm,
#   rotary embedding, activation, product and residual add of the blocks;
# * **FSDP2's hooks**: the copies and casts around each collective (the shard copied
#   into the all-gather's buffer, the gathered parameters copied out, the gradients
#   copied and cast for the reduce-scatter). FSDP2 keeps Dynamo out of its hooks;
# * **optimizer step**: the fused AdamW kernels, outside the compiled model here.
#
# The lines below bound what more fusion inside the compiled blocks could win, on each
# rank: how much faster the profiled step would be if the compiled graphs' kernels
# other than matmul and attention took no time at all. What no compiled graph launched
# stays as it is.

for r in rows["FSDP2, per-block compile"] if gpu else []:
    most = r["wall"] / (r["wall"] - r["by"].get("compiled graphs", 0))
    print(f"rank {r['rank']}: per-block compile, at most {most:.2f}x without them")

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
# with the communication split from the waiting, and compare losses and gradients with
# a single process. What this run measured:

best = min(rows, key=lambda n: statistics.mean(r["step"] for r in rows[n]))
mfu = f", {rows[best][0]['mfu']:.1f} % MFU" if peak else ""
print(f"Fastest here: {best}, {rows[best][0]['step']:.1f} ms per step on rank 0{mfu}.")

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
