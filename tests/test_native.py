"""The native core's building blocks seen from Python: the Philox4x32-10
generator that expands sampling seeds (known-answer vectors from Random123's
tests/kat_vectors), table handles, and the CUDA build's kernel architectures."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import gearjax as gx
from gearjax import _gearjax

# counter[4], key[2] -> result[4]
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter, key, expected", KNOWN_ANSWERS)
def test_philox_matches_the_published_vectors(counter, key, expected):
    assert _gearjax.philox4x32_10(counter, key) == expected


def test_philox_words_look_uniform():
    words = np.array([_gearjax.philox4x32_10((i, 0, 0, 0), (7, 9)) for i in range(4096)],
                     dtype=np.uint64).ravel()
    bits = np.unpackbits(words.astype(">u4").view(np.uint8))
    assert abs(bits.mean() - 0.5) < 0.01


def test_handles_are_unique_and_die_with_close():
    a = gx.Table({"x": gx.Column((), "float32")}, 2, 2)
    b = gx.Table({"x": gx.Column((), "float32")}, 2, 2)
    assert a.handle != b.handle
    a.close()
    a.close()  # idempotent
    assert a.closed and not b.closed
    b.close()


def test_a_cuda_build_names_its_kernel_architectures_and_checks_them():
    """The CUDA handlers refuse a GPU their kernels have no image for, naming
    the architectures built (the default list includes sm_90 and sm_100)."""
    from gearjax import _gearjax
    if not _gearjax.cuda_built:
        assert _gearjax.cuda_architectures == ""
        return
    built = _gearjax.cuda_architectures.split(",")
    assert built and all(a.isdigit() for a in built)
    if os.environ.get("GEARJAX_CUDA_ARCHITECTURES") is None:
        assert {"90", "100"} <= set(built)
    if not _gearjax.cuda_memory:  # no GPU here: nothing to run a kernel on
        assert _gearjax.cuda_kernel_problem(0).startswith("no CUDA device")


SYSTEM_SCOPED_ATOMIC = re.compile(r"\b(?:atom|red)(?:\.\w+)*\.sys\b")


def test_system_scoped_atomic_pattern_finds_what_nvcc_writes():
    assert SYSTEM_SCOPED_ATOMIC.search("\tatom.global.sys.add.u64 \t%rd404, [%rd117], %rd403;")
    assert SYSTEM_SCOPED_ATOMIC.search("\tred.sys.global.add.u32 \t[%rd1], 1;")
    assert not SYSTEM_SCOPED_ATOMIC.search("\tatom.global.add.u32 \t%r233, [%rd432], 1;")
    assert not SYSTEM_SCOPED_ATOMIC.search("\tmembar.sys;")


def test_no_kernel_uses_a_system_scoped_atomic(tmp_path):
    """A GPU on PCIe cannot do atomics on pinned host memory, where the
    kernels report to the host: the update kernel's system-scoped adds to its
    report were 444 compute-sanitizer errors on an H200 (2026-11-30). Every
    kernel source compiled to PTX (sm_90, as CI builds) has none."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc to compile the CUDA kernels to PTX (none on PATH)")
    import jax.ffi
    root = Path(__file__).resolve().parents[1] / "xla_ffi"
    sources = [p for p in sorted((root / "cuda").glob("*.cu")) if "__global__" in p.read_text()]
    assert {p.name for p in sources} >= {"update.cu", "sample.cu", "gather.cu"}
    built = subprocess.run([nvcc, "-ptx", "-std=c++17", "-arch=sm_90", f"-I{root}",
                            f"-I{jax.ffi.include_dir()}", *map(str, sources), "-odir",
                            str(tmp_path)], capture_output=True, text=True, timeout=300)
    if "Unsupported gpu architecture" in built.stderr:
        pytest.skip(f"this nvcc cannot compile for sm_90: {built.stderr.strip()[:300]}")
    assert built.returncode == 0, built.stderr[-3000:]
    for source in sources:
        ptx = (tmp_path / source.with_suffix(".ptx").name).read_text()
        assert "PriorityUpdateKernel" in ptx or source.name != "update.cu"
        found = SYSTEM_SCOPED_ATOMIC.findall(ptx)
        assert not found, (source.name, found)
