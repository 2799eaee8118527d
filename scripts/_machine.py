"""What the benchmark scripts record about the machine they ran on (shared by
scripts/bench_*.py, which import it as a sibling module)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
from pathlib import Path

# Versions every benchmark records; a script adds the packages it compares with.
PACKAGES = ("gearjax", "jax", "jaxlib", "numpy")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def cpu_caches() -> dict:
    """Cache sizes of CPU 0 from sysfs, e.g. {"L1d": "32K", "L2": "1024K", "L3": "32768K"}."""
    caches = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        caches[f"L{level}{suffix}"] = size
    return caches


def machine_info(packages: tuple[str, ...] = (), **extra) -> dict:
    """What every benchmark records about its machine: platform, CPU model and
    caches, the cores this process may use, memory, Python, the versions of
    PACKAGES and `packages`, JAX's devices and XLA_FLAGS; then `extra`, the
    script's own fields."""
    info = {"platform": platform.platform(), "cpu_model": cpu_model(),
            "cpu_caches": cpu_caches(), "cores": len(os.sched_getaffinity(0)),
            "cpu_count": os.cpu_count(),
            "total_memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            "python": platform.python_version(),
            "versions": {p: version_of(p) for p in PACKAGES + tuple(packages)},
            "xla_flags": os.environ.get("XLA_FLAGS")}
    try:
        import jax
        info["jax_devices"] = [str(d) for d in jax.devices()]
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        info["jax_devices"] = f"unavailable: {type(e).__name__}: {e}"
    return info | extra


def version_of(package: str) -> str | None:
    """The installed version of a distribution, or None where it is not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def write_results(out: str | Path, result: dict, text: str) -> Path:
    """Writes a benchmark's results as JSON to `out` and its printed report
    beside it (same name, .txt); returns the JSON file's path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".txt").write_text(text + "\n")
    return out
