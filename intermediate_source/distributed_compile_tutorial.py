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
       * What ``torch._dynamo.config.optimize_ddp`` buys or costs, in measured
         milliseconds of exposed communication
       * How to compile an FSDP2 (``fully_shard``) transformer block by block, with bf16
         ``MixedPrecisionPolicy``, as TorchTitan does, or as a whole
       * How to measure a distributed step: the GPU's busy share, and the communication
         that no computation hides, from ``torch.profiler`` inside each rank
       * How to check that compiled distributed training computes the same losses and
         gradients as a single process

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
       * Familiarity with ``torch.compile`` and with DDP or FSDP
       * Two CUDA GPUs of compute capability 7.5 or newer for the timings (NCCL); runs as
         two CPU processes (gloo) with smaller sizes
       * On CPU, Inductor needs a C++ compiler and the Python headers
"""

# %%
# Overview
# --------
#
# Data-parallel training hides communication behind computation. DDP registers a hook
# on each parameter's gradient; when every gradient of a *bucket* (parameters grouped
# in reverse order of use) is ready, it starts an asynchronous all-reduce of that bucket
# while autograd goes on with the earlier layers. FSDP2 does the same with a
# reduce-scatter per sharded module, and all-gathers each module's parameters just
# before its forward.
#
# ``torch.compile`` changes the granularity. AOTAutograd turns each captured forward
# graph into one compiled backward function, which the autograd engine runs as a single
# node. Every gradient of that graph becomes ready at the same moment, at its end, so
# DDP's hooks would fire together and each all-reduce would wait for the whole backward:
# the results stay correct, the overlap is gone. This page shows what PyTorch does about
# it for DDP and for FSDP2, on a small decoder-only transformer, checks every variant
# against a single-process run, and measures what each one spends its step on.
#
# How this page runs
# ------------------
#
# Distributed training needs several processes, and functions defined in a notebook or
# on this page cannot be imported by freshly spawned ones. So the page writes a worker
# script into a temporary folder, from the source of functions shown below, and starts
# two copies with ``torchrun`` (``python -m torch.distributed.run --standalone``, which
# picks a free port). With two or more GPUs the workers use NCCL, one GPU each, in
# bf16; otherwise they run on the CPU with gloo, in float32, one thread each so that two
# processes share the cores fairly, at smaller sizes. NVLink multicast stays off
# (``NCCL_NVLS_ENABLE=0`` and its siblings below), so every multi-GPU host runs the
# same code path. The page hands the workers the reference gradients (below) in a file;
# rank 0 prints one JSON line per variant, which the page reads. The first line of
# output names the path that ran.

import inspect
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import OrderedDict
from functools import partial
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from tabulate import tabulate
from torch._dynamo.utils import counters
from torch._inductor.compile_fx import compile_fx
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile

gpu = torch.cuda.device_count() >= 2 and dist.is_nccl_available()
if gpu:
    where = f"2 x {torch.cuda.get_device_name()}, NCCL"
    cfg = dict(backend="nccl", dtype="bfloat16", width=1024, heads=16, depth=8)
    cfg.update(vocab=32768, seq=2048, batch=4, bucket_mb=100, steps=4)
else:
    where = "CPU, gloo"
    # 1 MB DDP buckets (the smallest DDPOptimizer accepts) still cut this model in pieces.
    cfg = dict(backend="gloo", dtype="float32", width=128, heads=4, depth=2)
    cfg.update(vocab=1024, seq=64, batch=4, bucket_mb=1, steps=2)
cfg.update(world=2, check=3, lr=0.05)
print(f"Path: {where}")
print(
    f"torch {torch.__version__}; 2 processes; a transformer of {cfg['depth']} blocks, "
    f"width {cfg['width']}, {cfg['batch']} sequences of {cfg['seq']} tokens per rank, "
    f"{cfg['dtype']}; DDP buckets of {cfg['bucket_mb']} MB"
)

# %%
# The model, the data and the training step
# -----------------------------------------
#
# A decoder-only transformer: token and position embeddings, blocks of causal
# self-attention and an MLP, each behind an RMSNorm and a residual connection, and a
# final norm and output layer. ``nn.Sequential``, given an ``OrderedDict``, registers
# the layers by name, so the classes need nothing but a ``forward`` (``fully_shard`` in
# PyTorch 2.9 refuses ``nn.ModuleDict``, as a container without one). Every process
# builds the model from the same seed and draws the same global batches of random
# tokens (the target is the next token); each rank trains on its own half of a batch.
# The loss is a mean over the local batch and data parallelism averages the gradients
# over the ranks, so a distributed step computes the gradients of one process that sees
# the whole global batch, up to rounding.
#
# On GPUs the step runs in bf16, as such models are trained: DDP keeps float32
# parameters and computes under ``torch.autocast``; FSDP2 casts its all-gathered
# parameters to bf16 itself (below). The logits go back to float32 for the loss.


def make_model(cfg):
    # The classes live inside the function so that its source carries them to the worker.
    heads, d = cfg["heads"], cfg["width"]

    class Block(nn.Sequential):
        def forward(self, x):
            b, s, _ = x.shape
            qkv = self.qkv(self.norm1(x)).view(b, s, 3, heads, d // heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
            return x + self.down(F.gelu(self.up(self.norm2(x))))

    class Net(nn.Sequential):
        def forward(self, tokens):
            x = self.embed(tokens) + self.pos.weight[: tokens.shape[1]]
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x))

    torch.manual_seed(0)
    linear = partial(nn.Linear, bias=False)
    blocks = nn.ModuleList()
    for _ in range(cfg["depth"]):
        layers = dict(norm1=nn.RMSNorm(d), qkv=linear(d, 3 * d), proj=linear(d, d))
        layers.update(norm2=nn.RMSNorm(d), up=linear(d, 4 * d), down=linear(4 * d, d))
        blocks.append(Block(OrderedDict(layers)))
    net = dict(embed=nn.Embedding(cfg["vocab"], d), pos=nn.Embedding(cfg["seq"], d))
    net.update(blocks=blocks, norm=nn.RMSNorm(d), head=linear(d, cfg["vocab"]))
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
# The reference: one process, plain eager PyTorch in float32, the whole global batch, on
# the device type the workers use. It keeps the losses of the first ``check`` steps and
# the gradients of the first step. Every variant is scored against it: on GPUs the bf16
# rounding shows in the errors of eager and compiled variants alike, and the check
# allows for it (a relative gradient error below 5 %, against 0.01 % in float32).

ref_device = torch.device("cuda" if gpu else "cpu")
model = make_model(cfg).to(ref_device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
ref_losses = []
for step, (x, y) in enumerate(make_batches(cfg)):
    loss = train_step(model, opt, x.to(ref_device), y.to(ref_device))
    ref_losses.append(loss.item())
    if step == 0:
        ref_grads = {n: p.grad.cpu().clone() for n, p in model.named_parameters()}
del model, opt, loss
torch.cuda.empty_cache()
print("reference losses:", " ".join(f"{v:.5f}" for v in ref_losses))
TOLERANCE = {"float32": (1e-4, 1e-4), "bfloat16": (1e-2, 5e-2)}  # loss, gradient

# %%
# Measuring a distributed step
# ----------------------------
#
# ``measure`` runs inside every rank. It times ``steps`` back-to-back training steps,
# five times over, without the profiler (on GPUs up to a ``torch.cuda.synchronize``),
# and keeps the median time per step and the **spread** of the five (their
# interquartile range), which the tables print beside it. The caches stay warm from
# one step to the next, as in training (``triton.testing.do_bench`` would flush the L2
# cache before each call instead). Then ``torch.profiler`` records the same loop again,
# once per kind of activity, for fewer steps: reading a profile's events in Python takes
# time in proportion to their number, and one step of FSDP2 holds thousands of them on
# the CPU side. So the GPU profile covers half the steps, the CPU profile one step.
#
# * On GPUs, the kernels. The **GPU busy time** is the time during which at least one
#   kernel runs: the union of their intervals, so that an NCCL kernel running beside a
#   compute kernel on another stream counts once. Kernels whose names contain ``nccl``
#   are communication, the others compute. The **exposed communication** is the time
#   when communication runs and no compute kernel does; it equals the busy time minus
#   the compute kernels' union. An NCCL kernel starts on one GPU and waits there for its
#   peer, so the exposed time also holds any wait for the other rank.
# * On either device, the CPU side: the time per step in Dynamo's guard checks (the
#   ``TorchDynamo Cache Lookup`` ranges), in FSDP2's hooks (its ``FSDP::`` ranges, which
#   include issuing its collectives, and with gloo running them) and in the optimizer
#   step. The profiler slows the CPU side, so compare these between variants, not with
#   the step time.
#
# ``measure`` also times its profiling, and the page adds it up: the lens has a cost.
#
# On GPUs the **busy share**, busy time over step time, gives the verdict in the
# ``bound`` column: at least 85 % and the step is **bound by the GPU** (only less GPU
# work, or less exposed communication, makes it faster); below, the GPU idles for the
# rest of the step, waiting for the CPU (Python, hooks, guard checks, kernel launches).
# A share slightly above 100 % is noise between the unprofiled loop and the profiled
# one. On a CPU there is no separate device to be busy or idle, and no kernels to tell
# communication from computation: the tables leave those columns out.


def measure(step, dev, steps):
    """Per step, in ms: the step time (median of 5 unprofiled windows) and its spread; then,
    from profiles of the same loop, the GPU busy time, the exposed communication, and the
    CPU time in Dynamo's guard checks, FSDP2's hooks and the optimizer; and the seconds
    spent profiling."""
    cuda = dev.type == "cuda"
    windows = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize()
        windows.append(1e3 * (time.perf_counter() - start) / steps)
    q1, _, q3 = statistics.quantiles(windows, n=4)
    out = {"step": statistics.median(windows), "spread": q3 - q1}
    prefixes = {"guards": "TorchDynamo", "hooks": "FSDP::", "opt": "Optimizer.step"}
    profiling = time.perf_counter()
    for activity in [ProfilerActivity.CUDA] * cuda + [ProfilerActivity.CPU]:
        gpu_side = activity == ProfilerActivity.CUDA
        n = max(1, steps // 2) if gpu_side else 1
        with profile(activities=[activity]) as prof:
            for _ in range(n):
                step()
            if cuda:
                torch.cuda.synchronize()
        spans = {k: [] for k in (["busy", "compute"] if gpu_side else prefixes)}
        # Kernels count in the CUDA profile, the CPU's ranges in the CPU profile.
        for e in prof.events():
            keys = [k for k, p in prefixes.items() if e.name.startswith(p)]
            if e.device_type.name == "CUDA" and not e.is_user_annotation:
                keys = ["busy"] + ["compute"] * ("nccl" not in e.name.lower())
            for k in set(keys) & set(spans):
                spans[k].append((e.time_range.start, e.time_range.end))
        for k, intervals in spans.items():  # the length of their union, in us
            out[k], reach = 0.0, float("-inf")
            for s, e in sorted(intervals):
                out[k] += max(0.0, e - max(s, reach)) / n / 1e3
                reach = max(reach, e)
    if cuda:
        out["exposed"] = out["busy"] - out.pop("compute")
    out["profiled_s"] = time.perf_counter() - profiling
    return out


# %%
# The worker
# ----------
#
# ``counting_inductor`` is a ``torch.compile`` backend that records each graph it is
# given and hands it to Inductor, which is what ``backend="inductor"`` does. Dynamo
# calls the backend once per graph it captures; ``DDPOptimizer`` calls it once per piece
# of a split graph. So the page reports two counts: graphs captured by Dynamo
# (``counters["stats"]["unique_graphs"]``) and graphs compiled.
#
# ``build`` makes each variant; ``run_variant`` trains it for ``check`` steps (the first
# compiles), keeping the losses, averaged over the ranks, and the relative error of each
# of the first step's gradients against the reference (FSDP2's sharded gradients are
# gathered whole with ``full_tensor``, a collective every rank joins), then measures it
# on the last batch.

WORKER_HEADER = """\
import json, os, statistics, sys, time
from collections import OrderedDict
from functools import partial
import torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor.compile_fx import compile_fx
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile
COMPILED_GRAPHS = []
"""
COMPILED_GRAPHS = []


def counting_inductor(gm, example_inputs):
    COMPILED_GRAPHS.append(gm)
    return compile_fx(gm, example_inputs)


def build(variant, cfg, dev):
    """The plain model (for its parameter names) and the module the step calls."""
    model = make_model(cfg).to(dev)
    compile_ = partial(torch.compile, backend=counting_inductor)
    torch._dynamo.config.optimize_ddp = "optimize_ddp=False" not in variant
    if variant.startswith(
        "FSDP2"
    ):  # TorchTitan's order: compile, then shard, blocks first
        dtype = getattr(torch, cfg["dtype"])
        mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        reshard = "reshard_after_forward=False" not in variant
        for i, block in enumerate(model.blocks):
            if "per-block compile" in variant:
                model.blocks[i] = block = compile_(block, fullgraph=True)
            fully_shard(block, mp_policy=mp, reshard_after_forward=reshard)
        fully_shard(model, mp_policy=mp)  # the root: embeddings, final norm, output
        return model, compile_(model) if "whole-model" in variant else model
    ids = [dev.index] if dev.type == "cuda" else None
    ddp = partial(DDP, device_ids=ids, bucket_cap_mb=cfg["bucket_mb"])
    if variant == "DDP, eager":
        return model, ddp(model)
    if variant == "DDP(model.compile())":
        model.compile(backend=counting_inductor)
        return model, ddp(model)
    return model, compile_(ddp(model))


def run_variant(variant, cfg, dev, ref_grads):
    torch._dynamo.reset()
    counters.clear()
    COMPILED_GRAPHS.clear()
    model, wrapped = build(variant, cfg, dev)
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
    amp = cfg["dtype"] == "bfloat16" and not variant.startswith("FSDP2")
    rank, world = dist.get_rank(), cfg["world"]
    losses, errors = [], {}
    for i, (x, y) in enumerate(make_batches(cfg)):
        x, y = x.chunk(world)[rank].to(dev), y.chunk(world)[rank].to(dev)
        loss = train_step(wrapped, opt, x, y, amp)
        dist.all_reduce(loss)  # a sum: gloo has no average
        losses.append(loss.item() / world)
        for n, p in model.named_parameters() if i == 0 else []:
            g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            r = ref_grads[n.replace("_orig_mod.", "")].to(dev)
            errors[n] = ((g.float() - r).norm() / r.norm()).item()
    report = measure(partial(train_step, wrapped, opt, x, y, amp), dev, cfg["steps"])
    report.update(variant=variant, losses=losses, compiled=len(COMPILED_GRAPHS))
    report["dynamo"] = counters["stats"]["unique_graphs"]
    worst = max(errors, key=errors.get)
    report.update(grad_err=errors[worst], grad_worst=worst.replace("_orig_mod.", ""))
    return report


def main(cfg, reference):
    dev = torch.device("cpu")
    if cfg["backend"] == "nccl":
        dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(dev)
    else:
        torch.set_num_threads(1)
    dist.init_process_group(cfg["backend"])
    ref_grads = torch.load(reference)
    for variant in cfg["variants"]:
        report = run_variant(variant, cfg, dev, ref_grads)
        if dist.get_rank() == 0:
            print("RESULT " + json.dumps(report), flush=True)
    dist.destroy_process_group()


# %%
# The launcher writes those functions into ``worker.py`` and starts two copies. If the
# workers overrun the time limit it stops their whole process group, and a failure
# raises with the end of their output, so that a broken build names its cause.

WORKER_FUNCTIONS = [make_model, make_batches, train_step, measure, counting_inductor]
WORKER_FUNCTIONS += [build, run_variant, main]
WORKER_ENV = dict(
    NCCL_NVLS_ENABLE="0",
    TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
    NVSHMEM_DISABLE_NVLS="1",
    OMP_NUM_THREADS="1",
)
# CPU workers must not see a GPU: FSDP2 puts its default device mesh on the GPU when
# one is visible, and two ranks would then share (or miss) a single device. They also
# compile in their own process: two ranks, each with a pool of compile workers, would
# crowd the few cores they share.
CPU_ONLY = {"gloo": {"CUDA_VISIBLE_DEVICES": "", "TORCHINDUCTOR_COMPILE_THREADS": "1"}}


def launch(timeout=600):
    with tempfile.TemporaryDirectory() as tmp:
        source = [WORKER_HEADER] + [inspect.getsource(f) for f in WORKER_FUNCTIONS]
        source.append("main(json.loads(sys.argv[1]), sys.argv[2])\n")
        (Path(tmp) / "worker.py").write_text("\n\n".join(source))
        torch.save(ref_grads, Path(tmp) / "ref.pt")  # the workers run in tmp
        world = f"--nproc-per-node={cfg['world']}"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", world]
        cmd += ["worker.py", json.dumps(cfg), "ref.pt"]
        env = os.environ | WORKER_ENV | CPU_ONLY.get(cfg["backend"], {})
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
        return [json.loads(s[7:]) for s in output.splitlines() if s[:7] == "RESULT "]


# %%
# Reading the results
# -------------------
#
# ``check_and_tabulate`` asserts that every variant's losses and first gradients match
# the reference (the gradient error is the largest over the parameters of
# ``|g - g_ref| / |g_ref|``), then prints one table. ``explain`` is the page's one
# reading of the numbers: for each pair of variants it prints the ratio of their steps,
# whether the difference exceeds the spread of the timings, and on GPUs the three parts
# that add up to a step, **compute kernels + exposed communication + GPU idle**, naming
# the part that changed most; then the CPU times from the profile. ``chart`` draws the
# same split per variant (on a CPU, the step times alone).


def check_and_tabulate(rows):
    loss_tol, grad_tol = TOLERANCE[cfg["dtype"]]
    table = []
    for row in rows:
        name, grad_err = row["variant"], row["grad_err"]
        loss_err = max(abs(a / b - 1) for a, b in zip(row["losses"], ref_losses))
        assert loss_err < loss_tol, f"{name}: losses off by {loss_err:.2e}"
        assert grad_err < grad_tol, f"{name}: {row['grad_worst']} off by {grad_err:.2e}"
        cells = [name, row["dynamo"], row["compiled"], f"{row['step']:.1f}"]
        cells += [f"{row['spread']:.1f}"]
        if gpu:
            share = row["busy"] / row["step"]
            row["bound"] = "GPU" if share >= 0.85 else "CPU"
            cells += [f"{row['busy']:.1f}", f"{share:.0%}", row["bound"]]
            cells += [f"{row['exposed']:.1f}"]
        table.append(cells + [f"{loss_err:.1e}", f"{grad_err:.1e}"])
    headers = ["variant", "Dynamo graphs", "compiled graphs", "step (ms)", "spread"]
    if gpu:
        headers += ["GPU busy (ms)", "busy %", "bound", "exposed comm (ms)"]
    headers += ["loss err", "grad err"]
    print(f"{where}; rank 0; step: median of 5 windows of {cfg['steps']} steps", end="")
    print(
        "" if gpu else "; on a CPU no separate device is busy or idle: no GPU columns"
    )
    print(tabulate(table, headers, tablefmt="github", disable_numparse=True))
    return {row["variant"]: row for row in rows}


def explain(rows, pairs):
    """One line per pair of rows (numbered from 0): what differs between their steps."""
    labels = {"guards": "guard checks", "hooks": "FSDP2 hooks", "opt": "optimizer"}
    for i, j in pairs:
        (name, a), (base, b) = list(rows.items())[i], list(rows.items())[j]
        text = f"{name} vs {base}: {a['step'] / b['step']:.2f}x the step "
        text += f"({a['step']:.1f} vs {b['step']:.1f} ms"
        noise = max(a["spread"], b["spread"])
        if abs(a["step"] - b["step"]) <= noise:
            text += f", within the spread of the timings, {noise:.1f} ms"
        text += ")."
        if gpu:
            parts = {
                "compute kernels": [r["busy"] - r["exposed"] for r in (a, b)],
                "exposed communication": [r["exposed"] for r in (a, b)],
                "GPU idle": [r["step"] - r["busy"] for r in (a, b)],
            }
            text += " Per step: " + ", ".join(
                f"{k} {x:.1f} vs {y:.1f}" for k, (x, y) in parts.items()
            )
            big = max(parts, key=lambda k: abs(parts[k][0] - parts[k][1]))
            share, delta = a["busy"] / a["step"], parts[big][0] - parts[big][1]
            text += f" ms; most of the difference: {big} ({delta:+.1f} ms); "
            text += f"its GPU {share:.0%} busy, bound by the {a['bound']}."
        shown = [k for k in labels if a[k] + b[k]]
        cpu = ", ".join(f"{labels[k]} {a[k]:.2f} vs {b[k]:.2f}" for k in shown)
        change = sum(a[k] - b[k] for k in labels)
        text += f" CPU per step, profiled: {cpu} ms ({change:+.2f} in all)."
        print(textwrap.fill(text, 88, subsequent_indent="    "))
    best = min(rows, key=lambda n: rows[n]["step"])
    print(f"Fastest here: {best}, {rows[best]['step']:.1f} ms per step.")
    for bound in sorted({r.get("bound") for r in rows.values()} - {None}):
        s = [r["spread"] for r in rows.values() if r["bound"] == bound]
        print(f"Spread in rows bound by the {bound}: {min(s):.1f} to {max(s):.1f} ms.")


def chart(rows, title):
    names = list(rows)[::-1]
    if gpu:
        segments = {
            "compute kernels": [rows[n]["busy"] - rows[n]["exposed"] for n in names],
            "exposed communication": [rows[n]["exposed"] for n in names],
            "GPU idle": [max(0.0, rows[n]["step"] - rows[n]["busy"]) for n in names],
        }
    else:
        segments = {"step": [rows[n]["step"] for n in names]}
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * len(names)))
    left = [0.0] * len(names)
    for label, widths in segments.items():
        ax.barh(names, widths, left=left, label=label)
        left = [a + b for a, b in zip(left, widths)]
    ax.set(xlabel="ms per step, rank 0", title=f"{title}: {where}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    plt.show()


# %%
# Running the variants
# --------------------
#
# One launch runs every variant, the DDP ones first, each with a fresh model; the
# sections below read their rows. The time covers starting the processes, compiling
# and measuring; the seconds profiled are rank 0's, a part of it.

DDP_VARIANTS = [
    "DDP, eager",
    "compile(DDP(model)), optimize_ddp=True",
    "compile(DDP(model)), optimize_ddp=False",
    "DDP(model.compile())",
]
FSDP_VARIANTS = [
    "FSDP2, eager",
    "FSDP2, per-block compile",
    "FSDP2, whole-model compile",
    "FSDP2, eager, reshard_after_forward=False",
]
cfg["variants"] = DDP_VARIANTS + FSDP_VARIANTS
start = time.perf_counter()
reports = launch()
rows = {r["variant"]: r for r in reports}
took, profiled = time.perf_counter() - start, sum(r["profiled_s"] for r in reports)
print(f"{len(rows)} variants ran in {took:.0f} s on {where}; profiled {profiled:.1f} s")

# %%
# DDP and torch.compile
# ---------------------
#
# When Dynamo compiles a frame while a DDP module's forward is running, and
# ``torch._dynamo.config.optimize_ddp`` asks for it, it hands the captured graph to
# ``DDPOptimizer`` instead of the backend. ``DDPOptimizer`` walks the graph backwards,
# the order in which gradients become ready, adds up the sizes of the parameters it
# meets, and cuts the graph wherever a bucket of ``bucket_cap_mb`` fills up (the first
# bucket is capped at 1 MB, as in DDP). Each piece is compiled on its own, forward and
# backward, and the pieces are stitched back into one module. In the backward the
# autograd engine now runs one compiled node per piece, so the gradients of the last
# piece are ready, and their all-reduce starts, while the earlier pieces still compute.
# On GPUs the page uses 100 MB buckets, the value TorchTitan passes for DDP (the default
# is 25 MB); the all-reduces carry float32 gradients, since autocast leaves the
# parameters in float32.
#
# The values ``optimize_ddp`` accepts:
#
# * ``True`` or ``"ddp_optimizer"`` (the default): split as above. The cost: more graphs
#   to compile, no fusion across a cut, and one more call per piece at run time.
# * ``False`` or ``"no_optimization"``: one graph, the best for Inductor, but DDP's
#   hooks all fire after the whole compiled backward, so no communication overlaps it.
# * ``"python_reducer"`` (experimental): needs compiled autograd. DDP then replaces its
#   C++ reducer by per-parameter hooks that compiled autograd traces into the backward
#   graph, and Inductor groups the all-reduces into buckets itself: overlap without
#   graph breaks. The config also lists ``"python_reducer_without_compiled_forward"``.
#
# Many public training scripts set ``optimize_ddp = False``. It was once the advised
# workaround for ``DDPOptimizer`` errors, for instance with activation checkpointing
# (`pytorch/pytorch#104674 <https://github.com/pytorch/pytorch/issues/104674>`_); it
# is not a speed setting. The four DDP variants:

ddp = check_and_tabulate([rows[v] for v in DDP_VARIANTS])
split = ddp["compile(DDP(model)), optimize_ddp=True"]
whole = ddp["compile(DDP(model)), optimize_ddp=False"]
assert split["dynamo"] == 1 and split["compiled"] > 1, split
assert whole["dynamo"] == 1 and whole["compiled"] == 1, whole
assert ddp["DDP(model.compile())"]["compiled"] > 1
explain(ddp, [(1, 0), (2, 0), (3, 0), (1, 2)])  # (row, the row it is compared with)
chart(ddp, "DDP")

# %%
# How to read the table. Every variant matched the reference within its precision: the
# error columns compare eager and compiled rows against the same float32 run. With
# ``optimize_ddp=True`` Dynamo captured one graph and ``DDPOptimizer`` compiled it as
# several pieces; with ``False`` the same graph was compiled whole.
#
# On GPUs, each line under the table splits the difference between two variants into
# the three parts of a step. The line that compares ``optimize_ddp=True`` with
# ``False`` is the one the setting is about: the change in *exposed communication* is
# what the overlap buys, and the change in *compute kernels* and *GPU idle* is what the
# cuts cost (fusion lost at each cut, one more call per piece). A compiled row that is
# slower than eager says on its line which part grew: compute kernels (Inductor's
# kernels took longer), exposed communication (less of the all-reduce hid behind the
# backward), or GPU idle (the CPU did not keep up).
#
# The spread is how much the five timing windows of a variant disagreed. Two processes
# run in lockstep: each collective waits for the later rank. Where the GPU bounds the
# step, the CPU runs ahead and a delay on either rank's CPU (the operating system's
# scheduling, another program, a garbage collection) is absorbed while it stays ahead;
# where the CPU bounds it, such a delay lands in the step of both ranks. The last line
# under each table on GPUs gives the spreads of the two kinds of rows, and a line that
# compares two rows says when their difference lies within the spread.
#
# On a CPU a line holds the step times and the profiled CPU times alone. The two
# processes compute and communicate on the same two cores, which other programs may
# share too, so the spread of the timings is wide and a CPU timing is a functional
# check. Where a compiled row is slower beyond that spread, set its difference beside
# the CPU times on its line (``in all``): they show how much of it Dynamo's guard
# checks, FSDP2's hooks and the optimizer account for. The rest lies in the model's own
# computation (Inductor's C++ kernels against ATen's at these tiny sizes, one more call
# per piece) and in gloo's communication.
#
# Compile the DDP module, or wrap the compiled one?
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# Both orders went through ``DDPOptimizer`` above. Dynamo does not trace DDP's own
# ``forward`` (the context that marks a DDP module as active is excluded from tracing),
# so either way it compiles the model's ``forward`` while DDP is active. The PyTorch
# documentation (*Where to apply torch.compile?*) recommends compiling the inner module
# and wrapping it: ``model.compile()``, then ``DDP(model)``. The wrapper stays an
# ordinary module that Dynamo never has to look into, and ``model.compile()`` compiles
# in place, so ``state_dict`` keys do not gain the ``_orig_mod.`` prefix that
# ``torch.compile(DDP(model))`` adds.
#
# FSDP2 and torch.compile
# -----------------------
#
# FSDP2's ``fully_shard`` turns a module into a unit whose parameters are all-gathered
# by a forward pre-hook and whose gradients are reduce-scattered from a backward hook.
# Dynamo does not trace those hooks: FSDP2 wraps them in ``torch._dynamo.disable``. So
# what can be compiled is the code *between* the hooks. TorchTitan's recipe for a
# transformer, which the page follows:
#
# * compile each transformer block with ``fullgraph=True``, *then* ``fully_shard`` each
#   compiled block, then the root module (TorchTitan also shards the embeddings and the
#   final norm with the output layer as units of their own; here the root holds them);
# * ``MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)``:
#   each unit's parameters are all-gathered and computed in bf16, its gradients
#   reduce-scattered in float32 (importable from ``torch.distributed.fsdp`` since
#   PyTorch 2.6);
# * ``reshard_after_forward=True`` for the blocks (the default): each block frees its
#   gathered parameters after its forward and gathers them again for its backward. With
#   ``False`` it keeps them, trading memory for one all-gather less per block. The root
#   never reshards after forward, since its backward comes first.
#
# The hooks sit on the outer wrapper and run eagerly around each compiled ``forward``,
# so ``fullgraph=True`` holds and the communication keeps its per-block overlap.
# Identical blocks share one compiled graph. The other recipe, ``torch.compile(model)``
# after ``fully_shard``, starts at the top ``forward`` and reaches the first block's
# hook, where the graph must break; count the graphs to see what Dynamo salvaged.
# ``optimize_ddp`` concerns DDP only: FSDP2's communication lives in its hooks, outside
# the compiled graphs. FSDP2 needs ``all_gather_into_tensor`` and
# ``reduce_scatter_tensor``, which gloo provides, so the CPU build runs it as well.

fsdp = check_and_tabulate([rows[v] for v in FSDP_VARIANTS])
for name in [v for v in fsdp if "per-block" in v]:
    assert 1 <= fsdp[name]["dynamo"] == fsdp[name]["compiled"] < cfg["depth"], name
assert fsdp["FSDP2, whole-model compile"]["compiled"] >= 1
explain(fsdp, [(1, 0), (2, 0), (3, 0)])
chart(fsdp, "FSDP2")

# %%
# With ``fullgraph=True`` the per-block row proves that each block compiled without a
# break, and it compiled fewer graphs than there are blocks: the blocks reuse one
# compiled graph. The whole-model row shows how many graphs Dynamo salvaged around the
# hooks. The errors against the single-process reference are rounding, as for DDP.
#
# How can compiling each block make an FSDP2 step slower? Compiling changes only what
# runs *between* the hooks: it fuses the norms, the activation and the residual adds
# into fewer kernels, with fewer launches, and it adds a guard check and AOTAutograd's
# runtime wrapper to every block's forward and backward call. Around each block FSDP2
# still does the same work on the CPU: it issues the all-gather, copies the gathered
# shards out into parameters, casts them to bf16, and in the backward issues the
# reduce-scatter; the optimizer then updates sharded DTensor parameters, with DTensor's
# dispatch on the CPU for each. Where that CPU work outlasts the GPU work, the step is
# bound by the CPU, and compiling helps only as far as its fewer launches outweigh its
# per-call cost. The lines above say which regime this run was in:
#
# * ``bound`` (on GPUs): with a step bound by the GPU, the compute-kernel part is what
#   compiling changes, and the exposed communication says whether the overlap held;
# * GPU idle: where it is the part that grew, the CPU times say where the CPU spent the
#   step (guard checks exist only in compiled rows, the hooks and the optimizer in all);
# * exposed communication: more of it in a compiled row means a collective waited
#   longer, often for the other rank.
#
# Where no compiled FSDP2 row is the fastest, what would change that is the balance
# above: more GPU work per block and per step (longer sequences, more sequences per
# rank, wider blocks) against the same CPU cost per unit, or fewer, larger FSDP2 units.
# With ``reshard_after_forward=False`` each block saves one all-gather in the backward;
# the line comparing the two eager rows shows whether that communication was exposed.
#
# Conclusion
# ----------
#
# A compiled backward makes all gradients of a graph ready at once, which would delay
# data-parallel communication to the end of the backward. For DDP, ``DDPOptimizer``
# (``optimize_ddp=True``, the default) cuts the graph at bucket boundaries so that the
# all-reduces overlap the backward again; ``optimize_ddp=False`` keeps one graph and
# gives up the overlap, a trade that the exposed communication measures on GPUs.
# Compile the inner module and wrap it in DDP: the same pieces, and plain ``state_dict``
# keys. For FSDP2, the recipe that keeps ``fullgraph=True`` is TorchTitan's: compile
# each block, then ``fully_shard`` it, with bf16 ``MixedPrecisionPolicy``. Whether
# compiling pays on a machine is what the FSDP2 table measures, and its lines say which
# part of the step moved. Whatever you choose, compare losses and gradients with a
# single-process run and measure the step, as this page does.

print(f"This page ran its workers on {where} with torch {torch.__version__}.")
# sphinx_gallery_runner_label = "multi-gpu"

# %%
# Further reading
# ---------------
#
# * `Where to apply torch.compile?
#   <https://docs.pytorch.org/docs/stable/compile/programming_model.where_to_apply_compile.html>`_
# * `torch.compile FAQ: distributed code
#   <https://docs.pytorch.org/docs/stable/torch.compiler_faq.html>`_
# * `DistributedDataParallel
#   <https://docs.pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html>`_
# * `torch.distributed.fsdp.fully_shard
#   <https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html>`_
# * `TorchTitan: per-block compile and FSDP2 for Llama
#   <https://github.com/pytorch/torchtitan/blob/main/torchtitan/models/llama3/infra/parallelize.py>`_
# * :ref:`compiled_autograd_tutorial`

# sphinx_gallery_thumbnail_number = 2
