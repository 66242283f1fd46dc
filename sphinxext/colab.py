"""Give every downloadable notebook Colab's GPU runtime settings.

Every tutorial on this site times its work on a CUDA GPU (and falls back to the CPU with
smaller sizes), so each notebook asks Colab for a GPU runtime when it is opened there:
the notebook-level metadata Colab itself writes when a notebook is saved with a GPU
runtime, ``"accelerator": "GPU"`` and ``"colab": {"gpuType": "T4"}`` (the free tier's
GPU). Jupyter and other front ends ignore these keys.

sphinx-gallery has no setting for notebook metadata, so this wraps the function that
starts every notebook it writes (``sphinx_gallery.notebook.jupyter_notebook_skeleton``);
tests/test_colab.py checks the downloaded notebooks, so a sphinx-gallery release that
renames it fails the tests rather than silently dropping the metadata.
"""

import copy
import functools

from sphinx.errors import ExtensionError

COLAB_METADATA = {
    "accelerator": "GPU",
    "colab": {"gpuType": "T4", "provenance": []},
}


def _with_colab_metadata(skeleton):
    @functools.wraps(skeleton)
    def wrapper(*args, **kwargs):
        notebook = skeleton(*args, **kwargs)
        for key, value in COLAB_METADATA.items():
            notebook["metadata"].setdefault(key, copy.deepcopy(value))
        return notebook

    wrapper.adds_colab_metadata = True
    return wrapper


def setup(app):
    from sphinx_gallery import notebook

    skeleton = getattr(notebook, "jupyter_notebook_skeleton", None)
    if skeleton is None:
        raise ExtensionError(
            "sphinxext.colab: sphinx_gallery.notebook.jupyter_notebook_skeleton is gone "
            "(a new sphinx-gallery?); update sphinxext/colab.py"
        )
    if not getattr(skeleton, "adds_colab_metadata", False):
        notebook.jupyter_notebook_skeleton = _with_colab_metadata(skeleton)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
