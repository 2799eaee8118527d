"""Which native extension gearjax runs on: the CUDA plugin's where it is
installed, else the one installed with gearjax.

``gearjax-cuda13-plugin`` (scripts/cuda_plugin, built by
scripts/build_wheels.sh) is gearjax's native extension built with its CUDA
handlers, for jax[cuda13] users without nvcc; the core wheel's has CPU
handlers only. Both are complete extensions of the same sources, and only one
is ever loaded: two would hold two registries of tables. This runs first in
gearjax/__init__.py, before anything imports ``gearjax._gearjax``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from types import ModuleType

PLUGIN = "gearjax_cuda13_plugin"
PLUGIN_DISTRIBUTION = "gearjax-cuda13-plugin"


def _installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def select(package: ModuleType, version: str) -> str | None:
    """Makes the plugin's extension ``gearjax._gearjax`` where the plugin is
    installed; returns the plugin's version, or None without a plugin.

    Args:
      package: the ``gearjax`` package being imported.
      version: gearjax's version, which the plugin's must equal.

    Raises:
      ImportError: the plugin's version is not gearjax's (its extension was
        built from other sources than this Python layer), or it cannot load.
    """
    if importlib.util.find_spec(PLUGIN) is None:
        return None
    plugin_version = _installed_version(PLUGIN_DISTRIBUTION)
    if plugin_version != version:
        raise ImportError(
            f"gearjax {version} found {PLUGIN_DISTRIBUTION} {plugin_version}: the plugin's "
            f"extension must be built from the same version. Install the matching one "
            f"(pip install '{PLUGIN_DISTRIBUTION}=={version}') or remove it (pip uninstall "
            f"{PLUGIN_DISTRIBUTION})")
    extension = importlib.import_module(PLUGIN)._gearjax
    sys.modules[f"{package.__name__}._gearjax"] = extension
    package._gearjax = extension
    return plugin_version
