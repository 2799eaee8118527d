"""``python -m gearjax.sharded.install_nixl``: installs NVIDIA NIXL for the
``nixl`` exchange in one command, then checks that it works.

Why a command and not an extra: the ``nixl-cu12`` wheel declares torch as a
dependency but never imports it (NIXL's Python API needs only numpy), and a
pip extra cannot say ``--no-deps``; ``pip install gearjax[...]`` would pull
torch and its CUDA libraries (gigabytes) for nothing. This runs pip for the
pinned NIXL wheels without their dependencies (numpy, which they need, comes
with gearjax), then imports NIXL and starts and closes one agent, so a
broken install fails here and not in the first sharded sample.

Exit status 0 when NIXL works, 1 with the reason otherwise.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import uuid

# The NIXL release the nixl exchange is tested with (scripts/test.sh uses
# this command).
PACKAGES = ("nixl-cu12==1.5.1", "nixl==1.5.1")


def pip_command(python: str = sys.executable) -> list[str]:
    """The pip command line this runs."""
    return [python, "-m", "pip", "install", "--quiet", "--no-deps", *PACKAGES]


def check() -> str:
    """Finds NIXL's C API and starts and closes one native agent (as the nixl
    exchange does: no progress thread, the UCX backend); returns a line
    naming what works, or raises RuntimeError saying what does not."""
    from gearjax.sharded import nixl

    try:
        new_agent = nixl.nixl_api()
    except ValueError as e:
        raise RuntimeError(str(e)) from None
    try:
        new_agent(f"gearjax-install-check-{uuid.uuid4().hex[:8]}").close()
    except Exception as e:  # noqa: BLE001 - NIXL's failures come as several types
        raise RuntimeError(f"NIXL is installed but an agent could not start: "
                           f"{type(e).__name__}: {e}") from None
    import importlib.metadata
    return "NIXL works: " + ", ".join(f"{p.split('==')[0]} "
                                      f"{importlib.metadata.version(p.split('==')[0])}"
                                      for p in PACKAGES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check-only", action="store_true",
                        help="check an existing install, install nothing")
    args = parser.parse_args(argv)
    if not args.check_only:
        done = subprocess.run(pip_command())  # noqa: S603 - our own fixed command line
        if done.returncode != 0:
            print(f"gearjax.sharded.install_nixl: pip failed (exit {done.returncode}): "
                  f"{' '.join(pip_command())}", file=sys.stderr)
            return 1
    try:
        # A fresh interpreter: this one may have imported an older NIXL.
        # -P: the installed gearjax even when run from a source checkout.
        done = subprocess.run([sys.executable, "-P", "-c",
                               "from gearjax.sharded.install_nixl import check; print(check())"],
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        print("gearjax.sharded.install_nixl: starting a NIXL agent took over 120 s",
              file=sys.stderr)
        return 1
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"gearjax.sharded.install_nixl: NIXL does not work: {reason}", file=sys.stderr)
        return 1
    print(done.stdout.strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
