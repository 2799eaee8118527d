"""`python -m gearjax.sharded.install_nixl`, the one-command NIXL install the
README gives: its pip command line, its check of a working install, and its
failures (pip failing, NIXL missing or broken) as exit status 1 with the
reason. scripts/test.sh runs the real install on every CI run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import nixl_missing, pythonpath
from gearjax.sharded import install_nixl, nixl

ROOT = Path(__file__).resolve().parents[1]


def test_the_pip_command_pins_nixl_and_installs_no_dependencies():
    command = install_nixl.pip_command("python")
    assert command == ["python", "-m", "pip", "install", "--quiet", "--no-deps",
                       "nixl-cu12==1.5.1", "nixl==1.5.1"]


def test_the_readme_and_the_missing_nixl_error_give_this_command():
    assert "python -m gearjax.sharded.install_nixl" in (ROOT / "README.md").read_text()
    assert "python -P -m gearjax.sharded.install_nixl" in (ROOT / "scripts" / "test.sh").read_text()
    assert "gearjax.sharded.install_nixl" in " ".join(
        (ROOT / "gearjax" / "sharded" / "nixl.py").read_text().split())


@pytest.mark.skipif(nixl_missing() is not None, reason=f"NIXL is not installed here: "
                    f"{nixl_missing()}")
def test_check_only_passes_where_nixl_works(tmp_path):
    # Run away from the source tree, which has no compiled extension.
    done = subprocess.run([sys.executable, "-m", "gearjax.sharded.install_nixl", "--check-only"],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "NIXL works: nixl-cu12 1.5.1, nixl 1.5.1" in done.stdout


def test_a_failing_pip_exits_1_saying_so(monkeypatch, capsys):
    monkeypatch.setattr(install_nixl, "pip_command",
                        lambda python=sys.executable: [python, "-c", "raise SystemExit(3)"])
    assert install_nixl.main([]) == 1
    assert "pip failed (exit 3)" in capsys.readouterr().err


def test_missing_nixl_is_reported_with_the_way_to_get_it(monkeypatch):
    def missing():
        raise ValueError("exchange='nixl' needs NVIDIA NIXL: python -m ...")
    monkeypatch.setattr(nixl, "nixl_api", missing)
    with pytest.raises(RuntimeError, match="needs NVIDIA NIXL"):
        install_nixl.check()


def test_an_agent_that_cannot_start_is_reported(monkeypatch):
    def broken(name):
        raise OSError("no UCX transport")
    monkeypatch.setattr(nixl, "nixl_api", lambda: broken)
    with pytest.raises(RuntimeError, match="could not start: OSError: no UCX transport"):
        install_nixl.check()


def test_check_only_in_a_python_without_nixl_exits_1(tmp_path):
    # A stub package shadows NIXL and fails to import, as a missing one does.
    for name in ("nixl_cu12", "nixl"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {"PYTHONPATH": pythonpath(str(tmp_path)), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "gearjax.sharded.install_nixl", "--check-only"],
                          capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 1
    assert "NIXL does not work" in done.stderr and "needs NVIDIA NIXL" in done.stderr
