"""Shared fixtures (a small table with mixed columns, filled with random data,
the test-only native hooks) and the rule that skips tests marked ``gpu`` where
no CUDA GPU is usable."""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest

import gearjax as gx
from reference import random_trajectory

COLUMNS = {
    "obs": gx.Column((5,), "float32"),
    "action": gx.Column((2,), "float32", pad=-10.0),
    "reward": gx.Column((), "float32"),
    "frame": gx.Column((3, 2), "uint8", pad=7),
    "done": gx.Column((), "bool"),
}


def _gpu_missing_reason() -> str | None:
    try:
        if jax.devices("gpu"):
            return None
    except RuntimeError:
        pass
    return "needs a CUDA GPU visible to JAX; this machine has none (jax.devices('gpu') is empty)"


def pythonpath(*first: str) -> str:
    """PYTHONPATH for a test's subprocess: ``first``, then the folder gearjax
    was imported from (the venv's site-packages, or a private folder where the
    package is only on PYTHONPATH, as on some GPU machines), then the caller's."""
    from pathlib import Path
    here = str(Path(gx.__file__).resolve().parents[1])
    parts = [*first, here, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return os.pathsep.join(dict.fromkeys(parts))


def cpu_only_env(**extra: str) -> dict[str, str]:
    """The environment of a subprocess that tests the CPU path on any machine
    (several processes over gloo, host-device meshes, CPU benchmarks): JAX on
    its CPU backend and no GPU visible to gearjax either (its tables then go to
    host memory, which the CPU handlers read), gearjax importable."""
    return {**os.environ, "JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": "",
            "PYTHONPATH": pythonpath(), **extra}


def nixl_missing() -> str | None:
    """Why NIXL cannot be used here (gearjax.sharded.nixl's own message), or
    None where it can."""
    from gearjax.sharded import nixl
    try:
        nixl.nixl_api()
    except ValueError as e:
        return str(e)
    return None


def pytest_configure(config):
    """GEARJAX_CRASH_REPORT=1 (scripts/gpu_check.sh's test stages set it): a
    crash prints its native frames (the test-only module's
    install_crash_report), which Python 3.12's faulthandler does not, on
    machines without gdb; each pytest-xdist worker installs its own."""
    if os.environ.get("GEARJAX_CRASH_REPORT") == "1":
        from gearjax import _gearjax
        if hasattr(_gearjax, "testing"):
            _gearjax.testing.install_crash_report()


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or _gpu_missing_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def native_testing():
    """The test-only submodule gearjax._gearjax.testing (GPU memory emulated on
    the CPU; see xla_ffi/testing/testing_module.cc). It exists only in builds
    with GEARJAX_TESTING=ON, which scripts/test.sh makes; there it is required."""
    from gearjax import _gearjax
    testing = getattr(_gearjax, "testing", None)
    if testing is None:
        message = ("gearjax was built without its test-only submodule (GEARJAX_TESTING=ON, as "
                   "scripts/test.sh builds it)")
        if os.environ.get("GEARJAX_REQUIRE_TESTING_MODULE"):
            pytest.fail(message)
        pytest.skip(message)
    return testing


@pytest.fixture
def emulated_mapping(native_testing):
    """Tables made during the test get selection state at emulated "device"
    addresses (the hooks' own host memory), as in a CUDA build with a GPU;
    the mapping stays on while they live (trees for new Prioritized alphas
    are allocated at first use). Yields the testing module."""
    native_testing.emulate_gpu_mapping(True)
    yield native_testing
    native_testing.emulate_gpu_mapping(False)


@pytest.fixture
def cpu_device(monkeypatch):
    """The test's JAX work runs on the CPU device, also on a machine with a
    GPU, and its tables of placement "auto" go to host memory (which the CPU
    handlers read): tests of what the CPU promises where the GPU documents
    otherwise, and of GPU code emulated on the CPU (whose tables no real GPU
    kernel may read). Request it before fixtures that make tables."""
    monkeypatch.setattr(gx.table, "AUTO_DEVICE_FRACTION", 0.0)
    with jax.default_device(jax.devices("cpu")[0]):
        yield


@pytest.fixture
def cpu_default_device():
    """The test's JAX work runs on the CPU device (tables placed as usual)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


@pytest.fixture
def emulated_gpu_memory(native_testing, cpu_default_device):
    """Lets tables take placement "device" in emulated GPU memory that host
    code can reach only through the core's copy hooks, on every machine (on
    one with a GPU the emulation stands in for the real GPU memory while the
    test runs, and the test's JAX work runs on the CPU). Yields the testing
    submodule, whose ``emulate_device_memory(True, free_bytes, copies_fail)``
    retunes it."""
    from gearjax import _gearjax
    if _gearjax.gpu_free_bytes() is not None and not _gearjax.cuda_memory:
        pytest.fail("device memory emulation was left on by an earlier test")
    native_testing.emulate_device_memory(True, free_bytes=1 << 30)
    try:
        yield native_testing
    finally:
        native_testing.emulate_device_memory(False)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def fill(table: gx.Table, rng: np.random.Generator, count: int) -> dict:
    """Inserts `count` random trajectories of COLUMNS; returns key -> trajectory
    for those still stored (earlier ones may have been evicted)."""
    stored = {}
    for length in rng.integers(1, table.max_length + 1, size=count):
        trajectory = random_trajectory(rng, COLUMNS, int(length))
        stored[table.insert(trajectory, priority=float(rng.uniform(0.1, 5)))] = trajectory
    live = set(table.contents()["key"].tolist())
    return {k: v for k, v in stored.items() if k in live}


@pytest.fixture
def filled(rng):
    """(table, stored) where stored maps key -> the trajectory inserted under it."""
    table = gx.Table(COLUMNS, capacity=32, max_length=12)
    yield table, fill(table, rng, 20)
    table.close()
