"""Seconds each page spends under ``torch.profiler``, for its run record.

The pages measure the GPU's busy share with ``torch.profiler``, which costs build time: its
start, the profiled steps, and reading its events. While a page runs, ``profile``'s
``__enter__`` to ``__exit__`` and the methods that read its results are timed (nested calls
once); ``sphinxext.record`` stores the total. Processes that a page starts (the distributed
page's workers) are not seen here.
"""

import functools
import time

_state = {"depth": 0, "start": 0.0, "total": 0.0}
_METHODS = ("events", "key_averages", "export_chrome_trace")


def _begin():
    if _state["depth"] == 0:
        _state["start"] = time.perf_counter()
    _state["depth"] += 1


def _end():
    _state["depth"] -= 1
    if _state["depth"] == 0:
        _state["total"] += time.perf_counter() - _state["start"]


def _timed(method, begin=True, end=True):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        if begin:
            _begin()
        try:
            return method(*args, **kwargs)
        finally:
            if end:
                _end()

    wrapper.site_timed = True
    return wrapper


def start_example():
    """Zero the clock; time torch.profiler.profile from now on (once per process)."""
    from torch.profiler import profile

    if not getattr(profile.__enter__, "site_timed", False):
        profile.__enter__ = _timed(profile.__enter__, end=False)
        profile.__exit__ = _timed(profile.__exit__, begin=False)
        for name in _METHODS:
            setattr(profile, name, _timed(getattr(profile, name)))
    _state.update(depth=0, total=0.0)


def example_seconds():
    return _state["total"]
