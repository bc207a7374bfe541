"""The house stays as built: the layers and the core checked by import-linter (the contract
in pyproject.toml, tests/support/import_contracts.py), every folder of the package
declared, no link in the tree, no import cycle, no private name imported across packages.

``make test`` runs ``lint-imports`` over the installed package; these tests run it over
the same tree built here (the folders placed as ``[tool.setuptools.package-dir]`` maps
them) and prove that the contract would catch a forbidden import or a package that no
layer names (on a copy with one planted)."""

from __future__ import annotations

import ast
import os
import runpy
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import grimp
import pytest
import setuptools

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIR: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
PACKAGES = ("cli", "offline", "sdk", "collector", "evaluators", "exporters")


def installed_tree(dst: Path) -> Path:
    """The package as an installer lays it out, under ``dst`` (the sources copied)."""
    for package, folder in sorted(PACKAGE_DIR.items()):
        target = dst.joinpath(*package.split("."))
        shutil.copytree(
            ROOT / folder, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            dirs_exist_ok=True,
        )  # fmt: skip
    return dst


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed_tree(tmp_path_factory.mktemp("installed"))


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tree}{os.pathsep}{ROOT / 'tests'}"}
    return subprocess.run(
        [str(LINT), str(ROOT / "pyproject.toml"), "--no-cache", "--verbose"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_contract_holds(tree: Path) -> None:
    result = lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "planted"),
    [
        ("ragpulse/record.py", "import ragpulse.cli.main"),
        ("ragpulse/safe_yaml.py", "import ragpulse.plugins"),  # a core module no list names
        (
            "ragpulse/evaluators/faithfulness/lexical.py",
            "import ragpulse.collector.evaluate.pipeline",
        ),
        ("ragpulse/sdk/current.py", "import ragpulse.collector.service"),
        # The collector's rooms: evaluation hands turns on, it never builds what takes them;
        # a one-shot read of stored traces needs an intake, not the service.
        (
            "ragpulse/collector/evaluate/pipeline.py",
            "import ragpulse.collector.conversations.stage",
        ),
        ("ragpulse/collector/stored/backfill.py", "import ragpulse.collector.service"),
    ],
)
def test_a_forbidden_import_breaks_the_contract(tmp_path: Path, module: str, planted: str) -> None:
    copy = installed_tree(tmp_path)
    target = copy / module
    target.write_text(target.read_text() + f"\n{planted}  # planted by the test\n")
    result = lint(copy)
    assert result.returncode == 1, result.stdout
    assert "BROKEN" in result.stdout and planted.split()[1] in result.stdout


def test_a_package_that_no_layer_names_breaks_the_contract(tmp_path: Path) -> None:
    copy = installed_tree(tmp_path)
    (copy / "ragpulse" / "agents").mkdir()
    (copy / "ragpulse" / "agents" / "__init__.py").write_text('"""New."""\n')
    result = lint(copy)
    assert result.returncode == 1, result.stdout
    assert "ragpulse.agents" in result.stdout


def _package_folders() -> set[str]:
    found = set()
    for package, folder in PACKAGE_DIR.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *parts)))
    return found


def _built_packages(root: Path) -> list[str]:
    """The packages setup.py gives the build, for the tree at ``root``."""
    given: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(setuptools, "setup", lambda **kwargs: given.update(kwargs))
        runpy.run_path(str(root / "setup.py"))
    return list(given["packages"])


def test_every_folder_of_the_package_is_built() -> None:
    assert set(_built_packages(ROOT)) == _package_folders()


def test_a_new_folder_needs_no_edit(tmp_path: Path) -> None:
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    for folder in set(PACKAGE_DIR.values()):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("*.py[co]"))
    (tmp_path / "evaluators" / "tone").mkdir()
    (tmp_path / "evaluators" / "tone" / "__init__.py").write_text('"""New."""\n')
    assert "ragpulse.evaluators.tone" in _built_packages(tmp_path)


def test_no_link_in_the_tree() -> None:
    links = [
        str(path.relative_to(ROOT))
        for folder in set(PACKAGE_DIR.values()) | {"tests", "docs", "bench"}
        for path in (ROOT / folder).rglob("*")
        if path.is_symlink()
    ]
    assert not links, links


def test_no_import_cycle(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tree))
    for name in [m for m in sys.modules if m == "ragpulse" or m.startswith("ragpulse.")]:
        monkeypatch.delitem(sys.modules, name)  # grimp finds the package through import
    graph = grimp.build_graph("ragpulse", cache_dir=None)
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(imported, module):
                cycles.append(f"{module} <-> {imported}")
    assert not cycles, cycles


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in PACKAGES else "core"


def test_no_private_name_is_imported_across_packages(tree: Path) -> None:
    crossings = []
    for path in sorted((tree / "ragpulse").rglob("*.py")):
        here = ".".join(path.relative_to(tree).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
                "ragpulse"
            ):
                continue
            for alias in node.names:
                name = alias.name
                private = name.startswith("_") and not name.startswith("__")
                if private and _package(node.module or "") != _package(here):
                    crossings.append(f"{here}: from {node.module} import {name}")
    assert not crossings, crossings


# The SDK's modules and the evaluators' machinery (injection_engine, models) still share
# private helpers between their own modules; every other package already keeps to this.
KEEPS_ITS_PRIVATE_NAMES = ("core", "cli", "offline", "collector", "exporters")


def test_no_module_imports_another_modules_private_names(tree: Path) -> None:
    """What two modules share has a public name (``offline/calls.py`` for what the harness
    and replay share, not ``replay._is_async``)."""
    crossings = []
    for path in sorted((tree / "ragpulse").rglob("*.py")):
        here = ".".join(path.relative_to(tree).with_suffix("").parts)
        if _package(here) not in KEEPS_ITS_PRIVATE_NAMES:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
                "ragpulse"
            ):
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and node.module not in (here, here.removesuffix(".__init__")):
                    crossings.append(f"{here}: from {node.module} import {alias.name}")
    assert not crossings, crossings
