"""The site's measurement core: step times, the GPU's busy share, and gaps taken apart.

Every tutorial measures with this one module; the recipe "Measuring a compiled step"
teaches it and checks it against known answers. The site writes this file into each
downloaded script and notebook, so a download runs with no other file beside it.

* :func:`compare` times several variants of a step in interleaved windows (A, B, C, A, B,
  C, ...) without the profiler, then profiles a few steps of each. Each :class:`Row` holds
  the median step time, the windows' spread, and the step split into parts that add up to
  it: on a GPU, kernel time by family (the busy time) plus the time the GPU waited, charged
  to what the launching thread did meanwhile; on a CPU, the main thread's time by family.
* The busy share is the GPU's kernel time per step (the union of kernel intervals, so two
  streams' overlap counts once) over the step time measured *without* the profiler.
  :meth:`Row.check` tests it against physics: at most 100 %, and busy time at least the
  roofline time when one is given.
* :meth:`Results.versus` judges two variants by their paired windows (the ratio and an
  interval on it) and, when they differ, prints the parts of the gap.
* :func:`cold_compile` times a first call from an empty compile cache and proves it was one.
* :func:`watch_cxx` counts the seconds the C++ compiler runs, apart from the rest of a compile.
* :func:`require` stops a page at its first cell, in one line, where it cannot run.
* :func:`headline` keeps the few results a page's conclusion rests on, for the site's run
  records (each page's "across machines" table).
"""

import bisect
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

# The profiler's library logs each start and stop; it reads this when torch loads, which
# in a download is here, before the page's own imports.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function

# Rows whose numbers physics rules out; the build fails on any (a bug in the method).
PHYSICS_FAILURES = []
BUSY_TOLERANCE = 5.0  # %: kernel timestamps carry a few microseconds of error each
# each variant is profiled this many times, interleaved with the others
PROFILE_ROUNDS = 2

# GPU kernels by family, first match wins (names as the profiler shows them).
KERNEL_FAMILIES = [
    ("communication", r"nccl"),
    ("compiled kernels", r"^triton_"),  # Inductor's, whatever operator they came from
    ("attention", r"flash|fmha|attention|sdpa|efficient_attention"),
    ("matmul", r"gemm|gemv|nvjet|xmma|cutlass|cublas|conv(?!ert)|winograd|implicit"),
    # torch._foreach_copy_ runs as a multi-tensor kernel too, as an optimizer's do: CUDA
    # graphs copy their inputs into place with it
    ("copies", r"CopyFunctor"),
    ("optimizer", r"multi_tensor|fused_adam|FusedAdam|adam|_foreach"),
    ("copies", r"^Memcpy|^Memset|copy|CatArray"),
    # a plain identifier: a hand-written Triton kernel (or any extern "C" one); ATen's
    # kernels show as demangled C++ ("void at::native::...")
    ("hand-written kernels", r"^[A-Za-z_]\w*$"),
    ("eager elementwise", r"elementwise|vectorized|unrolled|reduce|softmax|norm|index"),
]
# What a thread was doing, by the innermost range or operator running on it.
CPU_FAMILIES = [
    ("guards", r"TorchDynamo Cache Lookup"),
    # an AOTInductor package records no operators: pages name its call with this range
    ("compiled code", r"CompiledFxGraph|^AOTInductor package"),
    ("compiled-code entry", r"Torch-Compiled Region|CompiledFunction|AOTDispatcher"),
    ("kernel launches", r"LaunchKernel|GraphLaunch|MemcpyAsync|MemsetAsync|cuLaunch"),
    ("synchronize", r"Synchronize|cudaEventQuery|cudaStreamWait"),
    # FSDP2's ranges named after a collective, or waiting for one, are communication (the
    # wait for the other rank included); its other ranges are its hooks' own work
    (
        "communication",
        r"^FSDP::(all_gather\b|post_backward_reduce|post_backward_rs_wait)",
    ),
    ("FSDP2 hooks", r"^FSDP::"),
    ("communication", r"nccl|c10d|gloo|all_reduce|allreduce|reduce_scatter|all_gather"),
    ("attention", r"scaled_dot_product|flash|efficient_attention"),
    # frozen CPU code calls oneDNN's and MKL's operators directly
    (
        "matmul",
        r"aten::(mm|addmm|bmm|baddbmm|matmul|linear|addmv|mv|dot|.*conv)|^mkldnn::|^mkl::",
    ),
    ("copies", r"aten::_foreach_copy_$"),
    ("optimizer", r"Optimizer\.|_foreach_|_fused_adam"),
    ("autograd engine", r"autograd::engine"),
    ("copies", r"aten::(copy_|_to_copy|to|clone|contiguous|cat|stack)$"),
    ("eager operators", r"^aten::|^cuda|^cu"),
]
PYTHON = "Python and other host work"  # time no operator or range recorded
WINDOW = "measured steps"


def _family(name, families, default):
    for family, pattern in families:
        if re.search(pattern, name):
            return family
    return default


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _frames():
    from torch._dynamo.utils import counters

    # a fullgraph=True compile counts no frame; every compile counts a graph
    return counters["frames"]["total"], counters["stats"]["unique_graphs"]


def _union(spans):
    """Length of the union of (start, end) intervals, and the gaps between them."""
    total, reach, gaps = 0.0, None, []
    for start, end in sorted(spans):
        if reach is None or start > reach:
            if reach is not None:
                gaps.append((reach, start))
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total, gaps


def _close_until(stack, segments, t):
    """Pop the events that ended by t, adding the time each had left as its own."""
    while stack and stack[-1][0] <= t:
        end, fam, mark = stack.pop()
        if end > mark:
            segments.append((mark, end, fam))
        if stack:
            stack[-1][2] = max(stack[-1][2], end)


def _self_segments(events):
    """{thread: (starts, segments)}: each stretch of a thread's time as (start, end,
    family of the innermost event running then), in order; time with no event is absent."""
    by_thread = {}
    for e in events:
        if e.time_range.end > e.time_range.start:
            by_thread.setdefault(e.thread, []).append(e)
    out = {}
    for thread, evs in by_thread.items():
        evs.sort(key=lambda e: (e.time_range.start, -e.time_range.end))
        segments, stack = [], []  # stack entries: [end, family, time accounted up to]
        for e in evs:
            start, end = e.time_range.start, e.time_range.end
            _close_until(stack, segments, start)
            if stack:
                if start > stack[-1][2]:
                    segments.append((stack[-1][2], start, stack[-1][1]))
                stack[-1][2] = max(stack[-1][2], start)
                end = min(end, stack[-1][0])  # a child ends inside its parent
            stack.append([end, _family(e.name, CPU_FAMILIES, PYTHON), start])
        _close_until(stack, segments, float("inf"))
        out[thread] = ([s for s, _, _ in segments], segments)
    return out


def _at(timeline, t):
    """The segment of a thread's timeline running at time t, or None."""
    starts, segments = timeline
    i = bisect.bisect_right(starts, t) - 1
    return segments[i] if i >= 0 and segments[i][1] > t else None


def _charge(timeline, lo, hi, parts, scale=1.0):
    """Add each family's time within [lo, hi] to parts; time with no event to PYTHON."""
    starts, segments = timeline
    covered = 0.0
    i = max(0, bisect.bisect_right(starts, lo) - 1)
    while i < len(segments) and segments[i][0] < hi:
        start, end, fam = segments[i]
        i += 1
        if end > lo:
            ms = min(end, hi) - max(start, lo)
            parts[fam] = parts.get(fam, 0.0) + ms * scale
            covered += ms
    parts[PYTHON] = parts.get(PYTHON, 0.0) + (hi - lo - covered) * scale


@dataclass
class Row:
    """One variant: its unprofiled step time, and the parts that add up to it (ms)."""

    name: str
    ms: float  # median of the windows, ms per step, no profiler
    spread: float  # interquartile range of the windows, ms
    windows: list
    profiled_ms: float  # ms per step under the profiler
    busy_ms: float = None  # GPU kernel time per step (None on a CPU)
    issue_ms: float = None  # host time to issue one step without waiting (GPU only)
    parts: dict = field(default_factory=dict)  # part -> ms per step; sums to ms
    kernels: dict = field(
        default_factory=dict
    )  # GPU: kernel family -> kernels per step
    said_unsteady: bool = field(default=False, repr=False, compare=False)

    @property
    def busy(self):
        """GPU busy share of the unprofiled step, %, or None on a CPU."""
        return None if self.busy_ms is None else 100 * self.busy_ms / self.ms

    @property
    def bound(self):
        return None if self.busy is None else "GPU" if self.busy >= 85 else "CPU"

    @property
    def stretch(self):
        """How much the profiler slowed the step (profiled / unprofiled)."""
        return self.profiled_ms / self.ms

    def check(self, roofline_ms=None):
        """Test the row against physics; print and keep any failure. Returns the failures."""
        failures = []
        if self.busy is not None and self.busy > 100 + BUSY_TOLERANCE:
            failures.append(f"busy {self.busy:.0f} % is above 100 %")
        if roofline_ms is not None and self.busy_ms is not None:
            if self.busy_ms < roofline_ms * (1 - BUSY_TOLERANCE / 100):
                failures.append(
                    f"busy time {self.busy_ms:.3f} ms is shorter than the roofline's "
                    f"{roofline_ms:.3f} ms"
                )
        for name, ms in self.parts.items():
            if abs(ms) > self.ms * (1 + BUSY_TOLERANCE / 100):
                failures.append(f"part {name} {ms:.3f} ms is longer than the step")
        # the profiler only adds work: a row profiled faster was timed on a machine
        # whose speed changed. Said once per row (a page may check a row again).
        if self.stretch < 1 - BUSY_TOLERANCE / 100 and not self.said_unsteady:
            self.said_unsteady = True
            print(
                f"Unsteady, {self.name}: its profiled steps ran faster than its timed ones "
                f"(stretch {self.stretch:.2f}), so the machine's speed changed between "
                f"them; its {'busy share and ' * (self.busy is not None)}parts mix two "
                "states (rerun it on a quiet host)"
            )
        for text in failures:
            text = f"{self.name}: {text}"
            if text not in PHYSICS_FAILURES:
                print(f"Physics check failed, {text}")
                PHYSICS_FAILURES.append(text)
        return failures


class Results(dict):
    """{variant name: Row}, with the paired windows that compare them."""

    roofline_ms = bytes_per_ms = copy = None  # set by compare(roofline_bytes=...)

    def cells(self, name):
        """The standard cells of a row: step, spread, and on a GPU busy %, bound, stretch."""
        r = self[name]
        gpu = [] if r.busy is None else [r.busy, r.bound, r.stretch]
        return [r.ms, r.spread, *gpu]

    def headers(self):
        gpu = any(r.busy is not None for r in self.values())
        more = ["busy %", "bound", "profiler stretch"] if gpu else []
        return ["step (ms)", "spread (ms)", *more]

    def formats(self):
        gpu = any(r.busy is not None for r in self.values())
        return [".3f", ".3f", *([".0f", "", ".2f"] if gpu else [])]

    def ratio(self, name, ref):
        """Median ratio of name's windows to ref's, paired by round, and a ~96 % interval."""
        ratios = sorted(a / b for a, b in zip(self[name].windows, self[ref].windows))
        n = len(ratios)
        # the order statistics that bracket the median with >= 95 % confidence (sign test)
        k, mass = 0, 0.0
        while mass + math.comb(n, k) / 2**n <= 0.025:
            mass += math.comb(n, k) / 2**n
            k += 1
        k = max(k, 1)  # few windows: the extremes, whose confidence is below 95 %
        mass = sum(math.comb(n, i) for i in range(k)) / 2**n
        return statistics.median(ratios), ratios[k - 1], ratios[n - k], 1 - 2 * mass

    def moved(self, name, ref):
        """Each part's change from ref's step to name's, ms per step."""
        r, r0 = self[name], self[ref]
        return {
            k: r.parts.get(k, 0.0) - r0.parts.get(k, 0.0) for k in r.parts | r0.parts
        }

    def against(self, ref, label=None, headlines=False):
        """One line: which variants are faster than ref, tied with it, slower (by their
        paired intervals), each with its median ratio, a slower one with its gap in ms and
        the part that grew most when that part is most of the gap; an empty group is left
        out. headlines=True keeps each variant's comparison with ref as a headline result."""
        groups = {"faster than": [], "tied with": [], "slower than": []}
        for name in self:
            if name != ref:
                mid, lo, hi, _ = self.ratio(name, ref)
                word = (
                    "faster than"
                    if hi < 1
                    else "slower than"
                    if lo > 1
                    else "tied with"
                )
                grew = ""
                if word == "slower than":  # the gap, and the part that grew most where
                    gap = self[name].ms - self[ref].ms  # it alone is most of the gap
                    moved = self.moved(name, ref)
                    top = max(moved, key=moved.get, default=None)
                    grew = f", {gap:+.3f} ms"
                    if top and 0.5 <= moved[top] / gap <= 1.5:
                        grew += f"; {top} {moved[top]:+.3f} ms"
                    elif top:
                        grew += f"; interval {lo:.2f}-{hi:.2f}x, its parts cancel"
                groups[word].append(f"{name} ({mid:.2f}x{grew})")
                if headlines:
                    _headline_ratio(f"{name} vs {ref}", mid, lo, hi)
        ref = label or ref
        return "; ".join(f"{k} {ref}: {', '.join(v)}" for k, v in groups.items() if v)

    def versus(self, name, ref, label="", headline_as=None):
        """The line that compares two variants, and the parts of the gap if they differ.
        headline_as: keep ref's time over name's (a speed-up) as a headline result."""
        r, r0 = self[name], self[ref]
        gap = r.ms - r0.ms
        mid, lo, hi, conf = self.ratio(name, ref)
        if headline_as:
            _headline_ratio(headline_as, mid, lo, hi)
        lo_, hi_ = (_digits(x) for x in (lo, hi))
        head = (
            f"{label}{name} vs {ref}: {r.ms:.3f} vs {r0.ms:.3f} ms ({gap:+.3f} ms; "
            f"{mid:.2f}x, {100 * conf:.0f} % interval {lo_}-{hi_}x)"
        )
        if not lo <= r.ms / r0.ms <= hi:  # the windows' medians against their pairs
            head += (
                f" [the medians' ratio, {r.ms / r0.ms:.2f}x, is outside the paired "
                "interval: the machine's speed changed between rounds; the verdict is the "
                "interval's, and the parts below are sized by the medians]"
            )
        if lo <= 1 <= hi:
            return f"{head}: a tie, the interval holds 1.00x"
        moved = self.moved(name, ref)
        big = sorted(moved.items(), key=lambda kv: -abs(kv[1]))
        named = [(k, ms) for k, ms in big[:8] if abs(ms) >= 0.03 * abs(gap)]

        def within(parts):  # the house rule: named parts within 10 % of the gap
            return 0.9 <= sum(ms for _, ms in parts) / gap <= 1.1

        while len(named) < min(12, len(big)) and not within(named):
            named.append(big[len(named)])  # named is a prefix of big: the next largest
        residual = gap - sum(ms for _, ms in named)
        busy = ""
        if r.busy_ms is not None and r0.busy_ms is not None:
            d = r.busy_ms - r0.busy_ms
            busy = f" GPU busy {d:+.3f} ms, GPU waiting {gap - d:+.3f} ms."
        head = f"{head}: {'slower' if gap > 0 else 'faster'}.{busy}"
        if within(named):
            words = "; ".join(f"{k} {ms:+.3f} ms" for k, ms in named)
            return (
                f"{head} Parts that moved most: {words}: "
                f"{100 * (gap - residual) / gap:.0f} % of the gap; "
                f"smaller parts {residual:+.3f} ms"
            )
        # The largest parts cancel (one kind of work replaced another) or the gap is spread
        # thin: every part is counted on the side it moved to; the sides add up to the gap.
        sides = []
        for word, sign in (("grew", 1), ("shrank", -1)):
            side = [kv for kv in big if sign * kv[1] > 0]
            if side:
                top = ", ".join(f"{k} {ms:+.3f}" for k, ms in side[:4])
                total = sum(ms for _, ms in side)
                sides.append((total, f"those that {word} {total:+.3f} ms ({top})"))
        total = sum(ms for ms, _ in sides)
        return (
            f"{head} Parts by the way they moved: "
            + "; ".join(text for _, text in sides)
            + f": together {100 * total / gap:.0f} % of the gap"
        )


def _headline_ratio(label, mid, lo, hi):
    """Keep a comparison as a headline: a speed-up (ref's time over name's) when the
    interval lies below 1, "x slower" (name's over ref's) above 1, else a tie."""
    if hi < 1:
        headline(label, 1 / mid, "x speed-up")
    elif lo > 1:
        headline(label, mid, "x slower")
    else:
        headline(label, 1 / mid, "x, a tie")


def _digits(x):
    """x with two decimals, or as many more (up to five) as keep it off 1.00 when it is
    not exactly 1: a bound printed as 1.00 would read as a tie."""
    digits = 2
    while digits < 5 and x != 1 and round(x, digits) == 1:
        digits += 1
    return f"{x:.{digits}f}"


def _mean(values):
    """The mean of equal-shaped profiles: tuples, dicts (a key one lacks counts as 0) and
    numbers, nested; None stays None."""
    first = values[0]
    if first is None:
        return None
    if isinstance(first, tuple):
        return tuple(_mean(list(v)) for v in zip(*values))
    if isinstance(first, dict):
        keys = dict.fromkeys(k for v in values for k in v)
        return {k: _mean([v.get(k, 0.0) for v in values]) for k in keys}
    return sum(values) / len(values)


def _profile_row(step, steps, device):
    """Profile `steps` calls: (profiled ms per step, busy ms per step, parts per step)."""
    kinds = [ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * (device == "cuda")
    _sync(device)
    with warnings.catch_warnings():  # the profiler warns as it stops and as it reads
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=kinds) as prof:
            step()  # the profiler's first step pays its own start-up; not counted
            _sync(device)
            with record_function(WINDOW):
                for _ in range(steps):
                    step()
                _sync(device)
        events = prof.events()
    window = next(e for e in events if e.name == WINDOW and e.device_type.name == "CPU")
    lo, hi = window.time_range.start, window.time_range.end
    cpu = [e for e in events if e.device_type.name == "CPU" and e.name != WINDOW]
    segments = _self_segments(cpu)
    parts = {}
    to_ms = 1e-3 / steps  # the profiler's times are microseconds
    if device != "cuda":  # the main thread's time, by family
        main = segments.get(window.thread, [])
        _charge(main, lo, hi, parts, to_ms)
        return (hi - lo) * to_ms, None, parts
    kernels = {}  # (start, end) clipped to the window -> family; a kernel listed twice once
    for e in events:
        start, end = max(e.time_range.start, lo), min(e.time_range.end, hi)
        if e.device_type.name == "CUDA" and not e.is_user_annotation and end > start:
            kernels[(e.name, start, end)] = _family(
                e.name, KERNEL_FAMILIES, "other kernels"
            )
    spans = [(s, t) for _, s, t in kernels]
    busy, gaps = _union(spans)
    if spans:
        gaps = [(lo, min(s for s, _ in spans))] + gaps
        gaps.append((max(t for _, t in spans), hi))
    else:
        gaps = [(lo, hi)]
    for (_, start, end), fam in kernels.items():
        parts["GPU: " + fam] = parts.get("GPU: " + fam, 0.0) + (end - start) * to_ms
    overlap = busy * to_ms - sum(parts.values())
    if abs(overlap) > 1e-6:
        parts["GPU: kernels overlapping (counted once)"] = overlap
    idle = {}
    launches = sorted((e.time_range.start, e.thread) for e in cpu if _is_launch(e.name))
    starts = [t for t, _ in launches]
    op_threads = {e.thread for e in cpu if not _is_launch(e.name)}
    for g0, g1 in gaps:
        if g1 > g0:
            thread = _launcher(
                segments, op_threads, launches, starts, g1, window.thread
            )
            _charge(segments.get(thread, ([], [])), g0, g1, idle)
    count = {}
    for fam in kernels.values():
        count[fam] = count.get(fam, 0) + 1 / steps
    return (hi - lo) * to_ms, busy * to_ms, parts | {"idle": idle, "kernels": count}


_LAUNCH = re.compile(dict(CPU_FAMILIES)["kernel launches"])


def _is_launch(name):
    return _LAUNCH.search(name) is not None


def _launcher(segments, op_threads, launches, starts, t, default):
    """The thread that launched the kernel that ended a wait at t: that of the last launch
    before t, or, where launches carry a thread of their own, the thread running an
    operator or range (not bare Python) at the moment of that launch."""
    i = bisect.bisect_right(starts, t) - 1
    if i < 0:
        return default
    when, thread = launches[i]
    if thread in op_threads:
        return thread
    busy = [
        (seg[0], th)
        for th, timeline in segments.items()
        if (seg := _at(timeline, when)) is not None and seg[2] != PYTHON
    ]
    return max(busy)[1] if busy else default


def compare(
    steps,
    device,
    rounds=9,
    window_ms=10.0,
    profiled=10,
    max_calls=200,
    calls=None,
    roofline_ms=None,
    roofline_bytes=None,
):
    """Time each step (a dict of name -> callable) in interleaved windows, then profile it.

    Each variant is warmed up (3 calls), then every round runs one window of each variant,
    in an order that rotates. A window is back-to-back calls, enough for about
    `window_ms`, or `calls` of them (processes that must run the same steps, such as the
    ranks of a distributed job, pass it). Nothing may compile while timing (asserted).
    Every row is checked against physics (:meth:`Row.check`), with ``roofline_ms`` (the
    time to move the bytes a step must move, at copy speed) where given.
    ``roofline_bytes`` (bytes a step must read plus write) instead times a large copy as
    one more variant, in the same interleaved windows, and derives the roofline from it:
    the step and its roofline are measured under the same conditions of the machine.
    Returns :class:`Results`; with ``roofline_bytes``, its ``roofline_ms``,
    ``bytes_per_ms`` and ``copy`` (the copy's Row) are set.
    """
    assert roofline_ms is None or roofline_bytes is None, "give one roofline"
    copy_bytes = None
    if roofline_bytes is not None:
        copy, copy_bytes = _copy_step(device)
        steps = {**steps, COPY: copy}
    fixed, calls = calls, {}
    for name, step in steps.items():
        for _ in range(3):
            step()
        _sync(device)
        start = time.perf_counter()
        step()
        _sync(device)
        once = (time.perf_counter() - start) * 1e3
        # a GPU idles while a window's first step is issued: at least 3 steps share it
        calls[name] = fixed or max(
            3 if device == "cuda" else 1,
            min(max_calls, math.ceil(window_ms / max(once, 1e-3))),
        )
    frames = _frames()
    windows = {name: [] for name in steps}
    names = list(steps)
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            _sync(device)
            start = time.perf_counter()
            for _ in range(calls[name]):
                steps[name]()
            _sync(device)
            windows[name].append((time.perf_counter() - start) * 1e3 / calls[name])
    issue = {}
    for name, step in steps.items():  # a cross-check without the profiler (GPU only)
        if device == "cuda":
            _sync(device)
            start = time.perf_counter()
            for _ in range(calls[name]):
                step()
            issue[name] = (time.perf_counter() - start) * 1e3 / calls[name]
            _sync(device)
    # Profiled in PROFILE_ROUNDS interleaved rounds, as the windows are timed: rows whose
    # parts are compared were profiled under the same conditions of the machine.
    profiles = {name: [] for name in steps}
    for _ in range(PROFILE_ROUNDS):
        for name, step in steps.items():
            n = max(3, math.ceil(min(profiled, calls[name]) / PROFILE_ROUNDS))
            profiles[name].append(_profile_row(step, n, device))
    results = Results()
    for name in steps:
        w = windows[name]
        # the middle quartile of the exclusive method is the median
        q1, median, q3 = statistics.quantiles(w, n=4) if len(w) > 1 else (w[0],) * 3
        profiled_ms, busy_ms, parts = _mean(profiles[name])
        row = Row(name, median, q3 - q1, w, profiled_ms, busy_ms, issue.get(name))
        if busy_ms is None:  # the main thread's parts, scaled to the unprofiled step
            row.parts = {k: v * median / profiled_ms for k, v in parts.items()}
        else:  # kernel time as measured; the wait, in the profiled proportions
            idle, row.kernels = parts.pop("idle"), parts.pop("kernels")
            wait, total = median - busy_ms, sum(idle.values()) or 1.0
            row.parts = parts | {
                f"waiting: {k}": wait * v / total for k, v in idle.items()
            }
        results[name] = row
    if copy_bytes is not None:
        results.copy = results.pop(COPY)
        results.bytes_per_ms = copy_bytes / results.copy.ms
        roofline_ms = results.roofline_ms = roofline_bytes / results.bytes_per_ms
        results.copy.check()
    for row in results.values():
        row.check(roofline_ms)
    assert _frames() == frames, "something compiled while the steps were timed"
    return results


COPY = "copy (roofline)"


def _copy_step(device, mib=None):
    """A large on-device copy, and the bytes it reads plus writes."""
    n = (mib or (1024 if device == "cuda" else 128)) * 2**20 // 4
    src = torch.rand(n, device=device)
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)), 2 * src.nbytes


def copy_bandwidth(device, mib=None):
    """Bytes per ms (read + written) of a large on-device copy: the copy roofline. To set a
    step against it, prefer ``compare(..., roofline_bytes=...)``, which times the copy in
    the same windows as the step."""
    step, nbytes = _copy_step(device, mib)
    row = compare({"copy": step}, device, rounds=5)["copy"]
    return nbytes / row.ms, row


@dataclass
class Cold:
    seconds: float  # the first call, wall time
    compiling: float  # of which Dynamo, AOTAutograd and Inductor compiled
    graphs: int  # graphs compiled
    result: object
    cxx: float = (
        None  # of the wall time, seconds the C++ compiler ran (watch_cxx; else None)
    )


def cold_compile(fn, *args, device="cpu", reset=True, **kwargs):
    """Call fn once from an empty compile cache; assert that it compiled at least one graph
    and that the cache never hit. reset=False keeps what the process compiled before
    (a ladder of variants that builds on earlier ones); the figures are this call's alone."""
    from torch._dynamo.utils import compilation_time_metrics, counters
    from torch._inductor.utils import fresh_cache

    if reset:  # as a new process: nothing compiled, every counter at zero
        torch._dynamo.reset()
        counters.clear()
    keys = ("fxgraph_cache_miss", "fxgraph_cache_bypass", "fxgraph_cache_hit")
    before = [counters["inductor"][k] for k in keys] + [
        counters["stats"]["unique_graphs"]
    ]
    done = len(compilation_time_metrics.get("_compile.compile_inner", []))
    with fresh_cache():
        start, wall = time.perf_counter(), time.time()
        result = fn(*args, **kwargs)
        _sync(device)
        seconds = time.perf_counter() - start
    cxx = _CXX.seconds(wall, time.time()) if _CXX else None
    after = [counters["inductor"][k] for k in keys] + [
        counters["stats"]["unique_graphs"]
    ]
    miss, bypass, hit, graphs = (a - b for a, b in zip(after, before))
    # a graph the cache cannot hold (foreach_map's, for one) is a bypass, not a miss
    assert miss + bypass > 0 and hit == 0, dict(zip(keys, (miss, bypass, hit)))
    assert graphs > 0, "nothing was compiled"
    compiling = sum(compilation_time_metrics.get("_compile.compile_inner", [])[done:])
    return Cold(seconds, compiling, graphs, result, cxx)


class CxxWatch:
    """The C++ compiler's runs, logged by a wrapper that Inductor calls in its place."""

    def __init__(self, real):
        base = Path(tempfile.gettempdir()) / f"measure-cxx-{os.getuid()}"
        folder = base / hashlib.sha1(real.encode()).hexdigest()[:10]
        if Path(real).parent.parent == base:  # already the wrapper (a child process)
            folder, real = Path(real).parent, self._real(Path(real))
        folder.mkdir(parents=True, exist_ok=True)
        # the wrapper keeps the compiler's own name: Inductor picks flags by that name
        self.path = folder / Path(real).name
        # each process tree logs to its own file (set when this module loads, so compile
        # workers and child processes inherit it); others' runs never count here
        self.log = Path(os.environ[CXX_LOG])
        script = (
            "#!/bin/sh\n"
            "s=$(date +%s.%N)\n"
            f'"{real}" "$@"\n'
            "r=$?\n"
            f'[ -n "${CXX_LOG}" ] && echo "$s $(date +%s.%N)" >> "${CXX_LOG}"\n'
            "exit $r\n"
        )
        if not self.path.exists() or self.path.read_text() != script:
            tmp = folder / f".{os.getpid()}"
            tmp.write_text(script)
            tmp.chmod(0o755)
            tmp.replace(self.path)

    @staticmethod
    def _real(wrapper):
        return re.search(r'^"(.*)" "\$@"$', wrapper.read_text(), re.M).group(1)

    def seconds(self, start, end):
        """Wall seconds between two time.time() readings during which a compiler ran: in
        this process, its compile workers, or any process it started (each process tree
        logs to its own file, so other programs' runs never count)."""
        if not self.log.exists():
            return 0.0
        spans = []
        for line in self.log.read_text().split("\n"):
            try:
                s, e = map(float, line.split())
            except ValueError:
                continue  # a line another process is still writing
            if e > start and s < end:
                spans.append((max(s, start) * 1e3, min(e, end) * 1e3))
        return _union(spans)[0] / 1e3


_CXX = None
_CXX_BEFORE = []  # CXX as it was before the first watch_cxx (None: unset)
CXX_LOG = "MEASURE_CXX_LOG"
os.environ.setdefault(
    CXX_LOG, str(Path(tempfile.gettempdir()) / f"measure-cxx-{os.getpid()}.log")
)


def watch_cxx():
    """Have Inductor call the C++ compiler through a wrapper that logs each run, so that
    a compile's time in the compiler can be told apart (Linux; elsewhere returns None).
    The wrapper is also named in CXX, for the processes this one starts. Call it before
    the compiles it should see; Cold.cxx and CxxWatch.seconds read the log."""
    global _CXX
    from torch._inductor import config
    from torch._inductor.cpp_builder import get_cpp_compiler

    if not sys.platform.startswith("linux"):
        return None
    try:
        command = shlex.split(get_cpp_compiler())
    except Exception:  # no compiler: the page's own checks say so
        return None
    real = shutil.which(command[0]) if len(command) == 1 else None
    if real is None:  # a launcher such as "ccache g++" is left alone
        return None
    if not _CXX_BEFORE:
        _CXX_BEFORE.append(os.environ.get("CXX"))
    if _CXX is None or Path(real) != _CXX.path:
        _CXX = CxxWatch(real)
    config.cpp.cxx = (None, str(_CXX.path))  # as a process started with CXX set has it
    os.environ["CXX"] = str(_CXX.path)
    return _CXX


def unwatch_cxx():
    """Undo watch_cxx in this process (CXX as it was, nothing watched): the site's build
    calls it between pages, so a page that did not ask for the compiler's seconds gets
    none. Inductor's own configuration is the caller's to restore."""
    global _CXX
    _CXX = None
    if _CXX_BEFORE:
        before = _CXX_BEFORE.pop()
        if before is None:
            os.environ.pop("CXX", None)
        else:
            os.environ["CXX"] = before


def require(linux=False, cxx=False, triton=False, gpus=0):
    """Stop at the page's first cell, with one line, where the page cannot run."""
    missing = []
    if linux and not sys.platform.startswith("linux"):
        missing.append(f"Linux (this is {sys.platform})")
    if triton:
        try:
            import triton  # noqa: F401
        except ImportError:
            missing.append("Triton (pip install triton; wheels exist for Linux)")
    if cxx:
        from torch._inductor.cpp_builder import get_cpp_compiler

        try:
            get_cpp_compiler()
        except Exception:
            missing.append("a C++ compiler (install g++ or clang++, or set CXX)")
    if gpus and torch.cuda.device_count() < gpus:
        missing.append(f"{gpus} CUDA GPUs (found {torch.cuda.device_count()})")
    if missing:
        raise SystemExit("This page needs " + ", ".join(missing) + ".")


HEADLINES = {}  # label -> [value, unit]: this run's headline results
HEADLINES_FILE = "MEASURE_HEADLINES"  # where the site's build or verifier collects them


def headline(label, value, unit=""):
    """Keep one of the few results a page's conclusion rests on (a speed-up, a share of
    the roofline, tokens/s, a compile time). It prints nothing: the site's run records
    keep it, to show the page's results across the machines that ran it."""
    HEADLINES[label] = [round(float(value), 4), unit]
    path = os.environ.get(HEADLINES_FILE)
    if path:
        Path(path).write_text(json.dumps(HEADLINES))
