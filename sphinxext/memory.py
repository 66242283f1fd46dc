"""What a reader needs free to run each page, for sphinx-gallery's ``show_memory`` and the
run records.

sphinx-gallery calls :class:`PeakMemory` (an instance, named in conf.py) once with a no-op
when an example starts and then around every code block; a page's footer shows the largest
block value less the starting one. The run record (``sphinxext.record``) reads the same
numbers here (:func:`example_peak_mib`, :func:`example_gpu_peak_mib`). What they measure is
chosen per example by ``sphinxext.record`` (:func:`start_example`):

* Host memory, ``"pss"``: while a block runs, a thread sums every ``_SAMPLE_S`` seconds
  the proportional set size (``Pss`` of /proc/<pid>/smaps_rollup) of this process and of
  every process the page has started and that is alive at that moment, and keeps the
  largest sum (processes already running when the page started, an earlier page's
  compile workers say, are not the page's and are left out). A page's peak is that total
  less this process's own at the page's start: what the page added. Proportional set
  size splits a page of memory shared by several processes (the libraries every process
  that imports torch maps, pages a forked child shares with its parent) among them, so
  the sum counts it once; processes that run one after another are never added together.
  ``"rss-sampled"``: the same with resident sets, where a kernel has no smaps_rollup
  (shared pages then count once per process: an over-estimate).
* GPU memory, on a page that runs on this process's GPU: the peak of PyTorch's CUDA
  allocator during the page (:func:`example_gpu_peak_mib`), shown after the host figure in
  the footer. A multi-GPU page's GPUs are used by its worker processes: not measured.
* None, not measured: this system has no /proc to read. Every value is then NaN and the
  footer says "not measured" (:func:`setup`), never a made-up 0.

The object holds no state (it is pickled to the workers of ``make html JOBS=2``, each of
which measures its own examples); the state of the running example is this module's, per
process.
"""

import math
import os
import re
import threading
import time
from pathlib import Path

from tools import gallery

# Seconds between two samples at least; a sample that takes long (a large process) stretches
# the gap to ten times its own duration, so that sampling takes under a tenth of a core.
_SAMPLE_S = 0.02
_FOOTER = re.compile(r"(\*\*Estimated memory usage:\*\*)\s+nan MB")
_FOOTER_MB = re.compile(r"(\*\*Estimated memory usage:\*\*\s+[\d.]+ MB)")
_TIMES_ROW = re.compile(r"\bnan MB\b")


class _Example:
    """The running example: what it measures, and its values so far."""

    def __init__(self, kind, gpu=False):
        self.kind = kind
        self.gpu = gpu and _cuda() is not None
        self.base = None  # the first value (sphinx-gallery's no-op call)
        self.peak = None
        self.gpu_peak = None
        self.gpu_base = None
        # Processes already running when the page starts (an earlier page's compile
        # workers, a test runner's helpers) are not the page's: left out.
        self.known = set(_descendants()) if kind else set()


_example = None


def _cuda():
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda
    return None


def _field_mib(path, field):
    """The ``field:`` line (kB) of a /proc file, in MiB; None if unreadable."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _process_mib(kind, pid="self"):
    if kind == "pss":
        return _field_mib(f"/proc/{pid}/smaps_rollup", "Pss")
    return _field_mib(f"/proc/{pid}/status", "VmRSS")


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


def total_mib(kind, known=()):
    """This process's memory and that of every process below it but ``known``, now (MiB).

    The processes are listed before any is read: a process that forks between the two
    then counts its shared pages in its new, halved share, and the child not at all (the
    next sample sees both). Read first, the parent's whole share and the child's half
    would count the shared pages one and a half times."""
    kids = [pid for pid in _descendants() if pid not in known]
    own = _process_mib(kind) or 0.0
    return own + sum(_process_mib(kind, pid) or 0.0 for pid in kids)


def host_kind():
    if _process_mib("pss") is not None:
        return "pss"
    return "rss-sampled" if _process_mib("rss-sampled") is not None else None


def kind_for(gpus):
    """(host kind, whether to follow this process's GPU) for a page on ``gpus`` GPUs
    (tools.gallery.run_device): the GPU of a multi-GPU page is its workers'."""
    return host_kind(), gpus == 1


class _Watch:
    """A thread that samples the total while a block runs and keeps its largest value."""

    def __init__(self, kind, known):
        self.kind, self.known = kind, known
        self.peak = total_mib(kind, known)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _look(self):
        start = time.perf_counter()
        self.peak = max(self.peak, total_mib(self.kind, self.known))
        return time.perf_counter() - start

    def _run(self):
        wait = _SAMPLE_S
        while not self.stop.wait(wait):
            wait = max(_SAMPLE_S, 10 * self._look())

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self._look()


def _measure(example, func):
    if example.kind is None:
        return math.nan, func()
    cuda = _cuda() if example.gpu else None
    if cuda is not None:
        cuda.reset_peak_memory_stats()
    with _Watch(example.kind, example.known) as watch:
        out = func()
    if cuda is not None:
        gpu = cuda.max_memory_allocated() / 2**20
        example.gpu_peak = max(example.gpu_peak or 0.0, gpu)
    return watch.peak, out


class PeakMemory:
    """``show_memory``: sphinx-gallery takes a callable object there, not a name. An
    instance with a fixed repr and equality keeps the configuration serializable for
    Sphinx and the same from one build to the next (a function is neither)."""

    def __call__(self, func):
        """Run ``func`` and return ``(peak MiB, result)``, as sphinx-gallery expects."""
        global _example
        if _example is None:  # no sphinxext.record before it (a bare configuration)
            _example = _Example(host_kind(), gpu=True)
        first = _example.base is None
        if first and _example.kind:
            _trim()  # the example's first call (sphinx-gallery's no-op): its baseline
        peak, out = _measure(_example, func)
        if first:
            _example.base = peak
            _example.gpu_base = _example.gpu_peak
        if _example.peak is None or peak > _example.peak:
            _example.peak = peak
        return peak, out

    def __repr__(self):
        return "sphinxext.memory.PeakMemory()"

    def __eq__(self, other):
        return type(other) is PeakMemory

    def __hash__(self):
        return hash(PeakMemory)


def start_example(spec):
    """A new example starts; measure it as ``spec`` says (:func:`kind_for`)."""
    global _example
    _example = _Example(*spec)


def kind():
    """What the running example's host figure measures, as its run record names it."""
    return _example.kind if _example is not None else host_kind()


def example_peak_mib():
    """The running example's host memory above its start, as its footer shows it; None when
    not measured."""
    if _example is None or _example.kind is None or _example.peak is None:
        return None
    if math.isnan(_example.peak):
        return None
    return max(0.0, _example.peak - _example.base)


def example_gpu_peak_mib():
    """The running example's peak of the CUDA allocator above its start; None when the page
    ran on no GPU of this process."""
    if _example is None or _example.gpu_peak is None:
        return None
    return max(0.0, _example.gpu_peak - (_example.gpu_base or 0.0))


def _footer(app, docname, source):
    """sphinx-gallery formats a NaN peak as "nan MB": say what it means; after the host
    figure, the GPU's, from the page's run record (written before Sphinx reads the page)."""
    if docname.endswith("sg_execution_times"):
        source[0] = _TIMES_ROW.sub("not measured", source[0])
        return
    source[0] = _FOOTER.sub(r"\1 not measured", source[0])
    record = Path(app.srcdir, docname + gallery.RECORD_SUFFIX) if app else None
    if record is None or not record.is_file():
        return
    run = gallery.read_record(record)
    if run.gpu_peak_memory_mib is not None:
        gpu = f"{run.gpu_peak_memory_mib:.0f} MB of GPU memory"
    elif re.match(r"\d+ x ", run.device):  # a multi-GPU page: its workers hold the GPUs
        gpu = "GPU memory of its worker processes not measured"
    else:
        return
    source[0] = _FOOTER_MB.sub(rf"\1 of host memory, {gpu}", source[0])


def setup(app):
    app.connect("source-read", _footer)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
