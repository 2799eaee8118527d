"""Packaging contracts: the core installs and runs with jax, jaxlib and numpy
alone; gearjax's modules import one another without cycles; the version has
one source; the package ships its PEP 561 ``py.typed`` marker."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import textwrap
import tomllib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import gearjax

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gearjax"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Packages only gearjax.dt (the rl extra) may use; the core must import and run without.
EXTRA_ONLY = ("flax", "optax", "gymnasium", "h5py", "matplotlib", "orbax", "ray")


def module_names() -> dict[str, Path]:
    """Every module of the source tree by dotted name (a package by its own name)."""
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def compiled_module_names() -> set[str]:
    """The installed package's compiled extension modules (the source tree has
    none), so that ``from gearjax import _gearjax`` is not read as an import of
    ``gearjax/__init__.py``."""
    installed = Path(gearjax.__file__).parent
    return {".".join(("gearjax", *path.relative_to(installed).parent.parts,
                      path.name.partition(".")[0]))
            for suffix in EXTENSION_SUFFIXES for path in installed.rglob(f"*{suffix}")}


def imported_modules(name: str, path: Path, all_modules: set[str]) -> set[str]:
    """The modules (of ``all_modules``) that ``name``'s import statements name,
    wherever they stand: module level, in functions, under TYPE_CHECKING.
    ``from P import X`` names X when X is a module, else P."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: level 1 is this package, 2 its parent, ...
                anchor = package.rsplit(".", node.level - 1)[0]
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in all_modules else base)
    return {target for target in targets if target in all_modules and target != name}


def import_graph() -> dict[str, set[str]]:
    """gearjax's source modules, each with the source modules it imports."""
    sources = module_names()
    all_modules = set(sources) | compiled_module_names()
    return {name: imported_modules(name, path, all_modules) & set(sources)
            for name, path in sources.items()}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for successor in graph[todo.pop()] - seen:
            seen.add(successor)
            todo.append(successor)
    return seen


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str]:
    """A shortest import chain from ``start`` back to itself (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph[node]):
                if successor == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(previous[chain[-1]])
                    return [start, *reversed(chain[:-1]), start]
                if successor not in previous:
                    previous[successor] = node
                    following.append(successor)
        frontier = following
    return []


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module: each is a
    set of modules that all import one another, directly or not."""
    reach = {name: reachable(graph, name) for name in graph}
    components = {frozenset({other for other in reach[name] if name in reach[other]})
                  for name in graph if name in reach[name]}
    return sorted((set(c) for c in components), key=sorted)


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert "gearjax.batch" in graph["gearjax.table"]  # the parser sees module-level imports
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(
        " -> ".join(cycle_through(graph, min(c))) for c in found)


def test_the_core_and_its_demo_run_without_the_extras(tmp_path):
    script = textwrap.dedent(f"""
        import importlib.abc
        import sys

        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] in {EXTRA_ONLY!r}:
                    raise ImportError(f"{{name}} is an extra, not a core dependency")
                return None

        sys.meta_path.insert(0, Refuse())
        import gearjax
        import gearjax.demo
        import gearjax.actors  # imports Ray only when a feeder starts
        try:
            gearjax.actors.RayFeeder(None, list, list, actors=1)
        except ImportError as e:
            assert "gearjax[actors]" in str(e), e
        else:
            raise AssertionError("RayFeeder started without Ray")
        assert gearjax.demo.main(["--trajectories", "20", "--capacity", "30",
                                  "--max-length", "40", "--steps", "20", "--batch-size", "8",
                                  "--window", "5", "--steps-per-call", "10"]) == 0
    """)
    # Run from tmp_path, so that the installed gearjax is imported, not the source tree.
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "final loss" in result.stdout


def test_the_version_has_one_source_and_py_typed_is_installed():
    assert gearjax.__version__ == importlib.metadata.version("gearjax")
    assert gearjax.__version__ == PYPROJECT["project"]["version"]
    installed = {str(file) for file in importlib.metadata.distribution("gearjax").files}
    assert "gearjax/py.typed" in installed
    assert (Path(gearjax.__file__).parent / "py.typed").is_file()


def test_the_core_depends_on_jax_jaxlib_and_numpy_only():
    def name(requirement: str) -> str:
        return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement)[0]).lower()
    assert sorted(name(r) for r in PYPROJECT["project"]["dependencies"]) == \
        ["jax", "jaxlib", "numpy"]
