"""Run every tutorial from a clean compiler state, and record where it ran.

Named in conf.py as ``sphinx_gallery_conf["reset_modules"]``; sphinx-gallery calls
:func:`reset_compiler_state` before and after each example. After an example it writes
``<gallery>/<stem>.verified.json`` beside the generated page: the device, versions, date,
run time and peak memory of that execution. ``sphinxext.stamps`` turns the file into the
page's "Verified on" line and into the build report.
"""

import datetime
import gc
import json
import logging
import platform
import random
import time
import warnings
from pathlib import Path

from sphinxext import memory

_started = {}
_saved_configs = {}


def _config_modules(torch):
    import torch._dynamo.config
    import torch._functorch.config
    import torch._inductor.config

    return {
        "dynamo": torch._dynamo.config,
        "inductor": torch._inductor.config,
        "functorch": torch._functorch.config,
    }


def _reset_torch():
    import numpy as np
    import torch

    configs = _config_modules(torch)
    if not _saved_configs:
        _saved_configs.update({k: m.get_config_copy() for k, m in configs.items()})
    # Put back what the last tutorial changed (e.g. compiled_autograd = True). Only
    # changed keys are touched: reading or setting a deprecated key warns.
    for name, module in configs.items():
        current = module.get_config_copy()
        for key, value in _saved_configs[name].items():
            if current[key] != value:
                setattr(module, key, value)
    torch._dynamo.reset()
    torch.compiler.set_stance("default")
    torch._logging.set_logs()
    # A CUDA build of PyTorch on a GPU-less builder (CI) logs "No CUDA runtime is found,
    # using CUDA_HOME=..." with the builder's paths into whichever page compiles first.
    # It describes the build machine, not the lesson.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default
    # Show every DeprecationWarning and FutureWarning a tutorial triggers: they reach the
    # page's output, where the validator rejects those the tutorial does not mark.
    warnings.simplefilter("default", DeprecationWarning)
    warnings.simplefilter("default", FutureWarning)
    warnings.formatwarning = format_warning
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def format_warning(message, category, filename, lineno, line=None):
    """A warning as Python prints it, naming the file but not the build machine's path to
    it: the validator rejects machine paths, so a tutorial could not show a warning on
    purpose (``intended-warning``) otherwise."""
    return f"{Path(filename).name}:{lineno}: {category.__name__}: {message}\n"


def _device_name():
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor()
    return f"CPU ({model})" if model else "CPU"


def _versions():
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
    }


def _source_and_page(gallery_conf, fname):
    src_root = Path(gallery_conf["src_dir"])
    for src, dst in zip(gallery_conf["examples_dirs"], gallery_conf["gallery_dirs"]):
        if (src_root / src / fname).exists():
            return f"{src}/{fname}", src_root / dst / Path(fname).stem
    raise FileNotFoundError(f"{fname} is in none of {gallery_conf['examples_dirs']}")


def record_path(page_stem):
    return Path(f"{page_stem}.verified.json")


def reset_compiler_state(gallery_conf, fname, when):
    """Reset torch.compile, RNGs and CUDA memory; record the run after each example."""
    if when == "before":
        _reset_torch()
        memory.start_example()
        _started[fname] = time.perf_counter()
        return

    seconds = time.perf_counter() - _started.pop(fname)
    import torch

    source, page_stem = _source_and_page(gallery_conf, fname)
    record = {
        "source": source,
        "page": f"{Path(page_stem).parent.name}/{Path(page_stem).name}.html",
        "seconds": round(seconds, 2),
        "peak_memory_mib": round(memory.example_peak_mib(), 1),
        "peak_memory_kind": "cuda" if torch.cuda.is_available() else "cpu-rss",
        "device": _device_name(),
        **_versions(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
    }
    record_path(page_stem).write_text(json.dumps(record, indent=2) + "\n")
    _reset_torch()
