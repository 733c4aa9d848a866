"""The built wheel: the repository root ships as the ``dmsgw`` package and nothing else.

The repository root *is* the package (``package-dir = {"dmsgw" = "."}``), so a forgotten
subpackage, a stray top-level module or test data leaking into the wheel are easy mistakes;
these tests build the real wheel and read its file list.

setuptools builds in the source tree (``build/``, ``*.egg-info``), so the wheel is built from a
copy of the checkout in a temporary directory: concurrent test runs never see each other's
build output and the checkout is left untouched.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PACKAGE = "dmsgw"
DIST = PYPROJECT["project"]["name"].replace("-", "_")
VERSION = PYPROJECT["project"]["version"]
DIST_INFO = f"{DIST}-{VERSION}.dist-info"

# Never part of the package: tooling, caches and build output of the checkout, and the folders
# that hold no package code.
NOT_SHIPPED = ("tests", "docs", "bench")
_COPY_IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
)


# Skipped when looking for packages: tests, hidden directories (.venv, .git, caches) and
# build output. docs/ and bench/ are searched: an __init__.py there must be a decision.
_NOT_SOURCE = {"tests", "build", "dist", "__pycache__"}


def _package_dirs() -> dict[str, Path]:
    """Every directory of the checkout holding an ``__init__.py``, by its dotted package name."""
    found: dict[str, Path] = {}
    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".") and d not in _NOT_SOURCE and not d.endswith(".egg-info")
        )
        if "__init__.py" in files:
            relative = Path(root).relative_to(REPO)
            found[".".join((PACKAGE, *relative.parts))] = relative
    return found


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    workdir = tmp_path_factory.mktemp("wheel")
    source = workdir / "src"
    shutil.copytree(REPO, source, ignore=_COPY_IGNORE, symlinks=True)
    out = workdir / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--no-cache-dir",
            "--quiet",
            "-w",
            str(out),
            str(source),  # an absolute path: a bare name would be looked up on an index
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def wheel(built: subprocess.CompletedProcess[str]) -> Iterator[zipfile.ZipFile]:
    out = Path(built.args[built.args.index("-w") + 1])
    (path,) = out.glob(f"{DIST}-{VERSION}-*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def _names(wheel: zipfile.ZipFile) -> list[str]:
    return [name for name in wheel.namelist() if not name.endswith("/")]


def test_pyproject_lists_every_package_directory_of_the_checkout() -> None:
    declared = set(PYPROJECT["tool"]["setuptools"]["packages"])
    on_disk = set(_package_dirs())
    assert on_disk - declared == set(), "package directories missing from pyproject packages"
    assert declared - on_disk == set(), "pyproject packages without an __init__.py"
    assert PYPROJECT["tool"]["setuptools"]["package-dir"] == {PACKAGE: "."}


def test_wheel_holds_only_the_dmsgw_package_and_its_metadata(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/", 1)[0] for name in _names(wheel)}
    assert tops == {PACKAGE, DIST_INFO}


def test_wheel_ships_every_module_of_every_package_under_dmsgw(wheel: zipfile.ZipFile) -> None:
    expected = set()
    for relative in _package_dirs().values():
        for module in (REPO / relative).glob("*.py"):
            expected.add("/".join((PACKAGE, *relative.parts, module.name)))
    shipped = {name for name in _names(wheel) if name.endswith(".py")}
    assert shipped == expected
    for subpackage in ("keys", "keys/ucan", "behaviors", "transport", "actors"):
        assert f"{PACKAGE}/{subpackage}/__init__.py" in shipped
    assert {f"{PACKAGE}/__init__.py", f"{PACKAGE}/__main__.py"} <= shipped


def test_wheel_leaks_no_tests_docs_bench_or_build_files(wheel: zipfile.ZipFile) -> None:
    root_files = {"pyproject.toml", "Makefile", "README.md", ".gitignore"}
    for name in _names(wheel):
        parts = name.split("/")
        assert not set(parts) & {*NOT_SHIPPED, "__pycache__", "build", ".ci", *root_files}, name
        assert not name.endswith(".pyc"), name
        assert ".egg-info" not in name, name
    vectors = REPO / "tests" / "vectors"
    shipped_basenames = {name.rsplit("/", 1)[-1] for name in _names(wheel)}
    assert not shipped_basenames & {p.name for p in vectors.iterdir()}


def test_wheel_marks_the_package_as_typed(wheel: zipfile.ZipFile) -> None:
    assert f"{PACKAGE}/py.typed" in _names(wheel)


def test_wheel_declares_the_dmsgw_console_script(wheel: zipfile.ZipFile) -> None:
    entry_points = configparser.ConfigParser()
    entry_points.read_string(wheel.read(f"{DIST_INFO}/entry_points.txt").decode())
    assert entry_points["console_scripts"]["dmsgw"] == "dmsgw.cli:main"
    assert PYPROJECT["project"]["scripts"] == {"dmsgw": "dmsgw.cli:main"}


def test_the_build_has_nothing_to_warn_about(built: subprocess.CompletedProcess[str]) -> None:
    # e.g. setuptools' "`project.license` as a TOML table is deprecated", twice per build
    assert "Warning" not in built.stdout + built.stderr, built.stdout + built.stderr


def test_wheel_declares_its_license_as_an_spdx_expression(wheel: zipfile.ZipFile) -> None:
    metadata = wheel.read(f"{DIST_INFO}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()


def test_wheel_metadata_names_the_distribution_and_top_level_package(
    wheel: zipfile.ZipFile,
) -> None:
    metadata = wheel.read(f"{DIST_INFO}/METADATA").decode()
    assert f"Name: {PYPROJECT['project']['name']}" in metadata.splitlines()
    assert f"Version: {VERSION}" in metadata.splitlines()
    if f"{DIST_INFO}/top_level.txt" in wheel.namelist():
        assert wheel.read(f"{DIST_INFO}/top_level.txt").decode().split() == [PACKAGE]
