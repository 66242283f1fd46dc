"""Peak-memory measurement for sphinx-gallery's ``show_memory``.

sphinx-gallery calls :class:`PeakMemory` (an instance, named in conf.py) around every code block and shows the largest
value in each page's footer and on the execution-times page. On a CUDA machine the value
is the peak of PyTorch's CUDA allocator; without CUDA it is the growth of the build
process's peak resident set size. The running maximum for the current example is kept
here so that the run record (``sphinxext.record``) reads the same number as the
execution-times page: the peak above what was already allocated when the example started
(sphinx-gallery reports it that way too).
"""

import resource
import sys

_example_peak_mib = 0.0
_example_base_mib = 0.0


def _cuda():
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda
    return None


def _max_rss_mib():
    # ru_maxrss is KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class PeakMemory:
    """``show_memory``: sphinx-gallery takes a callable object there, not a name. An
    instance with a fixed repr and equality keeps the configuration serializable for
    Sphinx and the same from one build to the next (a function is neither)."""

    def __call__(self, func):
        """Run ``func`` and return ``(peak MiB, result)``, as sphinx-gallery expects."""
        global _example_peak_mib
        cuda = _cuda()
        if cuda is not None:
            cuda.reset_peak_memory_stats()
            out = func()
            peak = cuda.max_memory_allocated() / 2**20
        else:
            before = _max_rss_mib()
            out = func()
            peak = _max_rss_mib() - before
        _example_peak_mib = max(_example_peak_mib, peak)
        return peak, out

    def __repr__(self):
        return "sphinxext.memory.PeakMemory()"

    def __eq__(self, other):
        return type(other) is PeakMemory

    def __hash__(self):
        return hash(PeakMemory)


def kind():
    """What the peak measures, as a run record names it."""
    return "cuda" if _cuda() is not None else "rss-growth"


def start_example():
    global _example_peak_mib, _example_base_mib
    cuda = _cuda()
    _example_base_mib = cuda.memory_allocated() / 2**20 if cuda is not None else 0.0
    _example_peak_mib = _example_base_mib


def example_peak_mib():
    """Peak memory of the example since start_example(), above its starting point."""
    return max(0.0, _example_peak_mib - _example_base_mib)
