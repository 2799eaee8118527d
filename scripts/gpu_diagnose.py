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

    python scripts/gpu_diagnose.py
"""

from __future__ import annotations

import sys

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


def main() -> None:
    print(f"jax {jax.__version__} on {jax.devices()}", flush=True)
    results = [kernels(), discarded_results(), call_sites()]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
