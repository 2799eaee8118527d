"""gearjax/_plugin.py: an installed CUDA plugin's extension becomes
gearjax._gearjax (one extension loaded, never two), and a plugin of another
version is refused at import with the command that fixes it.

The plugin here is a stand-in with the plugin's package name and metadata
whose ``_gearjax`` is this installation's own extension file loaded under the
plugin's name (the real plugin's is the same sources built with nvcc:
scripts/build_wheels.sh, tests/test_wheels.py)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gearjax
from gearjax import _gearjax

FAKE_INIT = textwrap.dedent("""
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("gearjax_cuda13_plugin._gearjax", {path!r})
    _gearjax = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = _gearjax
    spec.loader.exec_module(_gearjax)
""")


def _fake_plugin(root: Path, version: str) -> Path:
    package = root / "gearjax_cuda13_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_INIT.format(path=_gearjax.__file__))
    info = root / f"gearjax_cuda13_plugin-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: gearjax-cuda13-plugin\n"
                                   f"Version: {version}\n")
    return root


def _run(code: str, plugin_root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in [str(plugin_root), os.environ.get("PYTHONPATH", "")] if p))  # no "": the cwd
    return subprocess.run([sys.executable, "-P", "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


def test_an_installed_plugin_is_the_extension_gearjax_runs_on(tmp_path):
    run = _run("""
        import jax, numpy as np, sys
        import gearjax as gx
        from gearjax import _gearjax
        from gearjax.table import NativeTable
        assert _gearjax.__name__ == "gearjax_cuda13_plugin._gearjax", _gearjax.__name__
        assert sys.modules["gearjax._gearjax"] is _gearjax
        assert NativeTable is _gearjax.NativeTable
        # One extension loaded: no other module holds gearjax's native types.
        loaded = sorted(m for m in sys.modules if m.endswith("._gearjax"))
        assert loaded == ["gearjax._gearjax", "gearjax_cuda13_plugin._gearjax"], loaded
        assert all(m.__name__ == "gearjax_cuda13_plugin._gearjax"
                   for name, m in sys.modules.items() if name in loaded)
        t = gx.Table({"x": gx.Column((2,), "float32")}, capacity=4, max_length=2)
        t.insert({"x": np.ones((2, 2), np.float32)})
        state, batch = jax.jit(lambda s, k: t.sample(s, k, 3))(t.state(), jax.random.key(0))
        assert batch["x"].shape[0] == 3 and batch["x"].shape[-1] == 2
        print("plugin ok")
    """, _fake_plugin(tmp_path, gearjax.__version__))
    assert run.returncode == 0 and "plugin ok" in run.stdout, run.stdout + run.stderr


def test_a_plugin_of_another_version_is_refused_with_the_fix(tmp_path):
    run = _run("import gearjax", _fake_plugin(tmp_path, "0.0.1"))
    assert run.returncode != 0
    assert (f"ImportError: gearjax {gearjax.__version__} found gearjax-cuda13-plugin 0.0.1"
            in run.stderr), run.stderr
    assert f"pip install 'gearjax-cuda13-plugin=={gearjax.__version__}'" in run.stderr


def test_without_a_plugin_gearjax_runs_on_its_own_extension():
    assert _gearjax.__name__ == "gearjax._gearjax"
    assert Path(_gearjax.__file__).parent == Path(gearjax.__file__).parent


def test_the_cuda13_extra_brings_the_plugin_of_gearjax_s_version_and_jax_cuda13():
    import tomllib
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml")
                            .read_text())["project"]
    assert sorted(project["optional-dependencies"]["cuda13"]) == sorted(
        [f"gearjax-cuda13-plugin=={project['version']}", "jax[cuda13]"])
