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
       * What each value of ``torch._dynamo.config.optimize_ddp`` does and what it costs
       * Whether to compile the DDP-wrapped module or to wrap the compiled one
       * How to compile an FSDP2 (``fully_shard``) model block by block or as a whole
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
# in reverse order of use, 25 MB by default) is ready, it starts an asynchronous
# all-reduce of that bucket while autograd goes on with the earlier layers. FSDP2 does
# the same with a reduce-scatter per sharded module, and all-gathers each module's
# parameters just before its forward.
#
# ``torch.compile`` changes the granularity. AOTAutograd turns each captured forward
# graph into one compiled backward function, which the autograd engine runs as a single
# node. Every gradient of that graph becomes ready at the same moment, at its end, so
# DDP's hooks would fire together and each all-reduce would wait for the whole backward:
# the results stay correct, the overlap is gone. This page shows what PyTorch does about
# it for DDP and for FSDP2, checks every variant against a single-process run, and
# measures the step time and the number of graphs of each.
#
# How this page runs
# ------------------
#
# Distributed training needs several processes, and functions defined in a notebook or
# on this page cannot be imported by freshly spawned ones. So the page writes a worker
# script into a temporary folder, from the source of functions shown below, and starts
# two copies with ``torchrun`` (``python -m torch.distributed.run --standalone``, which
# picks a free port). With two or more GPUs the workers use NCCL, one GPU each;
# otherwise they run on the CPU with gloo, one thread each so that two processes share
# the cores fairly, at smaller sizes. NVLink multicast stays off (``NCCL_NVLS_ENABLE=0``
# and its siblings below), so every multi-GPU host runs the same code path. Rank 0
# prints one JSON line per variant and saves its gradients; the page reads both.

import inspect
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from tabulate import tabulate
from torch._dynamo.utils import counters
from torch._inductor.compile_fx import compile_fx
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

gpus = torch.cuda.device_count()
if gpus >= 2 and dist.is_nccl_available():
    cfg = dict(backend="nccl", width=2048, depth=8, batch=1024, bucket_mb=25, steps=25)
    where = f"2 x {torch.cuda.get_device_name()}, NCCL"
    print(f"{gpus} GPUs visible: running 2 processes with NCCL, one GPU each.")
else:
    # DDPOptimizer needs buckets of at least 1 MB (the size of its first bucket);
    # 1 MB buckets still cut the small CPU model into several pieces.
    cfg = dict(backend="gloo", width=512, depth=4, batch=32, bucket_mb=1, steps=12)
    where = "CPU, gloo, 2 processes x 1 thread"
    print(f"{gpus} GPU(s) visible: running 2 CPU processes with gloo at small sizes.")
cfg.update(world=2, warmup=3, check=3, lr=0.05)
print(
    f"torch {torch.__version__}; {cfg['depth']} blocks of width {cfg['width']}, "
    f"{cfg['batch']} samples per rank, DDP buckets of {cfg['bucket_mb']} MB"
)

# %%
# The model, the data and the training step
# -----------------------------------------
#
# A stack of residual blocks (``x + gelu(linear(x))``) and a classifier. Every process
# builds it from the same seed and draws the same global batches; each rank trains on
# its own half of a batch. The loss is a mean over the local batch and data parallelism
# averages the gradients over the ranks, so a distributed step computes the gradients of
# one process that sees the whole global batch, up to the order of float32 sums. These
# functions run on this page and are written into the worker script.


def make_model(cfg):
    # The classes live inside the function so that its source carries them to the worker.
    class Block(nn.Linear):
        def forward(self, x):
            return x + F.gelu(super().forward(x))

    class Net(nn.Sequential):
        def forward(self, x):
            for layer in self:
                x = layer(x)
            return x

    torch.manual_seed(0)
    width = cfg["width"]
    blocks = [Block(width, width) for _ in range(cfg["depth"])]
    return Net(*blocks, nn.Linear(width, 10))


def make_batches(cfg):
    gen = torch.Generator().manual_seed(1)
    n, width = cfg["world"] * cfg["batch"], cfg["width"]
    return [
        (
            torch.randn(n, width, generator=gen),
            torch.randint(0, 10, (n,), generator=gen),
        )
        for _ in range(cfg["steps"])
    ]


def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.detach()


# %%
# The reference: one process, plain eager PyTorch, the whole global batch, on the
# device type the workers use. It keeps the losses of the first ``check`` steps and the
# gradients of the first step.

ref_device = torch.device("cuda" if cfg["backend"] == "nccl" else "cpu")
model = make_model(cfg).to(ref_device)
opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
ref_losses = []
for step, (x, y) in enumerate(make_batches(cfg)[: cfg["check"]]):
    loss = train_step(model, opt, x.to(ref_device), y.to(ref_device))
    ref_losses.append(loss.item())
    if step == 0:
        ref_grads = {n: p.grad.cpu().clone() for n, p in model.named_parameters()}
del model, opt
print("reference losses:", " ".join(f"{v:.5f}" for v in ref_losses))

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
# ``build`` makes each variant; ``run_variant`` trains it for ``steps`` steps. It times
# every step after ``warmup`` steps (the first step compiles) and reports medians:
# *issue* is the time until the Python call returns, *step* the time until the device
# has finished (``torch.cuda.synchronize``). On the CPU there is no device queue, so the
# two coincide. Losses are averaged over the ranks, and FSDP2's sharded gradients are
# gathered whole (``full_tensor``) for the comparison.

WORKER_HEADER = """\
import json, os, statistics, sys, time
from pathlib import Path
import torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor.compile_fx import compile_fx
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
COMPILED_GRAPHS = []
"""
COMPILED_GRAPHS = []


def counting_inductor(gm, example_inputs):
    COMPILED_GRAPHS.append(gm)
    return compile_fx(gm, example_inputs)


def build(variant, cfg, dev):
    """The plain model (for its parameter names) and the module the step calls."""
    model = make_model(cfg).to(dev)
    ids = [dev.index] if dev.type == "cuda" else None
    ddp_kwargs = dict(device_ids=ids, bucket_cap_mb=cfg["bucket_mb"])
    torch._dynamo.config.optimize_ddp = "optimize_ddp=False" not in variant
    if variant == "DDP, eager":
        return model, DDP(model, **ddp_kwargs)
    if variant.startswith("compile(DDP(model))"):
        ddp = DDP(model, **ddp_kwargs)
        return model, torch.compile(ddp, backend=counting_inductor)
    if variant == "DDP(model.compile())":
        model.compile(backend=counting_inductor)
        return model, DDP(model, **ddp_kwargs)
    for i in range(cfg["depth"]):  # FSDP2: one unit per block, and the root
        if variant == "FSDP2, per-block compile":
            model[i] = torch.compile(
                model[i], backend=counting_inductor, fullgraph=True
            )
        fully_shard(model[i])
    fully_shard(model)
    if variant == "FSDP2, whole-model compile":
        return model, torch.compile(model, backend=counting_inductor)
    return model, model


def run_variant(variant, cfg, dev):
    torch._dynamo.reset()
    counters.clear()
    COMPILED_GRAPHS.clear()
    model, wrapped = build(variant, cfg, dev)
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
    rank, world = dist.get_rank(), cfg["world"]
    losses, issue, step_time = [], [], []
    for i, (x, y) in enumerate(make_batches(cfg)):
        x, y = x.chunk(world)[rank].to(dev), y.chunk(world)[rank].to(dev)
        start = time.perf_counter()
        loss = train_step(wrapped, opt, x, y)
        issued = time.perf_counter()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i >= cfg["warmup"]:
            issue.append(issued - start)
            step_time.append(time.perf_counter() - start)
        if i < cfg["check"]:
            dist.all_reduce(loss)  # a sum: gloo has no average
            losses.append(loss.item() / world)
        if i == 0:
            # FSDP2's gradients are DTensors: full_tensor() gathers the shards.
            grads = {
                n.replace("_orig_mod.", ""): getattr(
                    p.grad, "full_tensor", p.grad.detach
                )()
                for n, p in model.named_parameters()
            }
    report = {
        "variant": variant,
        "Dynamo graphs": counters["stats"]["unique_graphs"],
        "compiled graphs": len(COMPILED_GRAPHS),
        "issue (ms)": 1e3 * statistics.median(issue),
        "step (ms)": 1e3 * statistics.median(step_time),
        "losses": losses,
    }
    return report, {n: g.cpu() for n, g in grads.items()}


def main(section, cfg, out):
    dev = torch.device("cpu")
    if cfg["backend"] == "nccl":
        dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(dev)
    else:
        torch.set_num_threads(1)
    dist.init_process_group(cfg["backend"])
    all_grads = {}
    for variant in cfg["variants"][section]:
        report, all_grads[variant] = run_variant(variant, cfg, dev)
        if dist.get_rank() == 0:
            print("RESULT " + json.dumps(report), flush=True)
    if dist.get_rank() == 0:
        torch.save(all_grads, Path(out) / "grads.pt")
    dist.destroy_process_group()


# %%
# The launcher writes those functions into ``worker.py`` and starts two copies. If the
# workers overrun the time limit it stops their whole process group, and a failure
# raises with the end of their output, so that a broken build names its cause. The
# checker compares every variant with the reference, then prints one table.

WORKER_FUNCTIONS = [make_model, make_batches, train_step, counting_inductor]
WORKER_FUNCTIONS += [build, run_variant, main]
WORKER_ENV = dict(
    NCCL_NVLS_ENABLE="0",
    TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
    NVSHMEM_DISABLE_NVLS="1",
    OMP_NUM_THREADS="1",
)
# CPU workers must not see a GPU: FSDP2 puts its default device mesh on the GPU when
# one is visible, and two ranks would then share (or miss) a single device.
CPU_ONLY = {"gloo": {"CUDA_VISIBLE_DEVICES": ""}}


def launch(section, timeout=600):
    with tempfile.TemporaryDirectory() as tmp:
        source = [WORKER_HEADER] + [inspect.getsource(f) for f in WORKER_FUNCTIONS]
        source.append("main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3])\n")
        (Path(tmp) / "worker.py").write_text("\n\n".join(source))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += [f"--nproc-per-node={cfg['world']}", "worker.py", section]
        cmd += [json.dumps(cfg), tmp]
        proc = subprocess.Popen(
            cmd,
            cwd=tmp,
            env=os.environ | WORKER_ENV | CPU_ONLY.get(cfg["backend"], {}),
            text=True,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output = proc.communicate()[0] + f"\n(killed after {timeout} s)"
        if proc.returncode != 0:
            tail = "\n".join(output.splitlines()[-80:])
            raise RuntimeError(f"{section} workers failed ({proc.returncode}):\n{tail}")
        lines = output.splitlines()
        rows = [json.loads(s[7:]) for s in lines if s.startswith("RESULT ")]
        return rows, torch.load(Path(tmp) / "grads.pt")


def check_and_tabulate(rows, grads):
    table = []
    for row in rows:
        name, g = row["variant"], grads[row["variant"]]
        losses = torch.tensor(row["losses"])
        torch.testing.assert_close(
            losses, torch.tensor(ref_losses), rtol=1e-4, atol=1e-5
        )
        for n, ref in ref_grads.items():
            torch.testing.assert_close(
                g[n],
                ref,
                rtol=1e-4,
                atol=1e-5,
                msg=lambda m, at=f"{name}, {n}": f"{at}: {m}",
            )
        loss_err = (losses - torch.tensor(ref_losses)).abs().max().item()
        grad_err = max((g[n] - ref).abs().max().item() for n, ref in ref_grads.items())
        table.append([*list(row.values())[:5], loss_err, grad_err])
    headers = [*list(rows[0])[:5], "max loss err", "max grad err"]
    timed = cfg["steps"] - cfg["warmup"]
    print(f"{where}; medians of {timed} steps after {cfg['warmup']} warm-up steps")
    print(tabulate(table, headers, tablefmt="github", floatfmt=".3g"))
    return {row["variant"]: row for row in rows}


cfg["variants"] = {
    "ddp": [
        "DDP, eager",
        "compile(DDP(model)), optimize_ddp=True",
        "compile(DDP(model)), optimize_ddp=False",
        "DDP(model.compile())",
    ],
    "fsdp": ["FSDP2, eager", "FSDP2, per-block compile", "FSDP2, whole-model compile"],
}

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
# is not a speed setting. Measure before you copy it. The four DDP variants, in one
# launch:

ddp = check_and_tabulate(*launch("ddp"))
split = ddp["compile(DDP(model)), optimize_ddp=True"]
whole = ddp["compile(DDP(model)), optimize_ddp=False"]
assert split["Dynamo graphs"] == 1 and split["compiled graphs"] > 1, split
assert whole["Dynamo graphs"] == 1 and whole["compiled graphs"] == 1, whole
assert ddp["DDP(model.compile())"]["compiled graphs"] > 1

# %%
# How to read the table. Every compiled variant matched the reference (the errors are
# float32 rounding). With ``optimize_ddp=True`` Dynamo captured one graph and
# ``DDPOptimizer`` compiled it as several pieces; with ``False`` the same graph was
# compiled whole. Whether the overlap pays for the cuts depends on how long an
# all-reduce takes next to a piece's backward. On a CPU the two processes compute and
# communicate on the same few cores, so read CPU timings as a functional check and take
# decisions from GPU numbers.
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
# what can be compiled is the code *between* the hooks, which makes two common recipes:
#
# * **Per-block compile**: ``torch.compile(block, fullgraph=True)`` on every block,
#   *then* ``fully_shard`` on the compiled block, as TorchTitan does. The hooks sit on
#   the outer wrapper and run eagerly around the compiled ``forward``, so
#   ``fullgraph=True`` holds and the communication keeps its per-block overlap.
#   Identical blocks share one compiled graph; below, the first block compiles a second
#   time because its input, unlike the others', does not require a gradient.
# * **Whole-model compile**: ``torch.compile(model)`` after ``fully_shard``. Dynamo
#   starts at the top ``forward``, reaches the first block's hook and has to break the
#   graph. Here the break falls inside the loop over the layers, and a graph break in a
#   loop makes Dynamo give up on the whole frame, so the compiled graphs end up being
#   the blocks' own ``forward`` frames. Count the graphs to
#   see what you got; ``fullgraph=True`` here would turn the first break into an error.
#
# ``optimize_ddp`` and its ``python_reducer`` mode concern DDP only: FSDP2's
# communication lives in its hooks, outside the compiled graphs. FSDP2 needs
# ``all_gather_into_tensor`` and ``reduce_scatter_tensor``, which gloo provides, so the
# CPU build runs it as well.

fsdp = check_and_tabulate(*launch("fsdp"))
per_block = fsdp["FSDP2, per-block compile"]
assert 1 <= per_block["Dynamo graphs"] == per_block["compiled graphs"] < cfg["depth"]
assert fsdp["FSDP2, whole-model compile"]["compiled graphs"] >= 1

# %%
# With ``fullgraph=True`` the per-block variant proves that each block compiled without
# a break, and it compiled fewer graphs than there are blocks: the blocks reuse one
# compiled graph. The whole-model row shows how many graphs Dynamo salvaged around the
# hooks. As with DDP, the errors against the single-process reference are float32
# rounding, and the CPU timings are a functional check.
#
# Conclusion
# ----------
#
# A compiled backward makes all gradients of a graph ready at once, which would delay
# data-parallel communication to the end of the backward. For DDP, ``DDPOptimizer``
# (``optimize_ddp=True``, the default) cuts the graph at bucket boundaries so that the
# all-reduces overlap the backward again; ``optimize_ddp=False`` keeps one graph and
# gives up the overlap, a trade to measure rather than copy. Compile the inner module
# and wrap it in DDP. For FSDP2, compile each block with ``fullgraph=True`` before
# ``fully_shard``, since FSDP2's hooks run outside compiled code. Whatever you choose,
# compare losses and gradients with a single-process run, as this page does.

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
# * `TorchTitan: per-block compile with FSDP2 <https://github.com/pytorch/torchtitan>`_
# * :ref:`compiled_autograd_tutorial`
