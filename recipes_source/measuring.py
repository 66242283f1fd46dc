"""
.. _measuring_recipe:

Measuring a compiled step
=========================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * How every page of this site times a step: interleaved windows, the median and
         the spread, and a ratio with an interval from paired windows
       * How the GPU's busy share is measured (kernel time from ``torch.profiler`` over
         the step time measured without it) and which physics checks it must pass
       * How a gap between two variants is taken apart into parts that add up to it
       * The known answers that check the method on the machine that built this page

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later
       * A CUDA GPU for the GPU checks; runs on CPU with the CPU checks
       * On CPU, Inductor needs a C++ compiler and the Python headers
"""

# %%
# The measurement core
# --------------------
#
# Every page on this site measures with one module, ``measure``. Its source sits in each
# downloaded script and notebook, so a download runs on its own. Three calls do the work:
#
# * ``measure.compare({"name": step, ...}, device)`` times each variant in **interleaved
#   windows** (A, B, A, B, ...; each window enough back-to-back calls for about 10 ms,
#   and on a GPU at least three, which share the GPU's idle start of the window),
#   with no profiler running, and keeps the **median** ms per step and the **spread**
#   (the interquartile range of the windows). Then it profiles a few steps of each variant.
# * ``results.versus(name, ref)`` compares two variants by their **paired** windows: the
#   median of the per-round ratios, with the interval that a sign test gives (about 96 %
#   for nine rounds). An interval that holds 1.00x is a tie. Pairing keeps a slow moment of
#   the machine, which hits both windows of a round, out of the verdict.
# * A row's ``parts`` split its step into pieces that add up to it. On a GPU: the kernel
#   time by family (matmul, attention, compiled kernels, eager elementwise, copies,
#   optimizer, communication), which is the **busy** time, plus the time the GPU waited,
#   charged to what the thread that launched the next kernel was doing meanwhile
#   (Python, guards, eager operators, launches...). On a CPU: the main thread's time by
#   the same families. ``versus`` names the parts that moved most and how much of the gap
#   they cover.
#
# The **busy share** is the busy time per step over the step time measured *without* the
# profiler: the profiler's own CPU cost stretches a profiled step (the **stretch** column
# says by how much), so a share taken over the profiled loop would call a GPU-bound step
# CPU-bound. Each row is checked against physics in code: busy at most 100 %, no part
# longer than the step, and, where a page knows the bytes a step must move, busy time at
# least the time to move them at copy speed. A failed check prints a line and fails the
# site's build: it is a bug in the method, never a finding.
#
# The waiting time under the profiler is longer than without it; ``compare`` splits the
# unprofiled wait in the proportions the profiled steps showed. The known answers below
# check how close that comes.

import time

import matplotlib.pyplot as plt
import torch
from tabulate import tabulate

import measure

device = "cuda" if torch.cuda.is_available() else "cpu"
name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
print(f"{name}, threads: {torch.get_num_threads()}, torch {torch.__version__}")


def spin(ms):
    """Keep the CPU busy for ms milliseconds (a stand-in for Python work)."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def show(results, title):
    rows = [[n, *results.cells(n)] for n in results]
    print(title)
    print(
        tabulate(
            rows, ["variant", *results.headers()], "github", ["", *results.formats()]
        )
    )
    for n, row in results.items():
        parts = sorted(row.parts.items(), key=lambda kv: -abs(kv[1]))
        print(f"  {n}: " + "; ".join(f"{k} {ms:.3f}" for k, ms in parts[:5]) + " (ms)")


# %%
# Known answer 1: a step with a known CPU delay
# ---------------------------------------------
#
# The work of the step is a matrix product. The "delayed" variant spends ``DELAY_MS`` in
# Python first, as a slow data loader or a long chain of small operators would. On a GPU
# the product runs while the CPU spins, so the delayed step takes about the delay. The GPU
# runs the same kernel, only with idle time around it: the delayed step's busy time must be
# the product's, within 10 %, so its busy share is the product's kernel time over the
# longer step, as measured. A check that needs no profiler agrees: the host issues a
# GPU-bound step in a fraction of the step, and a CPU-bound one in about the whole step.
# On a CPU nothing overlaps: the delayed step is the product plus the delay, and the part
# called Python must grow by at least half the delay (the page prints by how much; on a
# busy machine the other parts move too).

n = 2048 if device == "cuda" else 512
a, p = torch.randn(n, n, device=device), torch.empty(n, n, device=device)
DELAY_MS = 2.0
work = lambda: torch.mm(a, a, out=p)  # noqa: E731


def delayed():
    spin(DELAY_MS)
    work()


known = measure.compare({"product": work, "delayed": delayed}, device)
show(known, f"a {n}x{n} matrix product, and the same after a {DELAY_MS} ms delay")
product, slow = known["product"], known["delayed"]
if device == "cuda":
    expected = 100 * product.busy_ms / slow.ms  # the same kernel time, a longer step
    print(
        f"GPU busy time per step: product {product.busy_ms:.3f} ms, delayed "
        f"{slow.busy_ms:.3f} ms; busy share of the delayed step {slow.busy:.1f} %, "
        f"expected {expected:.1f} % (the product's busy time over the delayed step)"
    )
    assert abs(slow.busy_ms - product.busy_ms) <= 0.1 * product.busy_ms, (slow, product)
    # without the profiler: how long the host takes to issue a step without waiting
    issue = "; ".join(
        f"{r.name} {r.issue_ms:.3f} of {r.ms:.3f} ms" for r in (product, slow)
    )
    print(f"host time to issue one step, of the step: {issue}")
else:
    grew = known.moved("delayed", "product")
    print(
        f"Python part grew by {grew[measure.PYTHON]:.3f} ms for a {DELAY_MS} ms delay"
    )
    assert grew[measure.PYTHON] >= 0.5 * DELAY_MS, grew

# %%
# Known answer 2: a copy-speed kernel
# -----------------------------------
#
# ``copy_bandwidth`` measures how fast the device copies a large tensor (bytes read plus
# bytes written, per ms): the **copy roofline**. An elementwise ``add`` of two such
# tensors reads two and writes one: at the copy's speed it takes three tensors' bytes
# (a kernel that reads more than it writes can beat a copy by a few percent, so the
# physics checks allow 5 %). On a GPU it should come close, and the GPU should be busy
# for the whole step. On a CPU the byte count is only a guide: a CPU reads a line of
# memory before it writes it (the copy moves three tensors' bytes where two are counted,
# the add four where three are), and its caches hold part of what a step reads, so the
# share may exceed 100 %.

bytes_per_ms, copy_row = measure.copy_bandwidth(device)
x, y = torch.rand(2, (2**28 if device == "cuda" else 2**25), device=device)
out = torch.empty_like(x)
added = measure.compare({"add": lambda: torch.add(x, y, out=out)}, device)["add"]
roofline_ms = 3 * x.nbytes / bytes_per_ms
added.check(roofline_ms=roofline_ms)
share = 100 * roofline_ms / added.ms
busy = f"; busy {added.busy:.0f} %" if device == "cuda" else ""  # none on a CPU
print(
    f"copy: {bytes_per_ms / 1e6:.0f} GB/s; add: {added.ms:.3f} ms, {share:.0f} % of "
    f"the copy roofline ({roofline_ms:.3f} ms){busy}"
)
measure.headline("copy speed", bytes_per_ms / 1e6, "GB/s")
measure.headline("add, % of copy roofline", share, "%")
if device == "cuda":
    assert 70 <= share <= 110 and added.busy >= 90, (share, added)
assert not measure.PHYSICS_FAILURES, measure.PHYSICS_FAILURES

# %%
# Known answer 3: a gap made of one extra operation
# -------------------------------------------------
#
# Two variants of a step differ by one extra elementwise operation, timed alone in the
# same interleaved windows. On a GPU the part that grew most must be that operation's
# family, within a quarter of the operation's own time. (A 2-core CPU that builds two
# pages at once, as the site's tests do, cannot time a part that closely, and its other
# parts move too: there the family must have grown by at least half the operation's time.)

b = torch.randn(2**24 if device == "cuda" else 2**21, device=device)
c = torch.empty_like(b)
extra = lambda: torch.exp(b, out=c)  # noqa: E731
steps = {"with exp": lambda: (work(), extra()), "without": work, "exp alone": extra}
gap = measure.compare(steps, device, rounds=11)
alone = gap["exp alone"]
line = gap.versus("with exp", "without")
print(f"exp alone: {alone.ms:.3f} ms")
print(line)
moved = gap.moved("with exp", "without")
top = max(moved, key=lambda k: moved[k])
print(f"part that grew most: {top} ({moved[top]:+.3f} ms)")
family = "GPU: eager elementwise" if device == "cuda" else "eager operators"
if device == "cuda":
    assert top == family and abs(moved[top] - alone.ms) <= 0.25 * alone.ms + 0.002, top
assert moved.get(family, 0.0) >= 0.5 * alone.ms, (moved, alone.ms)

# %%
# The figure draws each step measured above as its parts (those of 2 % of the step or
# more), without the profiler's stretch: a row's bar is as long as its step.

rows = {**known, **gap}
big = sorted(
    {k for r in rows.values() for k, ms in r.parts.items() if ms > 0.02 * r.ms}
)
fig, ax = plt.subplots(figsize=(8, 0.8 + 0.45 * len(rows)), layout="tight")
left = [0.0] * len(rows)
for part in big:
    widths = [max(r.parts.get(part, 0.0), 0.0) for r in rows.values()]
    ax.barh(list(rows), widths, left=left, label=part)
    left = [a + w for a, w in zip(left, widths)]
ax.invert_yaxis()  # the first row on top
ax.set(xlabel="ms per step (no profiler)", title=f"Each step's parts, {name}")
ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize="small")
plt.show()

# %%
# Reading a page's tables
# -----------------------
#
# * **step (ms)** and **spread (ms)**: the median of the unprofiled windows and their
#   interquartile range.
# * **busy %** (GPU only): kernel time per step over the unprofiled step. At 85 % or
#   more, **bound** says GPU: most of the step is kernel time, and the ``waiting:``
#   parts show what less CPU work could still save. Below, the GPU waited for the CPU
#   for most of the rest, and the ``waiting:`` parts say what the launching thread did.
# * **profiler stretch**: the profiled step over the unprofiled one. A large stretch
#   means the waiting parts were rescaled a lot: read them as proportions.
# * A comparison line gives both medians, the gap, the paired ratio with its interval,
#   and the parts that moved most, named until they cover 90-110 % of the gap, with what
#   the smaller parts add up to. Where no such list exists (the largest parts cancel, as
#   when compiled code replaces eager operators), the line instead adds up the parts that
#   grew and those that shrank, each side with its largest parts: the two sums make the
#   gap.
#
# Conclusion
# ----------
#
# Timing without the profiler and profiling apart, then checking every row against
# physics, keeps the busy share honest; pairing interleaved windows keeps noise out of a
# verdict; splitting a step into parts that add up to it makes a gap explain itself. The
# three known answers above ran on the machine that built this page.
#
# Further reading
# ---------------
#
# * `torch.profiler <https://docs.pytorch.org/docs/stable/profiler.html>`__: the events
#   this method reads.
# * :ref:`compiling_optimizer_recipe`: the method on an optimizer step and its roofline.
