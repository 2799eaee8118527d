"""The wheels of scripts/build_wheels.sh install where there is no compiler,
CMake or nvcc, from binaries only: the core runs what a user's first minutes
touch (tests/wheel_smoke.py: insert, sample eagerly, in jit and in scan, a
priority update, save and load, a decision transformer's first steps), and
the CUDA plugin imports without a GPU, serves gearjax's calls and says that
no GPU is visible.

They test the wheels in dist/ for this Python, and skip, saying which command
builds them, where there are none (.ci/run builds none: docs/development.md,
"Wheels")."""

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def _wheel(name: str) -> Path | None:
    found = sorted(ROOT.glob(f"dist/{name}-*-{TAG}-{TAG}-manylinux*.whl"))
    return found[-1] if found else None


WHEEL = _wheel("gearjax")
PLUGIN = _wheel("gearjax_cuda13_plugin")
BUILD = f"`bash scripts/build_wheels.sh {sys.version_info[0]}.{sys.version_info[1]}`"
needs_core = pytest.mark.skipif(WHEEL is None, reason=f"no core wheel for {TAG} in dist/: "
                                f"{BUILD} builds it")
needs_plugin = pytest.mark.skipif(WHEEL is None or PLUGIN is None, reason=(
    f"no core and CUDA plugin wheels for {TAG} in dist/: {BUILD} builds them (the plugin "
    f"where nvcc is found)"))


def _fresh_environment(tmp_path: Path) -> tuple[str, dict]:
    """A new virtual environment and an environment for its processes whose
    PATH holds nothing else: no compiler, CMake or nvcc."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items()
           if k not in ("CC", "CXX", "CUDACXX", "CMAKE", "PYTHONPATH", "VIRTUAL_ENV",
                        "LD_LIBRARY_PATH")}
    env["PATH"] = str(venv / "bin")
    return str(venv / "bin" / "python"), env


def _install(python: str, env: dict, *requirements: str) -> None:
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--only-binary=:all:", *requirements],
        env=env, capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]


@needs_core
def test_the_core_wheel_is_tagged_as_auditwheel_shows():
    # Its tag is the oldest manylinux policy its symbols allow: auditwheel
    # show (committed beside the wheel's results) names the same.
    tag = re.search(r"-(manylinux_\d+_\d+_x86_64)\.whl$", WHEEL.name)
    assert tag, WHEEL.name
    shown = Path(f"{WHEEL}.auditwheel.txt").read_text()
    assert f'following platform tag: "{tag.group(1)}"' in " ".join(shown.split()), shown


@needs_core
def test_the_core_wheel_installs_and_runs_without_a_compiler(tmp_path):
    python, env = _fresh_environment(tmp_path)
    _install(python, env, f"{WHEEL}[rl]")
    run = subprocess.run([python, "-P", str(ROOT / "tests" / "wheel_smoke.py"), "--dt"],
                         env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    steps = [line.split()[1] for line in run.stdout.splitlines() if line.startswith("ok ")]
    assert steps == ["installed", "insert", "eager", "jit", "scan", "save", "decision"], run.stdout


PLUGIN_CHECK = """
import sys
import numpy as np
import gearjax as gx, gearjax_cuda13_plugin as plugin
from gearjax import _gearjax
assert _gearjax.__name__ == "gearjax_cuda13_plugin._gearjax", _gearjax.__name__
assert _gearjax.cuda_built and sorted(_gearjax.cuda_ffi_targets(True))
assert plugin.__version__ == gx.__version__
assert "nvidia/cu13/lib" in plugin.cudart, plugin.cudart  # pip's runtime, not bundled
t = gx.Table({"x": gx.Column((2,), "float32")}, capacity=4, max_length=2)
t.insert({"x": np.ones((2, 2), np.float32)})
assert t.sample(__import__("jax").random.key(0), 3)["x"].shape[0] == 3  # the CPU handlers
print("gpus", plugin.gpus_visible())
"""


@needs_plugin
def test_the_cuda_plugin_imports_without_a_gpu_and_serves_gearjax(tmp_path):
    python, env = _fresh_environment(tmp_path)
    _install(python, env, str(WHEEL), str(PLUGIN))  # the plugin brings nvidia-cuda-runtime
    run = subprocess.run([python, "-P", "-c", PLUGIN_CHECK], env=env, capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    gpus = int(run.stdout.split("gpus")[-1])
    if not Path("/dev/nvidia0").exists():
        assert gpus == 0  # no GPU visible here, and it says so rather than failing
    # The CUDA runtime is jax[cuda13]'s pip package's, not a copy in the wheel.
    assert not [n for n in zipfile.ZipFile(PLUGIN).namelist() if "libcudart" in n]
