"""Every notebook the site offers for download runs, top to bottom, on a real Jupyter kernel.

The notebooks are the ones in the built site (``_downloads/``), the files a reader gets.
Each runs with nbclient on an ipykernel kernel, on the CPU, in an empty working directory,
as a reader's fresh Jupyter would: the first cell's ``%pip install`` included (everything
is installed already, so it is quick). The tutorials run one after another: on two cores,
running them side by side is no faster, since each uses every core.
"""

import nbclient
import nbformat
import pytest
from conftest import tutorial_sources

SOURCES = tutorial_sources()
# Seconds one cell may take; the slowest cells compile with torch.compile on CPU.
CELL_TIMEOUT = 900


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_notebook_runs(built_site, source, tmp_path, monkeypatch):
    site, _ = built_site
    found = sorted((site / "_downloads").rglob(f"{source.stem}.ipynb"))
    assert len(found) == 1, f"expected one {source.stem}.ipynb in _downloads: {found}"
    notebook = nbformat.read(found[0], as_version=4)

    # The kernel inherits this environment: no GPU, and Jupyter's own plot backend
    # (the build's MPLBACKEND=Agg would make plt.show() warn in a notebook).
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.delenv("GALLERY_PATTERN", raising=False)

    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as error:
        pytest.fail(f"{found[0].name}: a cell failed:\n{error}", pytrace=False)

    code_cells = [c for c in notebook.cells if c.cell_type == "code"]
    assert code_cells and all(c.execution_count for c in code_cells)
