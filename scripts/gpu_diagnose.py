"""Facts a GPU run should print for the questions its tests alone leave open;
scripts/gpu_check.sh runs it after the suite. Each line says what was checked,
what was seen and "ok" or "PROBLEM"; the exit status is 1 if any is a problem.

1. This build's kernels have an image for the GPU (architectures built).
2. A threaded sample whose results a program discards entirely still runs
   (tests/test_effects.py failed there on jax 0.11.2 and the GPU, passes on
   jax 0.10.2 and the CPU): whether the call is still in the jaxpr, in the
   program JAX lowers and in the one XLA compiles, and whether it ran.
3. sample and update_priorities run with XLA FFI execution stages
   (gearjax/_ffi.py STAGED): a scan instantiates each call site once and its
   executions look no table up in the registry.
4. Where a rate-limiter timeout in a CUDA handler crashes (SIGSEGV on both
   GPU runs so far, not on the CPU): each case in a process of its own, with
   the test-only module's native crash report where the build has it, so a
   crash prints its native frames here. The cases tell apart the error (a
   timeout raised without waiting), the wait (a sample that waits, then is
   served) and the two together, on the GPU and, as a control, the CPU.

    python scripts/gpu_diagnose.py [--only timeouts]

(--only timeouts: the fourth alone, which scripts/gpu_check.sh's gpu_tests
stage runs first.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed

import jax
import numpy as np

import gearjax as gx
from gearjax import _gearjax


def report(what: str, seen: str, ok: bool) -> bool:
    print(f"{what}: {seen}: {'ok' if ok else 'PROBLEM'}", flush=True)
    return ok


def kernels() -> bool:
    if not _gearjax.cuda_built or not _gearjax.cuda_memory:
        return report("CUDA kernels", "no CUDA build or no GPU here", True)
    problem = _gearjax.cuda_kernel_problem(0)
    return report("CUDA kernels", f"built for {_gearjax.cuda_architectures}; "
                  f"{problem or 'they run on GPU 0'}", not problem)


def discarded_results() -> bool:
    with gx.Table({"x": gx.Column((2,), "float32")}, capacity=8, max_length=2) as table:
        for i in range(4):
            table.insert({"x": np.full((2, 2), i, np.float32)})

        def program(state, key):
            table.sample(state, key, 4)  # its state and batch both dropped
            return 0

        jitted = jax.jit(program)
        traced = jax.make_jaxpr(program)(table.state(), jax.random.key(0))
        in_jaxpr = "gearjax_sample" in str(traced)
        lowered = jitted.lower(table.state(), jax.random.key(0))
        in_lowered = "gearjax_sample" in lowered.as_text()
        in_compiled = "gearjax_sample" in lowered.compile().as_text()
        before = table.stats()["samples"]
        jax.block_until_ready(jitted(table.state(), jax.random.key(0)))
        ran = int(table.stats()["samples"] - before)
    return report(f"a threaded sample with discarded results on {jax.default_backend()}",
                  f"in the jaxpr {in_jaxpr}, the lowered program {in_lowered}, the compiled "
                  f"one {in_compiled}; rows drawn {ran} of 4",
                  in_jaxpr and in_lowered and in_compiled and ran == 4)


def call_sites() -> bool:
    """The sample and update targets registered with execution stages: a
    scan's executions find their table through the instantiated call site."""
    from gearjax import _ffi
    with gx.Table({"x": gx.Column((2,), "float32")}, capacity=8, max_length=2) as table:
        for i in range(4):
            table.insert({"x": np.full((2, 2), i, np.float32)})

        @jax.jit
        def run(key):
            def step(state, k):
                state, batch = table.sample(state, k, 4, strategy=gx.Prioritized(1.0))
                state, _ = table.update_priorities(state, batch.keys, np.ones(4, np.float32))
                return state, batch["x"].sum()
            return jax.lax.scan(step, table.state(), jax.random.split(key, 20))[1]

        before = _gearjax.call_site_counts()
        jax.block_until_ready(run(jax.random.key(0)))
        after = _gearjax.call_site_counts()
    made = after["instantiated"] - before["instantiated"]
    looked_up = after["registry_lookups"] - before["registry_lookups"]
    staged = _ffi.STAGED.get("CUDA" if jax.default_backend() == "gpu" else "cpu")
    return report(f"FFI execution stages on {jax.default_backend()}",
                  f"staged {staged}; a scan of 20 samples and updates instantiated {made} "
                  f"call sites and looked its table up {looked_up} times",
                  bool(staged) and made == 2 and looked_up == 0)


TIMEOUT_CASE = """
import faulthandler, sys, threading, time
faulthandler.enable()
import jax, numpy as np
import gearjax as gx
from gearjax import _gearjax
if hasattr(_gearjax, "testing"):
    _gearjax.testing.install_crash_report()  # the native frames of a crash
device, placement, case = sys.argv[1:4]
jax.config.update("jax_default_device", jax.devices(device)[0])
timeout = {"no wait, timeout": 0.0, "wait, timeout": 0.05, "wait, served": 30.0}[case]
with gx.Table({"x": gx.Column((), "float32")}, 8, 4, placement=placement,
              rate_limiter=gx.MinSize(2, timeout=timeout)) as table:
    table.insert({"x": np.zeros(2)})
    key = jax.block_until_ready(jax.random.key(0))
    if case == "wait, served":  # late enough that the sample waits for it
        threading.Timer(2.0, lambda: table.insert({"x": np.zeros(2)})).start()
    start = time.monotonic()
    try:
        jax.block_until_ready(table.sample(key, 2, 1))
        print(f"served after {time.monotonic() - start:.1f} s", flush=True)
    except Exception as e:  # noqa: BLE001
        print("raised", gx.table_error(e), flush=True)
"""
CHILD_SECONDS = 18.0  # each case's limit: they run at once, within gpu_check.sh's 30 s


def timeout_case(device: str, placement: str, case: str,
                 seconds: float = CHILD_SECONDS) -> tuple[int, str]:
    """One case in a child process: its exit status and output (what it
    wrote before it was stopped, if it ran past `seconds`)."""
    try:
        done = subprocess.run([sys.executable, "-P", "-c", TIMEOUT_CASE, device, placement, case],
                              capture_output=True, text=True, timeout=seconds,
                              env={**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    except subprocess.TimeoutExpired as e:
        partial = "".join(x.decode(errors="replace") if isinstance(x, bytes) else x
                          for x in (e.stdout, e.stderr) if x)
        return -999, f"did not end in {seconds:g} s\n{partial}"
    return done.returncode, done.stdout + done.stderr


def timeouts(seconds: float = CHILD_SECONDS) -> bool:
    """Each case of TIMEOUT_CASE on the CPU (a host table) and, where there is
    one, the GPU (a host table and a table in GPU memory), each reported as it
    ends."""
    places = [("cpu", "host")]
    if jax.default_backend() == "gpu":
        places += [("gpu", "host"), ("gpu", "device")]
    cases = ["no wait, timeout", "wait, timeout", "wait, served"]
    expected = {"no wait, timeout": "raised timeout", "wait, timeout": "raised timeout",
                "wait, served": "served after"}
    ok = True
    with ThreadPoolExecutor(len(places) * len(cases)) as pool:
        running = {pool.submit(timeout_case, d, p, c, seconds): (d, p, c)
                   for d, p in places for c in cases}
        for done in as_completed(running):
            device, placement, case = running[done]
            rc, out = done.result()
            seen = f"exit {rc}" + (f" (signal {-rc})" if -64 < rc < 0 else "")
            lines = [line for line in out.splitlines() if line.startswith(("raised", "served"))]
            fine = rc == 0 and any(line.startswith(expected[case]) for line in lines)
            if case == "wait, served" and fine:
                fine = float(lines[0].split()[2]) >= 1.5  # it did wait for the insert
            ok &= report(f"a rate-limited sample on {device}, a {placement} table, {case}",
                         f"{seen}; {'; '.join(lines) or 'no result'}", fine)
            if not fine:  # the crash report and the end of the output, for the log
                at = out.find("gearjax crash report")
                print(out[at:at + 6000] if at >= 0 else out[-3000:], flush=True)
    return ok


CHECKS = {"kernels": kernels, "discarded_results": discarded_results,
          "call_sites": call_sites, "timeouts": timeouts}


def main() -> None:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(CHECKS), help="run this check alone")
    only = parser.parse_args().only
    print(f"jax {jax.__version__} on {jax.devices()}", flush=True)
    results = [check() for name, check in CHECKS.items() if only in (None, name)]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
