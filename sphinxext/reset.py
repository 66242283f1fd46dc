"""Run every tutorial from a clean compiler state.

Named in conf.py in ``sphinx_gallery_conf["reset_modules"]``; sphinx-gallery calls
:func:`reset_compiler_state` before and after each example.
"""

import gc
import logging
import random
import sys
import warnings
from pathlib import Path

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
    # a page's watch on the C++ compiler ends with it (Inductor's config is put back above)
    measure = sys.modules.get("measure")
    if measure is not None and hasattr(measure, "unwatch_cxx"):
        measure.unwatch_cxx()
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


def reset_compiler_state(gallery_conf, fname, when):
    """Reset torch.compile, RNGs and CUDA memory before and after each example."""
    _reset_torch()
