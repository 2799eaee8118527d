"""Run by tests/test_wheels.py inside a fresh virtual environment that holds an
installed gearjax wheel and no compiler (and by cibuildwheel on each wheel it
builds): the smoke subset a user's first minutes touch. Prints "ok <what>" per
step; any failure raises.

  --plugin   the CUDA plugin wheel is installed too: gearjax must run on its
             extension (CUDA handlers built, the CUDA runtime pip's, not
             bundled); the steps below then run the CPU handlers through it.
  --dt       a decision transformer's first steps (gearjax[rl])."""

import shutil
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import gearjax as gx

# The wheel, not a source tree: the package lives in this environment.
assert Path(gx.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), gx.__file__
for tool in ("cc", "c++", "gcc", "g++", "clang", "cmake", "nvcc"):
    assert shutil.which(tool) is None, f"{tool} is on PATH: {shutil.which(tool)}"
print("ok installed", gx.__version__, "jax", jax.__version__)

if "--plugin" in sys.argv:
    import gearjax_cuda13_plugin as plugin

    from gearjax import _gearjax
    assert _gearjax.__name__ == "gearjax_cuda13_plugin._gearjax", _gearjax.__name__
    assert _gearjax.cuda_built and sorted(_gearjax.cuda_ffi_targets(True))
    assert plugin.__version__ == gx.__version__, (plugin.__version__, gx.__version__)
    assert "nvidia/cu13/lib" in plugin.cudart, plugin.cudart  # pip's runtime, not bundled
    print("ok plugin", _gearjax.cuda_architectures, "gpus", plugin.gpus_visible())

table = gx.Table({"x": gx.Column((3,), "float32")}, capacity=64, max_length=8)
keys = [table.insert({"x": np.full((8, 3), i, np.float32)}, priority=1.0 + i) for i in range(10)]
assert len(table) == 10 and table.contents()["key"].tolist() == keys
print("ok insert", len(table))

batch = table.sample(jax.random.key(0), 16, 4)
assert batch["x"].shape == (16, 4, 3) and set(np.asarray(batch.keys).tolist()) <= set(keys)
print("ok eager sample")


@jax.jit
def draw(state, key):
    state, batch = table.sample(state, key, 16, 4, gx.Prioritized(1.0))
    state, count = table.update_priorities(state, batch.keys, jnp.full(16, 2.0))
    return state, batch["x"].sum(), count


state, total, count = draw(table.state(), jax.random.key(1))
assert int(count) == 16 and np.isfinite(float(total))
print("ok jit sample and priority update")


def scan_step(state, key):
    state, batch = table.sample(state, key, 8, 2)
    return state, batch["x"].mean()


state, means = jax.jit(lambda s, ks: jax.lax.scan(scan_step, s, ks))(
    state, jax.random.split(jax.random.key(2), 5))
assert means.shape == (5,) and np.all((np.asarray(means) >= 0) & (np.asarray(means) <= 9))
print("ok scan")

with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "table.gearjax"
    jax.block_until_ready(state)
    table.save(path)
    loaded = gx.Table.load(path)
    for name in ("key", "priority", "length"):
        assert np.array_equal(loaded.contents()[name], table.contents()[name]), name
    loaded.close()
print("ok save and load")
table.close()

if "--dt" in sys.argv:
    from gearjax.dt import run
    with tempfile.TemporaryDirectory() as out:
        assert run.main(["--out", out, "--quiet", "--size", "tiny", "--steps", "10",
                         "--eval-every", "10", "--steps-per-call", "10", "--episodes", "1",
                         "--eval-max-steps", "5", "--batch-size", "4", "--context", "4"]) == 0
    print("ok decision transformer")
