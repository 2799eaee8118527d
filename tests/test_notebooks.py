"""The notebooks in notebooks/ run top to bottom (in their small, CPU-sized
configurations) and show what they mean to show.

They run with GEARJAX_NOTEBOOK_SMOKE=1: a notebook whose cells train or
benchmark reads it to shrink its budgets further (fewer steps and calls,
shorter evaluation episodes), so that every cell still runs and shows its
output, in less time; its committed outputs come from the budgets as written.

Each notebook is executed with nbclient on an in-memory copy (the committed
file, with its outputs, is left alone; the executed copy is written under
pytest's tmp_path for inspection), in a kernel running this interpreter, with
notebooks/ as the working directory; two at a time, in the background from the
first test_notebook_runs on (the ``executions`` fixture), each test checking
its own. Code cells tagged ``expect-image`` must produce an ``image/png``;
every other code cell must produce some output unless tagged ``no-output``.
The committed files must carry those outputs too and stay small.
"""

from __future__ import annotations

import copy
import json
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

nbformat = pytest.importorskip(
    "nbformat", reason="executing the notebooks needs nbformat (pip install '.[test]')")
nbclient = pytest.importorskip(
    "nbclient", reason="executing the notebooks needs nbclient (pip install '.[test]')")
pytest.importorskip(
    "ipykernel", reason="executing the notebooks needs ipykernel in this environment, so the "
                        "kernel runs this interpreter (pip install '.[test]')")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
# notebook -> the least number of figures it must show (guards the tags themselves)
EXPECTED = {
    "01_quick_tour.ipynb": 2,
    "02_decision_transformer.ipynb": 4,
    "03_performance.ipynb": 5,
    "04_writer.ipynb": 1,
    "05_from_flashbax.ipynb": 0,
    "06_from_torchrl.ipynb": 0,
}
CELL_TIMEOUT_S = 300
MAX_COMMITTED_BYTES = 1_000_000
# Notebooks executing at once: a kernel keeps about one core busy (mostly
# compiling, which XLA does on one thread), so two fill a 2-core machine.
PARALLEL = 2


@pytest.fixture(scope="module")
def kernel_path(tmp_path_factory):
    """A ``python3`` kernelspec that runs this very interpreter, first on
    JUPYTER_PATH, so no other environment's ``python3`` kernel is picked up."""
    from ipykernel.kernelspec import write_kernel_spec
    jupyter_path = tmp_path_factory.mktemp("jupyter")
    spec_dir = write_kernel_spec(jupyter_path / "kernels" / "python3")
    spec = json.loads((Path(spec_dir) / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable, spec["argv"]
    return jupyter_path


def _execute(name: str):
    """Executes notebooks/<name> on an in-memory copy with its outputs cleared;
    returns the executed copy and what execute() raised (None when nothing)."""
    nb = copy.deepcopy(nbformat.read(NOTEBOOKS / name, as_version=4))
    for cell in nb.cells:                 # start clean: what is checked is this run's
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", allow_errors=False,
        resources={"metadata": {"path": str(NOTEBOOKS)}})
    try:
        client.execute()
    except Exception as error:  # noqa: BLE001 - raised again by the notebook's test
        return nb, error
    return nb, None


@pytest.fixture(scope="module")
def executions(request, kernel_path):
    """name -> the future of _execute(name). Every notebook this session's
    test_notebook_runs will check starts at the first one's request, PARALLEL
    at a time in this process (each in its own kernel); a test waits for its
    own. Under pytest-xdist, which does not say which tests a worker will run,
    each test starts its own notebook when it asks."""
    selected = [] if hasattr(request.config, "workerinput") else [
        item.callspec.params["name"] for item in request.session.items
        if getattr(item, "originalname", None) == "test_notebook_runs"]
    with pytest.MonkeyPatch.context() as env, ThreadPoolExecutor(PARALLEL) as pool:
        env.setenv("JUPYTER_PATH", str(kernel_path))      # the kernels inherit both
        env.setenv("GEARJAX_NOTEBOOK_SMOKE", "1")
        futures = _Executions(pool)
        for name in selected:
            futures[name]
        yield futures
        for future in futures.values():  # a stopped session (-x) leaves the rest
            future.cancel()


class _Executions(dict):
    """Starts a notebook's execution when it is first looked up."""

    def __init__(self, pool: ThreadPoolExecutor):
        super().__init__()
        self.pool = pool

    def __missing__(self, name: str) -> Future:
        self[name] = self.pool.submit(_execute, name)
        return self[name]


def _checks(nb) -> list[str]:
    """What is missing from an executed notebook (empty when all is well)."""
    problems, images = [], 0
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tags = set(cell.metadata.get("tags", []))
        first_line = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
        where = f"cell {index} ({first_line[:50]!r})"
        outputs = cell.get("outputs", [])
        for out in outputs:
            if out.output_type == "error":
                problems.append(f"{where} raised {out.ename}: {out.evalue}")
        has_image = any("image/png" in out.get("data", {}) for out in outputs)
        images += has_image
        if "expect-image" in tags and not has_image:
            problems.append(f"{where} is tagged expect-image but showed no image/png")
        if "no-output" not in tags and not outputs:
            problems.append(f"{where} produced no output")
    return problems


def _image_cells(nb) -> int:
    return sum("expect-image" in c.metadata.get("tags", []) for c in nb.cells
               if c.cell_type == "code")


def test_every_notebook_is_tested():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_committed_notebook_carries_its_outputs(name):
    path = NOTEBOOKS / name
    assert path.stat().st_size < MAX_COMMITTED_BYTES, f"{name} is {path.stat().st_size} bytes"
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert _image_cells(nb) >= EXPECTED[name]
    assert _checks(nb) == [], f"{name} was committed without (all of) its outputs"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_runs(name, executions, tmp_path):
    nb, error = executions[name].result()
    nbformat.write(nb, tmp_path / name)   # the executed copy, for a look when it fails
    if error is not None:
        raise error
    problems = _checks(nb)
    assert problems == [], "\n".join(problems)
    assert _image_cells(nb) >= EXPECTED[name]


# What would show a reader the machine a notebook's outputs were made on.
MACHINE_PATHS = ("site-packages", "/work/", "/home/", "/root/", "/tmp/", ".venv", "/usr/")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_committed_outputs_carry_no_machine_paths(name):
    """Warnings and tracebacks name the interpreter's files: none may be
    committed (the outputs are for every reader)."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            text = json.dumps(out)
            found = [p for p in MACHINE_PATHS if p in text]
            assert not found, f"cell {index} of {name} shows {found}: {text[:300]}"
