"""Peak memory of each page, for sphinx-gallery's ``show_memory`` and the run records.

sphinx-gallery calls :class:`PeakMemory` (an instance, named in conf.py) once with a no-op
when an example starts and then around every code block; a page's footer shows the largest
block value less the starting one. The run record (``sphinxext.record``) reads the same
number here (:func:`example_peak_mib`). What the values measure is chosen per example by
``sphinxext.record`` (:func:`start_example`), from the device the page runs on:

* ``"cuda"``: the page runs on this process's GPU: the peak of PyTorch's CUDA allocator.
* ``"rss-peak"``: the page runs on the CPU: the peak resident set of this process during each
  block (the kernel's high-water mark, VmHWM, reset before the block by writing 5 to
  /proc/self/clear_refs), plus the peak of each process the page started that ended during
  the block (its own VmHWM, read every 50 ms). A peak, not the growth of the process's
  lifetime peak: that only grows, so a page needing less than an earlier one read 0.
* ``"rss-sampled"``: the same where the mark cannot be reset: the resident set read every
  20 ms by a thread.
* None, not measured: the page's work runs on several GPUs in other processes (the
  multi-GPU page's NCCL path), or this system has no /proc to read. Every value is then
  NaN and the footer says "not measured" (:func:`setup`), never a made-up 0.

The object holds no state (it is pickled to the workers of ``make html JOBS=2``, each of
which measures its own examples); the state of the running example is this module's, per
process.
"""

import math
import os
import re
import threading
from pathlib import Path

_PROC = Path("/proc/self")
# Seconds between two reads: of this process's resident set where its high-water mark
# cannot be reset, and otherwise of the processes a page started.
_SAMPLE_S = 0.02
_CHILDREN_S = 0.05
_FOOTER = re.compile(r"(\*\*Estimated memory usage:\*\*)\s+nan MB")
_TIMES_ROW = re.compile(r"\bnan MB\b")


class _Example:
    """The running example: what it measures, and its values so far."""

    def __init__(self, kind):
        self.kind = kind
        self.base = None  # the first value (sphinx-gallery's no-op call)
        self.peak = None
        self.known = set(_descendants()) if kind and kind.startswith("rss") else set()


_example = None
_hwm_works = None  # whether /proc/self/clear_refs resets VmHWM here; found on first use


def _cuda():
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda
    return None


def _status_mib(field, pid="self"):
    """A "VmHWM"/"VmRSS" line of /proc/<pid>/status in MiB; None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_hwm():
    """Reset this process's peak resident set to its current one; False where unsupported."""
    try:
        with open(_PROC / "clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _hwm_resets():
    global _hwm_works
    if _hwm_works is None:
        _hwm_works = False
        if _reset_hwm():
            hwm, rss = _status_mib("VmHWM"), _status_mib("VmRSS")
            # Right after a reset the mark is the current resident set (within a page).
            _hwm_works = hwm is not None and rss is not None and hwm - rss < 4
    return _hwm_works


def _trim():
    """Hand the C heap's free pages back to the system (glibc), so that a page reusing what
    an earlier page freed shows in its resident set as new pages, not as nothing."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _descendants(pid=None):
    """The processes below ``pid`` (default: this one), from /proc/<pid>/task/*/children."""
    found, todo = [], [pid or os.getpid()]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(p) for p in f.read().split()]
            except (OSError, ValueError):
                continue
            found += kids
            todo += kids
    return found


def default_kind():
    """What to measure where no sphinxext.record said: this process's GPU if it has one."""
    return rss_kind() if _cuda() is None else "cuda"


def rss_kind():
    if _status_mib("VmRSS") is None:
        return None
    return "rss-peak" if _hwm_resets() else "rss-sampled"


def kind_for(gpus):
    """The kind of measure for a page that uses ``gpus`` GPUs (tools.gallery.run_device):
    0: the resident set; 1: the CUDA allocator; more: not measured (other processes)."""
    if gpus == 0:
        return rss_kind()
    return "cuda" if gpus == 1 and _cuda() is not None else None


class _Watch:
    """A thread that follows, while a block runs, this process's resident set (where its
    high-water mark cannot be reset) and the peak of every process the page started."""

    def __init__(self, example, sample_own):
        self.example = example
        self.sample_own = sample_own
        self.own = _status_mib("VmRSS") or 0.0
        self.children = {}  # pid -> its latest high-water mark (MiB)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _look(self):
        if self.sample_own:
            self.own = max(self.own, _status_mib("VmRSS") or 0.0)
        for pid in _descendants():
            if pid not in self.example.known:
                hwm = _status_mib("VmHWM", pid)
                if hwm is not None:
                    self.children[pid] = max(hwm, self.children.get(pid, 0.0))

    def _run(self):
        interval = _SAMPLE_S if self.sample_own else _CHILDREN_S
        while not self.stop.wait(interval):
            self._look()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self._look()

    def ended_children_mib(self):
        """The peaks of the page's processes that have ended; those still running stay
        followed (into the next block) and are left out."""
        alive = set(_descendants())
        return sum(peak for pid, peak in self.children.items() if pid not in alive)


def _measure(example, func):
    kind = example.kind
    if kind is None:
        return math.nan, func()
    if kind == "cuda":
        cuda = _cuda()
        cuda.reset_peak_memory_stats()
        out = func()
        return cuda.max_memory_allocated() / 2**20, out
    hwm = kind == "rss-peak" and _reset_hwm()
    with _Watch(example, sample_own=not hwm) as watch:
        out = func()
    own = _status_mib("VmHWM") if hwm else watch.own
    return own + watch.ended_children_mib(), out


class PeakMemory:
    """``show_memory``: sphinx-gallery takes a callable object there, not a name. An
    instance with a fixed repr and equality keeps the configuration serializable for
    Sphinx and the same from one build to the next (a function is neither)."""

    def __call__(self, func):
        """Run ``func`` and return ``(peak MiB, result)``, as sphinx-gallery expects."""
        global _example
        if _example is None:  # no sphinxext.record before it (a bare configuration)
            _example = _Example(default_kind())
        if _example.base is None and _example.kind and _example.kind.startswith("rss"):
            _trim()  # the example's first call (sphinx-gallery's no-op): its baseline
        peak, out = _measure(_example, func)
        if _example.base is None:
            _example.base = peak
        if _example.peak is None or peak > _example.peak:
            _example.peak = peak
        return peak, out

    def __repr__(self):
        return "sphinxext.memory.PeakMemory()"

    def __eq__(self, other):
        return type(other) is PeakMemory

    def __hash__(self):
        return hash(PeakMemory)


def start_example(kind):
    """A new example starts; measure it as ``kind`` (:func:`kind_for`)."""
    global _example
    _example = _Example(kind)


def kind():
    """What the running example's peak measures, as its run record names it."""
    return _example.kind if _example is not None else default_kind()


def example_peak_mib():
    """The running example's peak above its start, as its footer shows it; None when not
    measured."""
    if _example is None or _example.kind is None or _example.peak is None:
        return None
    if math.isnan(_example.peak):
        return None
    return max(0.0, _example.peak - _example.base)


def _not_measured(app, docname, source):
    """sphinx-gallery formats a NaN peak as "nan MB": say what it means."""
    if "nan MB" not in source[0]:
        return
    if docname.endswith("sg_execution_times"):
        source[0] = _TIMES_ROW.sub("not measured", source[0])
    else:
        source[0] = _FOOTER.sub(r"\1 not measured", source[0])


def setup(app):
    app.connect("source-read", _not_measured)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
