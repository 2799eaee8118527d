"""The README's two set-up commands install what each needs, redo only what
changed (scripts/_env.sh) and say what they do. Run dry
(GEARJAX_ENV_DRY_RUN=1: the script says what it would do and does nothing)
against a scratch environment, faking what a real run leaves behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def dry(command: str, venv: Path, root: Path = ROOT, **env: str) -> subprocess.CompletedProcess:
    """`command` (bash, in `root`) run dry against `venv`."""
    done = subprocess.run(
        ["bash", "-c", command],
        env={**os.environ, "GEARJAX_ENV_DRY_RUN": "1", "GEARJAX_VENV": str(venv),
             "PYTHON": sys.executable, **env},
        capture_output=True, text=True, timeout=120, cwd=root)
    assert done.returncode == 0, done.stderr
    return done


def run(command: str, venv: Path, **env: str) -> str:
    """What `command` says it does (its stderr), dry."""
    return dry(command, venv, **env).stderr


def env_sh(venv: Path, extra: str, **env: str) -> str:
    """scripts/_env.sh as a command sources it, with `extra`."""
    return run(f"GEARJAX_EXTRA={extra}; source scripts/_env.sh", venv, **env)


def wheel_folder(venv: Path, root: Path = ROOT) -> Path:
    """Where _env.sh in `root` builds the wheel for its sources and settings."""
    done = dry('source scripts/_env.sh 2>/dev/null; echo "$wheel_dir"', venv, root)
    return Path(done.stdout.strip())


@pytest.fixture
def venv(tmp_path) -> Path:
    """An environment whose python runs this interpreter (which finds gearjax):
    a script, not a symlink, since Python finds its own virtual environment
    from the path it was started by."""
    path = tmp_path / "venv"
    (path / "bin").mkdir(parents=True)
    python = path / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return path


def test_a_fresh_machine_creates_builds_and_installs_saying_so(tmp_path):
    said = run("bash scripts/demo.sh", tmp_path / "none-yet")
    assert "creating the virtual environment" in said
    assert "building gearjax's native extension (a minute or two" in said
    assert "installing gearjax[rl] and its dependencies" in said  # the demo's extra


def test_each_command_installs_only_its_own_extra():
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    test = (ROOT / "scripts" / "test.sh").read_text()
    assert "GEARJAX_EXTRA=rl\nsource" in demo  # flax, optax, gymnasium...: not the test tools
    assert "GEARJAX_EXTRA=test\nsource scripts/_env.sh" in test


def test_nothing_is_rebuilt_or_reinstalled_when_nothing_changed(venv):
    said = run("bash scripts/demo.sh", venv)
    assert "creating" not in said and "building" in said and "installing gearjax[rl]" in said
    # What the real run leaves: the wheel under the sources' fingerprint, a stamp.
    folder = wheel_folder(venv)
    assert folder.parent == venv / "gearjax-wheel"
    folder.mkdir(parents=True)
    (folder / "gearjax-0.0.0-cp311-cp311-linux_x86_64.whl").touch()
    (folder / "installed-rl").touch()
    said = run("bash scripts/demo.sh", venv)
    assert "building" not in said and "installing" not in said
    assert "up to date (gearjax[rl]; nothing changed since it was installed)" in said
    # The test extra is new to the environment: installed, not rebuilt.
    said = env_sh(venv, "test")
    assert "building" not in said and "installing gearjax[test]" in said
    # Other build settings are another build.
    assert "building" in env_sh(venv, "rl", GEARJAX_TESTING="OFF")
    assert "building" in env_sh(venv, "rl", GEARJAX_CUDA_ARCHITECTURES="90")


def test_the_fingerprint_follows_the_sources(venv, tmp_path):
    """A copy of the sources with one byte changed gets another wheel folder."""
    copy = tmp_path / "copy"
    (copy / "scripts").mkdir(parents=True)
    for part in ("gearjax", "xla_ffi", "pyproject.toml", "scripts/_env.sh",
                 "scripts/sources_hash.sh", "scripts/find_python.sh"):
        subprocess.run(["cp", "-r", str(ROOT / part), str(copy / part)], check=True)

    before = wheel_folder(venv, copy).name
    assert before == wheel_folder(venv).name  # the same sources, the same build
    (copy / "xla_ffi" / "core" / "limits.h").write_text(
        (copy / "xla_ffi" / "core" / "limits.h").read_text() + "\n")
    assert wheel_folder(venv, copy).name != before


def _find_python(*version: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / "find_python.sh"), *version],
                          capture_output=True, text=True, timeout=60)


def _version_of(python: str) -> tuple[int, int]:
    done = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                          capture_output=True, text=True, timeout=60, check=True)
    major, minor = done.stdout.split()
    return int(major), int(minor)


def test_find_python_gives_the_newest_python_from_3_12_or_the_minor_asked_for():
    found = _find_python()
    if found.returncode != 0:
        assert "no Python >= 3.12 found" in found.stderr
        pytest.skip("no Python >= 3.12 on this machine: the default has nothing to find")
    assert _version_of(found.stdout.strip()) >= (3, 12)
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert _version_of(_find_python(this).stdout.strip()) == sys.version_info[:2]
    refused = _find_python("twelve")
    assert refused.returncode == 2 and "give a version as 3.N" in refused.stderr


def test_the_environment_says_which_python_and_takes_one_by_version(venv, tmp_path):
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    said = env_sh(venv, "test", PYTHON=this)
    assert f"gearjax: Python {this} (" in said and "PYTHON=... picks another" in said
    default = dry("unset PYTHON; GEARJAX_EXTRA=test; source scripts/_env.sh",
                  tmp_path / "none-yet").stderr
    found = _find_python()
    if found.returncode == 0:
        major, minor = _version_of(found.stdout.strip())
        assert f"gearjax: Python {major}.{minor} ({found.stdout.strip()}" in default


def test_an_environment_of_another_python_is_made_anew_only_if_this_script_made_it(venv):
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    other = next((v for v in ("3.13", "3.12", "3.11") if v != this and
                  _find_python(v).returncode == 0), None)
    if other is None:
        pytest.skip("needs a second Python minor (3.11, 3.12 or 3.13) on this machine")
    with pytest.raises(AssertionError, match="not made by this script"):
        env_sh(venv, "test", PYTHON=other)
    (venv / "gearjax-wheel").mkdir()
    said = env_sh(venv, "test", PYTHON=other)
    assert f"has Python {this}; making it anew with {other}" in said
    assert "creating the virtual environment" in said


def script_part(first: str, last: str) -> str:
    """scripts/test.sh from the line starting with `first` to the end of the
    line starting with `last` (or to the script's end if `last` is empty)."""
    text = (ROOT / "scripts" / "test.sh").read_text()
    start = text.index("\n" + first) + 1
    if not last:
        return text[start:]
    end = text.index("\n" + last, start) + 1
    return text[start:text.index("\n", end) + 1]


def workers_part() -> str:
    """The lines of scripts/test.sh that choose the pytest-xdist workers."""
    return script_part("cores=$(nproc)", "fi")


def cores() -> int:
    return int(subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout)


@pytest.mark.parametrize("suite, minors, status, workers", [
    (0, 0, 0, None), (1, 0, 1, "3"), (0, 3, 3, "0"), (2, 3, 2, None)])
def test_the_minors_run_beside_the_suite_and_either_failure_fails_the_command(
        tmp_path, suite, minors, status, workers):
    """scripts/test.sh's end, with a stub pytest and a stub
    scripts/test_jax_minors.sh: the two run at once (each stub waits to see
    the other started), the minors' output comes after the suite's, and a
    failure of either fails the command (the suite's status first). The
    suite runs in GEARJAX_TEST_WORKERS pytest-xdist workers, by default the
    cores, at most 4."""
    tail = script_part('wait "$minors" ||', "")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "build").mkdir()
    # Each stub says whether it saw the other one running.
    wait_for = ('for _ in $(seq 100); do [ -e build/{0} ] && break; sleep 0.1; done\n'
                '[ -e build/{0} ] && echo "{1}"\n')
    (tmp_path / "scripts" / "test_jax_minors.sh").write_text(
        'touch build/minors-started\n' + wait_for.format("suite-started", "minors saw the suite")
        + 'echo "minors ran with: $*"\nexit "$MINORS_STATUS"\n')
    stub_suite = ('pytest() {\ntouch build/suite-started\necho "suite ran with: $*"\n'
                  + wait_for.format("minors-started", "suite: the minors had started")
                  + 'return "$SUITE_STATUS"\n}\n')
    script = ('set -euo pipefail\n' + workers_part()
              + 'core_build=""; locks=""\ntrue & minors=$!\n' + stub_suite + tail)
    env = {k: v for k, v in os.environ.items() if k != "GEARJAX_TEST_WORKERS"}
    if workers is not None:
        env["GEARJAX_TEST_WORKERS"] = workers
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env={**env, "SUITE_STATUS": str(suite),
                                           "MINORS_STATUS": str(minors)})
    assert done.returncode == status, done.stderr
    assert done.stdout.index("suite: the minors had started") < done.stdout.index("minors ran")
    assert "minors saw the suite" in done.stdout
    assert f"--basetemp={tmp_path}/build/jax-minors-tmp" in done.stdout
    assert ("the tests on the other JAX minors failed" in done.stderr) == (minors != 0)
    expected = workers if workers is not None else str(min(cores(), 4))
    assert f"suite ran with: -n {expected} --dist worksteal --durations=25\n" in done.stdout


@pytest.mark.parametrize("workers", ["two", "-1", "2.5", " 2", "1e3", "1000",
                                     "99999999999999999999999"])
def test_a_bad_number_of_workers_is_refused_before_anything_is_done(tmp_path, workers):
    """scripts/test.sh refuses a GEARJAX_TEST_WORKERS that is not a number of
    workers, saying what it takes, before it installs or builds anything."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "test.sh").write_text((ROOT / "scripts" / "test.sh").read_text())
    done = subprocess.run(["bash", "scripts/test.sh"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "GEARJAX_TEST_WORKERS": workers})
    assert done.returncode == 2
    assert (f"GEARJAX_TEST_WORKERS must be a number of pytest-xdist workers from 0 (the suite "
            f"in one process) to 999, got '{workers}'") in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scripts"]
