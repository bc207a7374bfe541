"""Packages found, not listed: every folder with an ``__init__.py`` under the folders that
``[tool.setuptools.package-dir]`` in pyproject.toml maps into ``ragpulse``. A new metric
folder (``evaluators/<metric>/``) or collector room needs no edit here or there."""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
PACKAGE_DIR: dict[str, str] = tomllib.loads((HERE / "pyproject.toml").read_text())["tool"][
    "setuptools"
]["package-dir"]


def packages() -> list[str]:
    found = []
    for package, folder in PACKAGE_DIR.items():
        found.append(package)
        found += [f"{package}.{sub}" for sub in find_packages(str(HERE / folder))]
    return found


setup(packages=packages())
