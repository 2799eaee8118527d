"""gearjax/_cuda.py: under a GPU JAX, an installation without CUDA handlers
says so once at import and refuses GPU programs with the fix, never falling
back silently."""

import os
import subprocess
import sys
import textwrap
import warnings

import jax
import numpy as np
import pytest

import gearjax as gx
from gearjax import _cuda, _gearjax


def test_the_jax_cuda_plugin_is_read_from_pip_metadata():
    assert _cuda.jax_cuda_plugin(["no-such-distribution", "numpy"]) == f"numpy {np.__version__}"
    assert _cuda.jax_cuda_plugin(["no-such-distribution"]) is None


def test_a_gpu_jax_without_handlers_is_warned_with_the_fix():
    with pytest.warns(_cuda.CudaHandlersMissing) as warned:
        assert _cuda.warn_if_missing(False, "jax-cuda13-plugin 0.12.0")
    message = str(warned[0].message)
    assert "jax-cuda13-plugin 0.12.0" in message and "no CUDA handlers" in message
    assert "GEARJAX_CUDA=ON pip install" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not _cuda.warn_if_missing(True, "jax-cuda13-plugin 0.12.0")  # handlers built
        assert not _cuda.warn_if_missing(False, None)  # a CPU JAX


def test_import_warns_once_where_jax_has_a_cuda_plugin(tmp_path):
    # A stand-in for jax[cuda13]'s plugin: its pip metadata only.
    info = tmp_path / "jax_cuda13_plugin-0.12.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: jax-cuda13-plugin\n"
                                   "Version: 0.12.0\n")
    code = textwrap.dedent("""
        import warnings
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            import gearjax, gearjax._gearjax as native
            import gearjax.table, gearjax.sharded  # more imports: still once
        ours = [w for w in seen if "CUDA plugin" in str(w.message)]
        print(native.cuda_built, len(ours))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in [str(tmp_path), os.environ.get("PYTHONPATH", "")] if p))  # no "": the cwd
    # -P: the installed package, not a source tree in the working directory.
    run = subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout.split()
    assert out == ["True", "0"] or out == ["False", "1"], out


def _sample_exported_for_cuda():
    table = gx.Table({"x": gx.Column((2,), "float32")}, capacity=8, max_length=2)
    table.insert({"x": np.zeros((2, 2), np.float32)})

    def step(state, key):
        state, batch = table.sample(state, key, 4)
        return state, batch["x"]

    try:
        return jax.export.export(jax.jit(step), platforms=("cuda",))(
            table.state(), jax.random.key(0))
    finally:
        table.close()


@pytest.mark.skipif(_gearjax.cuda_built, reason="this build has CUDA handlers: nothing to "
                    "refuse (test_a_build_with_handlers_lowers_gpu_programs runs instead)")
def test_a_gpu_program_without_handlers_is_refused_with_the_fix():
    with pytest.raises(RuntimeError, match="a gearjax table call in a GPU program: this gearjax "
                       "has no CUDA handlers") as raised:
        _sample_exported_for_cuda()
    assert "GEARJAX_CUDA=ON pip install" in str(raised.value)


@pytest.mark.skipif(not _gearjax.cuda_built, reason="this build has no CUDA handlers "
                    "(test_a_gpu_program_without_handlers_is_refused_with_the_fix runs instead)")
def test_a_build_with_handlers_lowers_gpu_programs():
    # Lowered past gearjax's rule: only jax.export's own check of custom calls
    # (no stable serialization for them) stops it.
    with pytest.raises(ValueError, match="custom call") as raised:
        _sample_exported_for_cuda()
    assert "no CUDA handlers" not in str(raised.value)
