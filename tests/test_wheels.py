"""The wheels of scripts/build_wheels.sh install where there is no compiler,
CMake or nvcc, from binaries only: the core runs what a user's first minutes
touch (tests/wheel_smoke.py: insert, sample eagerly, in jit and in scan, a
priority update, save and load, a decision transformer's first steps), and
the CUDA plugin imports without a GPU, serves gearjax's calls and says that
no GPU is visible.

They test the wheels in dist/ for this Python, and skip, saying which command
builds them, where there are none (.ci/run builds none: docs/development.md,
"Wheels"). The last tests need no wheels: the plugin's project as stage.sh
stages it and the release builds' cibuildwheel settings."""

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


def _default_architectures() -> str:
    """The plugin's architectures by default (its pyproject.toml.in), in the
    comma-separated form the extension reports."""
    text = (ROOT / "scripts" / "cuda_plugin" / "pyproject.toml.in").read_text()
    return re.search(r'GEARJAX_CUDA_ARCHITECTURES = .*default = "([^"]+)"', text)[1].replace(
        ";", ",")


@needs_plugin
def test_the_cuda_plugin_imports_without_a_gpu_and_serves_gearjax(tmp_path):
    python, env = _fresh_environment(tmp_path)
    _install(python, env, str(WHEEL), str(PLUGIN))  # the plugin brings nvidia-cuda-runtime
    run = subprocess.run([python, "-P", str(ROOT / "tests" / "wheel_smoke.py"), "--plugin"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [line] = [line for line in run.stdout.splitlines() if line.startswith("ok plugin ")]
    architectures, gpus = line.split()[2], int(line.split()[-1])
    if not Path("/dev/nvidia0").exists():
        assert gpus == 0  # no GPU visible here, and it says so rather than failing
    # The architectures JAX's cu13 wheels target, unless the wheel was built
    # with GEARJAX_CUDA_ARCHITECTURES (quicker, not for release).
    assert architectures == _default_architectures(), (
        f"{PLUGIN.name} has kernels for {architectures}, not the defaults: rebuild it without "
        f"GEARJAX_CUDA_ARCHITECTURES")
    # The CUDA runtime is jax[cuda13]'s pip package's, not a copy in the wheel.
    assert not [n for n in zipfile.ZipFile(PLUGIN).namelist() if "libcudart" in n]


# What runs in CI too (no wheels needed): the plugin's project as
# scripts/cuda_plugin/stage.sh stages it, and the release builds' settings.


def test_the_staged_plugin_project_is_gearjax_s_version_and_holds_what_it_builds_from(tmp_path):
    import tomllib
    staged = tmp_path / "plugin-src"
    subprocess.run(["bash", str(ROOT / "scripts" / "cuda_plugin" / "stage.sh"), str(staged)],
                   check=True, timeout=120)
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())
    plugin = tomllib.loads((staged / "pyproject.toml").read_text())
    version = core["project"]["version"]
    assert plugin["project"]["version"] == version
    assert f"gearjax=={version}" in plugin["project"]["dependencies"]
    for name in ("xla_ffi/CMakeLists.txt", "gearjax_cuda13_plugin/__init__.py",
                 "toolkit_from_pypi.sh", "wheel_smoke.py"):
        assert (staged / name).is_file(), name
    defines = plugin["tool"]["scikit-build"]["cmake"]["define"]
    assert defines["GEARJAX_CUDA"] == "ON" and defines["GEARJAX_CUDART"] == "shared"
    # cibuildwheel (the release workflow): nvcc from PyPI, the CUDA runtime
    # left to jax[cuda13]'s package, each wheel tested as a user has it.
    wheels = plugin["tool"]["cibuildwheel"]
    assert "{project}/toolkit_from_pypi.sh" in wheels["before-all"]
    assert "--exclude libcudart.so.13" in wheels["repair-wheel-command"]
    assert wheels["test-command"].endswith("{project}/wheel_smoke.py --plugin")
    assert wheels["build"] == core["tool"]["cibuildwheel"]["build"]


@pytest.mark.parametrize("project", ["pyproject.toml", "scripts/cuda_plugin/pyproject.toml.in"])
def test_cibuildwheel_tests_each_wheel_with_no_compiler_on_path(project):
    # The manylinux image has gcc on PATH; a user's machine may not, and
    # wheel_smoke.py refuses to run where a compiler could have built gearjax.
    import tomllib
    command = tomllib.loads((ROOT / project).read_text())["tool"]["cibuildwheel"]["test-command"]
    assert command.startswith('env PATH="$VIRTUAL_ENV/bin" python -P '), command
