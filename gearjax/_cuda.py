"""Whether this installation has CUDA handlers, and what a GPU user is told
when it has none: never a silent CPU-only install under a GPU JAX.

The handlers come with the native extension when it was built with nvcc
(``GEARJAX_CUDA=ON`` or ``AUTO`` with nvcc found), or with gearjax's CUDA
plugin (gearjax/_plugin.py). A wheel of the core has none. Where JAX has a CUDA plugin (``jax[cuda12]`` or ``jax[cuda13]``) and
gearjax has no handlers, importing gearjax warns once (:func:`warn_if_missing`),
and a table call lowered for a GPU raises :data:`MISSING` at trace time
(:func:`refuse_gpu_programs`) instead of XLA's later "no registered
implementation" naming only the custom call.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from collections.abc import Iterable

from jax.interpreters import mlir

from gearjax._primitives import TABLE_PRIMITIVES

# JAX's CUDA plugins, as pip names them (jax[cuda12], jax[cuda13]).
JAX_CUDA_PLUGINS = ("jax-cuda13-plugin", "jax-cuda12-plugin")

MISSING = (
    "this gearjax has no CUDA handlers (its native extension was built without nvcc, and "
    "gearjax's CUDA plugin is not installed), so its tables cannot be called from a GPU "
    "program. Install the plugin (no compiler needed; scripts/build_wheels.sh builds it into "
    "dist/ until it is published):\n"
    "    pip install \"gearjax[cuda13]\" --find-links <that dist folder>\n"
    "or build gearjax with them, with a CUDA toolkit's nvcc on PATH:\n"
    "    GEARJAX_CUDA=ON pip install --force-reinstall --no-deps <a clone of gearjax>\n"
    "or run the program on CPU devices (jax.config.update('jax_platforms', 'cpu')). "
    "docs/getting-started.md (\"Installing into your own environment\") says which installs "
    "have CUDA handlers")


class CudaHandlersMissing(RuntimeWarning):
    """Warned once at import: JAX has a CUDA plugin, gearjax no CUDA handlers."""


def jax_cuda_plugin(names: Iterable[str] = JAX_CUDA_PLUGINS) -> str | None:
    """``"name version"`` of the JAX CUDA plugin installed, or None (read
    from pip's metadata: no backend is started)."""
    for name in names:
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def warn_if_missing(cuda_built: bool, plugin: str | None) -> bool:
    """Warns (CudaHandlersMissing) when ``plugin`` (see :func:`jax_cuda_plugin`)
    is installed and ``cuda_built`` is False; returns whether it warned."""
    if cuda_built or plugin is None:
        return False
    warnings.warn(f"JAX here has a CUDA plugin ({plugin}), but {MISSING}", CudaHandlersMissing,
                  stacklevel=2)
    return True


def refuse_gpu_programs() -> None:
    """Makes every table call lowered for CUDA raise RuntimeError(MISSING)
    while the program is compiled (for an extension without CUDA
    handlers)."""

    def refuse(ctx, *operands, **params):
        del ctx, operands, params
        raise RuntimeError(f"a gearjax table call in a GPU program: {MISSING}")

    for primitive in TABLE_PRIMITIVES:
        mlir.register_lowering(primitive, refuse, platform="cuda")
