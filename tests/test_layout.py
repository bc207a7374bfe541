"""The house stays as built: layers and the core checked by import-linter (the contracts
in pyproject.toml), no import cycle, no private name imported across packages.

``make test`` runs ``lint-imports`` too; these tests also prove that the contracts would
catch a forbidden import (on a copy of the source with one planted)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("cli", "offline", "sdk", "collector", "evaluators", "exporters")


def lint(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(pythonpath or ROOT)}
    return subprocess.run(
        [str(LINT), str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_contracts_hold() -> None:
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        ("ragpulse/record.py", "import ragpulse.cli.main", "The core imports nothing above it"),
        ("evaluators/lexical.py", "import ragpulse.collector.pipeline", "Layers"),
        ("ragpulse/sdk/current.py", "import ragpulse.collector.service", "Layers"),
    ],
)
def test_a_forbidden_import_breaks_a_contract(
    tmp_path: Path, module: str, planted: str, broken: str
) -> None:
    copy = tmp_path / "src"
    for folder in ("ragpulse", "collector", "evaluators", "exporters"):
        shutil.copytree(ROOT / folder, copy / folder, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    target = copy / module
    target.write_text(target.read_text() + f"\n{planted}  # planted by the test\n")
    result = lint(copy, copy)
    assert result.returncode == 1, result.stdout
    assert "BROKEN" in result.stdout and broken in result.stdout


def test_no_import_cycle() -> None:
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


def _modules() -> list[tuple[Path, str]]:
    """(file, module name) of every module of the package, the linked folders included."""
    found = []
    for folder, prefix in (
        ("ragpulse", "ragpulse"),
        *((f, f"ragpulse.{f}") for f in ("collector", "evaluators", "exporters")),
    ):
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            found.append((path, ".".join((prefix, *parts))))
    return found


def test_no_private_name_is_imported_across_packages() -> None:
    crossings = []
    for path, here in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
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
