"""notebooks/quickstart.ipynb: stored without outputs, and runs top to bottom (nbclient)."""

import json
import os
import sys
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"
CELL_TIMEOUT = 300  # seconds per cell; the whole notebook takes about 10-20 s


def test_notebook_is_stored_without_outputs():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


def _kernelspec(root: Path, env: dict) -> str:
    """A kernel spec running this interpreter (the venv under test), found through JUPYTER_PATH."""
    name = f"dmlr-test-{os.getpid()}"
    spec = root / "kernels" / name
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": f"dmlr tests ({sys.executable})",
                "language": "python",
                "env": env,
            }
        )
    )
    return name


@pytest.mark.slow
def test_quickstart_runs_top_to_bottom(tmp_path, monkeypatch, cluster2):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")

    # The kernel is this interpreter, whatever kernels the machine has installed: a kernel spec
    # in a private JUPYTER_PATH entry (searched first). dmlr.get_client() in the notebook
    # connects to the session's 2-worker cluster through DASK_SCHEDULER_ADDRESS (get_client's
    # "connect" branch) instead of starting a cluster sized to the machine.
    # Connection files and the IPython profile go to the temporary folder too (HOME may be read-only).
    jupyter = tmp_path / "jupyter"
    name = _kernelspec(
        jupyter,
        {
            "DASK_SCHEDULER_ADDRESS": cluster2.scheduler.address,
            "MPLBACKEND": "module://matplotlib_inline.backend_inline",
            "IPYTHONDIR": str(tmp_path / "ipython"),
        },
    )
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join(filter(None, [str(jupyter), os.environ.get("JUPYTER_PATH")])))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    work = tmp_path / "work"
    work.mkdir()

    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, kernel_name=name, timeout=CELL_TIMEOUT, allow_errors=False, resources={"metadata": {"path": str(work)}}
    )
    client.execute()

    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    text = "\n".join(out.get("text", "") or out.get("data", {}).get("text/plain", "") for out in outputs)
    assert "dashboard:" in text
    assert "the reloaded model gives the same scores and predictions" in text
    # progress in a kernel: one display, updated in place, ending with the last iteration
    progress = [out for out in outputs if "rel.change" in out.get("data", {}).get("text/plain", "")]
    assert len(progress) == 1 and progress[0].output_type == "display_data"
    assert "(converged)" in progress[0].data["text/plain"] or "max_iter" in progress[0].data["text/plain"]
    assert (work / "dmlr-quickstart" / "rbrl.npz").exists()
    assert (work / "dmlr-quickstart" / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any("image/png" in out.get("data", {}) for out in outputs)  # the plotted figure
