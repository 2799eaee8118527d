"""The docs site builds with warnings as errors, and shows every notebook and
every committed result (so neither can be forgotten).

``python -m mkdocs build --strict`` runs from the repository root, as a user
would build the site (mkdocs.yml; ``pip install ".[docs]"``, which the test
extra includes). Griffe reads the API from the sources, so the build needs
neither the compiled extension nor a GPU. Without the docs tools this fails in
CI (CI=true) and is skipped, with the reason, elsewhere.
"""

from __future__ import annotations

import filecmp
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
RESULTS = sorted(p for p in (ROOT / "benchmarks" / "results").iterdir()
                 if p.is_file() and not p.name.startswith("."))
# What mkdocs.yml's plugins and theme import (module names).
DOCS_MODULES = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python",
                "mkdocs_jupyter", "griffe")
BUILD_TIMEOUT_SECONDS = 300


def _missing_modules() -> list[str]:
    missing = []
    for name in DOCS_MODULES:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except ModuleNotFoundError:  # a parent package is missing
            missing.append(name)
    return missing


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once for this module's tests; the build's time is printed."""
    missing = _missing_modules()
    if missing:
        reason = (f"the docs tools are not installed (missing {', '.join(missing)}): "
                  f'pip install ".[docs]"')
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(f"CI must build the docs, but {reason}")
        pytest.skip(reason)
    site_dir = tmp_path_factory.mktemp("site")
    # Material prints a banner about its successor on every build; it is not a warning.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mkdocs build --strict took more than {BUILD_TIMEOUT_SECONDS} s:\n"
                    f"{e.stdout or ''}{e.stderr or ''}")
    seconds = time.perf_counter() - start
    output = done.stdout + done.stderr
    if done.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed (exit {done.returncode}, {seconds:.1f} s); "
                    f"every warning is an error:\n{output}")
    print(f"\nmkdocs build --strict: {seconds:.1f} s")
    return site_dir


def _pages(site: Path) -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in site.rglob("*.html")}


def test_docs_build_with_warnings_as_errors(site):
    assert (site / "index.html").is_file()
    for page in ("getting-started", "concepts/windows", "api/gearjax", "results/files"):
        assert (site / page / "index.html").is_file(), page


def test_the_api_reference_documents_every_public_name(site):
    import ast
    tree = ast.parse((ROOT / "gearjax" / "__init__.py").read_text())
    names = next(ast.literal_eval(node.value) for node in tree.body
                 if isinstance(node, ast.Assign) and
                 any(getattr(t, "id", None) == "__all__" for t in node.targets))
    html = (site / "api" / "gearjax" / "index.html").read_text(encoding="utf-8") + \
        (site / "api" / "sharded" / "index.html").read_text(encoding="utf-8")
    undocumented = [n for n in names
                    if not re.search(rf'id="gearjax\.(sharded\.)?{re.escape(n)}"', html)]
    assert not undocumented, f"gearjax.__all__ names missing from the API reference: " \
                             f"{undocumented} (docs/api/gearjax.md)"


def test_every_notebook_is_rendered(site):
    assert NOTEBOOKS
    nav = (site / "index.html").read_text(encoding="utf-8")
    for notebook in NOTEBOOKS:
        page = site / "notebooks" / notebook.stem / "index.html"
        assert page.is_file(), f"{notebook.name} is not rendered (add it to mkdocs.yml's nav)"
        assert "jp-Notebook" in page.read_text(encoding="utf-8"), notebook.name
        assert filecmp.cmp(notebook, page.parent / notebook.name, shallow=False), \
            f"the site's download of {notebook.name} differs from the committed one"
        assert f"notebooks/{notebook.stem}/" in nav, f"{notebook.name} is not in the nav"


def test_every_committed_result_is_published_and_described(site):
    assert RESULTS
    pages = _pages(site)
    listing = site / "results" / "files" / "index.html"
    described = {path: text for path, text in pages.items() if path != listing}
    for result in RESULTS:
        published = site / "results" / "files" / result.name
        assert published.is_file(), f"benchmarks/results/{result.name} is not in the site"
        assert filecmp.cmp(result, published, shallow=False), result.name
        assert f'href="{result.name}"' in pages[listing], \
            f"{result.name} is not listed on results/files.md"
        link = re.compile(rf'(src|href)="[^"]*files/{re.escape(result.name)}"')
        assert any(link.search(text) for text in described.values()), (
            f"benchmarks/results/{result.name} is linked from no page but the generated "
            f"listing: say what it shows in docs/results/")


def test_committed_results_name_no_machine_paths():
    """Results files are for every reader: no path of the machine that made
    them (an absolute checkout, a virtual environment's site-packages)."""
    for result in sorted((ROOT / "benchmarks" / "results").rglob("*")):
        if not result.is_file() or result.suffix in (".png", ".gz"):
            continue
        text = result.read_text(errors="replace")
        for path in ("/work/", "/root/", "/home/", "/opt/", "site-packages/"):
            assert path not in text, f"{result.relative_to(ROOT)} names {path}"
