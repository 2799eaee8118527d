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
from concurrent.futures import ThreadPoolExecutor

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
import sys, threading, time
import jax, numpy as np
import gearjax as gx
from gearjax import _gearjax
if hasattr(_gearjax, "testing"):
    _gearjax.testing.install_crash_report()
device, case = sys.argv[1], sys.argv[2]
jax.config.update("jax_default_device", jax.devices(device)[0])
timeout = {"no wait, timeout": 0.0, "wait, timeout": 0.05, "wait, served": 30.0}[case]
with gx.Table({"x": gx.Column((), "float32")}, 8, 4,
              rate_limiter=gx.MinSize(2, timeout=timeout)) as table:
    table.insert({"x": np.zeros(2)})
    if case == "wait, served":
        threading.Timer(0.2, lambda: table.insert({"x": np.zeros(2)})).start()
    try:
        jax.block_until_ready(table.sample(jax.random.key(0), 2, 1))
        print("served", flush=True)
    except Exception as e:  # noqa: BLE001
        print("raised", gx.table_error(e), flush=True)
"""


def timeout_case(device: str, case: str) -> tuple[str, int, str]:
    """One case in a child process: its output and exit status."""
    try:
        done = subprocess.run([sys.executable, "-P", "-c", TIMEOUT_CASE, device, case],
                              capture_output=True, text=True, timeout=18,
                              env={**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    except subprocess.TimeoutExpired:
        return case, -999, "did not end in 18 s"
    return case, done.returncode, done.stdout + done.stderr


def timeouts() -> bool:
    """Each case of TIMEOUT_CASE on the GPU (where there is one) and the CPU."""
    devices = ["cpu"] + (["gpu"] if jax.default_backend() == "gpu" else [])
    cases = ["no wait, timeout", "wait, timeout", "wait, served"]
    expected = {"no wait, timeout": "raised timeout", "wait, timeout": "raised timeout",
                "wait, served": "served"}
    jobs = [(d, c) for d in devices for c in cases]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda job: (job[0], *timeout_case(*job)), jobs))
    ok = True
    for device, case, rc, out in results:
        seen = f"exit {rc}" + (f" (signal {-rc})" if rc < 0 else "")
        lines = [line for line in out.splitlines() if line.startswith(("raised", "served"))]
        fine = rc == 0 and expected[case] in lines
        ok &= report(f"a rate-limited sample on {device}, {case}",
                     f"{seen}; {'; '.join(lines) or 'no result'}", fine)
        if not fine:  # the crash report and the end of the output, for the log
            start = out.find("gearjax crash report")
            print(out[start:start + 6000] if start >= 0 else out[-3000:], flush=True)
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
