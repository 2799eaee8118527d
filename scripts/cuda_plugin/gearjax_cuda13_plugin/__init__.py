"""gearjax's CUDA plugin for jax[cuda13]: gearjax's native extension built with
its CUDA handlers (``_gearjax``), for machines without nvcc.

``import gearjax`` finds this package, checks that its version is gearjax's
and uses its extension instead of the core wheel's (gearjax/_plugin.py). The
extension links the CUDA runtime dynamically; it is loaded here from the
``nvidia-cuda-runtime`` package that jax[cuda13] installs (as JAX's own
plugin finds its libraries), or else from the system's library path.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import sys

__version__ = importlib.metadata.version("gearjax-cuda13-plugin")
CUDART = "libcudart.so.13"


def _load_cudart() -> str:
    """Loads libcudart.so.13 (pip's nvidia/cu13/lib first); returns its path."""
    for entry in sys.path:
        candidate = os.path.join(entry or ".", "nvidia", "cu13", "lib", CUDART)
        if os.path.isfile(candidate):
            ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
            return candidate
    try:
        ctypes.CDLL(CUDART, mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise ImportError(f"gearjax-cuda13-plugin needs the CUDA 13 runtime ({CUDART}): "
                          f"pip install nvidia-cuda-runtime (jax[cuda13] installs it), or "
                          f"put a CUDA 13 toolkit's lib folder on LD_LIBRARY_PATH ({e})") from e
    return CUDART


cudart = _load_cudart()
from gearjax_cuda13_plugin import _gearjax  # noqa: E402,F401  (after its runtime)


def gpus_visible() -> int:
    """How many CUDA devices the runtime sees (0 on a machine without a GPU
    or driver)."""
    count = ctypes.c_int(0)
    runtime = ctypes.CDLL(cudart)
    if runtime.cudaGetDeviceCount(ctypes.byref(count)) != 0:
        return 0
    return count.value
