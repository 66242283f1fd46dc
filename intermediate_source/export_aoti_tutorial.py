"""
.. _export_aoti_tutorial:

From torch.compile to a deployable artifact: torch.export and AOTInductor
=========================================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How ``torch.export`` captures a model as one graph with a dynamic batch size, and
         how to read the ``ExportedProgram`` it returns
       * Why export rejects a Python branch on a tensor's value, and how ``torch.cond``
         fixes it
       * How AOTInductor compiles the exported program into a ``.pt2`` package that a fresh
         process runs without the model's Python code, and which C++ compiler it needs
       * Where a fresh process spends its start, part by part, with ``torch.compile`` (empty
         cache; on a GPU, cache artifacts too) and with the package, and what a server can
         set to skip work it does not need
       * What a package is bound to: the exported ranges, the device, the PyTorch that
         built it

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * Linux: the page stops at its first cell elsewhere
       * A C++ compiler, ``g++`` or the one ``CXX`` names, that links libstdc++ dynamically
         (the system ``g++`` does; the first cell checks, with binutils' ``readelf``), and
         the Python headers (``python3-dev`` or similar)
       * GPU optional: a CUDA GPU of compute capability 7.5 or newer for the GPU timings
         (current CUDA wheels need it); without one the page runs on the CPU, smaller
       * PyTorch 2.9 or later, with tabulate and matplotlib
       * :ref:`compile_time`, which teaches Inductor's caches and portable cache artifacts
"""

# %%
# Two ways to compile
# -------------------
#
# ``torch.compile`` compiles *just in time*: in every new process, the first call traces
# ``forward`` with Dynamo and compiles the graph it finds (or loads it from Inductor's
# cache); every later call checks the *guards* that say whether the compiled code still
# applies. The serving process needs the model's Python code and compiles at each start.
#
# ``torch.export`` and AOTInductor compile *ahead of time*. ``torch.export.export`` traces
# ``forward`` once into an ``ExportedProgram``: one graph of ATen operations with the
# weights beside it and no Python left in it. ``torch._inductor.aoti_compile_and_package``
# hands that graph to Inductor, which generates the kernels and a C++ *wrapper* that calls
# them in order, compiles both into a shared library and zips it with the weights into a
# ``.pt2`` file. A server loads that file with ``torch._inductor.aoti_load_package`` in
# Python (or ``AOTIModelPackageLoader`` in C++) and calls it: no tracing, no guards. In
# exchange, export accepts less Python than ``torch.compile``, and the package serves only
# the shapes, the device and the PyTorch it was built for.
#
# Setup
# -----
#
# The page needs Linux and a C++ compiler, and without them stops in this cell with one
# line. It also stops if the compiler links libstdc++ statically, which crashes the
# package's processes (the section on the C++ compiler explains the check). Then
# ``measure.watch_cxx()`` has Inductor call the compiler through a wrapper that logs each
# run, here and in the processes this one starts, so that the package build and every
# fresh process below show the compiler's seconds as a part of their own. The model's
# code is kept in a string, as in :ref:`compile_time`, so that the fresh processes
# started later can import it from a file (the package's processes do not).

import contextlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

# On a machine with CUDA's compiler but no GPU, PyTorch warns "No CUDA runtime is found"
# when it looks for CUDA's headers; a CPU build of this page has no use for them.
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # the profiler's own notes, kept quiet
# The page keeps PyTorch's default float32 matmul precision.
# Packaging calls a pytree API that recent releases deprecate: not this lesson's code.
warnings.filterwarnings("ignore", message=".*(TensorFloat32|LeafSpec)")

import matplotlib.pyplot as plt
import torch
from tabulate import tabulate
from torch import nn
from torch._inductor.cpp_builder import get_cpp_compiler
from torch._inductor.utils import fresh_cache

import measure

measure.require(linux=True, cxx=True)  # else one line, and the page stops here
work_dir = Path((work := tempfile.TemporaryDirectory(prefix="export_aoti_")).name)
cxx, FIX = get_cpp_compiler(), "set CXX to one that links libstdc++ dynamically"
PROBE = '#include <regex>\nextern "C" bool probe(const char* s) { return std::regex_match(s, std::regex("cuda:.*")); }'
# compile PROBE from stdin; readelf: the library's dynamic section (NEEDED) and symbols
build = f"{cxx} -x c++ - -shared -fPIC -o probe.so && readelf -dsW probe.so"
elf = subprocess.check_output(build, shell=True, cwd=work_dir, input=PROBE, text=True)
needed = re.findall(r"\(NEEDED\).*\[(.+)\]", elf)
own = len(re.findall(r" \d+ _ZNSt6locale", elf))  # std::locale symbols it defines
if own and not any(name.startswith("libstdc++") for name in needed):
    raise SystemExit(f"This page's C++ compiler links libstdc++ statically: {FIX}.")
watch = measure.watch_cxx()  # logs the compiler's runs from here on, children's too
cxx_seconds = lambda start, end: watch.seconds(start, end) if watch else float("nan")  # noqa: E731

MODEL_CODE = """
import torch
from torch import nn
class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
    def forward(self, x):  # x: (batch, sequence, width)
        qkv = self.qkv(self.norm1(x)).unflatten(-1, (3, self.heads, -1))
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (batch, heads, seq, dim)
        attn = nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
        x = x + self.out(attn)
        return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))
def make_model(width, heads, layers, device):
    torch.manual_seed(0)
    return nn.Sequential(*[Block(width, heads) for _ in range(layers)]).to(device).eval()
"""
exec(MODEL_CODE, namespace := {})
make_model = namespace["make_model"]

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    device_name = torch.cuda.get_device_name()
    WIDTH, HEADS, LAYERS, SEQ, BATCH, MAX_BATCH = 768, 12, 2, 256, 16, 64
else:
    device_name = f"CPU, threads: {torch.get_num_threads()}"
    WIDTH, HEADS, LAYERS, SEQ, BATCH, MAX_BATCH = 32, 4, 1, 16, 4, 64
    print("No CUDA GPU found: the CPU runs a smaller model, with no GPU busy share.")
print(f"torch {torch.__version__} on {device} ({device_name})")
print(f"blocks {LAYERS}, width {WIDTH}, heads {HEADS}; input {BATCH} x {SEQ} x {WIDTH}")

model = make_model(WIDTH, HEADS, LAYERS, device)
x = torch.randn(BATCH, SEQ, WIDTH, device=device)
(work_dir / "model.py").write_text(MODEL_CODE)
torch.save(x.cpu(), work_dir / "input.pt")  # every process runs the same input
PATH = re.compile(r"(?<![\w.])/\S*/")  # a file path up to its file name


# %%
# Exporting with a dynamic batch
# ------------------------------
#
# ``torch.export.export(model, args)`` runs ``forward`` once on the example inputs and
# records every operation. By default each size of the example becomes a constant of the
# graph; ``dynamic_shapes`` says which sizes may vary. Here dimension 0 of ``x`` is a
# ``torch.export.Dim`` named ``batch``, from 2 to ``MAX_BATCH``. Why not from 1: Inductor,
# like Dynamo, compiles a dynamic size for the values 2 and up and treats 0 and 1 as
# special cases, so a package whose range starts at 1 still rejects a batch of 1 once it
# checks its inputs (the last section shows that check).

# one entry per positional input: its dynamic dimensions
dims = ({0: torch.export.Dim("batch", min=2, max=MAX_BATCH)},)
exported = torch.export.export(model, (x,), dynamic_shapes=dims)
ops = Counter(str(n.target) for n in exported.graph.nodes if "aten." in str(n.target))
signature = exported.graph_signature
print(f"parameters lifted to graph inputs: {len(signature.parameters)}; ", end="")
print(f"user inputs: {signature.user_inputs}; ranges: {exported.range_constraints}")
print(f"{ops.total()} ATen calls; most frequent: {ops.most_common(3)}")
with torch.no_grad():
    torch.testing.assert_close(exported.module()(x), model(x))

# %%
# Export lifts every parameter (and buffer) of the model to an input of the graph, so the
# graph is a pure function; the one *user* input is ``x`` (``nn.Sequential`` calls it
# ``input``). Its first size is a symbol (``s77`` or similar), and the *range
# constraints* bound it by the ``Dim``'s range. Every operation is an ATen operator, and
# ``exported.module()`` turns the program back into a callable module, checked above
# against the model. Had the model's code narrowed the range (a reshape that needs an
# even batch, say), export would have raised an error saying so.
#
# When export fails: a branch on a tensor's value
# ------------------------------------------------
#
# ``torch.compile`` meets unsupported Python with a graph break and runs that piece
# eagerly. Export has no such fallback: the whole of ``forward`` must become one graph. The
# failure users meet most is a Python ``if`` on a tensor's value. This wrapper scales an
# input down when its largest entry exceeds a limit:


class Rescaled(nn.Module):
    def __init__(self, net, limit=3.0):
        super().__init__()
        self.net, self.limit = net, limit

    def forward(self, x):
        peak = x.abs().amax()
        if peak > self.limit:  # a Python branch on a tensor's value
            x = x * (self.limit / peak)
        return self.net(x)


# The shapes machinery's warning adds nothing to the error: the page turns it off.
logging.getLogger("torch.fx.experimental.symbolic_shapes").setLevel(logging.ERROR)
try:  # export prints its partial graph on stderr: kept to read below
    with contextlib.redirect_stderr(printed := io.StringIO()):
        torch.export.export(Rescaled(model), (x,), dynamic_shapes=dims)
    raise AssertionError("export accepted a data-dependent branch")
except Exception as error:  # GuardOnDataDependentSymNode on PyTorch 2.9 to 2.14
    print(f"{type(error).__name__}: {str(error).splitlines()[0]}")
    assert "data-dependent" in str(error), error
graph = [ln.strip() for ln in printed.getvalue().splitlines() if ln.strip()]
for line in [ln for ln in graph if "code:" in ln or "aten.item" in ln][-2:]:
    print(f"  partial graph: {PATH.sub('', line)}")

# %%
# Read it from the bottom. Export traces with *fake* tensors, which have shapes but no
# values. To run the ``if``, Python asked for the truth of ``peak > self.limit``; export
# turned that into ``.item()`` of a boolean tensor, whose result it cannot know: a new
# *unbacked* symbol ``u0``. The branch needs ``Eq(u0, 1)`` ("is the condition true?")
# decided at trace time, which is what "could not guard on data-dependent expression"
# means; the line above names the line of ``forward`` that asked.
#
# The fix keeps both branches in the graph. ``torch.cond(pred, true_fn, false_fn,
# operands)`` records both functions as subgraphs and picks one at run time. The branches
# take the same operands, return tensors of the same shapes and dtypes, and must not
# return an input as it is (hence ``clone``). Where a branch-free expression exists it is
# simpler still (here ``x * torch.clamp(self.limit / peak, max=1.0)``); ``torch.cond`` is
# for branches that do different work.


class RescaledCond(Rescaled):
    def forward(self, x):
        peak = x.abs().amax()
        x = torch.cond(peak > self.limit, self.scale, self.keep, (x, peak))
        return self.net(x)

    def scale(self, t, peak):  # the branch taken when the condition holds
        return t * (self.limit / peak)

    def keep(self, t, peak):  # the other; a branch may not return an input as it is
        return t.clone()


fixed = torch.export.export(RescaledCond(model), (x,), dynamic_shapes=dims)
conds = [n for n in fixed.graph.nodes if n.target is torch.ops.higher_order.cond]
print(f"exported: {len(conds)} cond node, branches {conds[0].args[1:3]}")
with torch.no_grad():
    for t in [x, 0.01 * x]:  # x takes the first branch, 0.01 * x the other
        torch.testing.assert_close(fixed.module()(t), Rescaled(model)(t))

# %%
# The exported program gives the same results as the Python ``if`` on both sides of the
# limit; the rest of the page packages the plain model.
#
# The C++ compiler that builds the package
# ----------------------------------------
#
# AOTInductor compiles its C++ wrapper (and, on a CPU, every kernel) into a shared library
# with the compiler that ``torch._inductor.cpp_builder.get_cpp_compiler()`` returns: the
# ``CXX`` environment variable, else ``g++``. That library runs inside a process that
# already holds PyTorch and its C++ runtime, libstdc++. If the compiler links libstdc++
# *statically* into shared libraries (some toolchains' ``g++`` wrappers do), the package
# carries a second copy of libstdc++ whose locale data was never set up, and the wrapper's
# first ``std::regex`` (it parses the device string, ``"cuda:0"``, when the model is
# created) crashes the loading process with signal 11. The first cell checked this: it
# built a tiny library that uses ``std::regex`` with the same compiler and read, with
# ``readelf``, whether the library names ``libstdc++.so`` among the libraries it needs
# (its ``NEEDED`` entries) or defines libstdc++'s own ``std::locale`` symbols:

print(f"{Path(cxx).name}: a test library needs {needed}, defines {own} of locale")

# %%
# Compiling the package with AOTInductor
# --------------------------------------
#
# ``aoti_compile_and_package`` compiles the exported program and writes the package.
# ``inductor_configs`` takes Inductor's options; ``aot_inductor.metadata`` stores strings
# of your own in the package, here the PyTorch version that built it, which the package
# does not otherwise record. The build runs from an empty compile cache, as on a new
# machine (Inductor's ``fresh_cache``; the precompiled headers that Inductor keeps in
# its default folder, whatever the cache, excepted), and the page reads from the
# wrapper's log how many of its seconds the C++ compiler ran.

package = work_dir / "encoder.pt2"
metadata = {"aot_inductor.metadata": {"built_with": torch.__version__}}
options = dict(package_path=str(package), inductor_configs=metadata)
with fresh_cache():  # an empty compile cache, as on a new machine
    start = time.time()
    torch._inductor.aoti_compile_and_package(exported, **options)
    built, compiler = time.time() - start, cxx_seconds(start, time.time())
print(f"Package build, empty cache: {built:.2f} s; C++ compiler {compiler:.2f} s")

# %%
# The package is a zip archive: the generated C++ wrapper and kernels (``.cpp``, kept for
# reading), the compiled library (``.so``), its metadata (``.json``) and the weights,
# inside the library or beside it; a GPU package also holds its compiled Triton kernels
# (``.cubin``). On a CPU every kernel is C++, so the compiler builds all of them; on a
# GPU it builds the wrapper, and the kernels are compiled by Triton.
#
# Start to first result, in fresh processes
# -----------------------------------------
#
# A server cares about the time from starting a process to its first answer. The page
# writes a small script and runs it in new Python processes, each told where its Inductor
# cache folder is (``TORCHINDUCTOR_CACHE_DIR``). The table's columns:
#
# 1. ``compile, fresh``: ``torch.compile`` on a *fresh machine*, an empty cache folder.
#    On a GPU, after its first result it saves portable cache artifacts
#    (``torch.compiler.save_cache_artifacts``) for process 2.
# 2. ``compile, artifacts`` (GPU only): a fresh machine that first loads those artifacts
#    (``torch.compiler.load_cache_artifacts``); a cache folder kept from an earlier run
#    holds the same entries without that step. The artifacts hold the compiled Triton
#    kernels, so this process compiles in its own thread
#    (``TORCHINDUCTOR_COMPILE_THREADS=1``, see :ref:`compile_time`). On a CPU they hold
#    the kernels' C++ source, which a fresh machine compiles again: :ref:`compile_time`
#    measures what they save there, and this page skips the process.
# 3. ``package, fresh``: ``aoti_load_package`` with an empty cache folder.
# 4. ``package, server``: the package as a Python server would run it, with the cache
#    folder that process 3 left and ``TORCHINDUCTOR_VEC_ISA_OK=1`` (both explained below
#    the table). It also turns on the package's input checks, used in the last section.
# 5. ``package, C++ loader``: the loader class that a C++ server uses,
#    ``AOTIModelPackageLoader`` (from Python, ``torch._C._aoti.AOTIModelPackageLoader``,
#    wrapped by ``AOTICompiledModel`` as ``aoti_load_package`` does).
#
# "Fresh machine" means an empty cache folder; the file cache stays warm (on a new
# machine ``import torch`` also reads PyTorch's files from disk). The script stamps the
# time after each part of its start, up to its first result; "Python start" runs from
# the launch to its first line. The package's processes call the device check of
# ``aoti_load_package`` (PyTorch 2.10 and later) on its own first, to time it apart. The
# last row, "of which: C++ compiler", adds nothing to the sum: it is the time the C++
# compiler ran inside the parts above, read from the wrapper's log over the process's
# window from launch to result.

SCRIPT = """
import json, os, sys, time
marks = [("start", time.time())]
mark = lambda name, at=None: marks.append((name, at or time.time()))
import torch
mark("import torch")
torch.set_grad_enabled(False)  # inference only
mode, device, tag, width, heads, layers, top = sys.argv[1:]
x = torch.load("input.pt").to(device)
mark("CUDA init, input" if device == "cuda" else "read input")
if mode in ("package", "cpp"):
    import torch._inductor.package
    mark("import Inductor's loader")
    if mode == "package" and torch.torch_version.TorchVersion(torch.__version__) >= (2, 10):
        from torch._inductor import codecache
        codecache.get_device_information(device)  # what aoti_load_package calls
        mark("device check (ISA probes)")
    if mode == "package":
        run = torch._inductor.aoti_load_package("encoder.pt2")
    else:
        loader = torch._C._aoti.AOTIModelPackageLoader("encoder.pt2", "model", False, 1, -1)
        run = torch._inductor.package.package.AOTICompiledModel(loader)
    mark("load library and weights")
    meta = run.get_metadata()
    assert meta["built_with"] == torch.__version__, meta  # the PyTorch that built it
    if device == "cuda" and "AOTI_COMPUTE_CAPABILITY" in meta:  # and the GPU's model
        assert meta["AOTI_COMPUTE_CAPABILITY"] == "%d%d" % torch.cuda.get_device_capability()
else:
    from model import make_model  # only the torch.compile processes need the code
    model = make_model(int(width), int(heads), int(layers), device)
    mark("model code, build")
    if mode == "artifacts":
        torch.compiler.load_cache_artifacts(open("artifacts.bin", "rb").read())
        mark("load cache artifacts")
    run = torch.compile(model)
    torch._dynamo.mark_dynamic(x, 0)
    mark("torch.compile() (imports Dynamo)")
before = time.time()
out = run(x).cpu()  # .cpu() waits for the device
if mode in ("compile", "artifacts"):  # PyTorch's own timer of the compilation
    timed = dict(zip(*torch._dynamo.utils.compile_times(repr="csv", aggregate=True)))
    mark("Dynamo, AOTAutograd, Inductor", before + float(timed["_compile.compile_inner"]))
mark("first run")
torch.save(out, tag + ".pt")
if mode == "compile" and device == "cuda":  # for process 2
    open("artifacts.bin", "wb").write(torch.compiler.save_cache_artifacts()[0])
raised = []
for size in [1, int(top) + 1] * bool(os.environ.get("AOTI_RUNTIME_CHECK_INPUTS")):
    try:  # one batch below the exported range, one above
        run(torch.randn(size, *x.shape[1:], device=device))
    except RuntimeError as error:
        raised.append(type(error).__name__)
fx = [torch._dynamo.utils.counters["inductor"][f"fxgraph_cache_{k}"] for k in ("hit", "miss")]
print("RESULT", json.dumps([marks, dict(fx=fx, raised=raised)]))
"""
(work_dir / "fresh.py").write_text(SCRIPT)


def fresh_process(tag, mode, cache, **env):
    """Run the script; its start's parts in seconds, from launch to first result, and notes."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, **env)
    env.update(TRITON_CACHE_DIR=os.path.join(cache, "triton"), TMPDIR=cache)
    args = [mode, device, tag, WIDTH, HEADS, LAYERS, MAX_BATCH]
    cmd, launched = [sys.executable, "fresh.py", *map(str, args)], time.time()
    done = subprocess.run(cmd, cwd=work_dir, env=env, capture_output=True, text=True)
    # signal 11 (SIGSEGV), a crash: said in one line with its fix
    assert done.returncode != -11, f"The {tag} process died of signal 11: {FIX}."
    assert done.returncode == 0, PATH.sub("", done.stderr[-3000:])
    marks, notes = json.loads(done.stdout.split("RESULT ")[-1])
    parts = {"Python start": marks[0][1] - launched}
    parts.update({name: at - marks[i][1] for i, (name, at) in enumerate(marks[1:])})
    parts |= {T: marks[-1][1] - launched, CXX: cxx_seconds(launched, marks[-1][1])}
    notes["printed"] = [ln for ln in done.stderr.splitlines() if ln.startswith("Error")]
    notes["out"] = torch.load(work_dir / f"{tag}.pt")  # its first result
    return parts, notes


T, CXX = "start to result", "of which: C++ compiler"  # the table's last two rows
CHECK, COMPILING = "device check (ISA probes)", "Dynamo, AOTAutograd, Inductor"
compiled, loaded, kept = [tempfile.mkdtemp(dir=work_dir) for _ in range(3)]
server = {"TORCHINDUCTOR_VEC_ISA_OK": "1", "AOTI_RUNTIME_CHECK_INPUTS": "1"}
runs = {"compile, fresh": fresh_process("compile", "compile", compiled)}
if device == "cuda":  # process 2, which compiles in its own thread
    one = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}
    runs["compile, artifacts"] = fresh_process("artifacts", "artifacts", loaded, **one)
runs["package, fresh"] = fresh_process("package", "package", kept)  # kept for 4 and 5
runs["package, server"] = fresh_process("server", "package", kept, **server)
runs["package, C++ loader"] = fresh_process("cpp", "cpp", kept)
fx = {k: notes["fx"] for k, (_, notes) in runs.items() if k.startswith("compile")}
assert fx["compile, fresh"][0] == 0 < fx["compile, fresh"][1], fx  # all misses
assert fx.get("compile, artifacts", [1])[0] > 0, fx  # the artifacts were found
jit, fresh = list(fx)[-1], runs["package, fresh"][0]  # torch.compile's shortest start

# the compile process's parts, then the loader's; the first run and the sums last
order = sorted(dict.fromkeys([*runs[jit][0], *fresh]), key=["first run", T, CXX].count)
rows = [[part, *[parts.get(part) for parts, _ in runs.values()]] for part in order]
print(f"{device_name}, torch {torch.__version__}, seconds, one process each")
print(tabulate(rows, ["part of the start", *runs], "github", floatfmt=".2f"))
print("FX cache hits/misses:", ", ".join(f"{k} {v}" for k, v in fx.items()))

# %%
# Each column is one process, as listed above; each row a part of its start, in seconds,
# in the order the script met them (empty: no such part); "start to result" is their sum,
# and "of which: C++ compiler" the compiler's time within them. Under the table: the FX
# graph cache's hits and misses in the compile processes (the page asserts that the
# first only missed and the second, on a GPU, hit; the package's processes never look).
# The lines below read the table: each package process's start against the shortest of
# ``torch.compile`` (with cache artifacts on a GPU, fresh on a CPU), and the device
# check's share of the package's start; the shortest start; and, on a GPU, what the
# artifacts changed in the compile process's start, in its compiling, and in its C++
# compiler time. Then each start as a bar.

for name, (p, _) in list(runs.items())[-3:]:  # the package's processes
    dc, r = p.get(CHECK, 0) / p[T], p[T] / runs[jit][0][T]  # check's share; vs jit
    print(f"{name}: {p[T]:.1f} s to result ({r:.2f}x {jit}), {dc:.0%} device check")
print(f"Shortest start here: {min(runs, key=lambda name: runs[name][0][T])}")
for name, (p, _) in runs.items():
    measure.headline(f"start to result, {name}", p[T], "s")
if jit == "compile, artifacts":  # what the artifacts saved (GPU only)
    cold, warm = runs["compile, fresh"][0], runs[jit][0]
    saved = [f"{k} {cold[k]:.2f} -> {warm[k]:.2f} s" for k in (T, COMPILING, CXX)]
    print("With cache artifacts:", "; ".join(saved))

fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained")
W = [[parts.get(part, 0.0) for part in order[:-2]] for parts, _ in runs.values()]
for k, part in enumerate(order[:-2]):  # the parts, stacked, without their sums
    left = [sum(w[:k]) for w in W]
    ax.barh(list(runs), [w[k] for w in W], left=left, label=part, color=plt.cm.tab20(k))
ax.set(xlabel=f"seconds to first result ({device_name})", ylim=(len(runs) - 0.5, -0.5))
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, fontsize=7)
plt.show()

# %%
# Reading the columns
# -------------------
#
# **The compile columns.** Cache artifacts carry the entries of Inductor's FX graph cache
# (and AOTAutograd's): the process that loads them still traces with Dynamo, but skips
# AOTAutograd and Inductor's lowering and code generation; a GPU entry also holds its
# compiled Triton kernels. A CPU entry holds its kernels as C++ source, which a process
# compiles again when its cache folder lacks the compiled libraries, as a fresh
# machine's does (a cache folder kept from an earlier run holds them). On a CPU, the
# compile column's "Dynamo, AOTAutograd, Inductor" row also holds the instruction-set
# probes described next, which each new cache folder runs, and the building of the
# precompiled header that every kernel includes, once per machine (each process here has
# its temporary folder, where Inductor keeps that header, inside its cache folder).
#
# **The package's columns.** "import Inductor's loader" imports the Python side of the
# loader, which imports parts of Inductor and Dynamo. "device check (ISA probes)": from
# PyTorch 2.10, ``aoti_load_package`` compares the package's metadata with this machine
# (``get_device_information``): the platform, the GPU's compute capability, and the CPU's
# vector instruction set (ISA), which ``torch._inductor.cpu_vec_isa.pick_vec_isa()`` finds
# by *probing*. For each instruction set the CPU reports (AVX2, AVX-512 and its VNNI and
# BF16 extensions, AMX), it compiles a small C++ library with that set's flags and loads
# it in a child Python process, to be sure that the compiler and PyTorch both handle it;
# the answer is kept for the rest of the process. A mismatch only logs a warning, the
# one use of the answer at load time (upstream report: `pytorch/pytorch#191715
# <https://github.com/pytorch/pytorch/issues/191715>`__). Pull request `#192394
# <https://github.com/pytorch/pytorch/pull/192394>`__ has the loader read the instruction
# sets from what the CPU reports, without compiling anything; as of November 2026 it is
# in no release (PyTorch 2.15 still probes), so expect it in 2.16 at the earliest. PyTorch
# 2.9 has no such check. In 2.10 to 2.12 each child imports torch; from 2.13 it does not
# (on Linux). Up to 2.13 the cache folder keeps only the compiled libraries, so a kept
# folder saves the compiler runs but not the children; from 2.14 it also keeps a mark
# that each library loaded, and a second start on the same machine probes nothing. "load
# library and weights" unpacks the archive, opens the shared library and creates the
# model, which copies the weights to the device.
#
# What a server can set, and what each setting risks:
#
# * **A kept cache folder** (``TORCHINDUCTOR_CACHE_DIR`` on a disk that outlives the
#   process): it holds the probes' libraries (and, from 2.14, their results). Safe: the
#   entries are keyed by the compiler's version, the flags and the PyTorch version. A
#   fresh machine or container starts without it, as processes 1 and 3 did.
# * ``TORCHINDUCTOR_VEC_ISA_OK=1``: Inductor assumes that every instruction set the CPU
#   reports builds and loads, and skips those base probes; the probes of the extensions
#   (VNNI, BF16, AMX) still run. In a process that only loads packages, the answer feeds
#   only the mismatch warning. In a process that also compiles for the CPU, a compiler
#   too old for the CPU would then fail at the first compilation instead of falling back
#   to a narrower instruction set.
# * **The C++ loader**: a C++ server (``torch::inductor::AOTIModelPackageLoader``) never
#   runs the Python device check. From Python that class is private; a server that uses
#   it, as process 5 did, gives up the mismatch warning, so it checks what matters itself
#   (the script asserts the package's PyTorch version and GPU compute capability).
#
# Steady state
# ------------
#
# Once running, what does each path cost per call? The page loads the package into this
# process twice, the second time with ``run_single_threaded=True`` (explained below), and
# compiles the model here with ``torch.compile``, its batch marked dynamic as in the fresh
# processes, in the cache folder that process 1 left, so that it can load what that
# process compiled rather than compile it again (not timed). Each is also called once
# with a batch of 2, the smallest in the exported range, before the timing starts; the
# timing asserts that nothing compiles while it runs. The four paths are timed together,
# interleaved, in this process and with its threads, each call inside a profiler range
# named after its row (``torch.profiler.record_function``). Timings come from the site's
# measurement core (:ref:`measuring_recipe` explains it), which also takes each step
# apart, by what the profiler saw running on this thread.

from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir
from torch.profiler import record_function

torch._dynamo.mark_dynamic(x, 0)
load = lambda **kw: torch._inductor.aoti_load_package(str(package), **kw)  # noqa: E731
variants = {"eager": model, "torch.compile": torch.compile(model)}
variants["AOTInductor package"] = load()
variants["AOTInductor package, single-threaded"] = load(run_single_threaded=True)
steps = {k: record_function(k)(lambda f=f: f(x)) for k, f in variants.items()}
with torch.no_grad(), temporary_cache_dir(compiled):  # process 1's cache folder
    for fn in variants.values():
        fn(x), fn(x[:2]), fn(x)  # warm-up: torch.compile loads its graph here, once
    res = measure.compare(steps, device)
rows = [[name, *res.cells(name)] for name in res]
print(f"{device_name}, torch {torch.__version__}, batch {BATCH}")
print(tabulate(rows, ["steady state", *res.headers()], "github", ["", *res.formats()]))
for name, ref in zip(list(res)[1:], res):  # each row against the row above it
    print(res.versus(name, ref))
for name, row in res.items():  # where each step's time went
    top = sorted(row.parts.items(), key=lambda kv: -kv[1])[:3]
    print(f"{name}, largest parts (ms):", ", ".join(f"{k} {v:.3f}" for k, v in top))

# %%
# Each line compares a row with the one above it by their paired timing windows: a tie
# when the interval of the ratio holds 1.00x, otherwise the parts of the step that moved
# most. Mechanisms to read them with: compiled code fuses operations into fewer kernels;
# each call of ``torch.compile``-d code passes through its guards and Python wrapper (the
# ``guards`` and ``compiled-code entry`` parts, named ``waiting: ...`` on a GPU when the
# GPU waited for them); the package runs the same kind of generated kernels from its C++
# wrapper, with no guards, after a Python entry point that flattens the inputs and
# outputs. A loaded package also holds one *instance* of the compiled model (by default)
# with an event that marks the end of its last run on the GPU; a call whose instance is
# still running waits for that event (``cudaEventSynchronize``) before it launches
# anything, so back-to-back calls do not queue ahead on the GPU, and each call's CPU work
# between them shows as time the GPU waited. ``run_single_threaded=True`` skips the
# instances and their events: safe only when one thread at a time calls the package.
#
# The last four lines give each row's three largest parts. The profiler sees into the
# ``torch.compile``-d call: its guards, the Python wrapper of its compiled code, and the
# PyTorch operators that code calls. Inside the package's call it sees only the
# operators called through PyTorch's dispatcher; the generated kernels, compiled C++, and
# the C++ functions they call directly record nothing. That time falls within the
# package rows' ranges (named "AOTInductor package ..."), which the core files as
# ``compiled code`` (without a range, it would be "Python and other host work"): on a
# CPU, the package's kernels, what they call directly and its Python entry point, so its
# compiled code can hold work that the ``torch.compile`` row shows apart (``matmul``,
# ``attention``); on a GPU, the host's side of the call (``waiting: compiled code`` where
# the GPU waited for it).
#
# Same function
# -------------
#
# Every path must compute what the model computes, up to the order of float32 operations.
# The reference is a float64 copy of the model; each output, including those the fresh
# processes wrote, must stay within a small multiple of eager's error plus a floor.

with torch.no_grad():
    reference = make_model(WIDTH, HEADS, LAYERS, device).double()(x.double()).cpu()
    outputs = {name: fn(x).cpu() for name, fn in variants.items()}
outputs.update({f"fresh process: {name}": n["out"] for name, (_, n) in runs.items()})
relative = lambda out: ((out.double() - reference).norm() / reference.norm()).item()  # noqa: E731
error = {name: relative(out) for name, out in outputs.items()}
print(tabulate(error.items(), ["output", "vs float64"], "github", floatfmt=".2e"))
assert all(e <= 3 * error["eager"] + 1e-6 for e in error.values()), error

# %%
# What a package is bound to
# --------------------------
#
# **The exported ranges.** The batch may take any size from 2 to ``MAX_BATCH``; the
# sequence length, the width and the dtype are fixed. Out of range, the compiled code is
# not known to be right, and by default the package does not check its inputs. With
# ``AOTI_RUNTIME_CHECK_INPUTS=1`` in the loading process's environment, the wrapper
# checks each input's sizes, dtype and device before it runs anything. The server-settings
# process set it, and after its first result called the package with a batch of 1 and
# with a batch of ``MAX_BATCH + 1``. The exceptions it caught, and the reasons the wrapper
# wrote to its standard error:

bounds = runs["package, server"][1]
print(f"exceptions raised: {bounds['raised']}", *bounds["printed"], sep="\n  ")
assert len(bounds["raised"]) == 2, bounds

# %%
# Each line names the input (``input_handles[0]``), the dimension, the bound and the size
# it got. The exception carries the same text in recent releases; in PyTorch 2.9 it only
# says that the call into the model failed, so look for the reason in the server's log.
#
# **The device.** The metadata names the device the package was compiled for
# (``AOTI_DEVICE_KEY``; from 2.10 also the CPU's instruction set and the GPU's compute
# capability). GPU kernels are compiled for the GPU's architecture: a package built on one
# GPU model may fail to load on another (`issue 153697
# <https://github.com/pytorch/pytorch/issues/153697>`__), so build on the model you serve
# on. A CPU package likewise uses the instruction set of the machine that built it.
#
# **The PyTorch that built it.** The generated code calls into PyTorch's C++ library. A
# package built by one release has failed to load in the next (`issue 123745
# <https://github.com/pytorch/pytorch/issues/123745>`__). Since PyTorch 2.6 AOTInductor
# generates code against a stable C interface by default, meant to keep older packages
# loading in later releases, with no firm promise (`issue 186143
# <https://github.com/pytorch/pytorch/issues/186143>`__). The package does not record the
# version: this page stored it as metadata, and each loading process checked it. Rebuild
# the package when you upgrade PyTorch, and keep the exported program
# (``torch.export.save``) to rebuild from.
#
# Which path to choose
# --------------------
#
# ``torch.compile`` with cache artifacts keeps the flexibility of Python: graph breaks
# run eagerly, a new shape recompiles instead of failing, and training works. The
# serving process still needs the model's code, Dynamo and the matching compile cache,
# and traces the model at each start. A package needs none of these and can be served
# from C++, at the price of a model that exports as one graph, inputs within the
# exported ranges, and one build per device and PyTorch version. From PyTorch 2.10, its
# Python loader's device check adds to every start the seconds its row shows (the server
# settings' column shows what a kept folder and ``TORCHINDUCTOR_VEC_ISA_OK=1`` leave of
# it) until the fix above ships; the C++ loader has no such check. Which start is
# shorter and which call is faster on your model is what the two tables measure: rerun
# them on your machine. (PyTorch 2.13 and later describe a third, experimental path,
# `torch.compile(...).aot_compile()
# <https://docs.pytorch.org/docs/main/user_guide/torch_compiler/torch.compiler_aot_compile.html>`__,
# which saves a compiled function for later processes; this page does not use it.)
#
# Conclusion
# ----------
#
# ``torch.export`` captures a whole ``forward`` as one graph with declared dynamic
# sizes, and refuses what it cannot capture, such as a Python branch on a tensor's
# value, which ``torch.cond`` or a branch-free rewrite fixes. AOTInductor compiles the
# exported program into a ``.pt2`` package, with a C++ compiler that must link libstdc++
# dynamically. A fresh process loads the package without the model's code and without
# compiling the model; its start, taken apart above with the C++ compiler's seconds
# counted apart, also holds the Python loader's device check (PyTorch 2.10 and later),
# whose instruction-set probes can compile and load test libraries; only the C++ loader
# skips it. The package
# serves only the exported ranges, the device and the PyTorch that built it: turn on its
# input checks, record the version, and rebuild when either changes.
#
# Further reading
# ---------------
#
# * :ref:`compile_time`: Inductor's caches and portable cache artifacts
# * `torch.export <https://docs.pytorch.org/docs/stable/export.html>`__
# * `AOTInductor: ahead-of-time compilation for torch.export-ed models
#   <https://docs.pytorch.org/docs/stable/torch.compiler_aot_inductor.html>`__
# * `Control flow: torch.cond
#   <https://docs.pytorch.org/docs/stable/cond.html>`__

del variants, fn, steps  # a loaded package keeps its unpacked files until released
work.cleanup()  # the package, the scripts, the caches and the outputs

# sphinx_gallery_thumbnail_number = 1
